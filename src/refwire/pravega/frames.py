"""Pravega frames (specs/pravega/README.md §1-§4, §8, §9): today's command table,
one frozen attrs class per command in wire field order, and the codec to encode
and decode them.

This is the module to import.  The codec (the layout interpreter of
:mod:`.commands`: field kinds, encoder, decoder; the stream decoder of
:mod:`.frames_codec`) is re-exported here; it is separate because it is a job
of its own size, shared with the 2017 draft dialect's command table
(``refwire.pravega.draft2017.frames``).

Every command decodes through that one interpreter (the plain path).  The
hand-written decoders of the append and read paths' commands are a speed path
beside it, in :mod:`._fast_frames`.
"""

from __future__ import annotations

import uuid

import attrs

from .frames_codec import (
    BLOB32,
    BOOL,
    CLIENT_LIMITS,
    COMMANDS,
    CURRENT,
    DEFAULT_LIMITS,
    ENTRIES,
    EVENT,
    HEADER,
    I32,
    I64,
    I64_ANY,
    KEYS,
    LONGS,
    MAX_WIRECOMMAND_SIZE,
    NO_VERSION,
    NOT_EXISTS,
    NULL_VALUE,
    OLDEST_COMPATIBLE_VERSION,
    OPT_BLOB32,
    PROTOCOL,
    REST,
    U8,
    UTF,
    UUID,
    WIRE_VERSION,
    Command,
    CommandDecoder,
    Dialect,
    TableEntry,
    TableKey,
    command,
    decode_command,
    encode_command,
    encode_event,
    f,
    split_frames,
)

__all__ = [
    # the codec (from .frames_codec)
    "CLIENT_LIMITS",
    "COMMANDS",
    "CURRENT",
    "DEFAULT_LIMITS",
    "HEADER",
    "MAX_WIRECOMMAND_SIZE",
    "NO_VERSION",
    "NOT_EXISTS",
    "NULL_VALUE",
    "OLDEST_COMPATIBLE_VERSION",
    "PROTOCOL",
    "WIRE_VERSION",
    "CommandDecoder",
    "Dialect",
    "decode_command",
    "encode_command",
    "encode_event",
    "split_frames",
    # the commands
    "AppendBlock",
    "AppendBlockEnd",
    "AppendSetup",
    "AuthTokenCheckFailed",
    "Command",
    "ConditionalAppend",
    "ConditionalBlockEnd",
    "ConditionalCheckFailed",
    "CreateSegment",
    "CreateTableSegment",
    "DataAppended",
    "DeleteSegment",
    "DeleteTableSegment",
    "ErrorMessage",
    "Event",
    "GetSegmentAttribute",
    "GetStreamSegmentInfo",
    "Hello",
    "InvalidEventNumber",
    "KeepAlive",
    "NoSuchSegment",
    "OperationUnsupported",
    "Padding",
    "PartialEvent",
    "ReadSegment",
    "ReadTable",
    "ReadTableEntries",
    "ReadTableEntriesDelta",
    "ReadTableKeys",
    "RemoveTableKeys",
    "SealSegment",
    "SegmentAlreadyExists",
    "SegmentAttribute",
    "SegmentAttributeUpdated",
    "SegmentCreated",
    "SegmentDeleted",
    "SegmentIsSealed",
    "SegmentIsTruncated",
    "SegmentPolicyUpdated",
    "SegmentRead",
    "SegmentSealed",
    "SegmentTruncated",
    "SetupAppend",
    "StreamSegmentInfo",
    "TableEntriesDeltaRead",
    "TableEntriesRead",
    "TableEntriesUpdated",
    "TableEntry",
    "TableKey",
    "TableKeyBadVersion",
    "TableKeyDoesNotExist",
    "TableKeysRead",
    "TableKeysRemoved",
    "TableRead",
    "TableSegmentNotEmpty",
    "TruncateSegment",
    "UpdateSegmentAttribute",
    "UpdateSegmentPolicy",
    "UpdateTableEntries",
    "WrongHost",
    "request_id_of",
]


# --------------------------------------------------------------------------- commands (§4)
# Field order below is the order on the wire.


@command(-127, "both")
@attrs.frozen(kw_only=True)
class Hello(Command):
    high_version: int = f(I32, default=WIRE_VERSION)
    low_version: int = f(I32, default=OLDEST_COMPATIBLE_VERSION)


@command(100, "both")
@attrs.frozen(kw_only=True)
class KeepAlive(Command):
    pass


