"""What every ``tests/sim/test_<protocol>_sim.py`` shares: the CI
batch fixture, "the batch passes", the determinism canary, the frozen
regressions of ``regressions/<protocol>/*.json`` and the opt-in long sweep
(``--sim-seeds N``, defined in tests/conftest.py).

A test module binds these under its own names, so pytest collects them there::

    ci_batch = simtests.batch_fixture("tank", range(0, 100))
    test_fixed_seed_batch_passes = simtests.batch_passes
    test_same_seed_same_trace_hash = simtests.same_trace_test("tank", (7,))

and keeps its protocol's own assertions (probes, transitions, planted bugs),
using :func:`probe_counts` and :func:`seen_transitions` on the batch.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from refwire.sim.faults import Faults
from refwire.sim.runner import SimResult, run_seed

REGRESSIONS = Path(__file__).parent / "regressions"


def batch_fixture(protocol: str, seeds: Iterable[int]) -> Any:
    """A module-scoped fixture: ``protocol`` run once per seed of the CI batch."""
    seeds = tuple(seeds)

    @pytest.fixture(scope="module")
    def ci_batch() -> list[SimResult]:
        return [run_seed(protocol, s) for s in seeds]

    return ci_batch


def batch_passes(ci_batch: list[SimResult]) -> None:
    """Every seed of the CI batch passes; a failure prints its replay command."""
    failures = [f"{r.failure_kind} {r.detail}\n  replay: {r.replay()}" for r in ci_batch if not r.ok]
    assert not failures, "\n".join(failures)


def probe_counts(batch: list[SimResult]) -> Counter[str]:
    """The batch's non-zero counters summed (FDB's CODE_PROBE: which rare paths ran)."""
    probes: Counter[str] = Counter()
    for r in batch:
        probes.update({k: v for k, v in r.counts.items() if v})
    return probes


def seen_transitions(batch: list[SimResult]) -> set[str]:
    """Every ``role:state-input->state`` the batch's machines went through."""
    return {t for r in batch for t in r.transitions}


def same_trace_test(protocol: str, seeds: Iterable[int], *, distinct: int = 0) -> Callable[[], None]:
    """A test: each seed run twice gives the same trace hash and counters, and
    (with ``distinct``) seeds ``0..distinct-1`` give ``distinct`` different hashes."""
    seeds = tuple(seeds)

    def test() -> None:
        for seed in seeds:
            a, b = run_seed(protocol, seed), run_seed(protocol, seed)
            assert (a.trace_hash, a.counts) == (b.trace_hash, b.counts), seed
        if distinct:
            assert len({run_seed(protocol, s).trace_hash for s in range(distinct)}) == distinct

    return test


def regression_test(protocol_dir: str) -> Callable[[dict[str, Any]], None]:
    """A test parametrized by ``regressions/<protocol_dir>/*.json``: each frozen case
    still ends as it says (``"pass"`` or its failure kind)."""
    cases = [pytest.param(json.loads(p.read_text()), id=p.stem) for p in sorted((REGRESSIONS / protocol_dir).glob("*.json"))]

    @pytest.mark.parametrize("case", cases)
    def test(case: dict[str, Any]) -> None:
        knobs = case["knobs"] or {}
        faults = Faults.from_dict(knobs["faults"]) if "faults" in knobs else None
        r = run_seed(case["protocol"], case["seed"], faults=faults, workload=knobs.get("workload"))
        got = "pass" if r.ok else r.failure_kind
        assert got == case["expect"], f"{case['name']}: {r.detail}\n  replay: {r.replay()}"

    return test


def long_sweep_test(protocol: str) -> Callable[[pytest.FixtureRequest], None]:
    """The opt-in campaign: ``pytest tests/sim --sim-seeds 5000 [--sim-first-seed S]``."""

    def test(request: pytest.FixtureRequest) -> None:
        n = request.config.getoption("--sim-seeds")
        if not n:
            pytest.skip("long sweep is opt-in (--sim-seeds N)")
        first = request.config.getoption("--sim-first-seed")
        failures = [r for r in (run_seed(protocol, s) for s in range(first, first + n)) if not r.ok]
        assert not failures, "\n".join(f"{r.failure_kind}: {r.replay()}" for r in failures)

    return test
