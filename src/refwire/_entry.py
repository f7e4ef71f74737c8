"""The ``refwire`` command's entry point.

Importing :mod:`refwire.cli` (trio, attrs, every protocol's commands) takes a
moment; a Ctrl-C meanwhile ends the command as it does later -- exit status
130, no traceback -- rather than in the middle of an import.

A reader of the output that goes away (``refwire conform list | head``) ends
the command as it ends ``cat``: quietly, exit status 141 (128 + SIGPIPE), no
"Broken pipe" line.  The command stops at its next write, as it would on any
other error, so its own clean-up (a conformance run's reports) still happens.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, TextIO

__all__ = ["main"]

#: The exit status of a command whose output's reader went away (as a shell
#: reports a command killed by SIGPIPE).
EXIT_READER_GONE = 141

#: The line :mod:`refwire.cli` prints for an error that is a broken pipe.
_BROKEN_PIPE_LINE = "refwire: Broken pipe"


class _Stdout:
    """``sys.stdout`` that notices when its reader went away: from then on the
    file descriptor writes to ``/dev/null`` (so no later flush fails again) and
    :attr:`reader_gone` is set; the write that found out still raises."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner
        self.reader_gone = False

    def write(self, text: str) -> int:
        try:
            return self._inner.write(text)
        except BrokenPipeError:
            self.gone()
            raise

    def flush(self) -> None:
        try:
            self._inner.flush()
        except BrokenPipeError:
            self.gone()
            raise

    def gone(self) -> None:
        """The reader went away: send what is still to come to ``/dev/null``."""
        self.reader_gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._inner.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError, AttributeError):  # no file descriptor (a test's StringIO): nothing to redirect
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _Stderr:
    """``sys.stderr`` that leaves out the "Broken pipe" error line once the
    output's reader went away (that is how such a command ends, not an error)."""

    def __init__(self, inner: TextIO, stdout: _Stdout) -> None:
        self._inner = inner
        self._stdout = stdout
        self._drop_newline = False

    def write(self, text: str) -> int:
        if self._stdout.reader_gone:
            if text.rstrip("\n") == _BROKEN_PIPE_LINE:
                self._drop_newline = not text.endswith("\n")  # print() writes the end separately
                return len(text)
            if self._drop_newline and text == "\n":
                self._drop_newline = False
                return len(text)
        self._drop_newline = False
        return self._inner.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _ignore_further_ctrl_c() -> None:
    """The command was interrupted and is ending: a further Ctrl-C (while the
    interpreter shuts down, when SIGINT has its default action again) must not
    end the process by the signal instead of with status 130."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def main() -> int:
    try:
        from .cli import main as run
    except KeyboardInterrupt:
        return 130
    stdout_was, stderr_was = sys.stdout, sys.stderr
    out = _Stdout(stdout_was)
    sys.stdout = out
    sys.stderr = _Stderr(stderr_was, out)
    try:
        try:
            status = run()
            if status == 130:
                _ignore_further_ctrl_c()
        except KeyboardInterrupt:  # a second Ctrl-C just as the command returned
            status = 130
            _ignore_further_ctrl_c()
        try:
            out.flush()  # what is still buffered, before the interpreter's own flush at exit
        except BrokenPipeError:
            pass
    finally:
        sys.stdout, sys.stderr = stdout_was, stderr_was
    return EXIT_READER_GONE if out.reader_gone else status
