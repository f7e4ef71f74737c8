"""Every transition of every machine is reached by a small fixed campaign or explained
in ``refwire/pipeline/unreached.toml``, the file names no transition the
catalogues lack, and both campaign reports print the never-reached ones with their reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from refwire.pipeline.campaign import known_protocols
from refwire.pipeline.machines import catalog
from refwire.pipeline.unreached import NO_REASON, coverage_lines, reached_by_protocol, reasons, stale_reasons
from refwire.sim.runner import run_seed

#: Seeds of ``refwire campaign --runner pool --seeds 200`` that together reach every
#: transition the whole campaign reaches (greedy, fewest first; about 4 s in all).  The
#: misfit and rogue peers are drawn from each seed like every other knob.  When a change
#: to the simulator moves where faults land, this can lose a rare transition (a reset in
#: one state): run the 200-seed campaign, which prints the coverage, and pick again.
SMALL_CAMPAIGN: dict[str, tuple[int, ...]] = {
    "lumberjack": (20, 178, 52, 118, 59),
    "pravega": (14, 142, 122),
    "pravega-draft-2017": (23, 19),
    "seastar-rpc": (110, 122, 171, 54, 70),
    "tank": (69, 119, 9),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("protocol", sorted(SMALL_CAMPAIGN))
def test_every_transition_is_reached_or_explained(protocol: str) -> None:
    results = [run_seed(protocol, s) for s in SMALL_CAMPAIGN[protocol]]
    failed = [f"{r.failure_kind}: {r.detail}\n  replay: {r.replay()}" for r in results if not r.ok]
    assert not failed, "\n".join(failed)
    reached = {t for r in results for t in r.transitions}
    why = reasons().get(protocol, {})
    table = catalog(protocol)
    assert table
    missing = [t.key for t in table if t.key not in reached and t.key not in why]
    assert not missing, (
        f"{protocol}: neither reached by seeds {SMALL_CAMPAIGN[protocol]} nor explained in unreached.toml: {missing}"
    )
    # A reason for a transition the campaign reaches is out of date.
    explained_but_reached = sorted(k for k in why if k in reached)
    assert not explained_but_reached, f"{protocol}: reached, yet unreached.toml says why not: {explained_but_reached}"


def test_the_small_campaign_covers_every_protocol_with_a_scenario() -> None:
    assert set(SMALL_CAMPAIGN) == set(known_protocols())


def test_reasons_name_only_transitions_of_the_catalogues() -> None:
    assert not stale_reasons()
    assert set(reasons()) <= set(known_protocols())
    for protocol, table in reasons().items():
        for key, why in table.items():
            assert len(why) > 60, f"{protocol} {key}: say specifically why, not {why!r}"


def test_stale_and_unexplained_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    from refwire.pipeline import unreached

    fake = {"tank": {"client:open-nothing->open": "an entry for a transition the tank client never had, for this test"}}
    monkeypatch.setattr(unreached, "reasons", lambda: fake)
    assert unreached.stale_reasons() == ["tank client:open-nothing->open"]
    lines = unreached.coverage_lines({"tank": {"client:open-response->open"}})
    keys = {t.key for t in catalog("tank") or ()}
    assert lines[0] == f"  tank: 1/{len(keys)} transitions reached, 0 of the {len(keys) - 1} others explained"
    assert f"never reached ({len(keys) - 1} transitions; reasons in full: refwire/pipeline/unreached.toml):" in lines
    assert f"  tank client:open-eof->closed: {NO_REASON}" in lines
    assert not any("NO REASON" in line or "have no reason" in line.lower() for line in lines)


def test_the_report_gives_each_transition_one_short_line() -> None:
    from refwire.pipeline.unreached import REASON_WIDTH, details

    for protocol, table in reasons().items():
        for key, why in table.items():
            assert "\n" not in why and len(why) <= REASON_WIDTH, f"{protocol} {key}: a reason is one line of at most {REASON_WIDTH}"
            assert len(details()[protocol][key]) >= len(why)


def test_a_reason_is_printed_beside_its_transition() -> None:
    rows = [{"protocol": "seastar-rpc", "transitions": ["client:ready-response->ready"]}]
    lines = coverage_lines(reached_by_protocol(rows))
    why = reasons()["seastar-rpc"]["server:deciding-reset->closed"]
    assert f"  seastar-rpc server:deciding-reset->closed: {why}" in lines


@pytest.mark.timeout(120)
def test_the_local_campaign_prints_the_coverage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from refwire.cli import main

    args = ["campaign", "--runner", "loop", "--protocols", "tank", "--first-seed", "9", "--seeds", "1", "--out", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "coverage:\n  tank: " in out and "never reached (" in out and f"{NO_REASON}" in out
