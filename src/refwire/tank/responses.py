"""TANK broker responses (specs/tank/README.md §3, §6).

Produce responses cannot be decoded alone: they list one error byte per
requested partition, except that a topic-wide 0xff/0xfe stands for the whole
topic run, so :func:`decode_produce_response` takes the request's layout.
Every other response decodes from its own bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import attrs

from ..wire import Limits, Reader, Writer
from .frames import (
    CONSUME,
    CREATE_TOPIC,
    DEFAULT_LIMITS,
    DISCOVER_PARTITIONS,
    DISCOVER_TOPICS,
    DISCOVER_TOPOLOGY,
    PING,
    PRODUCE,
    RELOAD_CONF,
    STATUS,
    Ping,
    _bytes8,
    _str8,
    frame,
    reader,
    w_str8,
)

__all__ = [
    "ERR_BOUNDARY",
    "ERR_INVALID_SEQNUMS",
    "ERR_IO",
    "ERR_NO_LEADER",
    "ERR_OTHER_LEADER",
    "ERR_READ_ONLY",
    "ERR_SPARSE",
    "ERR_SYSTEM",
    "ERR_UNKNOWN",
    "ERR_UNKNOWN_PARTITION",
    "ConsumePartitionResult",
    "ConsumeResponse",
    "ConsumeTopicResult",
    "CreateTopicResponse",
    "DiscoverPartitionsResponse",
    "DiscoverTopicsResponse",
    "DiscoverTopologyResponse",
    "PartitionInfo",
    "ProduceResponse",
    "ProduceResult",
    "RawProduceResponse",
    "ReloadConfResponse",
    "Response",
    "StatusResponse",
    "TopicInfo",
    "decode_produce_response",
    "decode_response",
]

ERR_OK: Final = 0x00
ERR_BOUNDARY: Final = 0x01  #: consume: boundary check failure (+firstAvailSeqNum)
ERR_UNKNOWN_PARTITION: Final = 0x01  #: produce: unknown partition
ERR_IO: Final = 0x02
ERR_INVALID_SEQNUMS: Final = 0x0A
ERR_SYSTEM: Final = 0xFB
ERR_OTHER_LEADER: Final = 0xFC  #: followed by addr4:u32 port:u16
ERR_NO_LEADER: Final = 0xFD
ERR_SPARSE: Final = 0xFE  #: consume: first bundle sparse (no baseSeqNum); produce: read-only
ERR_READ_ONLY: Final = 0xFE
ERR_UNKNOWN: Final = 0xFF  #: unknown topic (produce) / unknown partition (consume)
UNKNOWN_TOPIC_MARK: Final = 0xFFFF


# --------------------------------------------------------------------------- produce (§3)


@attrs.frozen
class ProduceResult:
    topic: str
    partition: int
    error: int
    leader: tuple[int, int] | None = None  #: (addr4, port) with 0xfc


@attrs.frozen
class ProduceResponse:
    """The per-partition outcome, in request order.  A topic-wide 0xff/0xfe is
    repeated on every partition of its run after decoding; :meth:`encode`
    writes it once."""

    request_id: int
    results: tuple[ProduceResult, ...]

    def encode(self) -> bytes:
        w = Writer().u32le(self.request_id, "requestId")
        skip_topic: tuple[int, str] | None = None
        prev: str | None = None
        for i, res in enumerate(self.results):
            new_run = i == 0 or res.topic != prev
            prev = res.topic
            if skip_topic is not None and not new_run:
                continue
            skip_topic = None
            w.u8(res.error, "err")
            if res.error == 0xFC:
                addr, port = res.leader or (0, 0)
                w.u32le(addr, "leaderAddr").u16le(port, "leaderPort")
            if new_run and res.error in (ERR_UNKNOWN, ERR_READ_ONLY):
                skip_topic = (i, res.topic)
        return frame(PRODUCE, w.getvalue())


@attrs.frozen
class RawProduceResponse:
    """A produce response before it is matched to its request (``body`` = the error bytes)."""

    request_id: int
    body: bytes
    offset: int = 0

    def encode(self) -> bytes:
        return frame(PRODUCE, self.request_id.to_bytes(4, "little") + self.body)


def decode_produce_response(
    raw: RawProduceResponse, layout: Sequence[tuple[str, Sequence[int]]]
) -> ProduceResponse:
    """Decode the error bytes against the request's (topic, partitions) list."""
    r = Reader(raw.body, base=raw.offset, protocol="tank", frame="Produce")
    out: list[ProduceResult] = []
    for topic, parts in layout:
        for j, pid in enumerate(parts):
            err = r.u8("err")
            leader = (r.u32le("leaderAddr"), r.u16le("leaderPort")) if err == ERR_OTHER_LEADER else None
            out.append(ProduceResult(topic, pid, err, leader))
            if j == 0 and err in (ERR_UNKNOWN, ERR_READ_ONLY):
                out.extend(ProduceResult(topic, p, err) for p in parts[1:])
                break
    r.expect_end()
    return ProduceResponse(raw.request_id, tuple(out))


