"""Pravega under the deterministic simulator: the fixed CI batch, rare-path
probes, determinism, the checker and shrinker canary, frozen regressions (the
shared parts are in simtests.py)."""

from __future__ import annotations

import simtests

from refwire.sim.faults import Faults
from refwire.sim.runner import SimResult, run_seed, shrink

ci_batch = simtests.batch_fixture("pravega", range(0, 40))
test_fixed_seed_batch_passes = simtests.batch_passes


def test_batch_reaches_the_rare_paths(ci_batch: list[SimResult]) -> None:
    probes = simtests.probe_counts(ci_batch)
    assert probes["server_restarts"] > 0
    assert probes["writer_reconnects"] > 0
    assert probes["read_bytes"] > 0
    assert probes["server_syncs"] > 0
    styles = {s for r in ci_batch for s in r.workload["styles"][: r.workload["writers"]]}
    assert styles == {"rust", "java"}


def test_batch_reaches_the_server_transitions(ci_batch: list[SimResult]) -> None:
    seen = simtests.seen_transitions(ci_batch)
    for needed in (
        "server:open-setup->open",
        "server:open-block->in-block",
        "server:in-block-block-end->open",
        "server:open-block-end->open",
        "server:open-request->open",
        "server:open-hello->open",
    ):
        assert needed in seen, (needed, sorted(seen))


test_same_seed_same_trace_hash = simtests.same_trace_test("pravega", (3, 11), distinct=4)


def test_planted_bug_is_caught_and_shrunk() -> None:
    """Storage that lies about fsync loses acked events across a crash."""
    r = run_seed("pravega", 6, workload={"bug": "fsync-lies", "restarts": 1})
    assert r.outcome == "violation" and r.violation in ("ack-not-durable", "lost", "write-failed"), r.detail
    assert "refwire sim pravega --seed 6 --knobs" in r.replay()
    small = shrink(r)
    assert not small.ok
    assert small.workload["writers"] <= r.workload["writers"]
    assert len(Faults.from_dict(small.faults).enabled_kinds()) <= len(Faults.from_dict(r.faults).enabled_kinds())


test_frozen_regression = simtests.regression_test("pravega")
test_long_sweep = simtests.long_sweep_test("pravega")


def test_hostile_peers_are_closed_and_the_writers_unaffected() -> None:
    """Two hostile peers (an unknown type, a negative length, a top-level Event, an append without
    SetupAppend, a frame cut by EOF): each is closed in time, the writers and readers unaffected."""
    r = run_seed("pravega", 2, workload={"hostiles": 2})
    assert r.ok, r.detail
    assert r.counts["hostiles_closed"] == 2
