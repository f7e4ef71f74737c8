"""The errors particular to Lumberjack's client (specs/lumberjack/README.md §3.7, §3.9).

A peer breaking the protocol raises the shared :class:`~refwire.errors.RemoteProtocolError`;
these say how a client's ``send`` ended.  Every one is a :class:`~refwire.errors.RefwireError`.
"""

from __future__ import annotations

from typing import Any

from ..errors import RefwireError

__all__ = ["AckWaitExpired", "SendFailed", "WindowNotAcked"]


class SendFailed(RefwireError):
    """A Lumberjack client's ``send`` gave up (``max_attempts`` reached): the server
    kept closing, resetting, timing out or breaking the protocol
    (specs/lumberjack/README.md §3.7).

    ``acked`` counts the events of that ``send`` call that were acked;
    ``unacked`` holds the rest, in order (re-queue them for at-least-once).
    """

    def __init__(self, message: str, *, acked: int, unacked: list[Any]) -> None:
        super().__init__(message)
        self.acked = acked
        self.unacked = unacked


class WindowNotAcked(RefwireError):
    """One attempt at a Lumberjack window ended before its last ack: the server
    closed the connection (specs/lumberjack/README.md §3.7).  The client reconnects
    and resends what is unacked; after ``max_attempts`` it raises :class:`SendFailed`
    with this as the cause (also kept as the client's ``last_error``)."""


class AckWaitExpired(WindowNotAcked):
    """No ack and no keepalive for ``waited`` seconds (the client's ack timeout,
    specs/lumberjack/README.md §3.9)."""

    def __init__(self, waited: float) -> None:
        self.waited = waited
        super().__init__(f"no ack for {waited:.1f}s")
