"""Run, replay and shrink simulation seeds.

One seed fixes everything: the swarm fault knobs, the workload, every latency
and split, and trio's scheduling order.  :func:`run_seed` returns a
:class:`SimResult` (outcome, violated invariant, counts, simulated time, the
state transitions seen, and the trace hash); the same seed gives the same hash.
A failing result carries a one-line replay command; :func:`shrink` switches
fault kinds off and makes the workload smaller while the failure persists.

Pure Python: no pyspark here, so the data pipeline can call it per seed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs

from ..interrupts import interrupted
from ..pcap import PcapWriter
from .faults import FAULT_KINDS, Faults
from .net import PCAP
from .rand import SimRandom
from .runtime import run_deterministic
from .scenarios import Scenario
from .scenarios import scenario as _scenario
from .trace import Trace

__all__ = ["SimResult", "describe_knobs", "interrupted", "replay_command", "run_seed", "run_seeds", "shrink"]


@attrs.frozen(kw_only=True)
class SimResult:
    """What one seed did."""

    protocol: str
    seed: int
    #: "pass", "violation", "liveness" (did not converge after healing) or "crash".
    outcome: str
    #: the invariant violated (or the exception type of a crash), "" on pass.
    violation: str = ""
    detail: str = ""
    trace_hash: str = ""
    sim_time: float = 0.0
    counts: dict[str, int] = attrs.field(factory=dict)
    transitions: tuple[str, ...] = ()
    faults: dict[str, float] = attrs.field(factory=dict)
    workload: dict[str, Any] = attrs.field(factory=dict)
    #: True when faults/workload were given explicitly rather than drawn from the seed.
    overridden: bool = False
    trace_tail: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.outcome == "pass"

    @property
    def failure_kind(self) -> str:
        return "" if self.ok else f"{self.outcome}:{self.violation}"

    def replay(self) -> str:
        return replay_command(self)

    def to_row(self) -> dict[str, Any]:
        """A flat, JSON-able dict (one row of a campaign table)."""
        d = attrs.asdict(self)
        d["transitions"] = list(self.transitions)
        d["trace_tail"] = list(self.trace_tail)
        d["replay"] = self.replay()
        return d


def replay_command(result: SimResult) -> str:
    cmd = f"refwire sim {result.protocol} --seed {result.seed}"
    if result.overridden:
        knobs = {"faults": result.faults, "workload": result.workload}
        cmd += " --knobs '" + json.dumps(knobs, sort_keys=True, separators=(",", ":")) + "'"
    return cmd


def draw(protocol: str, seed: int) -> tuple[Scenario, Faults, dict[str, Any]]:
    """The scenario, fault knobs and workload a seed stands for."""
    found = _scenario(protocol)
    rng = SimRandom(seed)
    faults = Faults.swarm(rng.child("faults"))
    workload = found.draw_workload(rng.child("workload"))
    return found, faults, workload


def check_workload(protocol: str, overrides: dict[str, Any]) -> None:
    """Refuse workload overrides a scenario would ignore: a knob it does not
    have, or a planted ``bug`` it does not know (:class:`ValueError` naming
    them and the known ones), so a misspelling never runs a campaign without
    the bug it meant to plant."""
    scenario = _scenario(protocol)
    known = scenario.draw_workload(SimRandom(0).child("workload"))
    unknown = sorted(k for k in overrides if k not in known)
    if unknown:
        raise ValueError(f"unknown workload knobs for {protocol}: {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    bug = overrides.get("bug")
    bugs: tuple[str, ...] = tuple(getattr(scenario, "BUGS", ()))
    if bug and bug not in bugs:
        raise ValueError(f"unknown planted bug {bug!r} for {protocol}; known: {', '.join(bugs) or 'none'}")


class WallClockExceeded(Exception):
    """A seed ran longer in real time than ``wall_limit``: a livelock (a loop
    that keeps virtual time from ending the run), reported as a crash."""


@contextlib.contextmanager
def wall_clock_guard(limit: float | None) -> Iterator[None]:
    """Raise :class:`WallClockExceeded` inside the run after ``limit`` real
    seconds (SIGALRM; only in the main thread, elsewhere nothing is armed)."""
    if limit is None or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise WallClockExceeded(f"the run took more than {limit:.0f} s of real time (a livelock?)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_seed(
    protocol: str,
    seed: int,
    *,
    faults: Faults | None = None,
    workload: dict[str, Any] | None = None,
    trace_lines: int = 20,
    wall_limit: float | None = 300.0,
    pcap: str | os.PathLike[str] | None = None,
) -> SimResult:
    """Run one seed to completion (bounded in simulated time) and judge it.

    ``pcap``: also write the run's connections to this pcapng file, at virtual
    time (:mod:`refwire.sim.net`), so the same seed gives the same file.

    Raises:
        PcapPathError: the pcap file cannot be written (before the run starts).
    """
    scenario, drawn_faults, drawn_workload = draw(protocol, seed)
    overridden = faults is not None or workload is not None
    faults = faults if faults is not None else drawn_faults
    wl = dict(drawn_workload)
    if workload:
        check_workload(protocol, workload)
        wl.update(workload)
    trace = Trace()
    rng = SimRandom(seed).child("run")
    writer = PcapWriter(pcap) if pcap is not None else None

    async def main() -> Any:
        return await scenario.run(rng=rng, faults=faults, workload=wl, trace=trace)

    # The drivers log lost connections and protocol errors; under injected faults
    # that is expected noise, so quiet them for the run and restore the level after.
    refwire_log = logging.getLogger("refwire")
    saved_level = refwire_log.level
    refwire_log.setLevel(logging.CRITICAL)
    pcap_token = PCAP.set(writer)
    try:
        with wall_clock_guard(wall_limit):
            report = run_deterministic(main, seed)
    except BaseException as exc:  # a crash is a result, not an abort; Ctrl-C is neither
        if interrupted(exc):
            raise KeyboardInterrupt from None
        tb = traceback.format_exception(exc)
        return SimResult(
            protocol=protocol,
            seed=seed,
            outcome="crash",
            violation=type(exc).__name__,
            detail="".join(tb[-3:]).strip()[-2000:],
            trace_hash=trace.hash(),
            faults=faults.to_dict(),
            workload=wl,
            overridden=overridden,
            counts=dict(trace.counters),
            trace_tail=tuple(trace.tail(trace_lines)),
        )
    finally:
        refwire_log.setLevel(saved_level)
        PCAP.reset(pcap_token)
        if writer is not None:
            writer.close()
    return SimResult(
        protocol=protocol,
        seed=seed,
        outcome=report.outcome,
        violation=report.violation,
        detail=report.detail,
        trace_hash=trace.hash(),
        sim_time=round(report.sim_time, 6),
        counts={**dict(trace.counters), **report.counts},
        transitions=tuple(sorted(report.transitions)),
        faults=faults.to_dict(),
        workload=wl,
        overridden=overridden,
        trace_tail=tuple(trace.tail(trace_lines)) if report.outcome != "pass" else (),
    )


def run_seeds(protocol: str, seeds: Iterable[int], **kwargs: Any) -> list[SimResult]:
    return [run_seed(protocol, s, **kwargs) for s in seeds]


def describe_knobs(faults: Mapping[str, float], workload: Mapping[str, Any]) -> str:
    """Fault knobs and workload in words: ``faults: k=v ...; workload: k=v ...``."""
    shown = Faults.from_dict(faults).banner()
    wl = " ".join(f"{k}={_value(v)}" for k, v in sorted(workload.items()) if v not in ("", None)) or "none"
    return f"faults: {'none' if shown == 'none' else shown}; workload: {wl}"


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (str, int)):
        return str(v)
    return json.dumps(v, sort_keys=True, separators=(",", ":"))



def shrink(
    result: SimResult,
    *,
    max_runs: int = 200,
    log: Callable[[str], None] | None = None,
) -> SimResult:
    """Reduce a failing result while the same failure kind persists.

    Tries, in order: switching whole fault kinds off, then making each
    shrinkable workload knob smaller (the scenario says how).  Returns the
    smallest failing result found (``overridden``, so its replay command
    carries the knobs).
    """
    if result.ok:
        raise ValueError("nothing to shrink: the result passed")
    scenario = _scenario(result.protocol)
    kind = result.failure_kind
    best = result
    faults = Faults.from_dict(result.faults)
    workload = dict(result.workload)
    runs = 0

    def attempt(f: Faults, w: dict[str, Any]) -> SimResult | None:
        nonlocal runs
        runs += 1
        r = run_seed(result.protocol, result.seed, faults=f, workload=w)
        if r.failure_kind == kind:
            if log:
                log(f"  still fails ({kind}) with {describe_knobs(f.to_dict(), w)}")
            return r
        return None

    for name in FAULT_KINDS:
        if runs >= max_runs:
            break
        trial = faults.without(name)
        if trial == faults:
            continue
        r = attempt(trial, workload)
        if r is not None:
            faults, best = trial, r
    progress = True
    while progress and runs < max_runs:
        progress = False
        for key, smaller in scenario.shrink_steps(workload):
            if runs >= max_runs:
                break
            trial_w = {**workload, key: smaller}
            r = attempt(faults, trial_w)
            if r is not None:
                workload, best, progress = trial_w, r, True
    return attrs.evolve(best, overridden=True)
