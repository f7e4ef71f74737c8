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
* ``lost`` -- after the liveness phase every event is stored.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import trio

from refwire.drivers import first_error
from refwire.errors import DraftWriteFailed, ProtocolError
from refwire.pravega.client import parse_events
from refwire.pravega.draft2017.client import DraftConnection, DraftReader, DraftWriter, DraftWriterConfig
from refwire.pravega.draft2017.server import DraftConfig, DraftFrontend
from refwire.pravega.server import SegmentStoreServer, ServerConfig
from refwire.pravega.storage import MemoryLog

from ..faults import Faults
from ..harness import HALVE, RunBase, coverage, crash_restart_loop, safety_then_liveness, shrink_toward, sum_stats
from ..rand import SimRandom
from ..trace import Trace
from . import ScenarioReport

ADDRESS = "pravega-draft:12345"


def segment_name(i: int) -> str:
    return f"draft/stream/{i}.#epoch.0"


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


class PravegaDraftScenario:
    name = "pravega-draft-2017"

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
        return wl

    def shrink_steps(self, workload: dict[str, Any]) -> Iterable[tuple[str, Any]]:
        return shrink_toward(
            workload,
            [
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

    async def run(self, *, rng: SimRandom, faults: Faults, workload: dict[str, Any], trace: Trace) -> ScenarioReport:
        return await _Run(rng, faults, workload, trace).main()


class _Run(RunBase):
    def __init__(self, rng: SimRandom, faults: Faults, wl: dict[str, Any], trace: Trace) -> None:
        super().__init__(rng, faults, wl, trace)
        self.log = MemoryLog()
        self.store: SegmentStoreServer | None = None
        self.frontends: list[DraftFrontend] = []
        self.writers_done = trio.Event()
        self.all_read = trio.Event()
        self.done = 0
        self.readers_done = 0
        self.writers: list[DraftWriter] = []
        self.levels: dict[tuple[int, int], int] = {}
        self.counts: dict[str, int] = {"server_restarts": 0, "events_total": 0, "read_bytes": 0}
        self.client_transitions: set[tuple[str, str, str]] = set()

    def payload(self, w: int, s: int, i: int) -> bytes:
        head = f"{w}:{s}:{i}:".encode()
        size = int(self.wl["event_size"])
        return head + b"y" * max(0, (size + 7 * i) % (2 * size + 1) - len(head))

    def durable(self, s: int) -> tuple[list[tuple[int, int]], int]:
        assert self.store is not None
        seg = self.store.store.segments[segment_name(s)]
        events, used = parse_events(seg.read_bytes(0, seg.visible))
        if used != seg.visible:
            self.violate("partial-stored", f"segment {s}: {seg.visible - used} bytes at the end are not a whole Event")
        out = []
        for _off, p in events:
            w, _s, i = p.split(b":")[:3]
            out.append((int(w), int(i)))
        return out, seg.visible

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

    async def server_life(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        wl = self.wl

        async def start(gen: int, nursery: trio.Nursery) -> Any:
            store = SegmentStoreServer(
                config=ServerConfig(tail_wait=5.0), log=self.log, now=lambda: int(trio.current_time() * 1000)
            )
            self.store = store
            if gen == 0:
                for s in range(wl["segments"]):
                    store.store.create(segment_name(s))
                store.store.mark_durable(self.log.sync())
            else:
                for s in range(wl["segments"]):
                    self.check_segment(s)
            front = DraftFrontend(store, config=DraftConfig(reply_part_size=wl["reply_part_size"], tail_wait=5.0))
            if wl["bug"] == "forget-level":
                # Planted bug (tests the checker and the shrinker): AppendSetup always says 0.
                front._level = lambda segment, connection_id: 0  # type: ignore[method-assign]
            self.frontends.append(front)
            await nursery.start(store.sync_forever)  # group commit; clients use the draft listener
            listener = self.net.listen(ADDRESS)
            await nursery.start(front.serve, [listener])

            async def crash() -> None:
                self.counts["server_restarts"] += 1
                self.trace.record(trio.current_time(), "server-crash", gen, self.log.written - self.log.durable)
                self.net.reset_all(ADDRESS)
                await listener.aclose()
                self.log = self.log.crashed()

            return crash

        await crash_restart_loop(
            restarts=wl["restarts"],
            rng=self.rng.child("server-life"),
            healed=self.healed,
            start=start,
            crash_after=lambda r: r.pick([0.02, 0.1, 0.3, 1.0, 5.0]) * r.between(0.5, 1.5),
            task_status=task_status,
        )

    async def writer_task(self, w: int) -> None:
        async with trio.open_nursery() as nursery:
            for s in range(self.wl["segments"]):
                nursery.start_soon(self.write_segment, w, s, self.rng.child("writer", w, s))
        self.done += 1
        if self.done == self.wl["writers"]:
            self.writers_done.set()

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
        n = wl["events"]
        per = max(1, -(-n // wl["batches"]))
        for start in range(0, n, per):
            try:
                level = await writer.write([self.payload(w, s, i) for i in range(start, min(n, start + per))])
            except DraftWriteFailed as exc:
                self.violate("write-failed", f"writer {w} segment {s}: {exc}")
                return
            self.levels[(w, s)] = level
            self.trace.record(trio.current_time(), "acked", w, s, level)
            self.check_segment(s)

    async def reader_task(self, s: int) -> None:
        got = b""
        want = sum(8 + len(self.payload(w, s, i)) for w in range(self.wl["writers"]) for i in range(self.wl["events"]))
        while len(got) < want:
            try:
                try:
                    got = await self._read_once(s, got, want)
                except BaseExceptionGroup as group:
                    raise first_error(group) from group
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
                await trio.sleep(0.2)
            except ProtocolError as exc:
                if exc.field == "(eof)":
                    await trio.sleep(0.2)
                    continue
                self.violate("client-protocol-error", f"reader of segment {s}: {exc}")
                return
        self.readers_done += 1
        if self.readers_done == self.wl["segments"]:
            self.all_read.set()

    async def _read_once(self, s: int, got: bytes, want: int) -> bytes:
        conn = DraftConnection(await self.net.connect(ADDRESS))
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)
            reader = DraftReader(conn, segment_name(s), offset=len(got), read_size=3000)
            try:
                got = await self._read_until(s, reader, got, want)
            finally:
                self.client_transitions |= conn.machine.transitions_seen
            nursery.cancel_scope.cancel()
        return got

    async def _read_until(self, s: int, reader: DraftReader, got: bytes, want: int) -> bytes:
        while len(got) < want:
            r = await reader.read(timeout=30)
            assert self.store is not None
            seg = self.store.store.segments[segment_name(s)]
            if r.offset != len(got) or seg.read_bytes(r.offset, len(r.data)) != r.data or r.offset + len(r.data) > seg.visible:
                self.violate(
                    "read-mismatch", f"segment {s}: read at {r.offset} ({len(r.data)} bytes) differs from the durable data"
                )
            got += r.data
            self.counts["read_bytes"] += len(r.data)
        return got

    async def main(self) -> ScenarioReport:
        wl = self.wl
        self.counts["events_total"] = wl["writers"] * wl["segments"] * wl["events"]
        outcome, violation, detail = "pass", "", ""
        if not wl["readers"]:
            self.all_read.set()
        async with trio.open_nursery() as nursery:
            await nursery.start(self.server_life)
            for w in range(wl["writers"]):
                nursery.start_soon(self.writer_task, w)
            if wl["readers"]:
                for s in range(wl["segments"]):
                    nursery.start_soon(self.reader_task, s)

            async def done() -> None:
                await self.writers_done.wait()
                await self.all_read.wait()

            converged = await safety_then_liveness(
                self.net, self.healed, self.trace, safety_time=wl["safety_time"], liveness_time=wl["liveness_time"], done=done
            )
            if not converged:
                outcome, violation = "liveness", "no-convergence"
                detail = f"{wl['writers'] - self.done} writers unfinished, {self.readers_done} readers done"
            nursery.cancel_scope.cancel()
        if outcome == "pass":
            for s in range(wl["segments"]):
                self.check_segment(s, final=True)
        if self.violation is not None:
            outcome, (violation, detail) = "violation", self.violation
        counts = dict(self.counts)
        counts |= sum_stats("writer", self.writers, ("reconnects", "protocol_errors"))
        counts["client_reconnects"] = counts["writer_reconnects"]
        counts |= sum_stats("server", self.frontends, ("connections", "blocks", "protocol_errors", "closed_by_store"))
        counts["deliveries"] = sum(len(self.durable(s)[0]) for s in range(wl["segments"])) if self.store else 0
        if counts["writer_protocol_errors"] and outcome in ("pass", "liveness"):  # the cause beats its symptom
            first = next(wr.last_protocol_error for wr in self.writers if wr.last_protocol_error is not None)
            outcome, violation, detail = "violation", "client-protocol-error", str(first)
        return ScenarioReport(
            outcome=outcome,
            violation=violation,
            detail=detail,
            sim_time=trio.current_time(),
            counts=counts,
            transitions=coverage(client=[self.client_transitions, *self.writers], server=self.frontends),
        )


SCENARIO = PravegaDraftScenario()
