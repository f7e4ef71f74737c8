"""``refwire chaos PROTOCOL --listen HOST:PORT --upstream HOST:PORT [--schedule FILE] [--control HOST:PORT]``.

Runs the fault proxy until interrupted (Ctrl-C or SIGTERM); prints the seed
and the address it listens on, and, at the end, how many frames it saw and how
many actions it took.  ``--record FILE.jsonl`` keeps every decision;
``--pcap FILE`` writes the traffic as pcapng (:mod:`refwire.pcap`): each
connection as two TCP conversations, client <-> proxy and proxy <-> upstream,
each with the bytes as they crossed that socket (sent by its peer, or passed
on by the proxy after the faults).
``--control HOST:PORT`` also answers toxiproxy's HTTP API there
(:mod:`refwire.chaos.control`), the proxy being called ``--name`` (default:
the protocol); ``refwire chaos serve --control HOST:PORT`` starts the API
with no proxy, for clients to create their own.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from typing import IO, TYPE_CHECKING

import attrs
import trio

from ..cliutil import Commands, UsageError, hostport, open_listeners, positive_int, stop_on_signal
from ..logs import plural
from ..protocols import names

if TYPE_CHECKING:
    from .control import ControlServer, ManagedProxy
    from .proxy import ChaosProxy

__all__ = ["register"]


def register(cmds: Commands) -> None:
    chaos = cmds.top.add_parser(
        "chaos",
        help="a frame-aware, seeded fault proxy between a real client and a real server",
        description="Relay a protocol between your client and your server, cutting each direction into frames "
        "and applying the schedule's rules (drop, delay, duplicate, split, truncate, corrupt or rewrite a field, "
        "close, reset) to frame n of connection c; every decision is recorded.",
    )
    chaos.add_argument(
        "protocol",
        choices=(*names(), "replay", "serve"),
        help="the protocol spoken through the proxy, 'replay' to apply a record's decisions again, "
        "or 'serve' to run only the control API (--control), whose clients create the proxies",
    )
    chaos.add_argument("record_file", nargs="?", metavar="RECORD", help="with 'replay': the JSON-lines record of an earlier run")
    chaos.add_argument(
        "--listen",
        type=hostport,
        default=("127.0.0.1", 0),
        metavar="HOST:PORT",
        help="where clients connect (default 127.0.0.1, any port)",
    )
    chaos.add_argument(
        "--upstream",
        type=hostport,
        metavar="HOST:PORT",
        help="the server the proxy connects each client to (required but with serve)",
    )
    chaos.add_argument(
        "--control",
        type=hostport,
        metavar="HOST:PORT",
        help="also answer toxiproxy's HTTP API here (toxiproxy's clients drive it; docs/guides/chaos.rst), e.g. 127.0.0.1:8474",
    )
    chaos.add_argument(
        "--name", metavar="NAME", help="with --control: the proxy's name in the API (default: the protocol's name)"
    )
    chaos.add_argument("--schedule", metavar="FILE", help="the rules, TOML (.toml) or JSON (none: a transparent relay)")
    chaos.add_argument(
        "--seed", type=int, metavar="N", help="the run's seed (default: the schedule's, else a random one, printed)"
    )
    chaos.add_argument("--record", metavar="FILE", help="write every decision and every connection's end as JSON lines")
    chaos.add_argument("--tls-cert", metavar="PEM", help="terminate the clients' TLS with this certificate chain")
    chaos.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert (if not in the same file)")
    chaos.add_argument("--upstream-tls", action="store_true", help="connect to the upstream with TLS (implied by --upstream-ca)")
    chaos.add_argument("--upstream-ca", metavar="PEM", help="trust this CA for the upstream (default: the system store)")
    chaos.add_argument("--upstream-server-name", metavar="NAME", help="the upstream certificate's name (default: its host)")
    chaos.add_argument(
        "--capture",
        metavar="DIR",
        help="write every connection twice in refwire record's format: DIR/sent as each peer sent it, DIR/delivered "
        "as the other peer received it (after the faults); refwire decode and analyze read both",
    )
    chaos.add_argument(
        "--pcap",
        metavar="FILE",
        help="also write the traffic to FILE as pcapng for Wireshark: each connection as two TCP conversations, "
        "client<->proxy and proxy<->upstream, with the bytes as they crossed each socket (what a peer sent, and "
        "what the proxy passed on to the other after the faults)",
    )
    chaos.add_argument(
        "--check",
        action="store_true",
        help="check the protocol's invariants on the traffic (Lumberjack: acks of events the server never received, "
        "acks going back, unacked events never resent); each violation is printed and recorded; exit 1 if any",
    )
    chaos.add_argument(
        "--max-frame-size",
        type=positive_int,
        default=64 * 1024 * 1024,
        metavar="BYTES",
        help="largest frame the proxy holds to decide on it; a larger one passes through as bytes (default 64 MiB)",
    )
    chaos.set_defaults(func=_chaos)


async def _chaos(args: argparse.Namespace) -> int:
    from .proxy import ChaosProxy, replay_plan
    from .rules import Schedule, ScheduleError, load_schedule

    plan = None
    if args.protocol == "serve":
        return await _serve_control(args)
    if args.upstream is None:
        raise UsageError("chaos needs --upstream HOST:PORT (the server the proxy connects each client to)")
    if args.name and not args.control:
        raise UsageError("--name goes with --control")
    if args.protocol == "replay":
        if not args.record_file or args.schedule:
            raise UsageError("chaos replay takes a record (refwire chaos replay RECORD --upstream HOST:PORT) and no --schedule")
        try:
            lines = open(args.record_file, encoding="utf-8").read().splitlines()
            plan = replay_plan(lines)
            start = next(json.loads(ln) for ln in lines if ln.strip() and json.loads(ln).get("event") == "start")
        except (OSError, ValueError, StopIteration, KeyError, TypeError) as exc:
            raise UsageError(f"{args.record_file}: not a chaos record ({exc or 'no start line'})") from None
        args.protocol = start["protocol"]
        args.seed = start.get("seed", 0)
    elif args.record_file:
        raise UsageError("a RECORD argument goes with 'refwire chaos replay' only")
    try:
        schedule = load_schedule(args.schedule, args.protocol) if args.schedule else Schedule(args.protocol, ())
    except ScheduleError as exc:
        raise UsageError(str(exc)) from None
    seed = (
        args.seed if args.seed is not None else (schedule.seed if args.schedule and schedule.seed else secrets.randbelow(2**31))
    )
    schedule = attrs.evolve(schedule, seed=seed)
    from ..drivers import client_ssl_context, server_ssl_context

    tls = server_ssl_context(args.tls_cert, args.tls_key) if args.tls_cert else None
    if args.tls_key and not args.tls_cert:
        raise UsageError("--tls-key goes with --tls-cert")
    upstream_tls = client_ssl_context(args.upstream_ca) if args.upstream_tls or args.upstream_ca else None
    from ..pcap import PcapPathError, PcapWriter

    try:
        pcap = PcapWriter(args.pcap) if args.pcap else None
    except PcapPathError as exc:
        raise UsageError(f"--pcap: {exc}") from None
    try:
        record: IO[str] | None = open(args.record, "a", encoding="utf-8") if args.record else None
    except BaseException:
        if pcap is not None:
            pcap.close()
        raise
    try:
        proxy = ChaosProxy(
            args.protocol,
            args.upstream,
            schedule,
            record=record,
            max_frame_size=args.max_frame_size,
            replay=plan,
            check=args.check,
            capture=args.capture,
            tls=tls,
            upstream_tls=upstream_tls,
            upstream_hostname=args.upstream_server_name,
            pcap=pcap,
        )
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            await nursery.start(stop_on_signal, done)
            control = ""
            if args.control:
                server = await _start_control(args, nursery, seed, record)
                managed = await _attach(server, args, proxy)
                address = managed.listen
                control = f", control API on http://{server.addresses[0]} (proxy {managed.name!r})"
            else:
                listeners = await open_listeners(*args.listen)
                await nursery.start(proxy.serve, listeners)
                address = proxy.addresses[0]
            what = (
                f"replaying {plural(sum(map(len, plan.values())), 'decision')}" if plan is not None else plural(len(schedule.rules), "rule")
            )
            print(
                f"chaos {args.protocol}: listening on {address}, upstream {args.upstream[0]}:{args.upstream[1]}, "
                f"{what}, seed {seed}{control}",
                file=sys.stderr,
                flush=True,
            )
            await done.wait()
            nursery.cancel_scope.cancel()
        violations = proxy.finish()
    finally:
        if record is not None:
            record.close()
        if pcap is not None:
            pcap.close()
    st = proxy.stats
    print(
        f"{plural(st['connections'], 'connection')}, {plural(st['frames'], 'frame')}, {plural(st['actions'], 'action')}, seed {seed}",
        file=sys.stderr,
    )
    for v in violations:
        where = f"connection {v.conn} {v.direction}" + (f" frame {v.frame}" if v.frame >= 0 else "")
        print(f"violation {v.check}: {where}: {v.detail}", file=sys.stderr)
    if args.check:
        print(f"{len(violations)} violation(s)", file=sys.stderr)
    return 1 if violations else 0


async def _start_control(
    args: argparse.Namespace, nursery: trio.Nursery, seed: int, record: IO[str] | None = None
) -> ControlServer:
    from .control import PLAIN, ControlServer

    server = ControlServer(
        seed=seed,
        protocol=PLAIN if args.protocol == "serve" else args.protocol,
        record=record,
        max_frame_size=args.max_frame_size,
    )
    listeners = await open_listeners(*args.control)
    await nursery.start(server.serve, listeners)
    return server


async def _attach(server: ControlServer, args: argparse.Namespace, proxy: ChaosProxy) -> ManagedProxy:
    from .control import ApiError

    try:
        return await server.attach(args.name or args.protocol, proxy, listen="{}:{}".format(*args.listen))
    except ApiError as exc:
        raise UsageError(f"cannot start the proxy: {exc.message}") from None


async def _serve_control(args: argparse.Namespace) -> int:
    """``refwire chaos serve --control HOST:PORT``: the API alone; clients create the proxies."""
    if not args.control:
        raise UsageError("chaos serve needs --control HOST:PORT")
    extra = [flag for flag, given in (("--upstream", args.upstream), ("--schedule", args.schedule), ("--record", args.record),
                                      ("--check", args.check), ("--name", args.name), ("RECORD", args.record_file),
                                      ("--pcap", args.pcap)) if given]  # fmt: skip
    if extra:
        raise UsageError(f"chaos serve takes no {', '.join(extra)}: clients create proxies through the API")
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    done = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(stop_on_signal, done)
        server = await _start_control(args, nursery, seed)
        print(f"chaos serve: control API on http://{server.addresses[0]}, seed {seed}", file=sys.stderr, flush=True)
        await done.wait()
        await server.aclose()
        nursery.cancel_scope.cancel()
    for name, managed in server.proxies.items():
        st = managed.proxy.stats
        print(
            f"proxy {name}: {plural(st['connections'], 'connection')}, {plural(st['frames'], 'frame')}, {plural(st['actions'], 'action')}",
            file=sys.stderr,
        )
    return 0
