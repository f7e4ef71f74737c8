"""Simulation campaigns in pure Python: one row per (protocol, seed, fault knobs).

The per-seed function is plain Python with
no pyspark import, so the same :func:`seed_row` runs in a loop, in a
``multiprocessing`` pool, under pytest and in Spark workers.

* :func:`seed_row` wraps :func:`refwire.sim.runner.run_seed` (bounded in
  simulated time by each scenario's safety and liveness phases, under
  ``MockClock`` autojump) and turns *any* exception into a ``crash`` row, so one
  bad seed never fails a Spark partition (pitfall 5).
* Rows are flat dicts with the columns of :data:`CAMPAIGN_COLUMNS`; the
  transitions are sorted and every map is emitted in sorted key order, so a row
  never depends on the process's hash seed (pitfall 2).
* The protocols are whatever the protocol registry (:mod:`refwire.protocols`) holds at
  run time (:func:`known_protocols`), never a fixed list.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from .schema import Columns

__all__ = [
    "CAMPAIGN_COLUMNS",
    "CampaignInterrupted",
    "KNOB_NAMES",
    "crash_row",
    "failure_summary",
    "known_protocols",
    "resolve_protocols",
    "run_loop",
    "run_pool",
    "seed_row",
    "task_at",
    "tasks",
]


def _knob_names() -> tuple[str, ...]:
    import attrs

    from refwire.sim.faults import Faults

    return tuple(a.name for a in attrs.fields(Faults))


#: The fault knobs of :class:`refwire.sim.faults.Faults`, one ``knob_<name>`` column each.
KNOB_NAMES: tuple[str, ...] = _knob_names()

#: One row per run.  ``workload_json`` is protocol-specific, so it stays JSON;
#: ``counts`` keeps every counter the scenario and the simulated network report.
CAMPAIGN_COLUMNS: Columns = (
    ("campaign", "string"),
    ("protocol", "string"),
    ("seed", "int64"),
    ("outcome", "string"),  # pass | violation | liveness | crash
    ("violation", "string"),
    ("failure_kind", "string"),  # "" on pass, else "outcome:violation"
    ("detail", "string"),
    ("trace_hash", "string"),
    ("sim_time", "double"),
    ("events", "int64"),
    ("bytes_sent", "int64"),
    ("bytes_delivered", "int64"),
    ("transitions", "list<string>"),
    ("fault_kinds", "list<string>"),
    *((f"knob_{k}", "double") for k in KNOB_NAMES),
    ("workload_json", "string"),
    ("overridden", "bool"),
    ("counts", "map<string,int64>"),
    ("replay", "string"),
    ("wall_s", "double"),
)


def known_protocols() -> tuple[str, ...]:
    """The protocols the simulator has scenarios for right now, sorted."""
    from refwire.protocols import names

    return tuple(sorted(names("scenario")))


def resolve_protocols(spec: str | Sequence[str]) -> tuple[str, ...]:
    """``"all"`` or a comma-separated list (or a sequence) -> checked protocol names."""
    names = [p.strip() for p in spec.split(",")] if isinstance(spec, str) else [str(p) for p in spec]
    known = known_protocols()
    if names == ["all"]:
        return known
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"no simulation for {', '.join(unknown) or '(none)'}; choose from: {', '.join(known)}, all")
    return tuple(dict.fromkeys(names))


def crash_row(campaign: str, protocol: str, seed: int, exc: BaseException, wall_s: float = 0.0) -> dict[str, Any]:
    """The row of a seed whose run raised outside the simulator's own crash handling."""
    detail = "".join(traceback.format_exception(exc)[-3:]).strip()[-2000:]
    row: dict[str, Any] = {
        "campaign": campaign,
        "protocol": protocol,
        "seed": seed,
        "outcome": "crash",
        "violation": type(exc).__name__,
        "failure_kind": f"crash:{type(exc).__name__}",
        "detail": detail,
        "trace_hash": "",
        "sim_time": 0.0,
        "events": 0,
        "bytes_sent": 0,
        "bytes_delivered": 0,
        "transitions": [],
        "fault_kinds": [],
        "workload_json": "{}",
        "overridden": False,
        "counts": {},
        "replay": f"refwire sim {protocol} --seed {seed}",
        "wall_s": round(wall_s, 6),
    }
    row.update({f"knob_{k}": 0.0 for k in KNOB_NAMES})
    return _ordered(row)


def _ordered(row: dict[str, Any]) -> dict[str, Any]:
    return {name: row[name] for name, _ in CAMPAIGN_COLUMNS}


