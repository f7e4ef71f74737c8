"""What every scenario does the same way:
the safety phase then the liveness phase, and a server that crashes and
restarts at seeded times until the network is healed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Final

import trio

from .faults import Faults
from .net import SimNet
from .rand import SimRandom
from .trace import Trace

__all__ = ["HALVE", "Hostile", "RunBase", "crash_restart_loop", "role_transitions", "safety_then_liveness", "shrink_toward"]


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

    def violate(self, kind: str, detail: str) -> None:
        """Record the first violation (later ones are consequences)."""
        if self.violation is None:
            self.violation = (kind, detail)
            self.trace.record(trio.current_time(), "VIOLATION", kind, detail)


    async def hostile_peer(self, h: int, address: str, kinds: Mapping[str, Hostile]) -> None:
        """One hostile peer of the swarm: connect to ``address`` (retrying while the
        server is down), send one of ``kinds`` (drawn from the seed), half-close
        after it if that kind says so, and wait for the server to end the
        connection within the kind's budget (else ``hostile-not-closed``)."""
        rng = self.rng.child("hostile", h)
        kind = rng.pick(sorted(kinds))
        data, budget, half_close = kinds[kind]
        self.trace.record(trio.current_time(), "hostile", h, kind)
        try:
            for _ in range(50):
                try:
                    stream = await self.net.connect(address)
                    break
                except OSError:
                    await trio.sleep(rng.between(0.5, 2.0))
            else:
                return  # never reached the server: nothing to judge
            with trio.move_on_after(budget) as scope:
                try:
                    await stream.send_all(data)
                    if half_close:
                        await stream.send_eof()
                    while await stream.receive_some(4096):
                        pass
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
            await trio.aclose_forcefully(stream)
            if scope.cancelled_caught:
                self.violate("hostile-not-closed", f"hostile peer {h} ({kind}) still connected after {budget:.0f} s")
                return
            self.hostiles_closed += 1
        finally:
            self.hostiles_done += 1

    async def all_hostiles_done(self) -> None:
        """Until every hostile peer of the workload has finished."""
        while self.hostiles_done < int(self.wl.get("hostiles", 0)):
            await trio.sleep(1.0)


#: A hostile peer's move: (bytes, seconds the server has to end the connection, half-close after them).
Hostile = tuple[bytes, float, bool]


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
