"""The Pravega 2017 draft dialect under the deterministic simulator: the fixed
CI batch, rare paths, determinism, the checker and shrinker canary."""

from __future__ import annotations

from collections import Counter

import pytest
from refwire.sim.runner import SimResult, run_seed, shrink

PROTOCOL = "pravega-draft-2017"
CI_SEEDS = range(0, 60)


@pytest.fixture(scope="module")
def ci_batch() -> list[SimResult]:
    return [run_seed(PROTOCOL, s) for s in CI_SEEDS]


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
    seen = {t for r in ci_batch for t in r.transitions}
    for needed in (
        "server:open-setup->open",
        "server:open-begin->in-block",
        "server:in-block-partial->in-block",
        "server:in-block-keepalive->in-block",
        "server:in-block-end-trailer->trailer",
        "server:trailer-trailer-done->open",
        "server:in-block-end->open",
        "server:open-request->open",
    ):
        assert needed in seen, (needed, sorted(seen))


def test_same_seed_same_trace_hash() -> None:
    for seed in (2, 9):
        a, b = run_seed(PROTOCOL, seed), run_seed(PROTOCOL, seed)
        assert (a.trace_hash, a.counts) == (b.trace_hash, b.counts)


def test_planted_bug_is_caught_and_shrunk() -> None:
    """A store that forgets the ack level makes writers resend what is stored."""
    r = run_seed(PROTOCOL, 6, workload={"bug": "forget-level", "restarts": 1})
    assert r.outcome == "violation" and r.violation in ("client-protocol-error", "duplicate", "order"), r.detail
    small = shrink(r)
    assert not small.ok
    assert small.workload["writers"] <= r.workload["writers"]


def test_long_sweep(request: pytest.FixtureRequest) -> None:
    """Opt-in campaign: pytest tests/sim --sim-seeds 5000."""
    n = request.config.getoption("--sim-seeds")
    if not n:
        pytest.skip("long sweep is opt-in (--sim-seeds N)")
    first = request.config.getoption("--sim-first-seed")
    failures = [r for r in (run_seed(PROTOCOL, s) for s in range(first, first + n)) if not r.ok]
    assert not failures, "\n".join(f"{r.failure_kind}: {r.replay()}" for r in failures)
