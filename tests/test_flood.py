"""A flood of idle connections from another process (specs' limits sections;
README "Reliability"): past ``--max-connections`` they are refused cleanly
(closed at once, counted, a log line per 10 s), under it they are held with
bounded memory, and a good client is served within 1 s during the flood.
The 10,000-connection flood is opt-in (``--run-slow``); the default suite
runs a small one."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.commands import REFWIRE

pytestmark = pytest.mark.timeout(120)

PEER = Path(__file__).with_name("flood_peer.py")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _served_within(port: int, seconds: float) -> float:
    """Seconds until a new connection gets the TANK broker's Ping (5 bytes); fails past ``seconds``."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as s:
        s.settimeout(seconds)
        got = b""
        while len(got) < 5:
            chunk = s.recv(5 - len(got))
            assert chunk, "the good client was refused"
            got += chunk
    assert got == bytes([0x03, 0, 0, 0, 0])
    return time.monotonic() - t0


def _flood(n: int, max_connections: int) -> tuple[int, int, int, float, str]:
    """(held, refused, RSS growth KiB, good client's wait, server stderr) for ``n`` idle connections."""
    server = subprocess.Popen(
        [*REFWIRE, "serve", "tank", "--listen", "127.0.0.1:0", "--max-connections", str(max_connections)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        line = server.stderr.readline()
        port = int(re.search(r":(\d+)", line).group(1))  # type: ignore[union-attr]
        before = _rss_kib(server.pid)
        flood = subprocess.Popen(
            [sys.executable, str(PEER), "127.0.0.1", str(port), str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert flood.stdout is not None
            counts = flood.stdout.readline().split()
            held, refused = int(counts[1]), int(counts[3])
            grown = _rss_kib(server.pid) - before
            wait = _served_within(port, 1.0) if held < max_connections else -1.0
        finally:
            flood.communicate("", timeout=30)
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    return held, refused, grown, wait, err


def test_a_small_flood_is_held_or_refused_cleanly() -> None:
    held, refused, grown, wait, _ = _flood(600, 2000)
    assert (held, refused) == (600, 0)
    assert 0 <= wait < 1.0
    assert grown < 600 * 40  # KiB: an idle connection costs a few KiB, not a buffer's worth
    held, refused, _, _, err = _flood(600, 400)
    assert held == 400 and refused == 200
    assert 1 <= err.count("connection refused") <= 2  # logged once per 10 s, with the count of the rest


@pytest.mark.slow
def test_ten_thousand_idle_connections() -> None:
    held, refused, grown, wait, _ = _flood(10_000, 12_000)
    assert (held, refused) == (10_000, 0)
    assert 0 <= wait < 1.0, wait
    per_connection = grown / 10_000
    print(
        f"10,000 idle connections held: +{grown / 1024:.0f} MiB RSS ({per_connection:.1f} KiB each); a good client served in {wait * 1000:.0f} ms"
    )
    assert per_connection < 40
    held, refused, _, _, err = _flood(10_000, 1024)
    assert held == 1024 and refused == 10_000 - 1024
    assert err.count("connection refused") <= 2
