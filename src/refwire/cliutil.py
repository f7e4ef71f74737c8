"""Pieces every ``refwire`` subcommand shares: argument types, usage errors,
listening before the nursery exists, and stopping on SIGINT/SIGTERM.

Each protocol package has a ``cli`` module with ``register(cmds)``, which adds
its subcommands to the parsers in :class:`Commands` and sets ``func`` on each
(an ``async def f(args) -> int`` run under trio, or a plain function).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
from collections.abc import Iterator, Sequence

import attrs
import trio

from .argtypes import hostport, nonneg_float, positive_float, positive_int
from .wire import Limits

__all__ = [
    "Commands",
    "UsageError",
    "hostport",
    "max_connections",
    "nonneg_float",
    "open_listeners",
    "positive_float",
    "positive_int",
    "sigint_ignored",
    "stop_on_signal",
    "stopped_by_ctrl_c",
]


class UsageError(Exception):
    """A bad command-line argument (exit status 2)."""


@attrs.frozen
class Commands:
    """The subparser groups a protocol's ``register`` adds to."""

    serve: argparse._SubParsersAction[argparse.ArgumentParser]  #: ``refwire serve PROTOCOL``
    send: argparse._SubParsersAction[argparse.ArgumentParser]  #: ``refwire send PROTOCOL`` (write, produce, call)
    top: argparse._SubParsersAction[argparse.ArgumentParser]  #: top-level commands (``refwire campaign …``)
    #: ``refwire read PROTOCOL`` (read, fetch, consume); None for callers built before it existed
    read: argparse._SubParsersAction[argparse.ArgumentParser] | None = None








def max_connections(args: argparse.Namespace) -> int | None:
    """``--max-connections N`` as a server takes it: 0 means no limit; a negative number is a usage error."""
    n: int = args.max_connections
    if n < 0:
        raise UsageError(f"--max-connections must be 0 (no limit) or more, got {n}")
    return n or None


def add_frame_timeout(parser: argparse.ArgumentParser, note: str = "") -> None:
    """Every serve command's ``--frame-timeout S`` (default 30 s; 0 = never)."""
    parser.add_argument(
        "--frame-timeout",
        type=nonneg_float,
        default=30.0,
        metavar="S",
        help="close a connection whose frame stays incomplete S seconds after it began (default 30; 0 = never)" + note,
    )


def add_connection_memory(parser: argparse.ArgumentParser, shares: str) -> None:
    """Every serve command's ``--connection-memory N`` (``Limits.max_connection_memory``,
    default 256 MiB; ``shares`` says how that server spends it) and ``--server-memory N``
    (``Limits.max_server_memory``, :mod:`refwire.admission`)."""
    parser.add_argument(
        "--connection-memory",
        type=positive_int,
        default=Limits().max_connection_memory,
        metavar="N",
        help=f"most bytes one connection may hold{shares} (default 256 MiB; docs/guides/limits.rst)",
    )
    parser.add_argument(
        "--server-memory",
        type=positive_int,
        default=Limits().max_server_memory,
        metavar="N",
        help="most bytes the server holds for all its connections together: a busy connection takes "
        "1.5 x --connection-memory of it first, and one that finds too little waits (its reads pause) "
        "until another gives its share back (default: half of this machine's physical memory, at least 12 x --connection-memory; "
        "docs/guides/limits.rst)",
    )


def add_idle_timeout(parser: argparse.ArgumentParser, note: str) -> None:
    """``--idle-timeout S`` for a server whose real implementation has no idle rule (default 0: never)."""
    parser.add_argument(
        "--idle-timeout",
        type=nonneg_float,
        default=0.0,
        metavar="S",
        help="close a connection after S seconds without a byte received (default 0: never" + note + ")",
    )


def idle_timeout(args: argparse.Namespace) -> float | None:
    """``--idle-timeout`` as a server config takes it (0 means never)."""
    value: float = args.idle_timeout
    return value or None


def frame_timeout(args: argparse.Namespace) -> float | None:
    """``--frame-timeout`` as a server config takes it (0 means never)."""
    value: float = args.frame_timeout
    return value or None




async def open_listeners(host: str, port: int) -> Sequence[trio.SocketListener]:
    """Listen before any nursery exists, so a busy port is a plain usage error."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


#: The signals :func:`stop_on_signal` stopped a command on (this process).
_STOPPED_BY: set[int] = set()


async def stop_on_signal(done: trio.Event, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Set ``done`` on SIGINT/SIGTERM. Start it with ``nursery.start`` before
    announcing an address, so the handler is in place when a caller sees it.

    The command then stops gracefully (a server drains, prints its summary);
    after a SIGINT (Ctrl-C) its exit status is 130 all the same, after a SIGTERM
    it is the command's own (:func:`stopped_by_ctrl_c`)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            _STOPPED_BY.add(signum)
            done.set()
            return


def stopped_by_ctrl_c(*, forget: bool = False) -> bool:
    """Whether :func:`stop_on_signal` stopped a command on SIGINT; ``forget``
    clears the record (a new command starts)."""
    seen = signal.SIGINT in _STOPPED_BY
    if forget:
        _STOPPED_BY.clear()
    return seen


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored meanwhile, then as it was: a command that is only writing
    what it has on its way out (reports, the log's last lines) must not be cut
    by a second Ctrl-C into a traceback.  Off the main thread it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
