"""`refwire conform seastar-rpc --client`: every client case PASSes with
refwire's own client (the specs/seastar-rpc/README.md §12 contract) and FAILs
with at least one deliberately broken client; --exec with a wrapper script, and
exit 127 (UNSUPPORTED)."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
import trio

from refwire.conform.cases.seastar_rpc import CATALOGUE, contract_client
from refwire.conform.clients import ClientSetup, run_client_case
from refwire.conform.model import Verdict, id_key
from refwire.conform.runner import RunConfig, RunResult, run_cases

pytestmark = pytest.mark.timeout(120)

PEER = Path(__file__).resolve().parent / "peers" / "seastar_client.py"
CLIENT_CASES = sorted((c for c in CATALOGUE.cases if c.role == "client"), key=lambda c: id_key(c.id))

#: broken client -> what is wrong, the cases that must FAIL it.
BROKEN = {
    "short-timeout": ("gives each call 50 ms", {"ss.C1.1"}),
    "in-order": ("pairs replies with calls by arrival order, not msg_id", {"ss.C1.2"}),
    "exception-is-success": ("counts a USER exception as a matched echo", {"ss.C1.3"}),
    "exit0-on-close": ("exits 0 when the connection fails", {"ss.C1.4"}),
    "no-compare": ("never compares the reply with the payload", {"ss.C1.5"}),
}


async def _run(fault: str | None, *, template: str | None = None, include: str | None = None) -> RunResult:
    cfg = RunConfig(role="client", agent=fault or "refwire-client", seed=5, jobs=5)

    async def in_process(values: Mapping[str, str]) -> int:
        async def connect() -> trio.abc.Stream:
            return await trio.open_tcp_stream(values["host"], int(values["port"]))

        return await contract_client(connect, values, fault=fault or "")

    setup = ClientSetup(exec_template=template, in_process=None if template else in_process)

    async def one(case, first):  # type: ignore[no-untyped-def]
        return await run_client_case(case, CATALOGUE, cfg, setup, 0)

    return await run_cases(CATALOGUE, cfg, include=include, run_one=one)


def _verdicts(run: RunResult) -> dict[str, Verdict]:
    return {r.case.id: r.verdict for r in run.results}


def test_client_catalogue() -> None:
    assert len(CLIENT_CASES) >= 4
    for c in CLIENT_CASES:
        assert c.events > 0 and c.id.startswith("ss.C") and c.requirement.startswith("specs/seastar-rpc/README.md §")


async def test_client_kill_matrix() -> None:
    matrix: dict[str, dict[str, Verdict]] = {}
    detail: dict[tuple[str, str], str] = {}

    async def one(name: str | None) -> None:
        run = await _run(name)
        matrix[name or "refwire"] = _verdicts(run)
        for r in run.results:
            detail[name or "refwire", r.case.id] = f"{r.verdict.value}: observed {r.observed}; {r.reason}"

    async with trio.open_nursery() as nursery:
        for name in (None, *BROKEN):
            nursery.start_soon(one, name)
    lines = ["| broken client | what is wrong | cases that FAIL it |", "| --- | --- | --- |"]
    for name, (wrong, _) in BROKEN.items():
        fails = ", ".join(c for c, v in sorted(matrix[name].items(), key=lambda kv: id_key(kv[0])) if v is Verdict.FAIL)
        lines.append(f"| `{name}` | {wrong} | {fails or 'none'} |")
    table = "\n".join(lines) + "\n"
    print("\nseastar-rpc client kill matrix\n" + table)
    if os.environ.get("REFWIRE_KILL_MATRIX"):
        with Path(os.environ["REFWIRE_KILL_MATRIX"]).open("a", encoding="utf-8") as f:
            f.write("\n" + table)
    bad = {c: detail["refwire", c] for c, v in matrix["refwire"].items() if v is not Verdict.PASS}
    assert not bad, bad
    assert set(matrix["refwire"]) == {c.id for c in CLIENT_CASES}
    for name, (_, aimed) in BROKEN.items():
        for cid in aimed:
            assert matrix[name][cid] is Verdict.FAIL, (name, cid, detail[name, cid])
    unkilled = [c.id for c in CLIENT_CASES if not any(matrix[b][c.id] is Verdict.FAIL for b in BROKEN)]
    assert not unkilled, unkilled
    assert not [k for k, v in detail.items() if v.startswith("ERROR")]


async def test_exec_wrapper_script_and_unsupported() -> None:
    base = shlex.join([sys.executable, str(PEER)]) + " {host} {port} {events} {seed}"
    run = await _run(None, template=base, include="ss.C1.2,ss.C1.3")
    assert _verdicts(run) == {"ss.C1.2": Verdict.PASS, "ss.C1.3": Verdict.PASS}, [(r.observed, r.reason) for r in run.results]
    run = await _run(None, template=base + " --unsupported", include="ss.C1.1")
    assert _verdicts(run) == {"ss.C1.1": Verdict.UNSUPPORTED}
