"""Simulation scenarios, one per protocol, named by the protocol's descriptor.

A scenario draws a JSON-able workload from a seed, runs real refwire drivers
over :class:`~refwire.sim.net.SimNet` through a safety phase (faults on,
invariants checked as events happen) and a liveness phase (faults healed,
everything must converge in bounded virtual time), and reports what happened.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import attrs

from ..faults import Faults
from ..rand import SimRandom
from ..trace import Trace

__all__ = ["Scenario", "ScenarioReport", "scenario", "scenario_names"]


@attrs.frozen(kw_only=True)
class ScenarioReport:
    outcome: str  #: "pass", "violation" or "liveness"
    violation: str = ""
    detail: str = ""
    sim_time: float = 0.0
    counts: dict[str, int] = attrs.field(factory=dict)
    transitions: frozenset[str] = frozenset()


class Scenario(Protocol):
    name: str

    def draw_workload(self, rng: SimRandom) -> dict[str, Any]: ...

    async def run(self, *, rng: SimRandom, faults: Faults, workload: dict[str, Any], trace: Trace) -> ScenarioReport: ...

    def shrink_steps(self, workload: dict[str, Any]) -> Iterable[tuple[str, Any]]: ...


def scenario(protocol: str) -> Scenario:
    """``protocol``'s scenario, named by its descriptor (:mod:`refwire.protocols`)
    and imported on first use; :class:`ValueError` naming the known ones otherwise."""
    from refwire.protocols import descriptor

    found: Scenario = descriptor(protocol, "scenario").load("scenario")
    return found


def scenario_names() -> tuple[str, ...]:
    """The protocols with a simulation scenario, in registry order."""
    from refwire.protocols import names

    return names("scenario")
