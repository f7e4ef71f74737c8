"""The conformance model: seeds, selection, and how a verdict is reached."""

from __future__ import annotations

import pytest

from refwire.conform.model import Case, Observation, Verdict, case_seed, expect, id_key, judge, predict, select

PASS, NON_STRICT, INFO, FAIL = Verdict.PASS, Verdict.NON_STRICT, Verdict.INFO, Verdict.FAIL


async def _noop(_: object) -> None:
    return None


def _case(id: str = "lj.S1.1", tags: tuple[str, ...] = (), expects: tuple = (), slug: str = "x") -> Case:
    return Case(
        id=id,
        slug=slug,
        title="t",
        role="server",
        requirement="r",
        procedure_text="p",
        expects=expects,
        run=_noop,
        tags=frozenset(tags),
    )


def test_case_seed_is_a_stable_digest_of_run_seed_and_id() -> None:
    assert case_seed(1, "lj.S1.1") == case_seed(1, "lj.S1.1")
    assert case_seed(1, "lj.S1.1") != case_seed(2, "lj.S1.1") != case_seed(1, "lj.S1.2")


def test_case_seed_value_is_frozen() -> None:
    import hashlib

    want = int.from_bytes(hashlib.blake2b(b"7\x00lj.S4.4", digest_size=8).digest(), "big")
    assert case_seed(7, "lj.S4.4") == want


def test_ids_sort_numerically() -> None:
    ids = ["lj.S10.1", "lj.S2.10", "lj.S2.9", "lj.S1.1"]
    assert sorted(ids, key=id_key) == ["lj.S1.1", "lj.S2.9", "lj.S2.10", "lj.S10.1"]


def test_selection_patterns_tags_and_slow() -> None:
    cases = [_case("lj.S1.1", slug="a"), _case("lj.S1.2", ("slow",), slug="b"), _case("lj.S2.1", ("v1",), slug="c")]
    run, skipped = select(cases)
    assert [c.id for c in run] == ["lj.S1.1", "lj.S2.1"] and [c.id for c, _ in skipped] == ["lj.S1.2"]
    run, skipped = select(cases, tags="slow")
    assert [c.id for c in run] == ["lj.S1.1", "lj.S1.2", "lj.S2.1"]
    run, skipped = select(cases, include="lj.S1.2")  # named exactly: runs although slow
    assert [c.id for c in run] == ["lj.S1.2"] and skipped == []
    run, skipped = select(cases, include="lj.S1.*")  # a wildcard does not pull slow cases in
    assert [c.id for c in run] == ["lj.S1.1"] and [c.id for c, _ in skipped] == ["lj.S1.2"]
    run, skipped = select(cases, exclude="c")  # by slug
    assert [c.id for c in run] == ["lj.S1.1"] and ("lj.S2.1", "excluded by --exclude") in [(c.id, w) for c, w in skipped]
    run, skipped = select(cases, tags="v1")
    assert [c.id for c in run] == ["lj.S2.1"]


CASE = _case(
    expects=(
        expect(PASS, "strict logstash", ["A 102"], "open"),
        expect(PASS, "go-lumber", ["A 2"], "open"),
        expect(FAIL, "logstash", ["A 0", "..."], "open", note="documented bug"),
        expect(INFO, "weird", [], "FIN RST"),
    )
)


@pytest.mark.parametrize(
    ("events", "close", "profile", "verdict", "matched"),
    [
        (("A 102",), "open", "strict", PASS, ("strict", "logstash")),  # the chosen profile first
        (("A 102",), "open", "logstash", PASS, ("logstash", "strict")),
        (("A 2",), "open", "strict", NON_STRICT, ("go-lumber",)),
        (("A 2",), "open", "go-lumber", PASS, ("go-lumber",)),
        (("A 102",), "open", "go-lumber", NON_STRICT, ("logstash", "strict")),
        (("A 0", "A 5", "A 6"), "open", "strict", FAIL, ("logstash",)),  # a documented bug stays FAIL
        ((), "FIN", "strict", INFO, ("weird",)),
        (("A 102",), "FIN", "strict", FAIL, ()),  # right ack, wrong close
        (("A 102", "A 102"), "open", "strict", FAIL, ()),  # one ack too many
        (("A 3",), "open", "strict", FAIL, ()),
    ],
)
def test_judge(events: tuple[str, ...], close: str, profile: str, verdict: Verdict, matched: tuple[str, ...]) -> None:
    got, profiles, expected, reason = judge(CASE, Observation(events=events, close=close), profile)
    assert (got, profiles) == (verdict, matched)
    assert expected  # always says what was expected
    if got is NON_STRICT:
        others = ", ".join(p for p in matched if p != profile)
        assert reason == f"consistent with {others}'s documented behaviour, not {profile}'s"


