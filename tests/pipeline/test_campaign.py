"""Campaign rows and the local runners, without Spark."""

from __future__ import annotations

import json
from typing import Any

import pytest

from refwire.pipeline import campaign
from refwire.pipeline.campaign import (
    CAMPAIGN_COLUMNS,
    failure_summary,
    resolve_protocols,
    run_loop,
    run_pool,
    seed_row,
    task_at,
    tasks,
)
from refwire.pipeline.machines import catalog, parse_transition
from refwire.sim.runner import run_seed

PLANTED = {"bug": "ack-before-deliver"}


def _stable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "wall_s"}


def test_row_has_every_column_and_matches_run_seed() -> None:
    row = seed_row("lumberjack", 3, campaign="c")
    assert [name for name, _ in CAMPAIGN_COLUMNS] == list(row)
    r = run_seed("lumberjack", 3)
    assert (row["outcome"], row["trace_hash"], row["sim_time"]) == (r.outcome, r.trace_hash, r.sim_time)
    assert row["transitions"] == sorted(r.transitions) and row["transitions"]
    assert row["replay"] == "refwire sim lumberjack --seed 3"
    assert json.loads(row["workload_json"]) == r.workload
    assert row["bytes_sent"] > 0 and row["events"] == r.counts["events_total"]
    assert _stable(seed_row("lumberjack", 3, campaign="c")) == _stable(row)


def test_planted_bug_gives_failure_rows_that_replay() -> None:
    rows = run_loop(["lumberjack"], 0, 3, campaign="c", workload=PLANTED)
    assert {r["failure_kind"] for r in rows} == {"violation:ack-before-delivery"}
    assert all(r["overridden"] and "--knobs" in r["replay"] for r in rows)
    summary = failure_summary(rows)
    assert summary == [
        {
            "protocol": "lumberjack",
            "failure_kind": "violation:ack-before-delivery",
            "runs": 3,
            "min_seed": 0,
            "example_seeds": [0, 1, 2],
            "replay": rows[0]["replay"],
        }
    ]


def test_exceptions_become_crash_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    row = seed_row("no-such-protocol", 7, campaign="c")
    assert row["outcome"] == "crash" and row["violation"] == "ValueError" and row["seed"] == 7
    assert [name for name, _ in CAMPAIGN_COLUMNS] == list(row)

    def boom(*a: Any, **k: Any) -> Any:
        raise RuntimeError("scenario bug")

    monkeypatch.setattr("refwire.sim.runner.run_seed", boom)
    row = seed_row("lumberjack", 1)
    assert row["failure_kind"] == "crash:RuntimeError" and "scenario bug" in row["detail"]


def test_protocols_come_from_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    import attrs

    from refwire.protocols import descriptor, names, registry

    assert resolve_protocols("all") == tuple(sorted(names("scenario")))
    monkeypatch.setitem(registry(), "zz-new", attrs.evolve(descriptor("lumberjack"), name="zz-new"))
    assert "zz-new" in resolve_protocols("all")
    assert resolve_protocols("lumberjack,lumberjack") == ("lumberjack",)
    with pytest.raises(ValueError, match="nope"):
        resolve_protocols("lumberjack,nope")


def test_task_ids_interleave_protocols() -> None:
    protos = ("a", "b", "c")
    assert [task_at(protos, 10, i) for i in range(7)] == list(tasks(protos, 10, 3))[:7]


def test_pool_runner_gives_the_loop_runners_rows() -> None:
    seen: list[tuple[int, int]] = []
    loop = run_loop(["lumberjack"], 5, 3, campaign="x")
    pool = run_pool(["lumberjack"], 5, 3, campaign="x", processes=2, progress=lambda d, t: seen.append((d, t)))
    assert [_stable(r) for r in pool] == [_stable(r) for r in loop]
    assert seen[-1] == (3, 3)


def test_lumberjack_catalog_parses_reported_transitions() -> None:
    table = catalog("lumberjack")
    assert table is not None
    known = {t.key: t for t in table}
    t = parse_transition("client:awaiting-ack-ack-last->idle", known)
    assert t is not None and (t.machine, t.source, t.input, t.target) == ("client", "awaiting-ack", "ack-last", "idle")
    reached = {k for k in seed_row("lumberjack", 1)["transitions"]}
    assert reached <= set(known), reached - set(known)
    assert catalog("no-such-protocol") is None
    assert campaign.KNOB_NAMES and all(f"knob_{k}" in dict(CAMPAIGN_COLUMNS) for k in campaign.KNOB_NAMES)


def test_campaign_exits_1_on_a_failing_seed_unless_failures_are_allowed(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from refwire.cli import main

    args = ["campaign", "--runner", "loop", "--protocols", "lumberjack", "--first-seed", "3", "--seeds", "1"]
    args += ["--out", str(tmp_path), "--workload", json.dumps(PLANTED)]
    assert main(args) == 1
    assert main([*args, "--allow-failures"]) == 0
    assert main([*args, "--strict"]) == 1  # the default, still accepted
    assert main([*args[:-1], '{"bug": "ack-before-delivery"}']) == 2
    assert "unknown planted bug 'ack-before-delivery' for lumberjack; known: ack-before-deliver" in capsys.readouterr().err
