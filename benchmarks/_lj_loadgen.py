"""Neutral Lumberjack load generator (stdlib only, blocking socket, TCP_NODELAY).

    python _lj_loadgen.py PORT EVENTS WINDOW [--level 3]

Every window is built before the clock starts: ``2W n`` followed by one ``2C``
(zlib at ``--level``) holding the window's ``2J`` frames, sequence numbers
1..n per window (as Beats does), all in one bytes object.  Timed: connect, then
per window one ``sendall`` and a wait for the ack of its last event.  The cost
per window is one syscall out and one or two in, so the server under test sets
the pace.  Reports wall and CPU seconds of the timed span.
"""

from __future__ import annotations

import argparse
import socket
import struct
import time
import zlib

from _lj_common import HOST, event_payloads, fail, report

_PACK_J = struct.Struct(">BBII").pack
_PACK_6 = struct.Struct(">BBI").pack
_UNPACK_6 = struct.Struct(">BBI").unpack_from


def build_windows(n: int, window: int, level: int) -> list[tuple[int, bytes]]:
    payloads = event_payloads(n)
    out = []
    for start in range(0, n, window):
        chunk = payloads[start : start + window]
        count = len(chunk)
        body = b"".join([_PACK_J(0x32, 0x4A, k, len(p)) + p for k, p in enumerate(chunk, 1)])
        z = zlib.compress(body, level)
        out.append((count, _PACK_6(0x32, 0x57, count) + _PACK_6(0x32, 0x43, len(z)) + z))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("events", type=int)
    ap.add_argument("window", type=int)
    ap.add_argument("--level", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args()

    windows = build_windows(args.events, args.window, args.level)
    wire_bytes = sum(len(d) for _, d in windows)

    c0, t0 = time.process_time(), time.perf_counter()
    sock = socket.create_connection((HOST, args.port), timeout=args.timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    acked = 0
    for count, data in windows:
        sock.sendall(data)
        done = False
        while not done:
            while len(buf) >= 6:
                _ver, typ, seq = _UNPACK_6(buf, 0)
                del buf[:6]
                if typ != 0x41:
                    fail(f"server sent frame type 0x{typ:02x}, expected an ack (0x41)")
                if seq == count:
                    done = True
                elif seq > count:
                    fail(f"ack {seq} beyond the window of {count}")
            if done:
                break
            chunk = sock.recv(65536)
            if not chunk:
                fail(f"server closed the connection after {acked} acked events")
            buf += chunk
        acked += count
    t1, c1 = time.perf_counter(), time.process_time()
    sock.close()
    report({"wall_s": t1 - t0, "cpu_s": c1 - c0, "events": acked, "windows": len(windows), "wire_bytes": wire_bytes})


if __name__ == "__main__":
    main()
