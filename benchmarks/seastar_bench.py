#!/usr/bin/env python3
"""Seastar RPC benchmark, side by side in one run (a figure is only
meaningful next to its baseline measured on the same machine at the same time).

    python benchmarks/seastar_bench.py [--calls 20000] [--inflight 64] [--big 1048576] [--bigcalls 64] [--reps 3] [--quick]

1. Calls/s: small echo calls (16 bytes), ``--inflight`` pipelined, through
   refwire's client (this process) and refwire's server (``refwire serve
   seastar-rpc`` in a process of its own), uncompressed, LZ4 and LZ4_FRAGMENTED.
2. MB/s: large echo calls (``--big`` bytes each, 4 in flight; payload bytes sent
   plus received per second), with each compressor; the payload is half
   compressible text, half random.
3. Decode: refwire's ``FrameDecoder`` over a buffer of response frames against a
   bare ``struct.unpack_from`` loop over the same bytes (the lower bound): as the
   client connection decodes (``next_responses``, a run of responses in columns),
   and, on the row below, one ``Response`` object per frame (``next_frame``).

Every reply is checked (length and content); a mismatch stops the run (exit 1).
Rows are taken round-robin over ``--reps`` and the median is printed.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable

import trio
from _floors import seastar_responses

from refwire.seastar_rpc import FrameDecoder, Response
from refwire.seastar_rpc.client import ClientConfig, SeastarClient

COMPRESSORS: dict[str, tuple[str, ...]] = {"none": (), "LZ4": ("LZ4",), "LZ4_FRAGMENTED": ("LZ4_FRAGMENTED",)}


def start_server() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-m", "refwire.cli", "serve", "seastar-rpc", "--listen", "127.0.0.1:0",
                             "--max-memory", str(1 << 30)], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
    if not m:
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    return proc, int(m.group(1))


async def _calls(port: int, comp: tuple[str, ...], n: int, inflight: int, payload: bytes) -> float:
    async with SeastarClient.connect_tcp("127.0.0.1", port, config=ClientConfig(compressors=comp)) as client:
        await client.call(2, payload)  # warm up
        left = n

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                got = await client.call(2, payload, timeout=60)
                if got != payload:
                    raise SystemExit(f"wrong reply: {len(got)} bytes")

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(inflight):
                nursery.start_soon(worker)
        return time.perf_counter() - t0


BARE_SERVER = """
import struct, sys, trio
async def echo(stream):
    buf = bytearray()
    while True:
        data = await stream.receive_some(65536)
        if not data:
            return
        buf += data
        pos = 0
        while len(buf) - pos >= 4:
            (n,) = struct.unpack_from("<I", buf, pos)
            if len(buf) - pos - 4 < n:
                break
            pos += 4 + n
        if pos:
            await stream.send_all(bytes(buf[:pos]))
            del buf[:pos]
async def main():
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    print(f"listening on 127.0.0.1:{listeners[0].socket.getsockname()[1]}", file=sys.stderr, flush=True)
    await trio.serve_listeners(echo, listeners)
trio.run(main)
"""


def start_bare_server() -> tuple[subprocess.Popen[str], int]:
    """The floor for calls/s: a bare trio echo of length-prefixed messages, no RPC layer at all."""
    proc = subprocess.Popen([sys.executable, "-c", BARE_SERVER], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    m = re.search(r":(\d+)", proc.stderr.readline())
    if not m:
        proc.kill()
        raise SystemExit("bare echo server did not start")
    return proc, int(m.group(1))


async def _bare_calls(port: int, n: int, inflight: int, payload: bytes) -> float:
    """``n`` messages of ``payload``, ``inflight`` at a time, over one connection to the bare echo."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    frame = struct.pack("<I", len(payload)) + payload
    slots = trio.Semaphore(inflight)

    async def reader() -> None:
        buf = bytearray()
        got = 0
        while got < n:
            data = await stream.receive_some(65536)
            if not data:
                raise SystemExit("bare echo closed")
            buf += data
            pos = 0
            while len(buf) - pos >= 4:
                (size,) = struct.unpack_from("<I", buf, pos)
                if len(buf) - pos - 4 < size:
                    break
                if buf[pos + 4 : pos + 4 + size] != payload:
                    raise SystemExit("bare echo: wrong reply")
                pos += 4 + size
                got += 1
                slots.release()
            del buf[:pos]

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        for _ in range(n):
            await slots.acquire()
            await stream.send_all(frame)
    dt = time.perf_counter() - t0
    await stream.aclose()
    return dt


def bare_calls_per_s(port: int, n: int, inflight: int) -> float:
    return n / trio.run(_bare_calls, port, n, inflight, b"0123456789abcdef")


def calls_per_s(port: int, comp: tuple[str, ...], n: int, inflight: int) -> float:
    dt = trio.run(_calls, port, comp, n, inflight, b"0123456789abcdef")
    return n / dt


