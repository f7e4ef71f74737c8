"""Simulation campaigns on Spark, and the tables over their results.

* Seeds come from ``spark.range`` (nothing is shipped from the driver): id ``i``
  stands for :func:`~refwire.pipeline.campaign.task_at` ``(protocols, first, i)``,
  so protocols interleave and every partition is balanced.
* ``mapInArrow`` runs :func:`~refwire.pipeline.campaign.seed_row` per id in the
  Python workers and returns Arrow batches of :data:`CAMPAIGN_COLUMNS`.
* Progress: Spark counts finished tasks only, so on a local master each worker
  also appends one byte per finished seed to a marks file the driver's
  progress thread measures (:class:`_Progress`): the display moves seed by
  seed; on a cluster it moves task by task.
* Results are appended to Parquet under ``OUT/runs``, partitioned by
  ``campaign`` and ``protocol``; re-running a campaign id replaces only its own
  partitions (dynamic partition overwrite).
* Tables: :func:`failures`, :func:`coverage`, :func:`sensitivity`,
  :func:`diff` -- plain DataFrame functions, written under ``OUT/tables/<campaign>/``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .campaign import CAMPAIGN_COLUMNS, seed_row, task_at
from .machines import catalog, parse_transition
from .schema import arrow_schema, spark_ddl

__all__ = [
    "campaign_runs",
    "coverage",
    "diff",
    "failures",
    "run_campaign",
    "sensitivity",
    "write_tables",
]


def _seed_batches(
    protocols: tuple[str, ...],
    first_seed: int,
    campaign: str,
    workload: dict[str, Any] | None,
    batch_rows: int,
    marks: str | None = None,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function: a row per id; with ``marks`` (a local
    master's file), one byte appended to it per finished seed."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa  # type: ignore[import-untyped]

        schema = arrow_schema(CAMPAIGN_COLUMNS)
        rows: list[dict[str, Any]] = []
        fd = None if marks is None else os.open(marks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            for batch in batches:
                for i in batch.column(0).to_pylist():
                    p, s = task_at(protocols, first_seed, int(i))
                    row = seed_row(p, s, campaign=campaign, workload=workload)
                    row["counts"] = list(row["counts"].items())
                    rows.append(row)
                    if fd is not None:
                        os.write(fd, b".")  # O_APPEND: one byte per seed, whatever the other workers write
                    if len(rows) >= batch_rows:
                        yield pa.RecordBatch.from_pylist(rows, schema=schema)
                        rows = []
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=schema)
        finally:
            if fd is not None:
                os.close(fd)

    return run


def campaign_runs(
    spark: Any,
    protocols: Sequence[str],
    seeds: int,
    *,
    first_seed: int = 0,
    campaign: str = "",
    workload: dict[str, Any] | None = None,
    partitions: int | None = None,
    marks: str | None = None,
) -> Any:
    """The (lazy) DataFrame of campaign rows, one per (protocol, seed); ``marks``:
    a file each worker appends a byte to per finished seed (a local master only)."""
    protos = tuple(protocols)
    total = seeds * len(protos)
    cores = int(spark.sparkContext.defaultParallelism)
    # Small tasks give a live progress count and balance slow seeds; ~25 runs per task.
    parts = partitions or max(1, min(total, max(2 * cores, total // 25)))
    ids = spark.range(0, total, numPartitions=parts)
    fn = _seed_batches(protos, first_seed, campaign, workload, batch_rows=64, marks=marks)
    return ids.mapInArrow(fn, spark_ddl(CAMPAIGN_COLUMNS))


class _Progress:
    """Reports progress from a thread: seeds finished (the marks file's size,
    when the workers write one) or else Spark's finished tasks (its status
    tracker), as ``report(done, total)``."""

    def __init__(
        self,
        spark: Any,
        report: Callable[[int, int], None],
        interval: float = 0.5,
        *,
        marks: str | None = None,
        seeds: int = 0,
    ) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.report = report
        self.interval = interval
        self.marks = marks
        self.seeds = seeds
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="refwire-progress", daemon=True)

    def poll(self) -> None:
        """Report once (the thread calls this every ``interval`` seconds)."""
        if self.marks is not None and self.seeds:
            try:
                done = os.stat(self.marks).st_size
            except OSError:
                done = 0
            self.report(min(done, self.seeds), self.seeds)
            return
        done = total = 0
        for stage in self.tracker.getActiveStageIds():
            info = self.tracker.getStageInfo(stage)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        if total:
            self.report(done, total)

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            self.poll()

    def __enter__(self) -> _Progress:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _interruptible(spark: Any, job: Callable[[], Any]) -> None:
    """Run a Spark ``job`` from a thread while this thread waits, so Ctrl-C is
    never delivered inside a Py4J call (which leaves the gateway's connection
    half-read and makes every later call fail loudly).  On Ctrl-C the job is
    cancelled -- a cancelled write commits nothing -- and KeyboardInterrupt goes on."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            job()
        except BaseException as exc:  # handed to the waiting thread
            failure.append(exc)

    thread = threading.Thread(target=target, name="refwire-spark-job", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.25)
    except KeyboardInterrupt:
        try:
            spark.sparkContext.cancelAllJobs()
        except Exception:  # the interrupt is what matters; a gateway in trouble is stopped next
            pass
        raise
    if failure:
        raise failure[0]


