"""``refwire serve lumberjack`` and ``refwire send lumberjack``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import AsyncIterator
from typing import Any, TextIO, TypeVar

import orjson
import trio

from ..cliutil import (
    Commands,
    UsageError,
    add_connection_memory,
    add_frame_timeout,
    frame_timeout,
    hostport,
    max_connections,
    nonneg_float,
    open_listeners,
    positive_int,
    stop_on_signal,
)
from ..drivers import client_ssl_context, listener_address, server_ssl_context
from ..logs import plural
from ..transport import stdin_lines

__all__ = ["register"]

log = logging.getLogger("refwire.lumberjack.cli")


def register(cmds: Commands) -> None:
    """Add the Lumberjack subcommands."""
    serve_sub = cmds.serve
    send_sub = cmds.send
    s = serve_sub.add_parser("lumberjack", help="Lumberjack v1/v2 server (Beats/Logstash)")
    s.add_argument("--listen", type=hostport, default=("127.0.0.1", 5044), metavar="HOST:PORT", help="address to listen on (port 0 = any free port; default 127.0.0.1:5044)")
    s.add_argument("--out", metavar="FILE", help="write each event as a JSON line here (default: stdout)")
    s.add_argument("--tls-cert", metavar="PEM", help="serve TLS with this certificate chain")
    s.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert (if not in the same file)")
    s.add_argument("--tls-client-ca", metavar="PEM", help="require client certificates signed by this CA")
    s.add_argument("--ack-mode", choices=("last-seq", "count"), default="last-seq", help="ack with the batch's last sequence number (Logstash, default) or its event count (go-lumber)")
    s.add_argument("--keepalive", type=nonneg_float, default=5.0, metavar="S", help="send A 0 every S seconds while a batch is pending (0 = never; default 5)")
    s.add_argument("--keepalive-v2", action="store_true", help="send keepalives as '2A' even on v1 connections (as Logstash does)")
    s.add_argument("--idle-timeout", type=nonneg_float, default=60.0, metavar="S", help="close connections idle for S seconds (0 = never; default 60)")
    s.add_argument("--batch-timeout", type=nonneg_float, default=30.0, metavar="S", help="close connections that stall S seconds inside a batch (0 = never; default 30, as go-lumber)")
    s.add_argument("--max-window", type=positive_int, default=10_000, metavar="N", help="largest W accepted (default 10000, as go-lumber)")
    s.add_argument(
        "--max-batch-bytes",
        type=positive_int,
        default=128 << 20,
        metavar="N",
        help="most bytes of events a connection holds for the batch it receives (default 128 MiB)",
    )
    add_connection_memory(s, ": a frame, and a batch's events with those of the batches awaiting their ack, may take a quarter of it each (an event costs about 4x its bytes)")
    s.add_argument("--no-validate-json", action="store_true", help="pass J payloads on unparsed (faster; no JSON check)")
    s.add_argument("--accept-mixed-versions", action="store_true", help="accept frames whose version byte differs from the connection's (as Logstash)")
    s.add_argument(
        "--ack-delay",
        type=nonneg_float,
        default=0.0,
        metavar="S",
        help="the application holds each batch S seconds (after writing its events) before it is acked; "
        "keepalives go out meanwhile (default 0; for `refwire conform lumberjack --holds-batches S`)",
    )
    s.add_argument("--exit-after", type=positive_int, metavar="N", help="shut down after N events")
    s.add_argument(
        "--metadata",
        action="store_true",
        help="add an @metadata object to each line: ip_address and tls_peer as Logstash's beats input names them, "
        "plus refwire.version, refwire.seq and refwire.connection",
    )

    add_frame_timeout(s)
    s.add_argument(
        "--max-connections",
        type=int,
        default=1024,
        metavar="N",
        help="connections served at once; one more is closed at once (default 1024; 0 = no limit)",
    )
    s.set_defaults(func=_serve_lumberjack)

    c = send_sub.add_parser("lumberjack", help="send events to a Lumberjack server")
    c.add_argument("address", type=hostport, metavar="HOST:PORT", help="the Lumberjack server (e.g. Logstash's Beats input)")
    c.add_argument("--count", type=positive_int, metavar="N", help="send N generated events instead of JSON lines from stdin")
    c.add_argument("--window", type=positive_int, default=2048, metavar="N", help="events per window (default 2048; at most --max-window)")
    c.add_argument(
        "--max-window",
        type=positive_int,
        default=10_000,
        metavar="N",
        help="largest --window allowed (default 10000, the limit of go-lumber and Logstash; raising it warns once)",
    )
    c.add_argument(
        "--linger",
        type=nonneg_float,
        default=0.2,
        metavar="S",
        help="stdin: send a window once it is full or S seconds after its first line arrived (default 0.2), "
        "so `tail -f app.log | refwire send lumberjack ...` ships lines as they come",
    )
    c.add_argument(
        "--ack-mode",
        choices=("last-seq", "count"),
        default="last-seq",
        help="read acks as the last sequence number (Logstash, refwire; default) or as an event count (go-lumber)",
    )
    c.add_argument("--compression", type=int, choices=range(10), default=3, metavar="0-9", help="zlib level of the C frame (0 = plain frames; default 3)")
    c.add_argument("--protocol-version", "--lj-version", dest="lj_version", type=int, choices=(1, 2), default=2, help="1 (D frames) or 2 (J frames, default)")
    c.add_argument("--sequence", choices=("window", "running"), default="window", help="number events 1..n per window (default) or with a running u32 counter")
    c.add_argument("--first-seq", type=int, default=1, metavar="N", help="first sequence number with --sequence running")
    c.add_argument("--ack-timeout", type=nonneg_float, default=30.0, metavar="S", help="reconnect after S seconds without an ack or keepalive (default 30)")
    c.add_argument(
        "--connect-timeout",
        type=nonneg_float,
        default=10.0,
        metavar="S",
        help="give up on a connection (and its TLS handshake) after S seconds (default 10)",
    )
    c.add_argument("--max-attempts", type=positive_int, default=5, metavar="N", help="give up on a window after N failed attempts (default 5)")
    c.add_argument("--tls", action="store_true", help="connect with TLS (implied by the other --tls options)")
    c.add_argument("--tls-ca", metavar="PEM", help="trust this CA (default: the system store)")
    c.add_argument("--tls-cert", metavar="PEM", help="present this client certificate")
    c.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    c.add_argument("--tls-no-verify", action="store_true", help="do not verify the server certificate")
    c.add_argument("--server-name", metavar="NAME", help="TLS server name (default: HOST)")

    c.set_defaults(func=_send_lumberjack)


def _write_event(out: TextIO, event: Any) -> None:
    payload = getattr(event, "payload", None)
    if payload is not None:
        line = payload.decode("utf-8", "replace")
        if "\n" in line or "\r" in line:
            line = json.dumps(json.loads(line), separators=(",", ":"), ensure_ascii=False)
    else:
        line = json.dumps(event.fields(), separators=(",", ":"), ensure_ascii=False)
    out.write(line + "\n")


def _metadata(info: Any) -> dict[str, Any]:
    """``@metadata`` as Logstash's beats input fills it (spec §6.1): the peer's
    ``ip_address`` and, over TLS, ``tls_peer``."""
    meta: dict[str, Any] = {"ip_address": info.ip_address}
    tls = info.tls_peer()
    if tls is not None:
        meta["tls_peer"] = tls
    return meta


def _write_with_metadata(out: TextIO, event: Any, meta: dict[str, Any], version: int, connection: int) -> None:
    try:
        doc = event.fields()
    except ValueError:  # --no-validate-json let a payload that is not JSON through
        doc = None
    if not isinstance(doc, dict):
        doc = {"message": getattr(event, "payload", b"").decode("utf-8", "replace")}
    doc["@metadata"] = {**meta, "refwire": {"version": chr(version), "seq": event.seq, "connection": connection}}
    out.write(json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n")


async def _serve_lumberjack(args: argparse.Namespace) -> int:
    import attrs

    from . import DEFAULT_LIMITS, Batch
    from .server import ConnectionInfo, LumberjackServer, ServerConfig

    ssl_ctx = None
    if args.tls_cert:
        ssl_ctx = server_ssl_context(args.tls_cert, args.tls_key, client_ca=args.tls_client_ca)
    elif args.tls_key or args.tls_client_ca:
        raise UsageError("--tls-key and --tls-client-ca need --tls-cert")
    out: TextIO = open(args.out, "a", encoding="utf-8") if args.out else sys.stdout
    received = 0
    done = trio.Event()

    async def handler(batch: Batch, info: ConnectionInfo) -> None:
        nonlocal received
        if args.metadata:
            meta = _metadata(info)
            for ev in batch.events:
                _write_with_metadata(out, ev, meta, batch.version, info.id)
        else:
            for ev in batch.events:
                _write_event(out, ev)
        out.flush()
        received += len(batch.events)
        log.debug("lumberjack: connection %d (%s): batch of %s", info.id, info.peer, plural(len(batch.events), "event"))
        if args.exit_after and received >= args.exit_after:
            done.set()
        if args.ack_delay:
            await trio.sleep(args.ack_delay)

    config = ServerConfig(
        max_connections=max_connections(args),
        limits=attrs.evolve(
            DEFAULT_LIMITS,
            max_window=args.max_window,
            max_batch_bytes=args.max_batch_bytes,
            max_connection_memory=args.connection_memory, max_server_memory=args.server_memory,
        ),
        validate_json=not args.no_validate_json,
        ack_mode=args.ack_mode,
        keepalive_interval=args.keepalive or None,
        keepalive_version="v2" if args.keepalive_v2 else "connection",
        idle_timeout=args.idle_timeout or None,
        batch_timeout=args.batch_timeout or None,
        accept_mixed_versions=args.accept_mixed_versions,
        frame_timeout=frame_timeout(args),
    )
    server = LumberjackServer(handler, config=config, ssl_context=ssl_ctx)
    host, port = args.listen
    listeners = await open_listeners(host, port)
    try:
        async with trio.open_nursery() as nursery:

            # The signal handler is in place before the address is announced.
            await nursery.start(stop_on_signal, done)
            await nursery.start(server.serve, listeners)
            for lst in listeners:
                print(f"listening on {listener_address(lst)}", file=sys.stderr, flush=True)
            logging.getLogger("refwire").info("%s", server.budget.describe())  # --server-memory, -v shows it
            await done.wait()
            await server.shutdown(grace=5.0)
            nursery.cancel_scope.cancel()
    finally:
        if out is not sys.stdout:
            out.close()
    print(f"received {plural(received, 'event')} on {plural(server.stats['connections'], 'connection')}", file=sys.stderr)
    return 0




def _parse_line(n: int, line: str) -> dict[str, Any] | None:
    """One stdin line as an event (None for a blank line)."""
    line = line.strip()
    if not line:
        return None
    try:
        # Strict RFC 8259 (orjson), as Logstash parses: NaN and Infinity are
        # refused, never turned into something else on the way (§4).
        doc = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"stdin line {n} is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"stdin line {n} is not a JSON object")
    return doc


async def _read_stdin(out: trio.MemorySendChannel[dict[str, Any]], v1: bool, bad: list[UsageError]) -> None:
    """Parse stdin line by line as it arrives (a thread reads; the bounded
    channel holds the reader back while the server is slow).  A bad line ends
    the input there (noted in ``bad``): the lines before it are still sent."""
    warned = not v1
    n = 0
    async with out:
        async for raw in stdin_lines():  # (Ctrl-C ends the wait for stdin at once)
            line = raw.decode("utf-8", "replace")
            n += 1
            try:
                doc = _parse_line(n, line)
            except UsageError as exc:
                bad.append(exc)
                return
            if doc is None:
                continue
            if not warned:
                warned = _warn_v1_strings([doc], n)
            await out.send(doc)


async def _windows(events: trio.MemoryReceiveChannel[dict[str, Any]], size: int, linger: float) -> AsyncIterator[list[dict[str, Any]]]:
    """Windows of stdin events: full ones, or what came within ``linger`` s of a window's first event."""
    async with events:
        while True:
            try:
                batch = [await events.receive()]
            except trio.EndOfChannel:
                return
            with trio.move_on_after(linger):
                while len(batch) < size:
                    try:
                        batch.append(await events.receive())
                    except trio.EndOfChannel:
                        break
            yield batch


