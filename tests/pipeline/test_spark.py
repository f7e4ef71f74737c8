"""The Spark side (campaigns and capture analysis): a handful of tests sharing ONE session (conftest.py).

Everything these tests touch is also covered by pure tests; here we check that
the Spark jobs give the same answers and the tables the issue asks for.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from refwire.cli import main
from refwire.lumberjack import Batch
from refwire.lumberjack.server import ConnectionInfo, LumberjackServer
from refwire.pipeline import spark_campaign as sc
from refwire.pipeline.campaign import seed_row
from refwire.pipeline.capture import decode_capture
from refwire.pipeline.dialects.lumberjack import write_lumberjack_capture
from refwire.pipeline.spark_capture import analyze
from refwire.tap import open_tap

PEER = Path(__file__).resolve().parents[1] / "interop" / "peers" / "pylogbeat_send.py"
PLANTED = {"bug": "ack-before-deliver"}


def test_campaign_rows_tables_and_diff(spark: Any, tmp_path: Path) -> None:
    runs = sc.run_campaign(spark, ["lumberjack"], 6, tmp_path, campaign="base", first_seed=10)
    rows = {r["seed"]: r.asDict() for r in runs.collect()}
    assert sorted(rows) == list(range(10, 16))
    for seed in (10, 15):  # a Spark worker's row is the local row (determinism across processes)
        local = seed_row("lumberjack", seed, campaign="base")
        assert {k: rows[seed][k] for k in ("trace_hash", "outcome", "transitions", "counts")} == {
            k: local[k] for k in ("trace_hash", "outcome", "transitions", "counts")
        }
    bug = sc.run_campaign(spark, ["lumberjack"], 4, tmp_path, campaign="bug", first_seed=10, workload=PLANTED)
    tables = sc.write_tables(spark, bug, tmp_path, "bug")
    (f,) = tables["failures"].collect()
    assert (f["failure_kind"], f["runs"], f["min_seed"], list(f["example_seeds"])) == ("violation:ack-before-delivery", 4, 10, [10, 11, 12, 13])
    assert f["replay"].startswith("refwire sim lumberjack --seed 10 --knobs ")
    cov = {(r["kind"], r["item"]): r for r in tables["coverage"].collect()}
    assert cov[("transition", "client:idle-send->awaiting-ack")]["runs"] == 4
    assert cov[("state", "server:in-batch")]["reached"]
    assert ("transition", "server:await-window-W0->await-window") in cov  # reached by a hostile peer's empty window, or not
    assert any(k[0] == "transition" and not r["reached"] for k, r in cov.items())  # the table lists what no run reached too
    assert all(r["in_table"] for r in cov.values())
    knobs = {(r["knob"], r["value"]) for r in tables["sensitivity"].collect()}
    assert ("fault:reset", "on") in knobs or ("fault:reset", "off") in knobs
    d = {r["seed"]: r["change"] for r in sc.diff(spark.read.parquet(str(tmp_path / "runs")), "base", "bug").collect()}
    assert d == {10: "broke", 11: "broke", 12: "broke", 13: "broke", 14: "only-a", 15: "only-a"}


def test_campaign_command(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["campaign", "--protocols", "lumberjack", "--seeds", "3", "--out", str(out), "--campaign", "a"]) == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "  seeds 3/3 (100%)" in captured.err, captured.err  # the progress ends drawing the finished state
    assert "3 runs on local[2]" in text and "failures: none" in text and "never reached" in text
    # three seeds reach few of Lumberjack's transitions, and unreached.toml explains none of them
    assert ": not explained yet" in text and "NO REASON" not in text
    assert "(reason_detail)" in text
    cov = spark.read.parquet(str(out / "tables" / "a" / "coverage"))
    assert {"reason", "reason_detail"} <= set(cov.columns)
    assert (out / "runs" / "campaign=a" / "protocol=lumberjack").is_dir()
    assert (out / "tables" / "a" / "coverage").is_dir()
    args = ["campaign", "--protocols", "lumberjack", "--seeds", "3", "--out", str(out), "--campaign", "b", "--diff", "a", "--strict"]
    assert main([*args, "--workload", '{"bug": "ack-before-deliver"}']) == 1
    text = capsys.readouterr().out
    assert "violation:ack-before-delivery: 3 runs, smallest seed 0" in text and "diff a -> b: broke 3" in text
    replay = next(line.split("replay: ", 1)[1] for line in text.splitlines() if "replay: " in line)
    # The one-line replay command reproduces the failure locally.
    proc = subprocess.run([sys.executable, "-m", "refwire.cli", *_shell_split(replay)[1:]], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "ack-before-delivery" in proc.stdout
    assert spark.sparkContext._jsc is not None  # the command left the shared session running


def _shell_split(cmd: str) -> list[str]:
    import shlex

    return shlex.split(cmd)


def test_data_source_matches_the_loop(spark: Any, tmp_path: Path) -> None:
    from refwire.pipeline.datasource import register

    write_lumberjack_capture(tmp_path, ["", "seq-gap", "", "garbage", "wrong-ack"], windows=4, window_size=50)
    register(spark)
    df = spark.read.format("refwire-capture").option("protocol", "lumberjack").option("partitions", "3").option("chunkSize", "100").load(str(tmp_path))
    assert df.rdd.getNumPartitions() == 3
    got = sorted(tuple(r) for r in df.collect())
    want = sorted(tuple(r.values()) for r in decode_capture("lumberjack", tmp_path))
    assert got == want


def test_data_source_needs_a_protocol(tmp_path: Path) -> None:
    """No default protocol: the error names every protocol with a capture decoder, and auto."""
    pytest.importorskip("pyspark")
    from refwire.pipeline.datasource import CaptureReader
    from refwire.protocols import names

    with pytest.raises(ValueError, match=r"refwire-capture needs a protocol") as err:
        CaptureReader({"path": str(tmp_path)})
    assert all(name in str(err.value) for name in (*names("decoder"), "auto"))
    assert CaptureReader({"path": str(tmp_path), "protocol": "auto"}).protocol == "auto"


def test_analyze_flags_the_broken_connections_with_the_right_rules(spark: Any, tmp_path: Path) -> None:
    names = write_lumberjack_capture(tmp_path / "cap", ["", "seq-gap", "wrong-ack", "garbage", ""])
    res = analyze(spark, tmp_path / "cap", tmp_path / "out")
    assert res.protocol == "lumberjack" and res.connections == 5 and res.errors == 1
    # the command fails on a violation, as a campaign fails on a failing seed; --allow-failures only reports
    assert main(["analyze", str(tmp_path / "cap"), "--out", str(tmp_path / "out-cli")]) == 1
    assert main(["analyze", str(tmp_path / "cap"), "--out", str(tmp_path / "out-cli"), "--allow-failures"]) == 0
    v = spark.read.parquet(res.violations_path).collect()
    by_conn = {n: sorted({r["rule"] for r in v if r["conn"] == n}) for n in names}
    assert by_conn == {
        names[0]: [],
        names[1]: ["LJ-SEQ-CONTIGUOUS"],
        names[2]: ["LJ-ACK-MATCHES-WINDOW"],
        names[3]: ["LJ-DECODES"],
        names[4]: [],
    }
    (garbage,) = [r for r in v if r["rule"] == "LJ-DECODES"]
    assert garbage["offset"] == (tmp_path / "cap" / f"{names[3]}.c2s").stat().st_size - len(b"\x00\xffnot a frame")
    assert (tmp_path / "out" / "frames" / "protocol=lumberjack").is_dir()


async def _record_pylogbeat(out: Path, events: int, batch: int) -> int:
    got: list[Any] = []

    async def handler(b: Batch, info: ConnectionInfo) -> None:
        got.extend(b.events)

    server = LumberjackServer(handler)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            await nursery.start(server.serve, listeners)
            port = listeners[0].socket.getsockname()[1]
            async with open_tap(("127.0.0.1", 0), ("127.0.0.1", port), out) as tap:
                host, tport = tap.addresses[0].rsplit(":", 1)
                cmd = [sys.executable, str(PEER), host, tport, str(events), "--batch", str(batch)]
                proc = await trio.run_process(cmd, capture_stdout=True, capture_stderr=True, check=False)
                assert proc.returncode == 0, proc.stdout + proc.stderr
                await tap.wait_finished(1)
            await server.shutdown(1.0)
            nursery.cancel_scope.cancel()
    return len(got)


def test_pylogbeat_session_through_the_tap_has_no_violations(spark: Any, tmp_path: Path) -> None:
    if importlib.util.find_spec("pylogbeat") is None:
        why = "pylogbeat (the third-party peer) is not installed: pip install -e .[interop]"
        if os.environ.get("CI"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    assert trio.run(_record_pylogbeat, tmp_path / "cap", 250, 100) == 250
    res = analyze(spark, tmp_path / "cap", tmp_path / "out")
    assert (res.protocol, res.connections, res.errors, res.violations) == ("lumberjack", 1, 0, [])
    frames = spark.read.parquet(res.frames_path)
    types = {r["type"]: r["count"] for r in frames.groupBy("type").count().collect()}
    # pylogbeat: one W and one C (holding the J frames) per send(); acks with the running seq.
    assert types == {"W": 3, "C": 3, "J": 250, "A": 3}
    acks = sorted(r["seq"] for r in frames.where("type = 'A'").collect())
    assert acks == [100, 200, 250]


def _merge_captures(parts: dict[str, Path], dest: Path) -> None:
    """One capture directory holding several recordings, connections renamed ``<prefix>-connNNNNN``."""
    dest.mkdir(parents=True, exist_ok=True)
    for prefix, src in parts.items():
        for f in src.iterdir():
            (dest / f"{prefix}-{f.name}").write_bytes(f.read_bytes())


def test_analyze_a_capture_mixing_protocols(spark: Any, tmp_path: Path) -> None:
    import struct

    from pipeline_sessions import record_pravega, record_seastar, record_tank

    from refwire.pipeline.rules import check_rows

    async def record_all() -> None:
        await record_pravega(tmp_path / "p")
        await record_tank(tmp_path / "t")
        await record_seastar(tmp_path / "s", compressors=("LZ4",))
        await record_seastar(tmp_path / "s0", compressors=())

    trio.run(record_all)
    cap = tmp_path / "cap"
    _merge_captures({"pravega": tmp_path / "p", "tank": tmp_path / "t", "seastar": tmp_path / "s", "seastar0": tmp_path / "s0"}, cap)
    rows = list(decode_capture(None, cap))
    # Break one connection per protocol: a SegmentRead offset, a consume response's request id,
    # an uncompressed Seastar response's msg id, and trailing garbage on the compressed one.
    read = next(r for r in rows if r["type"] == "SegmentRead")
    cons = next(r for r in rows if r["conn"].startswith("tank") and r["direction"] == "s2c" and r["type"] == "Consume")
    resp = next(r for r in rows if r["conn"].startswith("seastar0") and r["type"] == "response")
    edits = {
        read["conn"] + ".s2c": lambda b: struct.pack_into(">q", b, read["offset"] + 10 + len(read["name"].encode()), 12345),
        cons["conn"] + ".s2c": lambda b: struct.pack_into("<I", b, cons["offset"] + 9, 9999),
        resp["conn"] + ".s2c": lambda b: struct.pack_into("<q", b, resp["offset"], 777),
        "seastar-conn00001.c2s": lambda b: b.extend(b"\x00garbage"),
    }
    for name, edit in edits.items():
        data = bytearray((cap / name).read_bytes())
        edit(data)
        (cap / name).write_bytes(bytes(data))

    res = analyze(spark, cap, tmp_path / "out")
    assert res.protocol == "pravega,seastar-rpc,tank" and res.connections == 6 and res.errors == 1
    v = spark.read.parquet(res.violations_path).collect()
    got = sorted((r["rule"], r["protocol"], r["conn"], r["direction"], r["frame_no"], r["offset"]) for r in v)
    assert {(g[0], g[2]) for g in got} == {
        ("PR-READ-OFFSET-ECHOED", read["conn"]),
        ("TK-RESPONSE-MATCHES-REQUEST", cons["conn"]),
        ("SS-RESPONSE-MATCHES-REQUEST", resp["conn"]),
        ("SS-DECODES", "seastar-conn00001"),
    }
    # The pure twins give the same violations table.
    pure = check_rows(decode_capture(None, cap))
    assert got == sorted((p["rule"], p["protocol"], p["conn"], p["direction"], p["frame_no"], p["offset"]) for p in pure)
    frames = spark.read.parquet(res.frames_path)
    assert {r["protocol"] for r in frames.select("protocol").distinct().collect()} == {"pravega", "tank", "seastar-rpc"}
    assert frames.where("parent_offset IS NOT NULL AND protocol = 'seastar-rpc'").count() > 0


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_ctrl_c_on_a_spark_campaign_is_one_line_and_130(tmp_path: Path) -> None:
    """Ctrl-C once the campaign's Spark job runs (its first progress line): exit 130,
    at most three lines (the header, the progress line, ``interrupted after …``),
    no Python traceback, no Py4J or Java stack, nothing written for the campaign."""
    from support.interrupt import interrupt_at, looks_clean

    from refwire.pipeline.session import java_problem

    if java_problem():
        pytest.skip(str(java_problem()))
    args = ["campaign", "--protocols", "lumberjack", "--seeds", "400", "--out", str(tmp_path), "--campaign", "x"]
    proc = interrupt_at(args, [("stderr", r"^  seeds \S+/400 ")], timeout=150, stop_timeout=60)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 130, text
    assert len(text.strip().splitlines()) <= 3, text
    assert looks_clean(proc) is None and "Using incubator modules" not in text, text
    assert re.search(r"^interrupted after \d+ seeds; campaign x was not written$", proc.stderr, re.M), text
    assert not (tmp_path / "runs" / "campaign=x").exists()
