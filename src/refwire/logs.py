"""Logging that a hostile peer cannot turn against the server.

* :func:`limited` -- at most one line per *kind* (a refused connection, a
  protocol error, a failed TLS handshake ...) per interval; the lines held
  back meanwhile are counted and the count rides on the next line of that
  kind.  A flood of bad connections costs a few lines, not one per connection.
* :class:`BackgroundStderr` -- the command line's log handler: records are
  formatted by the caller and written by a thread of their own, through a
  bounded queue; when nobody reads the stream (a full pipe) the queue fills
  and further lines are dropped and counted, instead of the server's event
  loop blocking in a write.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import IO, Final

__all__ = ["BackgroundStderr", "limited", "plural", "reset"]

#: Seconds between two lines of the same kind from :func:`limited`.
DEFAULT_INTERVAL: Final = 10.0
#: Kinds remembered at most (they are a fixed vocabulary; this only bounds a bug).
_MAX_KINDS: Final = 1024

_last: dict[tuple[str, str], list[float]] = {}
_lock = threading.Lock()


def limited(
    logger: logging.Logger,
    kind: str,
    msg: str,
    *args: object,
    level: int = logging.WARNING,
    interval: float = DEFAULT_INTERVAL,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Log ``msg % args`` unless a line of this ``kind`` went out less than
    ``interval`` seconds ago (then it is only counted); returns whether it was
    logged.  The count of lines held back is added to the next one."""
    if not logger.isEnabledFor(level):
        return False
    key = (logger.name, kind)
    now = clock()
    with _lock:
        state = _last.get(key)
        if state is not None and now - state[0] < interval:
            state[1] += 1
            return False
        held = 0 if state is None else int(state[1])
        if state is None and len(_last) >= _MAX_KINDS:
            _last.clear()
        _last[key] = [now, 0]
    if held:
        msg += " (and %d more like it in the last %.0fs)"
        args = (*args, held, interval)
    logger.log(level, msg, *args)
    return True


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 event``, ``2 events``, ``0 events``: a count and its noun, in the
    number the count asks for (``plural_form`` for a noun that does not just
    take an ``s``: ``plural(n, "reply", "replies")``)."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {plural_form or noun + 's'}"


def reset() -> None:
    """Forget every kind's last line (a test that counts lines starts from a clean slate)."""
    with _lock:
        _last.clear()


class BackgroundStderr(logging.Handler):
    """Write formatted records to ``stream`` from a daemon thread, through a
    queue of at most ``capacity`` lines; past it lines are dropped (and the
    number dropped is written once the stream drains), so a caller never
    blocks on a stream nobody reads."""

    _STOP: Final = object()

    def __init__(self, stream: IO[str], capacity: int = 10_000) -> None:
        super().__init__()
        self.stream = stream
        self.dropped = 0
        self._queue: queue.Queue[object] = queue.Queue(capacity)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="refwire-log", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:  # a bad format string must not take the server down
            self.handleError(record)
            return
        try:
            self._queue.put_nowait(line)
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        reported = 0
        while True:
            if self._stopping.is_set():  # closing: write what is queued, then end (no waiting)
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    return
            else:
                item = self._queue.get()
            if item is self._STOP:
                return
            try:
                if self.dropped != reported:
                    self.stream.write(f"refwire: {self.dropped - reported} log line(s) dropped: the log was not being read\n")
                    reported = self.dropped
                self.stream.write(f"{item}\n")
                self.stream.flush()
            except (OSError, ValueError):  # the stream is gone: nothing more to write to
                return

    def close(self, timeout: float = 1.0) -> None:
        """Write what is queued (for at most ``timeout`` seconds in all), then stop.

        Never blocks on a full queue (the writer thread may be stuck on a stream
        nobody reads): the stop is flagged, and the thread ends once the queue
        is written or the stream fails; a thread still stuck past ``timeout`` is
        left behind (it is a daemon)."""
        self._stopping.set()
        try:
            self._queue.put_nowait(self._STOP)
        except queue.Full:
            pass  # the writer sees _stopping once it has written what is queued
        self._thread.join(timeout)
        super().close()
