"""Pieces every ``refwire`` subcommand shares: argument types, usage errors,
listening before the nursery exists, and stopping on SIGINT/SIGTERM.

Each protocol package has a ``cli`` module with ``register(cmds)``, which adds
its subcommands to the parsers in :class:`Commands` and sets ``func`` on each
(an ``async def f(args) -> int`` run under trio, or a plain function).
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

import attrs
import trio

from .argtypes import hostport, nonneg_float, positive_float, positive_int
from .wire import Limits

__all__ = [
    "Commands",
    "OneInterrupt",
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


class OneInterrupt:
    """SIGINT while a command of seeds runs: the first raises :class:`KeyboardInterrupt`
    (as Python's own handler does); later ones, which arrive while the command
    winds down, are ignored, or with ``hard_exit`` end the process at once with
    status 130 (after ``on_hard_exit``, e.g. printing the interrupted line).

    Python drops an exception raised inside a finalizer (``__del__``, which the
    garbage collector runs at any bytecode: "Exception ignored in ..."), so a
    Ctrl-C landing there would be lost and the command would run on.  The
    handler sees that frame and delivers the Ctrl-C again as soon as the
    finalizer returns (:func:`_redeliver_after_finalizers`).  Where Python drops it anyway (a weakref callback, code
    that swallows it), :meth:`deferred` raises it on entry, so no verdict is
    recorded after it.

    Use as a context manager in the main thread; elsewhere it does nothing.
    """

    def __init__(self, *, hard_exit: bool = False, on_hard_exit: Callable[[], None] | None = None) -> None:
        self.count = 0
        self.hard_exit = hard_exit
        self.on_hard_exit = on_hard_exit
        self._previous: Any = None
        self._armed = False
        self._deferring = False
        self._pending = False
        self._redelivering = False

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A block the first Ctrl-C does not cut in two: it raises
        :class:`KeyboardInterrupt` when the block ends (recording a verdict and
        printing it happen both or neither).  A Ctrl-C that came before and was
        lost on its way (see the class) raises on entry."""
        if self.count:
            raise KeyboardInterrupt
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self._pending:
            self._pending = False
            raise KeyboardInterrupt

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self._redelivering:  # the first Ctrl-C again, once out of a finalizer: not a second one
            self._redelivering = False
        else:
            self.count += 1
        if self.count == 1:
            if self._deferring:
                self._pending = True
                return
            if _in_finalizer(frame):
                self._redelivering = True
                _redeliver_after_finalizers()
                return
            raise KeyboardInterrupt
        if self.hard_exit:
            with contextlib.suppress(Exception):
                if self.on_hard_exit is not None:
                    self.on_hard_exit()
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(130)

    @property
    def interrupted(self) -> bool:
        """Whether SIGINT arrived."""
        return self.count > 0

    def __enter__(self) -> OneInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
            self._armed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._armed:
            signal.signal(signal.SIGINT, self._previous)
            self._armed = False


def _redeliver_after_finalizers() -> None:
    """SIGINT to the main thread again once it runs no finalizer, from a thread of
    its own: tripped from the handler itself, the signal would run the handler again
    at once, still inside the finalizer, and again, without end."""
    main = threading.main_thread().ident

    def watch() -> None:
        while main is not None and _in_finalizer(sys._current_frames().get(main)):
            time.sleep(0.001)  # a finalizer runs for microseconds; this is its poll, not a timeout
        _thread.interrupt_main(signal.SIGINT)

    threading.Thread(target=watch, name="refwire-ctrl-c", daemon=True).start()


def _in_finalizer(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside a ``__del__``, where an exception raised is
    printed and dropped instead of propagating."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False
