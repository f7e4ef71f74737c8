"""Keepalives (spec §3.4) of the real servers while their application holds a
batch: go-lumber's ``ljserver -ack-delay 7s``, Logstash's ``logstash-beats
--ack-delay-ms 7000`` and refwire's own ``refwire serve lumberjack --ack-delay 7``,
each put through ``refwire conform lumberjack --holds-batches 7``: the keepalive
cases lj.S5.4 (v2) and lj.S5.5 (v1), and lj.S1.1 and lj.S1.2, whose waits for
the ack last through the hold.

Every verdict is the one the peer's profile predicts (real_peers.assert_as_predicted)
and the one written here.  The runs wait real seconds, so they overlap: the
three servers at once, and within each the cases (``--jobs 4``; go-lumber's
ljserver acks its batches one after the other, so it gets a server per case).
About 30 s with a warm build cache.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from conftest import HELD_CASES as CASES
from conftest import UNDECLARED
from real_peers import TEST_TIMEOUT, PeerRun, Verdicts, assert_as_predicted

pytestmark = [pytest.mark.peers, pytest.mark.timeout(TEST_TIMEOUT)]

#: What each server gets under its own profile (the profile predicts the same).
EXPECTED: dict[str, dict[str, str]] = {
    # 2A 0 every 3 s on v2; none on v1 (its documented behaviour); the acks after 7 s
    "go-lumber": {"lj.S1.1": "PASS", "lj.S1.2": "PASS", "lj.S5.4": "PASS", "lj.S5.5": "PASS"},
    # 2A 0 every 5 s, on v1 too: its documented bug
    "logstash": {"lj.S1.1": "PASS", "lj.S1.2": "PASS", "lj.S5.4": "PASS", "lj.S5.5": "FAIL"},
    # refwire's defaults: A 0 with the connection's version after 5 s without writing
    "strict": dict.fromkeys(CASES, "PASS"),
}
PROFILE = {"go-lumber": "go-lumber", "logstash": "logstash", "refwire": "strict"}


@pytest.fixture(scope="module")
def held(held_runs: Mapping[str, PeerRun]) -> Mapping[str, Verdicts]:
    """Each server's verdicts (conftest.py's session runs, shared with the compatibility matrix)."""
    return {name: run.verdicts for name, run in held_runs.items()}


def _keepalives(verdicts: Verdicts, case: str) -> list[dict[str, Any]]:
    """The keepalives in ``case``'s record."""
    e = verdicts.entry(case)
    assert verdicts.out is not None
    record = json.loads((verdicts.out[case] / str(e["reportfile"])).read_text())
    return list(record["keepalives"])


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("peer", sorted(PROFILE))
def test_as_predicted(held: Mapping[str, Verdicts], peer: str, case: str) -> None:
    verdicts, profile = held[peer], PROFILE[peer]
    assert_as_predicted(verdicts, "lumberjack", case, profile)
    assert verdicts.verdict(case) == EXPECTED[profile][case], verdicts.describe(case)


def test_go_lumber_keepalives_are_v2_only(held: Mapping[str, Verdicts]) -> None:
    """2A 0 about every 3 s on v2 (two before the 7 s ack), nothing on v1."""
    v2 = _keepalives(held["go-lumber"], "lj.S5.4")
    assert v2 and {k["version"] for k in v2} == {"2"}, v2
    assert all(1.5 <= k["since_batch_s"] <= 6.9 for k in v2), v2
    assert _keepalives(held["go-lumber"], "lj.S5.5") == []
    # lj.S1.1 waited through the hold, the keepalives recorded on the way
    assert {k["version"] for k in _keepalives(held["go-lumber"], "lj.S1.1")} == {"2"}


def test_logstash_sends_v2_keepalives_on_v1(held: Mapping[str, Verdicts]) -> None:
    """Its documented bug shows: '2A' 0 on a v1 connection, about 5 s after the batch."""
    v1 = _keepalives(held["logstash"], "lj.S5.5")
    assert v1 and {(k["token"], k["version"]) for k in v1} == {("A 0", "2")}, v1
    assert 2.5 <= v1[0]["since_batch_s"] <= 6.5, v1
    assert "Logstash's documented bug" in str(held["logstash"].entry("lj.S5.5")["reason"])
    # lj.S1.2 still sees its v1 ack after the hold; the keepalive before it was '2A' too
    assert {k["version"] for k in _keepalives(held["logstash"], "lj.S1.2")} == {"2"}


def test_refwire_keepalives_carry_the_connections_version(held: Mapping[str, Verdicts]) -> None:
    assert {k["token"] for k in _keepalives(held["refwire"], "lj.S5.5")} == {"1A 0"}
    assert {k["token"] for k in _keepalives(held["refwire"], "lj.S5.4")} == {"A 0"}


def test_keepalives_restart_the_wait_for_an_ack(held: Mapping[str, Verdicts]) -> None:
    """Without --holds-batches, lj.S1.1 waits 3 s x the time scale (2: real_peers.CONFORM_ARGS)
    = 6 s for an ack that comes after 7 s; go-lumber's keepalives at 3 s and 6 s restart
    the wait (within the case's budget, 5 s x 2), so the ack is seen."""
    if held["go-lumber"].unavailable is not None:
        held["go-lumber"].entry("lj.S1.1")  # fails with the reason
    (verdicts,) = UNDECLARED.values()
    assert_as_predicted(verdicts, "lumberjack", "lj.S1.1", "go-lumber")
    assert verdicts.verdict("lj.S1.1") == "PASS", verdicts.describe("lj.S1.1")
    e = verdicts.entry("lj.S1.1")
    assert verdicts.out is not None
    record = json.loads((verdicts.out["lj.S1.1"] / str(e["reportfile"])).read_text())
    restarts = [x for x in record["wire_log"] if "keepalive: the wait restarts" in str(x.get("text"))]
    assert restarts and record["keepalives"], record["wire_log"]
