"""TANK Sans-IO connections: the client and the broker side (specs/tank/README.md §1, §6).

Both follow the one machine contract of :mod:`refwire.sansio`:
``receive_data(data, *, now)`` (``b""`` = EOF), ``connection_lost(*, now)``,
``next_event()`` → event or :data:`NEED_DATA`, ``send(event, *, now)`` (bytes go
to ``data_to_send()``, which also gives the bytes the machine owes on its own:
the broker's Ping on accept, the client's idle keepalive Pings),
``next_deadline()`` / ``handle_timer(*, now)`` and ``send_failed(*, now)``.
No I/O, clock or randomness.

The client matches responses to requests by request id (long polls are
answered out of order), decodes produce responses against the remembered
(topic, partition) list, and walks consume chunks with
:func:`~refwire.tank.bundles.read_chunk`; when the connection ends, the
requests still in flight are named in its :class:`~refwire.tank.events.ConnectionClosed`
(``unanswered``: their outcome is unknown).  ``ClientConnection(fast=...)`` chooses
the chunk walk's path once (:func:`refwire.speed.use_fast`): the speed path's
columns unless ``fast=False`` or ``REFWIRE_REFERENCE=1``.  The broker side splits frames,
decodes requests and tracks idleness (an :class:`~refwire.tank.events.IdleTimeout` event after 16 s
without traffic or an outstanding long poll, §6); the topic logic is
:class:`~refwire.tank.service.BrokerService`.
"""

from __future__ import annotations

import enum
from typing import Final

import attrs

from ..errors import LocalProtocolError
from ..sansio import NEED_DATA, FrameMachine, NeedData, earliest
from ..speed import use_fast
from ..wire import Limits
from .bundles import read_chunk
from .events import ClientEvent, Connected, ConnectionClosed, ConsumeResult, IdleTimeout, PartitionData
from .frames import (
    DEFAULT_LIMITS,
    REPLICA_ID,
    REQUEST_IDS,
    RESPONSE_IDS,
    ConsumeRequest,
    CreateTopicRequest,
    DiscoverPartitionsRequest,
    DiscoverTopicsRequest,
    DiscoverTopologyRequest,
    FrameDecoder,
    Ping,
    ProduceRequest,
    ReloadConfRequest,
    Request,
    StatusRequest,
    decode_request,
    memory_caps,
)
from .responses import (
    ConsumeResponse,
    CreateTopicResponse,
    DiscoverPartitionsResponse,
    DiscoverTopicsResponse,
    DiscoverTopologyResponse,
    RawProduceResponse,
    ReloadConfResponse,
    Response,
    StatusResponse,
    decode_produce_response,
    decode_response,
)

__all__ = [
    "BROKER_TRANSITIONS",
    "CLIENT_TRANSITIONS",
    "NEED_DATA",
    "BrokerConnection",
    "ClientConnection",
    "State",
]

PING_FRAME: Final = b"\x03\x00\x00\x00\x00"


class State(enum.Enum):
    CONNECTING = "connecting"  #: client: no frame from the broker yet
    OPEN = "open"
    CLOSED = "closed"
    ERROR = "error"


#: (state, input) → next state; anything absent is a protocol error.  Tests walk every pair.
CLIENT_TRANSITIONS: Final[dict[tuple[State, str], State]] = {
    (State.CONNECTING, "ping"): State.OPEN,
    (State.CONNECTING, "response"): State.OPEN,  # the Ping is optional (§3)
    (State.CONNECTING, "eof"): State.CLOSED,
    (State.CONNECTING, "reset"): State.CLOSED,
    (State.OPEN, "ping"): State.OPEN,
    (State.OPEN, "response"): State.OPEN,
    (State.OPEN, "eof"): State.CLOSED,
    (State.OPEN, "reset"): State.CLOSED,
}
BROKER_TRANSITIONS: Final[dict[tuple[State, str], State]] = {
    (State.OPEN, "request"): State.OPEN,
    (State.OPEN, "ping"): State.OPEN,
    (State.OPEN, "eof"): State.CLOSED,
    (State.OPEN, "reset"): State.CLOSED,
    (State.OPEN, "idle"): State.CLOSED,
}


