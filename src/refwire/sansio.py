"""The one contract every Sans-IO connection machine follows, and the pieces
they share: the ``NEED_DATA`` sentinel, the receive side of frame-based
machines (:class:`FrameMachine`), the "closed inside a frame" error, and the
conversion of a core's local error into a remote one at the receive boundary.

The contract
============

Every connection machine of every protocol, client and server alike, has the
same methods (h11 and wsproto have the same shape; refwire has it across five
dialects).  Time is an input like bytes: every method that can depend on it
takes ``now`` (seconds, any monotonic origin) as a required keyword, so a
forgotten clock is a ``TypeError``, never time 0.

===============================  ===============================================
``receive_data(data, *, now)``   bytes the peer sent; ``b""`` means it closed
                                 its side (EOF)
``connection_lost(*, now)``      the transport broke (reset): no more input
``next_event()``                 the next event, or :data:`NEED_DATA`; raises
                                 :class:`~refwire.errors.RemoteProtocolError`
                                 once the events before a bad byte are out
``send(event, *, now)``          the application's event (a reply, a request,
                                 an ack); returns ``None``: the bytes go to
                                 ``data_to_send()``.  Verb helpers (``accept``,
                                 ``call``, ``append_*`` ...) build an event and
                                 call ``send``
``data_to_send()``               every byte the machine owes, once
``next_deadline()``              when ``handle_timer`` must next be called
                                 (``None``: no timer armed)
``handle_timer(*, now)``         run what is due at ``now`` (keepalives,
                                 timeouts); returns ``None``: it only queues
                                 events and bytes.  Calling it early is harmless
``send_failed(*, now)``          the driver could not write what
                                 ``data_to_send()`` gave it; the connection is
                                 over and the machine decides what is lost and
                                 what is kept for resending (table below)
``state``, ``transitions_seen``  the state, and the (state, input, new state)
                                 triples reached, for coverage reports
===============================  ===============================================

A driver (:func:`refwire.drivers.pump` is the one every refwire client and
server uses) does only this::

    machine.receive_data(await stream.receive_some(), now=clock())
    while (event := machine.next_event()) is not NEED_DATA:
        await on_event(event)                  # which may call machine.send(...)
    await stream.send_all(machine.data_to_send())
    # and, in parallel, sleeps until machine.next_deadline() to call
    # machine.handle_timer(now=clock())

For example, a Lumberjack server answering one window::

    from refwire.lumberjack import ServerConnection, ClientConnection, Batch, NEED_DATA
    client, server = ClientConnection(), ServerConnection()
    client.send_window([{"a": 1}], now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    batch = server.next_event()               # Batch(...)
    server.accept(batch, now=0.0)             # = server.send(Accept(batch), now=0.0)
    client.receive_data(server.data_to_send(), now=0.0)
    client.next_event()                       # AckReceived(seq=1, ...)

What ``send_failed`` means, per machine
---------------------------------------

==============================  ===============================================
Lumberjack client               the window stays unacked (``unacked()``); the
                                driver resends it on a new connection
Lumberjack server               batches not yet acked are not acked (the
                                client resends them)
Pravega client / writer         requests in flight fail; the writer session
                                resends what ``AppendSetup`` says the store
                                lacks on the next connection
Pravega segment store           replies not written are lost; appends already
                                stored stay stored (the writer's next
                                ``SetupAppend`` learns of them)
Pravega 2017 draft (both)       as Pravega: the writer resumes from the
                                connection-offset ack level
TANK client                     requests in flight fail with a clear error
TANK broker                     responses not written are lost; produced data
                                already stored stays stored
Seastar RPC client              calls in flight complete with a connection
                                error
Seastar RPC server              replies not written are lost
==============================  ===============================================

In every machine the connection is over after ``send_failed``: it moves to
its closed state and queues its closing event (``clean=False``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, ClassVar, Final, Protocol, runtime_checkable

from .errors import LimitExceeded, LocalProtocolError, ProtocolError, RemoteProtocolError

__all__ = ["NEED_DATA", "FrameMachine", "Machine", "NeedData", "closed_inside", "earliest", "to_remote"]


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


@runtime_checkable
class Machine(Protocol):
    """The connection-machine contract (see the module documentation)."""

    state: Any
    transitions_seen: set[tuple[str, str, str]]

    def receive_data(self, data: bytes | bytearray | memoryview, *, now: float) -> None: ...

    def connection_lost(self, *, now: float) -> None: ...

    def next_event(self) -> Any: ...

    def send(self, event: Any, *, now: float) -> None: ...

    def data_to_send(self) -> bytes: ...

    def next_deadline(self) -> float | None: ...

    def handle_timer(self, *, now: float) -> None: ...

    def send_failed(self, *, now: float) -> None: ...


def closed_inside(
    what: str,
    *,
    protocol: str,
    frame: str | None = None,
    field: str = "(eof)",
    offset: int | None = None,
    detail: str = "",
) -> LocalProtocolError:
    """The one "connection closed inside a frame" error every machine raises at an
    EOF that cuts ``what`` (``"a frame"``, ``"a batch"`` ...) short; ``detail`` says
    how much of it had arrived."""
    reason = f"connection closed inside {what}" + (f" ({detail})" if detail else "")
    return LocalProtocolError(reason, protocol=protocol, frame=frame, field=field, offset=offset)


def to_remote(exc: ProtocolError) -> RemoteProtocolError:
    """``exc`` as a :class:`RemoteProtocolError` (the peer sent something wrong), chained to it."""
    if isinstance(exc, RemoteProtocolError):
        return exc
    remote = exc.as_remote()
    remote.__cause__ = exc
    return remote


def earliest(*deadlines: float | None) -> float | None:
    """The earliest of the deadlines that are set (None if none is)."""
    due = [d for d in deadlines if d is not None]
    return min(due) if due else None


class FrameMachine:
    """The receive side every frame-based Sans-IO machine shares:
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
        #: the time of the latest call that passed ``now``
        self._now = 0.0
        #: (state, input, new state) triples reached, for coverage reports
        self.transitions_seen: set[tuple[str, str, str]] = set()
        #: Seconds a frame, once begun, may stay incomplete before the connection
        #: fails with a :class:`~refwire.errors.LimitExceeded` on field ``(timeout)``
        #: (servers set it: a peer trickling one byte at a time must not hold a
        #: connection for ever).  Between frames a connection may idle as long as
        #: the protocol allows.  None: never.
        self.frame_timeout: float | None = None
        self._partial_since: float | None = None
        self._partial_at = -1
        #: Seconds without a byte received before the connection fails with a
        #: :class:`~refwire.errors.LimitExceeded` on field ``(idle)``, counted from
        #: the latest input (or :meth:`set_idle_timeout`).  None: never (the default;
        #: machines whose protocol has an idle rule of its own keep theirs).
        self.idle_timeout: float | None = None
        self._last_input: float | None = None

    # -- input ----------------------------------------------------------------
    def receive_data(self, data: bytes | bytearray | memoryview, *, now: float) -> None:
        """Feed received bytes; ``b""`` means the peer closed its side (EOF)."""
        self._now = now
        if self._eof:
            if data:
                raise RuntimeError("receive_data after EOF")
            return
        if not data:
            self._eof = True
            self._input_ended()
            return
        self._last_input = now
        self._feed(data)

    def connection_lost(self, *, now: float) -> None:
        """The transport broke (reset): no more input."""
        self._now = now
        if self._reset:
            return
        self._eof = True
        self._reset = True
        self._input_ended()

    def send_failed(self, *, now: float) -> None:
        """The driver could not write: unwritten bytes are dropped and the
        connection ends as after a reset (subclasses add what is kept for
        resending; see the module's table)."""
        self._out.clear()
        self.connection_lost(now=now)

    def send(self, event: Any, *, now: float) -> None:
        """Queue the bytes of the application's ``event`` (see the subclass)."""
        raise NotImplementedError

    def set_idle_timeout(self, seconds: float | None, *, now: float) -> None:
        """Fail the connection after ``seconds`` without a byte received, counted
        from ``now`` (the accept) and then from each input; None: never."""
        self.idle_timeout = seconds
        self._last_input = now

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` is due (``None``: no timer); here the frame
        and idle timeouts (subclasses with timers of their own add theirs)."""
        return earliest(self._frame_deadline(), self._idle_deadline())

    def handle_timer(self, *, now: float) -> None:
        """Run what is due at ``now``: here the frame and idle timeouts."""
        self._now = now
        self._frame_timer(now)
        self._idle_timer(now)

    def next_event(self) -> Any:
        """The next event or :data:`NEED_DATA` (see :meth:`_next`)."""
        return self._next()

    def data_to_send(self) -> bytes:
        """Bytes the machine owes on its own (echoes, keepalives), once."""
        out = bytes(self._out)
        self._out.clear()
        return out

    @property
    def holds_input(self) -> bool:
        """Bytes received and not yet decoded (a frame begun), or events not yet
        taken: a server counts the connection busy (``refwire.admission``)."""
        if self._events:
            return True
        progress = self._receive_progress()
        return progress is not None and progress[0] > 0

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

    def _receive_progress(self) -> tuple[int, int] | None:
        """(bytes received and not yet decoded, stream offset of the first of
        them), for the frame timeout; None: this machine does not track it."""
        return None

    def _pending_frame_name(self) -> str | None:
        """The name of the frame begun and not complete, if its header says."""
        return None

    def _track_partial(self) -> None:
        """After decoding stopped for want of bytes: note when the frame now
        incomplete began (its stream offset changes when a frame completes)."""
        if self.frame_timeout is None:
            return
        progress = self._receive_progress()
        if progress is None or not progress[0]:
            self._partial_since = None
        elif self._partial_since is None or progress[1] != self._partial_at:
            self._partial_since, self._partial_at = self._now, progress[1]

    def _frame_deadline(self) -> float | None:
        # once input ended (EOF, reset) a partial frame can never complete: no timer
        if self._partial_since is None or self.frame_timeout is None or self._error is not None or self._eof:
            return None
        return self._partial_since + self.frame_timeout

    def _frame_timer(self, now: float) -> None:
        """Past the frame timeout the connection fails: :meth:`next_event` raises
        (a :class:`~refwire.errors.LimitExceeded` on field ``(timeout)``)."""
        due = self._frame_deadline()
        if due is None or now < due:
            return
        assert self._partial_since is not None and self.frame_timeout is not None
        buffered, at = self._receive_progress() or (0, self._partial_at)
        exc = LimitExceeded(
            f"a frame begun {now - self._partial_since:.1f}s ago is still incomplete "
            f"({buffered} bytes of it received): the limit frame_timeout={self.frame_timeout:g}s",
            protocol=self.PROTOCOL,
            frame=self._pending_frame_name(),
            field="(timeout)",
            offset=at,
        )
        self._fail(exc)
        self._partial_since = None

    def _idle_deadline(self) -> float | None:
        if self.idle_timeout is None or self._last_input is None or self._error is not None or self._eof:
            return None
        return self._last_input + self.idle_timeout

    def _idle_timer(self, now: float) -> None:
        """Past the idle timeout with no byte received the connection fails:
        :meth:`next_event` raises (a :class:`~refwire.errors.LimitExceeded` on field ``(idle)``)."""
        due = self._idle_deadline()
        if due is None or now < due:
            return
        assert self._last_input is not None and self.idle_timeout is not None
        self._fail(
            LimitExceeded(
                f"no byte received for {now - self._last_input:.1f}s: the limit idle_timeout={self.idle_timeout:g}s",
                protocol=self.PROTOCOL,
                field="(idle)",
            )
        )

    def _fail(self, exc: ProtocolError) -> None:
        """The connection fails with ``exc`` (raised by :meth:`next_event` once the events before it are out)."""
        if (self.state, "error") in self.TRANSITIONS:
            self._transition("error")
        else:
            self.state = self.ERROR_STATE
        self._error = to_remote(exc)

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
        self.transitions_seen.add((self.state._value_, inp, new._value_))  # _value_: .value is a Python-level property
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
            self._fail(exc)
        if events:
            return events.popleft()
        if self._error is not None:
            raise self._error
        self._track_partial()
        return NEED_DATA
