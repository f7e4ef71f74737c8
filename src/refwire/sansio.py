"""Pieces every Sans-IO connection shares (DESIGN.md §1): the ``NEED_DATA``
sentinel and the conversion of a core's local error into a remote one at the
receive boundary."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, ClassVar, Final

from .errors import LocalProtocolError, ProtocolError, RemoteProtocolError

__all__ = ["NEED_DATA", "FrameMachine", "NeedData", "to_remote"]


class NeedData:
    """Sentinel: the machine needs more bytes before it can produce an event."""

    _instance: NeedData | None = None

    def __new__(cls) -> NeedData:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData()


def to_remote(exc: ProtocolError) -> RemoteProtocolError:
    """``exc`` as a :class:`RemoteProtocolError` (the peer sent something wrong), chained to it."""
    if isinstance(exc, RemoteProtocolError):
        return exc
    remote = exc.as_remote()
    remote.__cause__ = exc
    return remote


class FrameMachine:
    """The receive side every frame-based Sans-IO machine shares (DESIGN.md §1):
    EOF and reset, bytes the machine owes on its own, the transition table as
    data (with the transitions seen, for coverage), the event queue, and the
    error boundary (a local error becomes a remote one, raised after the events
    decoded before the bad byte).

    Subclasses set ``PROTOCOL``, ``TRANSITIONS`` ((state, input) -> state),
    ``ERROR_STATE`` and ``CLOSED_STATE``, and implement :meth:`_feed`,
    :meth:`_pump` (decode what is buffered into events) and :meth:`_at_eof`.
    A table that lists an ``"error"`` input records a failure as that
    transition; otherwise the machine just moves to ``ERROR_STATE``.
    """

    PROTOCOL: ClassVar[str]
    TRANSITIONS: ClassVar[Mapping[tuple[Any, str], Any]]
    ERROR_STATE: ClassVar[Any]
    CLOSED_STATE: ClassVar[Any]

    def __init__(self, initial_state: Any) -> None:
        self.state: Any = initial_state
        self._events: deque[Any] = deque()
        self._out = bytearray()
        self._eof = False
        self._reset = False
        self._error: RemoteProtocolError | None = None
        #: (state, input, new state) triples reached, for coverage reports
        self.transitions_seen: set[tuple[str, str, str]] = set()

    # -- input ----------------------------------------------------------------
    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed received bytes; ``b""`` means the peer closed its side (EOF)."""
        if self._eof:
            if data:
                raise RuntimeError("receive_data after EOF")
            return
        if not data:
            self._eof = True
            self._input_ended()
            return
        self._feed(data)

    def connection_lost(self) -> None:
        """The transport broke (reset): no more input."""
        self._eof = True
        self._reset = True
        self._input_ended()

    def data_to_send(self) -> bytes:
        """Bytes the machine owes on its own (echoes, keepalives), once."""
        out = bytes(self._out)
        self._out.clear()
        return out

    # -- for subclasses -----------------------------------------------------------
    def _feed(self, data: bytes | bytearray | memoryview) -> None:
        raise NotImplementedError

    def _pump(self) -> None:
        """Decode buffered input into ``self._events``."""
        raise NotImplementedError

    def _at_eof(self) -> None:
        """Input ended with nothing left to decode: append the closing event (or raise)."""
        raise NotImplementedError

    def _input_ended(self) -> None:
        """Called as soon as input ends (EOF, or reset: ``self._reset``), before what is
        buffered is decoded.  Machines that record the end at once transition here;
        by default the end is handled by :meth:`_at_eof`, after the buffered input."""

    def _idle_event(self) -> Any:
        """What to return instead of decoding in the current state (None: decode)."""
        return None

    def _transition(self, inp: str, *, offset: int | None = None, frame: str | None = None) -> None:
        new = self.TRANSITIONS.get((self.state, inp))
        if new is None:
            raise LocalProtocolError(
                f"{frame or inp} is not allowed in state {self.state.value}",
                protocol=self.PROTOCOL,
                frame=frame,
                field="type",
                offset=offset,
            )
        self.transitions_seen.add((self.state.value, inp, new.value))
        self.state = new

    def _next(self) -> Any:
        """The next event or :data:`NEED_DATA`; raises the remote error once
        the events before it are out."""
        events = self._events
        if events:
            return events.popleft()
        if self._error is not None:
            raise self._error
        idle = self._idle_event()
        if idle is not None:
            return idle
        try:
            self._pump()
            if not events and self._eof:
                self._at_eof()
        except ProtocolError as exc:
            if (self.state, "error") in self.TRANSITIONS:
                self._transition("error")
            else:
                self.state = self.ERROR_STATE
            self._error = to_remote(exc)
        if events:
            return events.popleft()
        if self._error is not None:
            raise self._error
        return NEED_DATA