# --------------------------------------------------------------------------- consume (§3)


@attrs.frozen
class ConsumePartitionResult:
    """One partition entry.  ``base_seq`` is ``None`` for 0xfe (sparse first
    bundle); ``first_avail`` only for 0x01; ``chunk`` holds the chunk bytes."""

    partition: int
    error: int
    base_seq: int | None = 0
    hwmark: int = 0
    chunk: bytes = b""
    first_avail: int | None = None
    leader: tuple[int, int] | None = None


@attrs.frozen
class ConsumeTopicResult:
    """``unknown`` topics echo ``partitions_count`` and carry no entries (§7, quirk 7.8-5)."""

    name: str
    partitions: tuple[ConsumePartitionResult, ...]
    unknown: bool = False
    partitions_count: int | None = None


@attrs.frozen
class ConsumeResponse:
    request_id: int
    topics: tuple[ConsumeTopicResult, ...]

    def encode(self) -> bytes:
        h = Writer().u32le(self.request_id, "requestId").u8(len(self.topics), "topicsCnt")
        chunks: list[bytes] = []
        for t in self.topics:
            w_str8(h, t.name, "topic")
            if t.unknown:
                h.u8(t.partitions_count or 0, "partitionsCnt").u16le(UNKNOWN_TOPIC_MARK, "unknownTopic")
                continue
            h.u8(len(t.partitions), "partitionsCnt")
            for p in t.partitions:
                h.u16le(p.partition, "partitionId").u8(p.error, "err")
                if p.error in (ERR_OK, ERR_SPARSE, ERR_BOUNDARY):
                    if p.error != ERR_SPARSE:
                        h.u64le(p.base_seq or 0, "baseSeqNum")
                    h.u64le(p.hwmark, "highWaterMark").u32le(len(p.chunk), "chunkLen")
                    if p.error == ERR_BOUNDARY:
                        h.u64le(p.first_avail or 0, "firstAvailSeqNum")
                    if p.chunk:
                        chunks.append(p.chunk)
                elif p.error == ERR_OTHER_LEADER:
                    addr, port = p.leader or (0, 0)
                    h.u32le(addr, "leaderAddr").u16le(port, "leaderPort")
        head = h.getvalue()
        return frame(CONSUME, len(head).to_bytes(4, "little") + head + b"".join(chunks))


def _decode_consume_response(r: Reader, payload: bytes) -> ConsumeResponse:
    header_len = r.u32le("headerLen")
    if header_len > r.remaining:
        raise r.error(f"headerLen {header_len} runs past the frame ({r.remaining} bytes left)", field="headerLen", offset=r.offset - 4)
    head_end = r.pos + header_len
    hr = Reader(payload, start=r.pos, end=head_end, base=r.offset, protocol="tank", frame="Consume")
    rid = hr.u32le("requestId")
    topics: list[ConsumeTopicResult] = []
    wants: list[tuple[int, int, int, int]] = []  # (topic idx, part idx, chunkLen, header offset)
    for ti in range(hr.u8("topicsCnt")):
        name = _str8(hr, "topic")
        count = hr.u8("partitionsCnt")
        if hr.remaining >= 2 and int.from_bytes(payload[hr.pos : hr.pos + 2], "little") == UNKNOWN_TOPIC_MARK:
            hr.u16le("unknownTopic")
            topics.append(ConsumeTopicResult(name, (), True, count))
            continue
        parts: list[ConsumePartitionResult] = []
        for pi in range(count):
            pid = hr.u16le("partitionId")
            err = hr.u8("err")
            if err in (ERR_OK, ERR_SPARSE, ERR_BOUNDARY):
                base = None if err == ERR_SPARSE else hr.u64le("baseSeqNum")
                hw = hr.u64le("highWaterMark")
                at = hr.offset
                clen = hr.u32le("chunkLen")
                first = hr.u64le("firstAvailSeqNum") if err == ERR_BOUNDARY else None
                if clen:
                    wants.append((ti, pi, clen, at))
                parts.append(ConsumePartitionResult(pid, err, base, hw, b"", first))
            elif err == ERR_OTHER_LEADER:
                parts.append(ConsumePartitionResult(pid, err, None, 0, b"", None, (hr.u32le("leaderAddr"), hr.u16le("leaderPort"))))
            elif err in (ERR_UNKNOWN, ERR_SYSTEM, ERR_NO_LEADER):
                parts.append(ConsumePartitionResult(pid, err, None))
            else:
                raise hr.error(f"unknown partition error code {err:#04x}", field="err", offset=hr.offset - 1)
        topics.append(ConsumeTopicResult(name, tuple(parts), False, count))
    hr.expect_end()
    r = Reader(payload, start=head_end, base=hr.offset, protocol="tank", frame="Consume")
    total = sum(w[2] for w in wants)
    if total != r.remaining:
        raise r.error(f"chunk lengths add up to {total} but {r.remaining} bytes follow the header", field="chunkLen", offset=wants[0][3] if wants else r.offset)
    for ti, pi, clen, _ in wants:
        t = topics[ti]
        parts = list(t.partitions)
        parts[pi] = attrs.evolve(parts[pi], chunk=r.raw(clen, "chunk"))
        topics[ti] = attrs.evolve(t, partitions=tuple(parts))
    return ConsumeResponse(rid, tuple(topics))


