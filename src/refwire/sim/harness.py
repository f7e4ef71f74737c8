"""What every scenario does the same way:
the safety phase then the liveness phase, and a server that crashes and
restarts at seeded times until the network is healed."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Final, NamedTuple

import trio

from .faults import Faults
from .net import OPENED, SimNet
from .rand import SimRandom
from .trace import Trace

__all__ = ["HALVE", "Hostile", "Misfit", "Rogue", "RunBase", "crash_restart_loop", "role_transitions", "safety_then_liveness", "shrink_toward"]


async def safety_then_liveness(
    net: SimNet,
    healed: trio.Event,
    trace: Trace,
    *,
    safety_time: float,
    liveness_time: float,
    done: Callable[[], Awaitable[None]],
    safety_done: Callable[[], Awaitable[None]] | None = None,
) -> bool:
    """Run the safety phase (faults on, up to ``safety_time``), heal the
    network and set ``healed``, then the liveness phase: ``done()`` must
    return within ``liveness_time``.  True if it did."""
    with trio.move_on_after(safety_time):
        await (safety_done or done)()
    net.heal()
    healed.set()
    trace.record(trio.current_time(), "healed")
    with trio.move_on_after(liveness_time) as scope:
        await done()
    trace.record(trio.current_time(), "stop")
    return not scope.cancelled_caught


async def crash_restart_loop(
    *,
    restarts: int,
    rng: SimRandom,
    healed: trio.Event,
    start: Callable[[int, trio.Nursery], Awaitable[Callable[[], Awaitable[None]]]],
    crash_after: Callable[[SimRandom], float],
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Generation after generation: ``start(gen, nursery)`` starts a server
    and returns its crash action; the server runs ``crash_after(rng)`` virtual
    seconds (or until healed, when it stays up for good), crashes, and comes
    back after a seeded pause.  The last generation never crashes.
    ``task_status.started()`` once the first server is up."""
    started = False
    for gen in range(restarts + 1):
        async with trio.open_nursery() as nursery:
            crash = await start(gen, nursery)
            if not started:
                started = True
                task_status.started()
            if gen == restarts:
                await trio.sleep_forever()
            with trio.move_on_after(crash_after(rng)):
                await healed.wait()
            if healed.is_set():
                await trio.sleep_forever()
            await crash()
            nursery.cancel_scope.cancel()
        with trio.move_on_after(rng.between(0.1, 3.0)):
            await healed.wait()


