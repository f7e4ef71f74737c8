"""The decoders of both builds, pure Python and mypyc-compiled, in one process.

    bash scripts/build_mypyc.sh                 # once: compile the codec cores in place
    python benchmarks/mypyc_sidebyside.py [--passes 15] [--reps 3] [--quick]

The compiled build is imported as ``refwire`` from ``src/``; then the package is
imported a second time, from a copy of ``src/refwire`` without the ``.so`` files
(the pure build), with ``sys.modules`` switched between the two, so each row holds
the classes of its own build.  The rows are the decode blocks of
``lumberjack_bench.py``, ``pravega_bench.py``, ``tank_bench.py`` and
``seastar_bench.py`` (same streams, same refwire calls, same bare ``struct``
floors, the floors written in plain Python: TANK's uses the pure build's
``decode_uvarint``, as ``tank_bench.py`` run on the pure build does).  Every row
of a protocol, floor and both builds, runs in turn pass after pass and keeps its
best pass; a rep is a fresh round of passes and the table shows the median of the
reps' ratios (bare ÷ refwire: how many times slower than the floor).  In one
process the load of a shared machine lands on both builds alike, which
``mypyc_compare.py`` (one process per build) cannot promise.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from _floors import lumberjack_frames, pravega_appends, seastar_responses, tank_chunk  # noqa: E402
from _lj_decode import build_streams  # noqa: E402

X = "\u00d7"
Row = Callable[[], int]


def _modules(names: list[str]) -> dict[str, ModuleType]:
    import importlib

    return {name: importlib.import_module(name) for name in names}


NEEDED = [
    "refwire.wire",
    "refwire.lumberjack",
    "refwire.pravega.connection",
    "refwire.pravega.events",
    "refwire.pravega.frames",
    "refwire.pravega.writer",
    "refwire.tank",
    "refwire.seastar_rpc",
]


def load_builds(tmp: Path) -> dict[str, dict[str, ModuleType]]:
    """``{"compiled": modules, "pure": modules}``, each imported on its own."""
    compiled = _modules(NEEDED)
    if not isinstance(compiled["refwire.wire"].__loader__, __import__("importlib.machinery").machinery.ExtensionFileLoader):
        raise SystemExit("mypyc_sidebyside: refwire.wire is not compiled; run `bash scripts/build_mypyc.sh` first")
    saved = {k: v for k, v in sys.modules.items() if k == "refwire" or k.startswith("refwire.")}
    for k in saved:
        del sys.modules[k]
    shutil.copytree(ROOT / "src" / "refwire", tmp / "refwire", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    sys.path.insert(0, str(tmp))
    try:
        pure = _modules(NEEDED)
    finally:
        sys.path.remove(str(tmp))
    if not (pure["refwire.wire"].__file__ or "").endswith(".py"):
        raise SystemExit("mypyc_sidebyside: the pure copy imported compiled modules")
    for k in [k for k in sys.modules if k == "refwire" or k.startswith("refwire.")]:
        del sys.modules[k]
    sys.modules.update(saved)
    return {"pure": pure, "compiled": compiled}


# --------------------------------------------------------------------------- rows (as in the benchmark scripts)


def lumberjack_rows(n: int, builds: dict[str, dict[str, ModuleType]]) -> tuple[int, dict[str, Row]]:
    plain, _ = build_streams(n)
    def bare() -> int:
        return lumberjack_frames(plain)

    def decoder(mods: dict[str, ModuleType]) -> Row:
        frame_decoder = mods["refwire.lumberjack"].FrameDecoder

        def run() -> int:
            d = frame_decoder(validate_json=False)
            d.feed(plain)
            return len(d.frames())

        return run

    return n, {"bare": bare, **{f"FrameDecoder|{b}": decoder(m) for b, m in builds.items()}}


def pravega_rows(n: int, builds: dict[str, dict[str, ModuleType]]) -> tuple[int, dict[str, Row]]:
    pure = builds["pure"]
    fr = pure["refwire.pravega.frames"]
    wid = uuid.UUID(int=7)
    session = pure["refwire.pravega.writer"].WriterSession("sc/st/0.#epoch.0", wid, style="rust", max_batch_events=1)
    for i in range(n):
        session.add((b"%08d" % i) + b"x" * 92)
    session.setup(1)
    session.on_append_setup(fr.AppendSetup(request_id=1, segment=session.segment, writer_id=wid, last_event_number=fr.NULL_VALUE))
    setup = fr.Hello().encode() + fr.SetupAppend(request_id=1, writer_id=wid, segment=session.segment).encode()
    stream = session.take()
    def bare() -> int:
        return pravega_appends(stream)

    def decoder(mods: dict[str, ModuleType]) -> Row:
        command_decoder = mods["refwire.pravega.frames"].CommandDecoder

        def run() -> int:
            d = command_decoder(allow_inner=True)
            d.feed(stream)
            events = 0  # as pravega_bench.py's decoder row: AppendBlockEnds in runs, as the server decodes
            while True:
                block_ends = d.block_ends()
                if block_ends is not None:
                    events += sum(block_ends.num_events)
                    d.consume(sum(block_ends.frame_sizes))
                    continue
                cmd = d.next_command()
                if cmd is None:
                    return events
                events += getattr(cmd, "num_events", 0)

        return run

    def machine(mods: dict[str, ModuleType]) -> Row:
        server_connection = mods["refwire.pravega.connection"].ServerConnection
        append_cls = mods["refwire.pravega.events"].Append
        f = mods["refwire.pravega.frames"]

        def run() -> int:
            conn = server_connection()
            conn.receive_data(setup, now=0.0)
            conn.next_event()
            conn.next_event()
            conn.send(
                f.AppendSetup(request_id=1, segment=session.segment, writer_id=wid, last_event_number=f.NULL_VALUE), now=0.0
            )
            conn.receive_data(stream, now=0.0)
            count = 0
            while True:
                e = conn.next_event()
                if isinstance(e, append_cls):
                    count += e.event_count
                else:
                    return count

        return run

    rows: dict[str, Row] = {"bare": bare}
    for b, m in builds.items():
        rows[f"CommandDecoder|{b}"] = decoder(m)
        rows[f"ServerConnection|{b}"] = machine(m)
    return n, rows


def tank_rows(n: int, builds: dict[str, dict[str, ModuleType]]) -> tuple[int, dict[str, Row]]:
    tank = builds["pure"]["refwire.tank"]
    decode_uvarint = builds["pure"]["refwire.wire"].decode_uvarint  # the floor stays pure Python
    msgs = [tank.Message(b"y" * 32, 1_700_000_000_000 + i // 10) for i in range(100)]
    plain = b"".join(tank.encode_entry(tank.encode_bundle(msgs, compress=False)) for _ in range(n // 100))
    total = (n // 100) * 100
    def bare() -> int:
        return tank_chunk(plain, decode_uvarint)

    def refwire(mods: dict[str, ModuleType]) -> Row:
        read_chunk = mods["refwire.tank"].read_chunk

        def run() -> int:
            return read_chunk(plain, base_seq=1, hwmark=2**62, requested_seq=0).count  # the columns, as tank_bench.py's first row

        return run

    return total, {"bare": bare, **{f"read_chunk|{b}": refwire(m) for b, m in builds.items()}}


def seastar_rows(n: int, builds: dict[str, dict[str, ModuleType]]) -> tuple[int, dict[str, Row]]:
    body = b"x" * 16
    response = builds["pure"]["refwire.seastar_rpc"].Response
    wire = b"".join(response(i, body, 0).encode(with_duration=True) for i in range(1, n + 1))
    def bare() -> int:
        return seastar_responses(wire)

    def refwire(mods: dict[str, ModuleType]) -> Row:
        frame_decoder = mods["refwire.seastar_rpc"].FrameDecoder

        def run() -> int:  # as seastar_bench.py's main row: runs, as the client decodes
            d = frame_decoder("response", negotiation=False)
            d.configure(duration=True)
            d.feed(wire)
            k = 0
            while (responses := d.next_responses()) is not None:
                k += len(responses)
            while d.next_frame() is not None:
                k += 1
            return k

        return run

    return n, {"bare": bare, **{f"FrameDecoder|{b}": refwire(m) for b, m in builds.items()}}


# --------------------------------------------------------------------------- timing


def best_of_interleaved(rows: dict[str, Row], expect: int, passes: int) -> dict[str, float]:
    for name, fn in rows.items():  # checked (and warmed up) before any timing
        got = fn()
        if got != expect:
            raise SystemExit(f"mypyc_sidebyside: {name} decoded {got}, expected {expect}")
    best = dict.fromkeys(rows, float("inf"))
    for _ in range(passes):
        for name, fn in rows.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


GOALS = {
    "Lumberjack FrameDecoder": "≤ 2" + X,
    "Pravega CommandDecoder": "≤ 2" + X,
    "Pravega ServerConnection": "≤ 3" + X,
    "TANK read_chunk": "≤ 2" + X,
    "Seastar FrameDecoder": "≤ 2" + X,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passes", type=int, default=15, help="interleaved passes per rep, best kept (default 15)")
    ap.add_argument("--reps", type=int, default=3, help="reps, the median ratio shown (default 3)")
    ap.add_argument("--quick", action="store_true", help="small streams, 3 passes, 1 rep (checks the harness, not the numbers)")
    args = ap.parse_args()
    if args.quick:
        args.passes, args.reps = 3, 1
    sizes = (
        {"lumberjack": 2000, "pravega": 2000, "tank": 5000, "seastar": 20000}
        if args.quick
        else {
            "lumberjack": 20000,
            "pravega": 20000,
            "tank": 50000,
            "seastar": 200000,
        }
    )
    protocols: list[tuple[str, Callable[[int, dict[str, dict[str, ModuleType]]], tuple[int, dict[str, Row]]]]] = [
        ("Lumberjack", lumberjack_rows),
        ("Pravega", pravega_rows),
        ("TANK", tank_rows),
        ("Seastar", seastar_rows),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        builds = load_builds(Path(tmp))
        ratios: dict[str, dict[str, list[float]]] = {}
        for proto, make in protocols:
            expect, rows = make(sizes[proto.lower()], builds)
            for _ in range(args.reps):
                best = best_of_interleaved(rows, expect, args.passes)
                for name, t in best.items():
                    if name == "bare":
                        continue
                    decoder, build = name.split("|")
                    ratios.setdefault(f"{proto} {decoder}", {}).setdefault(build, []).append(t / best["bare"])
            line = "   ".join(
                f"{label.split(' ', 1)[1]} {b} {statistics.median(v):.2f}{X}"
                for label, per in ratios.items()
                if label.startswith(proto)
                for b, v in per.items()
            )
            print(f"{proto}: {line}", flush=True)
    meta: dict[str, Any] = {"passes": args.passes, "reps": args.reps, "python": sys.version.split()[0]}
    print(f"\nbare ÷ refwire (median of {meta['reps']} reps, each the best of {meta['passes']} interleaved passes)")
    print("| decoder | pure Python | mypyc-compiled | goal |")
    print("| --- | --- | --- | --- |")
    for label, per in ratios.items():
        print(
            f"| {label} | {statistics.median(per['pure']):.2f}{X} | {statistics.median(per['compiled']):.2f}{X} | {GOALS.get(label, '')} |"
        )


if __name__ == "__main__":
    main()
