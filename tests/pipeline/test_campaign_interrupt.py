"""``refwire campaign --runner loop|pool`` on Ctrl-C, and its usage errors.

Ctrl-C stops at once: ``interrupted after N seeds``, exit status 130, no
traceback; the runs table written holds exactly the N seeds finished, and none
of them is a verdict made of the interrupt (a ``crash`` row).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from support.commands import REFWIRE
from support.interrupt import interrupt_at, looks_clean

from refwire.pipeline.campaign import tasks

pytestmark = pytest.mark.timeout(120)

BEFORE_FIRST = ("stderr", r"^campaign \S+: .*\((?:loop|pool)\)$")
MID_RUN = ("stderr", r"^  seeds [1-9]\d*/")
AT_ONCE = ("stderr", "")


@pytest.mark.parametrize(
    ("runner", "moments"),
    [
        ("loop", [BEFORE_FIRST]),
        ("loop", [MID_RUN]),
        ("loop", [MID_RUN, AT_ONCE]),
        ("pool", [MID_RUN]),
    ],
    ids=["loop-before-the-first-result", "loop-mid-run", "loop-twice", "pool-mid-run"],
)
def test_ctrl_c_stops_a_local_campaign_and_records_only_finished_seeds(
    runner: str, moments: list[tuple[str, str]], tmp_path: Path
) -> None:
    args = ["campaign", "--runner", runner, "--protocols", "lumberjack,tank", "--seeds", "2000", "--out", str(tmp_path), "--campaign", "c"]
    proc = interrupt_at(args, moments)
    assert proc.returncode == 130, proc.stdout + proc.stderr
    problem = looks_clean(proc)
    assert problem is None, problem
    found = re.findall(r"^interrupted after (\d+) seeds$", proc.stderr, re.M)
    assert len(found) == 1, proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "runs-c.jsonl").read_text().splitlines()]
    assert len(rows) == int(found[0])
    expected = list(tasks(("lumberjack", "tank"), 0, 2000))[: len(rows)]
    assert [(r["protocol"], r["seed"]) for r in rows] == expected
    assert all(r["outcome"] != "crash" for r in rows), [r["failure_kind"] for r in rows]
    if moments[0] is MID_RUN:
        assert rows


def test_a_workload_that_is_not_json_names_the_option() -> None:
    proc = subprocess.run([*REFWIRE, "campaign", "--runner", "loop", "--workload", "{bad"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("refwire: --workload is not valid JSON: ") and "'{bad'" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    proc = subprocess.run([*REFWIRE, "campaign", "--runner", "loop", "--workload", "[1]"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("refwire: --workload must be a JSON object"), proc.stderr
