#!/usr/bin/env python3
# ruff: noqa: RUF001  (the output uses the multiplication sign on purpose)
"""Pravega benchmark: refwire's writer and the real Rust client appending through
refwire's segment store, and append-stream decoding against a bare-struct bound,
side by side in one run, so the load of the machine hits both alike.  See benchmarks/README.md.

    python benchmarks/pravega_bench.py [--events 5000] [--reps 3] [--quick] [--json OUT]

1. Appends: a fresh ``refwire serve pravega`` (segment store + controller) per
   run; one writer appends N events of 100 bytes to a new stream:
   refwire's EventWriter one event per write (stop-and-wait, like the Python
   client's default), refwire's EventWriter batched (Rust-style blocks and
   Java-style blocks), and the real ``pravega==0.3.8`` client (Rust core) with
   one event in flight (its default) and with up to 1000 in flight; and the
   floor of stop-and-wait in trio: one task sending appends encoded before
   the clock and reading each DataAppended (no session, no pump).
2. Stop-and-wait, client side (``--only stopwait``): one process, one store,
   five rows from the floor up to ``EventWriter.write``, one layer added per
   row (:data:`STOPWAIT_ROWS`), wall and client CPU per event.
3. Decode: the bytes of an append stream (Rust style and Java style with
   PartialEvents) through refwire's CommandDecoder and ServerConnection, against
   a bare ``struct.unpack_from`` loop that walks the same frames; and, Rust
   style, the decoder's runs with one Append built per AppendBlockEnd and
   nothing checked (the floor of a machine that gives one event per append).

Every run happens in a fresh process; runs are taken round-robin so drift on
the machine lands on all rows alike.  A run that does not store every event
stops the benchmark (exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _floors import pravega_appends

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEER = ROOT / "tests" / "interop" / "peers" / "pravega_client_peer.py"
PY = sys.executable


class BenchError(Exception):
    pass


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + str(ROOT), RUST_LOG="error")
    return env


# --------------------------------------------------------------------------- workers (run in child processes)


async def floor_round_trips(host: str, port: int, seg: str, payloads: list[bytes]) -> tuple[float, float, int]:
    """The floor of stop-and-wait in trio: one task sends each event's
    AppendBlockEnd, encoded before the clock, and reads until the store's
    DataAppended; no writer session, no pump, no second task.  Returns the
    wall and CPU seconds of the round trips and the events acked."""
    import uuid

    import trio

    from refwire.pravega.client import create_segment
    from refwire.pravega.frames import NULL_VALUE, AppendSetup, CommandDecoder, DataAppended, Hello, SetupAppend
    from refwire.pravega.writer import WriterSession

    wid = uuid.uuid4()
    await create_segment(host, port, seg)
    session = WriterSession(seg, wid, style="rust", max_batch_events=1)
    for p in payloads:
        session.add(p)
    session.setup(1)
    session.on_append_setup(AppendSetup(request_id=1, segment=seg, writer_id=wid, last_event_number=NULL_VALUE))
    inner = CommandDecoder(allow_inner=True)
    inner.feed(session.take())
    appends = [c.encode() for c in inner.commands()]
    if len(appends) != len(payloads):
        raise BenchError(f"floor: {len(appends)} appends for {len(payloads)} events")
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(Hello().encode() + SetupAppend(request_id=1, writer_id=wid, segment=seg).encode())
        dec = CommandDecoder()
        replies = 0
        while replies < 2:  # Hello, AppendSetup
            dec.feed(await stream.receive_some(65536))
            replies += len(list(dec.commands()))
        acked = 0
        t0, c0 = time.perf_counter(), time.process_time()
        for frame in appends:
            await stream.send_all(frame)
            while True:
                dec.feed(await stream.receive_some(65536))
                got = [c for c in dec.commands() if isinstance(c, DataAppended)]
                if got:
                    acked += len(got)
                    break
        return time.perf_counter() - t0, time.process_time() - c0, acked


def worker_trio_floor(store: str, n: int) -> dict[str, Any]:
    """The appends block's floor row (:func:`floor_round_trips`)."""
    import trio

    host, port = store.rsplit(":", 1)
    payloads = [(b"%08d" % i) + b"x" * 92 for i in range(n)]
    seconds, _cpu, acked = trio.run(floor_round_trips, host, int(port), "bench/floor/0.#epoch.0", payloads)
    if acked != n:
        raise BenchError(f"floor: {acked} of {n} events acked")
    return {"events": n, "seconds": seconds}


