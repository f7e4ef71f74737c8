"""TANK framing and client requests (specs/tank/README.md §2-§3).

Every frame is ``msgId:u8 payloadLen:u32(LE) payload``.  Message ids (§3):
0x01 Produce, 0x02 Consume, 0x03 Ping, 0x04 obsolete ReplicaID (the real broker
closes the connection), 0x05 ProduceWithSeqnum (answered with 0x01),
0x06 DiscoverPartitions, 0x07 CreateTopic, 0x08 ReloadConf, 0x09 ConsumePeer
(broker to broker, not supported here), 0x0a Status, 0x0b DiscoverTopics,
0x0c DiscoverTopology.  Responses live in :mod:`refwire.tank.responses`.

:class:`FrameDecoder` splits a byte stream into ``(msgId, payload)`` pairs,
incrementally and in O(n), refusing unknown ids and over-long payloads from the
5-byte header alone.
"""

from __future__ import annotations

import struct
from typing import Final

import attrs

from ..errors import LimitExceeded, LocalProtocolError
from ..wire import Limits, Reader, ReceiveBuffer, Writer

__all__ = [
    "CONSUME",
    "CREATE_TOPIC",
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_REQUEST",
    "DISCOVER_PARTITIONS",
    "DISCOVER_TOPICS",
    "DISCOVER_TOPOLOGY",
    "MSG_NAMES",
    "PING",
    "PRODUCE",
    "PRODUCE_WITH_SEQNUM",
    "RELOAD_CONF",
    "REPLICA_ID",
    "STATUS",
    "ConsumePartition",
    "ConsumeRequest",
    "ConsumeTopic",
    "CreateTopicRequest",
    "DiscoverPartitionsRequest",
    "DiscoverTopicsRequest",
    "DiscoverTopologyRequest",
    "FrameDecoder",
    "Ping",
    "ProducePartition",
    "ProduceRequest",
    "ProduceTopic",
    "ReloadConfRequest",
    "Request",
    "StatusRequest",
    "REQUEST_COST",
    "broker_limits",
    "decode_request",
    "frame",
    "memory_caps",
]

PROTOCOL: Final = "tank"
PRODUCE: Final = 0x01
CONSUME: Final = 0x02
PING: Final = 0x03
REPLICA_ID: Final = 0x04
PRODUCE_WITH_SEQNUM: Final = 0x05
DISCOVER_PARTITIONS: Final = 0x06
CREATE_TOPIC: Final = 0x07
RELOAD_CONF: Final = 0x08
CONSUME_PEER: Final = 0x09
STATUS: Final = 0x0A
DISCOVER_TOPICS: Final = 0x0B
DISCOVER_TOPOLOGY: Final = 0x0C

MSG_NAMES: Final = {
    PRODUCE: "Produce", CONSUME: "Consume", PING: "Ping", REPLICA_ID: "ReplicaID",
    PRODUCE_WITH_SEQNUM: "ProduceWithSeqnum", DISCOVER_PARTITIONS: "DiscoverPartitions",
    CREATE_TOPIC: "CreateTopic", RELOAD_CONF: "ReloadConf", CONSUME_PEER: "ConsumePeer",
    STATUS: "Status", DISCOVER_TOPICS: "DiscoverTopics", DISCOVER_TOPOLOGY: "DiscoverTopology",
}
#: ids a broker accepts from a client (0x04 and 0x09 close the connection, §3).
REQUEST_IDS: Final = frozenset({PRODUCE, CONSUME, PING, PRODUCE_WITH_SEQNUM, DISCOVER_PARTITIONS, CREATE_TOPIC,
                                RELOAD_CONF, STATUS, DISCOVER_TOPICS, DISCOVER_TOPOLOGY})
#: ids a client accepts from a broker (0x05 is answered with 0x01).
RESPONSE_IDS: Final = REQUEST_IDS - {PRODUCE_WITH_SEQNUM}

#: 64 MiB fetch sizes, chunks and Snappy sets (the broker's clamp, §6); a consume
#: response may carry several 64 MiB chunks, so frames may be up to 256 MiB.
DEFAULT_LIMITS: Final = Limits(
    max_frame_size=256 * 1024 * 1024,
    max_decompressed_size=64 * 1024 * 1024,
    max_window=255,
    max_string_size=255,
    max_buffered=256 * 1024 * 1024,
)

