"""Pravega under faults: writers reconnecting to a segment store that crashes
and restarts from its durable log, and readers waiting at the tail.

Real drivers (:class:`~refwire.pravega.client.EventWriter`,
:class:`~refwire.pravega.server.SegmentStoreServer`) run unchanged over the
simulated network; the store's log is a :class:`~refwire.pravega.storage.MemoryLog`
whose unsynced tail is lost in a crash (the store's life, the run and the report
are shared with the draft dialect's scenario: :mod:`._pravega_base`).  Invariants (specs/pravega/README.md §5-§6):

* ``duplicate`` / ``order`` -- in every segment, each (writer, event) is stored
  at most once and a writer's events appear in the order written;
* ``ack-not-durable`` -- every event a writer saw acked is in the store's
  durable data (checked when acked, and again after every restart);
* ``read-mismatch`` -- what readers read equals the stored bytes at that offset;
* ``client-protocol-error`` -- our store never sent our client anything it had to reject;
* ``lost`` -- after the liveness phase every event is stored exactly once;
* ``misfit-wrong-reply`` / ``hostile-not-closed`` -- misfit peers (``misfits``: KeepAlive, Padding,
  a ConditionalAppend, commands and EOF inside an AppendBlock, an incompatible Hello) get the
  replies the store owes and are closed in time; nothing they send is stored;
* ``rogue-read`` -- after healing, a reader against a rogue store (``rogues``: Hello, KeepAlive,
  EOF) ends with the connection lost within 60 s, never with data;
* liveness -- once faults are healed, every writer finishes and every reader
  reaches the end within ``liveness_time`` virtual seconds.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import trio

from refwire.errors import ProtocolError
from refwire.pravega.client import EventWriter, PravegaConnection, SegmentReader, WriterConfig, parse_events
from refwire.pravega.errors import RequestFailed, WriteFailed
from refwire.pravega.frames import (
    AppendBlock,
    ConditionalAppend,
    ConditionalCheckFailed,
    GetStreamSegmentInfo,
    Hello,
    KeepAlive,
    Padding,
    SetupAppend,
)
from refwire.pravega.server import SegmentStoreServer, ServerConfig

from ..harness import HALVE, Hostile, Misfit, Rogue, shrink_toward, sum_stats
from ..net import SimListener
from ..rand import SimRandom
from ._pravega_base import TRANSIENT, PravegaRun, PravegaScenarioBase

ADDRESS = "pravega-store:12345"


def segment_name(i: int) -> str:
    return f"sim/stream/{i}.#epoch.0"

#: a misfit's writer and segment: a segment the store does not have, so nothing it sends is stored
_MISFIT_WRITER = uuid.UUID(int=0x5EED0F15F17)
_MISFIT_SEGMENT = "sim/misfit/0.#epoch.0"
_SETUP = SetupAppend(request_id=1, writer_id=_MISFIT_WRITER, segment=_MISFIT_SEGMENT).encode()
_BLOCK = AppendBlock(writer_id=_MISFIT_WRITER).encode()
_OLD_HELLO = Hello(high_version=1, low_version=1).encode()  # older than the oldest compatible version

#: Misfit peers (``misfits``; specs/pravega/README.md §4, §5.3): commands refwire's writers and
#: readers never send -- a KeepAlive and a top-level Padding (answered with a KeepAlive, ignored),
#: a ConditionalAppend, a Hello, KeepAlive and request inside an open AppendBlock and an EOF
#: there, and a Hello whose versions are too old (answered with our Hello, then closed).
#: Their segment does not exist, so the store answers NoSuchSegment and stores nothing.
MISFITS: dict[str, Misfit] = {
    "keepalive-padding": Misfit(Hello().encode() + KeepAlive().encode() + Padding(length=8).encode(), 30.0, "eof", Hello().encode() + KeepAlive().encode()),
    "old-hello": Misfit(_OLD_HELLO, 30.0, expect=Hello().encode()),
    "conditional": Misfit(
        Hello().encode()
        + SetupAppend(request_id=1, writer_id=_MISFIT_WRITER, segment=segment_name(0)).encode()
        + ConditionalAppend(writer_id=_MISFIT_WRITER, event_number=1, expected_offset=1 << 60, event=b"misfit", request_id=2).encode(),
        30.0,
        "eof",
        ConditionalCheckFailed(writer_id=_MISFIT_WRITER, event_number=1, request_id=2).encode(),
    ),
    "commands-in-block": Misfit(
        Hello().encode() + _SETUP + _BLOCK + Hello().encode() + KeepAlive().encode() + GetStreamSegmentInfo(request_id=3, segment_name=_MISFIT_SEGMENT).encode(),
        30.0,
        "eof",
        Hello().encode(),
    ),
    "old-hello-in-block": Misfit(Hello().encode() + _SETUP + _BLOCK + _OLD_HELLO, 30.0, expect=Hello().encode()),
}

#: Rogue stores (``rogues``; specs/pravega/README.md §4): one answering a reader's Hello with
#: its own and a KeepAlive, then hanging up.
ROGUES: dict[str, Rogue] = {"keepalive-then-eof": Rogue(Hello().encode() + KeepAlive().encode())}


class _Run(PravegaRun[EventWriter]):
    ADDRESS = ADDRESS
    CONNECTION = PravegaConnection
    READER = SegmentReader
    READ_SIZE = 4096
    #: Hostile peers (specs/pravega/README.md §1, §5.3, §8): each is closed without a reply at once
    #: (the store has no idle timeout, so nothing else would close them).
    HOSTILE: ClassVar[Mapping[str, Hostile]] = {
        "unknown-type": (struct.pack(">ii", 99, 4) + b"\x00" * 4, 30.0, False),
        "negative-length": (struct.pack(">ii", 20, -1), 30.0, False),
        "top-level-event": (struct.pack(">ii", 0, 4) + b"\x00" * 4, 30.0, False),
        "append-without-setup": (
            struct.pack(">ii", 4, 44) + bytes(16) + struct.pack(">ii", 0, 0) + struct.pack(">iqq", 1, 1, 1),
            30.0,
            False,
        ),
        "cut-by-eof": (struct.pack(">ii", 20, 100) + b"\x00" * 10, 30.0, True),
    }
    MISFITS: ClassVar[Mapping[str, Misfit]] = MISFITS
    ROGUES: ClassVar[Mapping[str, Rogue]] = ROGUES
    FILL = b"x"
    STRIDE = 1

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.acked: dict[tuple[int, int], int] = {}  # (writer, segment) -> events acked
        self.read: dict[tuple[int, int], int] = {}  # (reader, segment) -> bytes read
        #: (reader, segment) -> the bytes read after the last whole event, and the whole events
        #: before them: each read parses only what is new (re-parsing everything read so far
        #: after every read, and joining it into one bytes, was quadratic in a segment's size).
        self.unparsed: dict[tuple[int, int], bytes] = {}
        self.events_read: dict[tuple[int, int], int] = {}
        self.counts["client_protocol_errors"] = 0

    def segment_name(self, i: int) -> str:
        return segment_name(i)

    # -- checks over the durable data -----------------------------------------
    def durable_events(self, s: int) -> list[tuple[int, int]]:
        parsed = self.parse_durable(s)
        return [] if parsed is None else parsed[0]

    def check_segment(self, s: int, *, final: bool = False) -> None:
        seen: dict[int, int] = {}
        for w, i in self.durable_events(s):
            last = seen.get(w, -1)
            if i <= last:
                self.violate("duplicate" if i == last else "order", f"segment {s}: writer {w} event {i} after {last}")
                return
            if i != last + 1:
                self.violate("order", f"segment {s}: writer {w} event {i} follows {last} (gap)")
                return
            seen[w] = i
        for w in range(self.wl["writers"]):
            have = seen.get(w, -1) + 1
            if have < self.acked.get((w, s), 0):
                self.violate(
                    "ack-not-durable", f"segment {s}: writer {w} saw {self.acked[(w, s)]} events acked, {have} are durable"
                )
                return
            if final and have != self.wl["events"]:
                self.violate("lost", f"segment {s}: writer {w} has {have} of {self.wl['events']} events stored")
                return

    # -- the store ----------------------------------------------------------------
    def server_config(self) -> ServerConfig:
        return ServerConfig(tail_wait=self.wl["tail_wait"])

    async def serve(self, server: SegmentStoreServer, nursery: trio.Nursery) -> SimListener:
        self.serving.append(server)
        listener = self.net.listen(ADDRESS)
        await nursery.start(server.serve, [listener])
        return listener

    # -- writers ------------------------------------------------------------------
    def writer_rng(self, w: int, s: int) -> SimRandom:
        return self.rng.child("writer", w).child("segment", s)

    async def write_segment(self, w: int, s: int, rng: SimRandom) -> None:
        wl = self.wl
        writer = EventWriter(
            "sim",
            0,
            segment_name(s),
            writer_id=uuid.UUID(int=rng.int_between(1, 2**62) << 64 | w << 8 | s),
            config=WriterConfig(style=wl["styles"][w], max_attempts=None, ack_timeout=wl["ack_timeout"], backoff=(0.05, 2.0)),
            connect=lambda: self.net.connect(ADDRESS),
            rng=rng.child("backoff"),
        )
        writer.session.java_block_sizes = list(wl["block_sizes"]) or None
        self.writers.append(writer)
        if wl.get("persistent"):
            async with writer:
                await self.write_batches(writer, w, s)
        else:
            await self.write_batches(writer, w, s)

    async def write_batches(self, writer: EventWriter, w: int, s: int) -> None:
        for start, batch in self.batches(w, s):
            try:
                await writer.write(batch)
            except WriteFailed as exc:
                self.violate("write-failed", f"writer {w} on segment {s}: {exc}")
                return
            self.acked[(w, s)] = start + len(batch)
            self.trace.record(trio.current_time(), "acked", w, s, start + len(batch))
            self.check_segment(s)

    # -- readers at the tail ----------------------------------------------------------
    def start_readers(self, nursery: trio.Nursery) -> None:
        for r in range(self.wl["readers"]):
            for s in range(self.wl["segments"]):
                nursery.start_soon(self.reader_task, r, s)

    async def reader_task(self, r: int, s: int) -> None:
        """Reads segment ``s`` from 0, reconnecting, until it has everything written."""
        key = (r, s)
        self.read[key] = 0
        self.unparsed[key] = b""
        self.events_read[key] = 0
        total_events = self.wl["events"] * self.wl["writers"]
        await self.read_with_retries(lambda: self._read_once(key, s, total_events), f"reader {key}", (*TRANSIENT, RequestFailed))

    def client_protocol_error(self, who: str, exc: ProtocolError) -> None:
        self.counts["client_protocol_errors"] += 1
        super().client_protocol_error(who, exc)

    async def _read_once(self, key: tuple[int, int], s: int, total_events: int) -> None:
        """One connection's worth of reading; returns once everything was read."""
        stream = await self.net.connect(ADDRESS)
        conn = PravegaConnection(stream)
        async with trio.open_nursery() as nursery:
            with trio.fail_after(30):
                await nursery.start(conn.run)
            reader = SegmentReader(conn, segment_name(s), offset=self.read[key], read_size=4096)
            try:
                while self.count_events(key) < total_events:
                    got = await reader.read(timeout=30)
                    self.check_read(key, got.offset, got.data)
            finally:
                self.client_transitions |= conn.machine.transitions_seen
            nursery.cancel_scope.cancel()

    def count_events(self, key: tuple[int, int]) -> int:
        """The whole events among the bytes ``key`` read (parse errors as :func:`parse_events`
        raises them, at their offsets in the segment)."""
        pending = self.unparsed[key]
        if pending:
            found, used = parse_events(pending, base=self.read[key] - len(pending))
            self.events_read[key] += len(found)
            self.unparsed[key] = pending[used:]
        return self.events_read[key]

    def check_read(self, key: tuple[int, int], offset: int, data: bytes) -> None:
        have = self.read[key]
        if offset != have:
            self.violate("read-mismatch", f"reader {key}: reply at {offset}, expected {have}")
            return
        self.read[key] = have + len(data)
        self.unparsed[key] += data
        self.counts["read_bytes"] += len(data)
        if not self.matches_durable(key[1], offset, data):
            self.violate("read-mismatch", f"reader {key}: bytes at {offset}..{offset + len(data)} differ from the durable data")

    # -- the report ---------------------------------------------------------------
    def readers_progress(self) -> str:
        return f"{self.readers_done} of {self.readers_total()}"

    def add_counts(self, counts: dict[str, int]) -> None:
        counts |= sum_stats("writer", self.writers, ("connections", "reconnects", "acked", "protocol_errors"))
        counts |= sum_stats("server", self.serving, ("connections", "appends", "reads", "protocol_errors", "syncs"))
        counts["deliveries"] = sum(len(self.durable_events(s)) for s in range(self.wl["segments"]))
        counts["client_reconnects"] = counts["writer_reconnects"]

    def protocol_error_detail(self, counts: dict[str, int], first: ProtocolError) -> str:
        return f"{counts['writer_protocol_errors']} replies rejected by our writers: {first}"


