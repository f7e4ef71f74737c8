"""TANK under the deterministic simulator: the fixed CI batch, the determinism
canary, the rare paths the batch must reach, and the checker canary (the shared
parts are in simtests.py)."""

from __future__ import annotations

import pytest
import simtests
from refwire.sim.runner import SimResult, run_seed

from refwire.tank.storage import MemoryLog

ci_batch = simtests.batch_fixture("tank", range(0, 100))
test_fixed_seed_batch_passes = simtests.batch_passes


def test_batch_reaches_the_rare_paths(ci_batch: list[SimResult]) -> None:
    probes = simtests.probe_counts(ci_batch)
    for needed in (
        "broker_restarts",
        "uncertain_produces",
        "resends",
        "client_reconnects",
        "broker_woken",
        "broker_timeouts",
        "long_poll_hits",
    ):
        assert probes[needed] > 0, f"{needed} never happened"
    assert any(k.startswith("net.resets") for k in probes) and any(k.startswith("net.partial_reads") for k in probes)


test_same_seed_same_trace = simtests.same_trace_test("tank", (7,))


def test_checker_catches_a_broker_that_skips_a_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted bug: reads skip the entry that holds the requested sequence number."""
    real = MemoryLog.read

    def buggy(self: MemoryLog, seq: int, fetch_size: int) -> tuple[object, bytes]:
        i = self.index_of(seq)
        if i + 1 < len(self.entries) and len(self.entries) > 3:
            return real(self, self.entries[i + 1].first, fetch_size)
        return real(self, seq, fetch_size)

    monkeypatch.setattr(MemoryLog, "read", buggy)
    results = [run_seed("tank", s, workload={"bundle": 1, "messages": 30, "max_wait": 0.0}) for s in range(3)]
    assert any(r.outcome == "violation" and r.violation == "seq" for r in results), [r.failure_kind for r in results]
