"""The verdicts `refwire conform` gives, one rule at a time.

Users act on PASS / NON-STRICT / INFO / UNSUPPORTED / FAIL / ERROR: a wrong
verdict tells them their implementation is wrong when it is right (or the
reverse).  So each test here is about a verdict, not a line: for every rule of
:func:`~refwire.conform.model.judge` (the chosen profile's outcome, a ``*``
outcome, another profile's documented behaviour, a documented bug, an
implementation-defined choice, a left-out feature, nothing matching) it pins
the verdict, the profiles listed as consistent (the chosen one first), the
reason sentence, the run's exit status that verdict leads to
(:func:`refwire.conform.console.summary`, which ranks verdicts with
:data:`~refwire.conform.model.SEVERITY` against a ``--baseline``), and that
:func:`~refwire.conform.model.predict` says the same as the judge.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import attrs
import pytest
from rich.console import Console

from refwire.conform.console import summary
from refwire.conform.model import (
    SEVERITY,
    Case,
    CaseBook,
    CaseResult,
    Observation,
    Verdict,
    case_seed,
    describe_observed,
    expect,
    explain_mismatch,
    judge,
    predict,
    select,
    tail_lines,
)
from refwire.conform.runner import RunConfig, RunResult

PASS, NON_STRICT, INFO, UNSUPPORTED, SKIPPED, FAIL, ERROR = (
    Verdict.PASS,
    Verdict.NON_STRICT,
    Verdict.INFO,
    Verdict.UNSUPPORTED,
    Verdict.SKIPPED,
    Verdict.FAIL,
    Verdict.ERROR,
)


async def _noop(_: object) -> None:
    return None


def _case(*expects: Any, id: str = "lj.S1.1") -> Case:
    return Case(
        id=id,
        slug="acks",
        title="The server acks the window",
        role="server",
        requirement="specs/lumberjack/README.md §3",
        procedure_text="Send W 2, J 1, J 2.",
        expects=tuple(expects),
        run=_noop,
    )


# One case documenting every kind of outcome, each for its own profiles.
CASE = _case(
    expect(PASS, "strict logstash", ["A 2"], "open"),  # the spec's behaviour, Logstash's too
    expect(PASS, "go-lumber", ["A 1", "A 2"], "open", note="go-lumber acks each event"),  # another documented behaviour
    expect(FAIL, "logstash", ["A 0", "..."], "open", note="Logstash acks 0 first (a documented bug)"),
    expect(INFO, "beats", [], "FIN", note="closing is the server's choice"),
    expect(UNSUPPORTED, "tiny", ["N *"], "RST", note="tiny has no v1"),
)

# An observation matching each expectation of CASE alone.
ALONE = [
    Observation(events=("A 2",), close="open"),
    Observation(events=("A 1", "A 2"), close="open"),
    Observation(events=("A 0", "A 5"), close="open"),
    Observation(events=(), close="FIN"),
    Observation(events=("N 1",), close="RST"),
]

PROFILES = ("strict", "logstash", "go-lumber", "beats", "tiny", "nobody")


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=400, color_system=None, highlight=False, soft_wrap=True), buf


def _result(case: Case, verdict: Verdict, **kw: Any) -> CaseResult:
    return CaseResult(case=case, agent="me", verdict=verdict, case_seed=1, profile="strict", run_seed=7, **kw)


def exit_status(*results: CaseResult, strict: bool = False, baseline: dict[str, Any] | None = None) -> tuple[int, str]:
    """The run's exit status (and its terminal summary) for these results."""
    run = RunResult("lumberjack", RunConfig(agent="me", seed=7, role="server"))
    run.results.extend(results)
    console, buf = _console()
    return summary(console, run, Path("out"), strict=strict, baseline=baseline), buf.getvalue()


def judged(case: Case, obs: Observation, profile: str) -> CaseResult:
    verdict, matched, expected, reason = judge(case, obs, profile)
    return _result(case, verdict, matched_profiles=matched, expected=expected, reason=reason, observation=obs)


# --------------------------------------------------------------------------- one case per verdict and profile rule


