#!/usr/bin/env python3
# ruff: noqa: RUF001, RUF002  (the output uses the multiplication sign and en dash on purpose)
"""Lumberjack benchmark: refwire against the Python peers and a bare-struct bound,
side by side in one run, so the load of the machine hits both alike.  See benchmarks/README.md.

    python benchmarks/lumberjack_bench.py [--events 20000] [--reps 3] [--quick] [--json OUT] [--profile]

1. Server ingest: refwire's server (validate_json on and off) and timbersnake's,
   under the same neutral load generator (benchmarks/_lj_loadgen.py).
2. Client send: refwire's client and pylogbeat into timbersnake's server.
3. Decode: refwire's FrameDecoder and ServerConnection against bare
   ``struct.unpack_from`` loops over the same bytes.

Every server, client and decoder runs in a process of its own, started fresh
for each run, on a fresh port (bound to port 0 and reported back).  Runs are
taken round-robin (rep 1 of every row, then rep 2 ...), so drift on the machine
spreads over all rows alike.  A run in which the server did not count every
event, or the client did not get every ack, stops the benchmark (exit 1).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import pstats
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, BinaryIO

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable


class BenchError(Exception):
    """A run failed: the benchmark stops and says why."""


# --------------------------------------------------------------------------- processes

_children: list[subprocess.Popen[bytes]] = []


def _kill_children() -> None:
    for p in _children:
        if p.poll() is None:
            p.kill()
            p.wait()
    _children.clear()


def _on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    src = str(ROOT / "src")  # benchmark the working tree's refwire
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


ENV = _env()


def _tail(f: BinaryIO | bytes | None, limit: int = 3000) -> str:
    if f is None:
        return ""
    if not isinstance(f, bytes):
        f.seek(0)
        f = f.read()
    text = f.decode("utf-8", "replace").strip()
    return text[-limit:]


def _parse_result(out: bytes, who: str, err: str) -> dict[str, Any]:
    for line in out.decode("utf-8", "replace").splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[7:])
            return result
    raise BenchError(f"{who}: no RESULT line\n--- stdout:\n{out.decode(errors='replace')[-2000:]}\n--- stderr:\n{err}")


def _read_line(fd: int, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    line = bytearray()
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError
        b = os.read(fd, 1)
        if not b:
            break
        line += b
    return line.decode("utf-8", "replace").strip()


class ServerProc:
    """One server worker (benchmarks/_lj_servers.py): started, listening, stopped."""

    def __init__(self, args: Sequence[str], label: str) -> None:
        self.label = label
        self.err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [PY, str(HERE / "_lj_servers.py"), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            env=ENV,
            bufsize=0,
        )
        _children.append(self.proc)
        assert self.proc.stdout is not None
        try:
            line = _read_line(self.proc.stdout.fileno(), 20.0)
        except TimeoutError:
            line = ""
        if not line.startswith("PORT "):
            self.proc.kill()
            self.proc.wait()
            raise BenchError(f"server {label} did not start (got {line!r})\n{_tail(self.err)}")
        self.port = int(line.split()[1])

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        if self.proc in _children:
            _children.remove(self.proc)

    def stop(self, timeout: float = 20.0) -> dict[str, Any]:
        """Close its stdin (the stop signal) and collect its RESULT."""
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise BenchError(f"server {self.label} did not stop within {timeout}s\n{_tail(self.err)}") from None
        finally:
            if self.proc in _children:
                _children.remove(self.proc)
        err = _tail(self.err)
        self.err.close()
        if self.proc.returncode != 0:
            raise BenchError(f"server {self.label} exited with {self.proc.returncode}\n{err}")
        return _parse_result(out, f"server {self.label}", err)


def run_worker(script: str, args: Sequence[Any], label: str, timeout: float) -> dict[str, Any]:
    cmd = [PY, str(HERE / script), *map(str, args)]
    try:
        cp = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, env=ENV, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{label}: no result within {timeout:.0f}s ({' '.join(cmd)})") from None
    err = _tail(cp.stderr)
    if cp.returncode != 0:
        raise BenchError(f"{label}: exited with {cp.returncode}\n{err}")
    return _parse_result(cp.stdout, label, err)


PORT = "{port}"  # placeholder in a client's arguments for the server's port


def serve_and_load(
    server_args: Sequence[str], server_label: str, client: tuple[str, Sequence[Any]], client_label: str, n: int, timeout: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One run: a fresh server, one client process against it, both results checked."""
    srv = ServerProc([*server_args, "--expect", str(n)], server_label)
    try:
        client_args = [srv.port if a == PORT else a for a in client[1]]
        cres = run_worker(client[0], client_args, f"{client_label} -> {server_label}", timeout)
    except BaseException as exc:
        srv.kill()
        if isinstance(exc, BenchError):
            raise BenchError(f"{exc}\n--- server {server_label} stderr:\n{_tail(srv.err)}") from None
        raise
    sres = srv.stop()
    where = f"{client_label} -> {server_label}"
    if cres.get("events") != n:
        raise BenchError(f"{where}: the client got acks for {cres.get('events')} of {n} events")
    if sres.get("events") != n or sres.get("cpu_s") is None:
        raise BenchError(f"{where}: the server counted {sres.get('events')} of {n} events")
    if sres.get("connections") != 1:
        raise BenchError(f"{where}: the server saw {sres.get('connections')} connections, expected 1")
    stats = sres.get("stats") or {}
    if stats.get("protocol_errors") or stats.get("app_errors"):
        raise BenchError(f"{where}: server errors {stats}")
    return cres, sres


