"""Decode micro-benchmark: refwire's decoder against bare ``struct`` loops over
the same bytes, in one process.

    python _lj_decode.py --frames N --reps R --passes P

The stream is N ``2J`` frames of the benchmark event (``json.dumps``, 108-112 B
of JSON, about 118 B a frame).  Each row decodes the whole stream, starting
from ``bytes`` already in memory; one sample is the median of P timed passes
after an untimed warm-up round of every row; R samples per row, taken round-robin.  Every
pass checks it produced N frames.

Rows:
* bare: ``unpack_from`` of seq and length, payload sliced to ``bytes`` (the
  loop of perf-baseline-lumberjack.md §3, a lower bound: no checks, no objects).
* bare+json: the same + ``json.loads`` of each payload (the JSON-parsing bound).
* FrameDecoder: ``feed(stream)`` + ``frames()``, validate_json off / on;
  ``frames(runs=True)``: the J frames in ``JsonRun`` columns (the server's path).
* ServerConnection: the Sans-IO server machine over the same frames with a
  ``2W 2048`` before every 2048 (the full batch pipeline: frames, windows,
  batches, acks via ``accept``), validate_json off / on; it counts
  ``len(batch)``, which builds no frame objects.
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import time
from collections.abc import Callable

from _floors import lumberjack_frames
from _lj_common import event_payloads, report

WINDOW = 2048


def build_streams(n: int) -> tuple[bytes, bytes]:
    pack_j = struct.Struct(">BBII").pack
    pack_w = struct.Struct(">BBI").pack
    frames = [pack_j(0x32, 0x4A, i + 1, len(p)) + p for i, p in enumerate(event_payloads(n))]
    plain = b"".join(frames)
    parts = []
    for start in range(0, n, WINDOW):
        chunk = frames[start : start + WINDOW]
        parts.append(pack_w(0x32, 0x57, len(chunk)))
        parts.extend(chunk)
    return plain, b"".join(parts)


def rows(n: int, plain: bytes, windowed: bytes) -> list[tuple[str, str, bytes, Callable[[], int]]]:
    from refwire.lumberjack import NEED_DATA, Batch, FrameDecoder, ServerConnection

    def bare() -> int:
        return lumberjack_frames(plain)

    def bare_json() -> int:
        unpack = struct.Struct(">2xII").unpack_from
        loads = json.loads
        buf = plain
        end = len(buf)
        pos = 0
        count = 0
        while pos < end:
            _seq, ln = unpack(buf, pos)
            pos += 10
            _doc = loads(buf[pos : pos + ln])
            pos += ln
            count += 1
        return count

    def decoder(validate: bool) -> Callable[[], int]:
        def run() -> int:
            d = FrameDecoder(validate_json=validate)
            d.feed(plain)
            return len(d.frames())

        return run

    def decoder_runs(validate: bool) -> Callable[[], int]:
        def run() -> int:
            d = FrameDecoder(validate_json=validate, fast=True)  # runs are the speed path's (refwire.speed)
            d.feed(plain)
            return sum(len(r) for r in d.frames(runs=True))

        return run

    def connection(validate: bool) -> Callable[[], int]:
        def run() -> int:
            c = ServerConnection(validate_json=validate)
            c.receive_data(windowed, now=0.0)
            count = 0
            while True:
                ev = c.next_event()
                if ev is NEED_DATA:
                    return count
                if type(ev) is Batch:
                    count += len(ev)
                    c.accept(ev, now=0.0)
                    c.data_to_send()

        return run

    return [
        ("bare", "bare struct.unpack_from loop (lower bound)", plain, bare),
        ("bare_json", "bare loop + json.loads (JSON-parsing bound)", plain, bare_json),
        ("decoder_raw", "refwire FrameDecoder, validate_json=False", plain, decoder(False)),
        ("decoder_json", "refwire FrameDecoder, validate_json=True", plain, decoder(True)),
        ("runs_raw", "refwire FrameDecoder runs=True, validate_json=False", plain, decoder_runs(False)),
        ("runs_json", "refwire FrameDecoder runs=True, validate_json=True", plain, decoder_runs(True)),
        ("conn_raw", f"refwire ServerConnection, W {WINDOW}, validate_json=False", windowed, connection(False)),
        ("conn_json", f"refwire ServerConnection, W {WINDOW}, validate_json=True", windowed, connection(True)),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--passes", type=int, default=5)
    args = ap.parse_args()
    n = args.frames
    plain, windowed = build_streams(n)
    table = rows(n, plain, windowed)
    samples: dict[str, list[float]] = {key: [] for key, *_ in table}
    for _key, label, _data, fn in table:  # warm-up round (allocator, caches, CPU clock)
        for _ in range(2):
            if fn() != n:
                raise SystemExit(f"_lj_decode: {label} decoded the wrong number of frames")
    for _rep in range(args.reps):
        for key, label, _data, fn in table:
            times = []
            for _ in range(args.passes):
                t0 = time.perf_counter()
                got = fn()
                times.append(time.perf_counter() - t0)
                if got != n:
                    raise SystemExit(f"_lj_decode: {label} decoded {got} of {n} frames")
            samples[key].append(statistics.median(times))
    report(
        {
            "frames": n,
            "bytes_plain": len(plain),
            "rows": [
                {"key": key, "label": label, "bytes": len(data), "seconds": samples[key]} for key, label, data, _fn in table
            ],
        }
    )


if __name__ == "__main__":
    main()
