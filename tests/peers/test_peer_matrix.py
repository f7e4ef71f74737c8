"""The compatibility matrix page (docs/guides/compatibility.rst) is what the
real peers' runs give.

Every program's run is a session fixture (conftest.py), so this test gets the
same runs the per-peer modules assert.  ``REFWIRE_WRITE_MATRIX=1`` (what
``scripts/compat-matrix.sh`` sets) rewrites the page instead of comparing.
"""

from __future__ import annotations

import difflib
import os

import pytest
from compat import render
from real_peers import CONFORM_TIMEOUT, ROOT, PeerRun, timeout_for

pytestmark = [pytest.mark.peers, pytest.mark.timeout(sum(timeout_for(p) for p in ("go-lumber", "logstash", "tank", "seastar")) + 6 * CONFORM_TIMEOUT)]

PAGE = ROOT / "docs" / "guides" / "compatibility.rst"

#: Every program run, in the page's column order (``fixture:key``: one run of a fixture's dict).
RUNS = (
    "go_lumber_server_run",
    "logstash_server_run",
    "timbersnake_server_run",
    "tank_server_run",
    "seastar_server_run",
    "seastar_single_factory_run",
    "held_runs:go-lumber",
    "held_runs:logstash",
    "go_lumber_client_plain_run",
    "go_lumber_client_zlib3_run",
    "pylogbeat_client_run",
    "timbersnake_client_run",
    "npm_client_run",
    "tank_cli_bundle1_run",
    "tank_cli_one_bundle_run",
    "seastar_client_run",
    "pravega_rust_client_run",
)


def test_the_compatibility_page_is_what_the_runs_give(request: pytest.FixtureRequest) -> None:
    runs: list[PeerRun] = []
    for entry in RUNS:
        name, _, key = entry.partition(":")
        value = request.getfixturevalue(name)
        runs.append(value[key] if key else value)
    for run in runs:
        if run.verdicts.unavailable is not None:
            pytest.fail(run.verdicts.unavailable, pytrace=False)
    page = render(runs)
    if os.environ.get("REFWIRE_WRITE_MATRIX", "").strip() in ("1", "true", "yes"):
        PAGE.write_text(page, encoding="utf-8")
        return
    committed = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    if committed != page:
        diff = "".join(difflib.unified_diff(committed.splitlines(True), page.splitlines(True), str(PAGE), "this run"))
        pytest.fail(f"{PAGE.name} differs from what the runs give (rewrite it: bash scripts/compat-matrix.sh):\n{diff}", pytrace=False)


def test_a_cell_that_varies_shows_every_verdict_it_can_get_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    """No peer runs here: the page made from a Seastar run whose ss.S5.3 was
    judged PASS, or NON-STRICT, under strict is the same page; a verdict outside
    the set (FAIL) shows as it is, and so does the same case of another peer."""
    import compat
    from real_peers import Verdicts

    def page(peer: str, strict_s53: str) -> str:
        monkeypatch.setattr(compat, "_strict", lambda run, cid: strict_s53 if cid == "ss.S5.3" else "PASS")
        cases = {"ss.S5.1": {"verdict": "PASS"}, "ss.S5.3": {"verdict": "PASS"}}
        return compat.render([PeerRun(peer, "testee", "server", "seastar-rpc", "seastar", Verdicts(cases))])

    varies = page("seastar", "PASS")
    assert page("seastar", "NON-STRICT") == varies
    assert "PASS (strict: PASS or NON-STRICT: varies, see below)" in varies
    assert "     - 1 PASS, 1 PASS or NON-STRICT" in varies
    assert "* ``ss.S5.3``, ``testee``: Seastar reads the 4-byte STREAM_PARENT record as 8 bytes" in varies
    for shown in (page("seastar", "FAIL"), page("not-seastar", "NON-STRICT")):
        assert "varies" not in shown
        assert "PASS (strict: " in shown and "or NON-STRICT" not in shown
