"""The ``refwire`` command's entry point.

Importing :mod:`refwire.cli` (trio, attrs, every protocol's commands) takes a
moment; a Ctrl-C meanwhile ends the command as it does later -- exit status
130, no traceback -- rather than in the middle of an import.
"""

from __future__ import annotations

__all__ = ["main"]


def main() -> int:
    try:
        from .cli import main as run
    except KeyboardInterrupt:
        return 130
    return run()
