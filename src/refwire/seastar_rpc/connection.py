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
"""

from __future__ import annotations

import enum
import heapq
import math
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import Final

import attrs

from ..errors import LocalProtocolError, ProtocolError
from ..sansio import NEED_DATA, FrameMachine, NeedData, earliest
from ..wire import Limits
from .compression import COMPRESSOR_NAMES, Compressor, choose_compressor, envelope, make_compressor
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
from .frames import (
    DEFAULT_LIMITS,
    PROTOCOL,
    UNMEASURED,
    Features,
    FrameDecoder,
    Negotiation,
    NoOp,
    OversizedRequest,
    RemoteException,
    Request,
    Response,
    StreamEnd,
    StreamMessage,
    UnknownVerb,
    UserError,
    decode_exception,
)

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


class State(enum.Enum):
    NEGOTIATING = "negotiating"  #: client: offer sent, no reply yet; server: no complete offer yet
    DECIDING = "deciding"  #: server: offer received, the application decides (accept / reject)
    READY = "ready"  #: an RPC connection after negotiation
    STREAMING = "streaming"  #: a stream connection after negotiation
    CLOSED = "closed"  #: EOF, reset, or rejected
    ERROR = "error"  #: a protocol error; nothing more is received


# Trusted construction of the client's Reply events (fields from the decoder's
# checked columns): through the slots, skipping the frozen __init__.
_new = object.__new__
_SET_REPLY_ID, _SET_REPLY_PAYLOAD, _SET_REPLY_DURATION = (Reply.__dict__[a.name].__set__ for a in attrs.fields(Reply))
assert [a.name for a in attrs.fields(Reply)] == ["msg_id", "payload", "handler_duration"]

_READY: Final = State.READY  # a module global: State.READY is a lookup through the Enum metaclass
_ALL_OPEN = (State.NEGOTIATING, State.DECIDING, State.READY, State.STREAMING)

#: ``ConnectionClosed.reason`` when the peer's negotiation frame did not come in time.
NEGOTIATION_TIMED_OUT: Final = "no negotiation frame in time"

# (state, input) -> next state.  Pairs not listed are refused (tests walk them all).
SERVER_TRANSITIONS: Final[dict[tuple[State, str], State]] = {
    (State.NEGOTIATING, "negotiation"): State.DECIDING,
    (State.NEGOTIATING, "timeout"): State.CLOSED,
    (State.DECIDING, "accept"): State.READY,
    (State.DECIDING, "accept-stream"): State.STREAMING,
    (State.DECIDING, "reject"): State.CLOSED,
    (State.READY, "request"): State.READY,
    (State.READY, "oversized"): State.READY,
    (State.READY, "noop"): State.READY,
    (State.STREAMING, "stream-message"): State.STREAMING,
    (State.STREAMING, "stream-end"): State.STREAMING,
    (State.STREAMING, "noop"): State.STREAMING,
    **{(s, "eof"): State.CLOSED for s in _ALL_OPEN},
    **{(s, "reset"): State.CLOSED for s in _ALL_OPEN},
    **{(s, "error"): State.ERROR for s in _ALL_OPEN},
}

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


# --------------------------------------------------------------------------- shared


class _Machine(FrameMachine):
    """The receive side is :class:`~refwire.sansio.FrameMachine`'s; a reset (or a
    failed write) moves the machine to CLOSED at once (the buffered input is
    dropped), and a protocol error is the ``"error"`` transition."""

    role: str
    PROTOCOL = PROTOCOL
    ERROR_STATE = State.ERROR
    CLOSED_STATE = State.CLOSED

    def __init__(self, kind: str, limits: Limits) -> None:
        super().__init__(State.NEGOTIATING)
        self.limits = limits
        self._decoder = FrameDecoder("request" if kind == "request" else "response", limits=limits)
        self._compressor: Compressor | None = None
        #: the driver could not write (:meth:`send_failed`): nothing more reaches the peer.
        self.write_failed = False
        #: when to give up waiting for the peer's negotiation frame (None: never).
        self._negotiation_deadline: float | None = None
        #: why a reset closed the connection (``send_failed`` says so).
        self._lost_reason = "reset"
        #: stream connections: this side sent / received end-of-stream.
        self.local_eos = False
        self.remote_eos = False

    def _receive_progress(self) -> tuple[int, int]:
        return self._decoder.buffered, self._decoder.offset

    @property
    def compressor(self) -> str | None:
        return None if self._compressor is None else self._compressor.name

    def send(self, event: object, *, now: float) -> None:
        """Queue the bytes of ``event`` (see the subclass for the events it takes)."""
        self._now = now
        if not self._send_common(event):
            raise TypeError(f"{type(self).__name__}.send() does not take {type(event).__name__}")

    def _send_common(self, event: object) -> bool:
        if isinstance(event, StreamMessage):
            self._check_stream_send()
            self._out += self._wrap(StreamMessage(bytes(event.payload)).encode())
        elif isinstance(event, StreamEnd):
            self._check_stream_send()
            self.local_eos = True
            self._out += self._wrap(StreamEnd().encode())
        elif isinstance(event, NoOp):
            if self._compressor is None:
                raise LocalProtocolError("no-op frames exist only on compressed connections", protocol=PROTOCOL,
                                         frame="compressed")
            self._out += b"\x00\x00\x00\x00"
        else:
            return False
        return True

    def send_failed(self, *, now: float) -> None:
        """The driver could not write: the connection is over (``ConnectionClosed(False,
        "write failed")``); the client's calls in flight fail with it, the server's
        unwritten replies are lost (refwire.sansio's table)."""
        self.write_failed = True
        self._lost_reason = "write failed"
        super().send_failed(now=now)

    def _feed(self, data: bytes | bytearray | memoryview) -> None:
        if self.state not in (State.CLOSED, State.ERROR):
            self._decoder.feed(data)

    def _input_ended(self) -> None:
        if self._reset and self.state in _ALL_OPEN and (self.state, "reset") in self.TRANSITIONS:
            self._transition("reset")
            self._closed(False, self._lost_reason)

    def _closed(self, clean: bool, reason: str) -> None:
        self._events.append(ConnectionClosed(clean, reason))

    def _negotiation_due(self, now: float) -> bool:
        """Give up on the peer's negotiation frame if its deadline has come."""
        deadline = self._negotiation_deadline
        if self.state is not State.NEGOTIATING or deadline is None or now < deadline:
            return False
        self._transition("timeout")
        self._closed(False, NEGOTIATION_TIMED_OUT)
        return True

    def next_event(self) -> object:
        return self._next()

    def _idle_event(self) -> NeedData | None:
        return NEED_DATA if self.state in (State.CLOSED, State.ERROR, State.DECIDING) else None

    def _pump(self) -> None:
        while not self._events:
            frame = self._decoder.next_frame()
            if frame is None:
                return
            self._on_frame(frame)

    def _at_eof(self) -> None:
        err = self._decoder.eof_error()
        if err is not None:
            raise err
        self._transition("eof")
        self._closed(True, "eof")

    def _on_frame(self, frame: object) -> None:
        raise NotImplementedError

    def _wrap(self, frame: bytes) -> bytes:
        return frame if self._compressor is None else envelope(self._compressor, frame)

    # -- streams ---------------------------------------------------------------
    def _on_stream_frame(self, frame: object) -> bool:
        if isinstance(frame, StreamMessage):
            if self.remote_eos:
                raise LocalProtocolError("stream message after end-of-stream", protocol=PROTOCOL, frame="stream",
                                         offset=self._decoder.offset)
            self._transition("stream-message")
        elif isinstance(frame, StreamEnd):
            if self.remote_eos:
                raise LocalProtocolError("a second end-of-stream", protocol=PROTOCOL, frame="stream", offset=self._decoder.offset)
            self._transition("stream-end")
            self.remote_eos = True
        else:
            return False
        self._events.append(frame)
        return True

    def send_stream(self, payload: bytes, *, now: float) -> None:
        """One stream message (stream connections only): ``send(StreamMessage(payload))``."""
        self.send(StreamMessage(bytes(payload)), now=now)

    def send_stream_end(self, *, now: float) -> None:
        """This side's end-of-stream; nothing may be sent after it: ``send(StreamEnd())``."""
        self.send(StreamEnd(), now=now)

    def _check_stream_send(self) -> None:
        if self.state is not State.STREAMING:
            raise LocalProtocolError(f"not a stream connection (state {self.state.value})", protocol=PROTOCOL, frame="stream")
        if self.local_eos:
            raise LocalProtocolError("this side already sent end-of-stream", protocol=PROTOCOL, frame="stream")

    @property
    def stream_done(self) -> bool:
        """End-of-stream went both ways: the connection may be closed (§5)."""
        return self.local_eos and self.remote_eos

    def send_noop(self, *, now: float) -> None:
        """The universal no-op compressed frame ``00 00 00 00`` (§4): ``send(NoOp())``."""
        self.send(NoOp(), now=now)


# --------------------------------------------------------------------------- server


class ServerConnection(_Machine):
    """The server side of one connection (RPC or, after STREAM_PARENT, stream).

    Args:
        compressors: names accepted, in the server's order (the client's order decides).
        multi_algo: ``False`` mimics a server with one plain factory (the offer must
            be exactly one accepted name).
        admit_len: requests with more data bytes are skipped unread and reported as
            :class:`OversizedCall` (the server answers with a USER exception).
        negotiation_deadline: when to give up waiting for the client's negotiation
            frame (absolute, on the clock of ``now``; ``None``: wait forever, as Seastar).
    """

    role = "server"
    TRANSITIONS = SERVER_TRANSITIONS

    def __init__(
        self,
        *,
        limits: Limits = DEFAULT_LIMITS,
        compressors: Sequence[str] = COMPRESSOR_NAMES,
        multi_algo: bool = True,
        admit_len: int | None = None,
        negotiation_deadline: float | None = None,
        frame_timeout: float | None = None,
    ) -> None:
        super().__init__("request", limits)
        self.frame_timeout = frame_timeout
        self._negotiation_deadline = negotiation_deadline
        for name in compressors:
            make_compressor(name)
        self.compressors = tuple(compressors)
        self.multi_algo = multi_algo
        self.admit_len = admit_len
        #: the client's offer, once received.
        self.offer: Features | None = None
        #: what this server replied.
        self.reply: Features | None = None

    def _on_frame(self, frame: object) -> None:
        now = self._now
        if isinstance(frame, Negotiation):
            self.offer = Features.from_negotiation(frame)
            self._transition("negotiation")
            self._events.append(NegotiationRequested(self.offer, frame))
        elif isinstance(frame, Request):
            self._transition("request")
            self._events.append(CallReceived(frame.verb, frame.msg_id, frame.payload, frame.timeout_ms,
                                             self._deadline(frame.timeout_ms), now))
        elif isinstance(frame, OversizedRequest):
            self._transition("oversized")
            self._events.append(OversizedCall(frame.verb, frame.msg_id, frame.length, frame.timeout_ms,
                                              self._deadline(frame.timeout_ms), now))
        elif isinstance(frame, NoOp):
            self._transition("noop")
        elif not self._on_stream_frame(frame):
            raise LocalProtocolError(f"unexpected {type(frame).__name__}", protocol=PROTOCOL)

    def _deadline(self, timeout_ms: int | None) -> float | None:
        # Relative ms, 0 = none; Python ints cannot overflow, so no saturation is needed (§3).
        return None if not timeout_ms else self._now + timeout_ms / 1000.0

    @property
    def is_stream(self) -> bool:
        return self.offer is not None and self.offer.stream_parent is not None

    # -- timers ----------------------------------------------------------------------
    def next_deadline(self) -> float | None:
        """The negotiation deadline while no offer has come, and the frame and idle timeouts."""
        return earliest(
            self._negotiation_deadline if self.state is State.NEGOTIATING else None, self._frame_deadline(), self._idle_deadline()
        )

    def handle_timer(self, *, now: float) -> None:
        """Past the negotiation deadline with no offer: close (:data:`NEGOTIATION_TIMED_OUT`);
        a frame begun ``frame_timeout`` s ago and still incomplete fails the connection."""
        self._now = now
        self._negotiation_due(now)
        self._frame_timer(now)
        self._idle_timer(now)

    def send(self, event: object, *, now: float) -> None:
        """Queue the bytes of :class:`Accept`, :class:`Reject` (none),
        :class:`Respond`, :class:`RespondError`, ``StreamMessage``, ``StreamEnd``
        or ``NoOp``."""
        self._now = now
        if isinstance(event, (Respond, RespondError)):
            if not self.reply_wanted(event.call, now=now):
                return  # past its propagated deadline (§3), or the connection is gone: dropped
            if isinstance(event, Respond):
                self._response(event.call.msg_id, bytes(event.payload), event.handler_duration)
            else:
                self._response(-event.call.msg_id, event.error.encode(), event.handler_duration)
        elif isinstance(event, Accept):
            self._accept(event.connection_id)
        elif isinstance(event, Reject):
            self._transition("reject")
            self._closed(False, event.reason or "rejected")
        elif not self._send_common(event):
            raise TypeError(f"ServerConnection.send() does not take {type(event).__name__}")

    def accept(self, *, connection_id: int | None = None, now: float) -> None:
        """Answer the offer as Seastar does (§2): ``send(Accept(connection_id))``.

        ``connection_id`` is sent when given (a server with streaming configured
        always gives one).  The compressor is the first of the client's names this
        server accepts; TIMEOUT, HANDLER_DURATION and ISOLATION are echoed;
        STREAM_PARENT and unknown features are not.
        """
        self.send(Accept(connection_id), now=now)

    def _accept(self, connection_id: int | None) -> None:
        offer = self.offer
        if offer is None or self.state is not State.DECIDING:
            raise LocalProtocolError(f"accept() in state {self.state.value}", protocol=PROTOCOL, frame="negotiation")
        name = None
        if offer.compress is not None:
            name = choose_compressor(offer.compress, self.compressors, multi_algo=self.multi_algo)
        self.reply = Features(
            compress=name,
            timeout=offer.timeout,
            connection_id=connection_id,
            isolation=offer.isolation,
            handler_duration=offer.handler_duration,
        )
        self._compressor = None if name is None else make_compressor(name)
        stream = offer.stream_parent is not None
        self._transition("accept-stream" if stream else "accept")
        self._decoder.configure(
            kind="stream" if stream else "request",
            timeout=offer.timeout,
            compressor=self._compressor,
            discard_over=None if stream else self.admit_len,
        )
        self._out += self.reply.encode()

    def reject(self, reason: str = "", *, now: float) -> None:
        """Close without a reply (bad isolation cookie, unknown stream parent ...): ``send(Reject(reason))``."""
        self.send(Reject(reason), now=now)

    # -- replies -----------------------------------------------------------------
    def reply_wanted(self, call: CallReceived | OversizedCall, *, now: float) -> bool:
        """Whether a reply to ``call`` at ``now`` is sent: False once its propagated
        deadline has passed (§3) or the connection is gone (EOF, reset, error), as
        Seastar drops it."""
        if call.deadline is not None and now > call.deadline:
            return False
        return self.state not in (State.CLOSED, State.ERROR)

    def _response(self, msg_id: int, payload: bytes, duration: int) -> None:
        if self.state is not State.READY:
            raise LocalProtocolError(f"cannot reply in state {self.state.value}", protocol=PROTOCOL, frame="response")
        assert self.reply is not None
        d = duration if 0 <= duration < UNMEASURED else UNMEASURED
        self._out += self._wrap(Response(msg_id, payload, d).encode(with_duration=self.reply.handler_duration))

    def respond(self, call: CallReceived, payload: bytes, *, now: float, handler_duration: int = UNMEASURED) -> None:
        """The reply to ``call`` (nothing if :meth:`reply_wanted` says no): ``send(Respond(...))``."""
        self.send(Respond(call, bytes(payload), handler_duration), now=now)

    def respond_error(
        self, call: CallReceived | OversizedCall, error: RemoteException, *, now: float, handler_duration: int = UNMEASURED
    ) -> None:
        """An exception reply (id negated; nothing past the deadline): ``send(RespondError(...))``."""
        self.send(RespondError(call, error, handler_duration), now=now)

    def respond_unknown_verb(self, call: CallReceived, *, now: float) -> None:
        """UNKNOWN_VERB, duration not measured (§3) -- sent even for one-way calls."""
        self.respond_error(call, UnknownVerb(call.verb), now=now)

    def respond_oversized(self, call: OversizedCall, *, estimate: int, max_memory: int, now: float) -> None:
        """The USER exception Seastar sends for a request over the memory limit (§3)."""
        self.respond_error(call, UserError(oversized_message(estimate, max_memory)), now=now)


# --------------------------------------------------------------------------- client


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
    ) -> None:
        super().__init__("response", limits)
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
        #: the responses of the run being delivered (msg id, payload, duration), one per next_event
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
        # The hot path: once negotiated, regular responses are decoded a run at a
        # time in columns (FrameDecoder.next_responses) and each becomes its event
        # only when the application asks for the next one -- as a frame decoded
        # from the buffer would -- so a cancel or a timer between two events
        # makes a later reply stray exactly as before.  Anything else, and the
        # responses the run stopped before, go frame by frame (_on_frame).
        events = self._events
        decoder = self._decoder
        while not events:
            replies = self._replies
            if replies is not None:
                item = next(replies, None)
                if item is not None:
                    msg_id, payload, duration = item
                    self._transition("response")
                    pending = self._pending
                    if msg_id in pending:
                        del pending[msg_id]
                        reply = _new(Reply)
                        _SET_REPLY_ID(reply, msg_id)
                        _SET_REPLY_PAYLOAD(reply, payload)
                        _SET_REPLY_DURATION(reply, duration)
                        events.append(reply)
                    else:
                        events.append(StrayReply(msg_id, 1 <= msg_id < self._next_id, None))
                    continue
                self._replies = None
            if self.state is _READY:
                run = decoder.next_responses()
                if run is not None:
                    durations = run.durations
                    # (not strict: repeat() is endless; a run's columns have one length)
                    self._replies = zip(run.msg_ids, run.payloads, repeat(None) if durations is None else durations, strict=False)
                    continue
            frame = decoder.next_frame()
            if frame is None:
                return
            self._on_frame(frame)

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
                raise LocalProtocolError(f"RPC server responded with compression {name} - unsupported",
                                         protocol=PROTOCOL, frame="negotiation", field="COMPRESS", offset=12)
            self._compressor = make_compressor(chosen)
        self.reply = reply
        self.connection_id = reply.connection_id
        stream = self.is_stream
        self._transition("negotiated-stream" if stream else "negotiated")
        self._decoder.configure(kind="stream" if stream else "response", duration=reply.handler_duration,
                                compressor=self._compressor)
        self._events.append(Negotiated(reply, self.compressor, reply.connection_id))
        queued, self._queue = self._queue, []
        for q in queued:
            self._write(q)

    def _on_response(self, frame: Response) -> None:
        self._transition("response")
        mid = abs(frame.msg_id)
        if mid in self._pending:
            del self._pending[mid]
            if frame.msg_id >= 0:
                reply = _new(Reply)
                _SET_REPLY_ID(reply, mid)
                _SET_REPLY_PAYLOAD(reply, frame.payload)
                _SET_REPLY_DURATION(reply, frame.handler_duration)
                self._events.append(reply)
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
        self._replies = None  # (never read once closed: a reset drops what was buffered)
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
