"""TANK under faults: producers and long-polling consumers on several
partitions, a broker that crashes and restarts from its durable log.

Real drivers (:class:`~refwire.tank.client.TankClient`, :class:`~refwire.tank.server.TankBroker`)
run unchanged over the simulated network (partial reads, trickles, resets,
stalls, half-open connections, refused connects).  Each partition has one
producer whose plan fixes every message's sequence number up front (dense from
1, or sparse with gaps via ProduceWithSeqnum); a produce whose outcome is
unknown after a failure is settled by asking the broker's high water mark
before any resend, so nothing is stored twice.  Invariants (specs/tank/README.md §6):

* ``seq`` -- every consumer receives, per partition, exactly the planned
  messages in order: each delivery is the next planned (seq, content) after
  its previous one (dense, or sparse exactly as published; none twice after
  it resumes from its last sequence number);
* ``hwmark`` -- the high water mark a consumer sees never goes backwards and
  never lags a message it was given;
* ``produce`` -- a produce is never half stored, and the broker never
  refuses a planned bundle;
* ``client-protocol-error`` -- our client never had to reject our broker's bytes;
* ``rogue-answer`` -- after healing, one of our clients creating a topic on a rogue broker
  (``rogues``: an answer without the first Ping, then a Ping and EOF; or EOF first) gets the
  rogue's answer, or a lost connection, within 60 s;
* liveness -- after healing, every producer and consumer finishes within
  ``liveness_time`` virtual seconds.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, ClassVar

import trio

from refwire.tank import BrokerConfig, MemoryStorage, Message
from refwire.tank.client import ClientConfig, TankClient
from refwire.tank.connection import PING_FRAME
from refwire.tank.errors import ConnectionLost
from refwire.tank.responses import CreateTopicResponse
from refwire.tank.server import TankBroker

from ..faults import Faults
from ..harness import HALVE, Hostile, Rogue, RunBase, coverage, crash_restart_loop, safety_then_liveness, shrink_toward, sum_stats
from ..rand import SimRandom
from ..trace import Trace
from . import ScenarioReport

ADDRESS = "tank-broker:11011"
TOPIC = "events"
_LOST = (ConnectionLost, OSError, trio.BrokenResourceError, trio.ClosedResourceError)


#: Hostile peers (specs/tank/README.md §2, §3, §6): an unknown or obsolete message id closes at once,
#: a frame cut by EOF closes at the EOF, a client that says nothing is closed at the 16 s idle TTL.
HOSTILE: dict[str, Hostile] = {
    "unknown-id": (b"\xfe" + struct.pack("<I", 4) + bytes(4), 30.0, False),
    "replica-id": (b"\x04" + struct.pack("<I", 0), 30.0, False),
    "cut-by-eof": (b"\x01" + struct.pack("<I", 100) + bytes(10), 30.0, True),
    "silent": (b"", 30.0, False),
}

#: Rogue brokers (``rogues``; specs/tank/README.md §3) for one of our clients creating a topic:
#: one that answers without the (optional) first Ping, then pings and hangs up, and one that
#: hangs up before saying anything.
ROGUES: dict[str, Rogue] = {
    "answer-without-ping": Rogue(CreateTopicResponse(1, "rogue", 1).encode() + PING_FRAME),
    "eof-before-ping": Rogue(),
}


class TankScenario:
    name = "tank"
    #: Planted bugs a workload can ask for (``{"bug": NAME}``).
    BUGS = ("fsync-lies",)
    #: One line per planted bug: what it breaks (``refwire sim --help`` lists them).
    BUG_NOTES: ClassVar[dict[str, str]] = {"fsync-lies": "the broker's storage acks a sync it never did: a crash loses each partition's newest acked bundle"}

    def draw_workload(self, rng: SimRandom) -> dict[str, Any]:
        wl: dict[str, Any] = {
            "partitions": rng.int_between(1, 3),
            "messages": rng.int_between(5, 120),
            "bundle": rng.pick([1, 3, 8, 20]),
            "sparse": rng.pick([0, 0, 1]),
            "compress": rng.pick([0, 1]),
            "consumers": rng.int_between(1, 3),
            "max_wait": rng.pick([0.0, 0.5, 3.0]),
            "min_bytes": rng.pick([0, 0, 60]),
            "fetch_size": rng.pick([16, 200, 65536]),
            "restarts": rng.pick([0, 0, 1, 2]),
            "safety_time": 60.0,
            "liveness_time": 400.0,
            "bug": "",
        }
        wl["hostiles"] = rng.pick([0, 0, 1, 2])  # drawn last: the knobs above keep their draws
        wl["rogues"] = rng.pick([0, 0, 1])  # after hostiles, for the same reason
        return wl

    def shrink_steps(self, workload: dict[str, Any]) -> Iterable[tuple[str, Any]]:
        return shrink_toward(
            workload,
            [
                ("hostiles", 0),
                ("rogues", 0),
                ("partitions", 1),
                ("consumers", 1),
                ("restarts", 0),
                ("sparse", 0),
                ("compress", 0),
                ("min_bytes", 0),
                ("max_wait", 0.0),
                ("messages", HALVE),
                ("bundle", 1),
            ],
        )

    async def run(self, *, rng: SimRandom, faults: Faults, workload: dict[str, Any], trace: Trace) -> ScenarioReport:
        return await _Run(rng, faults, workload, trace).main()


class _Run(RunBase):
    def __init__(self, rng: SimRandom, faults: Faults, wl: dict[str, Any], trace: Trace) -> None:
        super().__init__(rng, faults, wl, trace)
        self.storage = MemoryStorage()  # the durable state: survives broker restarts
        self.brokers: list[TankBroker] = []
        self.clients: list[TankClient] = []
        self.all_done = trio.Event()
        self.pending = 0
        self.topic_ready = trio.Event()
        self.counts: dict[str, int] = {
            "events_total": 0,
            "deliveries": 0,
            "broker_restarts": 0,
            "uncertain_produces": 0,
            "resends": 0,
            "consume_retries": 0,
            "long_poll_hits": 0,
        }
        # The plan: per partition, (seq, content) of every message, in order.
        self.plan: list[list[tuple[int, bytes]]] = []
        prng = rng.child("plan")
        for p in range(wl["partitions"]):
            seq, msgs = 0, []
            for i in range(wl["messages"]):
                seq += 1 + (prng.int_between(0, 3) if wl["sparse"] else 0)
                msgs.append((seq, b"p%d-%d-" % (p, i) + b"x" * prng.int_between(0, 40)))
            self.plan.append(msgs)
        self.counts["events_total"] = wl["partitions"] * wl["messages"]

    def _client(self, who: str) -> TankClient:
        c = TankClient(lambda: self.net.connect(ADDRESS), config=ClientConfig(ping_interval=5.0, request_timeout=20.0))
        self.clients.append(c)
        return c

    def _finished(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.all_done.set()

    async def _backoff(self, rng: SimRandom) -> None:
        await trio.sleep(rng.between(0.05, 1.0))

    # -- broker ----------------------------------------------------------------
    async def broker_life(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async def start(gen: int, nursery: trio.Nursery) -> Any:
            broker = TankBroker(self.storage, BrokerConfig())
            self.brokers.append(broker)
            listener = self.net.listen(ADDRESS)
            await nursery.start(broker.serve, [listener])

            async def crash() -> None:
                self.counts["broker_restarts"] += 1
                self.trace.record(trio.current_time(), "broker-crash", gen)
                self.net.reset_all(ADDRESS)
                await listener.aclose()
                await broker.shutdown(0)
                if self.wl.get("bug") == "fsync-lies":
                    self._lose_last_bundles()

            return crash

        await crash_restart_loop(
            restarts=self.wl["restarts"],
            rng=self.rng.child("broker-life"),
            healed=self.healed,
            start=start,
            crash_after=lambda r: r.between(1.0, self.wl["safety_time"]),
            task_status=task_status,
        )

    def _lose_last_bundles(self) -> None:
        """The planted bug ``fsync-lies`` (tests the checkers and the shrinker):
        storage that acknowledged a sync it never did loses each partition's
        newest bundle in the crash, though the broker acked it."""
        for logs in self.storage.topics.values():
            for lg in logs:
                if lg.entries:
                    lg.entries.pop()
                    lg._lasts.pop()

    def check_stored(self) -> None:
        """``acked-lost``: at the end the durable storage holds, per partition,
        exactly the planned messages (every acked bundle survived every crash)."""
        from refwire.tank.bundles import read_chunk

        logs = self.storage.topics.get(TOPIC, [])
        for p, plan in enumerate(self.plan):
            got: list[tuple[int | None, bytes]] = []
            lg = logs[p] if p < len(logs) else None
            if lg is not None and lg.entries:
                first, chunk = lg.read(lg.first_avail, 1 << 30)
                res = read_chunk(chunk, base_seq=None if first.sparse else first.first, hwmark=lg.last_assigned, requested_seq=0)
                got = list(zip(res.seqs, res.contents, strict=True))
            if got != [(seq, content) for seq, content in plan]:
                n = sum(1 for a, b in zip(got, plan, strict=False) if a == b)
                self.violate("acked-lost", f"partition {p}: the storage holds {len(got)} messages, the first {n} as planned, of {len(plan)} acked")
                return

    # -- producers -------------------------------------------------------------
    async def _hwmark(self, c: TankClient, p: int, rng: SimRandom) -> int:
        while True:
            try:
                infos = await c.discover_partitions(TOPIC)
                return infos[p].hwmark
            except _LOST:
                await self._backoff(rng)

    async def producer(self, p: int) -> None:
        rng = self.rng.child("producer", p)
        c = self._client(f"producer-{p}")
        async with c:
            if p == 0:
                while True:
                    try:
                        err = await c.create_topic(TOPIC, self.wl["partitions"])
                        if err in (0, 1):
                            break
                    except _LOST:
                        pass
                    await self._backoff(rng)
                self.topic_ready.set()
            await self.topic_ready.wait()
            plan = self.plan[p]
            size = self.wl["bundle"]
            prev_last = 0
            for i in range(0, len(plan), size):
                part = plan[i : i + size]
                msgs = [Message(content, 1_000 + i, None, seq if self.wl["sparse"] else None) for seq, content in part]
                last = part[-1][0]
                while True:
                    try:
                        if self.wl["sparse"]:
                            res = await c.produce_sparse(TOPIC, p, msgs, compress=bool(self.wl["compress"]))
                        else:
                            res = await c.produce(TOPIC, p, msgs, compress=bool(self.wl["compress"]))
                        err = res.error
                    except _LOST:
                        err = -1
                        self.counts["uncertain_produces"] += 1
                        await self._backoff(rng)
                    if err == 0:
                        break
                    if err not in (-1, 0x0A):
                        self.violate("produce", f"partition {p}: broker refused a planned bundle with {err:#04x}")
                        return
                    hw = await self._hwmark(c, p, rng)
                    if hw >= last:
                        break  # it was stored before the failure
                    if hw != prev_last:
                        self.violate("produce", f"partition {p}: hwmark {hw} between {prev_last} and {last}: bundle half stored")
                        return
                    self.counts["resends"] += 1
                self.trace.record(trio.current_time(), "produced", p, last)
                prev_last = last
        self._finished()

    # -- consumers -------------------------------------------------------------
    async def consumer(self, k: int, c: TankClient, p: int) -> None:
        rng = self.rng.child("consumer", k, p)
        plan = self.plan[p]
        idx = 0  # next planned message expected
        seq = 0
        hw_seen = 0
        await self.topic_ready.wait()
        while idx < len(plan):
            try:
                pd = await c.consume(
                    TOPIC, p, seq, max_wait=self.wl["max_wait"], min_bytes=self.wl["min_bytes"], fetch_size=self.wl["fetch_size"]
                )
            except _LOST:
                self.counts["consume_retries"] += 1
                await self._backoff(rng)
                continue
            if pd.hwmark < hw_seen:
                self.violate("hwmark", f"consumer {k} partition {p}: hwmark went from {hw_seen} to {pd.hwmark}")
            hw_seen = max(hw_seen, pd.hwmark)
            msgs = pd.chunk.messages if pd.chunk else ()
            for m in msgs:
                want = plan[idx] if idx < len(plan) else None
                if want is None or (m.seq, m.content) != want:
                    self.violate(
                        "seq",
                        f"consumer {k} partition {p}: got seq {m.seq} {m.content[:12]!r}, expected {want and (want[0], want[1][:12])}",
                    )
                    return
                if m.seq is not None and m.seq > pd.hwmark:
                    self.violate("hwmark", f"consumer {k} partition {p}: seq {m.seq} above hwmark {pd.hwmark}")
                idx += 1
                self.counts["deliveries"] += 1
            if msgs and self.wl["max_wait"]:
                self.counts["long_poll_hits"] += 1
            if pd.chunk is not None:
                seq = pd.chunk.next_seq
            if not msgs and not self.wl["max_wait"]:
                await trio.sleep(rng.between(0.05, 0.5))  # a polling consumer at the end
        self.trace.record(trio.current_time(), "consumed", k, p, idx)
        self._finished()

    async def consumer_group(self, k: int) -> None:
        c = self._client(f"consumer-{k}")
        async with c, trio.open_nursery() as n:  # one connection, a long poll per partition
            for p in range(self.wl["partitions"]):
                n.start_soon(self.consumer, k, c, p)

    async def rogue_client(self, address: str, kind: str, rogue: Rogue, rng: SimRandom) -> None:
        """One of our clients creating a topic on a rogue broker: within 60 s it gets the
        rogue's answer (1: the topic exists) or, from one that hung up first, a lost
        connection -- never another answer, never stuck (``rogue-answer``)."""
        client = TankClient(lambda: self.net.connect(address), config=ClientConfig(ping_interval=5.0, request_timeout=20.0))
        self.clients.append(client)
        got: object = None
        with trio.move_on_after(60) as scope:
            async with client:
                try:
                    got = await client.create_topic("rogue")
                except _LOST as exc:
                    got = type(exc)
                await trio.sleep(1.0)  # the Ping and the EOF after the answer
        want: object = 1 if kind == "answer-without-ping" else _LOST
        if scope.cancelled_caught:
            self.violate("rogue-answer", f"rogue {kind}: create_topic still waiting after 60 s")
        elif not (got == want or (isinstance(want, tuple) and isinstance(got, type) and issubclass(got, want))):
            self.violate("rogue-answer", f"rogue {kind}: create_topic gave {got!r}, expected {want!r}")

    async def main(self) -> ScenarioReport:
        wl = self.wl
        self.pending = wl["partitions"] * (1 + wl["consumers"])
        outcome, violation, detail = "pass", "", ""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.broker_life)
            for p in range(wl["partitions"]):
                nursery.start_soon(self.producer, p)
            for k in range(wl["consumers"]):
                nursery.start_soon(self.consumer_group, k)
            for h in range(wl.get("hostiles", 0)):
                nursery.start_soon(self.hostile_peer, h, ADDRESS, HOSTILE)
            self.start_rogues(nursery, ADDRESS, ROGUES, self.rogue_client)

            async def done() -> None:
                await self.all_done.wait()
                await self.all_hostiles_done()

            converged = await safety_then_liveness(
                self.net,
                self.healed,
                self.trace,
                safety_time=wl["safety_time"],
                liveness_time=wl["liveness_time"] + self.swarm_slack(),
                done=done,
            )
            if not converged and self.violation is None:
                outcome, violation = "liveness", "no-convergence"
                detail = f"{self.pending} producers/consumers unfinished {wl['liveness_time']}s after healing"
            nursery.cancel_scope.cancel()
        if converged and self.violation is None:
            self.check_stored()
        if self.violation is not None:
            outcome, (violation, detail) = "violation", self.violation
        errors = sum(c.stats["protocol_errors"] for c in self.clients)
        if errors and outcome == "pass":
            outcome, violation = "violation", "client-protocol-error"
            detail = f"our client rejected our broker's bytes {errors} times: {next(c.last_error for c in self.clients if c.last_error)!r}"
        counts = dict(self.counts)
        counts["hostiles_closed"] = self.hostiles_closed
        counts["client_reconnects"] = sum(max(0, c.stats["connects"] - 1) for c in self.clients)
        counts["client_pings"] = sum(c.stats["pings_sent"] for c in self.clients)
        counts |= sum_stats("broker", self.brokers, ("connections", "protocol_errors", "idle_closed"))
        counts["broker_woken"] = sum(b.service.stats["woken"] for b in self.brokers)
        counts["broker_timeouts"] = sum(b.service.stats["timeouts"] for b in self.brokers)
        return ScenarioReport(
            outcome=outcome,
            violation=violation,
            detail=detail,
            sim_time=trio.current_time(),
            counts=counts,
            transitions=coverage(client=self.clients, broker=self.brokers),
        )


SCENARIO = TankScenario()