@pytest.mark.parametrize(
    ("obs", "profile", "verdict", "matched", "reason", "status", "status_strict"),
    [
        # the chosen profile's own outcome: PASS, the chosen profile listed first
        (ALONE[0], "strict", PASS, ("strict", "logstash"), "", 0, 0),
        (ALONE[0], "logstash", PASS, ("logstash", "strict"), "", 0, 0),
        (ALONE[1], "go-lumber", PASS, ("go-lumber",), "go-lumber acks each event", 0, 0),
        # another profile's documented behaviour: NON-STRICT relative to the chosen one (fails only --strict)
        (ALONE[1], "strict", NON_STRICT, ("go-lumber",),
         "consistent with go-lumber's documented behaviour, not strict's: go-lumber acks each event", 0, 1),
        (ALONE[0], "go-lumber", NON_STRICT, ("logstash", "strict"),
         "consistent with logstash, strict's documented behaviour, not go-lumber's", 0, 1),
        # a documented bug is FAIL under every profile, its own included, and is not called NON-STRICT
        (ALONE[2], "strict", FAIL, ("logstash",), "Logstash acks 0 first (a documented bug)", 1, 1),
        (ALONE[2], "logstash", FAIL, ("logstash",), "Logstash acks 0 first (a documented bug)", 1, 1),
        (ALONE[2], "go-lumber", FAIL, ("logstash",), "Logstash acks 0 first (a documented bug)", 1, 1),
        # implementation-defined: INFO under every profile, never fails the run
        (ALONE[3], "beats", INFO, ("beats",), "closing is the server's choice", 0, 0),
        (ALONE[3], "strict", INFO, ("beats",), "closing is the server's choice", 0, 0),
        # a left-out feature: UNSUPPORTED under the profile that documents it, never fails the run ...
        (ALONE[4], "tiny", UNSUPPORTED, ("tiny",), "tiny has no v1", 0, 0),
        # ... and, as any documented behaviour of another profile, NON-STRICT under the others
        (ALONE[4], "strict", NON_STRICT, ("tiny",), "consistent with tiny's documented behaviour, not strict's: tiny has no v1", 0, 1),
        # nothing matches: FAIL, the reason names the first thing that differed from the closest outcome
        (Observation(events=("A 3",), close="open"), "strict", FAIL, (), "sent `A 3` first; expected: `A 2`", 1, 1),
        (Observation(events=("A 1",), close="open"), "go-lumber", FAIL, (), "sent nothing after `A 1`; expected: `A 2`", 1, 1),
        (Observation(events=("A 2", "A 2"), close="open"), "logstash", FAIL, (), "sent `A 2` after `A 2`; expected: nothing more", 1, 1),
        (Observation(events=("A 2",), close="FIN"), "strict", FAIL, (), "closed the connection (FIN); expected: kept open", 1, 1),
        (Observation(events=(), close="RST"), "beats", FAIL, (), "reset the connection (RST); expected: closed (FIN)", 1, 1),
        # a profile the case documents nothing for: explained against every outcome, saying which was closest
        (Observation(events=("N 1",), close="FIN"), "nobody", FAIL, (),
         "closed the connection (FIN); expected: reset (RST) (closest: the UNSUPPORTED outcome for tiny)", 1, 1),
    ],
)
def test_each_profile_rule_gives_its_verdict_reason_and_exit_status(
    obs: Observation, profile: str, verdict: Verdict, matched: tuple[str, ...], reason: str, status: int, status_strict: int
) -> None:
    got, profiles, _, why = judge(CASE, obs, profile)
    assert (got, profiles, why) == (verdict, matched, reason)
    r = judged(CASE, obs, profile)
    assert exit_status(r)[0] == status
    assert exit_status(r, strict=True)[0] == status_strict


def test_a_fail_shows_the_expected_outcomes_of_the_chosen_profile_only() -> None:
    obs = Observation(events=("A 3",), close="open")
    assert judge(CASE, obs, "strict")[2] == "PASS: [A 2] then open"
    assert judge(CASE, obs, "logstash")[2] == "PASS: [A 2] then open | FAIL: [A 0, ...] then open"
    assert judge(CASE, obs, "tiny")[2] == "UNSUPPORTED: [N *] then RST"
    # a profile with no outcome of its own: every outcome
    assert judge(CASE, obs, "nobody")[2] == " | ".join(
        ["PASS: [A 2] then open", "PASS: [A 1, A 2] then open", "FAIL: [A 0, ...] then open", "INFO: [nothing] then FIN", "UNSUPPORTED: [N *] then RST"]
    )
    code, text = exit_status(judged(CASE, obs, "strict"))
    assert code == 1
    assert "Expected:    PASS: [A 2] then open" in text and "Observed:    [A 3] then open" in text
    assert "Why:         sent `A 3` first; expected: `A 2`" in text


def test_the_first_outcome_written_for_the_chosen_profile_decides() -> None:
    case = _case(
        expect(INFO, "strict", ["..."], "open", note="anything goes"),
        expect(PASS, "strict", ["A 1"], "open"),
        expect(FAIL, "go-lumber", ["A 1"], "open", note="bug"),
    )
    obs = Observation(events=("A 1",), close="open")
    assert judge(case, obs, "strict")[:2] == (INFO, ("strict", "go-lumber"))
    assert judge(case, obs, "strict")[3] == "anything goes"
    # go-lumber's own bug decides for go-lumber, although strict's outcomes match too
    assert judge(case, obs, "go-lumber")[:2] == (FAIL, ("go-lumber", "strict"))
    # another profile: the first matching outcome decides (INFO, not the bug written after it)
    assert judge(case, obs, "logstash")[:2] == (INFO, ("go-lumber", "strict"))


