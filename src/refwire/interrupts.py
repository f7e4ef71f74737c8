"""Ctrl-C in a command that runs seeds or runs (``refwire sim``, the campaigns):
:class:`OneInterrupt`, and :func:`sigint_to_trio` for a ``trio.run`` inside one.

The rules (docs/guides/simulator.rst, docs/guides/pipeline.rst): the first
Ctrl-C stops the command at once with exit status 130 and no verdict is recorded
after it; later ones are ignored while it winds down, or end the process at once.  Python's own handler raises
KeyboardInterrupt at whatever bytecode runs, which loses the Ctrl-C in two
places this module covers: a finalizer (Python drops an exception raised in
``__del__``), and trio's scheduler (a run cut there is left for the garbage
collector to tear down).
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

__all__ = ["OneInterrupt", "interrupted", "sigint_to_trio"]


class OneInterrupt:
    """SIGINT while a command of seeds runs: the first raises :class:`KeyboardInterrupt`
    (as Python's own handler does); later ones, which arrive while the command
    winds down, are ignored, or with ``hard_exit`` end the process at once with
    status 130 (after ``on_hard_exit``, e.g. printing the interrupted line).

    Python drops an exception raised inside a finalizer (``__del__``, which the
    garbage collector runs at any bytecode: "Exception ignored in ..."), so a
    Ctrl-C landing there would be lost and the command would run on.  The
    handler sees that frame and delivers the Ctrl-C again as soon as the
    finalizer returns (:func:`_redeliver_after_finalizers`).  Where Python drops
    it anyway (a weakref callback, code that swallows it), :meth:`deferred`
    raises it on entry, so no verdict is recorded after it.  Inside a seed's
    ``trio.run`` the Ctrl-C is trio's (:func:`sigint_to_trio`).

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
        self._outer: OneInterrupt | None = None

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
        global _ARMED
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
            self._armed = True
            self._outer, _ARMED = _ARMED, self
        return self

    def __exit__(self, *exc: object) -> None:
        global _ARMED
        if self._armed:
            signal.signal(signal.SIGINT, self._previous)
            self._armed = False
            _ARMED = self._outer


#: The OneInterrupt whose handler is SIGINT's now (main thread), if any.
_ARMED: OneInterrupt | None = None


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is Ctrl-C: a :class:`KeyboardInterrupt`, or an exception
    group holding one (trio delivers Ctrl-C into the running task, and a
    nursery wraps it with whatever its other tasks raised then)."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(interrupted(e) for e in exc.exceptions)
    return False


@contextlib.contextmanager
def sigint_to_trio() -> Iterator[None]:
    """SIGINT handed to trio for a ``trio.run`` inside this block, when a
    :class:`OneInterrupt` holds it.

    trio installs its own handler only over Python's default one, and only its
    handler keeps a Ctrl-C out of trio's own machinery: it hands the Ctrl-C to
    the main task (at its next checkpoint, with
    ``restrict_keyboard_interrupt_to_checkpoints``), and the run ends with
    :class:`KeyboardInterrupt` once its tasks have unwound.  A KeyboardInterrupt
    raised by OneInterrupt's handler can land inside the scheduler instead,
    leaving the run's tasks to be torn down by the garbage collector ("Exception
    ignored in: <coroutine ...> RuntimeError: must be called from async
    context").  A Ctrl-C that ended the run counts as OneInterrupt's first."""
    ctrl_c = _ARMED
    if ctrl_c is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    except BaseException as exc:
        if interrupted(exc):
            ctrl_c.count = max(ctrl_c.count, 1)
        raise
    finally:
        signal.signal(signal.SIGINT, ctrl_c._handler)


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
