"""``refwire campaign``, ``refwire record``, ``refwire decode`` and ``refwire analyze``.

    refwire campaign --protocols all --seeds 200 [--master URL] [--out DIR] [--runner spark|pool|loop]
    refwire record --listen 127.0.0.1:5045 --upstream 127.0.0.1:5044 --out capture/
    refwire decode capture/ | FILE.c2s | FILE.pcap [--protocol NAME] [--json]
    refwire analyze capture/ --out analysis/ [--master URL] [--allow-failures]

``campaign`` and ``analyze`` exit 1 when a seed fails or a rule is violated;
``--allow-failures`` (the same flag for both) only reports.  Ctrl-C stops
either at once: one line (``interrupted after N seeds`` for a campaign), no
verdict for an interrupted seed, Spark stopped quietly, exit status 130.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trio

from ..cliutil import Commands, UsageError, hostport, positive_int, stop_on_signal
from ..interrupts import OneInterrupt
from ..logs import plural
from .progress import CampaignProgress

__all__ = ["register"]


def register(cmds: Commands) -> None:
    top = cmds.top
    c = top.add_parser("campaign", help="run a simulation campaign (local Spark by default) and write Parquet tables")
    c.add_argument("--protocols", default="all", metavar="LIST", help="comma-separated protocols, or all (default)")
    c.add_argument("--seeds", type=positive_int, default=200, metavar="N", help="seeds per protocol (default 200)")
    c.add_argument("--first-seed", type=int, default=0, metavar="K", help="first seed (default 0)")
    c.add_argument("--out", default="refwire-campaigns", metavar="DIR", help="output directory (default ./refwire-campaigns)")
    c.add_argument("--campaign", metavar="ID", help="campaign id (default: UTC time, e.g. 20261121T101500Z)")
    c.add_argument("--runner", choices=("spark", "pool", "loop"), default="spark", help="spark (default), a multiprocessing pool, or a plain loop")
    c.add_argument("--master", metavar="URL", help="Spark master (default local[N] with N = CPU count)")
    c.add_argument("--partitions", type=positive_int, metavar="N", help="Spark partitions (default: about 25 runs each)")
    c.add_argument("--workload", metavar="JSON", help='override workload knobs for every seed, e.g. \'{"bug": "ack-before-deliver"}\'')
    c.add_argument("--diff", metavar="ID", help="also compare with an earlier campaign in the same --out")
    c.add_argument("--strict", action="store_true", help="exit 1 when any seed fails (the default; kept for old scripts)")
    c.add_argument(
        "--allow-failures", action="store_true", help="exit 0 even when seeds fail (e.g. a campaign with a planted bug)"
    )
    c.set_defaults(func=_campaign)

    r = top.add_parser("record", help="record traffic through a loopback TCP tap into a capture directory")
    r.add_argument("--listen", type=hostport, default=("127.0.0.1", 0), metavar="HOST:PORT", help="where clients connect (default 127.0.0.1:0)")
    r.add_argument("--upstream", type=hostport, required=True, metavar="HOST:PORT", help="the server to forward to")
    r.add_argument("--out", required=True, metavar="DIR", help="capture directory to write")
    r.add_argument("--exit-after", type=positive_int, metavar="N", help="stop after N connections were recorded")
    r.add_argument(
        "--pcap",
        metavar="FILE",
        help="also write every connection to FILE as pcapng (one TCP conversation each, with the client's and the "
        "upstream's addresses and a segment per chunk each side sent), for Wireshark or refwire decode",
    )
    r.set_defaults(func=_record)

    d = top.add_parser("decode", help="print the frames of recorded streams")
    d.add_argument("paths", nargs="+", metavar="FILE", help="capture directories, tcpflow directories, .c2s/.s2c files or pcap files")
    d.add_argument("--protocol", metavar="NAME", help="decoder to use (default: guessed)")
    d.add_argument("--server-port", type=int, action="append", default=[], metavar="PORT", help="server port (tcpflow and pcap inputs)")
    d.add_argument("--json", action="store_true", help="one JSON object per frame")
    d.add_argument("--limit", type=positive_int, metavar="N", help="print at most N frames per connection")
    d.add_argument("--full", action="store_true", help="print every frame's fields whole (default: the first 160 characters, saying how many more)")
    d.set_defaults(func=_decode)

    a = top.add_parser("analyze", help="decode captures on Spark into a frames table and check conformance rules")
    a.add_argument("path", metavar="DIR", help="capture directory, tcpflow directory or pcap file")
    a.add_argument("--out", required=True, metavar="DIR", help="where frames/ and violations/ go")
    a.add_argument("--protocol", metavar="NAME", help="decoder and rules to use (default: guessed)")
    a.add_argument("--server-port", type=int, action="append", default=[], metavar="PORT", help="server port (tcpflow and pcap inputs)")
    a.add_argument("--master", metavar="URL", help="Spark master (default local[N])")
    a.add_argument("--strict", action="store_true", help="exit 1 when any rule is violated (the default; kept for old scripts)")
    a.add_argument("--allow-failures", action="store_true", help="exit 0 even when rules are violated (only report them)")
    a.set_defaults(func=_analyze)


# --------------------------------------------------------------------------- campaign


def _spark(master: str | None, app: str, jvm_log: Path | None = None) -> tuple[Any, bool]:
    """The session, and whether this command started it (and so stops it).
    ``jvm_log``: where the JVM's stderr goes (not the terminal)."""
    from .session import SparkUnavailable, local_spark

    try:
        from pyspark.sql import SparkSession

        owned = SparkSession.getActiveSession() is None
        return local_spark(app, master=master, jvm_log=jvm_log), owned
    except ImportError:
        raise UsageError('pyspark is not installed: pip install "refwire[spark]"') from None
    except SparkUnavailable as exc:
        raise UsageError(str(exc)) from None


