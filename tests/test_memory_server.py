"""The server-wide memory budget (``--server-memory``, :mod:`refwire.admission`) under many
hostile connections at once, measured as the server process's RSS.

Eight connections from another process (``support/hostile_windows.py``) send windows of
four ``C`` frames of a few KB that each inflate to a 960 KiB event, two windows in flight,
as fast as the server takes them, at ``--connection-memory 32 MiB``: each stays within its
own budget, so none is refused, and without a server budget they are decoded side by side.
With ``--server-memory 48 MiB`` one connection is busy at a time (each takes 1.5 x 32 MiB);
the others wait, their reads paused.

The claims, each asserted:

* the server's peak RSS growth stays under the server budget plus a fixed overhead of
  40 MiB (the allocator's high-water mark, zlib's and the JSON check's scratch, the bytes a
  paused connection has read: measured 70 to 75 MiB in all, whether one or two connections
  are busy at once);
* a well-behaved client on another connection is acked within 60 s while they run (it
  waits for the connections ahead of it in the queue: 0.3 to 4.5 s measured on a busy
  2-core machine; the bound is far above that so that a busier one does not fail it);
* nothing acked is lost: every event of every acked window, the hostile ones' included, is
  in the server's ``--out`` file after it shuts down.

Without the server budget (the same run with ``--server-memory`` 8 GiB) the peak growth was
134 to 148 MiB: over the bound, so the test fails there.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from support.rss import MiB, needs_proc, serving

pytestmark = needs_proc

HOSTILE = Path(__file__).resolve().parent / "support" / "hostile_windows.py"
CONNECTIONS, WINDOWS, EVENTS, EVENT_BYTES = 8, 3, 4, 960 * 1024
CONNECTION_MEMORY = 32 * MiB
SERVER_MEMORY = 48 * MiB
OVERHEAD = 40 * MiB
GOOD_CLIENT_BOUND = 60.0


def _good_client(address: tuple[str, int]) -> tuple[float, bytes]:
    """Send ``W 2`` and two small events; the seconds until the ack, and what came back."""
    s = socket.create_connection(address, timeout=GOOD_CLIENT_BOUND)
    start = time.monotonic()
    got = b""
    try:
        events = b"".join(
            b"2J" + struct.pack(">II", seq, len(p)) + p
            for seq, p in ((1, b'{"good":1,"seq":1}'), (2, b'{"good":1,"seq":2}'))
        )
        s.sendall(b"2W" + struct.pack(">I", 2) + events)
        while b"2A\x00\x00\x00\x02" not in got:
            data = s.recv(65536)
            if not data:
                break
            got += data
        return time.monotonic() - start, got
    finally:
        s.close()


def test_eight_hostile_connections_stay_within_the_server_budget_and_a_good_client_is_served(
    tmp_path: Path,
) -> None:
    out = tmp_path / "events.jsonl"
    args = ["--out", str(out), "--connection-memory", str(CONNECTION_MEMORY), "--server-memory", str(SERVER_MEMORY)]
    with serving("lumberjack", *args, "--keepalive", "0") as served:
        hostile = subprocess.Popen(
            [sys.executable, str(HOSTILE), *map(str, served.address), *map(str, (CONNECTIONS, WINDOWS, EVENTS, EVENT_BYTES))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert hostile.stdout is not None
            assert hostile.stdout.readline().strip() == "started"
            waited, got = _good_client(served.address)
            report, err = hostile.communicate(timeout=300)
        finally:
            if hostile.poll() is None:
                hostile.kill()
                hostile.wait()
        growth = served.growth()
        assert served.alive()
    print(f"peak growth {growth / MiB:.1f} MiB; the good client waited {waited:.2f} s")
    assert hostile.returncode == 0, err[-2000:]
    assert b"2A\x00\x00\x00\x02" in got, (got, "".join(served.lines)[-2000:])
    assert waited < GOOD_CLIENT_BOUND
    assert growth <= SERVER_MEMORY + OVERHEAD, f"peak growth {growth / MiB:.1f} MiB"

    # nothing acked is lost: every event of an acked window is in --out
    acked = json.loads(report.strip().splitlines()[-1])["acked"]
    assert acked == [WINDOWS * EVENTS] * CONNECTIONS, acked  # none was refused: each was within its budget
    written: set[tuple[str, int, int]] = set()
    with out.open("rb") as f:
        for line in f:
            head = line[:200].decode("ascii", "replace")
            if m := re.search(r'"hostile": ?(\d+), ?"seq": ?(\d+)', head):
                written.add(("hostile", int(m[1]), int(m[2])))
            elif m := re.search(r'"good": ?1, ?"seq": ?(\d+)', head):
                written.add(("good", 0, int(m[1])))
    for conn, last in enumerate(acked):
        missing = [seq for seq in range(1, last + 1) if ("hostile", conn, seq) not in written]
        assert not missing, (conn, missing)
    assert {("good", 0, 1), ("good", 0, 2)} <= written
