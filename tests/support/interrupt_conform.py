"""Interrupting a ``refwire conform`` run the way a person does (SIGINT), at a
moment told by what the run printed -- never after a sleep.

:func:`interrupt_after` starts ``refwire ARGS``, reads its stdout until a line
matches ``ready``, sends SIGINT (``times`` of them, one right after the other),
and returns the exit status and everything printed.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import time

from .commands import REFWIRE

__all__ = ["Interrupted", "interrupt_after"]

#: Seconds the run may take to print the awaited line, and to end once interrupted
#: (bounds against a hang, not timings the test depends on).
PATIENCE = 60.0


class Interrupted:
    """What an interrupted run left: its exit status, its stdout and stderr, and
    the stdout printed before the first SIGINT."""

    def __init__(self, returncode: int, stdout: str, stderr: str, before: str) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.before = before


def interrupt_after(args: list[str], ready: str, *, times: int = 1) -> Interrupted:
    """Run ``refwire ARGS``; once a stdout line matches the regex ``ready``, send
    SIGINT ``times`` times; wait for the exit."""
    proc = subprocess.Popen([*REFWIRE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = b""
    try:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            deadline = time.monotonic() + PATIENCE
            while not re.search(ready, seen.decode(errors="replace"), re.M):
                left = deadline - time.monotonic()
                assert left > 0 and sel.select(left), f"{args}: no line /{ready}/ within {PATIENCE:g} s: {seen!r}"
                chunk = os.read(fd, 65536)  # (the raw fd: a buffered reader could hold the line unseen)
                assert chunk, f"{args} exited ({proc.wait()}) before /{ready}/: {seen!r} {proc.stderr.read()!r}"  # type: ignore[union-attr]
                seen += chunk
        for _ in range(times):
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=PATIENCE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    before = seen.decode(errors="replace")
    return Interrupted(proc.returncode, before + out.decode(errors="replace"), err.decode(errors="replace"), before)