# --------------------------------------------------------------------------- `*`: every profile


STAR = _case(
    expect(PASS, "*", ["A 1"], "open"),
    expect(PASS, "go-lumber", ["A 1", "A 1"], "open"),
    expect(INFO, "*", [], "FIN RST", note="the server may close"),
)


@pytest.mark.parametrize(
    ("events", "close", "profile", "verdict", "matched", "reason"),
    [
        (("A 1",), "open", "logstash", PASS, ("logstash",), ""),  # an outcome of every profile is the chosen one's
        (("A 1",), "open", "go-lumber", PASS, ("go-lumber",), ""),
        (("A 1",), "open", "strict", PASS, ("strict",), ""),  # never NON-STRICT, whatever the profile
        (("A 1", "A 1"), "open", "strict", NON_STRICT, ("go-lumber",), "consistent with go-lumber's documented behaviour, not strict's"),
        ((), "RST", "strict", INFO, ("strict",), "the server may close"),
        ((), "FIN", "go-lumber", INFO, ("go-lumber",), "the server may close"),
        # nothing matches: the chosen profile's PASS outcomes are the `*` one
        ((), "open", "strict", FAIL, (), "sent nothing; expected: `A 1`"),
        # go-lumber has two PASS outcomes: the closer one is named
        (("A 1", "A 1", "A 1"), "open", "go-lumber", FAIL, (),
         "sent `A 1` after `A 1`; expected: nothing more (closest: the PASS outcome for go-lumber)"),
        (("A 2",), "open", "go-lumber", FAIL, (), "sent `A 2` first; expected: `A 1` (closest: the PASS outcome for every profile)"),
    ],
)
def test_an_outcome_for_every_profile(
    events: tuple[str, ...], close: str, profile: str, verdict: Verdict, matched: tuple[str, ...], reason: str
) -> None:
    got, profiles, expected, why = judge(STAR, Observation(events=events, close=close), profile)
    assert (got, profiles, why) == (verdict, matched, reason)
    mine = ["PASS: [A 1] then open", "PASS: [A 1, A 1] then open", "INFO: [nothing] then FIN or RST"]
    assert expected == " | ".join(mine if profile == "go-lumber" else mine[::2])


# --------------------------------------------------------------------------- predict() says what judge() gives


@pytest.mark.parametrize("behaves_as", PROFILES)
@pytest.mark.parametrize("profile", PROFILES)
def test_predict_is_the_set_of_verdicts_judge_gives_each_documented_outcome(behaves_as: str, profile: str) -> None:
    judged_verdicts = {judge(CASE, obs, profile)[0] for e, obs in zip(CASE.expects, ALONE, strict=True) if e.names(behaves_as)}
    assert predict(CASE, behaves_as, profile) == judged_verdicts


@pytest.mark.parametrize(
    ("behaves_as", "profile", "want"),
    [
        ("strict", "strict", {PASS}),
        ("logstash", "logstash", {PASS, FAIL}),
        ("logstash", "strict", {PASS, FAIL}),
        ("go-lumber", "strict", {NON_STRICT}),
        ("strict", "go-lumber", {NON_STRICT}),
        ("beats", "strict", {INFO}),
        ("tiny", "tiny", {UNSUPPORTED}),
        ("tiny", "strict", {NON_STRICT}),  # documented behaviour of another profile, as judge() says
        ("nobody", "strict", set()),
    ],
)
def test_predict_names_the_verdicts(behaves_as: str, profile: str, want: set[Verdict]) -> None:
    assert predict(CASE, behaves_as, profile) == want


def test_predict_with_outcomes_for_every_profile() -> None:
    alone = [Observation(events=("A 1",), close="open"), Observation(events=("A 1", "A 1"), close="open"), Observation(close="FIN")]
    for behaves_as in ("strict", "go-lumber", "logstash"):
        for profile in ("strict", "go-lumber", "logstash"):
            want = {judge(STAR, obs, profile)[0] for e, obs in zip(STAR.expects, alone, strict=True) if e.names(behaves_as)}
            assert predict(STAR, behaves_as, profile) == want
    assert predict(STAR, "logstash", "strict") == {PASS, INFO}
    assert predict(STAR, "go-lumber", "strict") == {PASS, NON_STRICT, INFO}


# --------------------------------------------------------------------------- the run's exit status from the verdicts


@pytest.mark.parametrize(
    ("verdict", "status", "status_strict"),
    [(PASS, 0, 0), (NON_STRICT, 0, 1), (INFO, 0, 0), (UNSUPPORTED, 0, 0), (SKIPPED, 0, 0), (FAIL, 1, 1), (ERROR, 1, 1)],
)
def test_each_verdict_s_exit_status(verdict: Verdict, status: int, status_strict: int) -> None:
    r = _result(CASE, verdict, reason="why")
    assert exit_status(r)[0] == status
    assert exit_status(r, strict=True)[0] == status_strict
    assert exit_status(_result(CASE, PASS), r)[0] == status  # the worst verdict decides


