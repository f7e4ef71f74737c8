"""Simulation scenarios, one per protocol, registered by name.

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

__all__ = ["SCENARIOS", "SCENARIO_MODULES", "Scenario", "ScenarioReport"]


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


#: One module per protocol, each with a ``SCENARIO`` instance.
SCENARIO_MODULES = ("lumberjack", "pravega", "pravega_draft", "tank", "seastar_rpc")


def _registry() -> dict[str, Scenario]:
    import importlib

    found: list[Scenario] = [importlib.import_module(f"{__name__}.{m}").SCENARIO for m in SCENARIO_MODULES]
    return {s.name: s for s in found}


SCENARIOS: dict[str, Scenario] = _registry()