def _campaign(args: argparse.Namespace) -> int:
    from .campaign import resolve_protocols

    try:
        protocols = resolve_protocols(args.protocols)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        workload = json.loads(args.workload) if args.workload else None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--workload is not valid JSON: {exc.msg} at character {exc.pos + 1} of {args.workload!r}") from None
    if workload is not None and not isinstance(workload, dict):
        raise UsageError(f'--workload must be a JSON object such as {{"bug": "ack-before-deliver"}}, not {args.workload!r}')
    if workload:
        from refwire.sim.runner import check_workload

        try:
            for proto in protocols:
                check_workload(proto, workload)
        except ValueError as exc:
            raise UsageError(f"--workload: {exc}") from None
    campaign = args.campaign or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.out)
    seeds_text = f"seeds {args.first_seed}..{args.first_seed + args.seeds - 1}"
    header = f"campaign {campaign}: {', '.join(protocols)}, {seeds_text} ({args.runner})\n"
    if args.runner != "spark":
        return _campaign_local(args, protocols, workload, campaign, out, header)
    sys.stderr.write(header)  # (one write: a Ctrl-C never leaves half a line)
    sys.stderr.flush()
    from . import spark_campaign as sc

    runs_total = args.seeds * len(protocols)
    shown = CampaignProgress(protocols, estimate=True)
    written = False
    said = False

    def say_interrupted() -> None:
        nonlocal said
        if not said:
            said = True
            shown.close()
            lost = "" if written else f"; campaign {campaign} was not written"
            print(f"interrupted after {shown.done} seeds{lost}", file=sys.stderr, flush=True)

    spark: Any = None
    owned = False
    with OneInterrupt(hard_exit=True, on_hard_exit=say_interrupted):
        try:
            t0 = time.perf_counter()
            spark, owned = _spark(args.master, "refwire-campaign", jvm_log=out / "logs" / f"{campaign}-spark.log")
            t_start = time.perf_counter() - t0
            t1 = time.perf_counter()

            def tasks_done(done: int, total: int) -> None:  # Spark counts tasks; each holds an even slice of the runs
                shown(runs_total * done // total, runs_total)

            try:
                runs = sc.run_campaign(
                    spark, protocols, args.seeds, out, campaign=campaign, first_seed=args.first_seed, workload=workload,
                    partitions=args.partitions, progress=tasks_done,
                )
                written = True
                shown(runs_total, runs_total)  # the last state drawn is 100 %: Spark reports no finished stage
            finally:
                shown.close()
            t_run = time.perf_counter() - t1
            tables = sc.write_tables(spark, runs, out, campaign)
            print(_summary(runs, tables, campaign, out, t_start, t_run, spark.sparkContext.master))
            if args.diff:
                from pyspark.sql import functions as F

                d = sc.diff(spark.read.parquet(str(out / "runs")), args.diff, campaign)
                d.write.mode("overwrite").parquet(str(out / "tables" / campaign / f"diff-{args.diff}"))
                counts = {r["change"]: r["count"] for r in d.groupBy("change").count().collect()}
                print(f"diff {args.diff} -> {campaign}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
                for r in d.where(F.col("change").isin("broke", "fixed", "failure-changed")).limit(10).collect():
                    print(f"  {r['change']:<16} {r['protocol']} seed {r['seed']}: {r['failure_a'] or 'pass'} -> {r['failure_b'] or 'pass'}")
            failed = runs.where("outcome != 'pass'").count()
        except KeyboardInterrupt:
            say_interrupted()
            _stop_quietly(spark if owned else None)
            return 130
        except BaseException:
            if owned:
                spark.stop()
            raise
        if owned:
            spark.stop()
    return 1 if failed and not args.allow_failures else 0


def _silence() -> None:
    """After Ctrl-C on a Spark command: nothing more reaches the terminal.  Py4J
    and pyspark log their broken calls (to the root logger too) and their
    threads' errors, and the JVM and its workers write to a stderr this process
    shares: logging is switched off, thread errors are dropped, and this
    process's stdout and stderr point at /dev/null from here to its exit."""
    logging.disable(logging.CRITICAL)
    threading.excepthook = lambda args: None
    sys.unraisablehook = lambda unraisable: None
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)


def _stop_quietly(spark: Any) -> None:
    """Cancel what runs and stop ``spark`` (None: nothing to stop), saying nothing."""
    _silence()
    if spark is None:
        return
    with contextlib.suppress(BaseException):
        spark.sparkContext.cancelAllJobs()
    with contextlib.suppress(BaseException):
        spark.stop()


def _summary(runs: Any, tables: dict[str, Any], campaign: str, out: Path, t_start: float, t_run: float, master: str) -> str:
    from pyspark.sql import functions as F

    lines = []
    per = runs.groupBy("protocol").agg(
        F.count("*").alias("runs"),
        F.sum((F.col("outcome") == "pass").cast("int")).alias("passed"),
        F.round(F.avg("sim_time"), 1).alias("avg_sim_s"),
    ).orderBy("protocol").collect()
    total = sum(r["runs"] for r in per)
    lines.append(f"\n{total} runs on {master} in {t_run:.1f} s ({total / max(t_run, 1e-9):.1f} runs/s; Spark start-up {t_start:.1f} s)")
    cov = tables["coverage"]
    covs = {
        (r["protocol"], r["kind"]): (r["reached"], r["total"])
        for r in cov.where("in_table").groupBy("protocol", "kind")
        .agg(F.sum(F.col("reached").cast("int")).alias("reached"), F.count("*").alias("total"))
        .collect()
    }
    reached_any = {
        r["protocol"]: r["n"] for r in cov.where("kind = 'transition' AND reached").groupBy("protocol").agg(F.count("*").alias("n")).collect()
    }
    width = max([len("protocol"), *(len(r["protocol"]) for r in per)]) + 2
    lines.append(f"{'protocol':<{width}}{'runs':>7}{'passed':>8}{'failed':>8}{'avg sim s':>11}  states  transitions")
    for r in per:
        st = covs.get((r["protocol"], "state"), (0, 0))
        tr = covs.get((r["protocol"], "transition"), (0, 0))
        seen = reached_any.get(r["protocol"], 0)
        cov_text = f"{st[0]}/{st[1]}  {tr[0]}/{tr[1]}" if st[1] else f"{seen} transitions seen (no machine table in refwire.pipeline.machines)"
        lines.append(f"{r['protocol']:<{width}}{r['runs']:>7}{r['passed']:>8}{r['runs'] - r['passed']:>8}{r['avg_sim_s']:>11}  {cov_text}")
    fails = tables["failures"].collect()
    lines.append("failures:" if fails else "failures: none")
    for f in fails:
        lines.append(f"  {f['protocol']} {f['failure_kind']}: {f['runs']} runs, smallest seed {f['min_seed']}")
        lines.append(f"    replay: {f['replay']}")
    never = cov.where("in_table AND NOT reached AND kind = 'transition'").orderBy("protocol", "item").collect()
    from .unreached import never_reached_lines

    lines.extend(never_reached_lines([(r["protocol"], r["item"]) for r in never], f"{out / 'tables' / campaign / 'coverage'} (reason_detail)"))
    with_table = {p for (p, _), (_, n) in covs.items() if n}
    unexpected = [r for r in cov.where("NOT in_table").orderBy("protocol", "item").collect() if r["protocol"] in with_table]
    for r in unexpected:
        lines.append(f"  reached but not in the machine table: {r['protocol']} {r['item']} ({r['runs']} runs, seed {r['min_seed']})")
    if fails:
        top = tables["sensitivity"].where("lift > 0").orderBy(F.desc("lift")).limit(5).collect()
        if top:
            lines.append("knobs most associated with failures:")
            for r in top:
                lines.append(f"  {r['protocol']} {r['knob']}={r['value']}: {r['failure_rate']:.0%} of {r['runs']} runs fail (overall {r['overall_rate']:.0%})")
    lines.append(f"output: {out / 'runs'} (campaign={campaign}); tables: {out / 'tables' / campaign}/{{failures,coverage,sensitivity}}")
    return "\n".join(lines)


def _campaign_local(
    args: argparse.Namespace, protocols: tuple[str, ...], workload: dict[str, Any] | None, campaign: str, out: Path, header: str
) -> int:
    from .campaign import CampaignInterrupted, failure_summary, run_loop, run_pool
    from .unreached import coverage_lines, reached_by_protocol

    t0 = time.perf_counter()
    runner = run_pool if args.runner == "pool" else run_loop
    shown = CampaignProgress(protocols)
    interrupted = False
    rows: list[dict[str, Any]] = []
    with OneInterrupt():  # a second Ctrl-C while the finished runs are written changes nothing
        try:
            sys.stderr.write(header)  # (one write: a Ctrl-C never leaves half a line)
            sys.stderr.flush()
            try:
                rows = runner(protocols, args.first_seed, args.seeds, campaign=campaign, workload=workload, progress=shown)
            finally:
                shown.close()
        except KeyboardInterrupt as stop:  # CampaignInterrupted once the runner started
            rows, interrupted = (stop.rows if isinstance(stop, CampaignInterrupted) else []), True
            print(f"interrupted after {len(rows)} seeds", file=sys.stderr, flush=True)
        if interrupted:  # the finished seeds are kept; the interrupted one has no row
            path = _write_rows(out, campaign, rows)
            print(f"output: {path} ({len(rows)} runs before the interrupt)", file=sys.stderr)
            return 130
    dt = time.perf_counter() - t0
    path = _write_rows(out, campaign, rows)
    failed = [r for r in rows if r["outcome"] != "pass"]
    print(f"\n{len(rows)} runs ({args.runner}) in {dt:.1f} s ({len(rows) / max(dt, 1e-9):.1f} runs/s): {len(rows) - len(failed)} passed, {len(failed)} failed")
    for kind in failure_summary(rows):
        print(f"  {kind['protocol']} {kind['failure_kind']}: {kind['runs']} runs, smallest seed {kind['min_seed']}\n    replay: {kind['replay']}")
    print("coverage:")
    print("\n".join(coverage_lines(reached_by_protocol(rows))))
    print(f"output: {path}")
    return 1 if failed and not args.allow_failures else 0


def _write_rows(out: Path, campaign: str, rows: list[dict[str, Any]]) -> Path:
    """Write ``OUT/runs-CAMPAIGN.jsonl`` whole or not at all (a file beside it, then renamed)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"runs-{campaign}.jsonl"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------- record / decode / analyze


async def _record(args: argparse.Namespace) -> int:
    from ..cliutil import open_listeners
    from ..pcap import PcapPathError, PcapWriter
    from ..tap import open_tap

    try:
        pcap = PcapWriter(args.pcap) if args.pcap else None
    except PcapPathError as exc:
        raise UsageError(f"--pcap: {exc}") from None
    try:
        host, port = args.listen
        listeners = await open_listeners(host, port)
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            await nursery.start(stop_on_signal, done)
            async with open_tap(args.listen, args.upstream, args.out, listeners=listeners, pcap=pcap) as tap:
                for a in tap.addresses:
                    print(f"listening on {a}", file=sys.stderr, flush=True)
                if args.exit_after:
                    nursery.start_soon(_set_after, tap, args.exit_after, done)
                await done.wait()
            nursery.cancel_scope.cancel()
    finally:
        if pcap is not None:
            pcap.close()
    also = f" and {args.pcap}" if pcap is not None else ""
    print(f"recorded {plural(tap.finished, 'connection')} into {args.out}{also}", file=sys.stderr)
    return 0


async def _set_after(tap: Any, n: int, done: trio.Event) -> None:
    await tap.wait_finished(n)
    done.set()


#: Characters of a frame's fields shown per line without ``--full``.
FIELDS_SHOWN = 160


def _decode(args: argparse.Namespace) -> int:
    """``refwire decode``: per connection, both directions interleaved in the
    order their bytes arrived (the capture's time index), each frame with its
    time since the connection's first frame, like tshark."""
    import heapq
    import tempfile

    from .capture import connection_protocols, decode_stream_file, is_pcap, list_streams, read_pcap, write_capture
    from .decoders import decoder_names
    from .spark_capture import guess_protocol

    if args.protocol and args.protocol not in decoder_names():
        raise UsageError(f"no decoder for {args.protocol!r}; choose from: {', '.join(sorted(decoder_names()))}")
    errors = 0
    with tempfile.TemporaryDirectory(prefix="refwire-decode-") as tmp:
        for i, raw in enumerate(args.paths):
            p = Path(raw)
            if p.is_file() and is_pcap(p):
                p = Path(tmp) / f"pcap{i}"
                write_capture(read_pcap(raw, server_ports=args.server_port), p)
            try:
                streams = list_streams(p, server_ports=args.server_port)
                guessed = {} if args.protocol else connection_protocols(p, server_ports=args.server_port)
                if not args.protocol and not any(guessed.values()):
                    guess_protocol(p, server_ports=args.server_port)  # raises the "no decoder recognises" error
            except (ValueError, FileNotFoundError) as exc:
                raise UsageError(str(exc)) from None
            by_conn: dict[str, list[Any]] = {}
            for s in streams:
                by_conn.setdefault(s.conn, []).append(s)
            for conn, conn_streams in by_conn.items():
                sizes = ", ".join(f"{s.direction} {s.size} bytes" for s in conn_streams)
                proto = args.protocol or guessed.get(conn)
                if proto is None:
                    print(f"== {raw}: {conn} ({sizes}): no decoder recognises this connection")
                    errors += 1
                    continue
                if not args.json:
                    print(f"== {raw}: {conn} ({proto}; {sizes})")
                order = {"c2s": 0, "s2c": 1}

                def keyed(s: Any, rank: int, proto: str = proto) -> Iterator[tuple[float, int, int, dict[str, Any]]]:
                    for n, row in enumerate(decode_stream_file(proto, s)):
                        yield (row["ts"] if row["ts"] is not None else -1.0, rank, n, row)

                merged = heapq.merge(*(keyed(s, order.get(s.direction, 2)) for s in conn_streams))
                t0: float | None = None
                for n, (_, _, _, row) in enumerate(merged):
                    if args.limit and n >= args.limit:
                        if not args.json:
                            print(f"   ... (--limit {args.limit}: the rest of {conn} is not shown)")
                        break
                    errors += row["type"] == "error"
                    if args.json:
                        print(json.dumps(row, sort_keys=True))
                        continue
                    if t0 is None and row["ts"] is not None:
                        t0 = row["ts"]
                    when = f"+{row['ts'] - t0:.6f}" if row["ts"] is not None and t0 is not None else "         ?"
                    arrow = {"c2s": "->", "s2c": "<-"}.get(row["direction"], "  ")
                    indent = "   " if row["parent_offset"] is not None else ""
                    fields = row["error"] if row["type"] == "error" else row["fields_json"]
                    if not args.full and len(fields) > FIELDS_SHOWN:
                        fields = f"{fields[:FIELDS_SHOWN]} ... ({len(fields) - FIELDS_SHOWN} more characters; --full shows them)"
                    print(f"   {when:>10} {arrow} {indent}#{row['frame_no']:<5} @{row['offset']:<8} {row['type']:<5} {row['size']:>6} B  {fields}")
    return 1 if errors else 0


def _analyze(args: argparse.Namespace) -> int:
    from .decoders import decoder_names
    from .spark_capture import analyze

    if args.protocol and args.protocol not in decoder_names():
        raise UsageError(f"no decoder for {args.protocol!r}; choose from: {', '.join(sorted(decoder_names()))}")
    if not Path(args.path).exists():
        raise UsageError(f"{args.path}: no such file or directory")
    t0 = time.perf_counter()
    spark: Any = None
    owned = False
    with OneInterrupt(hard_exit=True, on_hard_exit=lambda: print("interrupted", file=sys.stderr, flush=True)):
        try:
            spark, owned = _spark(args.master, "refwire-analyze", jvm_log=Path(args.out) / "logs" / "spark.log")
            try:
                res = analyze(spark, args.path, args.out, protocol=args.protocol, server_ports=args.server_port)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr, flush=True)
            _stop_quietly(spark if owned else None)
            return 130
        except BaseException:
            if owned:
                spark.stop()
            raise
        if owned:
            spark.stop()
    dt = time.perf_counter() - t0
    total = sum(v["violations"] for v in res.violations)
    print(f"{res.frames} frames on {res.connections} connections ({res.protocol}), {res.errors} decode errors, in {dt:.1f} s")
    print(f"rules: {', '.join(res.rules)}")
    if not res.violations:
        print("violations: none")
    for v in res.violations:
        print(f"  {v['rule']}: {v['violations']} violations on {v['connections']} connections; first: {v['example']}")
    print(f"output: {res.frames_path} (frames), {res.violations_path} ({total} violations)")
    return 1 if total and not args.allow_failures else 0