def seed_row(
    protocol: str,
    seed: int,
    *,
    campaign: str = "",
    workload: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one seed and return its campaign row.  Never raises (except KeyboardInterrupt).

    ``workload`` overrides part of the drawn workload (e.g. a planted bug); the
    row's ``replay`` command then carries the knobs, so it still replays.
    """
    t0 = time.perf_counter()
    try:
        from refwire.sim.faults import Faults
        from refwire.sim.runner import run_seed

        r = run_seed(protocol, seed, workload=workload, trace_lines=0)
        faults = Faults.from_dict(r.faults)
        counts = {str(k): int(v) for k, v in sorted(r.counts.items())}
        row: dict[str, Any] = {
            "campaign": campaign,
            "protocol": r.protocol,
            "seed": r.seed,
            "outcome": r.outcome,
            "violation": r.violation,
            "failure_kind": r.failure_kind,
            "detail": r.detail,
            "trace_hash": r.trace_hash,
            "sim_time": float(r.sim_time),
            "events": counts.get("events_total", 0),
            "bytes_sent": counts.get("net.bytes_sent", 0),
            "bytes_delivered": counts.get("net.bytes_delivered", 0),
            "transitions": sorted(r.transitions),
            "fault_kinds": list(faults.enabled_kinds()),
            "workload_json": json.dumps(r.workload, sort_keys=True, separators=(",", ":")),
            "overridden": r.overridden,
            "counts": counts,
            "replay": r.replay(),
        }
        row.update({f"knob_{k}": float(v) for k, v in faults.to_dict().items()})
    except Exception as exc:  # a crash is a row, not an abort (pitfall 5)
        return crash_row(campaign, protocol, seed, exc, time.perf_counter() - t0)
    row["wall_s"] = round(time.perf_counter() - t0, 6)
    return _ordered(row)


def tasks(protocols: Sequence[str], first_seed: int, count: int) -> Iterator[tuple[str, int]]:
    """``(protocol, seed)`` for every seed, protocols interleaved so any slice is balanced."""
    for seed in range(first_seed, first_seed + count):
        for p in protocols:
            yield p, seed


def task_at(protocols: Sequence[str], first_seed: int, index: int) -> tuple[str, int]:
    """The ``index``-th task of :func:`tasks` (what a Spark ``range`` id stands for)."""
    return protocols[index % len(protocols)], first_seed + index // len(protocols)


Progress = Callable[[int, int], None]


class CampaignInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a local campaign.  ``rows`` are the runs that finished
    before it (the interrupted seed has none: no verdict is made up for it)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        super().__init__()
        self.rows = rows


def run_loop(
    protocols: Sequence[str],
    first_seed: int,
    count: int,
    *,
    campaign: str = "",
    workload: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Every row, one after the other in this process.

    Raises:
        CampaignInterrupted: on Ctrl-C, with the rows of the seeds finished before it.
    """
    total = count * len(protocols)
    out: list[dict[str, Any]] = []
    try:
        for i, (p, s) in enumerate(tasks(protocols, first_seed, count), 1):
            out.append(seed_row(p, s, campaign=campaign, workload=workload))
            if progress is not None:
                progress(i, total)
    except KeyboardInterrupt:
        raise CampaignInterrupted(out) from None
    return out


def _ignore_sigint() -> None:
    """A pool worker's initializer: Ctrl-C at a terminal reaches the whole
    process group; only the parent acts on it (it ends the pool), so a worker
    never dies printing a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _pool_task(args: tuple[str, int, str, dict[str, Any] | None]) -> dict[str, Any]:
    p, s, campaign, workload = args
    return seed_row(p, s, campaign=campaign, workload=workload)


def run_pool(
    protocols: Sequence[str],
    first_seed: int,
    count: int,
    *,
    processes: int | None = None,
    campaign: str = "",
    workload: dict[str, Any] | None = None,
    progress: Progress | None = None,
    chunksize: int = 4,
) -> list[dict[str, Any]]:
    """Every row, from a ``spawn`` pool (``spawn`` re-imports the main module, so callers'
    scripts need an ``if __name__ == "__main__":`` guard).

    The workers start with ``PYTHONHASHSEED=0`` as Spark's do, so set iteration
    order is the same in every worker.  They ignore Ctrl-C; the parent stops the
    pool on it.

    Raises:
        CampaignInterrupted: on Ctrl-C, with the rows received before it (in seed order).
    """
    total = count * len(protocols)
    jobs: Iterable[tuple[str, int, str, dict[str, Any] | None]] = (
        (p, s, campaign, workload) for p, s in tasks(protocols, first_seed, count)
    )
    ctx = multiprocessing.get_context("spawn")
    saved = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = "0"
    out: list[dict[str, Any]] = []
    try:
        with ctx.Pool(processes or os.cpu_count() or 1, initializer=_ignore_sigint) as pool:
            for i, row in enumerate(pool.imap(_pool_task, jobs, chunksize=chunksize), 1):
                out.append(row)
                if progress is not None:
                    progress(i, total)
    except KeyboardInterrupt:  # (leaving the with block terminated the workers)
        raise CampaignInterrupted(out) from None
    finally:
        if saved is None:
            os.environ.pop("PYTHONHASHSEED", None)
        else:
            os.environ["PYTHONHASHSEED"] = saved
    return out


def failure_summary(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The failures table computed in plain Python: per (protocol, failure kind)
    the number of runs, the smallest seed and its replay command."""
    failed = sorted((r for r in rows if r["outcome"] != "pass"), key=lambda r: (r["protocol"], r["failure_kind"], r["seed"]))
    out = []
    for (proto, kind), group in itertools.groupby(failed, key=lambda r: (r["protocol"], r["failure_kind"])):
        g = list(group)
        out.append(
            {
                "protocol": proto,
                "failure_kind": kind,
                "runs": len(g),
                "min_seed": g[0]["seed"],
                "example_seeds": [r["seed"] for r in g[:5]],
                "replay": g[0]["replay"],
            }
        )
    return out
