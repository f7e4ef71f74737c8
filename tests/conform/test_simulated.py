"""Server cases against refwire's own server inside the simulator: the same seed
gives the same trace hash, slow cases take no real time, and every case passes."""

from __future__ import annotations

import time

import pytest

from refwire.cli import main
from refwire.conform.model import Verdict
from refwire.conform.runner import RunConfig
from refwire.conform.simulated import run_in_simulator
from refwire.lumberjack.conform import CATALOGUE

pytestmark = pytest.mark.timeout(120)


def test_same_seed_same_trace_and_every_case_judged() -> None:
    t0 = time.perf_counter()
    a = run_in_simulator(CATALOGUE, RunConfig(seed=5), tags="slow")
    wall = time.perf_counter() - t0
    b = run_in_simulator(CATALOGUE, RunConfig(seed=5), tags="slow")
    c = run_in_simulator(CATALOGUE, RunConfig(seed=6), tags="slow")
    assert a.trace_hash == b.trace_hash != c.trace_hash
    verdicts = {r.case.id: r.verdict for r in a.result.results}
    assert len(verdicts) == len([x for x in CATALOGUE.cases if x.role == "server"])
    # the slow cases (35 s and 65 s of waiting) ran in virtual time
    assert verdicts["lj.S5.1"] is Verdict.INFO and verdicts["lj.S5.2"] is Verdict.INFO and wall < 30
    assert {cid for cid, v in verdicts.items() if v is not Verdict.PASS} == {"lj.S5.1", "lj.S5.2"}
    assert next(r for r in a.result.results if r.case.id == "lj.S5.1").close["by"] == "testee"


def test_cli_sim(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path)
    assert main(["conform", "lumberjack", "--sim", "--seed", "9", "--quiet", "--cases", "lj.S1.*,lj.S6.1", "--out", out]) == 0
    first = capsys.readouterr().out
    assert main(["conform", "lumberjack", "--sim", "--seed", "9", "--quiet", "--cases", "lj.S1.*,lj.S6.1", "--out", out]) == 0
    second = capsys.readouterr().out
    hashes = [line for line in (first + second).splitlines() if line.startswith("trace hash")]
    assert len(hashes) == 2 and hashes[0] == hashes[1]
    assert "5 PASS" in first
    assert main(["conform", "lumberjack", "--sim", "--server", "127.0.0.1:1"]) == 2
