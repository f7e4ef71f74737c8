"""Events of the Seastar RPC Sans-IO machines (:mod:`refwire.seastar_rpc.connection`);
specs/seastar-rpc/README.md §2-§3, §5, §7.

The machines *produce* the events in the first part (``next_event()``) and
*take* the ones in the second (``send(event, now=...)``).  Stream messages,
end-of-stream and the no-op frame go both ways as the frame classes
:class:`~refwire.seastar_rpc.frames.StreamMessage`,
:class:`~refwire.seastar_rpc.frames.StreamEnd` and
:class:`~refwire.seastar_rpc.frames.NoOp`.
"""

from __future__ import annotations

import attrs

from .frames import UNMEASURED, Features, Negotiation, RemoteException

__all__ = [
    "Accept",
    "Call",
    "CallFailed",
    "CallReceived",
    "CallTimedOut",
    "ConnectionClosed",
    "Negotiate",
    "Negotiated",
    "NegotiationRequested",
    "OversizedCall",
    "Reject",
    "Reply",
    "Respond",
    "RespondError",
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
    ``known`` says whether this connection ever used that id).  Never fatal (§3)."""

    msg_id: int
    known: bool
    error: RemoteException | None


@attrs.frozen
class ConnectionClosed:
    """The byte stream ended; ``pending`` are the client's calls left without an answer."""

    clean: bool
    reason: str = ""
    pending: tuple[int, ...] = ()


# --------------------------------------------------------------------------- sent


@attrs.frozen
class Negotiate:
    """Client: send the negotiation offer (the first bytes of every connection, §1)."""


@attrs.frozen
class Call:
    """Client: call ``verb``; the machine numbers it (its msg id is
    :attr:`ClientConnection.next_msg_id` before the send).  ``timeout`` is
    relative seconds (``None``: none); a one-way call expects no reply."""

    verb: int
    payload: bytes = b""
    timeout: float | None = None
    one_way: bool = False


@attrs.frozen
class Accept:
    """Server: answer the offer (the reply frame); ``connection_id`` is sent when given."""

    connection_id: int | None = None


@attrs.frozen
class Reject:
    """Server: close without a reply (bad isolation cookie, unknown stream parent ...)."""

    reason: str = ""


@attrs.frozen
class Respond:
    """Server: the reply to ``call`` -- nothing is sent once its propagated
    deadline has passed (§3) or the connection is over."""

    call: CallReceived
    payload: bytes
    handler_duration: int = UNMEASURED


@attrs.frozen
class RespondError:
    """Server: an exception reply to ``call`` (its msg id negated); dropped as :class:`Respond` is."""

    call: CallReceived | OversizedCall
    error: RemoteException
    handler_duration: int = UNMEASURED


def oversized_message(estimate: int, max_memory: int) -> bytes:
    """The USER text Seastar 25.05 sends for a request over its memory limit (specs/seastar-rpc/README.md §3)."""
    return f"request size {estimate} large than memory limit {max_memory}".encode()
