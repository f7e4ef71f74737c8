"""TANK conformance cases (``refwire conform tank``): every fast server case
PASSes against refwire's broker and FAILs against at least one deliberately
broken broker (``broken_tank.py``), each broken broker is caught by the cases
aimed at it; the CLI and ``--sim`` run them.  The matrix is written as
Markdown to ``$REFWIRE_KILL_MATRIX`` when set."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from support.confirm_alone import confirm_alone

from refwire.cli import main
from refwire.conform.cases.tank import CATALOGUE
from refwire.conform.model import Verdict
from refwire.conform.runner import RunConfig, RunResult, run_cases
from refwire.conform.simulated import run_in_simulator

from .broken_tank import BROKEN, Broken, broker

pytestmark = pytest.mark.timeout(120)

FAST = sorted(c.id for c in CATALOGUE.cases if c.role == "server" and "slow" not in c.tags)
#: Cases whose broken broker behaves exactly as the real one does: NON-STRICT, not FAIL.
NON_STRICT_AIMS = {("truncates-varints", "tk.S4.4")}


async def _run(broken: Broken | None, include: list[str], *, alone: bool = False) -> RunResult:
    """``alone``: one job at time scale 1 (a verdict confirmed, see support.confirm_alone)."""
    async with broker(broken) as (host, port):
        cfg = RunConfig(
            host=host,
            port=port,
            agent=broken.name if broken else "refwire",
            seed=3,
            jobs=1 if alone else 8,
            time_scale=1.0 if alone else 0.7,
        )
        return await run_cases(CATALOGUE, cfg, include=include)


async def _confirmed(broken: Broken | None, include: list[str], want: Callable[[str], Verdict]) -> RunResult:
    """The run, each verdict other than ``want(case)`` confirmed by that case alone at time scale 1
    (a busy machine can starve eight cases at time scale 0.7)."""
    return await confirm_alone(await _run(broken, include), want, lambda cid: _run(broken, [cid], alone=True))


def _aim(name: str, cid: str) -> Verdict:
    return Verdict.NON_STRICT if (name, cid) in NON_STRICT_AIMS else Verdict.FAIL


def verdicts(run: RunResult) -> dict[str, Verdict]:
    return {r.case.id: r.verdict for r in run.results}


def test_catalogue() -> None:
    server = [c for c in CATALOGUE.cases if c.role == "server"]
    assert len(server) >= 10
    assert all(c.id.startswith("tk.S") and c.requirement.startswith("specs/tank/README.md §") for c in server)


async def test_every_fast_case_passes_against_refwire() -> None:
    run = await _confirmed(None, FAST, lambda _: Verdict.PASS)
    bad = {r.case.id: (r.expected, r.observed, r.reason) for r in run.results if r.verdict is not Verdict.PASS}
    assert not bad, bad


async def test_kill_matrix() -> None:
    rows = []
    killed: set[str] = set()
    for b in BROKEN:
        run = await _confirmed(b, list(b.aimed_at), functools.partial(_aim, b.name))
        v = verdicts(run)
        failed = sorted(cid for cid, x in v.items() if x is Verdict.FAIL)
        non_strict = sorted(cid for cid, x in v.items() if x is Verdict.NON_STRICT)
        want_fail = {c for c in b.aimed_at if (b.name, c) not in NON_STRICT_AIMS}
        assert want_fail <= set(failed), (b.name, {r.case.id: (r.verdict, r.observed, r.reason) for r in run.results})
        assert set(b.aimed_at) - want_fail <= set(non_strict), (b.name, v)
        killed |= set(failed) | set(non_strict)
        rows.append(f"| `{b.name}` | {b.wrong} | {', '.join(failed) or 'none'} | {', '.join(non_strict)} |")
    assert set(FAST) <= killed, sorted(set(FAST) - killed)
    table = "| broken broker | what is wrong | cases that FAIL it | NON-STRICT |\n| --- | --- | --- | --- |\n" + "\n".join(rows)
    if os.environ.get("REFWIRE_KILL_MATRIX"):
        Path(os.environ["REFWIRE_KILL_MATRIX"]).write_text(table + "\n")


async def _under_tank_broker(name: str, case: str) -> tuple[Verdict, tuple[str, ...]]:
    """The verdict of ``case`` against the broken broker ``name`` under --profile tank-broker, and the profiles it matched."""
    broken = next(b for b in BROKEN if b.name == name)
    async with broker(broken) as (host, port):
        run = await run_cases(CATALOGUE, RunConfig(host=host, port=port, profile="tank-broker", seed=3), include=[case])
    (r,) = run.results
    return r.verdict, r.matched_profiles


async def test_the_real_brokers_profile_passes_a_truncated_five_byte_varint() -> None:
    """The real broker keeps a 5-byte varint's low 32 bits (documented: PASS under its profile)."""
    assert await _under_tank_broker("truncates-varints", "tk.S4.4") == (Verdict.PASS, ("tank-broker",))


async def test_the_real_brokers_profile_fails_a_six_byte_varint() -> None:
    """The real broker refuses a 6-byte varint as strict does: accepting one is no profile's behaviour."""
    assert await _under_tank_broker("accepts-6-byte-varints", "tk.S4.1") == (Verdict.FAIL, ())


async def test_the_real_brokers_profile_names_its_unchecked_bundles_a_bug() -> None:
    """Storing a message cut short is the real broker's documented bug: FAIL under its own profile too."""
    assert await _under_tank_broker("stores-unchecked-bundles", "tk.S4.5") == (Verdict.FAIL, ("tank-broker",))


def test_the_cases_inside_the_simulator_same_seed_same_trace() -> None:
    a = run_in_simulator(CATALOGUE, RunConfig(seed=5))
    b = run_in_simulator(CATALOGUE, RunConfig(seed=5))
    assert a.trace_hash == b.trace_hash
    assert {r.case.id: r.verdict for r in a.result.results if r.verdict is not Verdict.SKIPPED} == dict.fromkeys(
        FAST, Verdict.PASS
    )


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conform", "list", "tank"]) == 0
    assert "tk.S2.1" in capsys.readouterr().out
    assert main(["conform", "tank", "--server", "127.0.0.1:1"]) == 2
