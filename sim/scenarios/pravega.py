"""Pravega under faults: writers reconnecting to a segment store that crashes
and restarts from its durable log, and readers waiting at the tail.

Real drivers (:class:`~refwire.pravega.client.EventWriter`,
:class:`~refwire.pravega.server.SegmentStoreServer`) run unchanged over the
simulated network; the store's log is a :class:`~refwire.pravega.storage.MemoryLog`
whose unsynced tail is lost in a crash.  Invariants (specs/pravega/README.md §5-§6):

* ``duplicate`` / ``order`` -- in every segment, each (writer, event) is stored
  at most once and a writer's events appear in the order written;
* ``ack-not-durable`` -- every event a writer saw acked is in the store's
  durable data (checked when acked, and again after every restart);
* ``read-mismatch`` -- what readers read equals the stored bytes at that offset;
* ``client-protocol-error`` -- our store never sent our client anything it had to reject;
* ``lost`` -- after the liveness phase every event is stored exactly once;
* liveness -- once faults are healed, every writer finishes and every reader
  reaches the end within ``liveness_time`` virtual seconds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import trio

from refwire.drivers import first_error
from refwire.errors import ProtocolError, RequestFailed, WriteFailed
from refwire.pravega.client import (
    EventWriter,
    PravegaConnection,
    SegmentReader,
    WriterConfig,
    parse_events,
)
from refwire.pravega.server import SegmentStoreServer, ServerConfig
from refwire.pravega.storage import MemoryLog

from ..faults import Faults
from ..harness import HALVE, RunBase, coverage, crash_restart_loop, safety_then_liveness, shrink_toward, sum_stats
from ..rand import SimRandom
from ..trace import Trace
from . import ScenarioReport

ADDRESS = "pravega-store:12345"


def segment_name(i: int) -> str:
    return f"sim/stream/{i}.#epoch.0"


class PravegaScenario:
    name = "pravega"

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
        return wl

    def shrink_steps(self, workload: dict[str, Any]) -> Iterable[tuple[str, Any]]:
        return shrink_toward(
            workload,
            [
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

    async def run(self, *, rng: SimRandom, faults: Faults, workload: dict[str, Any], trace: Trace) -> ScenarioReport:
        return await _Run(rng, faults, workload, trace).main()


class _Run(RunBase):
    def __init__(self, rng: SimRandom, faults: Faults, wl: dict[str, Any], trace: Trace) -> None:
        super().__init__(rng, faults, wl, trace)
        self.log = MemoryLog()
        self.server: SegmentStoreServer | None = None
        self.servers: list[SegmentStoreServer] = []
        self.writers_done = trio.Event()
        self.done = 0
        self.writers: list[EventWriter] = []
        self.acked: dict[tuple[int, int], int] = {}  # (writer, segment) -> events acked
        self.read: dict[tuple[int, int], bytes] = {}  # (reader, segment) -> bytes read
        self.readers_done = 0
        self.all_read = trio.Event()
        self.client_transitions: set[tuple[str, str, str]] = set()
        self.counts: dict[str, int] = {"server_restarts": 0, "events_total": 0, "read_bytes": 0, "client_protocol_errors": 0}

    def payload(self, w: int, s: int, i: int) -> bytes:
        head = f"{w}:{s}:{i}:".encode()
        size = int(self.wl["event_size"])
        return head + b"x" * max(0, (size + i) % (2 * size + 1) - len(head))

    # -- checks over the durable data -----------------------------------------
    def durable_events(self, s: int) -> list[tuple[int, int]]:
        assert self.server is not None
        seg = self.server.store.segments.get(segment_name(s))
        if seg is None:
            return []
        events, _ = parse_events(seg.read_bytes(0, seg.visible))
        out = []
        for _off, p in events:
            w, _s, i = p.split(b":")[:3]
            out.append((int(w), int(i)))
        return out

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

    # -- the store, crashing and restarting from its durable log --------------
    async def server_life(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        wl = self.wl

        async def start(gen: int, nursery: trio.Nursery) -> Any:
            server = SegmentStoreServer(
                config=ServerConfig(tail_wait=wl["tail_wait"]), log=self.log, now=lambda: int(trio.current_time() * 1000)
            )
            self.server = server
            self.servers.append(server)
            if gen == 0:
                for s in range(wl["segments"]):
                    server.store.create(segment_name(s))
                server.store.mark_durable(self.log.sync())
            else:
                for s in range(wl["segments"]):
                    self.check_segment(s)
            listener = self.net.listen(ADDRESS)
            await nursery.start(server.serve, [listener])

            async def crash() -> None:
                # Connections reset, the unsynced tail of the log lost.
                self.counts["server_restarts"] += 1
                self.trace.record(trio.current_time(), "server-crash", gen, self.log.written - self.log.durable)
                self.net.reset_all(ADDRESS)
                await listener.aclose()
                if wl["bug"] == "fsync-lies":
                    # Planted bug (tests the checker and the shrinker): storage that
                    # acknowledged a sync it never did loses the last synced records.
                    self.log = MemoryLog(bytes(self.log.data[: max(0, self.log.durable - 64)]))
                else:
                    self.log = self.log.crashed()

            return crash

        await crash_restart_loop(
            restarts=wl["restarts"],
            rng=self.rng.child("server-life"),
            healed=self.healed,
            # Most runs finish in about a virtual second: crash early enough to matter.
            crash_after=lambda r: r.pick([0.02, 0.1, 0.3, 1.0, 5.0]) * r.between(0.5, 1.5),
            start=start,
            task_status=task_status,
        )

    # -- writers ------------------------------------------------------------------
    async def writer_task(self, w: int) -> None:
        wl = self.wl
        wrng = self.rng.child("writer", w)
        async with trio.open_nursery() as nursery:
            for s in range(wl["segments"]):
                nursery.start_soon(self.write_segment, w, s, wrng.child("segment", s))
        self.done += 1
        if self.done == wl["writers"]:
            self.writers_done.set()

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
        n = self.wl["events"]
        per = max(1, -(-n // self.wl["batches"]))
        for start in range(0, n, per):
            batch = [self.payload(w, s, i) for i in range(start, min(n, start + per))]
            try:
                await writer.write(batch)
            except WriteFailed as exc:
                self.violate("write-failed", f"writer {w} on segment {s}: {exc}")
                return
            self.acked[(w, s)] = start + len(batch)
            self.trace.record(trio.current_time(), "acked", w, s, start + len(batch))
            self.check_segment(s)

    # -- readers at the tail ----------------------------------------------------------
    async def reader_task(self, r: int, s: int) -> None:
        """Reads segment ``s`` from 0, reconnecting, until it has everything written."""
        key = (r, s)
        self.read[key] = b""
        total_events = self.wl["events"] * self.wl["writers"]
        while True:
            try:
                try:
                    await self._read_once(key, s, total_events)
                    return
                except BaseExceptionGroup as group:
                    raise first_error(group) from group
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, RequestFailed):
                await trio.sleep(0.2)
            except ProtocolError as exc:
                if exc.field == "(eof)":
                    await trio.sleep(0.2)
                    continue
                self.counts["client_protocol_errors"] += 1
                self.violate("client-protocol-error", f"reader {key}: {exc}")
                return

    async def _read_once(self, key: tuple[int, int], s: int, total_events: int) -> None:
        """One connection's worth of reading; returns once everything was read."""
        stream = await self.net.connect(ADDRESS)
        conn = PravegaConnection(stream)
        async with trio.open_nursery() as nursery:
            with trio.fail_after(30):
                await nursery.start(conn.run)
            reader = SegmentReader(conn, segment_name(s), offset=len(self.read[key]), read_size=4096)
            try:
                while len(parse_events(self.read[key])[0]) < total_events:
                    got = await reader.read(timeout=30)
                    self.check_read(key, got.offset, got.data)
            finally:
                self.client_transitions |= conn.machine.transitions_seen
            nursery.cancel_scope.cancel()
        self.readers_done += 1
        if self.readers_done == self.wl["readers"] * self.wl["segments"]:
            self.all_read.set()

    def check_read(self, key: tuple[int, int], offset: int, data: bytes) -> None:
        have = self.read[key]
        if offset != len(have):
            self.violate("read-mismatch", f"reader {key}: reply at {offset}, expected {len(have)}")
            return
        self.read[key] = have + data
        self.counts["read_bytes"] += len(data)
        assert self.server is not None
        seg = self.server.store.segments[segment_name(key[1])]
        if seg.read_bytes(offset, len(data)) != data or offset + len(data) > seg.visible:
            self.violate("read-mismatch", f"reader {key}: bytes at {offset}..{offset + len(data)} differ from the durable data")

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
            for r in range(wl["readers"]):
                for s in range(wl["segments"]):
                    nursery.start_soon(self.reader_task, r, s)

            async def done() -> None:
                await self.writers_done.wait()
                await self.all_read.wait()

            converged = await safety_then_liveness(
                self.net, self.healed, self.trace, safety_time=wl["safety_time"], liveness_time=wl["liveness_time"], done=done
            )
            if not converged:
                outcome, violation = "liveness", "no-convergence"
                detail = f"{wl['writers'] - self.done} writers unfinished, {self.readers_done} of {wl['readers'] * wl['segments']} readers done"
            nursery.cancel_scope.cancel()
        if outcome == "pass":
            for s in range(wl["segments"]):
                self.check_segment(s, final=True)
        if self.violation is not None:
            outcome, (violation, detail) = "violation", self.violation
        counts = dict(self.counts)
        counts |= sum_stats("writer", self.writers, ("connections", "reconnects", "acked", "protocol_errors"))
        counts |= sum_stats("server", self.servers, ("connections", "appends", "reads", "protocol_errors", "syncs"))
        counts["deliveries"] = sum(len(self.durable_events(s)) for s in range(wl["segments"]))
        counts["client_reconnects"] = counts["writer_reconnects"]
        if counts["writer_protocol_errors"] and outcome == "pass":
            first = next(wr.last_protocol_error for wr in self.writers if wr.last_protocol_error is not None)
            outcome, violation, detail = (
                "violation",
                "client-protocol-error",
                f"{counts['writer_protocol_errors']} replies rejected by our writers: {first}",
            )
        return ScenarioReport(
            outcome=outcome,
            violation=violation,
            detail=detail,
            sim_time=trio.current_time(),
            counts=counts,
            transitions=coverage(client=[self.client_transitions, *self.writers], server=self.servers),
        )


SCENARIO = PravegaScenario()