class PravegaScenario(PravegaScenarioBase):
    #: Planted bugs a workload can ask for (``{"bug": NAME}``).
    BUGS = ("fsync-lies",)
    #: One line per planted bug: what it breaks (``refwire sim --help`` lists them).
    BUG_NOTES: ClassVar[dict[str, str]] = {"fsync-lies": "the store's storage acks a sync it never did: a crash loses acked appends"}

    name = "pravega"
    run_class = _Run

    def draw_workload(self, rng: SimRandom) -> dict[str, Any]:
        wl: dict[str, Any] = {
            "writers": rng.int_between(1, 4),
            "segments": rng.int_between(1, 3),
            "events": rng.int_between(5, 200),
            "batches": rng.pick([1, 3, 10]),
            "styles": [rng.pick(["rust", "java"]) for _ in range(4)],
            "block_sizes": rng.pick([[], [20], [7, 50, 300], [1000, 13]]),
            "event_size": rng.pick([1, 20, 300, 5000]),
            "readers": rng.pick([0, 1, 2]),
            "restarts": rng.pick([0, 0, 1, 2]),
            "tail_wait": rng.pick([2.0, 10.0]),
            "ack_timeout": rng.pick([10.0, 30.0]),
            "safety_time": 60.0,
            "persistent": rng.pick([True, False]),  # one connection across writes, or one per flush
            "bug": "",
        }
        wl["liveness_time"] = 300.0 + wl["events"] * wl["writers"] * 0.05
        wl["hostiles"] = rng.pick([0, 0, 1, 2])  # drawn last: the knobs above keep their draws
        wl["misfits"] = rng.pick([0, 0, 1, 2])  # after hostiles, for the same reason
        wl["rogues"] = rng.pick([0, 0, 1])  # after misfits, for the same reason
        return wl

    def shrink_steps(self, workload: dict[str, Any]) -> Iterable[tuple[str, Any]]:
        return shrink_toward(
            workload,
            [
                ("hostiles", 0),
                ("misfits", 0),
                ("rogues", 0),
                ("writers", 1),
                ("segments", 1),
                ("events", HALVE),
                ("restarts", 0),
                ("readers", 0),
                ("batches", 1),
                ("event_size", 1),
                ("block_sizes", []),
            ],
        )


SCENARIO = PravegaScenario()
