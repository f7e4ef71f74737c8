"""TANK under the deterministic simulator: the fixed CI batch, the determinism
canary, the rare paths the batch must reach, and the checker canary."""

from __future__ import annotations

from collections import Counter

import pytest
from refwire.sim.runner import SimResult, run_seed

from refwire.tank.storage import PartitionLog

CI_SEEDS = range(0, 100)


@pytest.fixture(scope="module")
def ci_batch() -> list[SimResult]:
    return [run_seed("tank", s) for s in CI_SEEDS]


def test_fixed_seed_batch_passes(ci_batch: list[SimResult]) -> None:
    failures = [f"{r.failure_kind} {r.detail}\n  replay: {r.replay()}" for r in ci_batch if not r.ok]
    assert not failures, "\n".join(failures)


def test_batch_reaches_the_rare_paths(ci_batch: list[SimResult]) -> None:
    probes: Counter[str] = Counter()
    for r in ci_batch:
        probes.update({k: v for k, v in r.counts.items() if v})
    for needed in ("broker_restarts", "uncertain_produces", "resends", "client_reconnects", "broker_woken", "broker_timeouts", "long_poll_hits"):
        assert probes[needed] > 0, f"{needed} never happened"
    assert any(k.startswith("net.resets") for k in probes) and any(k.startswith("net.partial_reads") for k in probes)


def test_same_seed_same_trace() -> None:
    a, b = run_seed("tank", 7), run_seed("tank", 7)
    assert a.trace_hash == b.trace_hash and a.counts == b.counts


def test_checker_catches_a_broker_that_skips_a_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted bug: reads skip the entry that holds the requested sequence number."""
    real = PartitionLog.read

    def buggy(self: PartitionLog, seq: int, fetch_size: int) -> tuple[object, bytes]:
        i = self.index_of(seq)
        if i + 1 < len(self.entries) and len(self.entries) > 3:
            return real(self, self.entries[i + 1].first, fetch_size)
        return real(self, seq, fetch_size)

    monkeypatch.setattr(PartitionLog, "read", buggy)
    results = [run_seed("tank", s, workload={"bundle": 1, "messages": 30, "max_wait": 0.0}) for s in range(3)]
    assert any(r.outcome == "violation" and r.violation == "seq" for r in results), [r.failure_kind for r in results]
