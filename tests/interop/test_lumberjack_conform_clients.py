"""`refwire conform lumberjack --client` against third-party Lumberjack clients:
pylogbeat, timbersnake's client and the npm lumberjack-client, each as an
``--exec`` testee.  Their documented bugs (specs/lumberjack/README.md §7) must
show as FAIL in the right case.  Fast cases only (the slow ones, keepalives-40s
and never-ack, take a minute each)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from refwire.conform.cases.lumberjack import CATALOGUE
from refwire.conform.clients import ClientSetup, run_client_case
from refwire.conform.model import Case, CaseResult, Verdict
from refwire.conform.runner import RunConfig, run_cases

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]

PEERS = Path(__file__).resolve().parent / "peers"
CONFORM_PEERS = Path(__file__).resolve().parents[1] / "conform" / "peers"
P, F, U = Verdict.PASS, Verdict.FAIL, Verdict.UNSUPPORTED


async def _matrix(template: str) -> dict[str, Verdict]:
    cfg = RunConfig(role="client", agent="peer", seed=7, jobs=4)
    setup = ClientSetup(exec_template=template)

    async def one(case: Case, first: bool) -> CaseResult:
        return await run_client_case(case, CATALOGUE, cfg, setup, 0)

    run = await run_cases(CATALOGUE, cfg, run_one=one)
    return {r.case.id: r.verdict for r in run.results if r.verdict is not Verdict.SKIPPED}


def _check(got: dict[str, Verdict], want: dict[str, Verdict]) -> None:
    diff = {cid: (got.get(cid), v) for cid, v in want.items() if got.get(cid) is not v}
    assert not diff, f"case: (got, want): {diff}"


async def test_pylogbeat(pylogbeat_send: Any) -> None:
    py = shlex.quote(pylogbeat_send.command()[0])
    script = shlex.quote(str(PEERS / "pylogbeat_send.py"))
    tls = "${REFWIRE_TLS_CA:+--tls-ca $REFWIRE_TLS_CA}"
    got = await _matrix(f"sh -c '{py} {script} {{host}} {{port}} {{events}} --batch 3 --timeout 35 {tls}'")
    _check(
        got,
        {
            "lj.C1.1": F,  # running counter: hangs on go-lumber's count ack from the 2nd window on (§7)
            "lj.C1.2": P,
            "lj.C1.3": F,  # bare recv(1), recv(1), recv(4): an ack split across segments is misread
            "lj.C2.1": P,
            "lj.C2.3": U,  # v2 only
            "lj.C3.2": F,  # no reconnect and resend: the application must retry
            "lj.C4.1": F,  # waits for an ack EQUAL to its last seq: does not close on one above it (§7)
            "lj.C4.2": F,  # same: keeps waiting after an ack going backwards
            "lj.C4.3": F,  # ignores the ack's version byte (§7)
            "lj.C4.4": P,
            "lj.C5.1": P,
        },
    )


async def test_timbersnake(timbersnake_send: Any) -> None:
    py = shlex.quote(sys.executable)
    script = shlex.quote(str(CONFORM_PEERS / "timbersnake_client.py"))
    got = await _matrix(f"{py} {script} {{host}} {{port}} {{events}} {{tls_ca}}")
    # W 3 hard-coded (inside the C): only a send of exactly 3 events, acked at
    # once and in full, works (lj.C1.3 and lj.C5.1 ask for 3); one ack of any
    # value is success (§7).
    _check(got, {cid: (P if cid in ("lj.C1.3", "lj.C5.1") else F) for cid in got})


async def test_npm_lumberjack_client(lumberjack_client_send: Any) -> None:
    node = shlex.quote(lumberjack_client_send.command()[0])
    script = shlex.quote(str(CONFORM_PEERS / "lumberjack_client.js"))
    import os

    os.environ.setdefault("NODE_PATH", (lumberjack_client_send.env or {}).get("NODE_PATH", ""))
    got = await _matrix(f"{node} {script} {{host}} {{port}} {{events}} {{tls_ca}}")
    # Never reads acks, never resends (§7): right only when the server acks at once.
    _check(
        got,
        {
            "lj.C1.1": P,
            "lj.C2.1": F,
            "lj.C2.3": U,
            "lj.C3.2": F,
            "lj.C4.1": F,
            "lj.C4.2": F,
            "lj.C4.3": F,
            "lj.C4.4": F,
            "lj.C5.1": P,
        },
    )
