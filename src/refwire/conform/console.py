"""What ``refwire conform`` prints: a line per case, the summary of a run
(each FAIL with its requirement, Expected, Observed, why and replay line, and
for a testee client its exit status and the end of its stderr), the
comparison with a ``--baseline`` index, and the exit status they decide.

A testee server that went away mid-run makes every case after it ERROR
("testee down"); the terminal says so once, with the count of cases that were
not judged, while the reports still record each of them.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

from .ids import natural_key
from .model import SEVERITY, CaseResult, Verdict
from .runner import RunResult

#: Lines of a testee's stderr shown under a case in the summary.
STDERR_LINES = 20

#: Consoles that have printed a "testee down" line already (the next ones are short).
_DOWN_SHOWN: weakref.WeakSet[Any] = weakref.WeakSet()

__all__ = ["STDERR_LINES", "escape", "new_console", "print_line", "summary", "testee_down"]


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def new_console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


_STYLE = {
    "PASS": "green",
    "NON-STRICT": "yellow",
    "INFO": "blue",
    "UNSUPPORTED": "dim",
    "SKIPPED": "dim",
    "FAIL": "bold red",
    "ERROR": "bold magenta",
}


def testee_down(r: CaseResult) -> bool:
    """Whether ``r`` is an ERROR because the testee could not be reached at all
    (it went away earlier in the run): the case was not judged."""
    if r.verdict is not Verdict.ERROR or r.harness_fault:
        return False
    return r.reason.startswith("testee down") or (r.close.get("by") == "none" and r.close.get("how") == "refused")


def _down_cause(r: CaseResult) -> str:
    """``testee down (cannot connect ...)`` -> ``cannot connect ...``."""
    text = r.reason
    if text.startswith("testee down (") and text.endswith(")"):
        return text[len("testee down (") : -1]
    return text.removeprefix("testee down").strip(" :;") or "cannot reach it"


def print_line(console: Any, r: CaseResult) -> None:
    """One line for a case as it finishes.  The first case that finds the
    testee down says so; the next such ones print nothing (the summary counts
    them, and the reports record each)."""
    down = testee_down(r)
    if down:
        try:
            shown = console in _DOWN_SHOWN
            _DOWN_SHOWN.add(console)
        except TypeError:  # a console that cannot be weakly referenced: every line in full
            shown = False
        if shown:
            return
    like = f" (consistent with {', '.join(r.matched_profiles)})" if r.matched_profiles and r.verdict is not Verdict.PASS else ""
    close = f" ({r.close.get('by')} {r.close.get('how')})" if r.close and not down else ""
    text = escape(
        f"{r.case.id:<9} {r.case.slug}{like}{close}  {r.duration:.2f}s"
        + (f"  {r.reason}" if r.verdict is not Verdict.PASS and r.reason else "")
        + ("; the cases after it that find it down are not listed one by one" if down else "")
    )
    console.print(f"[{_STYLE[r.verdict.value]}]{r.verdict.value:<11}[/] {text}")


def _process_lines(r: CaseResult) -> list[str]:
    """A testee process's exit status and the end of its stderr, as summary lines."""
    proc = r.testee_process()
    if proc is None:
        return []
    lines = [f"Exit status: {'killed' if proc.get('exit') is None else proc.get('exit')}"]
    tail, total = r.testee_stderr(STDERR_LINES)
    if tail:
        shown = f"last {len(tail)} of {total} lines" if total > len(tail) else f"{total} line{'s' if total > 1 else ''}"
        lines.append(f"Stderr ({shown}):")
        lines += [f"  | {line}" for line in tail]
    return lines


