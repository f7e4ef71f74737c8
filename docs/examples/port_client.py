"""The ported client, tested with ``refwire conform``: it sends one window with
the decoder of port_from_scratch.py and waits for the ack that covers it.

``python port_client.py HOST PORT EVENTS`` is the testee (the contract of
specs/lumberjack/README.md §9: exit 0 only once every event was acked).  Run
without arguments, it runs ``refwire conform`` on itself."""

import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from port_from_scratch import decode, encode


def ship(host, port, count):
    with socket.create_connection((host, port), timeout=5) as sock:
        frames = [{"type": "W", "version": "2", "count": count}]
        frames += [{"type": "J", "version": "2", "seq": i + 1, "json": {"n": i}} for i in range(count)]
        sock.sendall(b"".join(encode(f) for f in frames))
        buffer = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return False  # closed before the last ack
            buffer += chunk
            whole = len(buffer) - len(buffer) % 6  # an ack is 6 bytes: decode whole ones only
            for frame in decode(buffer[:whole]):
                if frame["type"] == "A" and frame["seq"] == count:
                    return True
            buffer = buffer[whole:]


if len(sys.argv) == 4:
    sys.exit(0 if ship(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])) else 1)

here = Path(__file__).resolve().parent
with tempfile.TemporaryDirectory() as report:
    run = subprocess.run(
        [
            "refwire", "conform", "lumberjack", "--client",
            "--exec", f"{sys.executable} {here / 'port_client.py'} {{host}} {{port}} {{events}}",
            "--cases", "lj.C1.2,lj.C1.3,lj.C4.1,lj.C4.4",  # partial acks, an ack byte by byte, two bad acks
            "--agent", "port", "--seed", "7", "--quiet", "--out", report,
        ],
        capture_output=True, text=True,
    )  # fmt: skip
print(run.stdout)
print("exit status", run.returncode)
