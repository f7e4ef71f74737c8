"""Seastar RPC under the deterministic simulator: the fixed CI batch, coverage
probes, the determinism canary and an opt-in long sweep (sim/scenarios/seastar_rpc.py;
the shared parts are in simtests.py)."""

from __future__ import annotations

import simtests

from refwire.sim.faults import Faults
from refwire.sim.runner import SimResult, run_seed

ci_batch = simtests.batch_fixture("seastar-rpc", range(0, 60))
test_fixed_seed_batch_passes = simtests.batch_passes


def test_batch_reaches_the_rare_paths(ci_batch: list[SimResult]) -> None:
    probes = simtests.probe_counts(ci_batch)
    for needed in ("timeouts", "conn_errors", "one_way", "stream_echoes", "streams_abandoned", "client_stray",
                   "server_dropped_expired", "client_reconnects", "remote_errors"):
        assert probes[needed] > 0, f"{needed} never happened in the CI batch"
    for needed in ("net.resets", "net.stalls", "net.trickles", "net.refused"):
        assert any(k.startswith(needed) for k in probes), f"{needed} never fired"


def test_batch_reaches_the_machine_transitions(ci_batch: list[SimResult]) -> None:
    """The transitions our own client and server can drive each other through.  The
    others (oversized requests, no-ops, rejected offers, protocol errors) are walked
    by the machine, vector and trio tests."""
    seen = simtests.seen_transitions(ci_batch)
    must = [
        "server:negotiating-negotiation->deciding", "server:deciding-accept->ready", "server:deciding-accept-stream->streaming",
        "server:ready-request->ready", "server:ready-eof->closed", "server:ready-reset->closed",
        "server:streaming-stream-message->streaming", "server:streaming-stream-end->streaming", "server:streaming-eof->closed",
        "client:negotiating-negotiated->ready", "client:negotiating-negotiated-stream->streaming",
        "client:ready-response->ready", "client:ready-reset->closed",
        "client:streaming-stream-message->streaming", "client:streaming-stream-end->streaming",
    ]
    missing = [t for t in must if t not in seen]
    assert not missing, f"never reached: {missing}; seen {sorted(seen)}"


test_same_seed_same_trace_hash = simtests.same_trace_test("seastar-rpc", (3, 17), distinct=4)


def test_no_faults_no_timeouts_everything_answers() -> None:
    r = run_seed("seastar-rpc", 5, faults=Faults.none(), workload={"timeouts": [10.0], "max_sleep_ms": 0})
    assert r.ok, r.detail
    assert r.counts["conn_errors"] == 0 and r.counts["timeouts"] == 0


test_long_sweep = simtests.long_sweep_test("seastar-rpc")


def test_hostile_peers_are_closed_and_the_clients_unaffected() -> None:
    """Two hostile peers (a bad magic, a negotiation frame over the limit, one cut by EOF, a silent
    client the negotiation timeout closes): each is closed in time, every call still completes once."""
    r = run_seed("seastar-rpc", 4, workload={"hostiles": 2})
    assert r.ok, r.detail
    assert r.counts["hostiles_closed"] == 2
test_frozen_regression = simtests.regression_test("seastar-rpc")
