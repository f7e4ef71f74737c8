#!/usr/bin/env python3
# ruff: noqa: RUF001  (the output uses the multiplication sign on purpose)
"""The simulator's throughput: seeds/s per protocol with default knobs, side by side in one run.

    python benchmarks/sim_bench.py [--seeds 100] [--reps 1] [--protocols lumberjack,tank]
                                   [--baseline PATH] [--profile] [--quick]

Each run is one worker process (``PYTHONHASHSEED=0``, as ``refwire sim`` runs) that
imports refwire and its simulator from a checkout, runs one warm-up seed (not timed:
imports, first scenario), then ``refwire.sim.runner.run_seed(protocol, seed)`` for
seeds ``--first-seed`` .. ``+ --seeds`` one after the other in that process, as
``refwire sim PROTOCOL --seeds N`` does, and reports seeds / wall seconds and seeds /
CPU seconds (``time.process_time``).

``--baseline PATH`` runs the same seeds from another checkout (e.g. ``git worktree add
/tmp/simbase main``) in the same invocation, runs interleaved (rep 1 of every row, then
rep 2, ...), so drift on a shared machine lands on both alike.  It prints the ratio
this ÷ baseline, and whether both produced the same trace hash for every seed (a
speed-up that keeps every schedule the same says "same traces").

Where the time goes, without a profiler: the share of the wall time taken by the 5
slowest seeds (the tail) and the trio scheduler batches, trace lines and virtual
seconds per seed.  ``--profile`` adds one cProfile pass per protocol over the same
seeds (this checkout only): self time grouped by area (trio's run loop, the simulated
network, the trace, the random streams, the scenario, the protocol code) and the top
functions.  cProfile charges a cost per call, so the shares lean towards code making
many small calls.

Exit status 1 (with ``FAILED:``) when a worker fails or a seed crashes.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import hashlib
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROTOCOLS = ("lumberjack", "pravega", "pravega-draft-2017", "tank", "seastar-rpc")
#: ``refwire.<name>`` -> the folder of a checkout it lives in (as pyproject's package-dir maps them).
#: A checkout older than the move of the simulator into ``src/refwire/sim`` keeps it at ``sim/``.
PACKAGES = {"refwire": "src/refwire", "refwire.sim": "src/refwire/sim", "refwire._specs": "specs"}
OLD_SIM = "sim"
TAIL = 5


# --------------------------------------------------------------------------- worker


def _import_from(root: Path) -> None:
    """Import refwire, refwire.sim and refwire._specs from ``root`` (not the installed tree)."""
    import importlib.util

    for name, rel in PACKAGES.items():
        folder = root / rel
        if name == "refwire.sim" and not folder.is_dir():
            folder = root / OLD_SIM
        spec = importlib.util.spec_from_file_location(name, folder / "__init__.py", submodule_search_locations=[str(folder)])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        if "." in name:
            parent, _, child = name.rpartition(".")
            setattr(sys.modules[parent], child, module)


def _area(filename: str, func: str) -> str:
    path = filename.replace("\\", "/")
    if path.endswith("/contextlib.py"):
        return "contextlib (@contextmanager enter/exit)"
    if "/trio/" in path or "/outcome/" in path or "_contextvars" in func or (path.endswith("/random.py") and func == "shuffle"):
        # (trio shuffles each batch of runnable tasks with random.Random.shuffle)
        return "trio run loop (scheduling, cancel scopes, clock)"
    if "/sim/net.py" in path:
        return "sim: network"
    if "/sim/trace.py" in path:
        return "sim: trace"
    if "/sim/rand.py" in path or path.endswith("/random.py"):
        return "sim: random streams"
    if "/sim/scenarios/" in path:
        return "sim: scenario " + path.rsplit("/", 1)[1]
    if "/sim/" in path:
        return "sim: runner/harness"
    if "/refwire/" in path:
        part = path.split("/refwire/")[-1]
        return "refwire: " + part.split("/")[0].removesuffix(".py")
    if path == "~":
        return "builtins (" + func.split(" of ")[0].removeprefix("<built-in method ").removeprefix("<method ").rstrip(">") + ")"
    return "other: " + path.rsplit("/", 1)[-1]


def worker(root: Path, protocol: str, first: int, n: int, profile: int) -> dict[str, Any]:
    _import_from(root)
    import trio

    from refwire.sim.runner import run_seed

    run_seed(protocol, first + n + 1000)  # warm-up: imports, caches
    run_module = sys.modules["trio._core._run"]
    batches = 0
    original_shuffle = run_module._r.shuffle

    def counting_shuffle(x: Any) -> None:  # trio shuffles each batch of runnable tasks once
        nonlocal batches
        batches += 1
        original_shuffle(x)

    times: list[tuple[float, int]] = []
    digest = hashlib.sha256()
    crashes: list[str] = []
    outcomes: collections.Counter[str] = collections.Counter()
    sim_time = 0.0
    profiler = cProfile.Profile() if profile else None
    run_module._r.shuffle = counting_shuffle
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if profiler is not None:
        profiler.enable()
    for seed in range(first, first + n):
        t = time.perf_counter()
        r = run_seed(protocol, seed)
        times.append((time.perf_counter() - t, seed))
        digest.update(f"{seed} {r.trace_hash} {r.outcome}\n".encode())
        outcomes[r.outcome] += 1
        sim_time += r.sim_time
        if r.outcome == "crash":
            crashes.append(f"seed {seed}: {r.detail[-300:]}")
    if profiler is not None:
        profiler.disable()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    del run_module._r.shuffle
    out: dict[str, Any] = {
        "protocol": protocol,
        "root": str(root),
        "trio": trio.__version__,
        "seeds": n,
        "wall": wall,
        "cpu": cpu,
        "slowest": sorted(times, reverse=True)[:TAIL],
        "traces": digest.hexdigest()[:16],
        "outcomes": dict(outcomes),
        "crashes": crashes,
        "sim_time": sim_time,
        "batches": batches,
    }
    if profiler is not None:
        stats = pstats.Stats(profiler)
        areas: collections.Counter[str] = collections.Counter()
        rows = []
        for (filename, line, func), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
            areas[_area(filename, func)] += tottime
            short = filename.split("/site-packages/")[-1].split(str(root) + "/")[-1]
            rows.append((tottime, ncalls, cumtime, f"{short}:{line}({func})"))
        total = sum(areas.values()) or 1.0
        out["profile"] = {
            "total": total,
            "areas": [(k, v / total) for k, v in areas.most_common(12)],
            "top": [(t / total, nc, c / total, name) for t, nc, c, name in sorted(rows, reverse=True)[:profile]],
        }
    return out


# --------------------------------------------------------------------------- orchestrator


def run_worker(root: Path, protocol: str, first: int, n: int, profile: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    args = [sys.executable, __file__, "--worker", str(root), protocol, str(first), str(n), str(profile)]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, check=False, timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[7:])
            return result
    print(f"FAILED: worker {protocol} from {root} exited {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    sys.exit(1)


def git_rev(root: Path) -> str:
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "src"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return rev + (" (+ uncommitted changes in src/)" if dirty else "")


def cell(values: list[float]) -> str:
    med = statistics.median(values)
    return f"{med:6.1f}" if len(values) == 1 else f"{med:6.1f} [{min(values):.1f}–{max(values):.1f}]"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        root, protocol, first, count, top = sys.argv[2:7]
        print("RESULT " + json.dumps(worker(Path(root), protocol, int(first), int(count), int(top))), flush=True)
        return 0
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=100, help="seeds per run (default 100)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--reps", type=int, default=1, help="runs per row, each in a fresh process (median printed)")
    p.add_argument("--protocols", default=",".join(PROTOCOLS), help=f"comma-separated subset of {','.join(PROTOCOLS)}")
    p.add_argument("--baseline", type=Path, help="another checkout to run side by side (e.g. a worktree of main)")
    p.add_argument("--profile", action="store_true", help="also one cProfile pass per protocol: time by area and top functions")
    p.add_argument("--top", type=int, default=15, help="functions listed by --profile (default 15)")
    p.add_argument("--quick", action="store_true", help="3 seeds per protocol: only checks the harness works")
    a = p.parse_args()
    protocols = [x for x in a.protocols.split(",") if x]
    unknown = sorted(set(protocols) - set(PROTOCOLS))
    if unknown:
        p.error(f"unknown protocols: {', '.join(unknown)}")
    n = 3 if a.quick else a.seeds
    if a.baseline and not any((a.baseline / d / "runner.py").is_file() for d in (PACKAGES["refwire.sim"], OLD_SIM)):
        p.error(f"--baseline {a.baseline} is not a refwire checkout (no src/refwire/sim/runner.py)")
    trees = [("this", ROOT)] + ([("baseline", a.baseline.resolve())] if a.baseline else [])
    load = os.getloadavg()
    print(
        f"refwire simulator, seeds {a.first_seed}..{a.first_seed + n - 1} per protocol, default knobs, one process per run, {a.reps} rep(s)"
    )
    for label, root in trees:
        print(f"  {label:8s} {root}  git {git_rev(root)}")
    print(f"  python {sys.version.split()[0]}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs")
    if load[0] > 0.8 * (os.cpu_count() or 1):
        print("  NOTE: the load average shows other processes sharing the machine; compare rows of this run only")
    runs: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for _rep in range(a.reps):
        for proto in protocols:
            for label, root in trees:
                runs[proto, label].append(run_worker(root, proto, a.first_seed, n, 0))
    failed = [c for rs in runs.values() for r in rs for c in r["crashes"]]

    print()
    head = f"{'protocol':20s} {'seeds/s (wall)':>22s} {'seeds/s (CPU)':>22s}"
    if a.baseline:
        head += f" {'baseline seeds/s (CPU)':>24s} {'this ÷ base':>11s}  traces"
    print(head)
    for proto in protocols:
        mine = runs[proto, "this"]
        line = f"{proto:20s} {cell([n / r['wall'] for r in mine]):>22s} {cell([n / r['cpu'] for r in mine]):>22s}"
        if a.baseline:
            base = runs[proto, "baseline"]
            ratio = statistics.median(b["cpu"] for b in base) / statistics.median(r["cpu"] for r in mine)
            same = "same" if {r["traces"] for r in mine + base} == {mine[0]["traces"]} else "DIFFER"
            line += f" {cell([n / r['cpu'] for r in base]):>24s} {ratio:10.2f}×  {same}"
        print(line)

    print("\nWhere the time goes (this checkout, last rep):")
    print(
        f"{'protocol':20s} {'tail: 5 slowest seeds':>40s} {'share':>6s} {'batches/seed':>13s} {'virtual s/seed':>15s}  outcomes"
    )
    for proto in protocols:
        r = runs[proto, "this"][-1]
        tail = " ".join(f"{seed}:{t * 1000:.0f}ms" for t, seed in r["slowest"])
        share = sum(t for t, _ in r["slowest"]) / r["wall"]
        outcomes = " ".join(f"{k}={v}" for k, v in sorted(r["outcomes"].items()))
        print(f"{proto:20s} {tail:>40s} {share:6.0%} {r['batches'] / n:13.0f} {r['sim_time'] / n:15.1f}  {outcomes}")

    if a.profile:
        for proto in protocols:
            r = run_worker(ROOT, proto, a.first_seed, n, a.top)
            prof = r["profile"]
            print(f"\ncProfile, {proto} ({prof['total']:.2f} s of self time under the profiler): by area")
            for area, share in prof["areas"]:
                print(f"  {share:6.1%}  {area}")
            print(f"  top {a.top} functions by self time (self %, calls, cumulative %):")
            for self_share, calls, cum_share, name in prof["top"]:
                print(f"  {self_share:6.1%} {calls:>9d} {cum_share:7.1%}  {name}")
    if failed:
        print("FAILED: crashed seeds:\n  " + "\n  ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
