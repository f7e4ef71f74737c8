"""Messages that explain: what a FAIL says, the expectation
notation's legend, code in HTML, the matrix's links and runs, a testee that
died, case-id order, refwire's own reset, a testee client's stderr, and
``refwire conform list`` into a pipe closed early.

Every result here is built by hand: no testee, no network, no clock.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from refwire.cli import main
from refwire.conform.console import print_line, summary
from refwire.conform.model import Case, CaseResult, Observation, Verdict, describe_observed, expect, judge
from refwire.conform.report import LEGEND, merge_indexes, write_html, write_junit, write_reports
from refwire.conform.runner import RunConfig, RunResult

PASS, FAIL, INFO, ERROR = Verdict.PASS, Verdict.FAIL, Verdict.INFO, Verdict.ERROR
ROOT = Path(__file__).resolve().parents[2]


async def _noop(_: object) -> None:
    return None


def _case(id: str, expects: tuple[Any, ...] = (), title: str = "t", role: str = "server", procedure: str = "p") -> Case:
    return Case(
        id=id,
        slug=f"slug-{id.replace('.', '-')}",
        title=title,
        role=role,
        requirement="specs/lumberjack/README.md §4",
        procedure_text=procedure,
        expects=expects or (expect(PASS, "strict", [], ("FIN", "RST")),),
        run=_noop,
    )


def _result(case: Case, verdict: Verdict = PASS, *, agent: str = "me", **kw: Any) -> CaseResult:
    return CaseResult(case=case, agent=agent, verdict=verdict, case_seed=1, profile="strict", run_seed=7, **kw)


def _run(results: list[CaseResult], *, agent: str = "me", seed: int = 7, role: str = "server") -> RunResult:
    run = RunResult("lumberjack", RunConfig(agent=agent, seed=seed, role=role))
    run.results.extend(results)
    return run


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=400, color_system=None, highlight=False, soft_wrap=True), buf


# --------------------------------------------------------------------------- 1. why a FAIL failed


@pytest.mark.parametrize(
    ("events", "close", "want", "obs_events", "obs_close", "why"),
    [
        ([], ("FIN", "RST"), None, (), "open", "kept the connection open until the case stopped waiting; expected: closed (FIN or RST)"),
        (["A 1"], "open", None, ("A 1",), "FIN", "closed the connection (FIN); expected: kept open"),
        (["A 1"], "open", None, ("A 1",), "RST", "reset the connection (RST); expected: kept open"),
        (["A 1"], "open", None, ("A 3",), "open", "sent `A 3` first; expected: `A 1`"),
        (["A 1", "A 2"], "open", None, ("A 1",), "open", "sent nothing after `A 1`; expected: `A 2`"),
        (["A 1"], "open", None, (), "open", "sent nothing; expected: `A 1`"),
        (["A 1"], "open", None, ("A 1", "A 1"), "open", "sent `A 1` after `A 1`; expected: nothing more"),
        ([], "open", None, ("A 0",), "open", "sent `A 0`; expected: nothing"),
        (["A *", "...", "A 9"], "open", None, ("A 1", "A 2"), "open", "sent nothing after `A 2`; expected: `A 9`"),
        ([], "open", "exit [0u]*", (), "open", "`exit 1`; expected: `exit [0u]*`"),
    ],
)
def test_a_fail_names_the_first_thing_that_differed(
    events: list[str], close: Any, want: str | None, obs_events: tuple[str, ...], obs_close: str, why: str
) -> None:
    facts = [want] if want else []
    case = _case("lj.S6.2", (expect(PASS, "strict", events, close, facts=facts),))
    obs = Observation(events=obs_events, close=obs_close, facts=("exit 1",) if want else ())
    verdict, _, _, reason = judge(case, obs, "strict")
    assert verdict is FAIL
    assert reason == why


def test_the_closest_expectation_is_the_one_agreeing_most_and_the_reason_says_which() -> None:
    case = _case(
        "lj.C3.2",
        (
            expect(PASS, "strict", ["..."], facts=["all 4 events acked", "no acked event resent", "exit [0u]*"]),
            expect(PASS, "strict", ["..."], facts=["all 4 events acked", "resent an acked event", "exit [0u]*"]),
            expect(FAIL, "strict", ["..."], facts=["kept the connection open after the bad frame"]),  # a bug: never the aim
        ),
    )
    obs = Observation(events=("W 4",), close="open", facts=("exit 0", "2 of 4 events acked", "resent an acked event"))
    verdict, _, _, reason = judge(case, obs, "strict")
    assert verdict is FAIL
    # the second PASS agrees on two facts, the first on one: the second is the closest;
    # the observed fact nearest the missing one is named, not the whole list
    assert reason == "`2 of 4 events acked`; expected: `all 4 events acked` (closest: the PASS outcome for strict)"
    assert judge(case, obs, "strict")[3] == reason  # deterministic


def test_a_profile_documenting_no_pass_is_explained_against_its_other_outcomes() -> None:
    case = _case("lj.S1.1", (expect(PASS, "strict", ["A 1"], "open"), expect(INFO, "odd", [], "FIN")))
    assert judge(case, Observation(events=(), close="RST"), "odd")[3] == "reset the connection (RST); expected: closed (FIN)"


# --------------------------------------------------------------------------- 7. refwire's own reset


def test_a_connection_refwire_reset_reads_as_refwire_s_reset_not_as_open() -> None:
    obs = Observation(events=("W 4",), close="open", facts=("exit 1",))
    assert describe_observed(obs, {"by": "refwire", "how": "RST"}) == "[W 4, exit 1] then open until refwire reset it"
    assert describe_observed(obs, {"by": "refwire", "how": "FIN"}) == "[W 4, exit 1] then open"  # the end of every case
    assert describe_observed(Observation(close="RST"), {"by": "testee", "how": "RST"}) == "[] then RST"
    r = _result(_case("lj.C3.2", role="client"), FAIL, observation=obs, observed=obs.describe(), close={"by": "refwire", "how": "RST"})
    assert r.to_json()["observed"] == "[W 4, exit 1] then open until refwire reset it"
    console, buf = _console()
    summary(console, _run([r], role="client"), Path("out"), strict=False, baseline=None)
    assert "Observed:    [W 4, exit 1] then open until refwire reset it" in buf.getvalue()


# --------------------------------------------------------------------------- 2, 3. legend and code in HTML


def test_case_pages_render_backticks_as_code_escaped_and_carry_the_legend(tmp_path: Path) -> None:
    case = _case("lj.S6.8", title="An `A` frame <from> the client", procedure="Send `A 1` & wait.")
    r = _result(case, FAIL, reason="sent `A <3>` first; expected: `A 1`", observed="[A <3>] then open")
    write_reports(_run([r]), tmp_path, ["html"])
    page = (tmp_path / "me" / "lj.S6.8.html").read_text()
    assert "<h2>An <code>A</code> frame &lt;from&gt; the client</h2>" in page
    assert "Send <code>A 1</code> &amp; wait." in page
    assert "sent <code>A &lt;3&gt;</code> first; expected: <code>A 1</code>" in page
    assert "`" not in page.split("<details")[0]  # no raw backtick above the legend
    assert "How to read Expected and Observed" in page
    assert "<code>exit [0u]*</code> is <code>exit 0</code> or <code>exit unknown</code>" in page
    index = (tmp_path / "index.html").read_text()
    assert "<td>An <code>A</code> frame &lt;from&gt; the client</td>" in index


def test_the_conformance_guide_explains_the_notation() -> None:
    guide = (ROOT / "docs" / "guides" / "conform.rst").read_text()
    for term in ("``...``", "``exit [0u]*``", "``then FIN or RST or open``", "``open until refwire reset it``"):
        assert term in guide, term
    assert len(LEGEND) >= 5


# --------------------------------------------------------------------------- 4, 6. the matrix


def test_matrix_links_are_relative_and_each_run_shows_its_seed_and_run_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _run([_result(_case("lj.S6.10")), _result(_case("lj.S6.2"))], agent="one", seed=11)
    b = _run([_result(_case("lj.S6.10"), agent="two")], agent="two", seed=22)
    write_reports(a, tmp_path / "runs" / "a", ["json", "html"])
    write_reports(b, tmp_path / "runs" / "b", ["json", "html"])
    ib = tmp_path / "runs" / "b" / "index.json"
    doc = json.loads(ib.read_text())
    doc["run"]["run_id"] = "0badc0de"  # a run that records its run id
    ib.write_text(json.dumps(doc))
    ia = tmp_path / "runs" / "a" / "index.json"
    doc = json.loads(ia.read_text())
    doc["run"].pop("run_id", None)  # and one that does not
    ia.write_text(json.dumps(doc))
    assert main(["conform", "matrix", str(ia), str(ib), "--out", str(tmp_path / "m")]) == 0
    capsys.readouterr()
    html = (tmp_path / "m" / "index.html").read_text()
    assert 'href="../runs/a/one/lj.S6.10.html"' in html and 'href="../runs/b/two/lj.S6.10.html"' in html
    assert str(tmp_path) not in html  # nothing absolute: the tree can move
    rows = [line for line in html.splitlines() if line.startswith("<tr><td>") and "lumberjack" in line]
    assert len(rows) == 2
    assert "<td>one</td><td>strict</td><td>11</td><td></td>" in rows[0]
    assert "<td>two</td><td>strict</td><td>22</td><td>0badc0de</td>" in rows[1]
    assert html.index("<td>lj.S6.2</td>") < html.index("<td>lj.S6.10</td>")


def test_merged_indexes_keep_cases_in_natural_order() -> None:
    idx = {"run": {"protocol": "lumberjack", "seed": 1}, "agents": {"x": {"lj.S6.10": {}, "lj.S10.1": {}, "lj.S6.2": {}}}}
    assert list(merge_indexes([idx])["agents"]["x"]) == ["lj.S6.2", "lj.S6.10", "lj.S10.1"]


def test_a_single_run_page_shows_its_run_id_when_it_has_one(tmp_path: Path) -> None:
    run: dict[str, Any] = {"protocol": "lumberjack", "role": "server", "seed": 5, "run_id": "feedf00d"}
    write_html(tmp_path, [{"run": run, "agents": {"x": {}}}])
    assert "seed 5 · run id feedf00d" in (tmp_path / "index.html").read_text()
    del run["run_id"]
    write_html(tmp_path, [{"run": run, "agents": {"x": {}}}])
    assert "seed 5 · profile" in (tmp_path / "index.html").read_text()


# --------------------------------------------------------------------------- 5, 6. the terminal


def _down(case: Case) -> CaseResult:
    return _result(
        case,
        ERROR,
        reason="testee down (cannot connect to 127.0.0.1:1: Connection refused)",
        close={"by": "none", "how": "refused"},
    )


def test_a_testee_that_died_is_said_once_on_the_terminal_and_every_case_is_still_recorded(tmp_path: Path) -> None:
    ok = _result(_case("lj.S1.1"))
    downs = [_down(_case(f"lj.S6.{i}")) for i in (2, 3, 10, 11)]
    console, buf = _console()
    for r in [ok, *downs]:
        print_line(console, r)
    run = _run([ok, *downs])
    assert summary(console, run, tmp_path, strict=False, baseline=None) == 1
    text = buf.getvalue()
    assert text.count("testee down") == 2  # the first case's line and the summary's notice
    assert text.count("Connection refused") == 2
    assert "ERROR testee down from lj.S6.2 on: cannot connect to 127.0.0.1:1: Connection refused" in text
    assert "the remaining 4 cases were not judged (lj.S6.2 … lj.S6.11)" in text
    assert "Replay:" not in text and "Requirement:" not in text
    write_reports(run, tmp_path, ["json", "junit"])
    index = json.loads((tmp_path / "index.json").read_text())
    assert [index["agents"]["me"][f"lj.S6.{i}"]["verdict"] for i in (2, 3, 10, 11)] == ["ERROR"] * 4
    assert ET.parse(tmp_path / "junit.xml").getroot().get("errors") == "4"


def test_the_summary_lists_cases_in_natural_order() -> None:
    bad = [_result(_case(f"lj.S6.{i}"), FAIL, reason="x") for i in (10, 2, 11, 1)]
    console, buf = _console()
    summary(console, _run(bad), Path("out"), strict=False, baseline=None)
    heads = [line.split()[1] for line in buf.getvalue().splitlines() if line.startswith("FAIL ")]
    assert heads == ["lj.S6.1", "lj.S6.2", "lj.S6.10", "lj.S6.11"]


# --------------------------------------------------------------------------- 8. a testee client's stderr


def _client_result(verdict: Verdict, stderr: str, exit: int | None = 1) -> CaseResult:
    r = _result(_case("lj.C1.1", role="client"), verdict, reason="why")
    r.exit_status = exit
    r.wire_log = [
        {"t": 0.0, "kind": "action", "text": "listening"},
        {"kind": "process", "argv": ["pylogbeat", "--port", "1"], "exit": exit, "stdout": "", "stderr": stderr},
    ]
    return r


STDERR = "".join(f"line {i}\n" for i in range(30)) + "\x1b[31mTraceback: <boom> & \x00 gone\x1b[0m\n"


def test_a_testee_client_s_stderr_is_on_the_terminal_the_case_page_and_in_junit(tmp_path: Path) -> None:
    r = _client_result(FAIL, STDERR)
    console, buf = _console()
    summary(console, _run([r], role="client"), tmp_path, strict=False, baseline=None)
    text = buf.getvalue()
    assert "Exit status: 1" in text
    assert "Stderr (last 20 of 31 lines):" in text
    assert "| Traceback: <boom> & ? gone" in text and "| line 11" in text and "| line 10\n" not in text
    write_reports(_run([r], role="client"), tmp_path, ["html", "junit"])
    page = (tmp_path / "me" / "lj.C1.1.html").read_text()
    assert "<code>pylogbeat --port 1</code> · exit status 1" in page
    assert "Traceback: &lt;boom&gt; &amp; ? gone" in page and "last 20 of 31 lines" in page
    assert "PROCESS pylogbeat --port 1 exited 1" in page
    err = ET.parse(tmp_path / "junit.xml").getroot().find(".//testcase/system-err")
    assert err is not None and err.text is not None
    assert "exit status: 1" in err.text and "Traceback: <boom> & ? gone" in err.text and "line 10\n" not in err.text


def test_other_non_pass_verdicts_show_a_process_that_has_something_to_say() -> None:
    quiet = _client_result(INFO, "", exit=0)
    loud = _client_result(Verdict.UNSUPPORTED, "no TLS here\n", exit=127)
    passed = _client_result(PASS, "chatty\n", exit=0)
    console, buf = _console()
    summary(console, _run([quiet, loud, passed], role="client"), Path("out"), strict=False, baseline=None)
    text = buf.getvalue()
    assert text.count("Exit status:") == 1
    assert "Exit status: 127" in text and "| no TLS here" in text and "chatty" not in text


def test_junit_has_a_system_err_only_for_a_testee_process(tmp_path: Path) -> None:
    write_junit(tmp_path / "j.xml", _run([_result(_case("lj.S1.1"))]))
    assert ET.parse(tmp_path / "j.xml").getroot().find(".//system-err") is None


# --------------------------------------------------------------------------- 9. a pipe closed early


def test_conform_list_into_a_pipe_nobody_reads_ends_quietly() -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write: EPIPE for certain
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import sys; from refwire._entry import main; sys.exit(main())", "conform", "list"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode == 141