def worker_refwire_writer(store: str, n: int, mode: str) -> dict[str, Any]:
    if mode == "trio-floor":
        return worker_trio_floor(store, n)
    import trio

    from refwire.pravega.client import EventWriter, WriterConfig, create_segment

    host, port = store.rsplit(":", 1)
    seg = f"bench/{mode}/0.#epoch.0"
    payloads = [(b"%08d" % i) + b"x" * 92 for i in range(n)]

    async def main() -> float:
        await create_segment(host, int(port), seg)
        style = "java" if mode == "java-batched" else "rust"
        w = EventWriter(host, int(port), seg, config=WriterConfig(style=style))
        if style == "java":
            w.session.java_block_sizes = [64 * 1024]
        async with w:  # one connection for the whole run
            t0 = time.perf_counter()
            if mode == "one-by-one":
                for p in payloads:
                    await w.write([p])
            else:
                await w.write(payloads)
            return time.perf_counter() - t0

    seconds = trio.run(main)
    return {"events": n, "seconds": seconds}


STOPWAIT_ROWS = (
    ("floor", "bare trio loop, appends pre-encoded (the appends block's floor)"),
    ("inline", "refwire session + machine, one task, no ack timeout"),
    ("scope", "  the same + a trio.CancelScope per write (the ack timeout until 2026-11-26)"),
    ("pump", "  the same read through Pump.run_until(give_up_at=): the watchdog keeps it"),
    ("writer", "EventWriter.write([event]) (all of the above, with its retry loop)"),
)


def worker_stopwait(store: str, n: int, reps: int) -> dict[str, Any]:
    """Where a stop-and-wait write's time goes, client side: one event per round
    trip through the same store, from the bare loop up to ``EventWriter.write``,
    one layer added per row (:data:`STOPWAIT_ROWS`); rows interleaved, ``reps``
    times each.  Wall and client CPU per event, in microseconds."""

    import trio

    from refwire.pravega.client import EventWriter, WriterConfig, create_segment
    from refwire.pravega.events import AppendBytes
    from refwire.sansio import NEED_DATA

    host, port = store.rsplit(":", 1)
    payloads = [(b"%08d" % i) + b"x" * 92 for i in range(n)]
    counter = iter(range(1_000_000))

    async def new_segment() -> str:
        seg = f"bench/stopwait{next(counter)}/0.#epoch.0"
        await create_segment(host, int(port), seg)
        return seg

    async def floor() -> tuple[float, float]:
        wall, cpu, acked = await floor_round_trips(host, int(port), f"bench/stopwait{next(counter)}/0.#epoch.0", payloads)
        if acked != n:
            raise BenchError(f"floor: {acked} of {n} events acked")
        return wall, cpu

    async def layered(row: str) -> tuple[float, float]:
        w = EventWriter(host, int(port), await new_segment(), config=WriterConfig(style="rust"))
        async with w:
            if row == "writer":
                t0, c0 = time.perf_counter(), time.process_time()
                for p in payloads:
                    await w.write([p])
                return time.perf_counter() - t0, time.process_time() - c0
            await w.write([b"setup"])  # connected, Hello and AppendSetup done
            link = w._link
            assert link is not None
            conn, acks, session = link.conn, link.acks, w.session
            machine, pump, stream = conn.machine, conn.pump, conn.stream
            assert isinstance(stream, trio.SocketStream)
            fd = stream.socket.fileno()
            timeout = w.config.ack_timeout
            t0, c0 = time.perf_counter(), time.process_time()
            for p in payloads:
                session.add(p)
                machine.send(AppendBytes(session.take()), now=trio.current_time())
                if row == "pump":
                    await pump.run_until(acks.__len__, give_up_at=trio.current_time() + timeout)
                    while acks:
                        session.on_data_appended(acks.popleft())  # type: ignore[arg-type]
                    continue
                os.write(fd, machine.data_to_send())
                while session.pending:
                    if row == "scope":
                        with trio.CancelScope(deadline=trio.current_time() + timeout):
                            data = await stream.receive_some(65536)
                    else:
                        data = await stream.receive_some(65536)
                    machine.receive_data(data, now=trio.current_time())
                    while (ev := machine.next_event()) is not NEED_DATA:
                        session.on_data_appended(ev.command)  # type: ignore[union-attr, arg-type]
            return time.perf_counter() - t0, time.process_time() - c0

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = {name: {"wall": [], "cpu": []} for name, _ in STOPWAIT_ROWS}
        for _ in range(reps):
            for name, _label in STOPWAIT_ROWS:
                wall, cpu = await (floor() if name == "floor" else layered(name))
                out[name]["wall"].append(wall / n * 1e6)
                out[name]["cpu"].append(cpu / n * 1e6)
        return out

    return trio.run(main)


