"""`refwire conform pravega --client` with the real Pravega client (PyPI
``pravega==0.3.8``, Rust core) as the testee, through the case's controller:
it must behave as the spec's Rust-client profile says (specs/pravega/README.md
§5.6, §7.1, §8, §14)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from refwire.conform.cases.pravega import CATALOGUE
from refwire.conform.clients import ClientSetup, run_client_case
from refwire.conform.model import Verdict
from refwire.conform.runner import RunConfig, run_cases

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]

PEER = Path(__file__).resolve().parents[1] / "conform" / "peers" / "pravega_rust_client.py"
TEMPLATE = shlex.join([sys.executable, str(PEER)]) + " {controller} {slug} {events} {seed}"


async def _run(cases: list[str], **cfg_kw: Any) -> dict[str, Any]:
    cfg = RunConfig(role="client", agent="pravega-0.3.8", profile="rust-client", seed=7, jobs=4, **cfg_kw)
    setup = ClientSetup(exec_template=TEMPLATE)

    async def one(case: Any, first: bool) -> Any:
        return await run_client_case(case, CATALOGUE, cfg, setup, 0)

    with trio.fail_after(150):
        run = await run_cases(CATALOGUE, cfg, include=cases, run_one=one)
    return {r.case.id: r for r in run.results}


@pytest.mark.usefixtures("pravega_client")
async def test_the_real_client_passes_the_rust_client_profile() -> None:
    got = await _run(["pv.C1.1", "pv.C1.2", "pv.C1.3", "pv.C1.4"])
    wrong_host = got.pop("pv.C1.2")
    assert {cid: r.verdict for cid, r in got.items()} == dict.fromkeys(got, Verdict.PASS), {
        cid: (r.observed, r.reason) for cid, r in got.items() if r.verdict is not Verdict.PASS
    }
    # After a WrongHost the real client sets up again and writes every event once; once in a
    # loaded CI run it then stalled (it never read back) until the budget killed it.  The store
    # side must hold in both: each event stored once, and no false success.
    assert "each stored once" in wrong_host.observed and "stored 10 events" in wrong_host.observed
    assert wrong_host.verdict is Verdict.PASS or "exit killed" in wrong_host.observed, wrong_host.observed
    # it found the store through the controller, and read back through a reader group (table segments)
    assert "ReadTableEntriesDelta" in got["pv.C1.1"].observed
    assert "exit 0" in got["pv.C1.3"].observed


@pytest.mark.usefixtures("pravega_client")
async def test_the_real_client_refuses_an_incompatible_store() -> None:
    got = await _run(["pv.C1.5"], timeout=6.0)
    r = got["pv.C1.5"]
    assert r.verdict is Verdict.PASS, (r.observed, r.reason)
    assert "stored 0 events" in r.observed  # it never appended: it keeps retrying the Hello until killed
