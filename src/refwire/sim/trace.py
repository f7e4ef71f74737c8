"""Event log of a simulation run, its hash, and rare-path probe counters.

Every interesting event (a delivery, a reset, an EOF, ...) is appended as one
text line whose fields are formatted deterministically (floats with a fixed
number of decimals).  :meth:`Trace.hash` digests all lines ever recorded, so
two runs with the same seed must produce the same hash: the *determinism
canary*.

:meth:`Trace.probe` counts how often rare paths were hit (FoundationDB's
``CODE_PROBE`` idea); probes do not enter the hash.
"""

from __future__ import annotations

import collections
import hashlib

__all__ = ["Trace", "format_field"]


def format_field(value: object) -> str:
    """Format one trace field deterministically.

    Floats get six decimals (``repr`` of a float is exact but noisy), bytes
    are hex, everything else uses ``str``.
    """
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:.6f}"
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return str(value)


class Trace:
    """An append-only event log with a SHA-256 digest over every line.

    Lines are digested in batches (on :meth:`hash`, and before old lines are
    trimmed): the digest is the same as line by line, for a fraction of the calls.

    Args:
        max_lines: keep at most roughly this many recent lines in
            :attr:`lines` (the hash still covers every line).  ``None`` keeps
            all of them.
    """

    def __init__(self, max_lines: int | None = None) -> None:
        """Create an empty trace."""
        if max_lines is not None and max_lines < 1:
            raise ValueError("max_lines must be >= 1 or None")
        self.lines: list[str] = []
        self.counters: collections.Counter[str] = collections.Counter()
        self._max_lines = max_lines
        self._digest = hashlib.sha256()
        self._digested = 0  #: lines[:_digested] are in _digest
        self._count = 0

    def __len__(self) -> int:
        """Number of lines recorded so far (including trimmed ones)."""
        return self._count

    def record(self, now: float, *fields: object) -> None:
        """Append the line ``"<now> field field ..."`` to the log."""
        # format_field, inlined for the common exact types (str and int subclasses,
        # bool among them, and everything else still go through format_field).
        parts = [f"{now:.6f}"]
        for f in fields:
            kind = type(f)
            if kind is str:
                parts.append(f)  # type: ignore[arg-type]
            elif kind is int:
                parts.append(str(f))
            elif kind is float:
                parts.append(f"{f:.6f}")
            else:
                parts.append(format_field(f))
        self._count += 1
        lines = self.lines
        lines.append(" ".join(parts))
        if self._max_lines is not None and len(lines) > 2 * self._max_lines:
            self._digest_pending()
            del lines[: len(lines) - self._max_lines]
            self._digested = len(lines)

    def _digest_pending(self) -> None:
        lines = self.lines
        if self._digested < len(lines):
            self._digest.update(("\n".join(lines[self._digested :]) + "\n").encode())
            self._digested = len(lines)

    def hash(self) -> str:
        """First 16 hex digits of the SHA-256 over all recorded lines."""
        self._digest_pending()
        return self._digest.copy().hexdigest()[:16]

    def tail(self, n: int = 20) -> list[str]:
        """The last ``n`` retained lines."""
        if n <= 0:
            return []
        return self.lines[-n:]

    def probe(self, name: str, n: int = 1) -> None:
        """Count a hit of the rare path ``name`` (not part of the hash)."""
        self.counters[name] += n
