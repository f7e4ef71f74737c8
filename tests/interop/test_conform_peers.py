"""`refwire conform lumberjack --server` against a third-party server: timbersnake
0.1.0 (PyPI).  Its bugs documented in specs/lumberjack/README.md §7 must show as
FAIL in the cases that test them, and what it does right must PASS."""

from __future__ import annotations

from typing import Any

import pytest

from refwire.conform.cases.lumberjack import CATALOGUE
from refwire.conform.model import Verdict
from refwire.conform.runner import RunConfig, run_cases

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

#: case -> (verdict, why), from specs/lumberjack/README.md §7 (timbersnake's server).
EXPECTED = {
    # "the plain-J path calls the non-existent json.parse and crashes the connection (every uncompressed J)"
    "lj.S1.1": (Verdict.FAIL, "plain J crashes the connection"),
    "lj.S2.2": (Verdict.FAIL, "plain J crashes the connection"),
    "lj.S3.1": (Verdict.FAIL, "plain J crashes the connection"),
    # "acks ... each C with its last frame's seq", "W ignored": one C holding the window is acked right
    "lj.S4.1": (Verdict.PASS, "a C holding the whole window is acked with its last seq"),
    "lj.S4.3": (Verdict.PASS, "W ignored; the C is acked with its last frame's seq"),
    # "nested C unsupported (the connection idles)"
    "lj.S4.2": (Verdict.FAIL, "nested C idles"),
    # no inflate limit: the bomb is inflated (or the connection idles), never refused
    "lj.S4.4": (Verdict.FAIL, "no limit on the inflated size"),
}


async def test_timbersnake_server_under_test(timbersnake_server: Any) -> None:
    async with timbersnake_server(2) as ts:
        cfg = RunConfig(
            host="127.0.0.1", port=ts.port, agent="timbersnake-0.1.0", seed=1
        )  # one at a time: the bomb blocks its event loop
        run = await run_cases(CATALOGUE, cfg, include=",".join(EXPECTED))
    got = {r.case.id: r for r in run.results}
    wrong = {
        cid: (want.value, why, got[cid].verdict.value, got[cid].observed)
        for cid, (want, why) in EXPECTED.items()
        if got[cid].verdict is not want
    }
    assert not wrong, wrong
    assert got["lj.S1.1"].close["by"] == "testee"  # the crash closes the connection