def test_an_error_that_is_the_harness_s_own_fault_exits_2() -> None:
    assert exit_status(_result(CASE, ERROR, reason="harness error: boom", harness_fault=True), _result(CASE, FAIL))[0] == 2


def _baseline(verdict: Verdict) -> dict[str, Any]:
    return {"agents": {"me": {CASE.id: {"verdict": verdict.value}}}}


@pytest.mark.parametrize(
    ("was", "now", "status", "line"),
    [
        # INFO ranks with PASS and SKIPPED: no regression either way, and it never fails the run
        (PASS, INFO, 0, None),
        (INFO, PASS, 0, None),
        (SKIPPED, INFO, 0, None),
        (INFO, SKIPPED, 0, None),
        (INFO, UNSUPPORTED, 1, "regression lj.S1.1: INFO -> UNSUPPORTED"),
        (UNSUPPORTED, INFO, 0, "unexpected pass lj.S1.1: UNSUPPORTED -> INFO (update the baseline)"),
        (INFO, NON_STRICT, 1, "regression lj.S1.1: INFO -> NON-STRICT"),
        (UNSUPPORTED, NON_STRICT, 1, "regression lj.S1.1: UNSUPPORTED -> NON-STRICT"),
        (NON_STRICT, UNSUPPORTED, 0, "unexpected pass lj.S1.1: NON-STRICT -> UNSUPPORTED (update the baseline)"),
        (NON_STRICT, FAIL, 1, "regression lj.S1.1: NON-STRICT -> FAIL"),
        # ERROR ranks with FAIL: above NON-STRICT, and neither is worse than the other
        (NON_STRICT, ERROR, 1, "regression lj.S1.1: NON-STRICT -> ERROR"),
        (ERROR, NON_STRICT, 0, "unexpected pass lj.S1.1: ERROR -> NON-STRICT (update the baseline)"),
        (FAIL, ERROR, 1, None),
        (ERROR, FAIL, 1, None),
        (ERROR, INFO, 0, "unexpected pass lj.S1.1: ERROR -> INFO (update the baseline)"),
        (PASS, PASS, 0, None),
    ],
)
def test_the_baseline_ranks_verdicts_by_severity(was: Verdict, now: Verdict, status: int, line: str | None) -> None:
    code, text = exit_status(_result(CASE, now, reason="why"), baseline=_baseline(was))
    assert code == status
    found = [s for s in text.splitlines() if s.startswith(("regression", "unexpected pass"))]
    assert found == ([line] if line else [])


def test_severity_groups() -> None:
    ranks: dict[int, set[Verdict]] = {}
    for v, n in SEVERITY.items():
        ranks.setdefault(n, set()).add(v)
    assert set(SEVERITY) == set(Verdict)
    assert [ranks[n] for n in sorted(ranks)] == [{PASS, INFO, SKIPPED}, {UNSUPPORTED}, {NON_STRICT}, {FAIL, ERROR}]


# --------------------------------------------------------------------------- expectations and the reason's parts


def test_an_expectation_s_verdict_is_one_a_case_can_document() -> None:
    for v in (NON_STRICT, SKIPPED, ERROR):
        with pytest.raises(ValueError) as err:
            expect(v, "strict")
        # the same sentence in every process (not a set's order)
        assert str(err.value) == (
            f"an expectation's verdict is one of PASS, INFO, UNSUPPORTED, FAIL, not {v.value} (NON-STRICT is relative to --profile)"
        )
    with pytest.raises(ValueError, match=r"^an expectation names at least one profile \(or '\*'\)$"):
        expect(PASS, "")


def test_an_outcome_describes_itself() -> None:
    e = expect(PASS, "*", ["A 1", "A *"], "RST FIN", facts=["sink: 2 of 2", "exit 0"])
    assert e.describe() == "[A 1, A *] then FIN or RST (sink: 2 of 2; exit 0)"
    assert expect(PASS, "x").describe() == "[nothing] then FIN or RST or open"
    assert expect(PASS, "x").close == frozenset({"FIN", "RST", "open"}) and expect(PASS, "x").note == ""
    assert e.names("anyone") and expect(PASS, "a b").names("b") and not expect(PASS, "a b").names("c")


def test_facts_are_patterns_and_every_one_must_be_seen() -> None:
    case = _case(expect(PASS, "strict", ["..."], facts=["exit [!0]*", "sink: * of 2"]))
    ok = Observation(events=("W 2",), close="FIN", facts=("sink: 2 of 2", "exit 1"))
    assert judge(case, ok, "strict")[0] is PASS
    assert judge(case, Observation(facts=("exit 1",)), "strict")[:4:3] == (FAIL, "noted `exit 1`; expected also: `sink: * of 2`")
    assert judge(case, Observation(), "strict")[3] == "noted nothing; expected: `exit [!0]*`"
    assert judge(case, Observation(facts=("exit 0", "sink: 1 of 2")), "strict")[3] == "`exit 0`; expected: `exit [!0]*`"