def worker_decode(n: int, style: str, passes: int) -> dict[str, Any]:
    import uuid

    from refwire.pravega._fast_connection import _APPEND_SET, _new
    from refwire.pravega.connection import ServerConnection
    from refwire.pravega.events import Append
    from refwire.pravega.frames import NULL_VALUE, AppendBlockEnd, AppendSetup, CommandDecoder, Hello, SetupAppend
    from refwire.pravega.writer import WriterSession

    wid = uuid.UUID(int=7)
    # Rust style as the Python client sends it: one AppendBlockEnd per event (stop-and-wait).
    session = WriterSession("sc/st/0.#epoch.0", wid, style="java" if style == "java" else "rust", max_batch_events=1)
    if style == "java":
        session.java_block_sizes = [4096 + 37]  # not a multiple of the event size: every block ends in a PartialEvent
    for i in range(n):
        session.add((b"%08d" % i) + b"x" * 92)
    session.setup(1)
    session.on_append_setup(AppendSetup(request_id=1, segment=session.segment, writer_id=wid, last_event_number=NULL_VALUE))
    setup = Hello().encode() + SetupAppend(request_id=1, writer_id=wid, segment=session.segment).encode()
    stream = session.take()
    mb = len(stream) / 1e6
    def bare() -> int:
        return pravega_appends(stream)

    def decoder() -> int:
        # as the server decodes: AppendBlockEnds a run at a time, in columns; the rest one by one
        d = CommandDecoder(allow_inner=True)
        d.feed(stream)
        events = 0
        while True:
            run = d.block_ends()
            if run is not None:
                events += sum(run.num_events)
                d.consume(sum(run.frame_sizes))
                continue
            cmd = d.next_command()
            if cmd is None:
                return events
            events += getattr(cmd, "num_events", 0)

    def appends() -> int:
        # the decoder row plus one Append per AppendBlockEnd, built as ServerConnection
        # builds its own (through the slots): the floor of any machine that gives one
        # event per append, before it checks or records anything
        d = CommandDecoder(allow_inner=True)
        d.feed(stream)
        events = 0
        set_seg, set_wid, set_num, set_count, set_data, set_rid, set_exp, set_prev = _APPEND_SET
        seg = session.segment
        while True:
            run = d.block_ends()
            if run is not None:
                rows = zip(run.data, run.num_events, run.last_event_numbers, run.request_ids, strict=True)
                for data, num, last, rid in rows:
                    a = _new(Append)
                    set_seg(a, seg)
                    set_wid(a, wid)
                    set_num(a, last)
                    set_count(a, num)
                    set_data(a, data)
                    set_rid(a, rid)
                    set_exp(a, None)
                    set_prev(a, 0)
                    events += a.event_count
                d.consume(sum(run.frame_sizes))
                continue
            cmd = d.next_command()
            if cmd is None:
                return events
            if isinstance(cmd, AppendBlockEnd):
                a = _new(Append)
                set_seg(a, seg)
                set_wid(a, wid)
                set_num(a, cmd.last_event_number)
                set_count(a, cmd.num_events)
                set_data(a, cmd.data)
                set_rid(a, cmd.request_id)
                set_exp(a, None)
                set_prev(a, 0)
                events += a.event_count

    def commands() -> int:
        # one command object per frame
        d = CommandDecoder(allow_inner=True)
        d.feed(stream)
        return sum(getattr(c, "num_events", 0) for c in d.commands())

    def machine() -> int:
        conn = ServerConnection()
        conn.receive_data(setup, now=0.0)
        conn.next_event()
        ev = conn.next_event()
        conn.send(AppendSetup(request_id=1, segment=session.segment, writer_id=wid, last_event_number=NULL_VALUE), now=0.0)
        _ = ev
        conn.receive_data(stream, now=0.0)
        count = 0
        while True:
            e = conn.next_event()
            if isinstance(e, Append):
                count += e.event_count
            else:
                return count

    out: dict[str, Any] = {"bytes": len(stream)}
    rows: tuple[tuple[str, Callable[[], int]], ...] = (("bare", bare), ("decoder", decoder), ("commands", commands), ("machine", machine))
    if style != "java":  # (Java-style blocks have no runs: the row would time command objects)
        rows = (*rows, ("appends", appends))
    for name, fn in rows:  # checked and warmed up before any timing
        got = fn()
        if got != n:
            raise BenchError(f"{name} decoded {got} events, expected {n}")
    best = dict.fromkeys(out_names := [name for name, _ in rows], float("inf"))
    for _ in range(passes):  # interleaved: drift on the machine lands on every row alike
        for name, fn in rows:
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    for name in out_names:
        out[name] = mb / best[name]
    return out


