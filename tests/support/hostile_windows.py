"""Many Lumberjack connections from one process, each pipelining windows of compressed events
as fast as the server reads them (tests/test_memory_server.py runs it beside a server).

    python hostile_windows.py HOST PORT CONNECTIONS WINDOWS EVENTS EVENT_BYTES

Each connection sends ``WINDOWS`` windows of ``W EVENTS`` then one ``C`` frame per event
(zlib level 9: a ``C`` frame of a few KB inflates to one ``J`` of ``EVENT_BYTES``), keeping
two windows in flight (it sends the next as soon as the one before the last is acked), then
reads its acks until the server closes (it does once every window is acked).
It prints ``started`` once every connection has sent its first window's bytes, and at the end
one JSON line: for each connection, the highest sequence number the server acked and the
number of bytes written.  Sequence numbers run on across windows (window k holds
``k * EVENTS + 1 ...``), so every event has its own number and its own marker in the payload.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import zlib


def _window(first: int, n: int, size: int, conn: int) -> bytes:
    out = [b"2W" + struct.pack(">I", n)]
    for seq in range(first, first + n):
        marker = json.dumps({"hostile": conn, "seq": seq, "m": ""})
        payload = (marker[:-2] + "a" * (size - len(marker)) + '"}').encode()
        j = b"2J" + struct.pack(">II", seq, len(payload)) + payload
        z = zlib.compress(j, 9)
        out.append(b"2C" + struct.pack(">I", len(z)) + z)
    return b"".join(out)


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    conns, windows, events, size = (int(a) for a in sys.argv[3:7])
    acked = [0] * conns
    sent = [0] * conns
    first_sent = threading.Barrier(conns + 1)

    def run(i: int) -> None:
        s = socket.create_connection((host, port), timeout=300)
        got = bytearray()

        def read_acks(until: int) -> None:
            while acked[i] < until and (data := s.recv(65536)):
                got.extend(data)
                while len(got) >= 6:
                    if got[:2] == b"2A":
                        acked[i] = max(acked[i], struct.unpack_from(">I", got, 2)[0])
                    del got[:6]

        try:
            for k in range(windows):
                data = _window(k * events + 1, events, size, i)
                s.sendall(data)
                sent[i] += len(data)
                if k == 0:
                    first_sent.wait()
                read_acks(k * events)  # two windows in flight at most, as a pipelining shipper keeps
            s.shutdown(socket.SHUT_WR)
            read_acks(windows * events + 1)  # to the server's close
        except OSError:
            pass
        finally:
            s.close()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(conns)]
    for t in threads:
        t.start()
    first_sent.wait()
    print("started", flush=True)
    for t in threads:
        t.join()
    print(json.dumps({"acked": acked, "sent": sent}), flush=True)


if __name__ == "__main__":
    main()