@pytest.mark.parametrize(
    ("closes", "seen", "why"),
    [
        ("FIN RST", "open", "kept the connection open until the case stopped waiting; expected: closed (FIN or RST)"),
        ("FIN", "refused", "refused the connection; expected: closed (FIN)"),
        ("open refused", "RST", "reset the connection (RST); expected: kept open or refused"),
        ("RST open", "FIN", "closed the connection (FIN); expected: reset (RST) or kept open"),
        ("FIN RST open", "refused", "refused the connection; expected: closed (FIN or RST) or kept open"),
        ("FIN later", "gone", "gone; expected: closed (FIN) or later"),  # kinds refwire does not know are shown as written
    ],
)
def test_a_wrong_close_is_named_with_what_was_wanted(closes: str, seen: str, why: str) -> None:
    case = _case(expect(PASS, "strict", [], closes))
    assert judge(case, Observation(close=seen), "strict") == (FAIL, (), f"PASS: [nothing] then {' or '.join(sorted(closes.split()))}", why)


@pytest.mark.parametrize(
    ("pattern", "events", "why"),
    [
        (["A 1", "...", "A 9"], ("A 1", "A 2", "A 3"), "sent nothing after `A 3`; expected: `A 9`"),
        # "..." accounts for as many leading tokens as it can: the A 9 is still wanted after them
        (["...", "A 9"], ("A 9", "A 1"), "sent nothing after `A 1`; expected: `A 9`"),
        (["A 1", "..."], ("A 2",), "sent `A 2` first; expected: `A 1`"),
        (["A 1", "A 2"], ("A 1", "A 3", "A 2"), "sent `A 3` after `A 1`; expected: `A 2`"),
        (["A 1", "...", "A 2", "A 3"], ("A 1", "A 2", "A 4"), "sent nothing after `A 4`; expected: `A 2`"),
        (["A 1", "A 2", "A 3"], ("A 1", "A 2", "A 4"), "sent `A 4` after `A 2`; expected: `A 3`"),
        (["...", "A 2", "A 3"], ("A 2", "A 3", "A 2"), "sent nothing after `A 2`; expected: `A 3`"),
    ],
)
def test_the_first_token_that_differed(pattern: list[str], events: tuple[str, ...], why: str) -> None:
    case = _case(expect(PASS, "strict", pattern, "open"))
    assert explain_mismatch(case, Observation(events=events, close="open"), "strict") == why


def test_the_closest_outcome_agrees_on_the_most_and_the_first_written_wins_a_tie() -> None:
    case = _case(
        expect(PASS, "strict", ["A 1"], "FIN"),
        expect(PASS, "strict", ["A 1", "A 2"], "FIN"),
        expect(PASS, "strict", ["A 1", "A 2"], "RST"),
        expect(INFO, "strict", ["A 1", "A 2", "A 3"], "open"),  # not a PASS: never the aim while strict has one
        expect(FAIL, "odd", ["A 1", "A 2", "A 3"], "open"),
    )
    # two leading tokens + the close beat one token + the whole list ...
    assert explain_mismatch(case, Observation(events=("A 1", "A 2", "A 3"), close="RST"), "strict") == (
        "sent `A 3` after `A 2`; expected: nothing more (closest: the PASS outcome for strict)"
    )
    # ... and the tie of the two two-token outcomes goes to the first written
    assert judge(case, Observation(events=("A 1", "A 2", "A 3"), close="open"), "strict")[0] is INFO
    assert explain_mismatch(case, Observation(events=("A 1", "A 2", "A 4"), close="open"), "strict") == (
        "sent `A 4` after `A 2`; expected: nothing more (closest: the PASS outcome for strict)"
    )
    assert judge(case, Observation(events=("A 1",), close="RST"), "strict")[3] == (
        "reset the connection (RST); expected: closed (FIN) (closest: the PASS outcome for strict)"
    )
    # a profile documenting only a bug is explained against that bug
    assert explain_mismatch(case, Observation(events=("A 1",), close="open"), "odd") == "sent nothing after `A 1`; expected: `A 2`"
    only_bug_and_info = _case(expect(FAIL, "x", ["A 0"], "open"), expect(INFO, "x", ["A 1"], "FIN"))
    assert explain_mismatch(only_bug_and_info, Observation(events=("A 0",), close="FIN"), "x") == "sent `A 0` first; expected: `A 1`"
    assert explain_mismatch(_case(), Observation(), "strict") == "no expected outcome matched (the case has none)"
    assert judge(_case(), Observation(), "strict") == (FAIL, (), "", "no expected outcome matched (the case has none)")


