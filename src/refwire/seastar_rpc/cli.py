"""``refwire serve seastar-rpc`` and ``refwire send seastar-rpc`` (call a verb)."""

from __future__ import annotations

import argparse
import logging
import struct
import sys

import attrs
import trio

from ..cliutil import (
    Commands,
    UsageError,
    add_connection_memory,
    add_frame_timeout,
    add_idle_timeout,
    frame_timeout,
    hostport,
    idle_timeout,
    max_connections,
    nonneg_float,
    open_listeners,
    positive_float,
    positive_int,
    stop_on_signal,
)
from ..drivers import listener_address
from ..logs import plural

__all__ = ["register"]

log = logging.getLogger("refwire.seastar_rpc.cli")

#: Seconds ``send seastar-rpc`` waits for a reply when no ``--timeout`` is given.
DEFAULT_REPLY_TIMEOUT = 30.0



def _compressors(text: str) -> tuple[str, ...]:
    from .compression import COMPRESSOR_NAMES

    if text.lower() == "none":
        return ()
    names = tuple(n for n in text.split(",") if n)
    for n in names:
        if n not in COMPRESSOR_NAMES:
            raise argparse.ArgumentTypeError(f"unknown compressor {n!r}; choose from {', '.join(COMPRESSOR_NAMES)} or none")
    return names


def _group(text: str) -> tuple[bytes, int | None]:
    cookie, sep, n = text.partition("=")
    if not cookie:
        raise argparse.ArgumentTypeError("a group is COOKIE or COOKIE=CONCURRENCY")
    if not sep or n in ("", "0"):
        return cookie.encode(), None
    try:
        return cookie.encode(), positive_int(n)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"group {cookie!r}: {exc}") from None


def register(cmds: Commands) -> None:
    """Add the Seastar RPC subcommands."""
    from .demo import DEMO_VERBS

    demo = ", ".join(f"{n}={v}" for n, v in DEMO_VERBS.items())
    s = cmds.serve.add_parser("seastar-rpc", help="Seastar RPC server with demo verbs and streams")
    s.add_argument("--listen", type=hostport, default=("127.0.0.1", 7000), metavar="HOST:PORT", help="address to listen on (port 0 = any free port; default 127.0.0.1:7000)")
    s.add_argument("--compress", type=_compressors, default=("LZ4", "LZ4_FRAGMENTED"), metavar="LIST", help="compressors accepted, e.g. LZ4,LZ4_FRAGMENTED (default) or none; the client's order decides")
    s.add_argument("--no-streaming", action="store_true", help="no streaming domain: no CONNECTION_ID sent, stream connections refused")
    s.add_argument("--max-memory", type=positive_int, default=16 * 1024 * 1024, metavar="BYTES", help="request memory budget; larger requests get Seastar's USER exception (default 16 MiB)")
    add_connection_memory(s, ', its streams included: a frame may take a quarter of it, its requests in flight and its unwritten replies a sixteenth each, and each of its at most 4 streams a 32nd for a message and as much for its queue')
    s.add_argument("--group", type=_group, action="append", default=[], metavar="COOKIE[=N]", help="an isolation group (cookie) with at most N concurrent handlers; repeatable")
    s.add_argument("--reject-unknown-cookie", action="store_true", help="close connections whose isolation cookie names no --group (as a throwing isolate_connection)")
    s.add_argument("--exit-after", type=positive_int, metavar="N", help="shut down after N calls")
    add_frame_timeout(s)
    add_idle_timeout(s, ", as Seastar")
    s.add_argument(
        "--negotiation-timeout",
        type=nonneg_float,
        default=30.0,
        metavar="S",
        help="close a connection whose negotiation frame has not come S seconds after accept (default 30; 0 = wait for ever, as Seastar)",
    )
    s.add_argument(
        "--max-connections",
        type=int,
        default=1024,
        metavar="N",
        help="connections served at once; one more is closed at once (default 1024; 0 = no limit)",
    )
    s.set_defaults(func=_serve)

    c = cmds.send.add_parser("seastar-rpc", help="call a Seastar RPC verb", description=f"Call VERB (a number, or a demo verb: {demo}).")
    c.add_argument("address", type=hostport, metavar="HOST:PORT", help="the Seastar RPC server")
    c.add_argument("verb", metavar="VERB", help=f"verb number or demo name ({demo})")
    c.add_argument("--int32", type=int, action="append", default=[], metavar="N", help="append an int32 (LE) to the payload; repeatable")
    c.add_argument("--hex", default="", metavar="HEX", help="append these bytes to the payload")
    c.add_argument("--text", default="", metavar="TEXT", help="append this UTF-8 text to the payload")
    c.add_argument(
        "--timeout",
        type=nonneg_float,
        metavar="S",
        help="give up on the reply after S seconds (propagated to the server); without it the client alone gives up "
        f"after {DEFAULT_REPLY_TIMEOUT:g} s (each stream message too)",
    )
    c.add_argument(
        "--connect-timeout",
        type=positive_float,
        default=10.0,
        metavar="S",
        help="give up after S seconds without a connection or without the server's negotiation reply (default 10)",
    )
    c.add_argument("--one-way", action="store_true", help="send without waiting for a reply")
    c.add_argument("--stream", action="append", default=[], metavar="MSG", help="open a stream, append its id (u64) to the payload, send MSG on it (repeatable), print what comes back")
    c.add_argument("--compress", type=_compressors, default=(), metavar="LIST", help="compressors offered, in preference order (default none)")
    c.add_argument("--cookie", metavar="COOKIE", help="isolation cookie")
    c.add_argument("--no-timeout-feature", action="store_true", help="do not offer TIMEOUT (20-byte request headers)")
    c.add_argument("--no-handler-duration", action="store_true", help="do not offer HANDLER_DURATION")
    c.add_argument("--repeat", type=positive_int, default=1, metavar="N", help="make the call N times (pipelined)")
    c.set_defaults(func=_send)


