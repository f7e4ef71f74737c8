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
import logging
import signal
import socket
import ssl
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import trio

from .cliutil import Commands, UsageError, sigint_ignored, stopped_by_ctrl_c
from .errors import RefwireError
from .protocols import descriptor, load, names
from .transport import tls_reason

__all__ = ["INTERRUPTED", "TOOL_CLIS", "main", "run_interruptibly"]

_log = logging.getLogger("refwire.cli")

#: ``register(Commands)`` functions beside the protocols' own (which their descriptors name).
TOOL_CLIS = (
    "refwire.pipeline.cli:register",
    "refwire.conform.cli:register",
    "refwire.chaos.cli:register",
    "refwire.dissector.cli:register",
)


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
    from .sim.cli import add_sim_arguments

    add_sim_arguments(sim, _sim_protocols())
    return p


# --------------------------------------------------------------------------- sim


def _sim(args: argparse.Namespace) -> int:
    from refwire.sim.cli import run_sim

    known = _sim_protocols()
    protocols = list(known) if args.protocol == "all" else [args.protocol]
    for proto in protocols:
        if proto not in known:
            raise UsageError(f"no simulation for {proto!r}; choose one of: {', '.join(known)}, all")
    return run_sim(args, protocols)


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
        return str(exc).strip() or "timed out"  # (a PeerTimeout says what it waited for)
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
        reason = tls_reason(exc)
        if not text and reason:
            return f"TLS error: {reason}"
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



#: The command groups whose commands :func:`run_interruptibly` runs: a protocol's
#: ``serve``, ``send`` and ``read`` (their Ctrl-C is a cancellation, never a
#: KeyboardInterrupt raised in whichever task happens to run).
_INTERRUPTIBLE_GROUPS: Final = ("serve", "send", "read")

#: Exit status of a command stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
INTERRUPTED: Final = 130


async def run_interruptibly(func: Callable[[argparse.Namespace], Awaitable[int]], args: argparse.Namespace) -> int:
    """Run ``await func(args)`` and turn Ctrl-C (SIGINT) into its cancellation: the
    exit status is then :data:`INTERRUPTED` (130) whatever the command's
    cleanup raises or returns -- a connection its peer closed meanwhile (the
    peer got the same Ctrl-C), an error of a half-finished request, or a reply
    that came in just then.

    Without this, trio raises KeyboardInterrupt in whichever task runs when the
    signal lands (a connection's reader, say): that task's cleanup fails the
    request the main task waits on, and the exit status came from whichever
    error won.  A second Ctrl-C while the command unwinds changes nothing.  A
    server's own ``stop_on_signal`` takes the first Ctrl-C (a graceful stop,
    exit 130 all the same); a second one during its shutdown comes here and cancels it."""
    if threading.current_thread() is not threading.main_thread():
        return int(await func(args))  # signals reach the main thread only
    interrupted = False
    result: int | None = None
    failure: BaseException | None = None
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                nonlocal interrupted
                async for _ in signals:  # every further Ctrl-C is drained here too
                    if not interrupted:
                        interrupted = True
                        command_scope.cancel()

            with trio.CancelScope() as command_scope:
                nursery.start_soon(watch)
                try:
                    result = int(await func(args))
                except BaseException as exc:  # raised below, outside the nursery (not in a group)
                    failure = exc
            nursery.cancel_scope.cancel()
    if interrupted:
        if failure is not None:
            _log.debug("after Ctrl-C: %s", describe_error(failure))
        return INTERRUPTED
    if failure is not None:
        raise failure
    assert result is not None
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``refwire`` command; returns its exit status (0 done, 1 what a user
    can cause, 2 bad usage, 130 Ctrl-C).  No traceback reaches a person: a
    Ctrl-C that lands anywhere -- loading, running, reporting, writing the
    last log lines -- is exit status 130."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
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
        stopped_by_ctrl_c(forget=True)
        if inspect.iscoroutinefunction(func):
            if args.command in _INTERRUPTIBLE_GROUPS:
                status = int(trio.run(run_interruptibly, func, args))
            else:
                status = int(trio.run(func, args))
        else:
            status = int(func(args))
        # A command that stops gracefully on Ctrl-C (a server, a tap, a proxy) still
        # ends with 130, as a shell expects of an interrupted command; SIGTERM keeps 0.
        return INTERRUPTED if status == 0 and stopped_by_ctrl_c() else status
    except SystemExit:
        raise
    except BaseException as exc:  # one plain line per cause, never a traceback
        return _report(exc, verbose=args.verbose)
    finally:
        if handler is not None:
            with sigint_ignored():
                logging.getLogger().removeHandler(handler)
                handler.close()


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