# --------------------------------------------------------------------------- admin


@attrs.frozen
class PartitionInfo:
    """(firstAvailSeqNum, highWaterMark); both U64_MAX plus ``reason`` when unavailable."""

    first_avail: int
    hwmark: int
    reason: int | None = None
    leader: tuple[int, int] | None = None


@attrs.frozen
class DiscoverPartitionsResponse:
    request_id: int
    topic: str
    partitions: tuple[PartitionInfo, ...]  #: empty = unknown topic

    def encode(self) -> bytes:
        w = Writer().u32le(self.request_id, "requestId")
        w_str8(w, self.topic, "topic")
        w.u16le(len(self.partitions), "count")
        for p in self.partitions:
            w.u64le(p.first_avail, "firstAvailSeqNum").u64le(p.hwmark, "highWaterMark")
            if p.reason is not None:
                w.u8(p.reason, "reason")
                if p.reason == ERR_OTHER_LEADER:
                    addr, port = p.leader or (0, 0)
                    w.u32le(addr, "leaderAddr").u16le(port, "leaderPort")
        return frame(DISCOVER_PARTITIONS, w.getvalue())


@attrs.frozen
class CreateTopicResponse:
    request_id: int
    topic: str
    error: int  #: 0 created, 1 exists, 2 system, 4 bad config, 5 read-only, 10 invalid

    def encode(self) -> bytes:
        w = Writer().u32le(self.request_id, "requestId")
        w_str8(w, self.topic, "topic")
        return frame(CREATE_TOPIC, w.u8(self.error, "err").getvalue())


@attrs.frozen
class ReloadConfResponse:
    request_id: int
    topic: str
    partition: int
    error: int  #: 0 ok, 2 no config file, 3 parse, 10 unknown partition, 11 unknown topic

    def encode(self) -> bytes:
        w = Writer().u32le(self.request_id, "requestId")
        w_str8(w, self.topic, "topic")
        return frame(RELOAD_CONF, w.u16le(self.partition, "partition").u8(self.error, "err").getvalue())


@attrs.frozen
class StatusResponse:
    """Standalone layout (§3); ``cluster`` = (flags, name, nodesAvailable) when cluster-aware."""

    request_id: int
    topics: int
    partitions: int
    open_partitions: int = 0
    open_partitions_time_us: int = 0
    startup_ts: int = 0
    version: int = 400
    global_flags: int = 0
    cluster: tuple[int, bytes, int] | None = None

    def encode(self) -> bytes:
        w = Writer().u32le(self.request_id, "requestId").u8(self.global_flags, "globalFlags")
        w.u8(1 if self.cluster else 0, "clusterAware").u32le(self.topics, "topics").u32le(self.partitions, "partitions")
        if self.cluster:
            w.u8(self.cluster[0], "clusterFlags")
            w_str8(w, self.cluster[1], "clusterName")
            w.u32le(self.cluster[2], "nodesAvailable")
        w.u32le(self.open_partitions, "openPartitions").u32le(self.open_partitions_time_us, "openPartitionsTime")
        w.u32le(self.startup_ts, "startupTs").u32le(self.version, "version")
        return frame(STATUS, w.getvalue())


@attrs.frozen
class TopicInfo:
    name: str
    partitions: int
    enabled: bool = True
    replication_factor: int | None = None