def run_campaign(
    spark: Any,
    protocols: Sequence[str],
    seeds: int,
    out: str | Path,
    *,
    campaign: str,
    first_seed: int = 0,
    workload: dict[str, Any] | None = None,
    partitions: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Any:
    """Run the campaign, append it to ``OUT/runs`` and return its rows (read back from Parquet)."""
    runs_path = str(Path(out) / "runs")
    marks: str | None = None
    if progress is not None and str(spark.sparkContext.master).startswith("local"):
        # the workers are on this machine: they mark each finished seed in a file
        (Path(out) / "logs").mkdir(parents=True, exist_ok=True)
        marks = str((Path(out) / "logs" / f"{campaign}.progress").resolve())
        Path(marks).write_bytes(b"")
    df = campaign_runs(
        spark, protocols, seeds, first_seed=first_seed, campaign=campaign, workload=workload, partitions=partitions, marks=marks
    )
    writer = df.write.mode("overwrite").partitionBy("campaign", "protocol")
    try:
        if progress is None:
            _interruptible(spark, lambda: writer.parquet(runs_path))
        else:
            with _Progress(spark, progress, marks=marks, seeds=seeds * len(protocols)):
                _interruptible(spark, lambda: writer.parquet(runs_path))
    finally:
        if marks is not None:
            Path(marks).unlink(missing_ok=True)
    from pyspark.sql import functions as F

    return spark.read.parquet(runs_path).where(F.col("campaign") == campaign)


# --------------------------------------------------------------------------- tables


def failures(runs: Any) -> Any:
    """Per (campaign, protocol, failure kind): runs, the smallest seed, five example
    seeds and the one-line replay command of the smallest seed."""
    from pyspark.sql import functions as F

    return (
        runs.where(F.col("outcome") != "pass")
        .groupBy("campaign", "protocol", "outcome", "violation", "failure_kind")
        .agg(
            F.count("*").alias("runs"),
            F.min("seed").alias("min_seed"),
            F.slice(F.array_sort(F.collect_list("seed")), 1, 5).alias("example_seeds"),
            F.min_by("replay", "seed").alias("replay"),
            F.min_by("detail", "seed").alias("detail"),
        )
        .orderBy(F.desc("runs"), "protocol", "failure_kind")
    )


def coverage(spark: Any, runs: Any) -> Any:
    """Which states and transitions of each machine were reached, and which never were.

    Columns: campaign, protocol, machine, kind ("transition" or "state"), item,
    in_table (False: reached but missing from the machine's table), reached,
    runs (how many runs reached it), min_seed (the smallest of them), and for
    a transition ``unreached.toml`` explains, reason (one line) and reason_detail.
    """
    from pyspark.sql import functions as F

    per_run = runs.select("campaign", "protocol", "seed", F.explode("transitions").alias("item"))
    pairs = sorted((r["campaign"], r["protocol"]) for r in runs.select("campaign", "protocol").distinct().collect())
    tables = {p: catalog(p) or [] for _, p in pairs}
    known = {t.key: t for ts in tables.values() for t in ts}
    reached_keys = {r["item"] for r in per_run.select("item").distinct().collect()}
    ends: dict[str, list[str]] = {}
    for key in sorted(reached_keys | set(known)):
        t = parse_transition(key, known)
        if t is not None:
            ends[key] = sorted({f"{t.machine}:{t.source}", f"{t.machine}:{t.target}"})
    state_of = F.create_map(*[x for k, v in ends.items() for x in (F.lit(k), F.array(*[F.lit(s) for s in v]))])
    agg = (F.count("*").alias("runs"), F.min("seed").alias("min_seed"))
    reached_t = per_run.groupBy("campaign", "protocol", "item").agg(*agg).withColumn("kind", F.lit("transition"))
    reached_s = (
        per_run.select("campaign", "protocol", "seed", F.explode(state_of[F.col("item")]).alias("item"))
        .distinct()
        .groupBy("campaign", "protocol", "item")
        .agg(*agg)
        .withColumn("kind", F.lit("state"))
    )
    rows: list[tuple[str, str, str, str]] = []
    for camp, proto in pairs:
        states = set()
        for t in tables[proto]:
            rows.append((camp, proto, "transition", t.key))
            states.update({f"{t.machine}:{t.source}", f"{t.machine}:{t.target}"})
        rows.extend((camp, proto, "state", s) for s in sorted(states))
    table = spark.createDataFrame(rows, "campaign STRING, protocol STRING, kind STRING, item STRING").withColumn(
        "in_table", F.lit(True)
    )
    return (
        table.join(reached_t.unionByName(reached_s), ["campaign", "protocol", "kind", "item"], "full_outer")
        .join(_reasons(spark), ["protocol", "kind", "item"], "left")
        .select(
            "campaign",
            "protocol",
            F.split("item", ":").getItem(0).alias("machine"),
            "kind",
            "item",
            F.coalesce("in_table", F.lit(False)).alias("in_table"),
            F.col("runs").isNotNull().alias("reached"),
            F.coalesce("runs", F.lit(0)).alias("runs"),
            "min_seed",
            "reason",
            "reason_detail",
        )
        .orderBy("campaign", "protocol", "machine", "kind", "item")
    )


def _reasons(spark: Any) -> Any:
    """``unreached.toml`` as a DataFrame: protocol, kind ("transition"), item,
    reason (one line) and reason_detail (the full account)."""
    from .unreached import details, reasons

    full = details()
    rows = [(p, "transition", k, r, full[p][k]) for p, table in sorted(reasons().items()) for k, r in sorted(table.items())]
    return spark.createDataFrame(rows, "protocol STRING, kind STRING, item STRING, reason STRING, reason_detail STRING")


def sensitivity(runs: Any) -> Any:
    """Failure rate per knob value: each fault kind on/off, and each workload knob
    with 2 to 12 distinct values in the campaign (``knob`` is ``fault:<kind>``
    or ``workload:<key>``).  ``lift`` = rate at this value - the protocol's overall rate."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from refwire.sim.faults import FAULT_KINDS

    failed = (F.col("outcome") != "pass").cast("int")
    fault_knobs = F.array(
        *[
            F.struct(F.lit(f"fault:{k}").alias("knob"), F.when(F.array_contains("fault_kinds", k), "on").otherwise("off").alias("value"))
            for k in FAULT_KINDS
        ]
    )
    wl = F.from_json("workload_json", "MAP<STRING,STRING>")
    workload_knobs = F.transform(F.map_entries(wl), lambda e: F.struct(F.concat(F.lit("workload:"), e["key"]).alias("knob"), e["value"].alias("value")))
    per_run = runs.select("campaign", "protocol", failed.alias("failed"), F.explode(F.concat(fault_knobs, workload_knobs)).alias("kv"))
    grouped = per_run.groupBy("campaign", "protocol", F.col("kv.knob").alias("knob"), F.col("kv.value").alias("value")).agg(
        F.count("*").alias("runs"), F.sum("failed").alias("failures")
    )
    by_knob = Window.partitionBy("campaign", "protocol", "knob")
    overall = runs.groupBy("campaign", "protocol").agg((F.sum(failed) / F.count("*")).alias("overall_rate"))
    return (
        grouped.withColumn("distinct_values", F.count("*").over(by_knob))
        .where(F.col("distinct_values").between(2, 12))
        .drop("distinct_values")
        .withColumn("failure_rate", F.col("failures") / F.col("runs"))
        .join(overall, ["campaign", "protocol"])
        .withColumn("lift", F.col("failure_rate") - F.col("overall_rate"))
        .orderBy("campaign", "protocol", F.desc("lift"), "knob", "value")
    )


def diff(runs: Any, campaign_a: str, campaign_b: str) -> Any:
    """Join two campaigns on (protocol, seed): ``change`` is ``fixed`` (failed in A,
    passes in B), ``broke``, ``failure-changed``, ``trace-changed`` (same outcome,
    another trace hash), ``same``, ``only-a`` or ``only-b``."""
    from pyspark.sql import functions as F

    def side(name: str, tag: str) -> Any:
        return runs.where(F.col("campaign") == name).select(
            "protocol",
            "seed",
            F.col("outcome").alias(f"outcome_{tag}"),
            F.col("failure_kind").alias(f"failure_{tag}"),
            F.col("trace_hash").alias(f"trace_{tag}"),
            F.col("replay").alias(f"replay_{tag}"),
        )

    j = side(campaign_a, "a").join(side(campaign_b, "b"), ["protocol", "seed"], "full_outer")
    change = (
        F.when(F.col("outcome_a").isNull(), "only-b")
        .when(F.col("outcome_b").isNull(), "only-a")
        .when((F.col("outcome_a") != "pass") & (F.col("outcome_b") == "pass"), "fixed")
        .when((F.col("outcome_a") == "pass") & (F.col("outcome_b") != "pass"), "broke")
        .when(F.col("failure_a") != F.col("failure_b"), "failure-changed")
        .when(F.col("trace_a") != F.col("trace_b"), "trace-changed")
        .otherwise("same")
    )
    return j.withColumn("change", change).orderBy("protocol", "seed")


def write_tables(spark: Any, runs: Any, out: str | Path, campaign: str) -> dict[str, Any]:
    """Compute the tables for one campaign, write each as Parquet under
    ``OUT/tables/<campaign>/<name>`` and return them (read back, cheap to show)."""
    base = Path(out) / "tables" / campaign
    tables = {"failures": failures(runs), "coverage": coverage(spark, runs), "sensitivity": sensitivity(runs)}
    result = {}
    for name, df in tables.items():
        path = str(base / name)
        df.coalesce(1).write.mode("overwrite").parquet(path)
        result[name] = spark.read.parquet(path)
    return result


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``(fn(), wall seconds)`` -- for the CLI summary and the benchmark."""
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0
