"""The 2017 draft dialect's commands (specs/pravega-draft-2017/README.md §2-§3).

The draft names no type codes; these are the era-B codes of Pravega commit
``207431d9`` (2016-07-29), the only historical table with a code for every
message the draft lists.  They clash with today's table (7 is SegmentRead here,
DataAppended there), so the dialect has its own registry, :data:`DRAFT`; it
shares the codec machinery of :mod:`refwire.pravega.frames_codec`.
"""

from __future__ import annotations

import enum
import uuid
from typing import Final

import attrs

from ..frames_codec import BOOL, I32, I64, REST, U8, UTF, UUID, Command, Dialect, f

__all__ = [
    "DRAFT",
    "PROTOCOL",
    "AppendSetup",
    "BeginAppendBlock",
    "DataAppended",
    "EndAppendBlock",
    "Event",
    "KeepAlive",
    "Part",
    "PartialMessage",
    "ReadSegment",
    "SegmentRead",
    "SetupAppend",
]

PROTOCOL: Final = "pravega-draft-2017"
DRAFT: Final = Dialect(PROTOCOL, {}, strict_trailing=True)  #: strict layouts (README §2, D11)


class Part(enum.IntEnum):
    """PartialMessage's part byte.  The draft lists Begin, Middle, End and gives
    no values; these are its listing order (Java ordinals), refwire's choice."""

    BEGIN = 0
    MIDDLE = 1
    END = 2


@DRAFT.command(-2, "both")
@attrs.frozen(kw_only=True)
class PartialMessage(Command):
    """A consecutive slice of one serialized message (header included)."""

    part: int = f(U8)
    data: bytes = f(REST, default=b"")


@DRAFT.command(0, "inner")
@attrs.frozen(kw_only=True)
class Event(Command):
    """An event inside an append block; the whole frame is what is stored."""

    data: bytes = f(REST)


@DRAFT.command(1, "request")
@attrs.frozen(kw_only=True)
class SetupAppend(Command):
    connection_id: uuid.UUID = f(UUID)
    segment: str = f(UTF)


@DRAFT.command(2, "reply")
@attrs.frozen(kw_only=True)
class AppendSetup(Command):
    segment: str = f(UTF)
    connection_id: uuid.UUID = f(UUID)
    connection_offset_ack_level: int = f(I64)


@DRAFT.command(3, "request")
@attrs.frozen(kw_only=True)
class BeginAppendBlock(Command):
    """``length``: wire bytes of the frames between this and the EndAppendBlock."""

    connection_id: uuid.UUID = f(UUID)
    connection_offset: int = f(I64)
    length: int = f(I32)


@DRAFT.command(4, "request")
@attrs.frozen(kw_only=True)
class EndAppendBlock(Command):
    """``block_length``: segment bytes the block contributes; ``connection_offset``
    is the Begin's offset plus ``block_length``."""

    connection_id: uuid.UUID = f(UUID)
    connection_offset: int = f(I64)
    block_length: int = f(I32)


@DRAFT.command(5, "reply")
@attrs.frozen(kw_only=True)
class DataAppended(Command):
    """Everything below ``ack_level`` (connection offset) is durably stored."""

    connection_id: uuid.UUID = f(UUID)
    ack_level: int = f(I64)


@DRAFT.command(6, "request")
@attrs.frozen(kw_only=True)
class ReadSegment(Command):
    segment: str = f(UTF)
    offset: int = f(I64)
    suggested_length: int = f(I32)


@DRAFT.command(7, "reply")
@attrs.frozen(kw_only=True)
class SegmentRead(Command):
    """The draft's layout: no length before the data, which runs to the end of
    the frame (the 2016 code had an i32 length)."""

    segment: str = f(UTF)
    offset: int = f(I64)
    at_tail: bool = f(BOOL)
    end_of_segment: bool = f(BOOL)
    data: bytes = f(REST, default=b"")


@DRAFT.command(100, "both")
@attrs.frozen(kw_only=True)
class KeepAlive(Command):
    """Uninterpreted data, echoed by the server."""

    data: bytes = f(REST, default=b"")
