"""The ``refwire`` command.

    refwire serve lumberjack --listen 127.0.0.1:5044 [--out FILE] [TLS options]
    refwire send lumberjack HOST:PORT [--count N | JSON lines on stdin] [options]
    refwire sim [PROTOCOL|all] [--seeds N | --seed S] [--shrink]

Each protocol adds its own subcommands from the ``register`` function its
descriptor names (:mod:`refwire.protocols`, :mod:`refwire.cliutil`).

Every ``serve`` prints the address it listens on (``listening on HOST:PORT``)
to stderr as soon as it accepts connections; port 0 picks a free port.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import socket
import ssl
import sys
import time
import traceback
from collections.abc import Sequence

import trio

from .cliutil import Commands, UsageError, positive_int
from .errors import RefwireError
from .protocols import descriptor, load, names

__all__ = ["TOOL_CLIS", "main"]

#: ``register(Commands)`` functions beside the protocols' own (which their descriptors name).
TOOL_CLIS = ("refwire.pipeline.cli:register", "refwire.conform.cli:register", "refwire.chaos.cli:register")


def _sim_protocols() -> tuple[str, ...]:
    return names("scenario")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="refwire", description="Reference implementations of binary stream protocols, on trio.")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output (repeat for debug)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run a server")
    send = sub.add_parser("send", help="send data to a server (write, produce, call)")
    read = sub.add_parser("read", help="read data from a server (read, consume)")
    cmds = Commands(
        serve=serve.add_subparsers(dest="protocol", metavar="PROTOCOL"),
        send=send.add_subparsers(dest="protocol", metavar="PROTOCOL"),
        top=sub,
        read=read.add_subparsers(dest="protocol", metavar="PROTOCOL"),
    )
    for name in names("cli"):
        descriptor(name).load("cli")(cmds)
    for ref in TOOL_CLIS:
        load(ref)(cmds)

    # sim -----------------------------------------------------------------
    sim = sub.add_parser("sim", help="run deterministic simulations")
    sim.add_argument("protocol", nargs="?", default="all", help=f"one of: {', '.join(_sim_protocols())}, or all (default)")
    sim.add_argument("--seeds", type=positive_int, default=20, metavar="N", help="run N seeds (default 20)")
    sim.add_argument("--first-seed", type=int, default=0, metavar="K", help="first seed of the batch (default 0)")
    sim.add_argument("--seed", type=int, metavar="S", help="replay this one seed")
    sim.add_argument("--knobs", metavar="JSON", help='override fault knobs / workload: {"faults": {...}, "workload": {...}}')
    sim.add_argument("--shrink", action="store_true", help="shrink every failing seed and print its minimal replay command")
    sim.add_argument("--json", action="store_true", help="print one JSON object per run instead of text")
    sim.add_argument("--trace", action="store_true", help="print the last trace lines of failing runs")
    return p


# --------------------------------------------------------------------------- sim


def _sim(args: argparse.Namespace) -> int:
    from refwire.sim.faults import Faults
    from refwire.sim.runner import check_workload, run_seed, shrink

    known = _sim_protocols()
    protocols = list(known) if args.protocol == "all" else [args.protocol]
    for proto in protocols:
        if proto not in known:
            raise UsageError(f"no simulation for {proto!r}; choose one of: {', '.join(known)}, all")
    faults = None
    workload = None
    if args.knobs:
        try:
            knobs = json.loads(args.knobs)
            if "faults" in knobs:
                faults = Faults.from_dict(knobs["faults"])
            workload = knobs.get("workload")
            if workload is not None:
                if not isinstance(workload, dict):
                    raise ValueError("the workload must be a JSON object")
                for proto in protocols:
                    check_workload(proto, workload)
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

#: What a user can cause (a peer that is down, resets or speaks another
#: protocol, a bad file, a timeout): reported in one line, exit status 1.
_EXPECTED: tuple[type[BaseException], ...] = (
    OSError,
    RefwireError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.TooSlowError,
    EOFError,
)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, in order."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def describe_error(exc: BaseException) -> str:
    """One plain line for an error a user caused: the cause's words, not a repr."""
    if isinstance(exc, trio.TooSlowError):
        return "timed out"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate verification failed: {exc.verify_message or exc.reason}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS error: {exc.reason or exc}"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host name: {exc.strerror or exc}"
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    text = str(exc).strip()
    if isinstance(exc, (trio.BrokenResourceError, trio.ClosedResourceError, EOFError)):
        cause = exc.__cause__ or exc.__context__
        if not text and cause is not None and not isinstance(cause, type(exc)):
            return describe_error(cause)
        return text or "the connection was closed"
    return text or type(exc).__name__


def _report(exc: BaseException, *, verbose: int = 0) -> int:
    """Exit status for an exception out of a command, after one line per cause
    on stderr: 130 Ctrl-C, 2 bad usage, 1 what a user can cause, and for a
    bug of refwire's own a line that says so (``-v`` adds the traceback)."""
    leaves = _leaves(exc)
    if any(isinstance(e, KeyboardInterrupt) for e in leaves):
        return 130
    status = 2 if all(isinstance(e, UsageError) for e in leaves) else 1
    seen: set[str] = set()
    for e in leaves:
        if isinstance(e, (UsageError, *_EXPECTED)):
            line = f"refwire: {describe_error(e)}"
        else:
            line = f"refwire: internal error ({type(e).__name__}: {e}); this is a bug in refwire, please report it"
            if verbose:
                traceback.print_exception(e, file=sys.stderr)
        if line not in seen:
            seen.add(line)
            print(line, file=sys.stderr)
    return status



def main(argv: Sequence[str] | None = None) -> int:
    try:  # loading every protocol's commands takes a moment: Ctrl-C meanwhile is 130 too
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt as exc:
        return _report(exc, verbose=0)
    handler = _log_to_stderr(logging.WARNING - 10 * min(args.verbose, 2))
    try:
        if args.command is None:
            parser.print_help()
            return 2
        if args.command == "sim":
            return _sim(args)
        func = getattr(args, "func", None)
        if func is None:
            parser.parse_args([args.command, "--help"])
            return 2
        if inspect.iscoroutinefunction(func):
            return int(trio.run(func, args))
        return int(func(args))
    except SystemExit:
        raise
    except BaseException as exc:  # one plain line per cause, never a traceback
        return _report(exc, verbose=args.verbose)
    finally:
        if handler is not None:
            logging.getLogger().removeHandler(handler)
            handler.close()
    parser.print_help()
    return 2


def _log_to_stderr(level: int) -> logging.Handler | None:
    """Log to stderr through :class:`~refwire.logs.BackgroundStderr` (a server
    never blocks on a stderr nobody reads), unless logging is set up already
    (then, as :func:`logging.basicConfig`, nothing changes)."""
    from .logs import BackgroundStderr

    root = logging.getLogger()
    if root.handlers:
        return None
    handler = BackgroundStderr(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
    return handler


if __name__ == "__main__":
    sys.exit(main())