async def _serve(args: argparse.Namespace) -> int:
    from .conform_verbs import add_conformance_verbs
    from .demo import demo_registry
    from .events import CallReceived, OversizedCall
    from .frames import DEFAULT_LIMITS
    from .server import SeastarServer, ServerConfig

    if args.reject_unknown_cookie and not args.group:
        raise UsageError("--reject-unknown-cookie needs at least one --group")
    config = ServerConfig(
        limits=attrs.evolve(DEFAULT_LIMITS, max_connection_memory=args.connection_memory, max_server_memory=args.server_memory),
        max_connections=max_connections(args),
        compressors=args.compress,
        streaming=not args.no_streaming,
        max_memory=args.max_memory,
        groups=dict(args.group),
        unknown_cookie="reject" if args.reject_unknown_cookie else "default",
        frame_timeout=frame_timeout(args),
        idle_timeout=idle_timeout(args),
        negotiation_timeout=args.negotiation_timeout or None,
    )
    done = trio.Event()
    server = SeastarServer(add_conformance_verbs(demo_registry()), config=config)
    debug = log.isEnabledFor(logging.DEBUG)  # -vv: a line per call
    if args.exit_after or debug:

        def count(conn_id: int, call: CallReceived | OversizedCall, now: float) -> None:
            if debug:
                size = len(call.payload) if isinstance(call, CallReceived) else call.length
                log.debug(
                    "seastar-rpc: connection %d: verb %d (call %d, %s) answered",
                    conn_id,
                    call.verb,
                    call.msg_id,
                    plural(size, "byte"),
                )
            if args.exit_after and server.stats["calls"] >= args.exit_after:
                done.set()

        server.on_reply = count
    host, port = args.listen
    listeners = await open_listeners(host, port)
    async with trio.open_nursery() as nursery:
        await nursery.start(stop_on_signal, done)
        await nursery.start(server.serve, listeners)
        for lst in listeners:
            print(f"listening on {listener_address(lst)}", file=sys.stderr, flush=True)
        logging.getLogger("refwire").info("%s", server.budget.describe())  # --server-memory, -v shows it
        await done.wait()
        await server.shutdown(grace=5.0)
        nursery.cancel_scope.cancel()
    st = server.stats
    print(
        f"served {plural(st['calls'], 'call')} on {plural(st['connections'], 'connection')} "
        f"({plural(st['stream_connections'], 'stream')}, {plural(st['protocol_errors'], 'protocol error')})",
        file=sys.stderr,
    )
    return 0


