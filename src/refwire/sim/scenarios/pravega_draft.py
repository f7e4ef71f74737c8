"""The Pravega 2017 draft dialect under faults (specs/pravega-draft-2017/README.md §6-§7).

Writers (one ConnectionId per (writer, segment)) send Begin/End blocks whose
events are cut into partial messages at random points -- some straddling the
EndAppendBlock -- padded with KeepAlives, through resets, partial reads, stalls
and store crashes that lose the log's unsynced tail; readers read the segments
back (the store splits large replies into partial messages).  Invariants:

* ``duplicate`` / ``order`` / ``gap`` -- per (ConnectionId, segment) the stored
  events are each writer's events exactly once, in order;
* ``ack-beyond-stored`` -- an ack level a writer saw never exceeds the durable
  bytes of its ConnectionId, and never goes backwards (the writer session
  refuses a backwards level: a client protocol error);
* ``read-mismatch`` -- reassembled SegmentReads equal the stored bytes;
* ``client-protocol-error`` -- our store never sent our client anything it rejected;
* ``lost`` -- after the liveness phase every event is stored;
* ``misfit-wrong-reply`` / ``hostile-not-closed`` -- misfit peers (``misfits``: a ReadSegment in
  PartialMessages outside a block; a block ending in a trailer, a KeepAlive and a reset there)
  get their KeepAlive echoed and are closed in time, and nothing they send is stored;
* ``rogue-read`` -- after healing, a reader against a rogue store that hangs up at once ends
  with the connection lost within 60 s, never with data.

The store's life, the run and the report are shared with today's dialect's
scenario (:mod:`._pravega_base`).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import trio

from refwire.errors import ProtocolError
from refwire.pravega.draft2017.client import DraftConnection, DraftReader, DraftWriter, DraftWriterConfig
from refwire.pravega.draft2017.errors import DraftWriteFailed
from refwire.pravega.draft2017.frames import (
    BeginAppendBlock,
    EndAppendBlock,
    Event,
    KeepAlive,
    Part,
    PartialMessage,
    ReadSegment,
    SetupAppend,
)
from refwire.pravega.draft2017.partial import split_message
from refwire.pravega.draft2017.server import DraftConfig, DraftFrontend
from refwire.pravega.server import SegmentStoreServer, ServerConfig

from ..harness import HALVE, Hostile, Misfit, Rogue, shrink_toward, sum_stats
from ..net import SimListener
from ..rand import SimRandom
from ._pravega_base import PravegaRun, PravegaScenarioBase

ADDRESS = "pravega-draft:12345"


def segment_name(i: int) -> str:
    return f"draft/stream/{i}.#epoch.0"


#: a misfit's ConnectionId, on segment 0 (which every workload has)
_MISFIT_ID = uuid.UUID(int=0x5EED0F15F17)
_ECHO = KeepAlive(data=b"misfit").encode()
#: the first 5 bytes of an Event, as the only content of a block: it never completes, so nothing is stored
_HALF_EVENT = PartialMessage(part=int(Part.BEGIN), data=Event(data=b"never finished").encode()[:5]).encode()

#: Misfit peers (``misfits``; specs/pravega-draft-2017/README.md §5, §6): a ReadSegment cut into
#: PartialMessages outside any block, and a block ending with the first part of an event (the
#: trailer), then a KeepAlive inside the trailer and a reset there.  Each KeepAlive is echoed.
MISFITS: dict[str, Misfit] = {
    "partial-request": Misfit(
        b"".join(split_message(ReadSegment(segment=segment_name(0), offset=0, suggested_length=100).encode(), [9])) + _ECHO,
        30.0,
        "eof",
        _ECHO,
    ),
    "reset-in-trailer": Misfit(
        SetupAppend(connection_id=_MISFIT_ID, segment=segment_name(0)).encode()
        + BeginAppendBlock(connection_id=_MISFIT_ID, connection_offset=0, length=len(_HALF_EVENT)).encode()
        + _HALF_EVENT
        + EndAppendBlock(connection_id=_MISFIT_ID, connection_offset=0, block_length=0).encode()
        + _ECHO,
        30.0,
        "reset",
        _ECHO,
    ),
}

#: Rogue stores (``rogues``; specs/pravega-draft-2017/README.md §1): one hanging up on a reader
#: as soon as it asked.
ROGUES: dict[str, Rogue] = {"eof-at-once": Rogue()}


class RandomPlan:
    """Blocks of random size; events cut at random points; straddles; padding."""

    def __init__(self, rng: SimRandom, wl: dict[str, Any]) -> None:
        self.rng = rng
        self.wl = wl

    def block_events(self) -> int:
        return self.rng.int_between(1, self.wl["max_block_events"])

    def cuts(self, frame_len: int) -> list[int]:
        if not self.rng.chance(self.wl["split_prob"]):
            return []
        return sorted(self.rng.int_between(0, frame_len) for _ in range(self.rng.int_between(1, 4)))

    def straddle(self) -> bool:
        return self.rng.chance(0.5)

    def padding(self) -> bytes | None:
        return bytes(self.rng.int_between(0, 12)) if self.rng.chance(self.wl["pad_prob"]) else None


class _Run(PravegaRun[DraftWriter]):
    ADDRESS = ADDRESS
    CONNECTION = DraftConnection
    READER = DraftReader
    READ_SIZE = 3000
    #: Hostile peers (specs/pravega-draft-2017/README.md §1, §3, §5): each is closed at once.
    HOSTILE: ClassVar[Mapping[str, Hostile]] = {
        "unknown-type": (struct.pack(">ii", 9, 4) + bytes(4), 30.0, False),
        "negative-length": (struct.pack(">ii", 1, -1), 30.0, False),
        "reply-from-client": (struct.pack(">ii", 5, 4) + bytes(4), 30.0, False),
        "middle-without-begin": (struct.pack(">ii", -2, 5) + b"\x01abcd", 30.0, False),
        "cut-by-eof": (struct.pack(">ii", 1, 100) + bytes(10), 30.0, True),
    }
    MISFITS: ClassVar[Mapping[str, Misfit]] = MISFITS
    ROGUES: ClassVar[Mapping[str, Rogue]] = ROGUES
    FILL = b"y"
    STRIDE = 7
    PROTOCOL_ERROR_REPLACES = ("pass", "liveness")  # the cause beats its symptom

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.levels: dict[tuple[int, int], int] = {}

    def segment_name(self, i: int) -> str:
        return segment_name(i)

    def durable(self, s: int) -> tuple[list[tuple[int, int]], int]:
        parsed = self.parse_durable(s)
        if parsed is None:  # its creation is gone from the durable log (only a lying fsync does that)
            self.violate("lost", f"segment {s} is not in the durable log any more")
            return [], 0
        events, used, visible = parsed
        if used != visible:
            self.violate("partial-stored", f"segment {s}: {visible - used} bytes at the end are not a whole Event")
        return events, visible

    def check_segment(self, s: int, *, final: bool = False) -> None:
        events, _ = self.durable(s)
        seen: dict[int, int] = {}
        stored_bytes: dict[int, int] = {}
        for w, i in events:
            last = seen.get(w, -1)
            if i != last + 1:
                kind = "duplicate" if i == last else "order" if i < last else "gap"
                self.violate(kind, f"segment {s}: writer {w} event {i} after {last}")
                return
            seen[w] = i
            stored_bytes[w] = stored_bytes.get(w, 0) + 8 + len(self.payload(w, s, i))
        for w in range(self.wl["writers"]):
            acked = self.levels.get((w, s), 0)
            if acked > stored_bytes.get(w, 0):
                self.violate(
                    "ack-beyond-stored",
                    f"segment {s}: ConnectionId of writer {w} acked at {acked}, {stored_bytes.get(w, 0)} bytes durable",
                )
                return
            if final and seen.get(w, -1) + 1 != self.wl["events"]:
                self.violate("lost", f"segment {s}: writer {w} has {seen.get(w, -1) + 1} of {self.wl['events']} events")
                return

    # -- the store, served by the draft front end -----------------------------------
    def server_config(self) -> ServerConfig:
        return ServerConfig(tail_wait=5.0)

    async def serve(self, server: SegmentStoreServer, nursery: trio.Nursery) -> SimListener:
        front = DraftFrontend(server, config=DraftConfig(reply_part_size=self.wl["reply_part_size"], tail_wait=5.0))
        if self.wl["bug"] == "forget-level":
            # Planted bug (tests the checker and the shrinker): AppendSetup always says 0.
            front._level = lambda segment, connection_id: 0  # type: ignore[method-assign]
        self.serving.append(front)
        await nursery.start(server.sync_forever)  # group commit; clients use the draft listener
        listener = self.net.listen(ADDRESS)
        await nursery.start(front.serve, [listener])
        return listener

    # -- writers ------------------------------------------------------------------
    def writer_rng(self, w: int, s: int) -> SimRandom:
        return self.rng.child("writer", w, s)

    async def write_segment(self, w: int, s: int, rng: SimRandom) -> None:
        wl = self.wl
        writer = DraftWriter(
            "sim",
            0,
            segment_name(s),
            connection_id=uuid.UUID(int=rng.int_between(1, 2**62) << 64 | w << 8 | s),
            config=DraftWriterConfig(max_attempts=None, ack_timeout=20.0),
            planner=RandomPlan(rng.child("plan"), wl),
            connect=lambda: self.net.connect(ADDRESS),
            rng=rng.child("backoff"),
        )
        self.writers.append(writer)
        for _start, batch in self.batches(w, s):
            try:
                level = await writer.write(batch)
            except DraftWriteFailed as exc:
                self.violate("write-failed", f"writer {w} segment {s}: {exc}")
                return
            self.levels[(w, s)] = level
            self.trace.record(trio.current_time(), "acked", w, s, level)
            self.check_segment(s)

    # -- readers --------------------------------------------------------------------
    def start_readers(self, nursery: trio.Nursery) -> None:
        if self.wl["readers"]:
            for s in range(self.wl["segments"]):
                nursery.start_soon(self.reader_task, s)

    def readers_total(self) -> int:
        return int(self.wl["segments"])  # one reader per segment

    async def reader_task(self, s: int) -> None:
        # Bytes read so far: only their number is needed (each read is checked against the
        # durable data as it comes); joining them into one bytes was quadratic in the segment's size.
        got = 0
        want = sum(8 + len(self.payload(w, s, i)) for w in range(self.wl["writers"]) for i in range(self.wl["events"]))

        async def attempt() -> None:
            nonlocal got
            got = await self._read_once(s, got, want)

        await self.read_with_retries(attempt, f"reader of segment {s}")

    async def _read_once(self, s: int, got: int, want: int) -> int:
        conn = DraftConnection(await self.net.connect(ADDRESS))
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)
            reader = DraftReader(conn, segment_name(s), offset=got, read_size=3000)
            try:
                got = await self._read_until(s, reader, got, want)
            finally:
                self.client_transitions |= conn.machine.transitions_seen
            nursery.cancel_scope.cancel()
        return got

    async def _read_until(self, s: int, reader: DraftReader, got: int, want: int) -> int:
        while got < want:
            r = await reader.read(timeout=30)
            if r.offset != got or not self.matches_durable(s, r.offset, r.data):
                self.violate(
                    "read-mismatch", f"segment {s}: read at {r.offset} ({len(r.data)} bytes) differs from the durable data"
                )
            got += len(r.data)
            self.counts["read_bytes"] += len(r.data)
        return got

    # -- the report ---------------------------------------------------------------
    def readers_progress(self) -> str:
        return str(self.readers_done)

    def add_counts(self, counts: dict[str, int]) -> None:
        counts |= sum_stats("writer", self.writers, ("reconnects", "protocol_errors"))
        counts["client_reconnects"] = counts["writer_reconnects"]
        counts |= sum_stats("server", self.serving, ("connections", "blocks", "protocol_errors", "closed_by_store"))
        counts["deliveries"] = sum(len(self.durable(s)[0]) for s in range(self.wl["segments"])) if self.server else 0

    def protocol_error_detail(self, counts: dict[str, int], first: ProtocolError) -> str:
        return str(first)


class PravegaDraftScenario(PravegaScenarioBase):
    #: Planted bugs a workload can ask for (``{"bug": NAME}``).
    BUGS = ("forget-level", "fsync-lies")
    #: One line per planted bug: what it breaks (``refwire sim --help`` lists them).
    BUG_NOTES: ClassVar[dict[str, str]] = {
        "forget-level": "the store's AppendSetup always reports level 0, forgetting what a writer already stored",
        "fsync-lies": "the store's storage acks a sync it never did: a crash loses acked appends",
    }

    name = "pravega-draft-2017"
    run_class = _Run

    def draw_workload(self, rng: SimRandom) -> dict[str, Any]:
        wl: dict[str, Any] = {
            "writers": rng.int_between(1, 3),
            "segments": rng.int_between(1, 2),
            "events": rng.int_between(3, 120),
            "batches": rng.pick([1, 3, 8]),
            "event_size": rng.pick([1, 30, 700, 5000]),
            "max_block_events": rng.pick([1, 4, 20]),
            "split_prob": rng.pick([0.0, 0.3, 0.9]),
            "pad_prob": rng.pick([0.0, 0.2]),
            "reply_part_size": rng.pick([1024 * 1024, 64, 1000]),
            "readers": rng.pick([0, 1]),
            "restarts": rng.pick([0, 0, 1, 2]),
            "safety_time": 60.0,
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
                ("restarts", 0),
                ("readers", 0),
                ("batches", 1),
                ("split_prob", 0.0),
                ("pad_prob", 0.0),
                ("max_block_events", 1),
                ("events", HALVE),
                ("event_size", 1),
            ],
        )


SCENARIO = PravegaDraftScenario()
