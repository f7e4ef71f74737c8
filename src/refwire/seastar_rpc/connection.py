"""Seastar RPC Sans-IO connections: :class:`ClientConnection` and :class:`ServerConnection`
(specs/seastar-rpc/README.md §7; "§n" below is a section of that file).

Both follow :mod:`refwire.sansio`'s contract: ``receive_data(data, *, now)``
(``b""`` = EOF), ``connection_lost(*, now)``, ``next_event()`` -> event or
:data:`NEED_DATA`, ``send(event, *, now)`` with the events of
:mod:`~refwire.seastar_rpc.events` (``Negotiate``, ``Call``, ``Accept``,
``Reject``, ``Respond``, ``RespondError``, and the frames ``StreamMessage``,
``StreamEnd``, ``NoOp``), every byte out of ``data_to_send()``,
``next_deadline()`` / ``handle_timer(*, now)`` (the client's call timeouts) and
``send_failed(*, now)``.  The verb helpers (``initiate``, ``call``, ``accept``,
``respond`` ...) build an event and call ``send``.  No I/O, no clock, no randomness.

Semantics (specs/seastar-rpc/README.md):

* The client sends its negotiation frame at once and **never** sends a request
  before the server's reply (§1): calls made earlier are queued and written
  when the reply arrives, with the time left *then*; a call whose deadline passed
  while queued is not sent at all (§3).
* msg ids start at 1 and grow by one per call, one-way calls included; never
  reused (§3).  The server answers whatever id it gets, negated for exceptions.
* A propagated timeout is relative ms, 0 = none (§3); the server drops a reply
  whose deadline has passed, sending nothing.
* Refwire's one addition: either side may give up waiting for the other's
  negotiation frame (``negotiation_timeout`` / ``negotiation_deadline``; Seastar
  waits forever): the ``timeout`` transition to CLOSED, ``ConnectionClosed(False,
  NEGOTIATION_TIMED_OUT)``.
* A stream connection (STREAM_PARENT, §5) carries ``len:u32`` messages and
  ``0xffffffff`` end-of-stream in both directions, and has no ids or timeouts.

The client machine is here; the server machine, :class:`State` and what both
share are :mod:`refwire.seastar_rpc.machine`'s (re-exported here).  Both take
``fast=`` (:func:`refwire.speed.use_fast`, decided once at construction): the
plain path turns every frame into its event as above; the speed path decodes
with the decoder's speed path, builds envelopes in one piece, and lets the client
deliver runs of responses (:mod:`refwire.seastar_rpc._fast_connection`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Final, TypedDict

import attrs

from ..errors import LocalProtocolError, ProtocolError
from ..sansio import NEED_DATA
from ..wire import Limits
from .compression import make_compressor
from .events import (
    Accept,
    Call,
    CallFailed,
    CallReceived,
    CallTimedOut,
    ConnectionClosed,
    Negotiate,
    Negotiated,
    NegotiationRequested,
    OversizedCall,
    Reject,
    Reply,
    Respond,
    RespondError,
    StrayReply,
    oversized_message,
)
from .frames import DEFAULT_LIMITS, PROTOCOL, Features, Negotiation, NoOp, Request, Response, decode_exception
from .machine import _ALL_OPEN, NEGOTIATION_TIMED_OUT, SERVER_TRANSITIONS, ServerConnection, State, _Machine

__all__ = [
    "CLIENT_TRANSITIONS",
    "NEED_DATA",
    "NEGOTIATION_TIMED_OUT",
    "SERVER_TRANSITIONS",
    "Accept",
    "Call",
    "CallFailed",
    "CallReceived",
    "CallTimedOut",
    "ClientConnection",
    "ConnectionClosed",
    "Negotiate",
    "Negotiated",
    "NegotiationRequested",
    "OversizedCall",
    "Reject",
    "Reply",
    "Respond",
    "RespondError",
    "ServerConnection",
    "State",
    "StrayReply",
    "oversized_message",
]


CLIENT_TRANSITIONS: Final[dict[tuple[State, str], State]] = {
    (State.NEGOTIATING, "negotiated"): State.READY,
    (State.NEGOTIATING, "timeout"): State.CLOSED,
    (State.NEGOTIATING, "negotiated-stream"): State.STREAMING,
    (State.READY, "response"): State.READY,
    (State.READY, "noop"): State.READY,
    (State.STREAMING, "stream-message"): State.STREAMING,
    (State.STREAMING, "stream-end"): State.STREAMING,
    (State.STREAMING, "noop"): State.STREAMING,
    **{(s, "eof"): State.CLOSED for s in _ALL_OPEN if s is not State.DECIDING},
    **{(s, "reset"): State.CLOSED for s in _ALL_OPEN if s is not State.DECIDING},
    **{(s, "error"): State.ERROR for s in _ALL_OPEN if s is not State.DECIDING},
}


@attrs.define
class _Queued:
    msg_id: int
    verb: int
    payload: bytes
    deadline: float | None


class ClientConnection(_Machine):
    """The client side of one connection.

    Args:
        compressors: names offered, in preference order (``("LZ4", "LZ4_FRAGMENTED")``).
        timeout: offer TIMEOUT (Seastar's default: on; forced off on stream connections).
        handler_duration: offer HANDLER_DURATION (default on).
        isolation: the isolation cookie (sent only when non-empty).
        stream_parent: make this a stream connection of that parent connection id.
        negotiation_timeout: seconds from :meth:`initiate` to give up waiting for the
            server's reply (``None``: wait forever, as Seastar).
        fast: the speed path (``None``: unless ``REFWIRE_REFERENCE`` is set).
    """

    role = "client"
    TRANSITIONS = CLIENT_TRANSITIONS

    def __init__(
        self,
        *,
        limits: Limits = DEFAULT_LIMITS,
        compressors: Sequence[str] = (),
        timeout: bool = True,
        handler_duration: bool = True,
        isolation: bytes | None = None,
        stream_parent: int | None = None,
        extra_features: Sequence[tuple[int, bytes]] = (),
        negotiation_timeout: float | None = None,
        fast: bool | None = None,
    ) -> None:
        super().__init__("response", limits, fast)
        for name in compressors:
            make_compressor(name)
        self.offer = Features(
            compress=",".join(compressors) if compressors else None,
            timeout=timeout and stream_parent is None,
            stream_parent=stream_parent,
            isolation=isolation or None,
            handler_duration=handler_duration,
            unknown=tuple(extra_features),
        )
        self._offered = tuple(compressors)
        self.negotiation_timeout = negotiation_timeout
        self.reply: Features | None = None
        #: this connection's id, from the server (``None``: no streaming there).
        self.connection_id: int | None = None
        self._next_id = 1
        self._pending: dict[int, float | None] = {}
        self._timers: list[tuple[float, int]] = []
        self._queue: list[_Queued] = []
        #: how buffered input becomes events: frame by frame (the plain path), or the
        #: speed path's, which also delivers runs of responses (decided once, here)
        self._pump_path: Callable[[ClientConnection], None] = _SPEED["client_pump"] if self.fast else _Machine._pump
        #: the speed path's state: the responses of the run being delivered (msg id,
        #: payload, duration), one per next_event
        self._replies: Iterator[tuple[int, bytes, int | None]] | None = None

    def send(self, event: object, *, now: float) -> None:
        """Queue the bytes of :class:`Negotiate`, :class:`Call` (its msg id is
        :attr:`next_msg_id` before the send; :meth:`call` returns it),
        ``StreamMessage``, ``StreamEnd`` or ``NoOp``."""
        self._now = now
        if isinstance(event, Call):
            self._call(event, now)
        elif isinstance(event, Negotiate):
            self._out += self.offer.encode()
            if self.negotiation_timeout is not None and self.state is State.NEGOTIATING:
                self._negotiation_deadline = now + self.negotiation_timeout
        elif not self._send_common(event):
            raise TypeError(f"ClientConnection.send() does not take {type(event).__name__}")

    def initiate(self, *, now: float) -> None:
        """The negotiation frame, sent as soon as the connection is up: ``send(Negotiate())``."""
        self.send(Negotiate(), now=now)

    @property
    def is_stream(self) -> bool:
        return self.offer.stream_parent is not None

    @property
    def pending(self) -> tuple[int, ...]:
        """Calls waiting for a reply."""
        return tuple(self._pending)

    @property
    def next_msg_id(self) -> int:
        return self._next_id

    # -- calls ---------------------------------------------------------------------
    def call(self, verb: int, payload: bytes = b"", *, now: float, timeout: float | None = None, one_way: bool = False) -> int:
        """Start a call (``send(Call(...))``); return its msg id.  The bytes come out of
        :meth:`data_to_send` (at once when negotiated, else when the server's reply arrives)."""
        msg_id = self._next_id
        self.send(Call(verb, bytes(payload), timeout, one_way), now=now)
        return msg_id

    def _call(self, ev: Call, now: float) -> None:
        if self.state not in (State.NEGOTIATING, State.READY) or self.is_stream:
            raise LocalProtocolError(f"cannot call in state {self.state.value}", protocol=PROTOCOL, frame="request")
        timeout, one_way = ev.timeout, ev.one_way
        if timeout is not None and timeout < 0:
            raise ValueError("timeout must not be negative")
        msg_id = self._next_id
        self._next_id += 1
        deadline = None if timeout is None else now + timeout
        if not one_way:
            self._pending[msg_id] = deadline
            if deadline is not None:
                heapq.heappush(self._timers, (deadline, msg_id))
        q = _Queued(msg_id, ev.verb, bytes(ev.payload), deadline)
        if self.state is State.READY:
            self._write(q)
        else:
            self._queue.append(q)

    def _write(self, q: _Queued) -> None:
        timeout_ms = 0
        if q.deadline is not None:
            left = q.deadline - self._now
            if left <= 0:
                return  # expired while queued: never sent (§3); its timer reports the timeout
            # Seastar truncates to whole ms, so < 1 ms left becomes 0 = "no timeout"; we send 1.
            timeout_ms = max(1, math.floor(left * 1000))
        assert self.reply is not None
        frame = Request(q.verb, q.msg_id, q.payload, timeout_ms).encode(with_timeout=self.reply.timeout)
        self._out += self._wrap(frame)

    def cancel(self, msg_id: int) -> None:
        """Forget a pending call (the application gave up); a later reply is stray."""
        self._pending.pop(msg_id, None)

    # -- receiving -----------------------------------------------------------------
    def _pump(self) -> None:
        """Every frame decoded becomes its event (the plain path: the base's
        ``_pump``, then :meth:`_on_frame`), or the speed path's runs."""
        self._pump_path(self)

    def _on_frame(self, frame: object) -> None:
        if isinstance(frame, Negotiation):
            self._on_negotiation(Features.from_negotiation(frame))
        elif isinstance(frame, Response):
            self._on_response(frame)
        elif isinstance(frame, NoOp):
            self._transition("noop")
        elif not self._on_stream_frame(frame):
            raise LocalProtocolError(f"unexpected {type(frame).__name__}", protocol=PROTOCOL)

    def _on_negotiation(self, reply: Features) -> None:
        name = reply.compress
        if name is not None:
            chosen = None
            for mine in self._offered:
                if mine in name.split(","):
                    chosen = mine
                    break
            if chosen is None:
                raise LocalProtocolError(
                    f"RPC server responded with compression {name} - unsupported",
                    protocol=PROTOCOL,
                    frame="negotiation",
                    field="COMPRESS",
                    offset=12,
                )
            self._compressor = make_compressor(chosen)
        self.reply = reply
        self.connection_id = reply.connection_id
        stream = self.is_stream
        self._transition("negotiated-stream" if stream else "negotiated")
        self._decoder.configure(
            kind="stream" if stream else "response", duration=reply.handler_duration, compressor=self._compressor
        )
        self._events.append(Negotiated(reply, self.compressor, reply.connection_id))
        queued, self._queue = self._queue, []
        for q in queued:
            self._write(q)

    def _on_response(self, frame: Response) -> None:
        """A reply completes its pending call; any other is stray, never fatal (§3)."""
        self._transition("response")
        mid = abs(frame.msg_id)
        if mid in self._pending:
            del self._pending[mid]
            if frame.msg_id >= 0:
                self._events.append(Reply(mid, frame.payload, frame.handler_duration))
            else:
                # A malformed exception for a pending call drops the connection (§1).
                err = decode_exception(frame.payload, base=self._decoder.offset - len(frame.payload))
                self._events.append(CallFailed(mid, err, frame.handler_duration))
            return
        error = None
        if frame.msg_id < 0:
            try:
                error = decode_exception(frame.payload)
            except ProtocolError:
                error = None
        self._events.append(StrayReply(frame.msg_id, 1 <= mid < self._next_id, error))

    def _closed(self, clean: bool, reason: str) -> None:
        self._replies = None  # (the speed path's run: never read once closed, a reset drops what was buffered)
        pending = tuple(self._pending)
        self._pending.clear()
        self._queue.clear()
        self._events.append(ConnectionClosed(clean, reason, pending))

    # -- timers ----------------------------------------------------------------------
    def _next_call_deadline(self) -> float | None:
        timers = self._timers
        # a timer is stale once its call is answered, cancelled or timed out (NaN: no
        # deadline equals it, where -1.0 matched a call due at -1.0 on a clock below 0)
        while timers and self._pending.get(timers[0][1], math.nan) != timers[0][0]:
            heapq.heappop(timers)
        return timers[0][0] if timers else None

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must run next (the earliest pending call
        deadline, or the negotiation deadline while waiting for the reply)."""
        call = self._next_call_deadline()
        neg = self._negotiation_deadline if self.state is State.NEGOTIATING else None
        if neg is None or (call is not None and call < neg):
            return call
        return neg

    def handle_timer(self, *, now: float) -> None:
        """Report every pending call whose deadline is ``<= now`` as :class:`CallTimedOut`,
        then close if the negotiation reply is overdue (:data:`NEGOTIATION_TIMED_OUT`;
        the calls still pending fail with it)."""
        self._now = now
        while True:
            deadline = self._next_call_deadline()
            if deadline is None or deadline > now:
                break
            _, msg_id = heapq.heappop(self._timers)
            del self._pending[msg_id]
            self._events.append(CallTimedOut(msg_id))
        self._negotiation_due(now)


# --------------------------------------------------------------------------- the speed path's hook


class _SpeedPath(TypedDict, total=False):
    """The speed path's functions (:mod:`refwire.seastar_rpc._fast_connection`)."""

    client_pump: Callable[[ClientConnection], None]


#: Filled by :mod:`refwire.seastar_rpc._fast_connection` when it is imported (the
#: package's ``__init__`` imports it, so before any use); read only by a machine
#: that takes the speed path.  This module never imports the speed path itself.
_SPEED: Final[_SpeedPath] = {}
