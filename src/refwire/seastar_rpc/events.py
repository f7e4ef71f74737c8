"""Events of the Seastar RPC Sans-IO machines (:mod:`refwire.seastar_rpc.connection`);
research/seastar.md §2-§3, §5, §7."""

from __future__ import annotations

import attrs

from .frames import Features, Negotiation, RemoteException

__all__ = [
    "CallFailed",
    "CallReceived",
    "CallTimedOut",
    "ConnectionClosed",
    "Negotiated",
    "NegotiationRequested",
    "OversizedCall",
    "Reply",
    "StrayReply",
    "oversized_message",
]


@attrs.frozen
class NegotiationRequested:
    """Server: the client's offer; answer with :meth:`ServerConnection.accept` or ``reject``."""

    features: Features
    raw: Negotiation


@attrs.frozen
class CallReceived:
    """Server: a request.  ``deadline`` is absolute (the ``now`` it arrived + its
    timeout), ``None`` when it has none."""

    verb: int
    msg_id: int
    payload: bytes
    timeout_ms: int | None
    deadline: float | None
    received_at: float


@attrs.frozen
class OversizedCall:
    """Server: a request whose data (``length`` bytes) was skipped unread."""

    verb: int
    msg_id: int
    length: int
    timeout_ms: int | None
    deadline: float | None
    received_at: float


@attrs.frozen
class Negotiated:
    """Client: the server's reply was applied; requests may flow now."""

    features: Features
    compressor: str | None
    connection_id: int | None


@attrs.frozen
class Reply:
    """Client: the successful reply to call ``msg_id``."""

    msg_id: int
    payload: bytes
    handler_duration: int | None


@attrs.frozen
class CallFailed:
    """Client: the server answered call ``msg_id`` with an exception."""

    msg_id: int
    error: RemoteException
    handler_duration: int | None


@attrs.frozen
class CallTimedOut:
    """Client: call ``msg_id`` reached its deadline; a later reply is a :class:`StrayReply`."""

    msg_id: int


@attrs.frozen
class StrayReply:
    """Client: a reply for no pending call (one-way, timed out, or never issued:
    ``known`` says whether this connection ever used that id).  Never fatal (§7.1)."""

    msg_id: int
    known: bool
    error: RemoteException | None


@attrs.frozen
class ConnectionClosed:
    """The byte stream ended; ``pending`` are the client's calls left without an answer."""

    clean: bool
    reason: str = ""
    pending: tuple[int, ...] = ()


def oversized_message(estimate: int, max_memory: int) -> bytes:
    """The USER text Seastar 25.05 sends for a request over its memory limit (research §3.4)."""
    return f"request size {estimate} large than memory limit {max_memory}".encode()
