"""Progress of a campaign: seeds done of seeds total, per protocol, rate and time left.

On a terminal it is a live display (rich): one bar per protocol and one for
the whole campaign, each with its count, the rate and the time left.  Anywhere
else (CI logs, a pipe) it is one plain line per interval, so a log shows the
campaign moving without a line per seed.

Runs are handed out round-robin over the protocols (run ``i`` is protocol
``i mod n``, :func:`refwire.pipeline.campaign.task_at`), so the runs done per
protocol follow from the runs done in all.  Spark reports finished *tasks*;
each task holds an interleaved slice of the runs, so there the counts are
estimates and are shown as such (``≈``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = ["CampaignProgress"]


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, s = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{s:02d}s"
    hours, m = divmod(minutes, 60)
    return f"{hours}h{m:02d}m"


class CampaignProgress:
    """A ``progress(done, total)`` callback for the campaign runners (runs
    done of all runs), showing seeds per protocol.  Call :meth:`close` at the end."""

    def __init__(
        self,
        protocols: Sequence[str],
        *,
        estimate: bool = False,
        stream: TextIO | None = None,
        interval: float = 5.0,
        live: bool | None = None,
    ) -> None:
        self.protocols = tuple(protocols)
        self.estimate = estimate
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.live = self.stream.isatty() if live is None else live
        self.started = time.monotonic()
        self._last_line: float | None = None  #: when the last plain line went out (monotonic)
        self._done = 0
        self._total = 0
        self._rich: Any = None
        self._tasks: dict[str, Any] = {}

    # ------------------------------------------------------------------ numbers

    @property
    def done(self) -> int:
        """Runs done, as last reported."""
        return self._done

    def per_protocol(self, done: int, total: int) -> dict[str, tuple[int, int]]:
        """Runs done and runs in all, per protocol (round-robin order)."""
        n = len(self.protocols)
        return {p: ((done + n - 1 - k) // n, (total + n - 1 - k) // n) for k, p in enumerate(self.protocols)}

    def rate(self, done: int) -> float:
        elapsed = time.monotonic() - self.started
        return done / elapsed if elapsed > 0 else 0.0

    def line(self, done: int, total: int) -> str:
        """The plain line: ``runs 240/1000 (24%), 11.8/s, about 1m04s left; lumberjack 48/200, ...``."""
        approx = "≈" if self.estimate and done not in (0, total) else ""
        rate = self.rate(done)
        left = f", about {_duration((total - done) / rate)} left" if rate > 0 and done < total else ""
        pct = 100 * done // total if total else 100
        per = ", ".join(f"{p} {approx}{d}/{t}" for p, (d, t) in self.per_protocol(done, total).items())
        return f"  seeds {approx}{done}/{total} ({pct}%), {rate:.1f}/s{left}; {per}"

    # ------------------------------------------------------------------ display

    def __call__(self, done: int, total: int) -> None:
        self._done, self._total = done, total
        if self.live:
            self._update_live(done, total)
            return
        now = time.monotonic()
        if done != total and self._last_line is not None and now - self._last_line < self.interval:
            return
        self._last_line = now
        self._write_line(self.line(done, total))

    def _write_line(self, text: str) -> None:
        """One write per line: a Ctrl-C never leaves half a line for the next one to follow."""
        self.stream.write(text + "\n")
        self.stream.flush()

    def _update_live(self, done: int, total: int) -> None:
        if self._rich is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._rich = Progress(
                TextColumn("{task.description:<20}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self._rich.start()
            for p, (_, t) in self.per_protocol(done, total).items():
                self._tasks[p] = self._rich.add_task(p, total=t, rate="")
            self._tasks[""] = self._rich.add_task("all" + (" (estimated)" if self.estimate else ""), total=total, rate="")
        rate = f"{self.rate(done):.1f} seeds/s"
        for p, (d, t) in self.per_protocol(done, total).items():
            self._rich.update(self._tasks[p], completed=d, total=t)
        self._rich.update(self._tasks[""], completed=done, total=total, rate=rate)

    def close(self) -> None:
        """Stop the live display (it stays on screen), or print the last line."""
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
        elif self._total and self._last_line is None:
            self._write_line(self.line(self._done, self._total))
