"""Seastar RPC under faults: concurrent calls with timeouts, one-way calls and streams.

Real drivers (:class:`~refwire.seastar_rpc.client.SeastarClient`,
:class:`~refwire.seastar_rpc.server.SeastarServer`) run unchanged over the
simulated network (partial reads, trickles, stalls, resets, half-open peers,
refused connects).  Invariants (specs/seastar-rpc/README.md §7):

* ``reply-without-request`` -- every reply our client receives names a msg id
  this connection issued (the machine's ``StrayReply.known``);
* ``wrong-reply`` -- a reply carries what *its* request asked for (echo: the
  same tagged bytes; sum: the sum; boom: USER "boom"; an unknown verb:
  UNKNOWN_VERB), so replies are never crossed between calls;
* ``late-reply`` -- our server never sends a reply after its request's
  propagated deadline;
* ``timeout-not-honoured`` -- a call with a timeout completes by its deadline;
* ``exactly-once`` -- each call completes exactly once (reply, exception,
  timeout or connection error);
* ``orphan-stream`` -- a stream never outlives its parent connection on the
  server (checked continuously), nor on the client once the client closed;
* ``misfit-wrong-reply`` / ``hostile-not-closed`` -- misfit peers (``misfits``: EOF before
  negotiating, a call over ``max_memory`` answered with USER and then a call that must still be
  answered, no-op then undecompressable frames on an RPC and a stream connection) are answered
  as the spec says and closed in time;
* ``rogue-reply`` -- after healing, a client against a rogue server (``rogues``: EOF, reset,
  silence or a bad magic instead of a negotiation reply; EOF after it; no-ops then a bad frame)
  never gets an answer the rogue did not send and ends within 60 s;
* liveness -- once faults are healed, every client finishes and a fresh call
  on a fresh connection succeeds within ``liveness_time``.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterable
from typing import Any

import trio

from refwire.sansio import NEED_DATA
from refwire.seastar_rpc.client import (
    CallTimeout,
    ClientConfig,
    ClientStream,
    RemoteVerbError,
    RpcConnectionError,
    RpcError,
    SeastarClient,
    StreamClosedError,
    UnknownVerbError,
)
from refwire.seastar_rpc.connection import CallReceived, ClientConnection, OversizedCall
from refwire.seastar_rpc.demo import demo_registry
from refwire.seastar_rpc.events import Call, CallFailed, Negotiated, Reply
from refwire.seastar_rpc.frames import Features, NoOp
from refwire.seastar_rpc.server import SeastarServer, ServerConfig

from ..faults import Faults
from ..harness import HALVE, Hostile, Misfit, Rogue, RunBase, coverage, safety_then_liveness, shrink_toward
from ..rand import SimRandom
from ..trace import Trace
from . import ScenarioReport

ADDRESS = "seastar-server:7000"
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
#: The echo payload's byte ``k`` of call ``i`` is ``(i + k) % 251``: slices of this cycle.
_CYCLE = bytes(range(251))


def _filler(i: int, size: int) -> bytes:
    """``bytes((i + k) % 251 for k in range(size))``, sliced out of repeated cycles
    (the generator cost a Python step per byte: a quarter of a seed's time)."""
    start = i % 251
    return (_CYCLE * ((start + size) // 251 + 1))[start : start + size]


#: Hostile peers (specs/seastar-rpc/README.md §2, §6): a bad magic or a negotiation frame over the
#: limit closes without a reply, one cut by EOF closes at the EOF, a silent client at the 30 s
#: negotiation timeout.
HOSTILE: dict[str, Hostile] = {
    "bad-magic": (b"NOTMAGIC" + struct.pack("<I", 0), 30.0, False),
    "negotiation-over-limit": (b"SSTARRPC" + struct.pack("<I", 1 << 20), 30.0, False),
    "cut-by-eof": (b"SSTARRPC" + struct.pack("<I", 100) + bytes(10), 30.0, True),
    "silent": (b"", 60.0, False),
}



async def _negotiated(run: RunBase, machine: ClientConnection) -> trio.abc.HalfCloseableStream | None:
    """A raw connection to the server negotiated by ``machine`` (None: the network lost it)."""
    for _ in range(20):
        try:
            stream = await run.net.connect(ADDRESS)
            break
        except OSError:
            await trio.sleep(1.0)
    else:
        return None
    machine.initiate(now=trio.current_time())
    await stream.send_all(machine.data_to_send())
    while data := await stream.receive_some(4096):
        machine.receive_data(data, now=trio.current_time())
        event = machine.next_event()
        if isinstance(event, Negotiated):
            return stream
        assert event is NEED_DATA, event
    return None


async def _noops_then_garbage(run: RunBase, rng: SimRandom) -> None:
    """The ``compressed-noops`` misfit: an RPC connection and a stream connection of it, both
    with LZ4, each sending the no-op compressed frame (skipped) and then a compressed frame
    that does not decompress (a protocol error: the server closes it; the stream first, as
    its parent's close would abort it)."""
    parent = ClientConnection(compressors=("LZ4",))
    parent_stream = await _negotiated(run, parent)
    if parent_stream is None or parent.connection_id is None:
        return
    child = ClientConnection(compressors=("LZ4",), stream_parent=parent.connection_id)
    child_stream = await _negotiated(run, child)
    for machine, stream in ((child, child_stream), (parent, parent_stream)):
        if stream is None:
            continue
        machine.send(NoOp(), now=trio.current_time())
        await stream.send_all(machine.data_to_send() + _U32.pack(4) + b"\xff" * 4)
        while await stream.receive_some(4096):
            pass
        await trio.aclose_forcefully(stream)
    await trio.aclose_forcefully(parent_stream)


async def _oversized_call(run: RunBase, rng: SimRandom) -> None:
    """The ``oversized-call`` misfit: once the network is healed (its data is 16 MiB: no
    trickling it), a call one byte longer than the server admits (``max_memory``): its data
    is skipped unread and it is answered with Seastar's USER error, and the connection stays
    up -- a ``sum`` call after it gets its sum (else ``misfit-wrong-reply``); then an EOF,
    and the server closes."""
    await run.healed.wait()
    machine = ClientConnection(timeout=False, handler_duration=False)
    stream = await _negotiated(run, machine)
    if stream is None:
        return
    machine.send(Call(2, bytes(ServerConfig().max_memory + 1)), now=trio.current_time())
    machine.send(Call(1, _I32.pack(2) + _I32.pack(3)), now=trio.current_time())
    await stream.send_all(machine.data_to_send())
    answers: dict[int, Reply | CallFailed] = {}
    eof_sent = False
    while data := await stream.receive_some(4096):
        machine.receive_data(data, now=trio.current_time())
        while (event := machine.next_event()) is not NEED_DATA:
            if isinstance(event, Reply | CallFailed):
                answers[event.msg_id] = event
        if len(answers) == 2 and not eof_sent:  # an EOF earlier would drop the sum's reply (§7)
            await stream.send_eof()
            eof_sent = True
    await trio.aclose_forcefully(stream)
    big, small = answers.get(1), answers.get(2)
    if not (isinstance(big, CallFailed) and isinstance(small, Reply) and small.payload == _I32.pack(5)):
        run.violate("misfit-wrong-reply", f"oversized-call: the oversized call got {big!r}, the sum after it {small!r}")


#: Misfit peers (``misfits``; specs/seastar-rpc/README.md §2-§5): a client that ends the connection
#: before negotiating (closed at the EOF), a call longer than the server admits (answered with the
#: USER error, its data skipped, closed at the EOF), and no-op compressed frames on an RPC and a
#: stream connection followed by a frame that does not decompress (closed as a protocol error).
MISFITS: dict[str, Misfit] = {
    "eof-at-once": Misfit(b"", 30.0, "eof"),
    "oversized-call": Misfit(b"", 120.0, script=_oversized_call),
    "compressed-noops": Misfit(b"", 60.0, script=_noops_then_garbage),
}

#: a rogue server's negotiation reply: LZ4 chosen, streaming offered (a connection id)
_ROGUE_REPLY = Features(compress="LZ4", connection_id=(1 << 16) | 1).encode()

#: Rogue servers (``rogues``; specs/seastar-rpc/README.md §2, §4, §5) for one of our clients that
#: calls (and on the last one opens a stream first): one hanging up, resetting, saying nothing or
#: sending a bad magic instead of its negotiation reply, one hanging up right after it, and one
#: sending no-op frames then, seconds later, a frame that does not decompress, on every connection.
ROGUES: dict[str, Rogue] = {
    "eof-before-reply": Rogue(),
    "reset-before-reply": Rogue(end="reset"),
    "silent": Rogue(end=""),
    "bad-magic-reply": Rogue(b"NOTMAGIC" + bytes(4)),
    "reply-then-eof": Rogue(_ROGUE_REPLY),
    # the stream connection (the 2nd) gets its bad frame first: its parent's would abort it
    "noops-then-garbage": Rogue(_ROGUE_REPLY + _U32.pack(0) * 2, then=_U32.pack(4) + b"\xff" * 4, then_after=(6.0, 2.0)),
}


class SeastarScenario:
    name = "seastar-rpc"

    def draw_workload(self, rng: SimRandom) -> dict[str, Any]:
        wl: dict[str, Any] = {
            "clients": rng.int_between(1, 3),
            "calls": rng.int_between(3, 40),
            "concurrency": rng.pick([1, 2, 8]),
            "compress": rng.pick(["", "LZ4", "LZ4_FRAGMENTED", "LZ4_FRAGMENTED,LZ4"]),
            "timeouts": rng.pick([[0.05, 0.5], [0.3, 2.0, 10.0], [10.0]]),
            "max_sleep_ms": rng.pick([0, 50, 400]),
            "big": rng.pick([0, 0, 40_000, 100_000]),
            "streams": rng.pick([0, 1, 2]),
            "abandon_streams": rng.pick([False, True]),
            "safety_time": 60.0,
            "liveness_time": 300.0,
        }
        wl["hostiles"] = rng.pick([0, 0, 1, 2])  # drawn last: the knobs above keep their draws
        wl["misfits"] = rng.pick([0, 0, 1, 2])  # after hostiles, for the same reason
        wl["rogues"] = rng.pick([0, 0, 1, 2])  # after misfits, for the same reason
        return wl

    def shrink_steps(self, workload: dict[str, Any]) -> Iterable[tuple[str, Any]]:
        return shrink_toward(
            workload, [("hostiles", 0), ("misfits", 0), ("rogues", 0), ("clients", 1), ("calls", HALVE), ("streams", 0), ("big", 0), ("compress", ""), ("concurrency", 1)]
        )

    async def run(self, *, rng: SimRandom, faults: Faults, workload: dict[str, Any], trace: Trace) -> ScenarioReport:
        return await _Run(rng, faults, workload, trace).main()


class _Run(RunBase):
    def __init__(self, rng: SimRandom, faults: Faults, wl: dict[str, Any], trace: Trace) -> None:
        super().__init__(rng, faults, wl, trace)
        self.done: set[int] = set()
        self.all_done = trio.Event()
        self.clients: list[SeastarClient] = []
        self.server: SeastarServer | None = None
        self.completions: dict[tuple[int, int], str] = {}
        self.counts: dict[str, int] = {
            k: 0
            for k in (
                "events_total",
                "replies",
                "remote_errors",
                "timeouts",
                "conn_errors",
                "one_way",
                "sessions",
                "streams_opened",
                "stream_echoes",
                "streams_abandoned",
                "late_checks",
                "connect_failures",
            )
        }

    # -- server ------------------------------------------------------------------
    def on_reply(self, conn_id: int, call: CallReceived | OversizedCall, now: float) -> None:
        self.counts["late_checks"] += 1
        if call.deadline is not None and now > call.deadline:
            self.violate(
                "late-reply", f"connection {conn_id:#x} msg {call.msg_id}: reply at {now:.6f} after deadline {call.deadline:.6f}"
            )

    async def orphan_watch(self) -> None:
        assert self.server is not None
        seen: dict[int, float] = {}
        while True:
            await trio.sleep(0.5)
            now = trio.current_time()
            for sid, s in list(self.server._streams.items()):
                if s.parent_id not in self.server._rpc:
                    first = seen.setdefault(sid, now)
                    if now - first > 1.0:
                        self.violate(
                            "orphan-stream", f"stream {sid:#x} alive {now - first:.1f}s after its parent {s.parent_id:#x} closed"
                        )

    # -- one call ------------------------------------------------------------------
    def _complete(self, key: tuple[int, int], outcome: str) -> None:
        if key in self.completions:
            self.violate("exactly-once", f"call {key} completed twice: {self.completions[key]} then {outcome}")
        self.completions[key] = outcome
        self.trace.record(trio.current_time(), "done", key[0], key[1], outcome)

    async def one_call(self, client: SeastarClient, c: int, i: int, rng: SimRandom) -> bool:
        """Make call ``i``; False when the connection is gone (start a new session)."""
        wl = self.wl
        key = (c, i)
        kind = rng.pick(["echo", "echo", "sum", "sleep", "boom", "unknown", "one-way"])
        timeout = rng.pick(wl["timeouts"])
        tag = f"c{c}-i{i}-".encode()
        if kind == "echo":
            size = rng.pick([0, 10, wl["big"]])
            verb, payload = 2, tag + _filler(i, size)
            expect: Any = payload
        elif kind == "sum":
            a, b = rng.int_between(-1000, 1000), rng.int_between(-1000, 1000)
            verb, payload, expect = 1, _I32.pack(a) + _I32.pack(b), _I32.pack(a + b)
        elif kind == "sleep":
            ms = rng.int_between(0, wl["max_sleep_ms"])
            verb, payload, expect = 5, _I32.pack(ms), _I32.pack(ms)
        elif kind == "boom":
            verb, payload, expect = 3, b"", RemoteVerbError
        elif kind == "unknown":
            verb, payload, expect = 4242, tag, UnknownVerbError
        else:
            try:
                await client.call_one_way(4, _I32.pack(i), timeout=timeout)
            except RpcConnectionError:
                self._complete(key, "conn-error")
                return False
            self.counts["one_way"] += 1
            self._complete(key, "one-way")
            return True
        start = trio.current_time()
        try:
            got = await client.call(verb, payload, timeout=timeout)
        except CallTimeout:
            self.counts["timeouts"] += 1
            late = trio.current_time() - (start + timeout)
            if late > 1e-6:
                self.violate("timeout-not-honoured", f"call {key} timed out {late:.6f}s after its deadline")
            self._complete(key, "timeout")
            return True
        except RpcConnectionError:
            self.counts["conn_errors"] += 1
            self._complete(key, "conn-error")
            return False
        except RpcError as exc:
            self.counts["remote_errors"] += 1
            if not (isinstance(expect, type) and isinstance(exc, expect)):
                self.violate("wrong-reply", f"call {key} ({kind}) ended with {exc!r}")
            elif isinstance(exc, RemoteVerbError) and exc.message != b"boom":
                self.violate("wrong-reply", f"call {key}: USER text {exc.message!r}")
            elif isinstance(exc, UnknownVerbError) and exc.verb != verb:
                self.violate("wrong-reply", f"call {key}: UNKNOWN_VERB {exc.verb}")
            self._complete(key, type(exc).__name__)
            return True
        self.counts["replies"] += 1
        if got != expect:
            self.violate("wrong-reply", f"call {key} ({kind}) got {got[:40]!r}..., expected {expect!r:.60}")
        if trio.current_time() > start + timeout + 1e-6:
            self.violate("timeout-not-honoured", f"call {key} answered after its deadline")
        self._complete(key, "reply")
        return True

    # -- streams -------------------------------------------------------------------------
    async def stream_work(self, client: SeastarClient, c: int, rng: SimRandom, opened: list[ClientStream]) -> None:
        try:
            stream = await client.open_stream()
        except RpcError:
            return
        opened.append(stream)
        self.counts["streams_opened"] += 1
        msgs = [f"c{c}-m{k}".encode() * rng.int_between(1, 50) for k in range(rng.int_between(0, 5))]
        abandon = self.wl["abandon_streams"] and rng.chance(0.5)
        with trio.move_on_after(20):
            try:
                await client.call(6, _I32.pack(len(msgs)) + stream.id_bytes(), timeout=10)
                for m in msgs:
                    await stream.send(m)
                if abandon:
                    self.counts["streams_abandoned"] += 1
                    return  # left open: it must die with its parent
                await stream.close()
                got = [m async for m in stream]
                if got != msgs:
                    self.violate("wrong-reply", f"stream {stream.id:#x} echoed {len(got)} messages, sent {len(msgs)}")
                self.counts["stream_echoes"] += 1
            except (RpcError, StreamClosedError):
                return

    # -- clients ------------------------------------------------------------------------
    async def client_task(self, c: int) -> None:
        wl = self.wl
        rng = self.rng.child("client", c)
        compress = tuple(n for n in wl["compress"].split(",") if n)
        config = ClientConfig(compressors=compress, negotiation_timeout=10.0)
        i = 0
        streams_left = wl["streams"]
        while i < wl["calls"]:
            client = SeastarClient(lambda: self.net.connect(ADDRESS), config=config)
            opened: list[ClientStream] = []
            try:
                async with client:
                    self.clients.append(client)
                    self.counts["sessions"] += 1
                    alive = True
                    while alive and i < wl["calls"]:
                        batch = list(range(i, min(wl["calls"], i + wl["concurrency"])))
                        i = batch[-1] + 1
                        results: list[bool] = []

                        async def run(k: int, client: SeastarClient = client, results: list[bool] = results) -> None:
                            results.append(await self.one_call(client, c, k, rng.child("call", k)))

                        async with trio.open_nursery() as n:
                            for k in batch:
                                n.start_soon(run, k)
                            if streams_left and rng.chance(0.3):
                                streams_left -= 1
                                n.start_soon(self.stream_work, client, c, rng.child("stream", i), opened)
                        alive = all(results) and not client.closed
            except RpcConnectionError:
                self.counts["connect_failures"] += 1
                await trio.sleep(rng.between(0.1, 1.0))
            except OSError:
                self.counts["connect_failures"] += 1
                await trio.sleep(rng.between(0.1, 1.0))
            await trio.sleep(0.2)
            for s in opened:
                if not s.closed:
                    self.violate("orphan-stream", f"client stream {s.id:#x} still open after its client closed")
        # Liveness probe: once healed, a fresh connection must work.
        await self.healed.wait()
        while True:
            try:
                async with SeastarClient(lambda: self.net.connect(ADDRESS), config=config) as probe:
                    got = await probe.call(2, b"probe", timeout=10.0)
                    if got != b"probe":
                        self.violate("wrong-reply", f"probe got {got!r}")
                    break
            except (RpcError, OSError):
                await trio.sleep(1.0)
        self.done.add(c)
        if len(self.done) == wl["clients"]:
            self.all_done.set()

    async def rogue_client(self, address: str, kind: str, rogue: Rogue, rng: SimRandom) -> None:
        """One of our clients against a rogue server: a call (after a stream's messages,
        with ``noops-then-garbage``) that the rogue never answers must end in an error --
        the negotiation's, the connection's or the stream's -- within 60 s, never in a
        reply or a stream message (``rogue-reply``)."""
        client = SeastarClient(lambda: self.net.connect(address), config=ClientConfig(compressors=("LZ4",), negotiation_timeout=10.0))
        self.clients.append(client)
        answered: list[bytes] = []
        with trio.move_on_after(60) as scope:
            try:
                async with client:
                    if kind == "noops-then-garbage":
                        stream = await client.open_stream()
                        with contextlib.suppress(StreamClosedError, RpcError):
                            answered.extend([m async for m in stream])
                    answered.append(await client.call(2, b"rogue", timeout=30))
            except (RpcError, StreamClosedError, OSError):
                pass
        if scope.cancelled_caught:
            self.violate("rogue-reply", f"rogue {kind}: the client still waiting after 60 s")
        elif answered:
            self.violate("rogue-reply", f"rogue {kind}: the client got {answered!r} from a server that never answered")

    async def main(self) -> ScenarioReport:
        wl = self.wl
        outcome, violation, detail = "pass", "", ""
        self.server = SeastarServer(demo_registry(), config=ServerConfig(negotiation_timeout=30.0))
        self.server.on_reply = self.on_reply
        async with trio.open_nursery() as nursery:
            await nursery.start(self.server.serve, [self.net.listen(ADDRESS)])
            nursery.start_soon(self.orphan_watch)
            for c in range(wl["clients"]):
                nursery.start_soon(self.client_task, c)
            for h in range(wl.get("hostiles", 0)):
                nursery.start_soon(self.hostile_peer, h, ADDRESS, HOSTILE)
            self.start_misfits(nursery, ADDRESS, MISFITS)
            self.start_rogues(nursery, ADDRESS, ROGUES, self.rogue_client)

            async def done() -> None:
                await self.all_done.wait()
                await self.all_hostiles_done()

            async def calls_completed() -> None:
                while len(self.completions) < wl["clients"] * wl["calls"]:
                    await trio.sleep(0.5)

            converged = await safety_then_liveness(
                self.net,
                self.healed,
                self.trace,
                safety_time=wl["safety_time"],
                liveness_time=wl["liveness_time"] + self.swarm_slack(),
                done=done,
                safety_done=calls_completed,
            )
            if not converged:
                outcome, violation = "liveness", "no-convergence"
                missing = wl["clients"] * wl["calls"] - len(self.completions)
                detail = f"clients {sorted(set(range(wl['clients'])) - self.done)} not done {wl['liveness_time']}s after healing; {missing} calls never completed"
            nursery.cancel_scope.cancel()
        if self.violation is not None:
            outcome, (violation, detail) = "violation", self.violation
        elif outcome == "pass" and len(self.completions) != wl["clients"] * wl["calls"]:
            outcome, violation = "violation", "exactly-once"
            detail = f"{wl['clients'] * wl['calls'] - len(self.completions)} calls never completed"
        stray = sum(cl.stats["unknown_stray"] for cl in self.clients)
        if stray and outcome == "pass":
            outcome, violation, detail = "violation", "reply-without-request", f"{stray} replies for ids never issued"
        counts = dict(self.counts)
        counts["events_total"] = wl["clients"] * wl["calls"]
        counts["deliveries"] = self.counts["replies"]
        counts["client_reconnects"] = max(0, self.counts["sessions"] - wl["clients"])
        assert self.server is not None
        for key in ("connections", "stream_connections", "protocol_errors", "dropped_expired", "calls"):
            counts[f"server_{key}"] = self.server.stats[key]
        counts["client_stray"] = sum(cl.stats["stray"] for cl in self.clients)
        counts["hostiles_closed"] = self.hostiles_closed
        counts["misfits_closed"] = self.misfits_closed
        return ScenarioReport(
            outcome=outcome,
            violation=violation,
            detail=detail,
            sim_time=trio.current_time(),
            counts=counts,
            transitions=coverage(server=[self.server], client=self.clients),
        )


SCENARIO = SeastarScenario()
