#!/usr/bin/env python3
# ruff: noqa: RUF001  (the output uses the multiplication sign on purpose)
"""TANK benchmark, side by side in one run (specs/tank/README.md §10).

    python benchmarks/tank_bench.py [--messages 50000] [--reps 3] [--quick]

1. Broker throughput: messages/s produced into and consumed back out of
   refwire's TankBroker by refwire's TankClient over TCP loopback, with small
   (32 B) and large (4 KiB) messages, bundles of 100, with and without Snappy.
   Broker and client run in one trio process (no peer exists in Python).
2. Decode: refwire's ``read_chunk`` over a chunk of uncompressed bundles
   against a bare ``struct`` loop that walks the same bytes (lower bound),
   and ``read_chunk`` over Snappy bundles.

Every run checks its counts and exits 1 on a shortfall.  Best of ``--reps``.
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from collections.abc import Callable

import trio
from _floors import tank_chunk

from refwire.tank import Message, encode_bundle, encode_entry, read_chunk
from refwire.tank.client import TankClient
from refwire.tank.server import TankBroker
from refwire.wire import decode_uvarint

_Q = struct.Struct("<Q")


def fail(msg: str) -> None:
    print(f"FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


async def _broker_run(n: int, size: int, compress: bool, bundle: int) -> tuple[float, float]:
    broker = TankBroker()
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    payload = b"x" * size
    msgs = [Message(payload, 1_700_000_000_000) for _ in range(bundle)]
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve, listeners)
        async with TankClient.connect_tcp("127.0.0.1", port) as c:
            await c.create_topic("bench", 1)
            t0 = time.perf_counter()
            sent = 0
            window = 8  # produce requests in flight

            async def producer(k: int) -> None:
                nonlocal sent
                while sent < n:
                    sent += bundle
                    r = await c.produce("bench", 0, msgs, compress=compress)
                    if r.error:
                        fail(f"produce error {r.error}")

            async with trio.open_nursery() as inner:
                for k in range(window):
                    inner.start_soon(producer, k)
            t_prod = time.perf_counter() - t0
            stored = broker.storage.topics["bench"][0].last_assigned
            t0 = time.perf_counter()
            seq, got = 1, 0
            while got < stored:
                pd = await c.consume("bench", 0, seq, fetch_size=4 * 1024 * 1024)
                assert pd.chunk is not None
                got += len(pd.chunk.messages)
                seq = pd.chunk.next_seq
            t_cons = time.perf_counter() - t0
            if got != stored:
                fail(f"consumed {got} of {stored}")
        await broker.shutdown(0.1)
        nursery.cancel_scope.cancel()
    return stored / t_prod, stored / t_cons


def _struct_walk(chunk: bytes) -> int:
    """Lower bound: walk entries and messages with struct/varint, no objects."""
    return tank_chunk(chunk, decode_uvarint)


def _best_interleaved(rows: list[Callable[[], int]], passes: int) -> list[float]:
    """The best time of each row over ``passes`` rounds that run every row in
    turn, so drift on the machine lands on all rows alike."""
    best = [float("inf")] * len(rows)
    for _ in range(passes):
        for i, fn in enumerate(rows):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small run (checks the harness, not the numbers)")
    ap.add_argument("--only", default="broker,decode", help="comma-separated blocks to run (broker, decode)")
    ap.add_argument("--passes", type=int, default=7, help="interleaved decode passes, best kept (default 7)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if not only <= {"broker", "decode"}:
        ap.error("--only takes broker, decode")
    n = 2_000 if args.quick else args.messages
    reps = 1 if args.quick else args.reps
    passes = 1 if args.quick else args.passes
    print(f"python {sys.version.split()[0]}, trio {trio.__version__}; best of {reps} (broker), of {passes} interleaved passes (decode)\n")
    if "broker" in only:
        print("1. Broker throughput (TankClient → TankBroker → TankClient, TCP loopback, bundles of 100)")
        print(f"{'messages':<22}{'produce msg/s':>16}{'consume msg/s':>16}{'produce MB/s':>14}")
        for size in (32, 4096):
            for compress in (False, True):
                count = n if size == 32 else max(1_000, n // 10)
                runs = [trio.run(_broker_run, count, size, compress, 100) for _ in range(reps)]
                prod, cons = max(r[0] for r in runs), max(r[1] for r in runs)
                label = f"{size} B{' + Snappy' if compress else ''}"
                print(f"{label:<22}{prod:>16,.0f}{cons:>16,.0f}{prod * size / 1e6:>14.1f}")
    if "decode" not in only:
        return 0
    print("\n2. Decode one chunk (uncompressed: 32 B messages, bundles of 100)")
    msgs = [Message(b"y" * 32, 1_700_000_000_000 + i // 10) for i in range(100)]
    plain = b"".join(encode_entry(encode_bundle(msgs, compress=False)) for _ in range(n // 100))
    snappy = b"".join(encode_entry(encode_bundle(msgs, compress=True)) for _ in range(n // 100))
    total = (n // 100) * 100

    def refwire_plain() -> int:
        r = read_chunk(plain, base_seq=1, hwmark=2**62, requested_seq=0)
        if r.count != total:
            fail("decode count")
        return r.count

    def refwire_objects() -> int:
        r = read_chunk(plain, base_seq=1, hwmark=2**62, requested_seq=0)
        if len(r.messages) != total:  # builds one Message per message
            fail("decode count (messages)")
        return len(r.messages)

    def refwire_snappy() -> int:
        r = read_chunk(snappy, base_seq=1, hwmark=2**62, requested_seq=0)
        if r.count != total:
            fail("decode count (snappy)")
        return r.count

    def bare() -> int:
        if _struct_walk(plain) != total:
            fail("struct count")
        return total

    for fn in (refwire_plain, bare, refwire_objects, refwire_snappy):  # checked (and warmed up) before any timing
        fn()
    t_ref, t_bare, t_obj, t_sn = _best_interleaved([refwire_plain, bare, refwire_objects, refwire_snappy], passes)
    mb = len(plain) / 1e6
    print(f"{'refwire read_chunk':<32}{mb / t_ref:>8.1f} MB/s {total / t_ref:>12,.0f} msg/s (columns: .count)")
    print(f"{'bare struct loop':<32}{mb / t_bare:>8.1f} MB/s {total / t_bare:>12,.0f} msg/s")
    print(f"{'refwire read_chunk, .messages':<32}{mb / t_obj:>8.1f} MB/s {total / t_obj:>12,.0f} msg/s (one Message each)")
    print(f"{'refwire read_chunk, Snappy':<32}{mb / t_sn:>8.1f} MB/s {total / t_sn:>12,.0f} msg/s (MB of uncompressed chunk)")
    print(f"\nRatios: refwire decode = {t_bare / t_ref:.2f}× the bare struct loop's speed (bare ÷ refwire: {t_ref / t_bare:.2f}× slower)")
    print(f"        reading .messages: bare ÷ refwire {t_obj / t_bare:.2f}× slower")
    return 0


if __name__ == "__main__":
    sys.exit(main())
