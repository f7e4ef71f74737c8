"""Server and client cases against refwire's own server and client inside the simulator: the same seed
gives the same trace hash, slow cases take no real time, and every case passes."""

from __future__ import annotations

import time
from typing import Any

import attrs
import pytest

from refwire.cli import main
from refwire.conform.cases.lumberjack import CATALOGUE, window
from refwire.conform.model import Verdict
from refwire.conform.runner import RunConfig
from refwire.conform.simulated import run_clients_in_simulator, run_in_simulator

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
    # the keepalive cases need --holds-batches (tests/conform/test_lumberjack_keepalives.py)
    assert {cid for cid, v in verdicts.items() if v is not Verdict.PASS} == {"lj.S5.1", "lj.S5.2", "lj.S5.4", "lj.S5.5"}
    assert verdicts["lj.S5.4"] is Verdict.UNSUPPORTED and verdicts["lj.S5.5"] is Verdict.UNSUPPORTED
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


def test_client_cases_in_the_simulator_same_seed_same_trace() -> None:
    t0 = time.perf_counter()
    a = run_clients_in_simulator(CATALOGUE, RunConfig(seed=5, role="client"), tags="slow")
    wall = time.perf_counter() - t0
    b = run_clients_in_simulator(CATALOGUE, RunConfig(seed=5, role="client"), tags="slow")
    c = run_clients_in_simulator(CATALOGUE, RunConfig(seed=6, role="client"), tags="slow")
    assert a.trace_hash == b.trace_hash != c.trace_hash
    verdicts = {r.case.id: r.verdict for r in a.result.results}
    assert set(verdicts) == {x.id for x in CATALOGUE.cases if x.role == "client"}
    # the 40 s keepalive case ran in virtual time; v1 and TLS cases cannot be judged here
    assert wall < 30
    assert {cid for cid, v in verdicts.items() if v is not Verdict.PASS} == {"lj.C2.3", "lj.C5.1"}
    assert verdicts["lj.C2.3"] is Verdict.UNSUPPORTED and verdicts["lj.C5.1"] is Verdict.SKIPPED
    never_ack = next(r for r in a.result.results if r.case.id == "lj.C3.1")
    assert never_ack.exit_status == 0 and never_ack.close["connections"] == 2


def test_a_broken_client_fails_in_the_simulator() -> None:
    """A client that forgets the ack and exits 0 once it wrote its window:
    the delivery cases catch it, in the simulator too."""

    async def fire_and_forget(connect: Any, values: Any) -> int:
        stream = await connect()
        n = int(values["events"])
        await stream.send_all(window(range(1, n + 1)))
        await stream.aclose()
        return 0

    broken = attrs.evolve(CATALOGUE, sim_client=fire_and_forget)
    run = run_clients_in_simulator(broken, RunConfig(seed=5, role="client"), include="lj.C1.*,lj.C3.2")
    assert {r.case.id: r.verdict for r in run.result.results} == dict.fromkeys(("lj.C1.1", "lj.C1.2", "lj.C1.3", "lj.C3.2"), Verdict.FAIL)

    async def raises(connect: Any, values: Any) -> int:
        raise RuntimeError("boom")

    run = run_clients_in_simulator(attrs.evolve(CATALOGUE, sim_client=raises), RunConfig(seed=5, role="client"), include="lj.C1.1")
    (r,) = run.result.results
    assert r.verdict is Verdict.FAIL and r.exit_status == 1
    assert any("RuntimeError: boom" in e.get("text", "") for e in r.wire_log)


def test_cli_client_sim(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path)
    args = ["conform", "lumberjack", "--client", "--sim", "--seed", "9", "--quiet", "--cases", "lj.C1.*", "--out", out]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    second = capsys.readouterr().out
    hashes = [line for line in (first + second).splitlines() if line.startswith("trace hash")]
    assert len(hashes) == 2 and hashes[0] == hashes[1] and "3 PASS" in first
    assert main(["conform", "lumberjack", "--client", "--sim", "--exec", "true"]) == 2
    assert "leave out --server, --exec" in capsys.readouterr().err
