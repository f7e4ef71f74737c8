"""The memory a server process really uses under a hostile client (issue: the per-connection budget).

:func:`serving` starts ``refwire serve PROTOCOL ...`` as its own process and yields a
:class:`Served`: its address and :meth:`Served.growth`, the peak resident memory since
:meth:`Served.mark` (Linux's ``VmHWM`` after writing ``5`` to ``/proc/PID/clear_refs``,
which resets it to the current ``VmRSS``) minus the ``VmRSS`` at the mark.  That counts
every allocation the process made -- Python objects and what zlib, lz4 and orjson
allocate in C alike -- which ``tracemalloc`` would not.

The tests measure the server, never the test process: the hostile bytes are built here
and sent over a socket.  Linux only (``/proc``); elsewhere the tests skip.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .commands import REFWIRE

__all__ = ["MiB", "Served", "allowance", "needs_proc", "serving"]

MiB = 1 << 20
#: skip where the kernel has no per-process peak to reset
needs_proc = pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists() or sys.platform != "linux",
    reason="needs Linux /proc/PID/status VmHWM and clear_refs",
)


def allowance(budget: int) -> int:
    """The peak growth one connection may cause: 1.5 x its budget + 32 MiB."""
    return budget * 3 // 2 + 32 * MiB


def _status(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


class Served:
    """A running ``refwire serve`` process (see the module docstring)."""

    def __init__(self, proc: subprocess.Popen[str], host: str, port: int, lines: list[str]) -> None:
        self.proc = proc
        self.address = (host, port)
        self.lines = lines  # what it printed (stderr and stdout), as it prints it
        self._base = 0

    def rss(self) -> int:
        return _status(self.proc.pid)["VmRSS"]

    def mark(self) -> None:
        """Start measuring here: reset the peak to the resident size now."""
        with open(f"/proc/{self.proc.pid}/clear_refs", "w") as f:
            f.write("5")
        self._base = _status(self.proc.pid)["VmRSS"]

    def growth(self) -> int:
        """Peak resident bytes since :meth:`mark`, less the resident bytes at the mark."""
        return _status(self.proc.pid)["VmHWM"] - self._base

    def connect(self, timeout: float = 60.0) -> socket.socket:
        s = socket.create_connection(self.address, timeout=timeout)
        s.settimeout(timeout)
        return s

    def wait_for(self, text: str, timeout: float = 30.0) -> bool:
        """Whether the process prints ``text`` within ``timeout`` seconds (a bound, not a measurement)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in list(self.lines)):
                return True
            time.sleep(0.05)
        return False

    def alive(self) -> bool:
        return self.proc.poll() is None


@contextlib.contextmanager
def serving(protocol: str, *args: str, ready: str = r"listening on (\S+):(\d+)", timeout: float = 60.0) -> Iterator[Served]:
    """``refwire serve PROTOCOL --listen 127.0.0.1:0 ARGS...`` until the block ends.

    Waits (at most ``timeout`` seconds) for its line matching ``ready``, then for its
    resident size to settle (imports and first allocations done) before :meth:`Served.mark`.
    """
    proc = subprocess.Popen(
        [*REFWIRE, "serve", protocol, "--listen", "127.0.0.1:0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    found = threading.Event()
    where: list[tuple[str, int]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if not found.is_set() and (m := re.search(ready, line)):
                where.append((m[1], int(m[2])))
                found.set()
        found.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not found.wait(timeout) or not where:
            raise AssertionError(f"refwire serve {protocol} did not start: {''.join(lines)[-2000:]}")
        served = Served(proc, *where[0], lines)
        last, deadline = -1, time.monotonic() + timeout
        while time.monotonic() < deadline:  # settled: two readings 0.2 s apart within 1 MiB
            now = served.rss()
            if abs(now - last) < MiB:
                break
            last = now
            time.sleep(0.2)
        served.mark()
        yield served
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
