"""What ``refwire conform`` prints: a line per case, the summary of a run
(each FAIL with its requirement, Expected, Observed and replay line), the
comparison with a ``--baseline`` index, and the exit status they decide."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .model import SEVERITY, CaseResult, Verdict
from .runner import RunResult

__all__ = ["new_console", "escape", "print_line", "summary"]


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


def print_line(console: Any, r: CaseResult) -> None:
    like = f" (consistent with {', '.join(r.matched_profiles)})" if r.matched_profiles and r.verdict is not Verdict.PASS else ""
    close = f" ({r.close.get('by')} {r.close.get('how')})" if r.close else ""
    text = escape(
        f"{r.case.id:<9} {r.case.slug}{like}{close}  {r.duration:.2f}s"
        + (f"  {r.reason}" if r.verdict is not Verdict.PASS and r.reason else "")
    )
    console.print(f"[{_STYLE[r.verdict.value]}]{r.verdict.value:<11}[/] {text}")


def summary(console: Any, run: RunResult, out: Path, *, strict: bool, baseline: dict[str, Any] | None) -> int:
    results = sorted(run.results, key=lambda r: r.case.id)
    bad = [r for r in results if r.verdict in (Verdict.FAIL, Verdict.ERROR) or (strict and r.verdict is Verdict.NON_STRICT)]
    for r in bad:
        console.print(
            f"\n[{_STYLE[r.verdict.value]}]{r.verdict.value}[/] " + escape(f"{r.case.id} {r.case.slug}: {r.case.title}")
        )
        console.print("  " + escape(f"Requirement: {r.case.requirement}"))
        if r.expected:
            console.print("  " + escape(f"Expected:    {r.expected}"))
        if r.observed:
            console.print("  " + escape(f"Observed:    {r.observed}"))
        if r.reason:
            console.print("  " + escape(f"Why:         {r.reason}"))
        console.print("  " + escape(f"Replay:      {r.replay}"))
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
    for r in run.results:
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
