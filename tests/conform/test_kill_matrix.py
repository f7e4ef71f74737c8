"""The kill matrix: every fast Lumberjack server case against refwire's own
server and against each deliberately broken one (``broken_servers.py``).

A case that no broken server makes FAIL would pass a server that gets its
requirement (``specs/lumberjack/README.md`` §3-§4) wrong.  The test asserts
that every fast server case PASSes against refwire and FAILs against at least
one broken server, that each broken server is caught by the cases aimed at
it, and that the raw server without a fault passes the cases its faults are
aimed at (so those kills come from the fault alone).  The matrix is printed
(``pytest -s``) and written as Markdown to ``$REFWIRE_KILL_MATRIX`` when set.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio

from refwire.conform.cases.lumberjack import CATALOGUE
from refwire.conform.model import Verdict
from refwire.conform.runner import RunConfig, RunResult, run_cases

from .broken_servers import BROKEN, RAW_BASELINE, RAW_BASELINE_PASSES, Broken, broken_server

pytestmark = pytest.mark.timeout(180)

FAST = sorted((c for c in CATALOGUE.cases if c.role == "server" and "slow" not in c.tags), key=lambda c: c.id)
#: The bomb inflates 64 MiB or more in this process: run alone, after the others.
BOMB = "lj.S4.4"
TIME_SCALE = 0.5
#: Broken servers run this many at a time (most of a run is waiting for closes that never come).
AT_ONCE = 3

#: Cases whose only failure mode a plausible server shows is a documented
#: behaviour of another profile: there the broken server must give NON-STRICT.
NON_STRICT_AIMS = {
    ("no-window-limit", "lj.S6.10"),
    ("no-json-validation", "lj.S6.3"),
    # whole frames from a stream with no end: what go-lumber and Logstash do
    ("trusts-truncated-zlib", "lj.S4.7"),
}


async def _run(broken: Broken | None, tmp: Path, only: str | None = None) -> RunResult:
    """All fast cases (the bomb alone, last); ``only``: that case alone at time scale 1."""
    sink = tmp / f"sink-{broken.name if broken else 'refwire'}{'-' + only if only else ''}.jsonl"
    async with broken_server(broken, sink) as (host, port):
        cfg = RunConfig(
            host=host,
            port=port,
            agent=broken.name if broken else "refwire",
            seed=11,
            sink=str(sink),
            jobs=1 if only else 16,
            time_scale=1.0 if only else TIME_SCALE,
        )
        if only:
            return await run_cases(CATALOGUE, cfg, include=[only])
        run = await run_cases(CATALOGUE, cfg, include=[c.id for c in FAST if c.id != BOMB])
        return await run_cases(CATALOGUE, cfg, include=[BOMB], run=run)


def _kills(matrix: dict[str, dict[str, Verdict]], b: Broken, verdict: Verdict = Verdict.FAIL) -> list[str]:
    """The cases giving ``verdict`` against ``b`` because of its fault: for a raw
    server, not those its fault-free baseline gets wrong too (it speaks no v1)."""
    base = matrix["raw-baseline"] if b.raw is not None else {}
    return [c for c, v in matrix[b.name].items() if v is verdict and base.get(c, Verdict.PASS) is Verdict.PASS]


def _markdown(matrix: dict[str, dict[str, Verdict]]) -> str:
    lines = ["| broken server | what is wrong | cases that FAIL it | NON-STRICT |", "| --- | --- | --- | --- |"]
    for b in BROKEN:
        fails = ", ".join(_kills(matrix, b)) or "none"
        lenient = ", ".join(_kills(matrix, b, Verdict.NON_STRICT))
        lines.append(f"| `{b.name}` | {b.wrong} | {fails} | {lenient} |")
    return "\n".join(lines) + "\n"


def _aim(name: str, cid: str) -> Verdict:
    return Verdict.NON_STRICT if (name, cid) in NON_STRICT_AIMS else Verdict.FAIL


async def test_every_server_case_kills_a_broken_server_and_passes_refwire(tmp_path: Path) -> None:
    t0 = time.monotonic()
    matrix: dict[str, dict[str, Verdict]] = {}
    detail: dict[tuple[str, str], str] = {}

    async def one(broken: Broken | None, limiter: trio.CapacityLimiter) -> None:
        async with limiter:
            run = await _run(broken, tmp_path)
        name = broken.name if broken else "refwire"
        matrix[name] = {
            r.case.id: r.verdict for r in sorted(run.results, key=lambda r: [int(x) for x in r.case.id[4:].split(".")])
        }
        for r in run.results:
            detail[name, r.case.id] = f"{r.verdict.value}: observed {r.observed}; {r.reason}"

    # refwire's own server and the raw baseline first, alone: the reference must not share the loop's time.
    await one(None, trio.CapacityLimiter(1))
    await one(RAW_BASELINE, trio.CapacityLimiter(1))
    limiter = trio.CapacityLimiter(AT_ONCE)
    async with trio.open_nursery() as nursery:
        for b in BROKEN:
            nursery.start_soon(one, b, limiter)

    # A verdict the assertions below would reject is confirmed by running that case
    # alone at time scale 1 (two shared cores can starve a run at time scale 0.5).
    by_name = {b.name: b for b in (RAW_BASELINE, *BROKEN)}
    suspects = [("refwire", c) for c, v in matrix["refwire"].items() if v is not Verdict.PASS]
    suspects += [("raw-baseline", c) for c in RAW_BASELINE_PASSES if matrix["raw-baseline"][c] is not Verdict.PASS]
    for b in BROKEN:
        suspects += [(b.name, c) for c in b.aimed_at if matrix[b.name][c] is not _aim(b.name, c)]
    for name, cid in suspects:
        (again,) = (await _run(by_name.get(name), tmp_path, only=cid)).results
        print(f"confirming {name} x {cid}: {matrix[name][cid].value} at time scale {TIME_SCALE}, {again.verdict.value} alone")
        matrix[name][cid] = again.verdict
        detail[name, cid] = f"{again.verdict.value}: observed {again.observed}; {again.reason}"
    table = _markdown(matrix)
    print(f"\nkill matrix ({len(FAST)} cases x {len(BROKEN)} broken servers, {time.monotonic() - t0:.1f}s)\n{table}")
    if os.environ.get("REFWIRE_KILL_MATRIX"):
        Path(os.environ["REFWIRE_KILL_MATRIX"]).write_text(table, encoding="utf-8")

    # refwire's own server passes every fast case
    bad = {cid: detail["refwire", cid] for cid, v in matrix["refwire"].items() if v is not Verdict.PASS}
    assert not bad, bad
    assert set(matrix["refwire"]) == {c.id for c in FAST}
    # every case FAILs against at least one broken server
    unkilled = [c.id for c in FAST if not any(c.id in _kills(matrix, b) for b in BROKEN)]
    assert not unkilled, unkilled
    # each broken server is caught by the cases aimed at it
    for b in BROKEN:
        for cid in b.aimed_at:
            assert matrix[b.name][cid] is _aim(b.name, cid), (b.name, cid, detail[b.name, cid])
    # the raw server without a fault passes the cases its faults are aimed at
    raw = {cid: detail["raw-baseline", cid] for cid in RAW_BASELINE_PASSES if matrix["raw-baseline"][cid] is not Verdict.PASS}
    assert not raw, raw
    # no harness fault anywhere: a broken testee is never the runner's ERROR
    errors = {k: v for k, v in detail.items() if v.startswith("ERROR")}
    assert not errors, errors
