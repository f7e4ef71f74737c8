"""What the two Pravega scenarios share (:mod:`.pravega`, :mod:`.pravega_draft`).

A segment store (:class:`~refwire.pravega.server.SegmentStoreServer`) whose log
is a :class:`~refwire.pravega.storage.MemoryLog` crashes and restarts from its
durable records; writers and readers run to completion through the safety and
liveness phases; the report sums the drivers' stats and coverage.  Each
scenario brings its dialect: the front end that serves the store, the writers,
the readers and the invariants (specs/pravega/README.md §5-§6,
specs/pravega-draft-2017/README.md §6-§7).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import trio

from refwire.drivers import first_error
from refwire.errors import ProtocolError
from refwire.pravega.client import parse_events
from refwire.pravega.server import SegmentStoreServer, ServerConfig
from refwire.pravega.storage import MemoryLog
from refwire.pravega.store import Segment

from ...interrupts import interrupted
from ..faults import Faults
from ..harness import Hostile, Misfit, Rogue, RunBase, coverage, crash_restart_loop, safety_then_liveness
from ..net import SimListener
from ..rand import SimRandom
from ..trace import Trace
from . import ScenarioReport

#: What a reader retries after (a new connection); a protocol error is not one of them.
TRANSIENT: tuple[type[BaseException], ...] = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError)


class _Writer(Protocol):
    @property
    def last_protocol_error(self) -> ProtocolError | None: ...


W = TypeVar("W", bound=_Writer)


class PravegaScenarioBase:
    """The scenario object: runs one workload with its dialect's :class:`PravegaRun`."""

    name: ClassVar[str]
    run_class: ClassVar[type[PravegaRun[Any]]]

    async def run(self, *, rng: SimRandom, faults: Faults, workload: dict[str, Any], trace: Trace) -> ScenarioReport:
        return await self.run_class(rng, faults, workload, trace).main()


