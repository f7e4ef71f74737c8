"""Events of the 2017 draft dialect's Sans-IO connections
(specs/pravega-draft-2017/README.md §5-§7): what
:meth:`~refwire.pravega.draft2017.connection.ServerConnection.next_event` and
:meth:`~refwire.pravega.draft2017.connection.ClientConnection.next_event` give, and the append blocks
(:class:`Blocks`) a client machine sends."""

from __future__ import annotations

import uuid

import attrs

from ..frames import Command

__all__ = ["BlockAppend", "Blocks", "ConnectionClosed", "KeepAliveReceived", "ReplyReceived", "RequestReceived"]


@attrs.frozen
class RequestReceived:
    """A request the application answers (a server machine's event)."""

    command: Command
    #: stream offset of the request's frame; None when it arrived as a partial message
    offset: int | None = None


@attrs.frozen
class BlockAppend:
    """A complete append block: store ``data`` and the new level atomically (§6.5)."""

    segment: str
    connection_id: uuid.UUID
    data: bytes  #: the block's Event frames, as stored
    level: int  #: the connection offset after this block
    previous_level: int  #: the level before it (what the store's record must still say)


@attrs.frozen
class ReplyReceived:
    """A reply from the server (a client machine's event)."""

    command: Command


@attrs.frozen
class KeepAliveReceived:
    """A KeepAlive arrived, with the bytes it carries."""

    data: bytes


@attrs.frozen
class ConnectionClosed:
    """The connection is over.  ``clean`` is False after a reset, a failed write
    or too long a silence (``reason`` says which)."""

    clean: bool = True
    reason: str = ""


@attrs.frozen
class Blocks:
    """What a client sends for a :class:`~refwire.pravega.draft2017.writer.DraftWriterSession`:
    the append blocks its ``take()`` built (Begin, Events and parts, End), sent as they are."""

    data: bytes