def test_an_outcome_that_matches_is_not_explained_as_a_mismatch() -> None:
    case = _case(expect(PASS, "strict", ["A 1"], "open"))
    assert explain_mismatch(case, Observation(events=("A 1",), close="open"), "strict") == "no expected outcome matched"


def test_what_was_observed_reads_as_what_the_testee_did() -> None:
    obs = Observation(events=("A 1",), close="open", facts=("exit 0",))
    assert obs.describe() == "[A 1, exit 0] then open"
    assert describe_observed(obs) == "[A 1, exit 0] then open"
    assert describe_observed(obs, {"by": "refwire", "how": "RST"}) == "[A 1, exit 0] then open until refwire reset it"
    assert describe_observed(obs, {"by": "testee", "how": "RST"}) == "[A 1, exit 0] then open"
    closed = Observation(events=("A 1",), close="RST")
    assert describe_observed(closed, {"by": "refwire", "how": "RST"}) == "[A 1] then RST"
    r = _result(CASE, FAIL, observed="as recorded")
    assert r.observed_text() == "as recorded"
    r.observation = obs
    r.close = {"by": "refwire", "how": "RST"}
    assert r.observed_text() == "[A 1, exit 0] then open until refwire reset it"


def test_a_testee_s_stderr_tail_is_safe_to_print() -> None:
    assert tail_lines("a\r\nb\rc\n\n\n") == (["a", "b", "c"], 3)
    assert tail_lines("\x1b[31mred\x1b[0m \x07bell\x00", 5) == (["red ?bell?"], 1)
    assert tail_lines("1\n2\n3\n4", 2) == (["3", "4"], 4)
    assert tail_lines("1\n2", 0) == ([], 2)
    assert tail_lines("") == ([], 0)
    r = _result(CASE, FAIL)
    assert r.testee_process() is None and r.testee_stderr() == ([], 0)
    r.wire_log = [
        {"kind": "process", "argv": ["old"], "exit": 3, "stderr": "old\n"},
        {"kind": "frame"},
        {"kind": "process", "argv": ["x"], "exit": 1, "stderr": "one\ntwo\nthree\n"},
        {"kind": "frame"},
    ]
    assert r.testee_process() == {"kind": "process", "argv": ["x"], "exit": 1, "stderr": "one\ntwo\nthree\n"}
    assert r.testee_stderr(2) == (["two", "three"], 3)
    assert r.testee_stderr() == (["one", "two", "three"], 3)
    r.wire_log = [{"kind": "process", "argv": ["x"], "exit": 0, "stderr": None}]
    assert r.testee_stderr() == ([], 0)


# --------------------------------------------------------------------------- what a case and a result record


def test_a_case_judges_its_tokens_without_the_ignored_ones_and_records_its_outcomes() -> None:
    case = attrs.evolve(_case(*CASE.expects[:2]), ignore=("K *", "ping"), vectors=("v1",), tags=frozenset({"b", "a"}), features=("tls",))
    assert case.judged(["K 1", "A 1", "ping", "pingx", "A 2"]) == ("A 1", "pingx", "A 2")
    assert case.category == "lj.S1"
    assert case.to_json() == {
        "id": "lj.S1.1",
        "slug": "acks",
        "title": "The server acks the window",
        "role": "server",
        "requirement": "specs/lumberjack/README.md §3",
        "procedure": "Send W 2, J 1, J 2.",
        "vectors": ["v1"],
        "tags": ["a", "b"],
        "features": ["tls"],
        "budget_s": 5.0,
        "needs_sink": False,
        "events": 0,
        "expects": [
            {"verdict": "PASS", "profiles": ["logstash", "strict"], "outcome": "[A 2] then open", "note": ""},
            {"verdict": "PASS", "profiles": ["go-lumber"], "outcome": "[A 1, A 2] then open", "note": "go-lumber acks each event"},
        ],
    }


def test_a_result_records_its_verdict_and_why() -> None:
    obs = Observation(events=("A 1", "A 2"), close="open")
    verdict, matched, expected, reason = judge(CASE, obs, "strict")
    r = CaseResult(
        case=CASE, agent="me", verdict=verdict, case_seed=11, profile="strict", matched_profiles=matched, observation=obs,
        close={"by": "refwire", "how": "RST"}, expected=expected, reason=reason, duration=0.12345, exit_status=3,
        replay="refwire conform replay x", run_seed=7, harness_fault=False,
        frames=[{"t": 1}], keepalives=[{"t": 2}], wire_log=[{"kind": "frame"}],
    )
    j = r.to_json()
    j.pop("run_id", None)  # the run's, not the verdict's
    assert j == {
        "case": CASE.to_json(),
        "agent": "me",
        "verdict": "NON-STRICT",
        "profile": "strict",
        "matched_profiles": ["go-lumber"],
        "case_seed": 11,
        "run_seed": 7,
        "harness_fault": False,
        "expected": "PASS: [A 2] then open",
        "observed": "[A 1, A 2] then open until refwire reset it",
        "observation": {"events": ("A 1", "A 2"), "close": "open", "facts": ()},
        "close": {"by": "refwire", "how": "RST"},
        "reason": "consistent with go-lumber's documented behaviour, not strict's: go-lumber acks each event",
        "duration_s": 0.123,
        "exit_status": 3,
        "replay": "refwire conform replay x",
        "frames": [{"t": 1}],
        "keepalives": [{"t": 2}],
        "wire_log": [{"kind": "frame"}],
    }
    bare = _result(CASE, ERROR, harness_fault=True, reason="harness error: x").to_json()
    assert (bare["observation"], bare["observed"], bare["harness_fault"], bare["verdict"]) == (None, "", True, "ERROR")


