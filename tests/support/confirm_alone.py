"""Confirm a conformance verdict alone before a test rejects it.

The conformance tests run many cases at once at a ``time_scale`` below 1 (to
keep the suite short); on a loaded machine (two shared cores) a scaled wait can
then expire before a testee's answer, and a verdict can come out wrong for the
scheduler's sake alone.  :func:`confirm_alone` runs each case whose verdict a
test's assertions would reject once more, alone (one job) at time scale 1, and
keeps that verdict, as ``tests/conform/test_kill_matrix.py`` does.  A run that
passes costs nothing more; a real fault fails both runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from refwire.conform.model import Verdict
from refwire.conform.runner import RunResult


async def confirm_alone(
    run: RunResult,
    wanted: Callable[[str], Verdict | set[Verdict]],
    again: Callable[[str], Awaitable[RunResult]],
) -> RunResult:
    """``run`` with each result whose verdict is not ``wanted(case id)`` (one verdict or a
    set of them) replaced by that case's result in ``await again(case id)`` (printed)."""
    for i, r in enumerate(run.results):
        want = wanted(r.case.id)
        if r.verdict in (want if isinstance(want, set) else {want}):
            continue
        (alone,) = (await again(r.case.id)).results
        print(f"confirming {run.config.agent} x {r.case.id}: {r.verdict.value} in the run, {alone.verdict.value} alone")
        run.results[i] = alone
    return run
