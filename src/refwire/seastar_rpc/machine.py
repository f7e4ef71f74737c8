"""Seastar RPC's server machine, :class:`ServerConnection`, and what both machines
share (specs/seastar-rpc/README.md §7; "§n" below is a section of that file).

* :class:`State` and the server's transition table (:data:`SERVER_TRANSITIONS`);
* the base both machines build on: the receive side is
  :class:`~refwire.sansio.FrameMachine`'s over a
  :class:`~refwire.seastar_rpc.frames.FrameDecoder`; every frame sent after the
  negotiation is wrapped in its envelope when a compressor was negotiated (§4);
  stream connections carry ``len:u32`` messages and end-of-stream (§5);
* :class:`ServerConnection`: the offer (§2), the server's choices (``accept`` /
  ``reject``), requests and oversized requests in, replies out, dropped past
  their propagated deadline (§3).

:mod:`refwire.seastar_rpc.connection` adds the client machine and re-exports
everything here; import the machines from there.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Final

import attrs

from ..errors import LocalProtocolError
from ..sansio import NEED_DATA, FrameMachine, NeedData, earliest
from ..speed import use_fast
from ..wire import Limits
from .compression import COMPRESSOR_NAMES, Compressor, choose_compressor, envelope_function, make_compressor
from .events import (
    Accept,
    CallReceived,
    ConnectionClosed,
    NegotiationRequested,
    OversizedCall,
    Reject,
    Respond,
    RespondError,
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
)

__all__ = [
    "FRAME_SHARE",
    "MAX_STREAMS",
    "NEGOTIATION_TIMED_OUT",
    "REQUEST_SHARE",
    "SERVER_TRANSITIONS",
    "STREAM_SHARE",
    "ServerConnection",
    "State",
    "memory_caps",
]

# --------------------------------------------------------------------------- the memory budget (§6)

#: An RPC connection's frame -- a request, an envelope, or what an envelope inflates
#: to -- may take ``max_connection_memory // FRAME_SHARE`` bytes (64 MiB of the
#: default 256 MiB: the frame limits' own value).  It costs about twice that while
#: it is received: the receive buffer and the copy cut or inflated from it (§6).
FRAME_SHARE: Final = 4
#: The requests in flight on one connection (admitted, their handlers running) may
#: hold ``max_connection_memory // REQUEST_SHARE`` bytes of data (16 MiB of 256 MiB:
#: ``max_memory``'s default), and as much again of replies may wait to be written
#: before the connection reads no more.  A request's byte costs about four times
#: itself: its data, the reply encoded from it, the connection's output buffer and
#: the bytes handed to the socket (§6).
REQUEST_SHARE: Final = 16
#: A stream connection's message may take ``max_connection_memory // STREAM_SHARE``
#: bytes, and its queue for the application as many (8 MiB each of 256 MiB) ...
STREAM_SHARE: Final = 32
#: ... and one RPC connection parents at most this many streams, which all count
#: against its budget (each holds up to about four times its share: the queue, the
#: message waiting to join it, the next one in the receive buffer, and the copy).
MAX_STREAMS: Final = 4


def memory_caps(limits: Limits, *, stream: bool = False) -> tuple[Limits, tuple[int, int] | None]:
    """The decoder's limits under ``max_connection_memory`` (§6): a frame of an RPC
    connection may take ``budget // FRAME_SHARE`` bytes, a stream connection's
    ``budget // STREAM_SHARE`` (compressed or inflated alike); and, when that cap is
    tighter than ``max_frame_size`` or ``max_decompressed_size``, ``(budget, cap)``
    (the decoder then names ``max_connection_memory`` in its refusal)."""
    budget = limits.max_connection_memory
    cap = budget // (STREAM_SHARE if stream else FRAME_SHARE)
    if cap < limits.max_frame_size or cap < limits.max_decompressed_size:
        return (
            attrs.evolve(
                limits,
                max_frame_size=min(cap, limits.max_frame_size),
                max_decompressed_size=min(cap, limits.max_decompressed_size),
            ),
            (budget, cap),
        )
    return limits, None



class State(enum.Enum):
    NEGOTIATING = "negotiating"  #: client: offer sent, no reply yet; server: no complete offer yet
    DECIDING = "deciding"  #: server: offer received, the application decides (accept / reject)
    READY = "ready"  #: an RPC connection after negotiation
    STREAMING = "streaming"  #: a stream connection after negotiation
    CLOSED = "closed"  #: EOF, reset, or rejected
    ERROR = "error"  #: a protocol error; nothing more is received


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

# --------------------------------------------------------------------------- shared


class _Machine(FrameMachine):
    """The receive side is :class:`~refwire.sansio.FrameMachine`'s; a reset (or a
    failed write) moves the machine to CLOSED at once (the buffered input is
    dropped), and a protocol error is the ``"error"`` transition.  ``fast`` chooses
    the decoder's path and the envelopes' (:func:`refwire.speed.use_fast`), once."""

    role: str
    PROTOCOL = PROTOCOL
    ERROR_STATE = State.ERROR
    CLOSED_STATE = State.CLOSED

    def __init__(self, kind: str, limits: Limits, fast: bool | None) -> None:
        super().__init__(State.NEGOTIATING)
        self.limits = limits
        #: whether this machine (and its decoder) takes the speed path (decided once, here)
        self.fast = use_fast(fast)
        self._decoder = FrameDecoder("request" if kind == "request" else "response", limits=limits, fast=self.fast)
        self._compressor: Compressor | None = None
        self._envelope = envelope_function(self.fast)
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
                raise LocalProtocolError(
                    "no-op frames exist only on compressed connections", protocol=PROTOCOL, frame="compressed"
                )
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
        return frame if self._compressor is None else self._envelope(self._compressor, frame)

    # -- streams ---------------------------------------------------------------
    def _on_stream_frame(self, frame: object) -> bool:
        if isinstance(frame, StreamMessage):
            if self.remote_eos:
                raise LocalProtocolError(
                    "stream message after end-of-stream", protocol=PROTOCOL, frame="stream", offset=self._decoder.offset
                )
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
        fast: the speed path (``None``: unless ``REFWIRE_REFERENCE`` is set).
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
        fast: bool | None = None,
    ) -> None:
        super().__init__("request", limits, fast)
        self.frame_timeout = frame_timeout
        self._negotiation_deadline = negotiation_deadline
        for name in compressors:
            make_compressor(name)
        self.compressors = tuple(compressors)
        self.multi_algo = multi_algo
        self.admit_len = admit_len
        self._decoder.limits, self._decoder.budget = memory_caps(limits)
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
            self._events.append(
                CallReceived(frame.verb, frame.msg_id, frame.payload, frame.timeout_ms, self._deadline(frame.timeout_ms), now)
            )
        elif isinstance(frame, OversizedRequest):
            self._transition("oversized")
            self._events.append(
                OversizedCall(frame.verb, frame.msg_id, frame.length, frame.timeout_ms, self._deadline(frame.timeout_ms), now)
            )
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
        if stream:  # a stream's messages take a smaller share of the budget (§6)
            self._decoder.limits, self._decoder.budget = memory_caps(self.limits, stream=True)
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