def test_a_case_book_builds_each_case_from_what_it_is_told() -> None:
    async def wrapped(_: object) -> None: ...

    book = CaseBook("specs/tank/README.md", server_ignore=("ping",), server_budget=2.0, client_budget=9.0, client_wrap=lambda fn: wrapped)
    outcomes = [expect(PASS, "*", ["ping"], "open")]

    @book.server("tk.S1.1", "ping", "Pings first", "§3.1", "Connect.", outcomes, vectors=["v"], tags=["t"], features=["f"], needs_sink=True)
    async def s1(_: object) -> None: ...

    @book.server("tk.S1.2", "ping2", "Pings", "§3.2", "Wait.", outcomes, budget=1.5, ignore=["x"])
    async def s2(_: object) -> None: ...

    @book.client("tk.C1.1", "produce", "Produces", "§4", "Serve.", outcomes, events=4, vectors=["w"], tags=["u"], features=["g"], ignore=["y"])
    async def c1(_: object) -> None: ...

    @book.client("tk.C1.2", "produce2", "Produces", "§4", "Serve.", outcomes, events=1, budget=3.0)
    async def c2(_: object) -> None: ...

    a, b, c, d = book.cases
    assert (s1, c1) == (book.server("tk.S9.9", "s99", "t", "§", "p", outcomes)(s1), book.client("tk.C9.9", "c99", "t", "§", "p", outcomes, events=0)(c1))
    assert (a.id, a.slug, a.title, a.role, a.requirement, a.procedure_text, a.expects, a.run) == (
        "tk.S1.1", "ping", "Pings first", "server", "specs/tank/README.md §3.1", "Connect.", tuple(outcomes), s1
    )
    assert (a.vectors, a.tags, a.features, a.budget, a.ignore, a.needs_sink, a.events) == (("v",), frozenset({"t"}), ("f",), 2.0, ("ping",), True, 0)
    assert (b.budget, b.ignore, b.needs_sink, b.vectors, b.tags, b.features) == (1.5, ("x",), False, (), frozenset(), ())
    assert (c.id, c.slug, c.title, c.role, c.requirement, c.procedure_text, c.expects, c.run) == (
        "tk.C1.1", "produce", "Produces", "client", "specs/tank/README.md §4", "Serve.", tuple(outcomes), wrapped
    )
    assert (c.vectors, c.tags, c.features, c.budget, c.ignore, c.events, c.needs_sink) == (("w",), frozenset({"u"}), ("g",), 9.0, ("y",), 4, False)
    assert (d.budget, d.ignore, d.events) == (3.0, (), 1)
    plain = CaseBook("specs/x.md")
    assert (plain.spec, plain.server_ignore, plain.server_budget, plain.client_budget, plain.client_wrap) == ("specs/x.md", (), 5.0, 15.0, None)
    plain.client("x.C1", "c", "t", "§1", "p", outcomes, events=2)(c1)
    plain.server("x.S1", "s", "t", "§1", "p", outcomes)(s1)
    assert plain.cases[0].run is c1 and plain.cases[0].budget == 15.0 and plain.cases[1].budget == 5.0 and plain.cases[1].ignore == ()


def test_selection_reasons_and_pattern_lists() -> None:
    cases = [
        attrs.evolve(_case(id="lj.S1.1"), slug="one", tags=frozenset({"v1"})),
        attrs.evolve(_case(id="lj.S2.1"), slug="two", tags=frozenset({"slow", "v2"})),
        attrs.evolve(_case(id="lj.S10.1"), slug="ten"),
    ]
    run, skipped = select(cases, include=" lj.S1.* , ,two", exclude=[" one "])
    # a slow case named exactly runs; excluded ones are said so; lj.S10.1 is not selected at all
    assert [c.slug for c in run] == ["two"] and [(c.slug, why) for c, why in skipped] == [("one", "excluded by --exclude")]
    run, skipped = select(cases, include="lj.S*")
    assert [c.slug for c in run] == ["one", "ten"] and [(c.slug, why) for c, why in skipped] == [("two", "tagged slow (run with --tags slow)")]
    run, skipped = select(cases, tags=["v2", "v1"])
    assert [c.slug for c in run] == ["one"]
    assert [(c.slug, why) for c, why in skipped] == [("two", "tagged slow (run with --tags slow)"), ("ten", "not tagged v1, v2")]
    run, skipped = select(cases, tags="slow,v2")
    assert [c.slug for c in run] == ["two"] and [why for _, why in skipped] == ["not tagged slow, v2", "not tagged slow, v2"]
    run, _ = select(cases, include=["lj.S2.1"], tags=" ")
    assert [c.slug for c in run] == ["two"]
    assert [c.id for c in select(reversed(cases))[0]] == ["lj.S1.1", "lj.S10.1"]


