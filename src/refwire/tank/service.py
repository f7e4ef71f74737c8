"""The service behind the TANK broker's machine: its topic logic, Sans-IO (specs/tank/README.md §6).

:class:`BrokerService` owns topics (through a :class:`~refwire.tank.storage.Storage`),
assigns sequence numbers, answers consumes and keeps long-poll waits.  It does
no network I/O and reads no clock: ``handle(conn, request, now=...)`` and
``handle_timer(now=...)`` return ``(conn, response)`` pairs to send, in order --
a long poll woken by a produce is answered *before* that produce.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable
from typing import Final

import attrs

from ..errors import LimitExceeded, LocalProtocolError
from ..wire import Limits
from .bundles import U64_MAX, BundleHeader, decode_bundle, encode_entry, parse_bundle_header
from .frames import (
    ConsumeRequest,
    CreateTopicRequest,
    DiscoverPartitionsRequest,
    DiscoverTopicsRequest,
    DiscoverTopologyRequest,
    Ping,
    ProduceRequest,
    ReloadConfRequest,
    Request,
    StatusRequest,
    broker_limits,
    memory_caps,
)
from .responses import (
    ERR_BOUNDARY,
    ERR_INVALID_SEQNUMS,
    ERR_READ_ONLY,
    ERR_SPARSE,
    ERR_SYSTEM,
    ERR_UNKNOWN,
    ERR_UNKNOWN_PARTITION,
    ConsumePartitionResult,
    ConsumeResponse,
    ConsumeTopicResult,
    CreateTopicResponse,
    DiscoverPartitionsResponse,
    DiscoverTopicsResponse,
    DiscoverTopologyResponse,
    PartitionInfo,
    ProduceResponse,
    ProduceResult,
    ReloadConfResponse,
    Response,
    StatusResponse,
    TopicInfo,
)
from .storage import Entry, PartitionLog, Storage

__all__ = ["ANSWER_COST", "LISTING_COST", "WAIT_COST", "BrokerConfig", "BrokerService", "is_valid_topic_name", "normalize_max_wait"]

MAX_CLAMP: Final = 64 * 1024 * 1024  #: fetchSize / minBytes clamp (§6)
MAX_WAIT_CAP_MS: Final = 3_600_000
MAX_PARTITIONS: Final = 65530
_TOPIC_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")

Outbox = list[tuple[int, Response]]

#: What a byte of chunks in an answer costs against ``max_connection_memory`` (§6,
#: limits): the chunk joined from stored entries, the encoded frame, the
#: driver's joined write.  One answer's chunks (and a connection's long polls'
#: captured data, with what it has not read yet) may take a third of the budget.
ANSWER_COST: Final = 3
#: What a parked long poll costs (§6, limits): its own record, and each
#: partition it names (its layout and the result the answer builds for it).
#: A connection's parked polls may take a quarter of the budget.
WAIT_COST: Final = 1024
LISTING_COST: Final = 256


def is_valid_topic_name(name: str) -> bool:
    """The broker's ``is_valid_topic_name`` (§3): 1-64 of ``[A-Za-z0-9_-]``,
    at least one alphanumeric, not starting or ending with ``-``/``_``."""
    return bool(_TOPIC_RE.fullmatch(name)) and any(c.isalnum() for c in name) and name[0] not in "-_" and name[-1] not in "-_"


def normalize_max_wait(ms: int) -> int:
    """0 stays 0; else ``min(ms, 1 h)`` rounded up to a multiple of 64, at least 320 ms (§6)."""
    if ms == 0:
        return 0
    ms = min(ms, MAX_WAIT_CAP_MS)
    return max(320, -(-ms // 64) * 64)


@attrs.frozen(kw_only=True)
class BrokerConfig:
    limits: Limits = attrs.field(factory=broker_limits)  #: requests up to DEFAULT_MAX_REQUEST (§6)
    read_only: bool = False  #: ``tank -r``: produces get 0xfe
    #: decode every produced bundle (Snappy included) before storing it; the real
    #: broker stores whatever parses at the header level (§3).
    validate_bundles: bool = True
    startup_ts: int = 0
    idle_timeout: float | None = 16.0  #: the real broker's idle_connection_ttl (§6)
    #: a frame begun and still incomplete after this many seconds fails the connection
    #: (a peer trickling bytes cannot hold it for ever; between frames idling is as before); None = never
    frame_timeout: float | None = 30.0
    #: long polls one connection may have parked; one more answers its oldest at
    #: once, as if its maxWait had passed (refwire's bound: the real broker has none)
    max_long_polls: int = 1000


@attrs.define
class _Wait:
    id: int
    conn: int
    request_id: int
    layout: tuple[tuple[str, tuple[int, ...]], ...]
    min_bytes: int
    deadline: float
    captured: int = 0
    got: dict[tuple[str, int], list[Entry]] = attrs.Factory(dict)
    #: how many times the request names each partition (a chunk goes out once per naming)
    names: Counter[tuple[str, int]] = attrs.Factory(Counter)
    #: chunk bytes its answer would carry now (each captured entry times its namings)
    answer: int = 0

    @property
    def cost(self) -> int:
        return WAIT_COST + LISTING_COST * sum(self.names.values())


class BrokerService:
    """Topics, sequence numbers, consumes and long polls (§7)."""

    def __init__(self, storage: Storage, config: BrokerConfig = BrokerConfig()) -> None:
        self.storage = storage
        self.config = config
        self._waits: dict[int, _Wait] = {}
        self._by_partition: dict[tuple[str, int], dict[int, None]] = {}
        self._ids = itertools.count(1)
        #: per connection: the parked polls' cost and the chunk bytes they captured (§6, limits)
        self._parked: dict[int, int] = {}
        self._captured: dict[int, int] = {}
        #: bytes already queued to a connection and not yet written (the driver sets it)
        self.queued: Callable[[int], int] = lambda conn: 0
        budget = config.limits.max_connection_memory
        #: the decoder's limits under the budget (Snappy sets a quarter of it, §6)
        self._limits = memory_caps(config.limits)[0]
        #: most chunk bytes one answer (and a connection's captured long-poll data) may carry
        self.answer_room = budget // ANSWER_COST
        #: most a connection's parked long polls may cost
        self.parked_room = budget // 4
        self.stats = {"produced_messages": 0, "produced_bundles": 0, "consumes": 0, "long_polls": 0, "woken": 0, "timeouts": 0}

    # -- helpers -----------------------------------------------------------
    def _log(self, topic: str, partition: int) -> PartitionLog | None:
        logs = self.storage.topics.get(topic)
        if logs is None or not 0 <= partition < len(logs):
            return None
        return logs[partition]

    def waits_of(self, conn: int) -> int:
        return sum(1 for w in self._waits.values() if w.conn == conn)

    def drop_connection(self, conn: int) -> None:
        for w in [w for w in self._waits.values() if w.conn == conn]:
            self._remove(w)

    def _remove(self, w: _Wait) -> None:
        if self._waits.pop(w.id, None) is not None:
            self._parked[w.conn] -= w.cost
            self._captured[w.conn] -= w.answer
            if not self._parked[w.conn]:
                del self._parked[w.conn], self._captured[w.conn]
        for key in [(t, p) for t, ps in w.layout for p in ps]:
            ws = self._by_partition.get(key)
            if ws is not None:
                ws.pop(w.id, None)
                if not ws:
                    del self._by_partition[key]

    # -- entry point -------------------------------------------------------
    def handle(self, conn: int, req: Request, *, now: float) -> Outbox:
        """Process one request; raise :class:`LocalProtocolError` for a request
        whose bundles are malformed (nothing of it is stored; close the connection)."""
        if isinstance(req, Ping):
            return []
        if isinstance(req, ProduceRequest):
            return self._produce(conn, req)
        if isinstance(req, ConsumeRequest):
            return self._consume(conn, req, now)
        return [(conn, self._admin(req))]

    def _admin(self, req: Request) -> Response:
        topics = self.storage.topics
        if isinstance(req, DiscoverPartitionsRequest):
            logs = topics.get(req.topic)
            if logs is None:
                return DiscoverPartitionsResponse(req.request_id, req.topic, ())
            if not req.partitions:
                infos = [PartitionInfo(lg.first_avail, lg.last_assigned) for lg in logs]
            else:
                infos = []
                for p in req.partitions:
                    lg = self._log(req.topic, p)
                    infos.append(
                        PartitionInfo(lg.first_avail, lg.last_assigned) if lg else PartitionInfo(U64_MAX, U64_MAX, ERR_SYSTEM)
                    )
            return DiscoverPartitionsResponse(req.request_id, req.topic, tuple(infos))
        if isinstance(req, CreateTopicRequest):
            if self.config.read_only:
                err = 5
            elif not is_valid_topic_name(req.topic) or not 1 <= req.partitions <= MAX_PARTITIONS:
                err = 10
            elif req.topic in topics:
                err = 1
            elif not _valid_config(req.config):
                err = 4
            else:
                try:
                    self.storage.create_topic(req.topic, req.partitions)
                    err = 0
                except OSError:
                    err = 2
            return CreateTopicResponse(req.request_id, req.topic, err)
        if isinstance(req, ReloadConfRequest):
            err = 11 if req.topic not in topics else 10 if self._log(req.topic, req.partition) is None else 2
            return ReloadConfResponse(req.request_id, req.topic, req.partition, err)
        if isinstance(req, StatusRequest):
            nparts = sum(len(v) for v in topics.values())
            return StatusResponse(req.request_id, len(topics), nparts, nparts, 0, self.config.startup_ts)
        if isinstance(req, DiscoverTopicsRequest):
            return DiscoverTopicsResponse(req.request_id, tuple(TopicInfo(n, len(topics[n])) for n in sorted(topics)))
        assert isinstance(req, DiscoverTopologyRequest)
        return DiscoverTopologyResponse(req.request_id)

    # -- produce (§3, §6) ---------------------------------------------
    def _produce(self, conn: int, req: ProduceRequest) -> Outbox:
        headers: dict[tuple[int, int], BundleHeader] = {}
        for ti, t in enumerate(req.topics):  # validate everything before storing anything
            for pi, p in enumerate(t.partitions):
                where = f"topic {t.name!r} partition {p.partition}"
                try:
                    if self.config.validate_bundles:
                        headers[ti, pi] = decode_bundle(p.bundle, limits=self._limits)[0]
                    else:
                        headers[ti, pi] = parse_bundle_header(p.bundle)
                except LocalProtocolError as exc:
                    raise LocalProtocolError(
                        f"{where}: {exc.reason}",
                        protocol="tank",
                        frame=req.__class__.__name__,
                        field=exc.field,
                        offset=exc.offset,
                    ) from None
        out: Outbox = []
        results: list[ProduceResult] = []
        for ti, t in enumerate(req.topics):
            logs = self.storage.topics.get(t.name)
            if logs is None or self.config.read_only:
                err = ERR_UNKNOWN if logs is None else ERR_READ_ONLY
                results.extend(ProduceResult(t.name, p.partition, err) for p in t.partitions)
                continue
            for pi, p in enumerate(t.partitions):
                lg = self._log(t.name, p.partition)
                if lg is None:
                    results.append(ProduceResult(t.name, p.partition, ERR_UNKNOWN_PARTITION))
                    continue
                h = headers[ti, pi]
                last = lg.last_assigned
                if h.sparse:
                    assert h.first_seq is not None and h.last_seq is not None
                    first, lst = h.first_seq, h.last_seq
                    ok = first > last
                elif req.with_seqnum:
                    # Our choice (§7, quirk 7.8-2): a non-sparse 0x05 bundle may not open a gap.
                    first, lst = p.base_seq or 0, (p.base_seq or 0) + h.count - 1
                    ok = first == last + 1
                else:
                    first, lst, ok = last + 1, last + h.count, True
                if not ok or lst >= U64_MAX:
                    results.append(ProduceResult(t.name, p.partition, ERR_INVALID_SEQNUMS))
                    continue
                entry = Entry(first, lst, h.sparse, encode_entry(p.bundle))
                try:
                    lg.append(entry)
                except OSError:
                    results.append(ProduceResult(t.name, p.partition, 2))
                    continue
                self.stats["produced_bundles"] += 1
                self.stats["produced_messages"] += h.count
                results.append(ProduceResult(t.name, p.partition, 0))
                out.extend(self._wake((t.name, p.partition), entry))
        out.append((conn, ProduceResponse(req.request_id, tuple(results))))
        return out

    def _wake(self, key: tuple[str, int], entry: Entry) -> Outbox:
        """Give ``entry`` to the polls waiting on ``key``.  A poll whose
        connection has no room left for it (a third of the budget, less what it
        has not read and what its polls captured) is answered at once without
        it: with what it captured, or empty as on timeout; the client asks again."""
        ids = self._by_partition.get(key)
        if not ids:
            return []
        out: Outbox = []
        sent: dict[int, int] = {}
        for wid in list(ids):
            w = self._waits[wid]
            delta = len(entry.data) * w.names[key]
            if self.queued(w.conn) + sent.get(w.conn, 0) + self._captured[w.conn] + delta > self.answer_room:
                self._remove(w)
                self.stats["woken"] += 1
                sent[w.conn] = sent.get(w.conn, 0) + w.answer
                out.append((w.conn, self._wait_response(w)))
                continue
            w.got.setdefault(key, []).append(entry)
            w.captured += len(entry.data)
            w.answer += delta
            self._captured[w.conn] += delta
            if w.captured >= w.min_bytes:
                sent[w.conn] = sent.get(w.conn, 0) + w.answer
                self._remove(w)
                self.stats["woken"] += 1
                out.append((w.conn, self._wait_response(w)))
        return out

    def _wait_response(self, w: _Wait) -> ConsumeResponse:
        topics = []
        for name, parts in w.layout:
            res = []
            for pid in parts:
                lg = self._log(name, pid)
                hw = lg.last_assigned if lg else 0
                got = w.got.get((name, pid))
                if got:
                    chunk = b"".join(e.data for e in got)
                    sparse = got[0].sparse
                    res.append(
                        ConsumePartitionResult(pid, ERR_SPARSE if sparse else 0, None if sparse else got[0].first, hw, chunk)
                    )
                else:
                    res.append(ConsumePartitionResult(pid, 0, 0, hw))
            topics.append(ConsumeTopicResult(name, tuple(res), False, len(parts)))
        return ConsumeResponse(w.request_id, tuple(topics))

    # -- consume (§6) -----------------------------------------------
    def _consume(self, conn: int, req: ConsumeRequest, now: float) -> Outbox:
        self.stats["consumes"] += 1
        immediate = req.max_wait_ms == 0
        room = self.answer_room  # chunk bytes this answer may still carry (§6, limits)
        topics: list[ConsumeTopicResult] = []
        for t in req.topics:
            if t.name not in self.storage.topics:
                immediate = True
                topics.append(ConsumeTopicResult(t.name, (), True, len(t.partitions)))
                continue
            parts = []
            for p in t.partitions:
                lg = self._log(t.name, p.partition)
                if lg is None:
                    immediate = True
                    parts.append(ConsumePartitionResult(p.partition, ERR_UNKNOWN, None))
                    continue
                first, last = lg.first_avail, lg.last_assigned
                seq = first if p.seq == 0 else p.seq
                if p.seq == U64_MAX or seq == last + 1 or (p.seq == 0 and not lg.entries):
                    parts.append(ConsumePartitionResult(p.partition, 0, first, last))  # EOF
                elif seq > last + 1 or seq < first:
                    immediate = True
                    parts.append(ConsumePartitionResult(p.partition, ERR_BOUNDARY, 0, last, b"", first))
                else:
                    immediate = True
                    entry, chunk = lg.read(seq, max(1, min(p.fetch_size, MAX_CLAMP, room)))
                    if len(chunk) > room:
                        if len(entry.data) > room and room == self.answer_room:
                            raise LimitExceeded(
                                f"{t.name}/{p.partition}: its bundle at {seq} is {len(entry.data)} bytes, more than the "
                                f"{self.answer_room} an answer may carry under the limit max_connection_memory="
                                f"{self.config.limits.max_connection_memory} (each byte costs {ANSWER_COST}x)",
                                protocol="tank", frame="Consume", field="fetchSize",
                            )
                        if len(entry.data) > room:  # no room left in this answer: none of it; the client asks again
                            parts.append(ConsumePartitionResult(p.partition, 0, seq, last))
                            continue
                        chunk = entry.data  # the first bundle only (whole bundles, §6)
                    room -= len(chunk)
                    if entry.sparse:
                        parts.append(ConsumePartitionResult(p.partition, ERR_SPARSE, None, last, chunk))
                    else:
                        parts.append(ConsumePartitionResult(p.partition, 0, entry.first, last, chunk))
            topics.append(ConsumeTopicResult(t.name, tuple(parts), False, len(t.partitions)))
        if immediate:
            return [(conn, ConsumeResponse(req.request_id, tuple(topics)))]
        wait_ms = normalize_max_wait(req.max_wait_ms)
        now_ms = int(now * 1000)
        deadline = (-(-(now_ms + wait_ms) // 128) * 128) / 1000.0
        w = _Wait(
            next(self._ids),
            conn,
            req.request_id,
            tuple((t.name, tuple(p.partition for p in t.partitions)) for t in req.topics),
            min(req.min_bytes, MAX_CLAMP),
            deadline,
        )
        w.names.update((t.name, p.partition) for t in req.topics for p in t.partitions)
        if w.cost > self.parked_room:  # it alone is over the connection's share: answered now, as at EOF
            return [(conn, ConsumeResponse(req.request_id, tuple(topics)))]
        early: Outbox = []
        mine = sorted((x for x in self._waits.values() if x.conn == conn), key=lambda x: x.id)
        while mine and (len(mine) >= self.config.max_long_polls or self._parked.get(conn, 0) + w.cost > self.parked_room):
            oldest = mine.pop(0)  # answered at once, as its timeout would (§6)
            self._remove(oldest)
            self.stats["timeouts"] += 1
            oldest.got.clear()
            early.append((conn, self._timeout_response(oldest)))
        self._waits[w.id] = w
        self._parked[conn] = self._parked.get(conn, 0) + w.cost
        self._captured.setdefault(conn, 0)
        for name, pids in w.layout:
            for pid in pids:
                self._by_partition.setdefault((name, pid), {})[w.id] = None
        self.stats["long_polls"] += 1
        return early

    # -- timers --------------------------------------------------------------
    def next_deadline(self) -> float | None:
        return min((w.deadline for w in self._waits.values()), default=None)

    def handle_timer(self, *, now: float) -> Outbox:
        """Answer every wait whose deadline passed: ``err 0, base 0, hwmark, no chunk`` (§6)."""
        out: Outbox = []
        for w in sorted(self._waits.values(), key=lambda w: (w.deadline, w.id)):
            if w.deadline > now:
                continue
            self._remove(w)
            self.stats["timeouts"] += 1
            # As the real broker: data captured below minBytes is not sent on
            # timeout (every chunk is empty); hwmark tells the client it exists.
            w.got.clear()
            out.append((w.conn, self._timeout_response(w)))
        return out

    def _timeout_response(self, w: _Wait) -> ConsumeResponse:
        return self._wait_response(w)


def _valid_config(config: bytes) -> bool:
    """``key = value`` lines; ``#`` starts a comment (§3)."""
    try:
        text = config.decode("utf-8")
    except UnicodeDecodeError:
        return False
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line and ("=" not in line or not line.split("=", 1)[0].strip()):
            return False
    return True