# --------------------------------------------------------------------------- statistics and formatting


def med(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def rng(xs: Sequence[float], fmt: str) -> str:
    """``median [min–max]`` (just the value for a single run)."""
    if len(xs) == 1:
        return format(xs[0], fmt)
    return f"{format(med(xs), fmt)} [{format(min(xs), fmt)}–{format(max(xs), fmt)}]"


def ratio_text(num: Sequence[float], den: Sequence[float]) -> str:
    """Ratio of the medians, with [min–max] of the per-rep paired ratios."""
    r = med(num) / med(den)
    pairs = [a / b for a, b in zip(num, den, strict=True)]
    if len(pairs) == 1:
        return f"{r:.2f}×"
    return f"{r:.2f}× [{min(pairs):.2f}–{max(pairs):.2f}]"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = [indent + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append(indent + "  ".join("-" * w for w in widths))
    for r in rows:
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
        lines.append(indent + "  ".join(cells).rstrip())
    return "\n".join(lines)


def progress(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------- 1. server ingest

INGEST_SERVERS = [
    ("refwire_json", ["refwire"], "refwire, validate_json=True (default)"),
    ("refwire_raw", ["refwire", "--no-validate"], "refwire, validate_json=False"),
    ("refwire_frames", ["refwire", "--events"], "refwire, validate_json=True, reads batch.events"),
    ("timbersnake", ["timbersnake"], "timbersnake 0.1.0"),
]


def bench_ingest(n: int, reps: int, windows: Sequence[int], timeout: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"server": key, "label": label, "args": args, "window": w, "runs": []}
        for w in windows
        for key, args, label in INGEST_SERVERS
    ]
    for rep in range(reps):
        progress(f"  ingest: rep {rep + 1}/{reps}")
        for row in rows:
            cres, sres = serve_and_load(
                row["args"],
                row["label"],
                ("_lj_loadgen.py", [PORT, n, row["window"], "--level", "3"]),
                "load generator",
                n,
                timeout,
            )
            row["runs"].append(
                {
                    "wall_s": cres["wall_s"],
                    "ev_s": n / cres["wall_s"],
                    "server_cpu_s": sres["cpu_s"],
                    "server_cpu_us_ev": sres["cpu_s"] / n * 1e6,
                    "server_wall_s": sres["wall_s"],
                    "loadgen_cpu_us_ev": cres["cpu_s"] / n * 1e6,
                    "wire_bytes": cres["wire_bytes"],
                }
            )
    return rows


def col(row: dict[str, Any], key: str) -> list[float]:
    return [r[key] for r in row["runs"]]


def print_ingest(rows: list[dict[str, Any]], n: int) -> None:
    print("1. Server ingest, same load for every server")
    print("   load: a stdlib raw-socket client in its own process (TCP_NODELAY), windows pre-built before the clock:")
    print("   per window one write of 2W n + one 2C (zlib 3) of n 2J frames, then it waits for the window's ack.")
    print("   ev/s = events / client wall (connect to last ack); server CPU = process_time in the server process")
    print("   from its first accepted connection to the moment it counted the last event.")
    print("   refwire's handler counts len(batch): the events stay in the columns they were decoded into;")
    print("   'reads batch.events' builds a JsonFrame per event as well.  timbersnake json.loads every event.")
    out = []
    for row in rows:
        out.append(
            [
                row["label"],
                str(row["window"]),
                rng(col(row, "ev_s"), ",.0f"),
                rng(col(row, "server_cpu_us_ev"), ".2f"),
                rng(col(row, "wall_s"), ".3f"),
                f"{row['runs'][0]['wire_bytes'] / n:.1f}",
            ]
        )
    print(table(["server", "window", "ev/s", "server CPU µs/event", "wall s", "wire B/ev"], out))
    print()


# --------------------------------------------------------------------------- 2. client send


def client_rows(n: int) -> list[dict[str, Any]]:
    w100, w2048 = min(100, n), min(2048, n)
    return [
        {"client": "refwire", "window": w100, "label": f"refwire, windows of {w100}, zlib 3", "short": f"refwire w={w100}"},
        {"client": "refwire", "window": w2048, "label": f"refwire, windows of {w2048}, zlib 3", "short": f"refwire w={w2048}"},
        {
            "client": "pylogbeat",
            "window": w100,
            "label": f"pylogbeat as shipped, windows of {w100}",
            "short": f"pylogbeat w={w100} (as shipped)",
        },
        {"client": "pylogbeat", "window": n, "label": f"pylogbeat as shipped, one window of {n}", "short": f"pylogbeat w={n}"},
        {
            "client": "pylogbeat-nodelay",
            "window": w100,
            "label": f"DIAGNOSTIC: pylogbeat + TCP_NODELAY patched in, windows of {w100}",
            "short": f"pylogbeat+NODELAY w={w100}",
        },
    ]


def bench_client(n: int, reps: int, timeout: float) -> list[dict[str, Any]]:
    rows = client_rows(n)
    for row in rows:
        row["runs"] = []
    for rep in range(reps):
        progress(f"  client: rep {rep + 1}/{reps}")
        for row in rows:
            cres, sres = serve_and_load(
                ["timbersnake"],
                "timbersnake 0.1.0",
                ("_lj_clients.py", [row["client"], PORT, n, row["window"], "--level", "3"]),
                row["label"],
                n,
                timeout,
            )
            row["runs"].append(
                {
                    "wall_s": cres["wall_s"],
                    "ev_s": n / cres["wall_s"],
                    "client_cpu_s": cres["cpu_s"],
                    "client_cpu_us_ev": cres["cpu_s"] / n * 1e6,
                    "server_cpu_us_ev": sres["cpu_s"] / n * 1e6,
                }
            )
    return rows


def print_client(rows: list[dict[str, Any]], n: int) -> None:
    print("2. Client send, into timbersnake 0.1.0's server (the same server for every client, a fresh one per run)")
    print("   timbersnake's server takes both clients as shipped at every window size; refwire's refuses windows")
    print("   above its default max_window (10000, as go-lumber), e.g. pylogbeat's one window of 20000.")
    print(
        "   Events are the same dicts, built before the clock; ev/s = events / client wall (connect to last ack); client CPU = process_time"
    )
    print("   over that span.  pylogbeat compresses at zlib level 6 (fixed), refwire at 3; refwire encodes JSON")
    print("   compactly, pylogbeat with json.dumps' default separators.")
    out = []
    for row in rows:
        out.append(
            [
                row["label"],
                rng(col(row, "ev_s"), ",.0f"),
                rng(col(row, "client_cpu_us_ev"), ".2f"),
                rng(col(row, "wall_s"), ".3f"),
                rng(col(row, "server_cpu_us_ev"), ".2f"),
            ]
        )
    print(table(["client", "ev/s", "client CPU µs/event", "wall s", "server CPU µs/ev"], out))
    print()


# --------------------------------------------------------------------------- 3. decode


def bench_decode(n: int, reps: int, passes: int, timeout: float) -> dict[str, Any]:
    progress("  decode")
    res = run_worker("_lj_decode.py", ["--frames", n, "--reps", reps, "--passes", passes], "decode", timeout)
    for row in res["rows"]:
        row["mb_s"] = [row["bytes"] / s / 1e6 for s in row["seconds"]]
        row["frames_s"] = [n / s for s in row["seconds"]]
    res["passes"] = passes
    return res


def print_decode(res: dict[str, Any]) -> None:
    n = res["frames"]
    rows = {r["key"]: r for r in res["rows"]}
    bare, bound = rows["bare"]["mb_s"], rows["bare_json"]["mb_s"]
    print(f"3. Decode, in memory: {n} 2J frames, {res['bytes_plain']:,} B ({res['bytes_plain'] / n:.1f} B/frame), one process,")
    print(f"   each run = median of {res['passes']} passes after a warm-up round.  ServerConnection rows add a 2W 2048 before")
    print("   every 2048 frames and ack each batch (accept).  'bare ÷ this' = bare-loop MB/s ÷ this row's MB/s.")
    out = []
    for r in res["rows"]:
        json_row = r["key"].endswith("_json")
        out.append(
            [
                r["label"],
                rng([s * 1e3 for s in r["seconds"]], ".2f"),
                rng(r["mb_s"], ",.1f"),
                rng([f / 1e3 for f in r["frames_s"]], ",.0f"),
                ratio_text(bare, r["mb_s"]),
                ratio_text(bound, r["mb_s"]) if json_row else "",
            ]
        )
    print(table(["decoder", f"ms per {n}", "MB/s", "k frames/s", "bare ÷ this", "json-bound ÷ this"], out))
    print()


# --------------------------------------------------------------------------- ratios

SHORT = {
    "decoder_raw": "refwire FrameDecoder (validate_json=False)",
    "decoder_json": "refwire FrameDecoder (validate_json=True)",
    "runs_raw": "refwire FrameDecoder runs=True (validate_json=False)",
    "runs_json": "refwire FrameDecoder runs=True (validate_json=True)",
    "conn_raw": "refwire ServerConnection (validate_json=False)",
    "conn_json": "refwire ServerConnection (validate_json=True)",
}


def ratios(
    ingest: list[dict[str, Any]] | None, client: list[dict[str, Any]] | None, decode: dict[str, Any] | None
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if ingest:
        by = {(r["server"], r["window"]): r for r in ingest}
        for w in sorted({r["window"] for r in ingest}):
            ts = by[("timbersnake", w)]
            for key, what in (
                ("refwire_json", "validate_json=True"),
                ("refwire_raw", "validate_json=False"),
                ("refwire_frames", "validate_json=True, batch.events"),
            ):
                rw = by[(key, w)]
                out.append((f"server ev/s, refwire ({what}) ÷ timbersnake, w={w}", ratio_text(col(rw, "ev_s"), col(ts, "ev_s"))))
                out.append(
                    (
                        f"server CPU/event, timbersnake ÷ refwire ({what}), w={w}",
                        ratio_text(col(ts, "server_cpu_us_ev"), col(rw, "server_cpu_us_ev")),
                    )
                )
    if client:
        rw100, rw2048, pl100, pln, plnd = client
        for a, b in ((rw100, pl100), (rw2048, pl100), (rw2048, pln), (rw100, plnd)):
            out.append((f"client ev/s, {a['short']} ÷ {b['short']}", ratio_text(col(a, "ev_s"), col(b, "ev_s"))))
        for a, b in ((rw100, pl100), (rw2048, pln), (rw100, plnd)):
            out.append(
                (
                    f"client CPU/event, {b['short']} ÷ {a['short']}",
                    ratio_text(col(b, "client_cpu_us_ev"), col(a, "client_cpu_us_ev")),
                )
            )
    if decode:
        rows = {r["key"]: r for r in decode["rows"]}
        for key in ("decoder_raw", "decoder_json", "runs_raw", "runs_json", "conn_raw", "conn_json"):
            out.append((f"decode MB/s, bare struct loop ÷ {SHORT[key]}", ratio_text(rows["bare"]["mb_s"], rows[key]["mb_s"])))
        for key in ("decoder_json", "runs_json", "conn_json"):
            out.append(
                (f"decode MB/s, bare loop + json.loads ÷ {SHORT[key]}", ratio_text(rows["bare_json"]["mb_s"], rows[key]["mb_s"]))
            )
    return out


def print_ratios(items: list[tuple[str, str]]) -> None:
    print("Ratios (ratio of the medians above; [min–max] of the ratios of runs paired by rep)")
    width = max(len(k) for k, _ in items)
    for k, v in items:
        print(f"  {k.ljust(width)}  {v}")
    print()


# --------------------------------------------------------------------------- profile


def run_profiles(n: int, windows: Sequence[int], timeout: float, top: int) -> list[dict[str, Any]]:
    """refwire's server under cProfile (first connection to last event), loaded as in test 1."""
    out = []
    for validate in (True, False):
        for w in windows:
            with tempfile.NamedTemporaryFile(suffix=".prof", delete=False) as f:
                path = f.name
            try:
                args = ["refwire", "--profile", path] + ([] if validate else ["--no-validate"])
                label = f"refwire, validate_json={validate}, windows of {w}"
                serve_and_load(args, label, ("_lj_loadgen.py", [PORT, n, w, "--level", "3"]), "load generator", n, timeout)
                st = pstats.Stats(path)
                total = st.total_tt or 1e-9  # type: ignore[attr-defined]
                entries = []
                for func, (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
                    filename, line, name = func
                    short = "/".join(Path(filename).parts[-2:]) if filename != "~" else ""
                    entries.append(
                        {"func": f"{short}:{line}({name})" if short else name, "ncalls": nc, "tottime": tt, "cumtime": ct}
                    )
                entries.sort(key=lambda e: e["tottime"], reverse=True)
                out.append({"label": label, "total_s": total, "top": entries[:top]})
            finally:
                os.unlink(path)
    return out


def print_profiles(profiles: list[dict[str, Any]], n: int) -> None:
    print(f"Profile: refwire's server under cProfile with a CPU-time clock, {n} events, from the first connection")
    print("to the last event, same load as test 1.  % of the profiled CPU total; cProfile adds overhead per call,")
    print("so functions called per event look heavier than they are.")
    for p in profiles:
        print(f"\n  {p['label']}: {p['total_s']:.3f} s profiled")
        rows = [
            [e["func"], f"{e['ncalls']}", f"{e['tottime'] / p['total_s'] * 100:.1f}", f"{e['cumtime'] / p['total_s'] * 100:.1f}"]
            for e in p["top"]
        ]
        print(table(["function", "calls", "self %", "cum %"], rows, indent="    "))
    print()


# --------------------------------------------------------------------------- main


def meta(n: int, reps: int) -> dict[str, Any]:
    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    git = "?"
    try:
        git = (
            subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
            ).stdout.strip()
            or "?"
        )
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        if dirty:
            git += " + uncommitted changes in src/"
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "events": n,
        "reps": reps,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "refwire": version("refwire"),
        "refwire_git": git,
        "trio": version("trio"),
        "timbersnake": version("timbersnake"),
        "pylogbeat": version("pylogbeat"),
        "loadavg_start": os.getloadavg(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def check_peers() -> None:
    missing = []
    for mod in ("trio", "refwire", "timbersnake", "pylogbeat"):
        cp = subprocess.run([PY, "-c", f"import {mod}"], capture_output=True, env=ENV)
        if cp.returncode != 0:
            missing.append(mod)
    if missing:
        raise BenchError(f"cannot import {', '.join(missing)} with {PY}; install with: pip install -e '.[interop]'")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, help="events per run (default 20000; 2000 with --quick)")
    ap.add_argument("--reps", type=int, help="runs per row; the median is reported (default 3; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="a fast smoke run (for tests): fewer events, one rep")
    ap.add_argument("--json", metavar="OUT", help="also write every run's figures as JSON to OUT")
    ap.add_argument("--only", default="ingest,client,decode", help="comma-separated blocks to run (ingest,client,decode)")
    ap.add_argument(
        "--profile", action="store_true", help="also profile refwire's server with cProfile and print the top functions"
    )
    ap.add_argument("--profile-top", type=int, default=20, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    n = args.events if args.events is not None else (2000 if args.quick else 20000)
    reps = args.reps if args.reps is not None else (1 if args.quick else 3)
    passes = 2 if args.quick else 5
    if n < 1 or reps < 1:
        ap.error("--events and --reps must be at least 1")
    blocks = {b.strip() for b in args.only.split(",") if b.strip()}
    if not blocks <= {"ingest", "client", "decode"}:
        ap.error("--only takes ingest, client, decode")
    # pylogbeat without TCP_NODELAY stalls ~44 ms per window of 100: allow for it.
    timeout = 30.0 + n / 100 * 0.1

    signal.signal(signal.SIGTERM, _on_sigterm)
    atexit.register(_kill_children)
    t_start = time.perf_counter()
    try:
        check_peers()
        info = meta(n, reps)
        windows = sorted({min(100, n), min(2048, n)})
        ingest = client = decode = None
        profiles: list[dict[str, Any]] = []
        if "ingest" in blocks:
            ingest = bench_ingest(n, reps, windows, timeout)
        if "client" in blocks:
            client = bench_client(n, reps, timeout)
        if "decode" in blocks:
            decode = bench_decode(n, reps, passes, timeout)
        if args.profile:
            progress("  profile")
            profiles = run_profiles(n, windows, timeout, args.profile_top)
    except BenchError as exc:
        print(f"lumberjack_bench: FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        _kill_children()
    info["loadavg_end"] = os.getloadavg()
    info["elapsed_s"] = time.perf_counter() - t_start

    la0, la1 = info["loadavg_start"], info["loadavg_end"]
    print(f"Lumberjack benchmark, refwire vs Python peers, measured side by side in this run ({info['started']})")
    print(
        f"{n} events per run, {'median of ' + str(reps) + ' runs [min–max]' if reps > 1 else '1 run'}, 127.0.0.1; "
        f"{info['implementation']} {info['python']}, {info['platform']}, {info['cpus']} CPUs"
    )
    print(
        f"refwire {info['refwire']} (git {info['refwire_git']}), trio {info['trio']}, timbersnake {info['timbersnake']}, "
        f"pylogbeat {info['pylogbeat']}; load average {la0[0]:.2f}/{la0[1]:.2f}/{la0[2]:.2f} at start, "
        f"{la1[0]:.2f}/{la1[1]:.2f}/{la1[2]:.2f} at end; {info['elapsed_s']:.0f} s"
    )
    cpus = info["cpus"] or 1
    if max(la0[0], la1[0]) > 0.5 * cpus:
        print(
            f"NOTE: the 1-minute load average reached {max(la0[0], la1[0]):.2f} on {cpus} CPUs: other processes shared the machine.\n"
            "      Wall-clock figures (ev/s, ms) suffer most from that; CPU µs/event figures less."
        )
    print()
    if ingest:
        print_ingest(ingest, n)
    if client:
        print_client(client, n)
    if decode:
        print_decode(decode)
    items = ratios(ingest, client, decode)
    if items:
        print_ratios(items)
    if profiles:
        print_profiles(profiles, n)
    if args.json:
        doc = {"meta": info, "ingest": ingest, "client": client, "decode": decode, "ratios": dict(items), "profiles": profiles}
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
