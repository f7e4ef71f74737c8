"""Lumberjack under faults: several clients, a server that crashes and restarts.

Real drivers (:class:`~refwire.lumberjack.LumberjackClient`,
:class:`~refwire.lumberjack.LumberjackServer`) run unchanged over the
simulated network.  Invariants (specs/lumberjack/README.md §3):

* ``ack-before-delivery`` -- every event a client saw acked had already
  reached the server application (no ack covers an event not received);
* ``order`` -- on each server connection, events arrive in their client's
  order, from one client;
* ``seq-gap`` -- sequence numbers inside a batch are consecutive mod 2**32
  (skipping 0), also across the rollover;
* ``client-protocol-error`` -- our server never sent our client anything the
  client had to reject;
* ``lost`` -- after the liveness phase every event reached the application
  at least once (duplicates are allowed: at-least-once);
* ``hostile-not-closed`` -- a hostile peer in the swarm (``hostiles``: garbage,
  a bad version byte, an ack from the client, a frame cut by EOF, an empty
  window, a ``C`` that does not inflate) is closed by the server, or answered as
  the spec says, within the idle timeout; the well-behaved clients' invariants
  above hold beside it;
* ``misfit-wrong-reply`` -- a misfit peer (``misfits``: windows compressed in splits our client
  never makes) gets every event acked (``A 1`` then ``A 3``) and is closed within its budget;
* ``rogue-acks`` -- after healing, one of our clients sending a window of 3 to a rogue server
  (``rogues``: partial acks then EOF, or acks, a keepalive to the idle client and EOF) finishes
  within 120 s and reports acked exactly the events the rogue acked, once each, in order;
* liveness -- once faults are healed, every client's ``send`` returns within
  ``liveness_time`` virtual seconds.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any, ClassVar

import trio

from refwire.lumberjack import V1, V2, Batch, next_seq
from refwire.lumberjack.client import ClientConfig, LumberjackClient
from refwire.lumberjack.frames import Ack, Compressed, JsonFrame, Window
from refwire.lumberjack.server import ConnectionInfo, LumberjackServer, ServerConfig

from ..faults import Faults
from ..harness import (
    HALVE,
    Hostile,
    Misfit,
    Rogue,
    RunBase,
    coverage,
    crash_restart_loop,
    safety_then_liveness,
    shrink_toward,
    sum_stats,
)
from ..rand import SimRandom
from ..trace import Trace
from . import ScenarioReport

ADDRESS = "lumberjack-server:5044"


def liveness_bound(wl: dict[str, Any]) -> float:
    """Virtual seconds after healing within which every client must be done:
    reconnect slack plus, per window, the application's worst delay (the
    expo draw is capped at 4x its mean) and a round trip."""
    windows = -(-int(wl["events"]) // int(wl["window"]))
    return 300.0 + windows * (4 * float(wl["app_delay"]) + 1.0)


#: Hostile peers (specs/lumberjack/README.md §4): a protocol error closes at once (well inside the
#: 60 s idle timeout, which would close it anyway); an empty window is answered, then idles out.
HOSTILE: dict[str, Hostile] = {
    "garbage": (bytes(range(7, 71)), 30.0, False),
    "bad-version": (b"3W\x00\x00\x00\x01", 30.0, False),
    "ack-from-client": (b"2A\x00\x00\x00\x01", 30.0, False),
    "cut-by-eof": (b"2W\x00\x00\x00\x01" + b"2J\x00\x00\x00\x01\x00\x00\x00\x40" + b'{"half":', 30.0, True),
    "empty-window": (b"2W\x00\x00\x00\x00", 90.0, False),
    "bad-zlib": (b"2W\x00\x00\x00\x01" + b"2C\x00\x00\x00\x08" + b"notzlib!", 30.0, False),
    # a v2 window (its event, client -2, is stored and acked), then a v1 window on the same
    # connection: the server does not accept mixed versions (spec §3.10) and closes at the 1W
    "version-switch": (
        bytes.fromhex("325700000001" "324a000000010000000e7b2263223a2d322c2269223a307d" "315700000001" "31440000000100000001000000016b0000000176"),
        30.0,
        False,
    ),
}



def _json(seq: int, i: int) -> bytes:
    """A ``J`` frame of a misfit's event: client -1, index ``i`` (apart from the swarm's clients)."""
    return JsonFrame(seq, b'{"c":-1,"i":%d}' % i).encode()


#: Misfit peers (``misfits``; specs/lumberjack/README.md §3.6): windows compressed the ways
#: refwire's client never does -- a ``C`` holding a whole window, one holding a ``W`` and the
#: first event only, one holding an event in the middle of a batch, and the last event plain.
#: Every event is stored and acked as if plain (``A 1``, then ``A 3``); the idle timeout
#: (60 s) then ends the connection.
MISFITS: dict[str, Misfit] = {
    "compressed-split": Misfit(
        Compressed.wrap(Window(1).encode() + _json(1, 0)).encode()
        + Compressed.wrap(Window(3).encode() + _json(1, 1)).encode()
        + Compressed.wrap(_json(2, 2)).encode()
        + _json(3, 3),
        180.0,  # the application may take 28 s per batch, then the 60 s idle timeout
        expect=(Ack(1).encode(), Ack(3).encode()),  # keepalives (A 0) may come between
    ),
}

#: Rogue servers (``rogues``; specs/lumberjack/README.md §3.4, §3.5) for one of our clients
#: sending a window of 3 events: one that acks only the first event of every window and hangs
#: up (the client resends the rest, window after window, until all are acked), and one that
#: acks 1 then 3, sends a keepalive (``A 0``) to the idle client and hangs up.
ROGUES: dict[str, Rogue] = {
    "partial-ack-then-eof": Rogue(Ack(1).encode()),
    "ack-keepalive-eof": Rogue(Ack(1).encode() + Ack(3).encode() + Ack(0).encode()),
}


class LumberjackScenario:
    #: Planted bugs a workload can ask for (``{"bug": NAME}``).
    BUGS = ("ack-before-deliver",)
    #: One line per planted bug: what it breaks (``refwire sim --help`` lists them).
    BUG_NOTES: ClassVar[dict[str, str]] = {"ack-before-deliver": "the server acks a batch before it stores its events (a crash loses acked events)"}

    name = "lumberjack"

    def draw_workload(self, rng: SimRandom) -> dict[str, Any]:
        wl: dict[str, Any] = {
            "clients": rng.int_between(1, 4),
            "events": rng.int_between(5, 250),
            "window": rng.pick([1, 2, 7, 32, 100]),
            "version": rng.pick([1, 2]),
            "compression": rng.pick([0, 3]),
            "sequence": rng.pick(["window", "running"]),
            # Running counters start near the u32 rollover (and the signed 2**31 edge) most of the time.
            "first_seq": rng.pick([1, 2**31 - 3, 2**32 - 5, 2**32 - 1]),
            "restarts": rng.pick([0, 0, 1, 2]),
            "app_delay": rng.pick([0.0, 0.0, 0.3, 7.0]),
            "keepalive": rng.pick([1.0, 5.0]),
            "ack_timeout": rng.pick([10.0, 30.0]),
            "safety_time": 60.0,
            "bug": "",
        }
        wl["liveness_time"] = liveness_bound(wl)
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
                ("clients", 1),
                ("events", HALVE),
                ("restarts", 0),
                ("app_delay", 0.0),
                ("window", HALVE),
                ("compression", 0),
                ("sequence", "window"),
            ],
        )

    async def run(self, *, rng: SimRandom, faults: Faults, workload: dict[str, Any], trace: Trace) -> ScenarioReport:
        return await _Run(rng, faults, workload, trace).main()


class _Run(RunBase):
    def __init__(self, rng: SimRandom, faults: Faults, wl: dict[str, Any], trace: Trace) -> None:
        super().__init__(rng, faults, wl, trace)
        self.delivered: set[tuple[int, int]] = set()
        self.deliveries = 0
        self.per_conn: dict[tuple[int, int], tuple[int, int]] = {}  # (server gen, conn id) -> last (client, index)
        self.done: dict[int, float] = {}
        self.all_done = trio.Event()
        self.clients: list[LumberjackClient] = []
        self.servers: list[LumberjackServer] = []
        self.app_rng = rng.child("app")
        self.counts: dict[str, int] = {"wrap_batches": 0, "server_restarts": 0, "duplicates": 0, "events_total": 0}

    # -- the application behind the server ---------------------------------
    def _store(self, gen: int, batch: Batch, info: ConnectionInfo) -> None:
        key = (gen, info.id)
        for ev in batch.events:
            fields = ev.fields()
            c, i = int(fields["c"]), int(fields["i"])
            last = self.per_conn.get(key)
            if last is not None and (last[0] != c or last[1] >= i):
                self.violate("order", f"connection {key}: event {(c, i)} after {last}")
            self.per_conn[key] = (c, i)
            if (c, i) in self.delivered:
                self.counts["duplicates"] += 1
            self.delivered.add((c, i))
            self.deliveries += 1
        self.trace.record(trio.current_time(), "app", gen, info.id, len(batch.events), batch.events[0].seq, batch.last_seq)

    def make_handler(self, gen: int, nursery: trio.Nursery) -> Any:
        wl = self.wl

        async def handler(batch: Batch, info: ConnectionInfo) -> None:
            seqs = [e.seq for e in batch.events]
            for a, b in itertools.pairwise(seqs):
                if next_seq(a) != b:
                    self.violate("seq-gap", f"batch seqs {a} then {b}")
            if seqs[-1] < seqs[0]:
                self.counts["wrap_batches"] += 1
                self.trace.probe("lumberjack.batch-crosses-2^32")
            if wl["app_delay"]:
                await trio.sleep(self.app_rng.expo(wl["app_delay"], 4 * wl["app_delay"]))
            if wl["bug"] == "ack-before-deliver":
                # Planted bug (tests the checker and the shrinker): store after acking.
                async def later() -> None:
                    await trio.sleep(0.05)
                    self._store(gen, batch, info)

                nursery.start_soon(later)
                return
            self._store(gen, batch, info)

        return handler

    # -- the server, crashing and restarting -------------------------------
    async def server_life(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        wl = self.wl

        async def start(gen: int, nursery: trio.Nursery) -> Any:
            server = LumberjackServer(
                self.make_handler(gen, nursery),
                config=ServerConfig(keepalive_interval=wl["keepalive"], idle_timeout=60.0),
            )
            self.servers.append(server)
            listener = self.net.listen(ADDRESS)
            await nursery.start(server.serve, [listener])

            async def crash() -> None:
                # Every connection reset, the listener gone; the application's store survives.
                self.counts["server_restarts"] += 1
                self.trace.record(trio.current_time(), "server-crash", gen)
                self.net.reset_all(ADDRESS)
                await listener.aclose()
                await server.shutdown(0)

            return crash

        await crash_restart_loop(
            restarts=wl["restarts"],
            rng=self.rng.child("server-life"),
            healed=self.healed,
            start=start,
            crash_after=lambda r: r.between(1.0, wl["safety_time"]),
            task_status=task_status,
        )

    # -- clients -------------------------------------------------------------
    async def client_task(self, c: int) -> None:
        wl = self.wl
        n = wl["events"]
        version = V2 if wl["version"] == 2 else V1
        if version == V2:
            events: list[Any] = [{"c": c, "i": i, "m": "x" * (i % 17)} for i in range(n)]
        else:
            events = [{"c": str(c), "i": str(i), "m": "y" * (i % 13)} for i in range(n)]

        def on_acked(acked: list[Any]) -> None:
            for e in acked:
                key = (c, int(e["i"]))
                if key not in self.delivered:
                    self.violate("ack-before-delivery", f"client {c} saw event {key[1]} acked before the application had it")
            self.trace.record(trio.current_time(), "acked", c, len(acked))

        client = LumberjackClient(
            lambda: self.net.connect(ADDRESS),
            config=ClientConfig(
                version=version,
                window_size=wl["window"],
                compression_level=wl["compression"],
                sequence=wl["sequence"],
                first_seq=wl["first_seq"],
                ack_timeout=wl["ack_timeout"],
                backoff_initial=0.1,
                backoff_max=5.0,
            ),
            on_acked=on_acked,
            rng=self.rng.child("client", c),
        )
        self.clients.append(client)
        await client.send(events)
        self.done[c] = trio.current_time()
        await client.aclose()
        if len(self.done) == wl["clients"]:
            self.all_done.set()

    async def rogue_client(self, address: str, kind: str, rogue: Rogue, rng: SimRandom) -> None:
        """One of our clients sending 3 events in one window to a rogue server: ``send``
        returns within 120 s, and the client reports acked exactly the events the rogue
        acked, each once and in order (``rogue-acks``)."""
        events = [{"c": -2, "i": i} for i in range(3)]
        acked: list[Any] = []
        client = LumberjackClient(
            lambda: self.net.connect(address),
            config=ClientConfig(window_size=3, ack_timeout=10.0, backoff_initial=0.1, backoff_max=1.0),
            on_acked=acked.extend,
            rng=rng.child("client"),
        )
        self.clients.append(client)
        with trio.move_on_after(120) as scope:
            await client.send(events)
            await trio.sleep(1.0)  # the rogue's keepalive and EOF reach the idle client
        await client.aclose()
        if scope.cancelled_caught:
            self.violate("rogue-acks", f"rogue {kind}: send() still running after 120 s, {len(acked)} of 3 events acked")
        elif acked != events:
            self.violate("rogue-acks", f"rogue {kind}: the client reported {acked} acked, the rogue acked {events}")

    async def main(self) -> ScenarioReport:
        wl = self.wl
        self.counts["events_total"] = wl["clients"] * wl["events"]
        outcome, violation, detail = "pass", "", ""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.server_life)
            for c in range(wl["clients"]):
                nursery.start_soon(self.client_task, c)
            for h in range(wl.get("hostiles", 0)):
                nursery.start_soon(self.hostile_peer, h, ADDRESS, HOSTILE)
            self.start_misfits(nursery, ADDRESS, MISFITS)
            self.start_rogues(nursery, ADDRESS, ROGUES, self.rogue_client)

            async def done() -> None:  # the clients, then the hostile and misfit peers (each ends within ~190 s)
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
            if not converged:
                waiting = sorted(set(range(wl["clients"])) - set(self.done))
                outcome, violation = "liveness", "no-convergence"
                detail = f"clients {waiting} still sending {wl['liveness_time']}s after healing"
            nursery.cancel_scope.cancel()
        if self.violation is not None:
            outcome, (violation, detail) = "violation", self.violation
        elif outcome == "pass":
            missing = [(c, i) for c in range(wl["clients"]) for i in range(wl["events"]) if (c, i) not in self.delivered]
            if missing:
                outcome, violation = "violation", "lost"
                detail = f"{len(missing)} events never delivered, first {missing[:3]}"
        protocol_errors = sum(cl.stats.get("protocol_errors", 0) for cl in self.clients)
        if protocol_errors and outcome == "pass":
            outcome, violation = "violation", "client-protocol-error"
            detail = f"our client rejected {protocol_errors} replies from our server: {self.clients[0].last_error!r}"
        counts = dict(self.counts)
        counts["deliveries"] = self.deliveries
        counts["hostiles_closed"] = self.hostiles_closed
        counts["misfits_closed"] = self.misfits_closed
        counts |= sum_stats("client", self.clients, ("reconnects", "resent_events", "keepalives", "windows", "failures"))
        counts |= sum_stats("server", self.servers, ("connections", "protocol_errors", "batches"))
        return ScenarioReport(
            outcome=outcome,
            violation=violation,
            detail=detail,
            sim_time=trio.current_time(),
            counts=counts,
            transitions=coverage(client=self.clients, server=self.servers),
        )


SCENARIO = LumberjackScenario()