# --------------------------------------------------------------------------- orchestration


def run_child(args: list[str], timeout: float) -> dict[str, Any]:
    proc = subprocess.run([PY, *args], capture_output=True, text=True, timeout=timeout, env=_env(), cwd=ROOT, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise BenchError(f"{args[:3]} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return [json.loads(ln[7:]) for ln in lines][-1]  # type: ignore[no-any-return]


class Store:
    """A fresh ``refwire serve pravega`` with its controller on free ports."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [PY, "-m", "refwire.cli", "serve", "pravega", "--listen", "127.0.0.1:0", "--controller", "127.0.0.1:0"],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=_env(),
            cwd=ROOT,
            text=True,
        )
        self.store = self.controller = ""
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 20
        while not (self.store and self.controller):
            if time.monotonic() > deadline:
                self.proc.kill()
                raise BenchError("refwire serve pravega did not start")
            line = self.proc.stderr.readline()
            if not line:
                raise BenchError("refwire serve pravega exited")
            if line.startswith("listening on"):
                addr = line.split()[2]
                if "(controller)" in line:
                    self.controller = addr
                else:
                    self.store = addr

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


ROWS = [
    ("refwire writer, one event per write", "refwire", "one-by-one"),
    ("real client, 1 in flight (default)", "peer", "time"),
    ("refwire writer, batched (Rust-style blocks)", "refwire", "rust-batched"),
    ("refwire writer, batched (Java-style blocks)", "refwire", "java-batched"),
    ("real client, up to 1000 in flight", "peer", "time-inflight"),
    ("floor: bare trio ping-pong, appends pre-encoded", "refwire", "trio-floor"),
]


def bench_appends(n: int, reps: int, have_peer: bool) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {label: [] for label, _, _ in ROWS}
    for rep in range(reps):
        for label, who, mode in ROWS:
            if who == "peer" and not have_peer:
                continue
            store = Store()
            try:
                if who == "refwire":
                    r = run_child([__file__, "--worker", "writer", store.store, str(n), mode], timeout=300)
                    secs = r["seconds"]
                else:
                    out = run_child([str(PEER), f"tcp://{store.controller}", mode, str(n)], timeout=300)
                    secs = out["seconds"]
            finally:
                store.stop()
            results[label].append(n / secs)
            print(f"  [{rep + 1}/{reps}] {label}: {n / secs:,.0f} events/s", file=sys.stderr, flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, help="events per append run (default 5000; 500 with --quick)")
    ap.add_argument("--reps", type=int, help="runs per row, median reported (default 3; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="a fast smoke run")
    ap.add_argument("--json", metavar="OUT", help="also write every run's figures as JSON")
    ap.add_argument("--only", default="appends,decode,stopwait", help="comma-separated blocks to run (appends, decode, stopwait)")
    ap.add_argument("--passes", type=int, help="interleaved decode passes per run, best kept (default 15; 3 with --quick)")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    if not only <= {"appends", "decode", "stopwait"}:
        ap.error("--only takes appends, decode, stopwait")
    if args.worker:
        kind = args.worker[0]
        if kind == "writer":
            res = worker_refwire_writer(args.worker[1], int(args.worker[2]), args.worker[3])
        elif kind == "stopwait":
            res = worker_stopwait(args.worker[1], int(args.worker[2]), int(args.worker[3]))
        else:
            res = worker_decode(int(args.worker[1]), args.worker[2], int(args.worker[3]))
        print("RESULT " + json.dumps(res), flush=True)
        return 0
    n = args.events or (500 if args.quick else 5000)
    reps = args.reps or (1 if args.quick else 3)
    passes = args.passes or (3 if args.quick else 15)
    have_peer = False
    if "appends" in only:
        try:
            import pravega_client  # noqa: F401

            have_peer = True
        except ImportError:
            print(
                "note: pravega_client not installed; the real-client rows are skipped (pip install pravega==0.3.8)",
                file=sys.stderr,
            )
    try:
        appends = bench_appends(n, reps, have_peer) if "appends" in only else {label: [] for label, _, _ in ROWS}
        decode_runs: dict[str, list[dict[str, Any]]] = {"rust": [], "java": []}
        for _ in range(reps if "decode" in only else 0):
            for style in ("rust", "java"):
                decode_runs[style].append(
                    run_child([__file__, "--worker", "decode", str(n * 4), style, str(passes)], timeout=300)
                )
        stopwait: dict[str, Any] = {}
        if "stopwait" in only:
            store = Store()
            try:
                stopwait = run_child([__file__, "--worker", "stopwait", store.store, str(n), str(reps)], timeout=600)
            finally:
                store.stop()
    except BenchError as exc:
        print(f"FAILED: {exc}")
        return 1

    def med(xs: list[float]) -> float:
        return statistics.median(xs) if xs else float("nan")

    if "appends" in only:
        print(f"1. Appends through refwire's segment store ({n} events of 100 bytes, median of {reps}; events/s)")
        base = med(appends[ROWS[0][0]])
        for label, _, _ in ROWS:
            xs = appends[label]
            if xs:
                print(f"  {label:<48} {med(xs):>12,.0f}   ({min(xs):,.0f}–{max(xs):,.0f})   ×{med(xs) / base:.2f} of the first row")
        peer1 = appends[ROWS[1][0]]
        if peer1:
            print(f"  stop-and-wait, refwire writer / real client: ×{base / med(peer1):.2f}")
            floor = appends[ROWS[-1][0]]
            print(f"  stop-and-wait, bare trio floor / real client: ×{med(floor) / med(peer1):.2f}")
        peer_many = appends[ROWS[4][0]]
        if peer_many:
            rust, java = med(appends[ROWS[2][0]]), med(appends[ROWS[3][0]])
            print(
                f"  pipelined, refwire writer / real client with 1000 in flight: ×{rust / med(peer_many):.2f} "
                f"(Rust-style blocks), ×{java / med(peer_many):.2f} (Java-style blocks)"
            )
    if stopwait:
        print(f"2. Stop-and-wait, client side: one layer added per row ({n} events, one per round trip; median of {reps} interleaved runs)")
        prev = None
        for name, label in STOPWAIT_ROWS:
            wall = med(stopwait[name]["wall"])
            cpu = med(stopwait[name]["cpu"])
            step = "" if prev is None or name == "writer" else f"   {wall - prev:+6.1f} µs wall vs the row above"
            if name == "pump":
                step = f"   {wall - med(stopwait['inline']['wall']):+6.1f} µs wall vs the inline row"
            print(f"  {label:<80} {wall:6.1f} µs wall  {cpu:6.1f} µs CPU per event{step}")
            prev = wall
    if args.json:
        Path(args.json).write_text(
            json.dumps({"appends": appends, "decode": decode_runs, "stopwait": stopwait, "events": n, "reps": reps}, indent=2)
        )
    if "decode" not in only:
        return 0
    print(f"3. Decode of an append stream ({n * 4} events of 100 bytes; MB/s, median of {reps} runs, each the best of {passes} interleaved passes)")
    for style in ("rust", "java"):
        runs = decode_runs[style]
        bare = med([r["bare"] for r in runs])
        dec = med([r["decoder"] for r in runs])
        cmds = med([r["commands"] for r in runs])
        mac = med([r["machine"] for r in runs])
        apps = med([r.get("appends", float("nan")) for r in runs])
        print(
            f"  {style}-style blocks ({runs[0]['bytes'] / 1e6:.1f} MB): bare struct {bare:,.1f}   CommandDecoder {dec:,.1f} (×{dec / bare:.2f})   ServerConnection {mac:,.1f} (×{mac / bare:.2f})"
        )
        print(
            f"    bare ÷ this: CommandDecoder {bare / dec:.2f}×   ServerConnection {bare / mac:.2f}×  (times slower than the bare loop); "
            f"CommandDecoder with a command object per frame {bare / cmds:.2f}×"
        )
        if style != "java":
            print(f"    CommandDecoder + one Append per AppendBlockEnd, no machine (the floor of one event per append): {bare / apps:.2f}×")
    return 0


if __name__ == "__main__":
    sys.exit(main())