_EXPECT: Final[dict[type, type | tuple[type, ...]]] = {
    ProduceRequest: RawProduceResponse,
    ConsumeRequest: ConsumeResponse,
    DiscoverPartitionsRequest: DiscoverPartitionsResponse,
    CreateTopicRequest: CreateTopicResponse,
    ReloadConfRequest: ReloadConfResponse,
    StatusRequest: StatusResponse,
    DiscoverTopicsRequest: DiscoverTopicsResponse,
    DiscoverTopologyRequest: DiscoverTopologyResponse,
}


class _Base(FrameMachine):
    """The receive side is :class:`~refwire.sansio.FrameMachine`'s; EOF and reset
    move the machine to CLOSED at once, and the close is delivered after the
    frames already received."""

    protocol_name = "tank"
    PROTOCOL = "tank"
    ERROR_STATE = State.ERROR
    CLOSED_STATE = State.CLOSED

    def __init__(self, accept: frozenset[int], limits: Limits, state: State, now: float, frame_limit: str = "max_frame_size") -> None:
        super().__init__(state)
        self._decoder = FrameDecoder(
            accept,
            limits,
            frame_limit=frame_limit,
            obsolete_msg={
                REPLICA_ID: "obsolete ReplicaID (the real broker closes the connection)",
                0x09: "ConsumePeer is broker-to-broker (cluster mode); not supported",
            },
        )
        self.limits = limits
        self._closed_event: ConnectionClosed | None = None
        self._now = now
        self._last_rx = now
        self._last_tx = now
        #: frames owed, in order (joined once by data_to_send: one copy of a large response)
        self._queued: list[bytes] = []
        self._write_failed = False

    def receive_data(self, data: bytes | bytearray | memoryview, *, now: float) -> None:
        """Feed received bytes (``b""`` = EOF) that arrived at ``now``; ignored once closed."""
        if self.state is State.CLOSED or self.state is State.ERROR:
            return
        self._last_rx = now
        super().receive_data(data, now=now)

    def data_to_send(self) -> bytes:
        """Every byte the machine owes (frames sent, Pings), once."""
        q = self._queued
        if not q:
            return b""
        out = q[0] if len(q) == 1 else b"".join(q)
        q.clear()
        return out

    def send_failed(self, *, now: float) -> None:
        """The driver could not write: what was not written is lost and the
        connection is over (CLOSED through ``reset``; a ``ConnectionClosed(clean=False)``
        follows the frames already received)."""
        self._write_failed = True
        self._queued.clear()
        super().send_failed(now=now)

    def _receive_progress(self) -> tuple[int, int]:
        buf = self._decoder.buffer
        return len(buf), buf.consumed

    def _feed(self, data: bytes | bytearray | memoryview) -> None:
        self._decoder.feed(bytes(data))

    def _input_ended(self) -> None:
        if self.state is State.CLOSED or self.state is State.ERROR:
            return
        if self._reset:
            self._transition("reset")
            self._closed_event = ConnectionClosed(False, "send failed" if self._write_failed else "connection reset")
        else:
            self._transition("eof")
            # clean unless the EOF cuts a frame: known once the frames before it are decoded (_take_closed)
            self._closed_event = ConnectionClosed(True)

    def _step(self, inp: str) -> None:
        if self.state is not State.CLOSED:  # frames buffered before an EOF still count
            self._transition(inp)

    def _take_closed(self) -> ConnectionClosed | None:
        """The closing event, once (called when every complete frame received is decoded)."""
        ev, self._closed_event = self._closed_event, None
        if ev is not None and ev.clean and not self._decoder.at_boundary:
            ev = ConnectionClosed(False, "EOF inside a frame")
        return ev

    def _at_eof(self) -> None:
        ev = self._take_closed()
        if ev is not None:
            self._events.append(ev)


