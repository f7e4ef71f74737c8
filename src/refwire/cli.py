"""The ``refwire`` command.

    refwire serve lumberjack --listen 127.0.0.1:5044 [--out FILE] [TLS options]
    refwire send lumberjack HOST:PORT [--count N | JSON lines on stdin] [options]
    refwire sim [lumberjack|all] [--seeds N | --seed S] [--shrink]

Every ``serve`` prints the address it listens on (``listening on HOST:PORT``)
to stderr as soon as it accepts connections; port 0 picks a free port.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

import trio

from .drivers import client_ssl_context, listener_address, parse_hostport, server_ssl_context
from .errors import RefwireError

__all__ = ["main"]

PROTOCOLS_WITH_SIM = ("lumberjack",)


class UsageError(Exception):
    """A bad command-line argument (exit status 2)."""


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be at least 1")
    return v


def _nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{v} must not be negative")
    return v


def _hostport(text: str) -> tuple[str, int]:
    try:
        return parse_hostport(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="refwire", description="Reference implementations of binary stream protocols, on trio.")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output (repeat for debug)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    # serve ---------------------------------------------------------------
    serve = sub.add_parser("serve", help="run a server")
    serve_sub = serve.add_subparsers(dest="protocol", metavar="PROTOCOL")
    s = serve_sub.add_parser("lumberjack", help="Lumberjack v1/v2 server (Beats/Logstash)")
    s.add_argument("--listen", type=_hostport, default=("127.0.0.1", 5044), metavar="HOST:PORT", help="address to listen on (port 0 = any free port; default 127.0.0.1:5044)")
    s.add_argument("--out", metavar="FILE", help="write each event as a JSON line here (default: stdout)")
    s.add_argument("--tls-cert", metavar="PEM", help="serve TLS with this certificate chain")
    s.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert (if not in the same file)")
    s.add_argument("--tls-client-ca", metavar="PEM", help="require client certificates signed by this CA")
    s.add_argument("--ack-mode", choices=("last-seq", "count"), default="last-seq", help="ack with the batch's last sequence number (Logstash, default) or its event count (go-lumber)")
    s.add_argument("--keepalive", type=_nonneg_float, default=5.0, metavar="S", help="send A 0 every S seconds while a batch is pending (0 = never; default 5)")
    s.add_argument("--keepalive-v2", action="store_true", help="send keepalives as '2A' even on v1 connections (as Logstash does)")
    s.add_argument("--idle-timeout", type=_nonneg_float, default=60.0, metavar="S", help="close connections idle for S seconds (0 = never; default 60)")
    s.add_argument("--batch-timeout", type=_nonneg_float, default=30.0, metavar="S", help="close connections that stall S seconds inside a batch (0 = never; default 30, as go-lumber)")
    s.add_argument("--max-window", type=_positive_int, default=10_000, metavar="N", help="largest W accepted (default 10000, as go-lumber)")
    s.add_argument("--no-validate-json", action="store_true", help="pass J payloads on unparsed (faster; no JSON check)")
    s.add_argument("--accept-mixed-versions", action="store_true", help="accept frames whose version byte differs from the connection's (as Logstash)")
    s.add_argument("--exit-after", type=_positive_int, metavar="N", help="shut down after N events")

    # send ----------------------------------------------------------------
    send = sub.add_parser("send", help="send data to a server")
    send_sub = send.add_subparsers(dest="protocol", metavar="PROTOCOL")
    c = send_sub.add_parser("lumberjack", help="send events to a Lumberjack server")
    c.add_argument("address", type=_hostport, metavar="HOST:PORT")
    c.add_argument("--count", type=_positive_int, metavar="N", help="send N generated events instead of JSON lines from stdin")
    c.add_argument("--window", type=_positive_int, default=2048, metavar="N", help="events per window (default 2048)")
    c.add_argument("--compression", type=int, choices=range(10), default=3, metavar="0-9", help="zlib level of the C frame (0 = plain frames; default 3)")
    c.add_argument("--protocol-version", "--lj-version", dest="lj_version", type=int, choices=(1, 2), default=2, help="1 (D frames) or 2 (J frames, default)")
    c.add_argument("--sequence", choices=("window", "running"), default="window", help="number events 1..n per window (default) or with a running u32 counter")
    c.add_argument("--first-seq", type=int, default=1, metavar="N", help="first sequence number with --sequence running")
    c.add_argument("--ack-timeout", type=_nonneg_float, default=30.0, metavar="S", help="reconnect after S seconds without an ack or keepalive (default 30)")
    c.add_argument("--max-attempts", type=_positive_int, default=5, metavar="N", help="give up on a window after N failed attempts (default 5)")
    c.add_argument("--tls", action="store_true", help="connect with TLS (implied by the other --tls options)")
    c.add_argument("--tls-ca", metavar="PEM", help="trust this CA (default: the system store)")
    c.add_argument("--tls-cert", metavar="PEM", help="present this client certificate")
    c.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    c.add_argument("--tls-no-verify", action="store_true", help="do not verify the server certificate")
    c.add_argument("--server-name", metavar="NAME", help="TLS server name (default: HOST)")

    # sim -----------------------------------------------------------------
    sim = sub.add_parser("sim", help="run deterministic simulations")
    sim.add_argument("protocol", nargs="?", default="all", help=f"one of: {', '.join(PROTOCOLS_WITH_SIM)}, or all (default)")
    sim.add_argument("--seeds", type=_positive_int, default=20, metavar="N", help="run N seeds (default 20)")
    sim.add_argument("--first-seed", type=int, default=0, metavar="K", help="first seed of the batch (default 0)")
    sim.add_argument("--seed", type=int, metavar="S", help="replay this one seed")
    sim.add_argument("--knobs", metavar="JSON", help='override fault knobs / workload: {"faults": {...}, "workload": {...}}')
    sim.add_argument("--shrink", action="store_true", help="shrink every failing seed and print its minimal replay command")
    sim.add_argument("--json", action="store_true", help="print one JSON object per run instead of text")
    sim.add_argument("--trace", action="store_true", help="print the last trace lines of failing runs")
    return p


# --------------------------------------------------------------------------- serve


def _write_event(out: TextIO, event: Any) -> None:
    payload = getattr(event, "payload", None)
    if payload is not None:
        line = payload.decode("utf-8", "replace")
        if "\n" in line or "\r" in line:
            line = json.dumps(json.loads(line), separators=(",", ":"), ensure_ascii=False)
    else:
        line = json.dumps(event.fields(), separators=(",", ":"), ensure_ascii=False)
    out.write(line + "\n")


async def _serve_lumberjack(args: argparse.Namespace) -> int:
    import attrs

    from .lumberjack import DEFAULT_LIMITS, Batch
    from .lumberjack.server import ConnectionInfo, LumberjackServer, ServerConfig

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
        for ev in batch.events:
            _write_event(out, ev)
        out.flush()
        received += len(batch.events)
        if args.exit_after and received >= args.exit_after:
            done.set()

    config = ServerConfig(
        limits=attrs.evolve(DEFAULT_LIMITS, max_window=args.max_window),
        validate_json=not args.no_validate_json,
        ack_mode=args.ack_mode,
        keepalive_interval=args.keepalive or None,
        keepalive_version="v2" if args.keepalive_v2 else "connection",
        idle_timeout=args.idle_timeout or None,
        batch_timeout=args.batch_timeout or None,
        accept_mixed_versions=args.accept_mixed_versions,
    )
    server = LumberjackServer(handler, config=config, ssl_context=ssl_ctx)
    host, port = args.listen
    # Listen before any nursery exists, so a busy port is a plain usage error.
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        async with trio.open_nursery() as nursery:

            async def stop_on_signal(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
                with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    task_status.started()
                    async for _ in signals:
                        done.set()
                        return

            # The signal handler is in place before the address is announced.
            await nursery.start(stop_on_signal)
            await nursery.start(server.serve, listeners)
            for lst in listeners:
                print(f"listening on {listener_address(lst)}", file=sys.stderr, flush=True)
            await done.wait()
            await server.shutdown(grace=5.0)
            nursery.cancel_scope.cancel()
    finally:
        if out is not sys.stdout:
            out.close()
    print(f"received {received} events on {server.stats['connections']} connections", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- send


def _read_events(stream: TextIO) -> list[Any]:
    events = []
    for n, line in enumerate(stream, 1):
        line = line.strip()
        if not line:
            continue
        try:
            doc = json.loads(line)
        except ValueError as exc:
            raise UsageError(f"stdin line {n} is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise UsageError(f"stdin line {n} is not a JSON object")
        events.append(doc)
    return events


async def _send_lumberjack(args: argparse.Namespace) -> int:
    from .lumberjack.client import ClientConfig, LumberjackClient, SendFailed

    if args.count:
        events: list[Any] = [{"message": f"event {i}", "seq": i} for i in range(args.count)]
    else:
        events = _read_events(sys.stdin)
    if not events:
        print("nothing to send", file=sys.stderr)
        return 0
    if args.window > 10_000:
        raise UsageError("--window above 10000 is refused by go-lumber-based servers; use at most 10000")
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
        max_attempts=args.max_attempts,
    )
    host, port = args.address
    client = LumberjackClient.connect_tcp(host, port, ssl_context=ctx, server_hostname=args.server_name, config=config)
    t0 = time.perf_counter()
    try:
        async with client:
            await client.send(events)
    except SendFailed as exc:
        print(f"refwire: {exc} ({exc.acked} acked, {len(exc.unacked)} not)", file=sys.stderr)
        return 1
    dt = time.perf_counter() - t0
    st = client.stats
    print(
        f"sent {len(events)} events, all acked, in {dt:.3f}s ({len(events) / dt:.0f} events/s; "
        f"{st['windows']} windows, {st['reconnects']} reconnects)",
        file=sys.stderr,
    )
    return 0


# --------------------------------------------------------------------------- sim


def _sim(args: argparse.Namespace) -> int:
    from refwire.sim.faults import Faults
    from refwire.sim.runner import run_seed, shrink

    protocols = list(PROTOCOLS_WITH_SIM) if args.protocol == "all" else [args.protocol]
    for proto in protocols:
        if proto not in PROTOCOLS_WITH_SIM:
            raise UsageError(f"no simulation for {proto!r}; choose one of: {', '.join(PROTOCOLS_WITH_SIM)}, all")
    faults = None
    workload = None
    if args.knobs:
        try:
            knobs = json.loads(args.knobs)
            if "faults" in knobs:
                faults = Faults.from_dict(knobs["faults"])
            workload = knobs.get("workload")
        except (ValueError, TypeError, KeyError) as exc:
            raise UsageError(f"--knobs is not valid: {exc}") from None
    seeds = [args.seed] if args.seed is not None else list(range(args.first_seed, args.first_seed + args.seeds))
    failures = []
    total = 0
    t0 = time.perf_counter()
    for proto in protocols:
        for seed in seeds:
            r = run_seed(proto, seed, faults=faults, workload=workload)
            total += 1
            if args.json:
                print(json.dumps(r.to_row(), sort_keys=True), flush=True)
            else:
                status = "ok  " if r.ok else "FAIL"
                print(
                    f"{status} {proto} seed={seed} outcome={r.outcome}{':' + r.violation if r.violation else ''} "
                    f"trace={r.trace_hash} t={r.sim_time:.1f}s events={r.counts.get('events_total', 0)} "
                    f"deliveries={r.counts.get('deliveries', 0)} reconnects={r.counts.get('client_reconnects', 0)}",
                    flush=True,
                )
                print(f"     knobs: {Faults.from_dict(r.faults).banner() or 'no faults'}", flush=True)
            if not r.ok:
                failures.append(r)
                if not args.json:
                    print(f"     {r.detail}")
                    print(f"     replay: {r.replay()}")
                    if args.trace:
                        for line in r.trace_tail:
                            print(f"       | {line}")
                if args.shrink:
                    small = shrink(r, log=(None if args.json else lambda m: print(m, file=sys.stderr)))
                    print(f"     shrunk: {small.replay()}")
    dt = time.perf_counter() - t0
    print(f"{total} runs, {total - len(failures)} passed, {len(failures)} failed ({dt:.1f}s)", file=sys.stderr if args.json else sys.stdout)
    return 1 if failures else 0


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        if args.command is None:
            parser.print_help()
            return 2
        if args.command == "sim":
            return _sim(args)
        if args.protocol is None:
            parser.parse_args([args.command, "--help"])
            return 2
        if args.command == "serve":
            return trio.run(_serve_lumberjack, args)
        if args.command == "send":
            return trio.run(_send_lumberjack, args)
    except UsageError as exc:
        print(f"refwire: {exc}", file=sys.stderr)
        return 2
    except (OSError, RefwireError) as exc:
        print(f"refwire: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
