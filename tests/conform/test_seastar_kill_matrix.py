"""The Seastar RPC kill matrix: every server case against refwire's own server
(all PASS) and against each deliberately broken one (``broken_seastar.py``).

A case that no broken server makes FAIL would pass a server that gets its
requirement (``specs/seastar-rpc/README.md`` §2-§6, §11) wrong.  The matrix is
printed (``pytest -s``) and written as Markdown to ``$REFWIRE_KILL_MATRIX``
when set.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio

from refwire.conform.cases.seastar_rpc import CATALOGUE
from refwire.conform.model import Verdict, id_key
from refwire.conform.runner import RunConfig, RunResult, run_cases

from .broken_seastar import BROKEN, Broken, broken_seastar

pytestmark = pytest.mark.timeout(120)

SERVER = sorted((c for c in CATALOGUE.cases if c.role == "server"), key=lambda c: id_key(c.id))
AT_ONCE = 4


async def _run(broken: Broken | None, only: str | None = None) -> RunResult:
    async with broken_seastar(broken) as (host, port):
        cfg = RunConfig(host=host, port=port, agent=broken.name if broken else "refwire", seed=13, jobs=1 if only else 8)
        return await run_cases(CATALOGUE, cfg, include=[only] if only else None)


def markdown(matrix: dict[str, dict[str, Verdict]]) -> str:
    lines = ["| broken server | what is wrong | cases that FAIL it |", "| --- | --- | --- |"]
    for b in BROKEN:
        fails = ", ".join(c for c, v in matrix[b.name].items() if v is Verdict.FAIL) or "none"
        lines.append(f"| `{b.name}` | {b.wrong} | {fails} |")
    return "\n".join(lines) + "\n"


async def test_every_server_case_kills_a_broken_server_and_passes_refwire() -> None:
    t0 = time.monotonic()
    matrix: dict[str, dict[str, Verdict]] = {}
    detail: dict[tuple[str, str], str] = {}

    def record(name: str, run: RunResult) -> None:
        matrix[name] = {r.case.id: r.verdict for r in sorted(run.results, key=lambda r: id_key(r.case.id))}
        for r in run.results:
            detail[name, r.case.id] = f"{r.verdict.value}: expected {r.expected}; observed {r.observed}; {r.reason}"

    record("refwire", await _run(None))
    limiter = trio.CapacityLimiter(AT_ONCE)

    async def one(b: Broken) -> None:
        async with limiter:
            record(b.name, await _run(b))

    async with trio.open_nursery() as nursery:
        for b in BROKEN:
            nursery.start_soon(one, b)
    # A verdict the assertions would reject is confirmed alone (two shared cores can starve a run).
    suspects = [(None, c) for c, v in matrix["refwire"].items() if v is not Verdict.PASS]
    suspects += [(b, c) for b in BROKEN for c in b.aimed_at if matrix[b.name][c] is not Verdict.FAIL]
    suspects += [(b, c) for b in BROKEN for c, v in b.expect if matrix[b.name][c] is not v]
    for b, cid in suspects:
        (again,) = (await _run(b, only=cid)).results
        name = b.name if b else "refwire"
        matrix[name][cid] = again.verdict
        detail[name, cid] = f"{again.verdict.value}: observed {again.observed}; {again.reason}"
    table = markdown(matrix)
    print(
        f"\nseastar-rpc kill matrix ({len(SERVER)} cases x {len(BROKEN)} broken servers, {time.monotonic() - t0:.1f}s)\n{table}"
    )
    if os.environ.get("REFWIRE_KILL_MATRIX"):
        Path(os.environ["REFWIRE_KILL_MATRIX"]).write_text(table, encoding="utf-8")

    bad = {c: detail["refwire", c] for c, v in matrix["refwire"].items() if v is not Verdict.PASS}
    assert not bad, bad
    assert set(matrix["refwire"]) == {c.id for c in SERVER}
    unkilled = [c.id for c in SERVER if not any(matrix[b.name][c.id] is Verdict.FAIL for b in BROKEN)]
    assert not unkilled, unkilled
    for b in BROKEN:
        for cid in b.aimed_at:
            assert matrix[b.name][cid] is Verdict.FAIL, (b.name, cid, detail[b.name, cid])
        for cid, v in b.expect:
            assert matrix[b.name][cid] is v, (b.name, cid, detail[b.name, cid])
    errors = {k: v for k, v in detail.items() if v.startswith("ERROR")}
    assert not errors, errors