class ClientConnection(_Base):
    """The client side.  ``send(request, now=...)`` queues the request's frame;
    request ids are the caller's (use :meth:`new_request_id`).  ``fast``: the
    path consume chunks are walked by (:func:`~refwire.tank.bundles.read_chunk`),
    decided here once."""

    TRANSITIONS = CLIENT_TRANSITIONS

    def __init__(
        self,
        *,
        now: float,
        limits: Limits = DEFAULT_LIMITS,
        ping_interval: float | None = 5.0,
        first_request_id: int = 1,
        fast: bool | None = None,
    ) -> None:
        super().__init__(RESPONSE_IDS, limits, State.CONNECTING, now)
        #: whether consume chunks take the speed path (decided once, here)
        self.fast = use_fast(fast)
        self.ping_interval = ping_interval
        self._next_id = first_request_id
        self._pending: dict[int, Request] = {}
        #: keepalive Pings queued by :meth:`handle_timer` so far
        self.pings_sent = 0

    def new_request_id(self) -> int:
        rid = self._next_id
        self._next_id = (self._next_id + 1) & 0xFFFFFFFF or 1
        return rid

    @property
    def pending(self) -> int:
        return len(self._pending)

    def send(self, request: Request, *, now: float) -> None:
        """Queue ``request`` (a Ping has no answer; anything else is remembered
        by its request id until answered)."""
        self._now = now
        if self.state in (State.CLOSED, State.ERROR):
            raise LocalProtocolError(f"cannot send in state {self.state.value}", protocol="tank")
        if not isinstance(request, Ping):
            rid = request.request_id
            if rid in self._pending:
                raise LocalProtocolError(f"request id {rid} is already outstanding", protocol="tank", field="requestId")
            self._pending[rid] = request
        self._last_tx = now
        self._queued.append(request.encode())

    def next_deadline(self) -> float | None:
        """When an idle keepalive Ping is due (the broker closes idle connections after 16 s)."""
        if self.ping_interval is None or (self.state is not State.OPEN and self.state is not State.CONNECTING):
            return None
        return self._last_tx + self.ping_interval

    def handle_timer(self, *, now: float) -> None:
        """Queue a keepalive Ping if one is due."""
        self._now = now
        d = self.next_deadline()
        if d is not None and now >= d:
            self._queued.append(PING_FRAME)
            self._last_tx = now
            self.pings_sent += 1

    def _at_eof(self) -> None:
        ev = self._take_closed()
        if ev is None:
            return
        if self._pending:
            ids = tuple(self._pending)
            self._pending.clear()
            what = "send failed" if self._write_failed else ev.reason or "connection closed"
            ev = attrs.evolve(
                ev, reason=f"{what}: {len(ids)} request(s) in flight have no answer (outcome unknown)", unanswered=ids
            )
        self._events.append(ev)

    def next_event(self) -> ClientEvent | NeedData:
        """The next event: frames already received are delivered before a close."""
        return self._next()  # type: ignore[no-any-return]

    def _pump(self) -> None:
        while not self._events:
            got = self._decoder.next_frame()
            if got is None:
                return
            self._events.append(self._on_frame(*got))

    def _on_frame(self, msg_id: int, payload: bytes, off: int) -> ClientEvent:
        resp = decode_response(msg_id, payload, offset=off, limits=self.limits)
        if isinstance(resp, Ping):
            self._step("ping")
            return Connected()
        self._step("response")
        req = self._pending.pop(resp.request_id, None)
        if req is None:
            raise LocalProtocolError(
                f"response to unknown request id {resp.request_id}",
                protocol="tank",
                frame=f"0x{msg_id:02x}",
                field="requestId",
                offset=off + 5,
            )
        expected = _EXPECT[type(req)]
        if not isinstance(resp, expected):
            raise LocalProtocolError(
                f"{type(resp).__name__} answers a {type(req).__name__}",
                protocol="tank",
                frame=f"0x{msg_id:02x}",
                field="requestId",
                offset=off + 5,
            )
        if isinstance(resp, RawProduceResponse):
            assert isinstance(req, ProduceRequest)
            return decode_produce_response(resp, req.layout())
        if isinstance(resp, ConsumeResponse):
            assert isinstance(req, ConsumeRequest)
            return self._consume_result(req, resp, off, off + 5 + len(payload))
        return resp

    def _consume_result(self, req: ConsumeRequest, resp: ConsumeResponse, off: int, end: int) -> ConsumeResult:
        """``off``: the frame's stream offset; ``end``: the offset just past it (the
        chunks are the frame's tail, in partition order)."""
        asked = {(t.name, p.partition): p.seq for t in req.topics for p in t.partitions}
        at = end - sum(len(p.chunk) for t in resp.topics for p in t.partitions)  # the first chunk's offset
        parts: list[PartitionData] = []
        unknown: list[str] = []
        for t in resp.topics:
            if t.unknown:
                unknown.append(t.name)
                continue
            for p in t.partitions:
                seq = asked.get((t.name, p.partition))
                if seq is None:
                    raise LocalProtocolError(
                        f"response names {t.name}/{p.partition}, which was not requested",
                        protocol="tank",
                        frame="Consume",
                        field="partitionId",
                        offset=off,
                    )
                chunk = None
                if p.error in (0, 0xFE):
                    chunk = read_chunk(
                        p.chunk,
                        base_seq=p.base_seq,
                        hwmark=p.hwmark,
                        requested_seq=seq,
                        limits=self.limits,
                        offset=at,
                        fast=self.fast,
                    )
                at += len(p.chunk)
                parts.append(PartitionData(t.name, p.partition, p.error, p.hwmark, seq, chunk, p.first_avail))
        return ConsumeResult(resp.request_id, tuple(parts), tuple(unknown), resp)