#: The largest request a refwire broker reads (§6, refwire's choice: the real
#: broker documents none): one 64 MiB bundle, its clamp, plus its request's head.
DEFAULT_MAX_REQUEST: Final = 64 * 1024 * 1024 + 64 * 1024


def broker_limits(max_request_size: int = DEFAULT_MAX_REQUEST) -> Limits:
    """:data:`DEFAULT_LIMITS` with requests (and what one connection buffers) capped at ``max_request_size``."""
    return attrs.evolve(DEFAULT_LIMITS, max_frame_size=max_request_size, max_buffered=max_request_size)


#: What a request byte costs the broker against ``max_connection_memory`` (§6, limits):
#: the received bytes, the request's payload cut from them and the bundle's
#: decoded messages (the validation, §4) live at once; measured 3x (the stored
#: entry is the store's, not the connection's).
REQUEST_COST: Final = 3


def memory_caps(limits: Limits) -> tuple[Limits, str]:
    """A broker connection's decoder limits under ``max_connection_memory`` (§6):
    a request frame may be at most a third of it (:data:`REQUEST_COST`), and a
    Snappy set may inflate to at most a quarter (its bytes and their messages);
    with the name of the limit that bounds frames (``max_frame_size`` unless the
    budget is the tighter)."""
    budget = limits.max_connection_memory
    room = budget // REQUEST_COST
    inflate = min(limits.max_decompressed_size, budget // 4)
    if room < limits.max_frame_size:
        return attrs.evolve(limits, max_frame_size=room, max_buffered=min(room, limits.max_buffered),
                            max_decompressed_size=inflate), "max_connection_memory"
    return attrs.evolve(limits, max_decompressed_size=inflate), "max_frame_size"


_HDR: Final = struct.Struct("<BI")
HEADER_SIZE: Final = 5


def frame(msg_id: int, payload: bytes) -> bytes:
    """``msgId:u8 payloadLen:u32 payload``."""
    return _HDR.pack(msg_id, len(payload)) + payload


def _name(msg_id: int) -> str:
    return MSG_NAMES.get(msg_id, f"0x{msg_id:02x}")


#: Test-only: tests/fuzz/test_fuzz.py sets this to plant a defect the fuzz run must
#: find (an IndexError on an empty frame other than a Ping).  Never set otherwise.
_FUZZ_PLANTED_DEFECT = False


class FrameDecoder:
    """Incremental frame splitter: ``feed(bytes)`` then ``next_frame()`` →
    ``(msgId, payload, offset)`` or ``None``.  ``accept`` is the set of ids this
    side may receive; anything else is an error as soon as its header arrives.
    ``offset`` is the stream offset of the frame's first byte."""

    def __init__(
        self,
        accept: frozenset[int],
        limits: Limits = DEFAULT_LIMITS,
        *,
        obsolete_msg: dict[int, str] | None = None,
        frame_limit: str = "max_frame_size",
    ) -> None:
        self.buffer = ReceiveBuffer()
        self.accept = accept
        self.limits = limits
        #: the name a refused ``payloadLen`` gives (``max_connection_memory`` when the budget is the tighter)
        self.frame_limit = frame_limit
        self._need = HEADER_SIZE
        self._hdr: tuple[int, int] | None = None
        self._obsolete = obsolete_msg or {}

    def feed(self, data: bytes) -> None:
        self.buffer.feed(data)
        if self._hdr is None and len(self.buffer) > self.limits.max_buffered:  # pragma: no cover - header is 5 bytes
            raise LimitExceeded("receive buffer overflow", protocol=PROTOCOL, field="buffer", offset=self.buffer.consumed)

    @property
    def at_boundary(self) -> bool:
        return self._hdr is None and not self.buffer

    def next_frame(self) -> tuple[int, bytes, int] | None:
        buf = self.buffer
        if len(buf) < self._need:
            return None
        if self._hdr is None:
            msg_id, length = _HDR.unpack_from(buf.data, buf.pos)
            off = buf.consumed
            if msg_id not in self.accept:
                why = self._obsolete.get(msg_id, "unknown message id")
                raise LocalProtocolError(f"{why} {msg_id:#04x}", protocol=PROTOCOL, frame=_name(msg_id), field="msgId", offset=off)
            if length + HEADER_SIZE > self.limits.max_frame_size:
                if self.frame_limit == "max_frame_size":
                    why = f"max_frame_size={self.limits.max_frame_size}"
                else:
                    why = (f"{self.frame_limit}={self.limits.max_connection_memory} "
                           f"(a request may take {self.limits.max_frame_size} bytes: each costs {REQUEST_COST}x)")
                raise LimitExceeded(
                    f"payloadLen {length} exceeds the limit {why}",
                    protocol=PROTOCOL, frame=_name(msg_id), field="payloadLen", offset=off + 1,
                )
            if _FUZZ_PLANTED_DEFECT and length == 0 and msg_id != PING:
                raise IndexError("planted defect (tests/fuzz/test_fuzz.py)")
            self._hdr = (msg_id, length)
            self._need = HEADER_SIZE + length
            if len(buf) < self._need:
                return None
        msg_id, length = self._hdr
        off = buf.consumed
        buf.advance_to(buf.pos + HEADER_SIZE)
        payload = buf.take(length)  # one copy (ReceiveBuffer.take)
        self._hdr = None
        self._need = HEADER_SIZE
        return msg_id, payload, off


# --------------------------------------------------------------------------- helpers


def _str8(r: Reader, field: str) -> str:
    n = r.u8(field)
    return r.raw(n, field).decode("utf-8", "surrogateescape")


def _bytes8(r: Reader, field: str) -> bytes:
    return r.raw(r.u8(field), field)


def w_str8(w: Writer, s: str | bytes, field: str) -> None:
    b = s.encode("utf-8", "surrogateescape") if isinstance(s, str) else s
    if len(b) > 255:
        raise LocalProtocolError(f"{field} is {len(b)} bytes; str8 holds at most 255", protocol=PROTOCOL, field=field)
    w.u8(len(b), field).raw(b)


def reader(payload: bytes, msg_id: int, offset: int) -> Reader:
    """A reader over a frame's payload; offsets are stream offsets."""
    return Reader(payload, base=offset + HEADER_SIZE, protocol=PROTOCOL, frame=_name(msg_id))


# --------------------------------------------------------------------------- requests


@attrs.frozen
class Ping:
    """0x03, no payload.  The broker sends one on accept and never answers one (§3)."""

    def encode(self) -> bytes:
        return b"\x03\x00\x00\x00\x00"


@attrs.frozen
class ProducePartition:
    """One partition body: ``partitionId:u16 bundleLen:varint [baseSeqNum:u64] bundle``."""

    partition: int
    bundle: bytes
    base_seq: int | None = None  #: only in ProduceWithSeqnum (0x05)


@attrs.frozen
class ProduceTopic:
    name: str
    partitions: tuple[ProducePartition, ...]


@attrs.frozen
class ProduceRequest:
    """0x01 Produce / 0x05 ProduceWithSeqnum (§3)."""

    request_id: int
    topics: tuple[ProduceTopic, ...]
    with_seqnum: bool = False
    client_id: bytes = b"c++"
    required_acks: int = 0
    ack_timeout_ms: int = 0
    client_version: int = 2

    @property
    def msg_id(self) -> int:
        return PRODUCE_WITH_SEQNUM if self.with_seqnum else PRODUCE

    def layout(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The (topic, partitions) list a response is decoded against (§3)."""
        return tuple((t.name, tuple(p.partition for p in t.partitions)) for t in self.topics)

    def encode(self) -> bytes:
        w = Writer()
        w.u16le(self.client_version, "clientVersion").u32le(self.request_id, "requestId")
        w_str8(w, self.client_id, "clientId")
        w.u8(self.required_acks, "requiredAcks").u32le(self.ack_timeout_ms, "ackTimeoutMs")
        w.u8(len(self.topics), "topicsCnt")
        for t in self.topics:
            w_str8(w, t.name, "topic")
            w.u8(len(t.partitions), "partitionsCnt")
            for p in t.partitions:
                w.u16le(p.partition, "partitionId").uvarint(len(p.bundle))
                if self.with_seqnum:
                    if p.base_seq is None:
                        raise LocalProtocolError("ProduceWithSeqnum needs base_seq on every partition", protocol=PROTOCOL, field="baseSeqNum")
                    w.u64le(p.base_seq, "baseSeqNum")
                w.raw(p.bundle)
        return frame(self.msg_id, w.getvalue())


@attrs.frozen
class ConsumePartition:
    partition: int
    seq: int  #: 0 = first available, U64_MAX = the end (tail)
    fetch_size: int


@attrs.frozen
class ConsumeTopic:
    name: str
    partitions: tuple[ConsumePartition, ...]


@attrs.frozen
class ConsumeRequest:
    """0x02 Consume (§3); ``client_version >= 3`` adds the ``opFlags`` byte."""

    request_id: int
    topics: tuple[ConsumeTopic, ...]
    max_wait_ms: int = 0
    min_bytes: int = 0
    client_id: bytes = b""
    client_version: int = 2
    op_flags: int = 0

    def encode(self) -> bytes:
        w = Writer()
        w.u16le(self.client_version, "clientVersion").u32le(self.request_id, "requestId")
        w_str8(w, self.client_id, "clientId")
        w.u64le(self.max_wait_ms, "maxWaitMs").u32le(self.min_bytes, "minBytes")
        if self.client_version >= 3:
            w.u8(self.op_flags, "opFlags")
        elif self.op_flags:
            raise LocalProtocolError("opFlags need clientVersion >= 3", protocol=PROTOCOL, frame="Consume", field="opFlags")
        w.u8(len(self.topics), "topicsCnt")
        for t in self.topics:
            w_str8(w, t.name, "topic")
            w.u8(len(t.partitions), "partitionsCnt")
            for p in t.partitions:
                w.u16le(p.partition, "partitionId").u64le(p.seq, "absSeqNum").u32le(p.fetch_size, "fetchSize")
        return frame(CONSUME, w.getvalue())


@attrs.frozen
class DiscoverPartitionsRequest:
    """0x06: ``requestId topic:str8 [partitionId:u16]*`` (empty = all, §3)."""

    request_id: int
    topic: str
    partitions: tuple[int, ...] = ()

    def encode(self) -> bytes:
        w = Writer().u32le(self.request_id, "requestId")
        w_str8(w, self.topic, "topic")
        for p in self.partitions:
            w.u16le(p, "partitionId")
        return frame(DISCOVER_PARTITIONS, w.getvalue())


@attrs.frozen
class CreateTopicRequest:
    """0x07: ``requestId topic:str8 partitions:u16 configLen:varint config`` (§3)."""

    request_id: int
    topic: str
    partitions: int
    config: bytes = b""

    def encode(self) -> bytes:
        w = Writer().u32le(self.request_id, "requestId")
        w_str8(w, self.topic, "topic")
        w.u16le(self.partitions, "partitions").uvarint(len(self.config)).raw(self.config)
        return frame(CREATE_TOPIC, w.getvalue())


@attrs.frozen
class ReloadConfRequest:
    """0x08: ``requestId topic:str8 partition:u16`` (§3)."""

    request_id: int
    topic: str
    partition: int

    def encode(self) -> bytes:
        w = Writer().u32le(self.request_id, "requestId")
        w_str8(w, self.topic, "topic")
        return frame(RELOAD_CONF, w.u16le(self.partition, "partition").getvalue())


@attrs.frozen
class StatusRequest:
    """0x0a: ``requestId`` (§3)."""

    request_id: int

    def encode(self) -> bytes:
        return frame(STATUS, Writer().u32le(self.request_id, "requestId").getvalue())


@attrs.frozen
class DiscoverTopicsRequest:
    """0x0b: ``requestId flags:u8`` (§3)."""

    request_id: int
    flags: int = 0

    def encode(self) -> bytes:
        return frame(DISCOVER_TOPICS, Writer().u32le(self.request_id, "requestId").u8(self.flags, "flags").getvalue())


@attrs.frozen
class DiscoverTopologyRequest:
    """0x0c: ``requestId flags:u8`` (§3)."""

    request_id: int
    flags: int = 0

    def encode(self) -> bytes:
        return frame(DISCOVER_TOPOLOGY, Writer().u32le(self.request_id, "requestId").u8(self.flags, "flags").getvalue())


Request = (
    Ping | ProduceRequest | ConsumeRequest | DiscoverPartitionsRequest | CreateTopicRequest
    | ReloadConfRequest | StatusRequest | DiscoverTopicsRequest | DiscoverTopologyRequest
)


def _decode_produce(r: Reader, with_seqnum: bool, limits: Limits) -> ProduceRequest:
    version = r.u16le("clientVersion")
    rid = r.u32le("requestId")
    cid = _bytes8(r, "clientId")
    acks = r.u8("requiredAcks")
    timeout = r.u32le("ackTimeoutMs")
    topics = []
    for _ in range(r.u8("topicsCnt")):
        name = _str8(r, "topic")
        parts = []
        for _ in range(r.u8("partitionsCnt")):
            pid = r.u16le("partitionId")
            blen = r.uvarint("bundleLen")
            base = r.u64le("baseSeqNum") if with_seqnum else None
            parts.append(ProducePartition(pid, r.raw(blen, "bundle", limit=limits.max_frame_size), base))
        topics.append(ProduceTopic(name, tuple(parts)))
    r.expect_end()
    return ProduceRequest(rid, tuple(topics), with_seqnum, cid, acks, timeout, version)


def _decode_consume(r: Reader) -> ConsumeRequest:
    version = r.u16le("clientVersion")
    rid = r.u32le("requestId")
    cid = _bytes8(r, "clientId")
    max_wait = r.u64le("maxWaitMs")
    min_bytes = r.u32le("minBytes")
    flags = r.u8("opFlags") if version >= 3 else 0
    topics = []
    for _ in range(r.u8("topicsCnt")):
        name = _str8(r, "topic")
        parts = [
            ConsumePartition(r.u16le("partitionId"), r.u64le("absSeqNum"), r.u32le("fetchSize"))
            for _ in range(r.u8("partitionsCnt"))
        ]
        topics.append(ConsumeTopic(name, tuple(parts)))
    r.expect_end()
    return ConsumeRequest(rid, tuple(topics), max_wait, min_bytes, cid, version, flags)


def decode_request(msg_id: int, payload: bytes, *, offset: int = 0, limits: Limits = DEFAULT_LIMITS) -> Request:
    """Decode one client request's payload (broker side).  Any overrun or
    trailing byte raises :class:`LocalProtocolError` -- the real broker drops
    the connection (§3, §6)."""
    r = reader(payload, msg_id, offset)
    if msg_id == PING:
        r.expect_end()
        return Ping()
    if msg_id in (PRODUCE, PRODUCE_WITH_SEQNUM):
        return _decode_produce(r, msg_id == PRODUCE_WITH_SEQNUM, limits)
    if msg_id == CONSUME:
        return _decode_consume(r)
    rid = r.u32le("requestId")
    req: Request
    if msg_id == DISCOVER_PARTITIONS:
        topic = _str8(r, "topic")
        if r.remaining % 2:
            raise r.error("partition id list has an odd byte count", field="partitionId")
        req = DiscoverPartitionsRequest(rid, topic, tuple(r.u16le("partitionId") for _ in range(r.remaining // 2)))
    elif msg_id == CREATE_TOPIC:
        topic = _str8(r, "topic")
        parts = r.u16le("partitions")
        req = CreateTopicRequest(rid, topic, parts, r.raw(r.uvarint("configLen"), "config", limit=limits.max_string_size * 256))
    elif msg_id == RELOAD_CONF:
        topic = _str8(r, "topic")
        req = ReloadConfRequest(rid, topic, r.u16le("partition"))
    elif msg_id == STATUS:
        req = StatusRequest(rid)
    elif msg_id == DISCOVER_TOPICS:
        req = DiscoverTopicsRequest(rid, r.u8("flags"))
    elif msg_id == DISCOVER_TOPOLOGY:
        req = DiscoverTopologyRequest(rid, r.u8("flags"))
    else:
        raise r.error(f"not a client request id {msg_id:#04x}", field="msgId", offset=offset)
    r.expect_end()
    return req