def _block(console: Any, r: CaseResult, *, full: bool) -> None:
    console.print(f"\n[{_STYLE[r.verdict.value]}]{r.verdict.value}[/] " + escape(f"{r.case.id} {r.case.slug}: {r.case.title}"))
    if full:
        console.print("  " + escape(f"Requirement: {r.case.requirement}"))
        if r.expected:
            console.print("  " + escape(f"Expected:    {r.expected}"))
        observed = r.observed_text()
        if observed:
            console.print("  " + escape(f"Observed:    {observed}"))
    if r.reason:
        console.print("  " + escape(f"Why:         {r.reason}"))
    for line in _process_lines(r):
        console.print("  " + escape(line))
    if full:
        console.print("  " + escape(f"Replay:      {r.replay}"))


def _quiet_process(r: CaseResult) -> bool:
    """A testee process that exited 0 and wrote nothing on stderr (nothing to show)."""
    proc = r.testee_process()
    return proc is None or (proc.get("exit") == 0 and not r.testee_stderr(1)[0])


def summary(console: Any, run: RunResult, out: Path, *, strict: bool, baseline: dict[str, Any] | None) -> int:
    """Print the run's summary; returns the exit status it decides.

    Each FAIL and ERROR (and NON-STRICT with ``strict``) gets a block; other
    verdicts but PASS and SKIPPED get a short one when their testee process
    has something to show (a non-zero exit, stderr).  Cases not judged
    because the testee was down are one notice, not a block each.
    """
    results = sorted(run.results, key=lambda r: natural_key(r.case.id))
    bad = [r for r in results if r.verdict in (Verdict.FAIL, Verdict.ERROR) or (strict and r.verdict is Verdict.NON_STRICT)]
    down = [r for r in run.results if testee_down(r)]  # in the order they ran
    skip, worst = {id(r) for r in down}, {id(r) for r in bad}
    for r in results:
        if id(r) in skip:
            continue
        if id(r) in worst:
            _block(console, r, full=True)
        elif r.verdict not in (Verdict.PASS, Verdict.SKIPPED) and not _quiet_process(r):
            _block(console, r, full=False)
    if down:
        first = down[0]
        ids = sorted((r.case.id for r in down), key=natural_key)
        span = ids[0] if len(ids) == 1 else f"{ids[0]} … {ids[-1]}"
        n = len(down)
        console.print(
            f"\n[{_STYLE['ERROR']}]ERROR[/] "
            + escape(f"testee down from {first.case.id} on: {_down_cause(first)}")
        )
        console.print(
            "  "
            + escape(
                f"the remaining {n} case{'s were' if n > 1 else ' was'} not judged ({span}); "
                "each is recorded as ERROR in the reports"
            )
        )
    counts = run.counts()
    order = [v.value for v in Verdict]
    console.print("\n" + ", ".join(f"{counts[k]} {k}" for k in order if k in counts) + f"  -> {out / 'index.html'}")
    status = 1 if bad else 0
    if any(r.harness_fault for r in results):
        status = 2
    if baseline is not None:
        worse, better = _compare(baseline, run)
        for line in worse:
            console.print("[bold red]regression[/] " + escape(line))
        for line in better:
            console.print("[green]unexpected pass[/] " + escape(f"{line} (update the baseline)"))
        if worse and status == 0:
            status = 1
    return status


def _compare(baseline: dict[str, Any], run: RunResult) -> tuple[list[str], list[str]]:
    agents = baseline["agents"]
    before = agents.get(run.config.agent) or (next(iter(agents.values())) if len(agents) == 1 else {})
    worse, better = [], []
    for r in sorted(run.results, key=lambda r: natural_key(r.case.id)):
        old = before.get(r.case.id)
        if old is None:
            continue
        try:
            was = Verdict(old["verdict"])
        except (KeyError, ValueError):
            continue
        if SEVERITY[r.verdict] > SEVERITY[was]:
            worse.append(f"{r.case.id}: {was.value} -> {r.verdict.value}")
        elif SEVERITY[r.verdict] < SEVERITY[was]:
            better.append(f"{r.case.id}: {was.value} -> {r.verdict.value}")
    return worse, better