def _warn_v1_strings(events: list[Any], first: int = 1) -> bool:
    """v1 ``D`` frames carry strings only (spec §2.2): say once, on stderr, that
    other values go as their JSON text -- never silently.  True once said."""
    for n, event in enumerate(events, first):
        for key, value in event.items() if isinstance(event, dict) else ():
            if not isinstance(value, str):
                print(
                    f"refwire: protocol version 1 sends every value as a string: non-string values go as their JSON text "
                    f"(first: event {n}, key {key!r}: {json.dumps(value)} becomes the string {json.dumps(json.dumps(value))})",
                    file=sys.stderr,
                )
                return True
    return False


E = TypeVar("E", bound=BaseException)


def _first(exc: BaseException, kind: type[E]) -> E | None:
    """The first ``kind`` in ``exc`` or, nested, in its exception groups."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for e in exc.exceptions:
            found = _first(e, kind)
            if found is not None:
                return found
    return None


async def _send_lumberjack(args: argparse.Namespace) -> int:
    """``refwire send lumberjack``: ``--count`` generated events, or JSON lines
    from stdin sent as they arrive (a window closes when full or ``--linger``
    seconds after its first line)."""
    import attrs

    from .client import ClientConfig, LumberjackClient, SendFailed
    from .frames import DEFAULT_LIMITS

    if args.max_window > 10_000:
        print(
            f"refwire: --max-window {args.max_window} is above 10000: go-lumber and Logstash refuse such windows",
            file=sys.stderr,
        )
    if args.window > args.max_window:
        raise UsageError(f"--window {args.window} is above --max-window {args.max_window} (raise --max-window to allow it)")
    tls = args.tls or args.tls_ca or args.tls_cert or args.tls_no_verify
    ctx = (
        client_ssl_context(args.tls_ca, certfile=args.tls_cert, keyfile=args.tls_key, verify=not args.tls_no_verify)
        if tls
        else None
    )
    if not 1 <= args.first_seq <= 0xFFFFFFFF:
        raise UsageError("--first-seq must be 1..4294967295")
    config = ClientConfig(
        version=0x30 + args.lj_version,
        window_size=args.window,
        compression_level=args.compression,
        sequence=args.sequence,
        first_seq=args.first_seq,
        ack_timeout=args.ack_timeout or None,
        ack_interpretation="count" if args.ack_mode == "count" else "seq",
        limits=attrs.evolve(DEFAULT_LIMITS, max_window=args.max_window),
        max_attempts=args.max_attempts,
        retry_protocol_errors=False,
    )
    host, port = args.address
    client = LumberjackClient.connect_tcp(
        host, port, ssl_context=ctx, server_hostname=args.server_name, config=config, connect_timeout=args.connect_timeout
    )
    t0 = time.perf_counter()
    sent = 0
    try:
        async with client:
            if args.count:
                events: list[Any] = [{"message": f"event {i}", "seq": i} for i in range(args.count)]
                if args.lj_version == 1:
                    _warn_v1_strings(events)
                await client.send(events)
                sent = len(events)
            else:
                send, receive = trio.open_memory_channel[dict[str, Any]](2 * args.window)
                bad: list[UsageError] = []
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_read_stdin, send, args.lj_version == 1, bad)
                    async for batch in _windows(receive, args.window, args.linger):
                        await client.send(batch)
                        sent += len(batch)
                if bad:
                    raise UsageError(f"{bad[0]} (the {plural(sent, 'event')} before it were sent and acked)")
    except (SendFailed, BaseExceptionGroup) as exc:
        failed = _first(exc, SendFailed)
        if failed is not None:
            print(f"refwire: {failed} ({sent + failed.acked} acked, {len(failed.unacked)} not)", file=sys.stderr)
            return 1
        raise
    if not sent:
        print("nothing to send", file=sys.stderr)
        return 0
    dt = time.perf_counter() - t0
    st = client.stats
    print(
        f"sent {plural(sent, 'event')}, all acked, in {dt:.3f}s ({sent / dt:.0f} events/s; "
        f"{plural(st['windows'], 'window')}, {plural(st['reconnects'], 'reconnect')})",
        file=sys.stderr,
    )
    return 0
