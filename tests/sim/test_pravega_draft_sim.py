"""The Pravega 2017 draft dialect under the deterministic simulator: the fixed
CI batch, rare paths, determinism, the checker and shrinker canary (the shared
parts are in simtests.py)."""

from __future__ import annotations

import simtests

from refwire.sim.runner import SimResult, run_seed, shrink

PROTOCOL = "pravega-draft-2017"

ci_batch = simtests.batch_fixture(PROTOCOL, range(0, 60))
test_fixed_seed_batch_passes = simtests.batch_passes


def test_batch_reaches_the_rare_paths(ci_batch: list[SimResult]) -> None:
    probes = simtests.probe_counts(ci_batch)
    assert probes["server_restarts"] > 0
    assert probes["writer_reconnects"] > 0
    assert probes["read_bytes"] > 0
    seen = simtests.seen_transitions(ci_batch)
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


test_same_seed_same_trace_hash = simtests.same_trace_test(PROTOCOL, (2, 9))


def test_planted_bug_is_caught_and_shrunk() -> None:
    """A store that forgets the ack level makes writers resend what is stored."""
    r = run_seed(PROTOCOL, 7, workload={"bug": "forget-level", "restarts": 1})
    assert r.outcome == "violation" and r.violation in ("client-protocol-error", "duplicate", "order"), r.detail
    small = shrink(r)
    assert not small.ok
    assert small.workload["writers"] <= r.workload["writers"]


test_long_sweep = simtests.long_sweep_test(PROTOCOL)


def test_lying_fsync_is_caught() -> None:
    """Storage that lies about fsync loses synced records in a crash (the planted bug Pravega's simulation has too)."""
    r = run_seed(PROTOCOL, 2, workload={"bug": "fsync-lies", "restarts": 2})
    assert r.outcome == "violation" and r.violation in ("lost", "ack-beyond-stored", "duplicate", "order"), r.detail


def test_hostile_peers_are_closed_and_the_writers_unaffected() -> None:
    """Two hostile peers (an unknown type, a negative length, a reply sent by a client, a Middle part
    without a Begin, a frame cut by EOF): each is closed in time, the writers and readers unaffected."""
    r = run_seed(PROTOCOL, 3, workload={"hostiles": 2})
    assert r.ok, r.detail
    assert r.counts["hostiles_closed"] == 2
