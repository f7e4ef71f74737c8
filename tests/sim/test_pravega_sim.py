"""Pravega under the deterministic simulator: the fixed CI batch, rare-path
probes, determinism, the checker and shrinker canary, frozen regressions."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from refwire.sim.faults import Faults
from refwire.sim.runner import SimResult, run_seed, shrink

REGRESSIONS = Path(__file__).parent / "regressions" / "pravega"
CI_SEEDS = range(0, 40)


@pytest.fixture(scope="module")
def ci_batch() -> list[SimResult]:
    return [run_seed("pravega", s) for s in CI_SEEDS]


def test_fixed_seed_batch_passes(ci_batch: list[SimResult]) -> None:
    failures = [f"{r.failure_kind} {r.detail}\n  replay: {r.replay()}" for r in ci_batch if not r.ok]
    assert not failures, "\n".join(failures)


def test_batch_reaches_the_rare_paths(ci_batch: list[SimResult]) -> None:
    probes: Counter[str] = Counter()
    for r in ci_batch:
        probes.update({k: v for k, v in r.counts.items() if v})
    assert probes["server_restarts"] > 0
    assert probes["writer_reconnects"] > 0
    assert probes["read_bytes"] > 0
    assert probes["server_syncs"] > 0
    styles = {s for r in ci_batch for s in r.workload["styles"][: r.workload["writers"]]}
    assert styles == {"rust", "java"}


def test_batch_reaches_the_server_transitions(ci_batch: list[SimResult]) -> None:
    seen = {t for r in ci_batch for t in r.transitions}
    for needed in (
        "server:open-setup->open",
        "server:open-block->in-block",
        "server:in-block-block-end->open",
        "server:open-block-end->open",
        "server:open-request->open",
        "server:open-hello->open",
    ):
        assert needed in seen, (needed, sorted(seen))


def test_same_seed_same_trace_hash() -> None:
    for seed in (3, 11):
        a = run_seed("pravega", seed)
        b = run_seed("pravega", seed)
        assert a.trace_hash == b.trace_hash
        assert a.counts == b.counts
    assert len({run_seed("pravega", s).trace_hash for s in range(4)}) == 4


def test_planted_bug_is_caught_and_shrunk() -> None:
    """Storage that lies about fsync loses acked events across a crash."""
    r = run_seed("pravega", 6, workload={"bug": "fsync-lies", "restarts": 1})
    assert r.outcome == "violation" and r.violation in ("ack-not-durable", "lost", "write-failed"), r.detail
    assert "refwire sim pravega --seed 6 --knobs" in r.replay()
    small = shrink(r)
    assert not small.ok
    assert small.workload["writers"] <= r.workload["writers"]
    assert len(Faults.from_dict(small.faults).enabled_kinds()) <= len(Faults.from_dict(r.faults).enabled_kinds())


def _regressions() -> list[Any]:
    return [pytest.param(json.loads(p.read_text()), id=p.stem) for p in sorted(REGRESSIONS.glob("*.json"))]


@pytest.mark.parametrize("case", _regressions())
def test_frozen_regression(case: dict[str, Any]) -> None:
    knobs = case["knobs"] or {}
    faults = Faults.from_dict(knobs["faults"]) if "faults" in knobs else None
    r = run_seed(case["protocol"], case["seed"], faults=faults, workload=knobs.get("workload"))
    got = "pass" if r.ok else r.failure_kind
    assert got == case["expect"], f"{case['name']}: {r.detail}\n  replay: {r.replay()}"


def test_long_sweep(request: pytest.FixtureRequest) -> None:
    """Opt-in campaign: pytest tests/sim --sim-seeds 5000."""
    n = request.config.getoption("--sim-seeds")
    if not n:
        pytest.skip("long sweep is opt-in (--sim-seeds N)")
    first = request.config.getoption("--sim-first-seed")
    failures = [r for r in (run_seed("pravega", s) for s in range(first, first + n)) if not r.ok]
    assert not failures, "\n".join(f"{r.failure_kind}: {r.replay()}" for r in failures)
