"""Lumberjack under the deterministic simulator: the fixed CI batch, the
determinism canary, the checker and shrinker canary, and frozen regressions
(the shared parts are in simtests.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import simtests

from refwire.sim.faults import FAULT_KINDS, Faults
from refwire.sim.runner import SimResult, run_seed, shrink

ci_batch = simtests.batch_fixture("lumberjack", range(0, 120))
test_fixed_seed_batch_passes = simtests.batch_passes


def test_batch_exercises_every_fault_kind_and_the_rollover(ci_batch: list[SimResult]) -> None:
    """FDB's CODE_PROBE idea: the batch must actually reach the rare paths."""
    probes = simtests.probe_counts(ci_batch)
    assert probes["wrap_batches"] > 0, "no batch crossed 2**32"
    assert probes["server_restarts"] > 0
    assert probes["client_reconnects"] > 0
    assert probes["client_keepalives"] > 0
    assert probes["duplicates"] > 0, "no resend ever produced a duplicate (at-least-once never exercised)"
    enabled = {k for r in ci_batch for k in Faults.from_dict(r.faults).enabled_kinds()}
    assert enabled == set(FAULT_KINDS), f"fault kinds never drawn: {set(FAULT_KINDS) - enabled}"
    net = {k for k in probes if k.startswith("net.")}
    for needed in ("net.resets", "net.stalls", "net.torn_writes", "net.refused"):
        assert any(k.startswith(needed) for k in net), f"{needed} never fired; saw {sorted(net)}"


def test_batch_reaches_every_server_transition(ci_batch: list[SimResult]) -> None:
    from refwire.lumberjack.connection import SERVER_TRANSITIONS

    seen = simtests.seen_transitions(ci_batch)
    # Our own client never sends an empty window, and always writes W before and
    # outside its C (the one shape every real server accepts), so these two are
    # covered by the codec tests and the timbersnake interop instead.
    unreachable_with_our_client = {("await-window", "W0"), ("await-window", "C")}
    for (state, inp), targets in SERVER_TRANSITIONS.items():
        if (state.value, inp) in unreachable_with_our_client:
            continue
        assert any(t.startswith(f"server:{state.value}-{inp}->") for t in seen), (state, inp, targets)


test_same_seed_same_trace_hash = simtests.same_trace_test("lumberjack", (7, 11, 42), distinct=5)


def test_same_hash_in_another_process_with_another_hash_seed() -> None:
    here = run_seed("lumberjack", 7).trace_hash
    env = {**os.environ, "PYTHONHASHSEED": "4242"}
    out = subprocess.run(
        [sys.executable, "-m", "refwire.cli", "sim", "lumberjack", "--seed", "7", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    row = json.loads(out.stdout.splitlines()[0])
    assert row["trace_hash"] == here


def test_planted_bug_is_caught_and_shrunk() -> None:
    r = run_seed("lumberjack", 3, workload={"bug": "ack-before-deliver"})
    assert r.failure_kind == "violation:ack-before-delivery"
    assert "refwire sim lumberjack --seed 3 --knobs" in r.replay()
    small = shrink(r)
    assert small.failure_kind == r.failure_kind
    assert small.workload["clients"] == 1 and small.workload["events"] <= 2
    assert not Faults.from_dict(small.faults).enabled_kinds()


test_frozen_regression = simtests.regression_test("lumberjack")
test_long_sweep = simtests.long_sweep_test("lumberjack")


def test_a_run_leaves_logging_as_it_found_it() -> None:
    import logging

    log = logging.getLogger("refwire")
    before = log.level
    run_seed("lumberjack", 1)
    assert log.level == before


@pytest.mark.parametrize("seed", [2, 5])
def test_hostile_peers_are_closed_and_the_clients_unaffected(seed: int) -> None:
    """Two hostile peers in the swarm (garbage, a bad version byte, an ack from the
    client, a frame cut by EOF, an empty window, a C that does not inflate): each
    is closed in time, and the well-behaved clients' invariants hold beside them."""
    r = run_seed("lumberjack", seed, workload={"hostiles": 2})
    assert r.ok, r.detail
    assert r.counts["hostiles_closed"] == 2


def test_a_misfit_without_the_reply_it_is_owed_is_a_violation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The misfit judge is no rubber stamp: expecting an ack the server never sends (``A 4``
    for a window of 3) turns a passing run into ``misfit-wrong-reply``."""
    from refwire.lumberjack.frames import Ack
    from refwire.sim.scenarios import lumberjack

    honest = lumberjack.MISFITS["compressed-split"]
    wl = {"misfits": 1, "hostiles": 0, "rogues": 0, "restarts": 0, "app_delay": 0.0}
    assert run_seed("lumberjack", 3, workload=wl).ok
    monkeypatch.setitem(lumberjack.MISFITS, "compressed-split", honest._replace(expect=(Ack(1).encode(), Ack(4).encode())))
    r = run_seed("lumberjack", 3, workload=wl)
    assert r.violation == "misfit-wrong-reply", r.detail
