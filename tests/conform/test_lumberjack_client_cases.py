"""`refwire conform lumberjack --client`: the client cases against refwire's own
client (every fast case PASS), against deliberately broken clients (the cases
that must catch them FAIL), exit 127 (UNSUPPORTED), an --exec that cannot
start (exit 2) and manual mode (the port lines)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from support.conform_clients import PEER, command
from support.conform_clients import run_lumberjack_client_cases as _run

from refwire.cli import main
from refwire.conform.cases.lumberjack import CATALOGUE
from refwire.conform.clients import ClientSetup, expand_command, run_client_case
from refwire.conform.model import Verdict
from refwire.conform.runner import RunConfig, RunResult

pytestmark = pytest.mark.timeout(120)

CLIENT_CASES = [c for c in CATALOGUE.cases if c.role == "client"]
FAST = [c for c in CLIENT_CASES if "slow" not in c.tags]


def verdicts(run: RunResult) -> dict[str, Verdict]:
    return {r.case.id: r.verdict for r in run.results}


def test_client_catalogue() -> None:
    assert len(CLIENT_CASES) >= 9
    for c in CLIENT_CASES:
        assert c.events > 0 and c.id.startswith("lj.C"), c.id


def test_expand_command_quotes_only_inside_shell_words() -> None:
    vals = {"host": "127.0.0.1", "port": "1", "case": "lj.C1.1", "slug": "s", "events": "3", "seed": "9", "tls_ca": ""}
    assert expand_command("client {host} {port} --ca={tls_ca}", vals) == ["client", "127.0.0.1", "1", "--ca="]
    assert expand_command("sh -c 'client {host} {tls_ca}'", vals) == ["sh", "-c", "client 127.0.0.1 ''"]


async def test_every_fast_client_case_passes_against_refwire() -> None:
    run = await _run(command())
    bad = {r.case.id: (r.expected, r.observed, r.reason) for r in run.results if r.verdict not in (Verdict.PASS, Verdict.SKIPPED)}
    # v2-keepalive-on-v1 needs a v1 client: UNSUPPORTED for this v2 one.
    assert set(bad) == {"lj.C2.3"} and verdicts(run)["lj.C2.3"] is Verdict.UNSUPPORTED, bad
    assert {cid for cid, v in verdicts(run).items() if v is Verdict.SKIPPED} == {c.id for c in CLIENT_CASES if "slow" in c.tags}
    r = next(r for r in run.results if r.case.id == "lj.C3.2")
    assert r.exit_status == 0 and r.close["connections"] == 2
    assert any(e.get("kind") == "process" and "all 4 acked" in e["stdout"] for e in r.wire_log)


async def test_v1_client_and_never_ack_with_a_short_ack_timeout() -> None:
    run = await _run(command("--ack-timeout 1"), include="lj.C3.1")
    assert verdicts(run) == {"lj.C3.1": Verdict.PASS}, [(r.observed, r.reason) for r in run.results]


async def test_a_v1_client_takes_logstashs_v2_keepalive() -> None:
    run = await _run(command("--v1"), include="lj.C2.3,lj.C4.3")
    assert verdicts(run) == {"lj.C2.3": Verdict.PASS, "lj.C4.3": Verdict.PASS}, [(r.observed, r.reason) for r in run.results]


async def test_a_client_that_never_reads_acks_fails() -> None:
    run = await _run(command("--mode no-acks"), include="lj.C1.2,lj.C1.3,lj.C2.1,lj.C4.1,lj.C4.3")
    got = verdicts(run)
    assert all(v is Verdict.FAIL for v in got.values()), [
        (r.case.id, r.observed) for r in run.results if r.verdict is not Verdict.FAIL
    ]
    r = run.results[0]
    assert r.observation is not None and any(f.startswith("claims success") for f in r.observation.facts)


async def test_a_client_that_resends_acked_events_fails() -> None:
    run = await _run(command("--mode resend-acked"), include="lj.C1.2,lj.C1.3")
    assert set(verdicts(run).values()) == {Verdict.FAIL}, [(r.observed, r.reason) for r in run.results]


async def test_a_running_counter_client_is_caught_by_count_acks() -> None:
    run = await _run(command("--sequence running --window 2"), include="lj.C1.1")
    # refwire's client reads a count ack naming no event of its window as a
    # protocol error: it closes at once and finally reports the failure.
    assert verdicts(run) == {"lj.C1.1": Verdict.INFO}, [(r.observed, r.reason) for r in run.results]


async def test_exit_127_is_unsupported() -> None:
    run = await _run(command("--mode unsupported"), include="lj.C1.1")
    assert verdicts(run) == {"lj.C1.1": Verdict.UNSUPPORTED}


def test_exec_that_cannot_start_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(
        [
            "conform",
            "lumberjack",
            "--client",
            "--exec",
            "/nonexistent/client {port}",
            "--cases",
            "lj.C1.1",
            "--out",
            str(tmp_path),
        ]
    )
    assert status == 2
    doc = json.loads((tmp_path / "index.json").read_text())
    entry = next(iter(doc["agents"].values()))["lj.C1.1"]
    assert entry["verdict"] == "ERROR" and "cannot start" in entry["reason"]


def test_cli_exec_run_passes(tmp_path: Path) -> None:
    status = main(
        [
            "conform",
            "lumberjack",
            "--client",
            "--exec",
            command(),
            "--cases",
            "lj.C1.2,lj.C4.4",
            "--out",
            str(tmp_path),
            "--seed",
            "3",
        ]
    )
    assert status == 0
    doc = json.loads((tmp_path / "index.json").read_text())
    assert doc["run"]["role"] == "client"


def test_manual_mode_prints_port_lines(tmp_path: Path) -> None:
    """Without --exec: one line per case, all listening at once; a client
    connected by hand (here: the peer script) is judged."""
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("refwire")), "conform", "lumberjack", "--client", "--cases", "lj.C1.1,lj.C1.3",
         "--timeout", "20", "--out", str(tmp_path), "--quiet"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # the banner
        lines = [proc.stdout.readline().split() for _ in range(2)]
        assert [ln[0] for ln in lines] == ["lj.C1.1", "lj.C1.3"] and all(ln[3].startswith("events=") for ln in lines)
        for ln in lines:
            host, port = ln[2].rsplit(":", 1)
            subprocess.run([sys.executable, str(PEER), host, port, ln[3].split("=")[1]], timeout=30, check=True)
        assert proc.wait(timeout=40) == 0
    finally:
        proc.kill()
        proc.wait()
    doc = json.loads((tmp_path / "index.json").read_text())
    assert {k: v["verdict"] for k, v in next(iter(doc["agents"].values())).items()} == {"lj.C1.1": "PASS", "lj.C1.3": "PASS"}


async def test_the_testee_is_killed_at_the_budget_end() -> None:
    cfg = RunConfig(role="client", agent="sleeper", seed=1, timeout=1.5)
    setup = ClientSetup(exec_template="sleep 60")
    with trio.fail_after(10):
        r = await run_client_case(CATALOGUE.case("lj.C1.1"), CATALOGUE, cfg, setup, 0)
    assert r.verdict is Verdict.FAIL and r.observation is not None
    assert any(f.startswith("exit killed") for f in r.observation.facts)