@attrs.frozen
class DiscoverTopicsResponse:
    request_id: int
    topics: tuple[TopicInfo, ...]
    cluster_aware: bool = False

    def encode(self) -> bytes:
        w = Writer().u32le(self.request_id, "requestId").u32le(len(self.topics), "count").u8(int(self.cluster_aware), "clusterAware")
        for t in self.topics:
            w_str8(w, t.name, "topic")
            w.u8(int(t.enabled), "enabled").u16le(t.partitions, "partitions")
            if self.cluster_aware:
                w.u8(t.replication_factor or 0, "rf")
        return frame(DISCOVER_TOPICS, w.getvalue())


@attrs.frozen
class DiscoverTopologyResponse:
    """Standalone brokers answer ``0xffff`` (``standalone=True``); the cluster
    layout is kept as ``body`` bytes (refwire has no cluster mode)."""

    request_id: int
    standalone: bool = True
    body: bytes = b""

    def encode(self) -> bytes:
        w = Writer().u32le(self.request_id, "requestId")
        w.raw(b"\xff\xff" if self.standalone else self.body)
        return frame(DISCOVER_TOPOLOGY, w.getvalue())


Response = (
    Ping | ProduceResponse | RawProduceResponse | ConsumeResponse | DiscoverPartitionsResponse | CreateTopicResponse
    | ReloadConfResponse | StatusResponse | DiscoverTopicsResponse | DiscoverTopologyResponse
)


def decode_response(msg_id: int, payload: bytes, *, offset: int = 0, limits: Limits = DEFAULT_LIMITS) -> Response:
    """Decode one broker frame (client side).  Produce responses come back raw
    (see :func:`decode_produce_response`)."""
    r = reader(payload, msg_id, offset)
    if msg_id == PING:
        r.expect_end()
        return Ping()
    if msg_id == CONSUME:
        return _decode_consume_response(r, payload)
    rid = r.u32le("requestId")
    resp: Response
    if msg_id == PRODUCE:
        return RawProduceResponse(rid, r.rest("errors"), offset + 9)
    if msg_id == DISCOVER_PARTITIONS:
        topic = _str8(r, "topic")
        infos = []
        for _ in range(r.u16le("count")):
            first, hw = r.u64le("firstAvailSeqNum"), r.u64le("highWaterMark")
            reason = leader = None
            if first == hw == 0xFFFF_FFFF_FFFF_FFFF:
                reason = r.u8("reason")
                if reason == ERR_OTHER_LEADER:
                    leader = (r.u32le("leaderAddr"), r.u16le("leaderPort"))
            infos.append(PartitionInfo(first, hw, reason, leader))
        resp = DiscoverPartitionsResponse(rid, topic, tuple(infos))
    elif msg_id == CREATE_TOPIC:
        resp = CreateTopicResponse(rid, _str8(r, "topic"), r.u8("err"))
    elif msg_id == RELOAD_CONF:
        resp = ReloadConfResponse(rid, _str8(r, "topic"), r.u16le("partition"), r.u8("err"))
    elif msg_id == STATUS:
        gflags, aware = r.u8("globalFlags"), r.u8("clusterAware")
        ntopics, nparts = r.u32le("topics"), r.u32le("partitions")
        cluster = (r.u8("clusterFlags"), _bytes8(r, "clusterName"), r.u32le("nodesAvailable")) if aware else None
        tail = [r.u32le(f) for f in ("openPartitions", "openPartitionsTime", "startupTs", "version") if r.remaining]
        tail += [0] * (4 - len(tail))  # older brokers stop early (§3)
        resp = StatusResponse(rid, ntopics, nparts, tail[0], tail[1], tail[2], tail[3], gflags, cluster)
    elif msg_id == DISCOVER_TOPICS:
        count, aware = r.u32le("count"), r.bool8("clusterAware")
        if count > r.remaining // 4:
            raise r.error(f"count {count} cannot fit in {r.remaining} bytes", field="count", offset=r.offset - 5)
        infos_t = []
        for _ in range(count):
            name = _str8(r, "topic")
            enabled, parts = r.bool8("enabled"), r.u16le("partitions")
            infos_t.append(TopicInfo(name, parts, enabled, r.u8("rf") if aware else None))
        resp = DiscoverTopicsResponse(rid, tuple(infos_t), aware)
    elif msg_id == DISCOVER_TOPOLOGY:
        body = r.rest("topology")
        return DiscoverTopologyResponse(rid, body == b"\xff\xff", b"" if body == b"\xff\xff" else body)
    else:
        raise r.error(f"not a broker response id {msg_id:#04x}", field="msgId", offset=offset)
    r.expect_end()
    return resp
