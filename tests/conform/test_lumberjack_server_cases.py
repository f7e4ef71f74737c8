"""`refwire conform lumberjack --server`: the server cases against refwire's own
server (every one PASS), against refwire configured like go-lumber (the
profile is recognised), the reports, and the command's exit statuses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import trio
from junitparser import Error, Failure, JUnitXml, Skipped

from refwire.cli import main
from refwire.conform.cases.lumberjack import CATALOGUE
from refwire.conform.ids import seed_run_id
from refwire.conform.model import Verdict
from refwire.conform.report import write_reports
from refwire.conform.runner import RunConfig, RunResult, run_cases
from refwire.lumberjack.server import ServerConfig
from refwire.specs import load_vectors, vector_files

from .conftest import lumberjack_testee

pytestmark = pytest.mark.timeout(120)

FAST = [c for c in CATALOGUE.cases if "slow" not in c.tags]


def test_catalogue_is_well_formed() -> None:
    ids = [c.id for c in CATALOGUE.cases]
    assert len(ids) == len(set(ids)) and len({c.slug for c in CATALOGUE.cases}) == len(ids)
    servers = [c for c in CATALOGUE.cases if c.role == "server"]
    assert len(servers) >= 24
    known = {v["name"] for f in vector_files("lumberjack") for v in load_vectors("lumberjack", f)["vectors"]}
    spec = (Path(__file__).resolve().parents[2] / "specs" / "lumberjack" / "README.md").read_text()
    sections = set(re.findall(r"^#+ (\d+(?:\.\d+)?)\b", spec, re.M))
    for c in CATALOGUE.cases:
        assert re.fullmatch(r"lj\.[SC]\d+\.\d+", c.id), c.id
        assert set(c.vectors) <= known, (c.id, set(c.vectors) - known)
        for sec in re.findall(r"§(\d+(?:\.\d+)?)", c.requirement):
            assert sec in sections, (c.id, sec)
        assert c.expects and all(e.profiles <= set(CATALOGUE.profiles) | {"*"} for e in c.expects), c.id
        assert set(c.features) <= set(CATALOGUE.features), c.id


async def _run(
    config: ServerConfig | None = None, *, profile: str = "strict", sink: Path | None = None, **kw: object
) -> RunResult:
    async with lumberjack_testee(config, sink) as (host, port):
        cfg = RunConfig(host=host, port=port, agent="refwire", profile=profile, seed=11, sink=str(sink) if sink else None, jobs=4)
        return await run_cases(CATALOGUE, cfg, **kw)  # type: ignore[arg-type]


async def test_every_fast_server_case_passes_against_refwire(tmp_path: Path) -> None:
    run = await _run(sink=tmp_path / "sink.jsonl")
    verdicts = {r.case.id: r.verdict for r in run.results}
    bad = {r.case.id: (r.expected, r.observed, r.reason) for r in run.results if r.verdict not in (Verdict.PASS, Verdict.SKIPPED)}
    assert not bad
    assert {cid for cid, v in verdicts.items() if v is Verdict.SKIPPED} == {
        c.id for c in CATALOGUE.cases if "slow" in c.tags and c.role == "server"
    }
    by_id = {r.case.id: r for r in run.results}
    assert by_id["lj.S6.1"].close["by"] == "testee" and by_id["lj.S1.1"].close["by"] == "refwire"
    assert (
        by_id["lj.S5.3"].observation is not None and "sink: 2 of 2 delivered before the ack" in by_id["lj.S5.3"].observation.facts
    )


async def test_without_a_sink_the_delivery_case_is_unsupported_not_pass() -> None:
    run = await _run(include="lj.S5.3")
    assert [(r.case.id, r.verdict) for r in run.results] == [("lj.S5.3", Verdict.UNSUPPORTED)]


async def test_a_server_that_behaves_like_go_lumber_is_recognised() -> None:
    golumber = ServerConfig(ack_mode="count", answer_empty_window=False)
    strict = await _run(golumber, include="lj.S2.*,lj.S3.*")
    got = {r.case.id: (r.verdict, r.matched_profiles) for r in strict.results}
    assert got["lj.S3.1"] == (Verdict.NON_STRICT, ("go-lumber",))
    assert got["lj.S2.3"] == (Verdict.NON_STRICT, ("go-lumber",))
    assert got["lj.S2.2"][0] is Verdict.PASS  # 1..n windows: every profile agrees
    as_golumber = await _run(golumber, include="lj.S2.*,lj.S3.*", profile="go-lumber")
    assert all(r.verdict is Verdict.PASS for r in as_golumber.results), [
        (r.case.id, r.verdict, r.observed) for r in as_golumber.results
    ]


async def test_declared_features_are_unsupported_and_never_run() -> None:
    async with lumberjack_testee() as (host, port):
        cfg = RunConfig(host=host, port=port, seed=1, declared_off=frozenset({"v1"}))
        run = await run_cases(CATALOGUE, cfg, include="lj.S1.*,lj.S6.6")
    got = {r.case.id: r.verdict for r in run.results}
    assert got["lj.S1.2"] is Verdict.UNSUPPORTED and got["lj.S6.6"] is Verdict.UNSUPPORTED and got["lj.S1.1"] is Verdict.PASS
    assert next(r for r in run.results if r.case.id == "lj.S1.2").wire_log == []


async def test_the_same_seed_sends_the_same_bytes() -> None:
    async def tx(seed: int) -> list[list[str]]:
        async with lumberjack_testee() as (host, port):
            run = await run_cases(CATALOGUE, RunConfig(host=host, port=port, seed=seed), include="lj.S1.1,lj.S4.1,lj.S2.2")
        return [[e["hex"] for e in r.wire_log if e["kind"] == "tx"] for r in sorted(run.results, key=lambda r: r.case.id)]

    a, b, c = await tx(5), await tx(5), await tx(6)
    assert a == b and a != c


async def test_reports(tmp_path: Path) -> None:
    run = await _run(include="lj.S1.1,lj.S6.1,lj.S5.3")  # PASS, PASS, UNSUPPORTED
    written = write_reports(run, tmp_path, argv=["conform", "lumberjack"])
    index = json.loads((tmp_path / "index.json").read_text())
    cases = index["agents"]["refwire"]
    assert set(cases) == {"lj.S1.1", "lj.S6.1", "lj.S5.3"} and cases["lj.S6.1"]["verdict"] == "PASS"
    assert cases["lj.S6.1"]["close"]["by"] == "testee" and cases["lj.S1.1"]["replay"].endswith(
        f"--cases lj.S1.1 --seed 11 --run-id {seed_run_id(11)}"
    )
    record = json.loads((tmp_path / cases["lj.S6.1"]["reportfile"]).read_text())
    kinds = [e["kind"] for e in record["wire_log"]]
    assert "tx" in kinds and "action" in kinds and "rx-close" in kinds
    html = (tmp_path / "index.html").read_text()
    assert "lj.S6.1" in html and "refwire/lj.S6.1.html" in html
    assert not re.search(r"(src|href)=\"(https?:)?//", html)  # works from disk, no network
    page = (tmp_path / "refwire" / "lj.S6.1.html").read_text()
    assert "Expected" in page and "Observed" in page and "§2, §4" in page
    xml = JUnitXml.fromfile(str(tmp_path / "junit.xml"))
    tcs = {tc.name: tc for suite in xml for tc in suite}
    assert set(tcs) == {"lj.S1.1 v2-single-window", "lj.S6.1 bad-version-byte", "lj.S5.3 ack-after-delivery"}
    assert all(tc.classname.startswith("refwire.conform.lumberjack.lj.S") for tc in tcs.values())
    assert [type(r) for r in tcs["lj.S5.3 ack-after-delivery"].result] == [Skipped]
    assert not tcs["lj.S1.1 v2-single-window"].result
    assert tmp_path / "junit.xml" in written


async def test_a_failing_case_is_a_junit_failure(tmp_path: Path) -> None:
    run = await _run(ServerConfig(ack_mode="count"), include="lj.S3.5")
    assert run.results[0].verdict is Verdict.NON_STRICT
    run.results[0].verdict = Verdict.FAIL  # judged elsewhere; here: how a FAIL is written
    write_reports(run, tmp_path, formats=["junit"])
    (tc,) = [tc for suite in JUnitXml.fromfile(str(tmp_path / "junit.xml")) for tc in suite]
    (failure,) = tc.result
    assert isinstance(failure, Failure) and not isinstance(failure, Error)
    assert "Expected:" in (failure.text or "") and "Observed:" in (failure.text or "") and "Replay:" in (failure.text or "")


def _cli(argv: list[str]) -> int:
    return main(argv)


def test_cli_first_connection_refused_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert _cli(["conform", "lumberjack", "--server", f"127.0.0.1:{port}", "--out", str(tmp_path), "--seed", "1"]) == 2
    assert "could not open the first connection of the run" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--profile", "nope"], "--profile 'nope' is unknown"),
        (["--format", "pdf"], "unknown format(s) pdf"),
        ([], "say which server to test"),
    ],
)
def test_cli_bad_arguments_are_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    server = [] if not args else ["--server", "127.0.0.1:1"]
    assert _cli(["conform", "lumberjack", *server, *args]) == 2
    assert message in capsys.readouterr().err


def test_cli_declare_file_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "declare.toml"
    bad.write_text('unsupported = ["v1", "teleport"]\n')
    assert _cli(["conform", "lumberjack", "--server", "127.0.0.1:1", "--declare", str(bad)]) == 2
    assert "unknown feature(s) teleport" in capsys.readouterr().err


async def test_cli_run_exit_status_and_baseline(tmp_path: Path) -> None:
    async with lumberjack_testee(ServerConfig(ack_mode="count")) as (host, port):
        argv = ["conform", "lumberjack", "--server", f"{host}:{port}", "--cases", "lj.S1.1,lj.S3.1", "--seed", "3", "--quiet"]
        first = await trio.to_thread.run_sync(_cli, [*argv, "--out", str(tmp_path / "a")])
        strict = await trio.to_thread.run_sync(_cli, [*argv, "--out", str(tmp_path / "b"), "--strict"])
    assert first == 0  # NON-STRICT is allowed without --strict
    assert strict == 1
    index = json.loads((tmp_path / "a" / "index.json").read_text())
    assert index["agents"][f"{host}:{port}"]["lj.S3.1"]["verdict"] == "NON-STRICT"
    # a baseline where S3.1 passed: this run is a regression
    index["agents"][f"{host}:{port}"]["lj.S3.1"]["verdict"] = "PASS"
    (tmp_path / "base.json").write_text(json.dumps(index))
    async with lumberjack_testee(ServerConfig(ack_mode="count")) as (host2, port2):
        argv2 = [
            "conform",
            "lumberjack",
            "--server",
            f"{host2}:{port2}",
            "--agent",
            f"{host}:{port}",
            "--cases",
            "lj.S1.1,lj.S3.1",
            "--quiet",
        ]
        worse = await trio.to_thread.run_sync(
            _cli, [*argv2, "--out", str(tmp_path / "c"), "--baseline", str(tmp_path / "base.json")]
        )
    assert worse == 1


def test_cli_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(["conform", "list", "lumberjack", "--role", "server"]) == 0
    out = capsys.readouterr().out
    assert "lj.S4.4" in out and "zlib-bomb" in out
    assert _cli(["conform", "show", "zlib-bomb"]) == 0
    out = capsys.readouterr().out
    assert "lj.S4.4" in out and "specs/lumberjack/README.md §3.6, §4" in out
    assert _cli(["conform", "show", "lj.S99.9"]) == 2
