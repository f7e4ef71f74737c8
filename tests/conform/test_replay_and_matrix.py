"""``refwire conform replay`` and ``refwire conform matrix``.

Replay re-runs one recorded case with the recorded run seed (so refwire sends
the same bytes) and diffs what the testee did: 0 when nothing diverged, 1 with
the first divergence.  Matrix merges several runs (agents) into one
index.json and index.html.  The cases are specs/lumberjack/README.md §3.3's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from refwire.cli import main
from refwire.lumberjack.server import ServerConfig

from .conftest import lumberjack_testee

pytestmark = pytest.mark.timeout(60)

CASES = "lj.S1.1,lj.S3.1,lj.S6.1"


async def _conform(host: str, port: int, out: Path, agent: str) -> int:
    argv = ["conform", "lumberjack", "--server", f"{host}:{port}", "--agent", agent, "--cases", CASES]
    argv += ["--seed", "5", "--out", str(out), "--quiet", "--time-scale", "0.5"]
    status: int = await trio.to_thread.run_sync(main, argv)
    return status


async def _replay(record: Path, *extra: str) -> int:
    status: int = await trio.to_thread.run_sync(main, ["conform", "replay", str(record), "--time-scale", "0.5", *extra])
    return status


async def test_replay_same_server_is_exit_0_and_a_different_one_shows_the_first_divergence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "run" / "mine" / "lj.S3.1.json"
    async with lumberjack_testee() as (host, port):
        assert await _conform(host, port, tmp_path / "run", "mine") == 0
        capsys.readouterr()
        # the same server, named by the record's replay command
        assert await _replay(record) == 0
        out = capsys.readouterr().out
        assert "lj.S3.1 ack-value-running-seq: recorded PASS, now PASS" in out
        assert "same bytes sent, same frames and close observed" in out
    # a server that acks the count, not the last seq (go-lumber's way)
    async with lumberjack_testee(ServerConfig(ack_mode="count")) as (host, port):
        assert await _replay(record, "--server", f"{host}:{port}") == 1
        out = capsys.readouterr().out
    assert "recorded PASS, now NON-STRICT" in out
    assert "differs from the recorded one" not in out  # the same seed: the same script (run ids masked)
    assert "first divergence at testee step 0: recorded 'A 102', now 'A 2'" in out
    assert "verdict: recorded PASS, now NON-STRICT" in out


async def test_replay_of_something_that_is_not_a_record_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    assert await _replay(bad) == 2
    assert "not a case record" in capsys.readouterr().err


async def test_matrix_merges_two_agents_into_one_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with lumberjack_testee() as (host, port):
        assert await _conform(host, port, tmp_path / "a", "strict-server") == 0
    async with lumberjack_testee(ServerConfig(ack_mode="count")) as (host, port):
        assert await _conform(host, port, tmp_path / "b", "counting-server") == 0  # NON-STRICT only
    out = tmp_path / "m"
    status = await trio.to_thread.run_sync(
        main, ["conform", "matrix", str(tmp_path / "a" / "index.json"), str(tmp_path / "b" / "index.json"), "--out", str(out)]
    )
    assert status == 0
    assert "2 agents, 3 cases" in capsys.readouterr().out
    index = json.loads((out / "index.json").read_text())
    agents = index["agents"]
    assert set(agents) == {"strict-server", "counting-server"}
    assert agents["strict-server"]["lj.S3.1"]["verdict"] == "PASS"
    assert agents["counting-server"]["lj.S3.1"]["verdict"] == "NON-STRICT"
    assert len(index["run"]["merged_runs"]) == 2
    for cases in agents.values():
        for entry in cases.values():
            assert not Path(entry["reportfile"]).is_absolute()  # relative to the matrix: the folders move together
            assert (out / entry["reportfile"]).is_file()  # the case records stay where each run wrote them
    html = (out / "index.html").read_text()
    assert "strict-server" in html and "counting-server" in html and "lj.S3.1" in html and "NON-STRICT" in html


def test_matrix_of_a_file_that_is_not_an_index_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "index.json"
    bad.write_text("[]")
    assert main(["conform", "matrix", str(bad), "--out", str(tmp_path / "m")]) == 2
    assert "not an index.json written by refwire conform" in capsys.readouterr().err


def test_matrix_of_every_protocol_is_one_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every protocol with cases, run inside the simulator (server cases; Pravega's client
    cases too), merged by ``refwire conform matrix`` into one page with a row per protocol and role."""
    from refwire.protocols import names

    protocols = names("conform")
    assert set(protocols) == {"lumberjack", "pravega", "pravega-draft-2017", "tank", "seastar-rpc"}
    runs = []
    for p in protocols:
        out = tmp_path / p
        assert main(["conform", p, "--sim", "--seed", "1", "--agent", f"refwire-{p}", "--out", str(out), "--quiet"]) == 0
        runs.append(str(out / "index.json"))
    client = tmp_path / "pravega-clients"
    assert (
        main(
            [
                "conform",
                "pravega",
                "--client",
                "--sim",
                "--seed",
                "1",
                "--agent",
                "refwire-pravega",
                "--out",
                str(client),
                "--quiet",
            ]
        )
        == 0
    )
    runs.append(str(client / "index.json"))
    capsys.readouterr()
    assert main(["conform", "matrix", *runs, "--out", str(tmp_path / "all")]) == 0
    merged = json.loads((tmp_path / "all" / "index.json").read_text())
    assert set(merged["run"]["protocols_by_prefix"].values()) == set(protocols)
    page = (tmp_path / "all" / "index.html").read_text()
    for p in protocols:
        assert f"<td>{p}</td><td>server</td>" in page
    assert "<td>pravega</td><td>client</td>" in page
    assert "FAIL" not in page and "ERROR" not in page


def test_a_replay_keeps_the_runs_declared_batch_hold() -> None:
    """A record of a run with --holds-batches replays with the same hold (else the
    keepalive cases would be UNSUPPORTED and every ack wait too short)."""
    from refwire.conform.replay import recorded_hold

    assert recorded_hold(["refwire", "conform", "lumberjack", "--server", "h:1", "--holds-batches", "7"]) == 7.0
    assert recorded_hold(["refwire", "conform", "lumberjack", "--server", "h:1"]) is None
    assert recorded_hold(["refwire", "--holds-batches"]) is None
    with pytest.raises(ValueError, match="--holds-batches 'x'"):
        recorded_hold(["--holds-batches", "x"])
