"""Pipeline benchmark: side by side in one run,

* seeds/s of the loop, multiprocessing and local Spark campaign runners on the
  same campaign (Spark's fixed start-up and first-job warm-up reported apart);
* frames/s of capture decoding in a plain loop vs on Spark (the
  ``refwire-capture`` data source, counted, and written to Parquet).

    .venv/bin/python benchmarks/pipeline_bench.py [--seeds 100] [--protocols all] [--conns 200] [--quick]

Wall seconds; the machine's other load shows in them (compare figures of one run only).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=100, help="seeds per protocol (default 100)")
    ap.add_argument("--protocols", default="all")
    ap.add_argument("--conns", type=int, default=200, help="connections in the synthetic capture (default 200)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.conns = 4, 10

    from refwire.pipeline import spark_campaign as sc
    from refwire.pipeline.campaign import resolve_protocols, run_loop, run_pool
    from refwire.pipeline.capture import decode_capture
    from refwire.pipeline.datasource import register
    from refwire.pipeline.dialects.lumberjack import FAULTS, write_lumberjack_capture
    from refwire.pipeline.session import local_spark

    protocols = resolve_protocols(args.protocols)
    n = args.seeds * len(protocols)
    cores = os.cpu_count() or 1
    print(f"campaign: {', '.join(protocols)} x {args.seeds} seeds = {n} runs; {cores} cores")
    results: list[tuple[str, float, float]] = []

    t = time.perf_counter()
    run_loop(protocols, 0, args.seeds)
    results.append(("loop", time.perf_counter() - t, 0.0))

    t = time.perf_counter()
    run_pool(protocols, 0, args.seeds, processes=cores)
    results.append((f"multiprocessing Pool({cores}) incl. spawn", time.perf_counter() - t, 0.0))

    t = time.perf_counter()
    spark = local_spark("refwire-bench")
    startup = time.perf_counter() - t
    t = time.perf_counter()
    spark.range(0, 100, numPartitions=cores).rdd.mapPartitions(lambda it: [sum(1 for _ in it)]).collect()
    warmup = time.perf_counter() - t
    with tempfile.TemporaryDirectory(prefix="refwire-bench-") as tmp:
        t = time.perf_counter()
        runs = sc.run_campaign(spark, protocols, args.seeds, tmp, campaign="bench")
        results.append((f"Spark {spark.sparkContext.master} -> Parquet", time.perf_counter() - t, 0.0))
        t = time.perf_counter()
        sc.write_tables(spark, runs, tmp, "bench")
        tables = time.perf_counter() - t

        print(f"{'runner':<40}{'wall s':>9}{'seeds/s':>10}{'vs loop':>9}")
        base = results[0][1]
        for name, wall, _ in results:
            print(f"{name:<40}{wall:>9.2f}{n / wall:>10.1f}{base / wall:>8.2f}x")
        print(f"Spark fixed costs: session start {startup:.2f} s, first Python job {warmup:.2f} s; tables (failures, coverage, sensitivity) {tables:.2f} s")

        cap = Path(tmp) / "capture"
        faults = [FAULTS[i % 3] if i % 11 == 0 else "" for i in range(args.conns)]
        write_lumberjack_capture(cap, faults, windows=10, window_size=50)
        size = sum(p.stat().st_size for p in cap.iterdir())
        t = time.perf_counter()
        frames = sum(1 for _ in decode_capture("lumberjack", cap))
        loop_s = time.perf_counter() - t
        register(spark)
        df = spark.read.format("refwire-capture").option("protocol", "lumberjack").load(str(cap))
        t = time.perf_counter()
        spark_count = df.count()
        count_s = time.perf_counter() - t
        t = time.perf_counter()
        df.write.mode("overwrite").parquet(str(Path(tmp) / "frames"))
        write_s = time.perf_counter() - t
        assert spark_count == frames, (spark_count, frames)
        print(f"\ndecode: {args.conns} connections, {size / 1e6:.1f} MB, {frames} frames")
        print(f"{'decoder':<40}{'wall s':>9}{'frames/s':>12}")
        print(f"{'plain loop':<40}{loop_s:>9.2f}{frames / loop_s:>12.0f}")
        print(f"{'Spark data source, count':<40}{count_s:>9.2f}{frames / count_s:>12.0f}")
        print(f"{'Spark data source -> Parquet':<40}{write_s:>9.2f}{frames / write_s:>12.0f}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