@command(0, "inner")
@attrs.frozen(kw_only=True)
class Event(Command):
    """Frames each event inside append data and stored segments; never a top-level frame."""

    data: bytes = f(REST)


@command(-1, "inner")
@attrs.frozen(kw_only=True)
class Padding(Command):
    """``length`` zero bytes closing an AppendBlock early."""

    length: int = f(REST)


@command(-2, "inner")
@attrs.frozen(kw_only=True)
class PartialEvent(Command):
    """The first bytes of an Event split across AppendBlock and AppendBlockEnd."""

    data: bytes = f(REST)


@command(1, "request")
@attrs.frozen(kw_only=True)
class SetupAppend(Command):
    request_id: int = f(I64)
    writer_id: uuid.UUID = f(UUID)
    segment: str = f(UTF)
    delegation_token: str = f(UTF, default="")


@command(2, "reply")
@attrs.frozen(kw_only=True)
class AppendSetup(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    writer_id: uuid.UUID = f(UUID)
    last_event_number: int = f(I64)


@command(3, "request")
@attrs.frozen(kw_only=True)
class AppendBlock(Command):
    """``writerId`` + raw block bytes (whole Events, then at most one Padding or PartialEvent)."""

    writer_id: uuid.UUID = f(UUID)
    data: bytes = f(REST, default=b"")


@command(4, "request")
@attrs.frozen(kw_only=True)
class AppendBlockEnd(Command):
    writer_id: uuid.UUID = f(UUID)
    size_of_whole_events: int = f(I32)
    data: bytes = f(BLOB32)
    num_events: int = f(I32)
    last_event_number: int = f(I64)
    request_id: int = f(I64, optional=-1)


@command(5, "request")
@attrs.frozen(kw_only=True)
class ConditionalAppend(Command):
    writer_id: uuid.UUID = f(UUID)
    event_number: int = f(I64)
    expected_offset: int = f(I64)
    event: bytes = f(EVENT)  #: the event payload; framed as an Event on the wire
    request_id: int = f(I64, optional=-1)


@command(7, "reply")
@attrs.frozen(kw_only=True)
class DataAppended(Command):
    writer_id: uuid.UUID = f(UUID)
    event_number: int = f(I64)
    previous_event_number: int = f(I64, optional=-1)
    request_id: int = f(I64, optional=-1)
    current_segment_write_offset: int = f(I64, optional=-1)


@command(8, "reply")
@attrs.frozen(kw_only=True)
class ConditionalCheckFailed(Command):
    writer_id: uuid.UUID = f(UUID)
    event_number: int = f(I64)
    request_id: int = f(I64, optional=-1)


@command(9, "request")
@attrs.frozen(kw_only=True)
class ReadSegment(Command):
    segment: str = f(UTF)
    offset: int = f(I64)
    suggested_length: int = f(I32)
    delegation_token: str = f(UTF, default="")
    request_id: int = f(I64, optional=-1)


@command(10, "reply")
@attrs.frozen(kw_only=True)
class SegmentRead(Command):
    segment: str = f(UTF)
    offset: int = f(I64)
    at_tail: bool = f(BOOL)
    end_of_segment: bool = f(BOOL)
    data: bytes = f(BLOB32)
    request_id: int = f(I64, optional=-1)


@command(11, "request")
@attrs.frozen(kw_only=True)
class GetStreamSegmentInfo(Command):
    request_id: int = f(I64)
    segment_name: str = f(UTF)
    delegation_token: str = f(UTF, default="")


@command(12, "reply")
@attrs.frozen(kw_only=True)
class StreamSegmentInfo(Command):
    request_id: int = f(I64)
    segment_name: str = f(UTF)
    exists: bool = f(BOOL)
    is_sealed: bool = f(BOOL)
    is_deleted: bool = f(BOOL)
    last_modified: int = f(I64)
    write_offset: int = f(I64)
    start_offset: int = f(I64, optional=0)


@command(20, "request")
@attrs.frozen(kw_only=True)
class CreateSegment(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    target_rate: int = f(I32, default=0)
    scale_type: int = f(U8, default=0)
    delegation_token: str = f(UTF, default="")
    rollover_size_bytes: int = f(I64, optional=0)


@command(21, "reply")
@attrs.frozen(kw_only=True)
class SegmentCreated(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)


@command(28, "request")
@attrs.frozen(kw_only=True)
class SealSegment(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    delegation_token: str = f(UTF, default="")


@command(29, "reply")
@attrs.frozen(kw_only=True)
class SegmentSealed(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)


@command(30, "request")
@attrs.frozen(kw_only=True)
class DeleteSegment(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    delegation_token: str = f(UTF, default="")


@command(31, "reply")
@attrs.frozen(kw_only=True)
class SegmentDeleted(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)


@command(32, "request")
@attrs.frozen(kw_only=True)
class UpdateSegmentPolicy(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    target_rate: int = f(I32)
    scale_type: int = f(U8)
    delegation_token: str = f(UTF, default="")


@command(33, "reply")
@attrs.frozen(kw_only=True)
class SegmentPolicyUpdated(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)


@command(34, "request")
@attrs.frozen(kw_only=True)
class GetSegmentAttribute(Command):
    request_id: int = f(I64)
    segment_name: str = f(UTF)
    attribute_id: uuid.UUID = f(UUID)
    delegation_token: str = f(UTF, default="")


@command(35, "reply")
@attrs.frozen(kw_only=True)
class SegmentAttribute(Command):
    request_id: int = f(I64)
    value: int = f(I64)


@command(36, "request")
@attrs.frozen(kw_only=True)
class UpdateSegmentAttribute(Command):
    request_id: int = f(I64)
    segment_name: str = f(UTF)
    attribute_id: uuid.UUID = f(UUID)
    new_value: int = f(I64)
    expected_value: int = f(I64)
    delegation_token: str = f(UTF, default="")


@command(37, "reply")
@attrs.frozen(kw_only=True)
class SegmentAttributeUpdated(Command):
    request_id: int = f(I64)
    success: bool = f(BOOL)


@command(38, "request")
@attrs.frozen(kw_only=True)
class TruncateSegment(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    truncation_offset: int = f(I64)
    delegation_token: str = f(UTF, default="")


@command(39, "reply")
@attrs.frozen(kw_only=True)
class SegmentTruncated(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)


# -- error replies (§8) -------------------------------------------------------


@command(50, "reply")
@attrs.frozen(kw_only=True)
class WrongHost(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    correct_host: str = f(UTF, default="")
    server_stack_trace: str = f(UTF, optional="")


@command(51, "reply")
@attrs.frozen(kw_only=True)
class SegmentIsSealed(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    server_stack_trace: str = f(UTF, optional="")
    offset: int = f(I64, optional=-1)


@command(52, "reply")
@attrs.frozen(kw_only=True)
class SegmentAlreadyExists(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    server_stack_trace: str = f(UTF, optional="")


@command(53, "reply")
@attrs.frozen(kw_only=True)
class NoSuchSegment(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    server_stack_trace: str = f(UTF, optional="")
    offset: int = f(I64, optional=-1)


@command(55, "reply")
@attrs.frozen(kw_only=True)
class InvalidEventNumber(Command):
    """The v16+ layout (requestId second); a v15 peer reads requestId as eventNumber."""

    writer_id: uuid.UUID = f(UUID)
    request_id: int = f(I64)
    server_stack_trace: str = f(UTF, optional="")
    event_number: int = f(I64, optional=-1)


@command(56, "reply")
@attrs.frozen(kw_only=True)
class SegmentIsTruncated(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    start_offset: int = f(I64)
    server_stack_trace: str = f(UTF, optional="")
    offset: int = f(I64, optional=-1)


@command(57, "reply")
@attrs.frozen(kw_only=True)
class OperationUnsupported(Command):
    request_id: int = f(I64)
    operation_name: str = f(UTF)
    server_stack_trace: str = f(UTF, optional="")


@command(60, "reply")
@attrs.frozen(kw_only=True)
class AuthTokenCheckFailed(Command):
    """error_code: -1 UNSPECIFIED, 0 TOKEN_CHECK_FAILED, 1 TOKEN_EXPIRED."""

    request_id: int = f(I64)
    server_stack_trace: str = f(UTF, optional="")
    error_code: int = f(I32, optional=-1)


@command(61, "reply")
@attrs.frozen(kw_only=True)
class ErrorMessage(Command):
    """error_code: -1 UNSPECIFIED, 0 ILLEGAL_ARGUMENT_EXCEPTION."""

    request_id: int = f(I64)
    segment: str = f(UTF)
    message: str = f(UTF)
    error_code: int = f(I32)


# -- table segments (§9) ------------------------------------------------------


@command(70, "request")
@attrs.frozen(kw_only=True)
class CreateTableSegment(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    delegation_token: str = f(UTF, default="")
    sorted_deprecated: bool = f(BOOL, optional=False)
    key_length: int = f(I32, optional=0)
    rollover_size_bytes: int = f(I64, optional=0)


@command(71, "request")
@attrs.frozen(kw_only=True)
class DeleteTableSegment(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    must_be_empty: bool = f(BOOL)
    delegation_token: str = f(UTF, default="")


@command(74, "request")
@attrs.frozen(kw_only=True)
class UpdateTableEntries(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    delegation_token: str = f(UTF)
    table_entries: tuple[TableEntry, ...] = f(ENTRIES)
    table_segment_offset: int = f(I64_ANY, optional=-1)


@command(75, "reply")
@attrs.frozen(kw_only=True)
class TableEntriesUpdated(Command):
    request_id: int = f(I64)
    updated_versions: tuple[int, ...] = f(LONGS)


@command(76, "request")
@attrs.frozen(kw_only=True)
class RemoveTableKeys(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    delegation_token: str = f(UTF)
    keys: tuple[TableKey, ...] = f(KEYS)
    table_segment_offset: int = f(I64_ANY, optional=-1)


@command(77, "reply")
@attrs.frozen(kw_only=True)
class TableKeysRemoved(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)


@command(78, "request")
@attrs.frozen(kw_only=True)
class ReadTable(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    delegation_token: str = f(UTF)
    keys: tuple[TableKey, ...] = f(KEYS)


@command(79, "reply")
@attrs.frozen(kw_only=True)
class TableRead(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    entries: tuple[TableEntry, ...] = f(ENTRIES)


@command(80, "reply")
@attrs.frozen(kw_only=True)
class TableSegmentNotEmpty(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    server_stack_trace: str = f(UTF, default="")


@command(81, "reply")
@attrs.frozen(kw_only=True)
class TableKeyDoesNotExist(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    server_stack_trace: str = f(UTF, default="")


@command(82, "reply")
@attrs.frozen(kw_only=True)
class TableKeyBadVersion(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    server_stack_trace: str = f(UTF, default="")


@command(83, "request")
@attrs.frozen(kw_only=True)
class ReadTableKeys(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    delegation_token: str = f(UTF)
    suggested_key_count: int = f(I32)
    continuation_token: bytes = f(OPT_BLOB32, default=b"")
    prefix_filter: bytes = f(OPT_BLOB32, default=b"")
    from_key: bytes = f(OPT_BLOB32, default=b"")
    to_key: bytes = f(OPT_BLOB32, default=b"")


@command(84, "reply")
@attrs.frozen(kw_only=True)
class TableKeysRead(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    keys: tuple[TableKey, ...] = f(KEYS)
    continuation_token: bytes = f(BLOB32)


@command(85, "request")
@attrs.frozen(kw_only=True)
class ReadTableEntries(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    delegation_token: str = f(UTF)
    suggested_entry_count: int = f(I32)
    continuation_token: bytes = f(OPT_BLOB32, default=b"")
    prefix_filter: bytes = f(OPT_BLOB32, default=b"")
    from_key: bytes = f(OPT_BLOB32, default=b"")
    to_key: bytes = f(OPT_BLOB32, default=b"")


@command(86, "reply")
@attrs.frozen(kw_only=True)
class TableEntriesRead(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    entries: tuple[TableEntry, ...] = f(ENTRIES)
    continuation_token: bytes = f(BLOB32)


@command(87, "reply")
@attrs.frozen(kw_only=True)
class TableEntriesDeltaRead(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    entries: tuple[TableEntry, ...] = f(ENTRIES)
    should_clear: bool = f(BOOL)
    reached_end: bool = f(BOOL)
    last_position: int = f(I64)


@command(88, "request")
@attrs.frozen(kw_only=True)
class ReadTableEntriesDelta(Command):
    request_id: int = f(I64)
    segment: str = f(UTF)
    delegation_token: str = f(UTF)
    from_position: int = f(I64)
    suggested_entry_count: int = f(I32)


@command(89, "request")
@attrs.frozen(kw_only=True)
class ConditionalBlockEnd(Command):
    """The Rust byte writer's conditional append: raw bytes, no Event header."""

    writer_id: uuid.UUID = f(UUID)
    event_number: int = f(I64)
    expected_offset: int = f(I64)
    data: bytes = f(BLOB32)
    request_id: int = f(I64)


def request_id_of(cmd: Command) -> int:
    """``getRequestId()``: 0 for Hello, -1 for KeepAlive and commands without one."""
    if isinstance(cmd, Hello):
        return 0
    rid = getattr(cmd, "request_id", -1)
    return int(rid)