def mb_per_s(port: int, comp: tuple[str, ...], size: int, n: int) -> float:
    text = (b"the quick brown fox jumps over the lazy dog " * (size // 88 + 1))[: size // 2]
    payload = text + os.urandom(size - len(text))
    dt = trio.run(_calls, port, comp, n, 4, payload)
    return 2 * size * n / dt / 1e6


def decode_rows(frames: int, passes: int = 5) -> dict[str, float]:
    body = b"x" * 16
    wire = b"".join(Response(i, body, 0).encode(with_duration=True) for i in range(1, frames + 1))

    def refwire_runs() -> int:
        # as the client connection decodes: regular responses a run at a time, in columns
        d = FrameDecoder("response", negotiation=False)
        d.configure(duration=True)
        d.feed(wire)
        n = 0
        while (run := d.next_responses()) is not None:
            n += len(run)
        while d.next_frame() is not None:  # (nothing is left: every frame is a regular response)
            n += 1
        return n

    def refwire_frames() -> int:
        # one Response object per frame
        d = FrameDecoder("response", negotiation=False)
        d.configure(duration=True)
        d.feed(wire)
        n = 0
        while d.next_frame() is not None:
            n += 1
        return n

    def bare_struct() -> int:
        return seastar_responses(wire)

    rows = (
        ("refwire FrameDecoder", refwire_runs),
        ("  .next_frame() each", refwire_frames),
        ("bare struct loop", bare_struct),
    )
    for name, fn in rows:  # checked (and warmed up) before any timing
        got = fn()
        if got != frames:
            raise SystemExit(f"{name} decoded {got} of {frames} frames")
    best = dict.fromkeys((name for name, _ in rows), float("inf"))
    for _ in range(passes):  # interleaved, best of the passes: drift lands on both rows alike
        for name, fn in rows:
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return {name: frames / dt for name, dt in best.items()}


def median_rows(reps: int, rows: dict[str, Callable[[], float]]) -> dict[str, float]:
    got: dict[str, list[float]] = {k: [] for k in rows}
    for _ in range(reps):
        for k, fn in rows.items():
            got[k].append(fn())
    return {k: statistics.median(v) for k, v in got.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=20_000)
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--big", type=int, default=1 << 20)
    p.add_argument("--bigcalls", type=int, default=64)
    p.add_argument("--frames", type=int, default=200_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="tiny sizes, one rep (a smoke run)")
    p.add_argument("--only", default="calls,mb,decode", help="comma-separated blocks to run (calls, mb, decode)")
    a = p.parse_args()
    only = set(a.only.split(","))
    if not only <= {"calls", "mb", "decode"}:
        p.error("--only takes calls, mb, decode")
    if a.quick:
        a.calls, a.big, a.bigcalls, a.frames, a.reps = 500, 64 * 1024, 8, 5_000, 1
    proc, port = start_server()
    bare_proc, bare_port = start_bare_server()
    try:
        print(f"Seastar RPC benchmark: python {sys.version.split()[0]}, {os.cpu_count()} cpus, "
              f"median of {a.reps} round-robin reps; server in its own process")
        small: dict[str, float] = {}
        if "calls" in only:
            rows: dict[str, Callable[[], float]] = {k: (lambda c=c: calls_per_s(port, c, a.calls, a.inflight)) for k, c in COMPRESSORS.items()}
            rows["bare trio echo"] = lambda: bare_calls_per_s(bare_port, a.calls, a.inflight)
            small = median_rows(a.reps, rows)
            print(f"\n1. Calls/s: {a.calls} echo calls of 16 bytes, {a.inflight} in flight")
            for k, v in small.items():
                print(f"   {k:<16} {v:>10,.0f} calls/s   ({v / small['none']:.2f}x uncompressed)")
        if "mb" in only:
            big = median_rows(a.reps, {k: (lambda c=c: mb_per_s(port, c, a.big, a.bigcalls)) for k, c in COMPRESSORS.items()})
            print(f"\n2. MB/s: {a.bigcalls} echo calls of {a.big} bytes (half text, half random), 4 in flight")
            for k, v in big.items():
                print(f"   {k:<16} {v:>10,.1f} MB/s      ({v / big['none']:.2f}x uncompressed)")
        ratios = []
        if "decode" in only:
            runs = [decode_rows(a.frames, 1 if a.quick else 5) for _ in range(a.reps)]
            dec = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            print(f"\n3. Decode: {a.frames} response frames (16-byte header + 16 bytes); median of {a.reps} runs, each the best of interleaved passes")
            for k, v in dec.items():
                print(f"   {k:<22} {v:>12,.0f} frames/s")
            ratios.append(f"FrameDecoder costs {dec['bare struct loop'] / dec['refwire FrameDecoder']:.2f}x a bare struct loop "
                          f"({dec['bare struct loop'] / dec['  .next_frame() each']:.2f}x with a Response per frame)")
        if small:
            ratios.append(f"refwire calls {small['none'] / small['bare trio echo']:.2f}x a bare trio length-prefixed echo")
            ratios.append(f"LZ4 {small['LZ4'] / small['none']:.2f}x / LZ4_FRAGMENTED {small['LZ4_FRAGMENTED'] / small['none']:.2f}x "
                          "the uncompressed call rate")
        print(f"\nRatios: {'; '.join(ratios)}")
    finally:
        for pr in (proc, bare_proc):
            pr.terminate()
            pr.wait(timeout=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