class BrokerConnection(_Base):
    """The broker side of one connection: requests out, responses in.  The
    greeting Ping (§6) is queued at construction: the driver's first flush sends it.
    ``limits.max_connection_memory`` caps requests (a third of it, checked at
    ``payloadLen``) and Snappy sets (a quarter): :func:`~refwire.tank.frames.memory_caps`."""

    TRANSITIONS = BROKER_TRANSITIONS

    def __init__(
        self,
        *,
        now: float,
        limits: Limits = DEFAULT_LIMITS,
        idle_timeout: float | None = 16.0,
        frame_timeout: float | None = None,
    ) -> None:
        capped, frame_limit = memory_caps(limits)
        super().__init__(REQUEST_IDS, capped, State.OPEN, now, frame_limit)
        self.idle_timeout = idle_timeout
        self.frame_timeout = frame_timeout
        self.long_polls = 0  #: outstanding long polls (set by the driver); no idle close while > 0
        self._queued.append(PING_FRAME)  # introduce_self

    def send(self, response: Response, *, now: float) -> None:
        """Queue ``response`` (after :meth:`send_failed` it is lost: nothing more can be written)."""
        self._now = now
        self._last_tx = now
        if not self._write_failed:
            self._queued.append(response.encode())

    def next_event(self) -> Request | ConnectionClosed | IdleTimeout | NeedData:
        return self._next()  # type: ignore[no-any-return]

    def _pump(self) -> None:
        while not self._events:
            got = self._decoder.next_frame()
            if got is None:
                return
            msg_id, payload, off = got
            req = decode_request(msg_id, payload, offset=off, limits=self.limits)
            if isinstance(req, Ping):
                self._step("ping")  # accepted, never answered (§6)
                continue
            self._step("request")
            self._events.append(req)

    def _idle_deadline(self) -> float | None:
        if self.idle_timeout is None or self.long_polls or self.state is not State.OPEN:
            return None
        return max(self._last_rx, self._last_tx) + self.idle_timeout

    def next_deadline(self) -> float | None:
        return earliest(self._idle_deadline(), self._frame_deadline())

    def handle_timer(self, *, now: float) -> None:
        """Idle for ``idle_timeout`` with no long poll outstanding: CLOSED, and an
        :class:`IdleTimeout` event (the driver closes the connection).  A frame
        begun ``frame_timeout`` s ago and still incomplete fails the connection."""
        self._now = now
        self._frame_timer(now)
        d = self._idle_deadline()
        if d is None or now < d or self._error is not None:
            return
        self._transition("idle")
        self._events.append(IdleTimeout(now - max(self._last_rx, self._last_tx)))
