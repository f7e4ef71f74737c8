"""Freeze or check a table of simulator seeds -> outcome, counts and transitions.

A refactor that must not change behaviour (a new driver loop, a new layout) is
checked against the table frozen before it: per seed, the outcome, the
application-level counts and the transitions reached must stay equal.  A trace
hash, and the network counters (``net.*``: how the simulator happened to split
writes), may change with scheduling; they are reported, not failed.

    python scripts/seed_table.py freeze [--seeds 40] [--out tests/sim/seed_table.json]
    python scripts/seed_table.py check  [--table tests/sim/seed_table.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from refwire.sim.runner import run_seed
from refwire.sim.scenarios import SCENARIOS

DEFAULT_TABLE = Path(__file__).resolve().parent.parent / "tests" / "sim" / "seed_table.json"


def row(protocol: str, seed: int) -> dict[str, Any]:
    r = run_seed(protocol, seed)
    return {
        "outcome": r.failure_kind or "pass",
        "counts": dict(sorted(r.counts.items())),
        "transitions": sorted(r.transitions),
        "trace_hash": r.trace_hash,
    }


def freeze(seeds: int, out: Path) -> None:
    table = {p: {str(s): row(p, s) for s in range(1, seeds + 1)} for p in SCENARIOS}
    out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"froze {seeds} seeds x {len(table)} protocols into {out}")


def compare(frozen: dict[str, Any], now: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(differences that fail, differences that are only reported)."""
    bad: list[str] = []
    notes: list[str] = []
    if frozen["outcome"] != now["outcome"]:
        bad.append(f"outcome {frozen['outcome']} -> {now['outcome']}")
    if frozen["transitions"] != now["transitions"]:
        lost = sorted(set(frozen["transitions"]) - set(now["transitions"]))
        new = sorted(set(now["transitions"]) - set(frozen["transitions"]))
        bad.append(f"transitions lost {lost} new {new}")
    for key in sorted(set(frozen["counts"]) | set(now["counts"])):
        a, b = frozen["counts"].get(key), now["counts"].get(key)
        if a != b:
            (notes if key.startswith("net.") else bad).append(f"{key} {a} -> {b}")
    if frozen["trace_hash"] != now["trace_hash"]:
        notes.append("trace hash changed")
    return bad, notes


def check(path: Path, protocols: list[str] | None) -> int:
    table = json.loads(path.read_text())
    failed = changed = total = 0
    for protocol, seeds in table.items():
        if protocols and protocol not in protocols:
            continue
        for seed, frozen in seeds.items():
            total += 1
            bad, notes = compare(frozen, row(protocol, int(seed)))
            if bad:
                failed += 1
                print(f"FAIL {protocol} seed {seed}: " + "; ".join(bad))
            elif notes:
                changed += 1
                print(f"same {protocol} seed {seed} (" + "; ".join(notes) + ")")
    print(f"{total} seeds: {total - failed} equal in outcome, counts and transitions "
          f"({changed} with a new trace hash or net counters), {failed} differ")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("freeze")
    f.add_argument("--seeds", type=int, default=40)
    f.add_argument("--out", type=Path, default=DEFAULT_TABLE)
    c = sub.add_parser("check")
    c.add_argument("--table", type=Path, default=DEFAULT_TABLE)
    c.add_argument("--protocols", default="")
    args = ap.parse_args()
    if args.cmd == "freeze":
        freeze(args.seeds, args.out)
        return 0
    return check(args.table, [p for p in args.protocols.split(",") if p] or None)


if __name__ == "__main__":
    sys.exit(main())