def _verb(text: str) -> int:
    from .demo import DEMO_VERBS

    if text in DEMO_VERBS:
        return DEMO_VERBS[text]
    try:
        v = int(text, 0)
    except ValueError:
        raise UsageError(f"verb {text!r} is neither a number nor a demo verb ({', '.join(DEMO_VERBS)})") from None
    if not 0 <= v < 2**64:
        raise UsageError("a verb is a u64")
    return v


async def _send(args: argparse.Namespace) -> int:
    from .client import ClientConfig, RpcError, SeastarClient

    verb = _verb(args.verb)
    try:
        payload = b"".join(struct.pack("<i", n) for n in args.int32) + bytes.fromhex(args.hex) + args.text.encode()
    except (ValueError, struct.error) as exc:
        raise UsageError(f"bad payload: {exc}") from None
    config = ClientConfig(
        compressors=args.compress,
        timeout=not args.no_timeout_feature,
        handler_duration=not args.no_handler_duration,
        isolation=args.cookie.encode() if args.cookie else None,
        connect_timeout=args.connect_timeout,
        negotiation_timeout=args.connect_timeout,
        reply_timeout=DEFAULT_REPLY_TIMEOUT,
    )
    host, port = args.address
    async with SeastarClient.connect_tcp(host, port, config=config) as client:
        print(f"connected: compressor={client.compressor or 'none'} connection_id="
              f"{'none' if client.connection_id is None else hex(client.connection_id)}", file=sys.stderr)
        stream = None
        if args.stream:
            stream = await client.open_stream()
            payload += stream.id_bytes()
        if args.one_way:
            for _ in range(args.repeat):
                mid = await client.call_one_way(verb, payload, timeout=args.timeout)
            print(f"sent one-way verb {verb}{f' {args.repeat} times' if args.repeat > 1 else ''} (last msg id {mid})", file=sys.stderr)
            return 0
        replies: list[bytes] = []
        errors: list[RpcError] = []

        async def one() -> None:
            try:
                replies.append(await client.call(verb, payload, timeout=args.timeout))
            except RpcError as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            for _ in range(args.repeat):
                nursery.start_soon(one)
        if errors:
            more = f" ({len(errors)} of {plural(args.repeat, 'call')} failed)" if args.repeat > 1 else ""
            print(f"refwire: {errors[0]}{more}", file=sys.stderr)
            return 1
        if args.repeat > 1:
            print(plural(len(replies), "reply", "replies"), file=sys.stderr)
        for r in replies[:1]:
            extra = f" (int32 {struct.unpack_from('<i', r)[0]})" if len(r) == 4 else ""
            print(f"reply {len(r)} bytes: {r.hex()}{extra}")
        if stream is not None:
            for m in args.stream:
                await stream.send(m.encode())
            await stream.close()
            wait = args.timeout or DEFAULT_REPLY_TIMEOUT
            while True:
                with trio.move_on_after(wait):
                    msg = await stream.receive()
                    if msg is None:
                        break
                    print(f"stream: {msg.decode('utf-8', 'replace')}")
                    continue
                print(f"refwire: no stream message from {host}:{port} in {wait:g} s", file=sys.stderr)
                return 1
    return 0
