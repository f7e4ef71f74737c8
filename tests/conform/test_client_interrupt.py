"""Ctrl-C on ``refwire conform PROTOCOL --client --exec CMD``: at any
moment -- before the first result, in the middle of a case, twice -- the run
prints its "interrupted" line and its summary, exits 130, and writes index.json
with ``"interrupted": true`` and no verdict for the case that was cut short.
Each SIGINT is sent once the run printed the line that places it, never after
a sleep (:mod:`support.interrupt_conform`)."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest
from support.interrupt_conform import Interrupted, interrupt_after

pytestmark = pytest.mark.timeout(120)

CASES = ["lj.C1.1", "lj.C1.2", "lj.C1.3"]
#: A client that gives up at once on the cases listed in its first argument and
#: hangs (until killed) on the others: the run is always inside a case when it hangs.
CLIENT = "import sys, time\ntime.sleep(0 if sys.argv[2] in sys.argv[1].split(',') else 600)\n"
HEADER = r"^refwire conform lumberjack: testing a client"


def _run(tmp_path: Path, quick: list[str], ready: str, times: int = 1) -> tuple[Interrupted, dict[str, object]]:
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    template = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {','.join(quick) or '-'} {{case}}"
    out = tmp_path / "report"
    args = ["conform", "lumberjack", "--client", "--exec", template, "--cases", ",".join(CASES), "--seed", "1", "--out", str(out)]
    proc = interrupt_after(args, ready, times=times)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.returncode == 130, (proc.returncode, proc.stdout, proc.stderr)
    assert re.search(r"^interrupted: ", proc.stdout, re.M), proc.stdout
    index = json.loads((out / "index.json").read_text())
    assert index["run"]["interrupted"] is True
    return proc, index["agents"]


def _verdicts(agents: dict[str, object]) -> dict[str, str]:
    (cases,) = agents.values()
    assert isinstance(cases, dict)
    return {cid: entry["verdict"] for cid, entry in cases.items()}


def test_before_the_first_result(tmp_path: Path) -> None:
    _proc, agents = _run(tmp_path, [], HEADER)
    assert _verdicts(agents) == {}


def test_in_the_middle_of_a_case(tmp_path: Path) -> None:
    """lj.C1.1's verdict is printed; lj.C1.2's client hangs: interrupted there."""
    proc, agents = _run(tmp_path, ["lj.C1.1"], r"^\S+\s+lj\.C1\.1 ")
    assert list(_verdicts(agents)) == ["lj.C1.1"], proc.stdout
    assert re.search(r"^\d+ (FAIL|PASS|ERROR)", proc.stdout.split("interrupted: ", 1)[1], re.M), proc.stdout  # the summary


def test_twice(tmp_path: Path) -> None:
    proc, agents = _run(tmp_path, ["lj.C1.1", "lj.C1.2"], r"^\S+\s+lj\.C1\.2 ", times=2)
    assert list(_verdicts(agents)) == ["lj.C1.1", "lj.C1.2"], proc.stdout
