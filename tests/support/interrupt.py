"""Ctrl-C a ``refwire`` command at a moment it announces, as a terminal does.

:func:`interrupt_at` starts ``refwire ARGS`` in a session of its own, reads its
stdout and stderr as they come, and each time the next awaited line appears
sends SIGINT to the whole process group (a terminal's Ctrl-C reaches the
command's workers too).  No sleeps: a moment is a line the command printed.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Sequence

from support.commands import REFWIRE

__all__ = ["interrupt_at", "looks_clean"]


def interrupt_at(
    args: Sequence[str],
    moments: Sequence[tuple[str, str]],
    *,
    timeout: float = 60.0,
    stop_timeout: float = 30.0,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``refwire ARGS``; for each ``(stream, regex)`` of ``moments`` in turn
    ("stdout"/"stderr"), wait for a match in that stream's output after the
    previous moment's match, then send SIGINT to the process group (an empty
    regex: at once, e.g. a second Ctrl-C right after the first).  Returns the
    whole output and the exit status.

    ``timeout`` bounds the wait for the moments (a busy machine may take most of
    it to start the command); ``stop_timeout``, counted from the last SIGINT,
    bounds the wait for the command to exit -- its own bound, so a slow start
    cannot eat the time the command has to stop (on an idle machine it stops in
    well under a second)."""
    proc = subprocess.Popen([*REFWIRE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, cwd=cwd)
    assert proc.stdout is not None and proc.stderr is not None
    fds = {"stdout": proc.stdout.fileno(), "stderr": proc.stderr.fileno()}
    seen = {"stdout": b"", "stderr": b""}
    deadline = time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as sel:
            for name, fd in fds.items():
                sel.register(fd, selectors.EVENT_READ, name)
            start = {"stdout": 0, "stderr": 0}
            for stream, pattern in moments:
                while True:
                    found = re.compile(pattern, re.M).search(seen[stream].decode(errors="replace"), start[stream])
                    if found:
                        start[stream] = found.end()
                        break
                    left = deadline - time.monotonic()
                    events = sel.select(left) if left > 0 else []
                    assert events, f"{args}: no /{pattern}/ on {stream} within {timeout:.0f} s: {seen}"
                    for key, _ in events:
                        chunk = os.read(key.fd, 65536)  # (the raw fd: a buffered reader could hold the line unseen)
                        if not chunk:
                            sel.unregister(key.fd)
                            assert sel.get_map(), f"{args} exited ({proc.wait()}) before /{pattern}/: {seen}"
                        seen[key.data] += chunk
                os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=stop_timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, (seen["stdout"] + out).decode(errors="replace"), (seen["stderr"] + err).decode(errors="replace")
    )


def looks_clean(proc: subprocess.CompletedProcess[str]) -> str | None:
    """What is wrong with an interrupted command's output, or None: a traceback,
    Py4J or Java stack lines, or a seed recorded as crashed by the interrupt."""
    text = proc.stdout + proc.stderr
    for bad in ("Traceback", "KeyboardInterrupt", "BaseExceptionGroup", "py4j", "at org.", "internal error"):
        if bad in text:
            return f"{bad!r} in the output:\n{text[-3000:]}"
    return None