def test_a_case_seed_is_eight_bytes_of_the_run_seed_and_the_id() -> None:
    import hashlib

    assert case_seed(0, "x") == int.from_bytes(hashlib.blake2b(b"0\x00x", digest_size=8).digest(), "big")
    assert 0 <= case_seed(2**70, "tk.S1.1") < 2**64


# --------------------------------------------------------------------------- the closest outcome, told apart


def test_the_closest_outcome_counts_the_close_and_every_fact_it_shares() -> None:
    by_close = _case(expect(PASS, "strict", ["A 1"], "FIN"), expect(PASS, "*", ["A 1"], "RST"))
    assert explain_mismatch(by_close, Observation(events=("A 2",), close="RST"), "strict") == (
        "sent `A 2` first; expected: `A 1` (closest: the PASS outcome for every profile)"
    )
    assert explain_mismatch(by_close, Observation(events=("A 2",), close="FIN"), "strict") == (
        "sent `A 2` first; expected: `A 1` (closest: the PASS outcome for strict)"
    )
    by_facts = _case(
        expect(PASS, "strict logstash", ["..."], "RST", facts=["exit 0", "all 4 acked", "nothing resent"]),
        expect(PASS, "*", ["..."], "FIN", facts=["crashed"]),
    )
    obs = Observation(close="FIN", facts=("exit 0", "all 4 acked"))
    assert explain_mismatch(by_facts, obs, "strict") == (
        "closed the connection (FIN); expected: reset (RST) (closest: the PASS outcome for logstash, strict)"
    )
    # observed facts that share no word with the missing one are listed
    only = _case(expect(PASS, "strict", ["..."], facts=["exit 0", "nothing resent"]))
    assert explain_mismatch(only, obs, "strict") == "noted `exit 0`, `all 4 acked`; expected also: `nothing resent`"


def test_the_observed_fact_nearest_the_missing_one_is_the_first_that_shares_the_most_words() -> None:
    case = _case(expect(PASS, "strict", ["..."], facts=["sink: 4 of 4 acked"]))
    obs = Observation(facts=("exit 0", "sink: 2 of 4", "sink: 3 of 4", "sink: 1"))
    assert explain_mismatch(case, obs, "strict") == "`sink: 2 of 4`; expected: `sink: 4 of 4 acked`"


@pytest.mark.parametrize(
    ("pattern", "events", "why"),
    [
        # the wildcard does not go back over tokens an earlier item took
        (["A 1", "...", "A 1", "A 2"], ("A 1", "A 2"), "sent nothing after `A 2`; expected: `A 1`"),
        (["...", "A"], ("B",), "sent nothing after `B`; expected: `A`"),
        (["A 1", "...", "A 5", "...", "A 9"], ("A 1", "A 2", "A 5", "A 6"), "sent nothing after `A 6`; expected: `A 9`"),
        (["...", "...", "A"], ("B", "B"), "sent nothing after `B`; expected: `A`"),
    ],
)
def test_wildcards_in_the_first_difference(pattern: list[str], events: tuple[str, ...], why: str) -> None:
    case = _case(expect(PASS, "strict", pattern, "open"))
    assert judge(case, Observation(events=events, close="open"), "strict")[::3] == (FAIL, why)


def test_twenty_lines_of_stderr_by_default() -> None:
    text = "\n".join(str(i) for i in range(25))
    assert tail_lines(text) == ([str(i) for i in range(5, 25)], 25)
    assert tail_lines("a\nb", 1) == (["b"], 2)
    r = _result(CASE, FAIL)
    r.wire_log = [{"kind": "process", "exit": 1, "stderr": text}]
    assert r.testee_stderr() == ([str(i) for i in range(5, 25)], 25)


def test_a_client_case_s_procedure_is_its_function_wrapped() -> None:
    seen: list[Any] = []

    async def served(_: object) -> None: ...

    def wrap(fn: Any) -> Any:
        seen.append(fn)
        return served

    book = CaseBook("specs/x.md", client_wrap=wrap)

    @book.client("x.C1.1", "one", "t", "§1", "p", [expect(PASS, "*")], events=1)
    async def answer(_: object) -> None: ...

    assert seen == [answer] and book.cases[0].run is served
