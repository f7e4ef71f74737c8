"""``--check``: a protocol's invariants on the traffic through the proxy.

The proxy sees every frame twice: as its sender sent it and as the other peer
received it (after the faults).  So a check can tell a peer's bug from an
injected fault: the server is judged on what it *received*, the client on what
it *received*.

Here is what every check shares (:class:`Checker`, :class:`Violation`); each
protocol's invariants are in its adapter (:mod:`refwire.chaos.adapters`, made
by :func:`refwire.chaos.adapter.checker_for`).
"""

from __future__ import annotations

from typing import Any

import attrs

from .observe import Observed

__all__ = ["Checker", "Violation"]


@attrs.frozen
class Violation:
    check: str
    conn: int
    direction: str
    frame: int
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"event": "violation", **attrs.asdict(self)}


class Checker:
    """No invariants known for the protocol: records nothing."""

    def __init__(self) -> None:
        self.violations: list[Violation] = []

    def sent(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        """A frame as its sender sent it."""

    def received(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        """A frame as the other peer received it (after the faults)."""

    def closed(self, conn: int) -> None:
        """The connection ended."""

    def finish(self) -> list[Violation]:
        """What the end of the run reveals; returns every violation."""
        return self.violations
