"""``refwire chaos PROTOCOL --listen HOST:PORT --upstream HOST:PORT [--schedule FILE]``.

Runs the fault proxy until interrupted (Ctrl-C or SIGTERM); prints the seed
and the address it listens on, and, at the end, how many frames it saw and how
many actions it took.  ``--record FILE.jsonl`` keeps every decision.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from typing import IO

import attrs
import trio

from ..cliutil import Commands, UsageError, hostport, open_listeners, positive_int, stop_on_signal
from ..protocols import names

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
        choices=(*names(), "replay"),
        help="the protocol spoken through the proxy, or 'replay' to apply a record's decisions again",
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
        "--upstream", type=hostport, required=True, metavar="HOST:PORT", help="the server the proxy connects each client to"
    )
    chaos.add_argument("--schedule", metavar="FILE", help="the rules, TOML (.toml) or JSON (none: a transparent relay)")
    chaos.add_argument(
        "--seed", type=int, metavar="N", help="the run's seed (default: the schedule's, else a random one, printed)"
    )
    chaos.add_argument("--record", metavar="FILE", help="write every decision and every connection's end as JSON lines")
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
    record: IO[str] | None = open(args.record, "a", encoding="utf-8") if args.record else None
    try:
        proxy = ChaosProxy(
            args.protocol,
            args.upstream,
            schedule,
            record=record,
            max_frame_size=args.max_frame_size,
            replay=plan,
            check=args.check,
        )
        listeners = await open_listeners(*args.listen)
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            await nursery.start(stop_on_signal, done)
            await nursery.start(proxy.serve, listeners)
            what = (
                f"replaying {sum(map(len, plan.values()))} decision(s)" if plan is not None else f"{len(schedule.rules)} rule(s)"
            )
            print(
                f"chaos {args.protocol}: listening on {proxy.addresses[0]}, upstream {args.upstream[0]}:{args.upstream[1]}, "
                f"{what}, seed {seed}",
                file=sys.stderr,
                flush=True,
            )
            await done.wait()
            nursery.cancel_scope.cancel()
        violations = proxy.finish()
    finally:
        if record is not None:
            record.close()
    st = proxy.stats
    print(f"{st['connections']} connection(s), {st['frames']} frame(s), {st['actions']} action(s), seed {seed}", file=sys.stderr)
    for v in violations:
        where = f"connection {v.conn} {v.direction}" + (f" frame {v.frame}" if v.frame >= 0 else "")
        print(f"violation {v.check}: {where}: {v.detail}", file=sys.stderr)
    if args.check:
        print(f"{len(violations)} violation(s)", file=sys.stderr)
    return 1 if violations else 0
