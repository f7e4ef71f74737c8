"""Drive the real Pravega client (PyPI ``pravega==0.3.8``, Rust core, wire v15)
against a controller URI; print one ``RESULT {json}`` line per step.

Usage: pravega_client_peer.py tcp://HOST:PORT SCENARIO [N]
Scenarios: events (scope, stream, N events, reader group read-back),
keyed (3 segments, routing keys, per-key order), bytes (byte stream), time / time-inflight
(N events, timing only; one event in flight, or up to 1000).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import pravega_client


def result(step: str, **fields: object) -> None:
    print("RESULT " + json.dumps({"step": step, **fields}), flush=True)


async def read_all(reader: pravega_client.StreamReader, n: int) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < n:
        sl = await reader.get_segment_slice_async()
        for ev in sl:
            got.append(bytes(ev.data()))
        reader.release_segment(sl)
    return got


def main() -> None:
    uri, scenario = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    mgr = pravega_client.StreamManager(uri)
    result("scope", created=mgr.create_scope("sc"), again=mgr.create_scope("sc"))
    if scenario in ("events", "time", "time-inflight"):
        result("stream", created=mgr.create_stream("sc", "st", 1))
        w = mgr.create_writer("sc", "st", max_inflight_events=1000 if scenario == "time-inflight" else 0)
        t0 = time.perf_counter()
        for i in range(n):
            w.write_event(f"event {i}")
        w.flush()
        result("written", n=n, seconds=time.perf_counter() - t0)
        if scenario != "events":
            return
        rg = mgr.create_reader_group("rg1", "sc", "st")
        r = rg.create_reader("r1")
        got = asyncio.run(read_all(r, n))
        r.reader_offline()
        result("read", n=len(got), in_order=got == [f"event {i}".encode() for i in range(n)], first=got[0].decode(), last=got[-1].decode())
    elif scenario == "keyed":
        result("stream", created=mgr.create_stream("sc", "keyed", 3))
        w = mgr.create_writer("sc", "keyed")
        keys = [f"key{k}" for k in range(5)]
        for i in range(n):
            k = keys[i % len(keys)]
            w.write_event(f"{k} {i}", routing_key=k)
        w.flush()
        rg = mgr.create_reader_group("rg2", "sc", "keyed")
        r = rg.create_reader("r1")
        got = asyncio.run(read_all(r, n))
        r.reader_offline()
        per_key: dict[str, list[int]] = {}
        for ev in got:
            k, i = ev.decode().split()
            per_key.setdefault(k, []).append(int(i))
        ordered = all(v == sorted(v) for v in per_key.values())
        result("read", n=len(got), distinct=len(set(got)), keys=len(per_key), per_key_in_order=ordered)
    elif scenario == "bytes":
        result("stream", created=mgr.create_stream("sc", "bst", 1))
        bs = mgr.create_byte_stream("sc", "bst")
        payload = bytes(range(256)) * 400  # 102400 bytes
        for i in range(0, len(payload), 10000):
            bs.write(payload[i : i + 10000])
        bs.flush()
        tail = bs.current_tail_offset()
        bs.seek(0, 0)
        buf = bytearray()
        while len(buf) < len(payload):
            chunk = bytearray(min(65536, len(payload) - len(buf)))
            n = bs.readinto(chunk)
            buf += chunk[:n]
        bs.seek(1000, 0)
        part = bytearray(10)
        bs.readinto(part)
        result("bytes", tail=tail, equal=bytes(buf) == payload, seek_ok=bytes(part) == payload[1000:1010])
    else:
        raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    main()
    # The Rust core's threads may still call into Python while the interpreter
    # finalizes ("PyGILState_Release ... finalizing", SIGABRT): every result is
    # printed and flushed, so leave without finalizing.
    sys.stdout.flush()
    os._exit(0)
