"""``refwire sim`` on Ctrl-C, and what it prints.

Ctrl-C stops the batch at once: ``interrupted after N seeds``, exit status 130,
no traceback, and the interrupted seed gets no verdict (the N seeds printed are
exactly the seeds finished; none is a ``crash`` made of the interrupt).  A batch
prints one line per seed and a summary per protocol; ``--help`` lists the
planted bugs; ``--shrink`` speaks in ``k=v``.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from support.commands import REFWIRE
from support.interrupt import interrupt_at, looks_clean

pytestmark = pytest.mark.timeout(120)

BEFORE_FIRST = ("stderr", r"^sim \S+: seeds ")
MID_RUN = ("stdout", r"^ok   \S+ seed=1 ")
AT_ONCE = ("stdout", "")


def _check(proc: subprocess.CompletedProcess[str], protocol: str) -> int:
    assert proc.returncode == 130, proc.stdout + proc.stderr
    problem = looks_clean(proc)
    assert problem is None, problem
    found = re.findall(r"^interrupted after (\d+) seeds$", proc.stderr, re.M)
    assert len(found) == 1, proc.stderr
    n = int(found[0])
    seeds = [int(s) for s in re.findall(rf"^(?:ok  |FAIL) {re.escape(protocol)} seed=(\d+) ", proc.stdout, re.M)]
    assert seeds == list(range(n)), f"the verdicts printed are not the {n} seeds finished: {proc.stdout}"
    assert "FAIL" not in proc.stdout and "runs," not in proc.stdout  # no made-up failure, no summary of a whole batch
    return n


@pytest.mark.parametrize(
    "moments",
    [[BEFORE_FIRST], [MID_RUN], [MID_RUN, AT_ONCE]],
    ids=["before-the-first-result", "mid-run", "twice"],
)
def test_ctrl_c_stops_a_sim_batch_at_once(moments: list[tuple[str, str]]) -> None:
    n = _check(interrupt_at(["sim", "lumberjack", "--seeds", "5000"], moments), "lumberjack")
    if moments[0] is MID_RUN:
        assert n >= 2


def test_ctrl_c_inside_a_pravega_seed_is_not_retried_as_a_lost_connection() -> None:
    _check(interrupt_at(["sim", "pravega", "--seeds", "5000"], [("stdout", r"^ok   pravega seed=0 ")]), "pravega")


def test_one_line_per_seed_and_a_summary_per_protocol() -> None:
    proc = subprocess.run([*REFWIRE, "sim", "all", "--seeds", "1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    seeds = [line for line in lines if line.startswith("ok   ")]
    summaries = [line for line in lines if re.match(r"^\S+: +1 runs, 1 passed, 0 failed$", line)]
    assert len(seeds) == len(summaries) >= 5
    assert len(lines) == len(seeds) + len(summaries) + 1 and re.match(r"^\d+ runs, \d+ passed, 0 failed", lines[-1]), proc.stdout


def test_help_lists_the_planted_bugs() -> None:
    proc = subprocess.run([*REFWIRE, "sim", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert re.search(r"^  lumberjack ack-before-deliver +the server acks a batch before it stores", proc.stdout, re.M), proc.stdout
    assert re.search(r"^  tank fsync-lies +\S", proc.stdout, re.M)


def test_shrink_prints_knobs_not_python_dicts() -> None:
    knobs = '{"workload": {"bug": "ack-before-deliver"}}'
    proc = subprocess.run([*REFWIRE, "sim", "lumberjack", "--seed", "3", "--knobs", knobs, "--shrink"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = proc.stdout + proc.stderr
    assert "still fails (violation:ack-before-delivery) with faults: " in text and "bug=ack-before-deliver" in text
    assert "{'" not in text, text
    assert re.search(r"^     shrunk to faults: none; workload: .*events=1\b", proc.stdout, re.M), proc.stdout
