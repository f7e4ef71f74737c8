"""Pieces every ``refwire`` subcommand shares: argument types, usage errors,
listening before the nursery exists, and stopping on SIGINT/SIGTERM.

Each protocol package has a ``cli`` module with ``register(cmds)``, which adds
its subcommands to the parsers in :class:`Commands` and sets ``func`` on each
(an ``async def f(args) -> int`` run under trio, or a plain function).
"""

from __future__ import annotations

import argparse
import signal
from collections.abc import Sequence

import attrs
import trio

from .drivers import parse_hostport

__all__ = [
    "Commands",
    "UsageError",
    "hostport",
    "max_connections",
    "nonneg_float",
    "open_listeners",
    "positive_int",
    "stop_on_signal",
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


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be at least 1")
    return v


def nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{v} must not be negative")
    return v


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


def hostport(text: str) -> tuple[str, int]:
    try:
        return parse_hostport(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


async def open_listeners(host: str, port: int) -> Sequence[trio.SocketListener]:
    """Listen before any nursery exists, so a busy port is a plain usage error."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


async def stop_on_signal(done: trio.Event, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Set ``done`` on SIGINT/SIGTERM. Start it with ``nursery.start`` before
    announcing an address, so the handler is in place when a caller sees it."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for _ in signals:
            done.set()
            return
