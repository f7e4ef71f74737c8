"""Pravega conformance server cases (``refwire conform pravega --server``):
every case PASSes against refwire's segment store and FAILs against at least
one deliberately broken store (``broken_pravega.py``); each broken store is
caught by the cases aimed at it; the cases run inside the simulator with the
same trace for the same seed.  The matrix is written as Markdown to
``$REFWIRE_KILL_MATRIX`` when set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio
from support.confirm_alone import confirm_alone

from refwire.cli import main
from refwire.conform.cases.pravega import CATALOGUE
from refwire.conform.model import Verdict
from refwire.conform.runner import RunConfig, RunResult, run_cases
from refwire.conform.simulated import run_in_simulator

from .broken_pravega import BROKEN, Broken, store

pytestmark = pytest.mark.timeout(120)

SERVER = sorted(c.id for c in CATALOGUE.cases if c.role == "server" and "slow" not in c.tags)


async def _run(broken: Broken | None, include: list[str], seed: int = 3, *, alone: bool = False) -> RunResult:
    """``alone``: one job at time scale 1 (a verdict confirmed, see support.confirm_alone)."""
    async with store(broken) as (host, port):
        cfg = RunConfig(
            host=host,
            port=port,
            agent=broken.name if broken else "refwire",
            seed=seed,
            jobs=1 if alone else 8,
            time_scale=1.0 if alone else 0.7,
        )
        return await run_cases(CATALOGUE, cfg, include=include)


async def _confirmed(broken: Broken | None, include: list[str], want: Verdict, seed: int = 3) -> RunResult:
    """The run, each verdict other than ``want`` confirmed by that case alone at time scale 1."""
    run = await _run(broken, include, seed)
    return await confirm_alone(run, lambda _: want, lambda cid: _run(broken, [cid], seed, alone=True))


def verdicts(run: RunResult) -> dict[str, Verdict]:
    return {r.case.id: r.verdict for r in run.results}


def test_catalogue() -> None:
    server = [c for c in CATALOGUE.cases if c.role == "server"]
    client = [c for c in CATALOGUE.cases if c.role == "client"]
    assert len(server) >= 10 and len(client) >= 4
    assert all(c.id.startswith("pv.") and c.requirement.startswith("specs/pravega/README.md §") for c in server + client)
    assert set(CATALOGUE.profiles) == {"strict", "java-server", "rust-client", "java-client"}


@pytest.mark.parametrize("seed", [3, 11])
async def test_every_case_passes_against_refwire(seed: int) -> None:
    run = await _confirmed(None, SERVER, Verdict.PASS, seed)
    bad = {r.case.id: (r.expected, r.observed, r.reason) for r in run.results if r.verdict is not Verdict.PASS}
    assert not bad, bad


async def test_kill_matrix() -> None:
    runs: dict[str, RunResult] = {}

    async def one(b: Broken) -> None:
        runs[b.name] = await _confirmed(b, list(b.aimed_at), Verdict.FAIL)

    async with trio.open_nursery() as nursery:  # every broken store at once, each on its own port
        for b in BROKEN:
            nursery.start_soon(one, b)
    rows = []
    killed: set[str] = set()
    for b in BROKEN:
        run = runs[b.name]
        v = verdicts(run)
        failed = sorted(cid for cid, x in v.items() if x is Verdict.FAIL)
        assert set(b.aimed_at) <= set(failed), (b.name, {r.case.id: (r.verdict, r.observed, r.reason) for r in run.results})
        killed |= set(failed)
        rows.append(f"| `{b.name}` | {b.wrong} | {', '.join(failed)} |")
    assert set(SERVER) <= killed, sorted(set(SERVER) - killed)
    table = "| broken store | what is wrong | cases that FAIL it |\n| --- | --- | --- |\n" + "\n".join(rows)
    if os.environ.get("REFWIRE_KILL_MATRIX"):
        Path(os.environ["REFWIRE_KILL_MATRIX"]).write_text(table + "\n")


def test_the_cases_inside_the_simulator_same_seed_same_trace() -> None:
    a = run_in_simulator(CATALOGUE, RunConfig(seed=5))
    b = run_in_simulator(CATALOGUE, RunConfig(seed=5))
    assert a.trace_hash == b.trace_hash
    assert {r.case.id: r.verdict for r in a.result.results} == dict.fromkeys(SERVER, Verdict.PASS)


def test_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conform", "list", "pravega"]) == 0
    out = capsys.readouterr().out
    assert "pv.S2.5" in out and "pv.C1.3" in out
    assert main(["conform", "pravega", "--server", "127.0.0.1:1"]) == 2