def test_an_expectation_is_never_non_strict_itself() -> None:
    """NON-STRICT is relative to --profile: a case cannot fix it in its data."""
    with pytest.raises(ValueError, match="NON-STRICT is relative to --profile"):
        expect(NON_STRICT, "logstash", ["A 1"])
    with pytest.raises(ValueError, match="at least one profile"):
        expect(PASS, [])
    for v in (PASS, FAIL, INFO, Verdict.UNSUPPORTED):
        assert expect(v, "x").verdict is v


@pytest.mark.parametrize(
    ("behaves_as", "profile", "want"),
    [
        ("logstash", "logstash", {PASS, FAIL}),  # its documented behaviour and its documented bug
        ("logstash", "strict", {PASS, FAIL}),  # shares the strict outcome; the bug stays FAIL
        ("go-lumber", "go-lumber", {PASS}),
        ("go-lumber", "strict", {NON_STRICT}),  # documented, not strict's
        ("go-lumber", "logstash", {NON_STRICT}),
        ("strict", "go-lumber", {NON_STRICT}),
        ("weird", "strict", {INFO}),  # implementation-defined under every profile
        ("nobody", "strict", set()),  # the profile documents nothing here
    ],
)
def test_predict_is_what_judge_gives_each_documented_outcome(behaves_as: str, profile: str, want: set[Verdict]) -> None:
    assert predict(CASE, behaves_as, profile) == want
    # and judge agrees on an observation matching each of them alone
    for e, obs in [
        (CASE.expects[0], Observation(events=("A 102",), close="open")),
        (CASE.expects[1], Observation(events=("A 2",), close="open")),
        (CASE.expects[2], Observation(events=("A 0", "A 1"), close="open")),
        (CASE.expects[3], Observation(events=(), close="FIN")),
    ]:
        if e.names(behaves_as):
            assert judge(CASE, obs, profile)[0] in want


def test_an_outcome_every_profile_documents_is_consistent_with_the_chosen_one() -> None:
    c = _case(expects=(expect(PASS, "*", ["A 1"], "open"), expect(PASS, "go-lumber", ["A 1"], "open")))
    assert judge(c, Observation(events=("A 1",), close="open"), "logstash")[:2] == (PASS, ("logstash", "go-lumber"))
    assert judge(c, Observation(events=("A 1",), close="open"), "go-lumber")[:2] == (PASS, ("go-lumber",))


def test_an_unlisted_observation_s_profiles_are_consistent_ones_not_an_identity() -> None:
    """A server that is not Logstash but shares one documented outcome is
    "consistent with" logstash's documented behaviour, never "behaves like"."""
    got, matched, _, reason = judge(CASE, Observation(events=("A 0",), close="open"), "go-lumber")
    assert (got, matched) == (FAIL, ("logstash",))
    assert "behaves like" not in reason


def test_ellipsis_and_wildcards() -> None:
    c = _case(expects=(expect(PASS, "strict", ["A *", "...", "A 9"], "open"),))
    ok = lambda ev: judge(c, Observation(events=ev, close="open"), "strict")[0]  # noqa: E731
    assert ok(("A 1", "A 9")) is PASS and ok(("A 1", "A 2", "A 3", "A 9")) is PASS
    assert ok(("A 9",)) is FAIL and ok(("A 1", "A 9", "A 10")) is FAIL


def test_facts_must_all_be_observed() -> None:
    c = _case(expects=(expect(PASS, "strict", ["A 2"], "open", facts=["sink: 2 of 2"]),))
    assert judge(c, Observation(events=("A 2",), close="open", facts=("sink: 2 of 2",)), "strict")[0] is PASS
    assert judge(c, Observation(events=("A 2",), close="open", facts=("sink: 0 of 2",)), "strict")[0] is FAIL


def test_case_book_registers_both_roles_and_refuses_a_reused_id_or_slug() -> None:
    from refwire.conform.model import CaseBook

    book = CaseBook("specs/x/README.md", server_ignore=("ka",), client_budget=9.0, client_wrap=lambda fn: fn)

    @book.server("x.S1.1", "one", "One", "§1", "p", [expect(Verdict.PASS, "*")])
    async def s(c: object) -> None: ...

    @book.client("x.C1.1", "two", "Two", "§2", "p", [expect(Verdict.PASS, "*")], events=3)
    async def c(c: object) -> None: ...

    server, client = book.cases
    assert (server.role, server.requirement, server.ignore, server.budget) == ("server", "specs/x/README.md §1", ("ka",), 5.0)
    assert (client.role, client.events, client.budget, client.ignore) == ("client", 3, 9.0, ())
    with pytest.raises(ValueError, match=r"'x\.S1\.1' registered twice"):
        book.server("x.S1.1", "three", "Three", "§1", "p", [])(s)
    with pytest.raises(ValueError, match="'two' registered twice"):
        book.client("x.C9.1", "two", "Two", "§1", "p", [], events=1)(c)
