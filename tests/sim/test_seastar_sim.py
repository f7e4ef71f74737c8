"""Seastar RPC under the deterministic simulator: the fixed CI batch, coverage
probes, the determinism canary and an opt-in long sweep (sim/scenarios/seastar_rpc.py)."""

from __future__ import annotations

from collections import Counter

import pytest
from refwire.sim.faults import Faults
from refwire.sim.runner import SimResult, run_seed

CI_SEEDS = range(0, 60)


@pytest.fixture(scope="module")
def ci_batch() -> list[SimResult]:
    return [run_seed("seastar-rpc", s) for s in CI_SEEDS]


def test_fixed_seed_batch_passes(ci_batch: list[SimResult]) -> None:
    failures = [f"{r.failure_kind} {r.detail}\n  replay: {r.replay()}" for r in ci_batch if not r.ok]
    assert not failures, "\n".join(failures)


def test_batch_reaches_the_rare_paths(ci_batch: list[SimResult]) -> None:
    probes: Counter[str] = Counter()
    for r in ci_batch:
        probes.update({k: v for k, v in r.counts.items() if v})
    for needed in ("timeouts", "conn_errors", "one_way", "stream_echoes", "streams_abandoned", "client_stray",
                   "server_dropped_expired", "client_reconnects", "remote_errors"):
        assert probes[needed] > 0, f"{needed} never happened in the CI batch"
    for needed in ("net.resets", "net.stalls", "net.trickles", "net.refused"):
        assert any(k.startswith(needed) for k in probes), f"{needed} never fired"


def test_batch_reaches_the_machine_transitions(ci_batch: list[SimResult]) -> None:
    """The transitions our own client and server can drive each other through.  The
    others (oversized requests, no-ops, rejected offers, protocol errors) are walked
    by the machine, vector and trio tests."""
    seen = {t for r in ci_batch for t in r.transitions}
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


def test_same_seed_same_trace_hash() -> None:
    for seed in (3, 17):
        a = run_seed("seastar-rpc", seed)
        b = run_seed("seastar-rpc", seed)
        assert a.trace_hash == b.trace_hash and a.counts == b.counts
    assert len({run_seed("seastar-rpc", s).trace_hash for s in range(4)}) == 4


def test_no_faults_no_timeouts_everything_answers() -> None:
    r = run_seed("seastar-rpc", 5, faults=Faults.none(), workload={"timeouts": [10.0], "max_sleep_ms": 0})
    assert r.ok, r.detail
    assert r.counts["conn_errors"] == 0 and r.counts["timeouts"] == 0


def test_long_sweep(request: pytest.FixtureRequest) -> None:
    """Opt-in campaign: pytest tests/sim --sim-seeds 5000."""
    n = request.config.getoption("--sim-seeds")
    if not n:
        pytest.skip("long sweep is opt-in (--sim-seeds N)")
    first = request.config.getoption("--sim-first-seed")
    failures = [r for r in (run_seed("seastar-rpc", s) for s in range(first, first + n)) if not r.ok]
    assert not failures, "\n".join(f"{r.failure_kind}: {r.replay()}" for r in failures)
