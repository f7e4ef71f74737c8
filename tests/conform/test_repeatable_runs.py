"""Conformance runs you can repeat: every server catalogue, run twice
against the same long-lived refwire server under the same seed, gets the same
verdicts the second time, because every name and marker a case leaves on the
testee carries the run id (:mod:`refwire.conform.ids`).  A run that reuses a
run id against a server that was not reset is ERROR naming the cause, never
FAIL; the 2017 draft, which cannot create segments, stops before the cases
with one line saying what to do.  The servers are refwire's own reference
servers, the pytest plugin's fixtures (the draft: its store with the draft
front end, in-process)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from refwire.conform.cases.pravega_draft import CATALOGUE as DRAFT
from refwire.conform.ids import natural_key, new_run_id, seed_run_id
from refwire.conform.model import Verdict
from refwire.conform.runner import Catalogue, RunAborted, RunConfig, RunResult, run_cases
from refwire.protocols import descriptor
from refwire.reference import RunningServer

from .broken_draft import draft_store

pytestmark = pytest.mark.timeout(180)

SEED = 31
#: protocol -> the plugin fixture running refwire's own server
SERVERS = {"lumberjack": "lumberjack_server", "tank": "tank_broker", "pravega": "pravega_store", "seastar-rpc": "seastar_server"}


def _catalogue(protocol: str) -> Catalogue:
    cat: Catalogue = descriptor(protocol, "conform").load("conform")
    return cat


def _run(cat: Catalogue, server: RunningServer, run_id: str, include: str | None = None) -> RunResult:
    cfg = RunConfig(host=server.host, port=server.port, seed=SEED, run_id=run_id, sink=str(server.sink), jobs=6)
    return trio.run(lambda: run_cases(cat, cfg, include=include))


def _verdicts(run: RunResult) -> dict[str, Verdict]:
    return {r.case.id: r.verdict for r in run.results}


def _bad(run: RunResult) -> dict[str, Any]:
    return {r.case.id: (r.verdict.value, r.observed, r.reason) for r in run.results if r.verdict in (Verdict.FAIL, Verdict.ERROR)}


@pytest.mark.parametrize("protocol", sorted(SERVERS))
def test_a_second_run_against_the_same_server_gets_the_same_verdicts(protocol: str, request: pytest.FixtureRequest) -> None:
    server: RunningServer = request.getfixturevalue(SERVERS[protocol])
    cat = _catalogue(protocol)
    first = _run(cat, server, new_run_id())
    second = _run(cat, server, new_run_id())
    assert not _bad(first), _bad(first)
    assert _verdicts(second) == _verdicts(first), _bad(second)
    ran = [r for r in first.results if r.verdict is Verdict.PASS]
    assert len(ran) >= 5, _verdicts(first)


@pytest.mark.parametrize(
    ("protocol", "cases", "cause"),
    [
        ("tank", "tk.S2.1,tk.S3.1", "already exists on the broker"),
        ("pravega", "pv.S2.1,pv.S3.1", "already exists on the store"),
        ("lumberjack", "lj.S5.3", "already holds 2 events marked"),
    ],
)
def test_reusing_a_run_id_against_a_server_not_reset_is_error_with_the_cause(
    protocol: str, cases: str, cause: str, request: pytest.FixtureRequest
) -> None:
    server: RunningServer = request.getfixturevalue(SERVERS[protocol])
    cat = _catalogue(protocol)
    run_id = new_run_id()
    assert set(_verdicts(_run(cat, server, run_id, cases)).values()) == {Verdict.PASS}
    again = _run(cat, server, run_id, cases)
    assert {r.verdict for r in again.results} == {Verdict.ERROR}, _bad(again)
    for r in again.results:
        assert r.reason.startswith("testee state decides this case") and cause in r.reason, r.reason
        assert run_id in r.reason
        assert not r.harness_fault


async def _draft_run(run_id: str, segments_for: list[str]) -> RunResult:
    async with draft_store(None, segments_for) as (host, port):
        cfg = RunConfig(host=host, port=port, seed=SEED, run_id=run_id, jobs=6)
        first = await run_cases(DRAFT, cfg)
        if run_id == segments_for[-1] and len(segments_for) > 1:
            # the same store, the other run's segments: the same verdicts
            other = await run_cases(DRAFT, RunConfig(host=host, port=port, seed=SEED, run_id=segments_for[0], jobs=6))
            assert _verdicts(other) == _verdicts(first), _bad(other)
        return first


async def test_the_draft_second_run_on_its_own_segments_gets_the_same_verdicts() -> None:
    one, two = new_run_id(), new_run_id()
    run = await _draft_run(two, [one, two])
    assert not _bad(run), _bad(run)


async def test_the_draft_stops_before_the_cases_without_this_runs_segments() -> None:
    made, other = new_run_id(), new_run_id()
    async with draft_store(None, [made]) as (host, port):
        with pytest.raises(RunAborted) as err:
            await run_cases(DRAFT, RunConfig(host=host, port=port, seed=SEED, run_id=other))
    text = str(err.value)
    assert "\n" not in text
    assert f"holds no segment conform-pd-S1-1-{other}" in text
    assert f"python -m refwire.conform.cases.pravega_draft --run-id {other} HOST:PORT" in text


async def test_the_draft_stops_when_this_runs_segments_were_written() -> None:
    run_id = new_run_id()
    async with draft_store(None, [run_id]) as (host, port):
        cfg = RunConfig(host=host, port=port, seed=SEED, run_id=run_id, jobs=6)
        await run_cases(DRAFT, cfg, include="pd.S2.1")
        with pytest.raises(RunAborted, match=f"segment conform-pd-S2-1-{run_id} already holds data"):
            await run_cases(DRAFT, cfg, include="pd.S2.1")


def test_the_seeds_run_id_is_the_default_and_names_carry_it() -> None:
    cfg = RunConfig(seed=SEED)
    assert cfg.the_run_id == seed_run_id(SEED) and len(cfg.the_run_id) == 8
    case = DRAFT.case("pd.S2.1")
    assert cfg.replay_line(case).endswith(f"--cases pd.S2.1 --seed {SEED} --run-id {cfg.the_run_id}")


def test_natural_order() -> None:
    ids = ["lj.S6.10", "lj.S6.2", "lj.S10.1", "lj.C1.1", "lj.S6.1"]
    assert sorted(ids, key=natural_key) == ["lj.C1.1", "lj.S6.1", "lj.S6.2", "lj.S6.10", "lj.S10.1"]
