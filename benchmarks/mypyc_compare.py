"""The decoder benchmarks on the pure-Python and the mypyc-compiled build, side by side.

    bash scripts/build_mypyc.sh                 # once: compile the codec cores in place
    python benchmarks/mypyc_compare.py [--rounds N] [--only lumberjack,pravega,tank,seastar]

Each round runs every decode block twice, once per build, back to back: for the
pure run the compiled modules are moved aside (to ``build/mypyc-stash``) and put
back afterwards, whatever happens.  Every block times its own bare ``struct``
floor in the same process, so each figure is already a ratio (bare ÷ refwire,
how many times slower than the floor) and the two builds' ratios compare
directly.  The table shows, per decoder and build, the median ratio of the rounds
and their range (``--rounds``, default 3; the builds alternate block by block, so
drift on the machine lands on both alike).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STASH = ROOT / "build" / "mypyc-stash"
PY = sys.executable
X = "\u00d7"  # the multiplication sign the scripts print after a ratio

#: (block, command, [(decoder label, regex of its ratio in the output)])
BLOCKS: list[tuple[str, list[str], list[tuple[str, str]]]] = [
    (
        "lumberjack",
        [PY, str(ROOT / "benchmarks" / "_lj_decode.py"), "--reps", "3", "--passes", "5"],
        [("Lumberjack FrameDecoder, no JSON", "decoder_raw"), ("Lumberjack ServerConnection, W 2048, no JSON", "conn_raw")],
    ),
    (
        "pravega",
        [PY, str(ROOT / "benchmarks" / "pravega_bench.py"), "--only", "decode"],
        [
            ("Pravega CommandDecoder, Rust-style", r"rust-style.*?\n\s*bare ÷ this: CommandDecoder ([\d.]+)" + X),
            ("Pravega ServerConnection, Rust-style", r"rust-style.*?\n\s*bare ÷ this: .*?ServerConnection ([\d.]+)" + X),
            ("Pravega CommandDecoder, Java-style", r"java-style.*?\n\s*bare ÷ this: CommandDecoder ([\d.]+)" + X),
            ("Pravega ServerConnection, Java-style", r"java-style.*?\n\s*bare ÷ this: .*?ServerConnection ([\d.]+)" + X),
        ],
    ),
    (
        "tank",
        [PY, str(ROOT / "benchmarks" / "tank_bench.py"), "--only", "decode"],
        [("TANK read_chunk", r"bare ÷ refwire: ([\d.]+)" + X)],
    ),
    (
        "seastar",
        [PY, str(ROOT / "benchmarks" / "seastar_bench.py"), "--only", "decode"],
        [("Seastar FrameDecoder", r"FrameDecoder costs ([\d.]+)x")],
    ),
]

GOALS = {
    "Lumberjack FrameDecoder, no JSON": "≤ 2" + X,
    "Pravega CommandDecoder, Rust-style": "≤ 2" + X,
    "Pravega ServerConnection, Rust-style": "≤ 3" + X,
    "TANK read_chunk": "≤ 2" + X,
    "Seastar FrameDecoder": "≤ 2" + X,
}


def compiled_modules() -> list[Path]:
    return sorted(p for top in ("src", "sim") for p in (ROOT / top).rglob("*.so"))


def stash() -> None:
    for so in compiled_modules():
        dest = STASH / so.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(so, dest)


def unstash() -> None:
    if not STASH.exists():
        return
    for so in sorted(STASH.rglob("*.so")):
        shutil.move(so, ROOT / so.relative_to(STASH))
    shutil.rmtree(STASH)


def check_build(expect_compiled: bool) -> None:
    code = "import refwire.wire as w, sys; sys.stdout.write(w.__file__ or '')"
    where = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    if where.endswith(".py") == expect_compiled:
        raise SystemExit(f"mypyc_compare: expected the {'compiled' if expect_compiled else 'pure'} build, got {where}")


def ratios(block: str, out: str, patterns: list[tuple[str, str]]) -> dict[str, float]:
    if block == "lumberjack":  # _lj_decode.py prints raw seconds: median of passes per rep, best rep kept
        rows = {r["key"]: min(r["seconds"]) for r in json.loads(out.split("RESULT ", 1)[1])["rows"]}
        return {label: rows[key] / rows["bare"] for label, key in patterns}
    got = {}
    for label, pattern in patterns:
        m = re.search(pattern, out)
        if m is None:
            raise SystemExit(f"mypyc_compare: no ratio for {label} in the {block} output:\n{out}")
        got[label] = float(m.group(1))
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of pure + compiled runs; the median ratio of each is shown")
    ap.add_argument("--only", default="lumberjack,pravega,tank,seastar", help="comma-separated blocks")
    args = ap.parse_args()
    only = set(args.only.split(","))
    unstash()  # a previous run that was killed mid-way
    if not compiled_modules():
        raise SystemExit("mypyc_compare: no compiled modules; run `bash scripts/build_mypyc.sh` first")
    print("compiled modules:", ", ".join(str(p.relative_to(ROOT / "src")).split(".")[0] for p in compiled_modules()))
    seen: dict[str, dict[str, list[float]]] = {"pure": {}, "compiled": {}}
    for rnd in range(args.rounds):
        for block, cmd, patterns in BLOCKS:
            if block not in only:
                continue
            for build in ("pure", "compiled"):
                try:
                    if build == "pure":
                        stash()
                    check_build(build == "compiled")
                    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False, timeout=1800)
                finally:
                    unstash()
                if proc.returncode != 0:
                    raise SystemExit(f"mypyc_compare: {block} ({build}) failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
                got = ratios(block, proc.stdout, patterns)
                print(
                    f"round {rnd + 1} {block:10} {build:8} " + "   ".join(f"{k}: {v:.2f}{X}" for k, v in got.items()), flush=True
                )
                for label, value in got.items():
                    seen[build].setdefault(label, []).append(value)
    print()
    print("| decoder (bare ÷ refwire: median of the rounds, range) | pure Python | mypyc-compiled | goal |")
    print("| --- | --- | --- | --- |")

    def cell(xs: list[float]) -> str:
        return f"{statistics.median(xs):.2f}{X} ({min(xs):.2f} to {max(xs):.2f})"

    for label in seen["pure"]:
        print(f"| {label} | {cell(seen['pure'][label])} | {cell(seen['compiled'][label])} | {GOALS.get(label, '')} |")


if __name__ == "__main__":
    main()
