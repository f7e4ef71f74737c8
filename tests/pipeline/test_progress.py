"""The campaign's progress display: seeds per protocol follow the runners'
round-robin order exactly; Spark's task counts are marked as estimates; a
terminal gets a live display, anything else one line per interval."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from refwire.pipeline.campaign import task_at
from refwire.pipeline.progress import CampaignProgress

PROTOCOLS = ("lumberjack", "pravega", "tank")


def test_per_protocol_counts_follow_the_round_robin_order() -> None:
    shown = CampaignProgress(PROTOCOLS, stream=io.StringIO(), live=False)
    seeds = 7
    total = seeds * len(PROTOCOLS)
    for done in range(total + 1):
        expected = Counter(task_at(PROTOCOLS, 0, i)[0] for i in range(done))
        assert shown.per_protocol(done, total) == {p: (expected[p], seeds) for p in PROTOCOLS}


def test_plain_lines_once_per_interval_and_always_at_the_end() -> None:
    out = io.StringIO()
    shown = CampaignProgress(PROTOCOLS, stream=out, live=False, interval=3600)
    for done in range(1, 31):
        shown(done, 30)
    shown.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # the first call, then the last (interval not reached in between)
    assert lines[0].startswith("  seeds 1/30 (3%)") and "lumberjack 1/10, pravega 0/10, tank 0/10" in lines[0]
    assert lines[1].startswith("  seeds 30/30 (100%)") and "left" not in lines[1]


def test_spark_counts_are_marked_as_estimates() -> None:
    shown = CampaignProgress(PROTOCOLS, estimate=True, stream=io.StringIO(), live=False)
    assert "seeds ≈12/30" in shown.line(12, 30) and "lumberjack ≈4/10" in shown.line(12, 30)
    assert "≈" not in shown.line(30, 30)


def test_live_display_on_a_terminal() -> None:
    out = io.StringIO()
    shown = CampaignProgress(PROTOCOLS, stream=out, live=True)
    for done in range(1, 31):
        shown(done, 30)
    shown.close()
    text = out.getvalue()
    assert "lumberjack" in text and "tank" in text and "30/30" in text and "seeds/s" in text


def test_local_workers_mark_each_seed_and_the_progress_reports_seeds_not_tasks(tmp_path: Path) -> None:
    """On a local master the display moves seed by seed, not by Spark task: the
    worker function appends one byte per finished seed to the marks file, and
    the progress poll reports the file's size out of the campaign's seeds (its
    status tracker, which counts whole tasks, is not asked)."""
    pa = pytest.importorskip("pyarrow")
    from refwire.pipeline.spark_campaign import _Progress, _seed_batches

    marks = tmp_path / "c.progress"
    marks.write_bytes(b"")
    run = _seed_batches(("lumberjack", "tank"), 0, "c", None, batch_rows=1, marks=str(marks))
    sizes = []
    for batch in run(iter([pa.RecordBatch.from_pydict({"id": [0, 1, 2]})])):
        assert batch.num_rows == 1
        sizes.append(marks.stat().st_size)  # each batch goes out after its seed's mark
    assert sizes == [1, 2, 3]

    class Tracker:
        def getActiveStageIds(self) -> list[int]:  # Spark's name
            raise AssertionError("the marks file, not the task count")

    spark = SimpleNamespace(sparkContext=SimpleNamespace(statusTracker=Tracker))
    reports: list[tuple[int, int]] = []
    poller = _Progress(spark, lambda done, total: reports.append((done, total)), marks=str(marks), seeds=10)
    poller.poll()
    marks.write_bytes(b"." * 12)  # a retried task marks its seeds again: never past the total
    poller.poll()
    assert reports == [(3, 10), (10, 10)]