class PravegaRun(RunBase, Generic[W]):
    """One run: the store's life, writer and reader tasks, and the report."""

    ADDRESS: ClassVar[str]
    FILL: ClassVar[bytes]  #: payload filler byte
    STRIDE: ClassVar[int]  #: how fast payload sizes vary with the event index
    #: outcomes a client protocol error of a writer replaces (the cause beats its symptom)
    PROTOCOL_ERROR_REPLACES: ClassVar[tuple[str, ...]] = ("pass",)
    #: what the swarm's hostile peers may send (``hostiles`` in the workload)
    HOSTILE: ClassVar[Mapping[str, Hostile]] = {}
    #: what the swarm's misfit peers may send (``misfits`` in the workload)
    MISFITS: ClassVar[Mapping[str, Misfit]] = {}
    #: rogue servers one of our readers meets (``rogues`` in the workload)
    ROGUES: ClassVar[Mapping[str, Rogue]] = {}

    def __init__(self, rng: SimRandom, faults: Faults, wl: dict[str, Any], trace: Trace) -> None:
        super().__init__(rng, faults, wl, trace)
        self.log = MemoryLog()
        self.server: SegmentStoreServer | None = None
        #: the drivers of the server machines, for the stats and the coverage
        self.serving: list[Any] = []
        self.writers: list[W] = []
        self.writers_done = trio.Event()
        self.all_read = trio.Event()
        self.done = 0
        self.readers_done = 0
        self.client_transitions: set[tuple[str, str, str]] = set()
        self.counts: dict[str, int] = {"server_restarts": 0, "events_total": 0, "read_bytes": 0}
        #: segment index -> (the Segment parsed, the (writer, event) pairs of its whole events, the
        #: bytes they span): parse_durable parses only what became durable since (see there)
        self._parsed: dict[int, tuple[Segment, list[tuple[int, int]], int]] = {}

    # -- what each dialect brings -------------------------------------------------
    def segment_name(self, i: int) -> str:
        raise NotImplementedError

    def server_config(self) -> ServerConfig:
        raise NotImplementedError

    async def serve(self, server: SegmentStoreServer, nursery: trio.Nursery) -> SimListener:
        """Serve ``server`` to the clients (appending its driver to :attr:`serving`); the listener."""
        raise NotImplementedError

    def check_segment(self, s: int, *, final: bool = False) -> None:
        raise NotImplementedError

    def writer_rng(self, w: int, s: int) -> SimRandom:
        raise NotImplementedError

    async def write_segment(self, w: int, s: int, rng: SimRandom) -> None:
        raise NotImplementedError

    def start_readers(self, nursery: trio.Nursery) -> None:
        raise NotImplementedError

    def readers_total(self) -> int:
        """How many reader tasks must finish."""
        return int(self.wl["readers"]) * int(self.wl["segments"])

    def readers_progress(self) -> str:
        """How far the readers got, for a liveness failure's detail."""
        raise NotImplementedError

    def add_counts(self, counts: dict[str, int]) -> None:
        """The drivers' stats, into the report's counts."""
        raise NotImplementedError

    def protocol_error_detail(self, counts: dict[str, int], first: ProtocolError) -> str:
        raise NotImplementedError

    def crashed_log(self) -> MemoryLog:
        """What of the log survives a crash now.  With the planted bug
        ``fsync-lies`` (tests the checkers and the shrinker), storage that
        acknowledged a sync it never did loses the last synced records."""
        if self.wl.get("bug") == "fsync-lies":
            return MemoryLog(bytes(self.log.data[: max(0, self.log.durable - 64)]))
        return self.log.crashed()

    # -- payloads and the durable data -----------------------------------------
    def payload(self, w: int, s: int, i: int) -> bytes:
        head = f"{w}:{s}:{i}:".encode()
        size = int(self.wl["event_size"])
        return head + self.FILL * max(0, (size + self.STRIDE * i) % (2 * size + 1) - len(head))

    def batches(self, w: int, s: int) -> Iterator[tuple[int, list[bytes]]]:
        """(index of the first event, payloads) of each write, ``batches`` writes in all."""
        n = self.wl["events"]
        per = max(1, -(-n // self.wl["batches"]))
        for start in range(0, n, per):
            yield start, [self.payload(w, s, i) for i in range(start, min(n, start + per))]

    def parse_durable(self, s: int) -> tuple[list[tuple[int, int]], int, int] | None:
        """(writer, event index) of each whole Event in segment ``s``'s durable
        bytes, the bytes they span and the durable length; None if no such segment."""
        assert self.server is not None
        seg = self.server.store.segments.get(self.segment_name(s))
        if seg is None:
            return None
        # The durable bytes of one Segment object only grow (a crash makes a new store, so new
        # objects): continue from the whole events parsed last time (it was checked after every
        # acked batch, re-parsing the whole segment each time).
        out: list[tuple[int, int]] = []
        used = 0
        cached = self._parsed.get(s)
        if cached is not None and cached[0] is seg and seg.start_offset == 0 and cached[2] <= seg.visible:
            out, used = list(cached[1]), cached[2]
        events, n = parse_events(seg.read_bytes(used, seg.visible - used), base=used)
        for _off, p in events:
            w, _s, i = p.split(b":")[:3]
            out.append((int(w), int(i)))
        used += n
        self._parsed[s] = (seg, out, used)
        return list(out), used, seg.visible

    def matches_durable(self, s: int, offset: int, data: bytes) -> bool:
        """Whether ``data`` read at ``offset`` of segment ``s`` is its durable bytes there."""
        assert self.server is not None
        seg = self.server.store.segments[self.segment_name(s)]
        return seg.read_bytes(offset, len(data)) == data and offset + len(data) <= seg.visible

    # -- the store, crashing and restarting from its durable log --------------
    async def server_life(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        wl = self.wl

        async def start(gen: int, nursery: trio.Nursery) -> Any:
            server = SegmentStoreServer(config=self.server_config(), log=self.log, now=lambda: int(trio.current_time() * 1000))
            self.server = server
            if gen == 0:
                for s in range(wl["segments"]):
                    server.store.create(self.segment_name(s))
                server.store.mark_durable(self.log.sync())
            else:
                for s in range(wl["segments"]):
                    self.check_segment(s)
            listener = await self.serve(server, nursery)

            async def crash() -> None:
                # Connections reset, the unsynced tail of the log lost.
                self.counts["server_restarts"] += 1
                self.trace.record(trio.current_time(), "server-crash", gen, self.log.written - self.log.durable)
                self.net.reset_all(self.ADDRESS)
                await listener.aclose()
                self.log = self.crashed_log()

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

    # -- writers and readers ----------------------------------------------------
    async def writer_task(self, w: int) -> None:
        async with trio.open_nursery() as nursery:
            for s in range(self.wl["segments"]):
                nursery.start_soon(self.write_segment, w, s, self.writer_rng(w, s))
        self.done += 1
        if self.done == self.wl["writers"]:
            self.writers_done.set()

    async def read_with_retries(
        self, attempt: Callable[[], Awaitable[None]], who: str, transient: tuple[type[BaseException], ...] = TRANSIENT
    ) -> None:
        """Run ``attempt`` (one connection's worth of reading) until it returns,
        again after ``transient`` failures and EOF; a client protocol error is a
        violation and ends the reader unfinished."""
        while True:
            try:
                try:
                    await attempt()
                    break
                except BaseExceptionGroup as group:
                    if interrupted(group):  # Ctrl-C is never a transient failure to retry
                        raise KeyboardInterrupt from None
                    raise first_error(group) from group
            except transient:
                await trio.sleep(0.2)
            except ProtocolError as exc:
                if exc.field == "(eof)":
                    await trio.sleep(0.2)
                    continue
                self.client_protocol_error(who, exc)
                return
        self.readers_done += 1
        if self.readers_done == self.readers_total():
            self.all_read.set()

    def client_protocol_error(self, who: str, exc: ProtocolError) -> None:
        self.violate("client-protocol-error", f"{who}: {exc}")

    #: the dialect's client connection and segment reader, and the reader's read size
    CONNECTION: ClassVar[Any]
    READER: ClassVar[Any]
    READ_SIZE: ClassVar[int]

    async def rogue_read(self, address: str) -> None:
        """One read of segment 0 through ``address`` with the dialect's reader (its
        machine's transitions go to the coverage)."""
        conn = self.CONNECTION(await self.net.connect(address))
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(conn.run)
                await self.READER(conn, self.segment_name(0), offset=0, read_size=self.READ_SIZE).read(timeout=30)
                nursery.cancel_scope.cancel()
        finally:
            self.client_transitions |= conn.machine.transitions_seen

    async def rogue_client(self, address: str, kind: str, rogue: Rogue, rng: SimRandom) -> None:
        """One of our readers against a store that hangs up after its reply: within 60 s the
        read ends with the connection lost -- no data invented, never stuck (``rogue-read``)."""
        with trio.move_on_after(60) as scope:
            try:
                try:
                    await self.rogue_read(address)
                except BaseExceptionGroup as group:
                    if interrupted(group):  # Ctrl-C is never a transient failure to retry
                        raise KeyboardInterrupt from None
                    raise first_error(group) from group
            except TRANSIENT:
                return
            except ProtocolError as exc:
                if exc.field == "(eof)":
                    return
                self.violate("rogue-read", f"rogue {kind}: the reader rejected the store: {exc}")
                return
        if scope.cancelled_caught:
            self.violate("rogue-read", f"rogue {kind}: the read still waiting after 60 s")
        else:
            self.violate("rogue-read", f"rogue {kind}: the read returned data the store never sent")

    # -- the run ------------------------------------------------------------------
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
            self.start_readers(nursery)
            for h in range(wl.get("hostiles", 0)):
                nursery.start_soon(self.hostile_peer, h, self.ADDRESS, self.HOSTILE)
            self.start_misfits(nursery, self.ADDRESS, self.MISFITS)
            self.start_rogues(nursery, self.ADDRESS, self.ROGUES, self.rogue_client)

            async def done() -> None:
                await self.writers_done.wait()
                await self.all_read.wait()
                await self.all_hostiles_done()

            liveness = wl["liveness_time"] + self.swarm_slack()
            converged = await safety_then_liveness(
                self.net, self.healed, self.trace, safety_time=wl["safety_time"], liveness_time=liveness, done=done
            )
            if not converged:
                outcome, violation = "liveness", "no-convergence"
                detail = f"{wl['writers'] - self.done} writers unfinished, {self.readers_progress()} readers done"
            nursery.cancel_scope.cancel()
        if outcome == "pass":
            for s in range(wl["segments"]):
                self.check_segment(s, final=True)
        if self.violation is not None:
            outcome, (violation, detail) = "violation", self.violation
        counts = dict(self.counts)
        self.add_counts(counts)
        counts["hostiles_closed"] = self.hostiles_closed
        counts["misfits_closed"] = self.misfits_closed
        if counts["writer_protocol_errors"] and outcome in self.PROTOCOL_ERROR_REPLACES:
            first = next(wr.last_protocol_error for wr in self.writers if wr.last_protocol_error is not None)
            outcome, violation, detail = "violation", "client-protocol-error", self.protocol_error_detail(counts, first)
        return ScenarioReport(
            outcome=outcome,
            violation=violation,
            detail=detail,
            sim_time=trio.current_time(),
            counts=counts,
            transitions=coverage(client=[self.client_transitions, *self.writers], server=self.serving),
        )
