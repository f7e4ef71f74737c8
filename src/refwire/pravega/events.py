"""Events of the Pravega Sans-IO connections (specs/pravega/README.md §4-§7): what
:meth:`~refwire.pravega.connection.ServerConnection.next_event` and
:meth:`~refwire.pravega.connection.ClientConnection.next_event` give, and the framed append
bytes (:class:`AppendBytes`) and reply places (:class:`ReplySlot`) the
machines take."""

from __future__ import annotations

import uuid

import attrs

from .frames import Command

__all__ = [
    "Append",
    "AppendBytes",
    "ClientEvent",
    "ConnectionClosed",
    "HelloReceived",
    "KeepAliveReceived",
    "ReplyReceived",
    "ReplySlot",
    "RequestReceived",
    "ServerEvent",
]


@attrs.frozen
class HelloReceived:
    """The peer's Hello: the wire versions it speaks, and whether they overlap
    this side's (an incompatible peer is refused after this event)."""

    high_version: int
    low_version: int
    compatible: bool


@attrs.frozen
class KeepAliveReceived:
    """A KeepAlive arrived (the machine answers a client's KeepAlive itself)."""

    pass


@attrs.frozen
class RequestReceived:
    """A request the application answers with :meth:`ServerConnection.send`
    (SetupAppend, ReadSegment, GetStreamSegmentInfo, CreateSegment, tables…)."""

    command: Command


@attrs.frozen
class Append:
    """One reassembled append (§5.3): ``data`` is stored as-is.

    ``expected_offset`` is None for unconditional appends.  ``event_number``
    is the number of the *last* event in ``data``; ``event_count`` events.
    """

    segment: str
    writer_id: uuid.UUID
    event_number: int
    event_count: int
    data: bytes
    request_id: int
    expected_offset: int | None = None
    #: the writer's last stored event number before this append: the value
    #: the store compares its writer attribute with, atomically (§5.4)
    previous_stored: int = 0


@attrs.frozen
class ReplyReceived:
    """A reply from the segment store (a client machine's event)."""

    command: Command


@attrs.define(eq=False)
class ReplySlot:
    """A place in a server connection's reply order (:meth:`~refwire.pravega.connection.ServerConnection.reserve`):
    replies queued after it wait until it is filled."""

    data: bytes | None = None


@attrs.frozen
class AppendBytes:
    """What a client sends for a writer: the append commands a
    :class:`~refwire.pravega.writer.WriterSession` encoded (``WriterSession.take()``), already
    framed (§5.1)."""

    data: bytes


@attrs.frozen
class ConnectionClosed:
    """The connection is over.  ``clean`` is False after a reset, an EOF inside
    an append block or a failed write (``reason`` says which)."""

    clean: bool = True
    reason: str = ""


ServerEvent = HelloReceived | KeepAliveReceived | RequestReceived | Append | ConnectionClosed
ClientEvent = HelloReceived | KeepAliveReceived | ReplyReceived | ConnectionClosed