class RunBase:
    """What every scenario run holds: its seed's randomness, workload, trace,
    simulated network, the healed flag, and the first invariant violated."""

    def __init__(self, rng: SimRandom, faults: Faults, wl: dict[str, Any], trace: Trace) -> None:
        self.rng = rng
        self.wl = wl
        self.trace = trace
        self.net = SimNet(rng.child("net"), faults, trace)
        self.violation: tuple[str, str] | None = None
        self.healed = trio.Event()
        #: hostile peers finished (whatever happened) and closed in time
        self.hostiles_done = 0
        self.hostiles_closed = 0
        self.misfits_closed = 0

    def violate(self, kind: str, detail: str) -> None:
        """Record the first violation (later ones are consequences)."""
        if self.violation is None:
            self.violation = (kind, detail)
            self.trace.record(trio.current_time(), "VIOLATION", kind, detail)


    async def hostile_peer(self, h: int, address: str, kinds: Mapping[str, Hostile | Misfit], tag: str = "hostile") -> None:
        """One hostile peer of the swarm: connect to ``address`` (retrying while the
        server is down), send one of ``kinds`` (drawn from the seed), half-close
        after it if that kind says so, and wait for the server to end the
        connection within the kind's budget (else ``hostile-not-closed``).

        A :class:`Misfit` may also reset the connection once its reply came
        (``end="reset"``) and name bytes the server's reply must hold
        (``expect``): a connection the server ended cleanly without them is
        ``misfit-wrong-reply`` (one a fault or a crash reset is not judged)."""
        rng = self.rng.child(tag, h)
        kind = rng.pick(sorted(kinds))
        spec = kinds[kind]
        move = spec if isinstance(spec, Misfit) else Misfit(spec[0], spec[1], "eof" if spec[2] else "")
        self.trace.record(trio.current_time(), tag, h, kind)
        try:
            if move.script is not None:
                opened: list[Any] = []
                token = OPENED.set(opened)
                try:
                    with trio.move_on_after(move.budget) as scope:
                        try:
                            await move.script(self, rng)
                        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                            pass
                finally:
                    OPENED.reset(token)
                if scope.cancelled_caught and any(s.blackholed for s in opened):
                    return  # a fault swallowed what one of its connections would have seen: nothing to judge
                if scope.cancelled_caught:
                    self.violate("hostile-not-closed", f"{tag} peer {h} ({kind}) still connected after {move.budget:.0f} s")
                    return
                self._closed(tag)
                return
            for _ in range(50):
                try:
                    stream = await self.net.connect(address)
                    break
                except OSError:
                    await trio.sleep(rng.between(0.5, 2.0))
            else:
                return  # never reached the server: nothing to judge
            got = bytearray()
            ended_cleanly = False
            with trio.move_on_after(move.budget) as scope:
                try:
                    await stream.send_all(move.data)
                    if move.end == "eof":
                        await stream.send_eof()
                    elif move.end == "reset" and not move.expect:
                        stream.reset()
                    while chunk := await stream.receive_some(4096):
                        if len(got) < 1 << 16:
                            got += chunk
                        if move.end == "reset" and _in_order(got, (move.expect,) if isinstance(move.expect, bytes) else move.expect):
                            stream.reset()
                            break
                    else:
                        ended_cleanly = True
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
            await trio.aclose_forcefully(stream)
            if scope.cancelled_caught and stream.blackholed:
                return  # a fault swallows whatever the server sends, its FIN too: nothing to judge
            if scope.cancelled_caught:
                self.violate("hostile-not-closed", f"{tag} peer {h} ({kind}) still connected after {move.budget:.0f} s")
                return
            pieces = (move.expect,) if isinstance(move.expect, bytes) else move.expect
            if ended_cleanly and not _in_order(got, pieces):
                want = " then ".join(p.hex() for p in pieces)
                self.violate("misfit-wrong-reply", f"{tag} peer {h} ({kind}): the reply {bytes(got[:48]).hex()} lacks {want}")
                return
            self._closed(tag)
        finally:
            self.hostiles_done += 1

    def _closed(self, tag: str) -> None:
        if tag == "hostile":
            self.hostiles_closed += 1
        else:
            self.misfits_closed += 1

    async def all_hostiles_done(self) -> None:
        """Until every hostile, misfit and rogue peer of the workload has finished."""
        while self.hostiles_done < sum(int(self.wl.get(k, 0)) for k in ("hostiles", "misfits", "rogues")):
            await trio.sleep(1.0)

    def start_misfits(self, nursery: trio.Nursery, address: str, kinds: Mapping[str, Hostile | Misfit]) -> None:
        """Start the workload's ``misfits`` peers (each a :meth:`hostile_peer` drawing from ``kinds``)."""
        for h in range(int(self.wl.get("misfits", 0))):
            nursery.start_soon(self.hostile_peer, h, address, kinds, "misfit")

    async def rogue_server(self, address: str, rogue: Rogue, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """A misbehaving server on ``address`` for one of our clients (``rogues``):
        every connection gets ``rogue.reply`` once the client's first bytes are in
        (or at once, ``rogue.first=False``), then ``rogue.end``."""
        listener = self.net.listen(address)
        async with trio.open_nursery() as nursery:
            task_status.started()
            for k in itertools.count():
                nursery.start_soon(self._rogue_connection, await listener.accept(), rogue, k)

    async def _rogue_connection(self, stream: Any, rogue: Rogue, k: int) -> None:
        try:
            if rogue.first and not await stream.receive_some(65536):
                return
            await trio.sleep(rogue.delay)  # the rest of what the client sends first
            if rogue.reply:
                await stream.send_all(rogue.reply)
            if rogue.then:
                await trio.sleep(rogue.then_after[min(k, len(rogue.then_after) - 1)])
                await stream.send_all(rogue.then)
            if rogue.end == "reset":
                stream.reset()
                return
            if rogue.end == "eof":
                await stream.send_eof()
            while await stream.receive_some(65536):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    async def rogue_peer(
        self, r: int, prefix: str, kinds: Mapping[str, Rogue], client: Callable[[str, str, Rogue, SimRandom], Awaitable[None]]
    ) -> None:
        """One rogue of the workload: once the network is healed (the verdict then has no
        fault to blame), a server playing one of ``kinds`` (drawn from the seed) on its own
        address, and ``await client(address, kind, rogue, rng)`` -- one of our clients
        using it, which judges what the client did (``run.violate``)."""
        rng = self.rng.child("rogue", r)
        kind = rng.pick(sorted(kinds))
        try:
            await self.healed.wait()
            self.trace.record(trio.current_time(), "rogue", r, kind)
            address = f"{prefix}-rogue-{r}"
            async with trio.open_nursery() as nursery:
                await nursery.start(self.rogue_server, address, kinds[kind])
                await client(address, kind, kinds[kind], rng)
                nursery.cancel_scope.cancel()
        finally:
            self.hostiles_done += 1

    def start_rogues(
        self, nursery: trio.Nursery, prefix: str, kinds: Mapping[str, Rogue], client: Callable[[str, str, Rogue, SimRandom], Awaitable[None]]
    ) -> None:
        """Start the workload's ``rogues`` (each a :meth:`rogue_peer`)."""
        for r in range(int(self.wl.get("rogues", 0))):
            nursery.start_soon(self.rogue_peer, r, prefix, kinds, client)

    def swarm_slack(self) -> float:
        """Extra liveness seconds while hostile or misfit peers run (each ends within ~190 s)."""
        return 200.0 if self.wl.get("hostiles") or self.wl.get("misfits") or self.wl.get("rogues") else 0.0


#: A hostile peer's move: (bytes, seconds the server has to end the connection, half-close after them).
Hostile = tuple[bytes, float, bool]


class Misfit(NamedTuple):
    """A misfit peer's move (the ``misfits`` knob): protocol-legal but unusual
    input no well-behaved client of the swarm sends (a keepalive, padding, a
    compressed window split mid-batch, a request inside an append block ...),
    or a peer that disappears at an awkward moment.  The server must answer as
    the spec says (``expect``) and end the connection within ``budget``."""

    data: bytes
    #: seconds the server has to end the connection (its idle timeout, or at once after an EOF)
    budget: float
    #: after ``data``: "" (wait), "eof" (half-close) or "reset" (reset once ``expect`` arrived)
    end: str = ""
    #: bytes the server's reply must contain when it ends the connection cleanly (a tuple:
    #: pieces that must appear in this order, anything between them -- keepalives, say)
    expect: bytes | tuple[bytes, ...] = b""
    #: instead of ``data``: a peer too clever for a fixed script (it reads the server's replies),
    #: ``await script(run, rng)``; it judges the server itself (``run.violate``) and must end
    #: within ``budget``
    script: Callable[[Any, SimRandom], Awaitable[None]] | None = None


class Rogue(NamedTuple):
    """A rogue server's move (the ``rogues`` knob): what a server refwire's own never is
    does to one of our clients -- acks part of a window, pings twice, says nothing,
    hangs up or resets at an awkward moment.  The scenario's client judges the outcome."""

    #: bytes sent on every connection (once the client's first bytes are in, see ``first``)
    reply: bytes = b""
    #: bytes sent a while after ``reply`` (the client has used the connection meanwhile) ...
    then: bytes = b""
    #: ... this many seconds after it on the k-th connection (the last value for the later ones)
    then_after: tuple[float, ...] = (2.0,)
    #: then: "eof" (half-close; read until the client leaves), "reset", or "" (read until it leaves)
    end: str = "eof"
    #: wait for the client's first bytes before replying
    first: bool = True
    #: seconds between those bytes and the reply
    delay: float = 0.5


def _in_order(got: bytes | bytearray, pieces: Iterable[bytes]) -> bool:
    """Whether ``pieces`` occur in ``got`` one after the other (not overlapping)."""
    at = 0
    for piece in pieces:
        found = got.find(piece, at)
        if found < 0:
            return False
        at = found + len(piece)
    return True


def role_transitions(role: str, seen: Iterable[tuple[str, str, str]]) -> set[str]:
    """``role:state-input->state`` names for a machine's transitions (coverage)."""
    return {f"{role}:{a}-{i}->{b}" for a, i, b in seen}


def sum_stats(prefix: str, holders: Iterable[Any], keys: Iterable[str], *, attr: str = "stats") -> dict[str, int]:
    """``{prefix_key: sum of holder.stats[key]}`` over several drivers (report counts)."""
    items = list(holders)
    return {f"{prefix}_{key}": sum(getattr(h, attr).get(key, 0) for h in items) for key in keys}


def coverage(**roles: Iterable[Any]) -> frozenset[str]:
    """The transitions every machine of each role reached, named for coverage:
    ``coverage(client=clients, server=servers)`` (each item has ``transitions_seen``,
    or is itself a set of triples)."""
    out: set[str] = set()
    for role, holders in roles.items():
        for h in holders:
            out |= role_transitions(role, h if isinstance(h, set | frozenset) else h.transitions_seen)
    return frozenset(out)


#: a :func:`shrink_toward` target: halve the value (down to 1)
HALVE: Final = object()


def shrink_toward(workload: dict[str, Any], steps: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """A scenario's ``shrink_steps``: for each ``(key, target)`` in order, propose
    ``target`` where the workload differs from it (``HALVE``: half, while above 1)."""
    for key, target in steps:
        value = workload[key]
        if target is HALVE:
            if value > 1:
                yield key, max(1, value // 2)
        elif value != target:
            yield key, target
