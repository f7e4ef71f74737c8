"""Pravega frames (specs/pravega/README.md §1-§4, §8, §9): today's command table,
one frozen attrs class per command in wire field order, and the codec to encode
and decode them.

This is the module to import.  The layout interpreter (field kinds, encoder,
stream decoder) lives in :mod:`.frames_codec` and is re-exported here; it is a
separate module because it is a second job of its own size, shared with the 2017
draft dialect's command table (``refwire.pravega.draft2017.frames``).
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, Final

import attrs

from .frames_codec import (
    _FAST,
    _IQ,
    _IQQ,
    _UUID_II,
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
    uuid_of,
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


# --------------------------------------------------------------------------- fast paths
# The commands of the append and read paths, decoded with one struct call per
# group of fixed fields.  Anything irregular (short payload, negative or lying
# length, non-ASCII string) returns None: the generic decoder then decodes it
# or reports the error with its field and offset.

_II = struct.Struct(">ii")
_Q = struct.Struct(">q")
_QQQ = struct.Struct(">qqq")
_QQ = struct.Struct(">qq")
_H = struct.Struct(">H")
_UUID_QQQQ = struct.Struct(">16sqqqq")  # DataAppended's fields

# Trusted construction: a fast decoder has read every field itself, so it fills
# the frozen slots directly (their descriptors' __set__) instead of calling the
# keyword __init__, which costs twice as much and checks nothing more (the
# command classes have no validators).
_new = object.__new__


def _setters(cls: type[Any], *names: str) -> tuple[Any, ...]:
    slots = cls.__dict__
    assert set(names) == {a.name for a in attrs.fields(cls)}, cls
    return tuple(slots[name].__set__ for name in names)


_uuid = uuid_of


def _ascii_utf(data: bytes | bytearray | memoryview, pos: int, end: int) -> tuple[str, int] | None:
    if pos + 2 > end:
        return None
    (n,) = _H.unpack_from(data, pos)
    stop = pos + 2 + n
    if stop > end:
        return None
    raw = bytes(data[pos + 2 : stop])
    if not raw.isascii() or b"\x00" in raw:
        return None
    return raw.decode("ascii"), stop


_ABE_SET: Final = _setters(
    AppendBlockEnd, "writer_id", "size_of_whole_events", "data", "num_events", "last_event_number", "request_id"
)


def parse_append_block_end(
    data: bytes | bytearray | memoryview, start: int, end: int
) -> tuple[bytes, int, bytes, int, int, int] | None:
    """The fields of a regular AppendBlockEnd payload ``data[start:end]``: ``(writer
    id's 16 bytes, size_of_whole_events, data, num_events, last_event_number,
    request_id)``; None for anything irregular (then decode it with the generic path)."""
    if end - start < 24:
        return None
    raw, size, dlen = _UUID_II.unpack_from(data, start)
    p = start + 24 + dlen
    if dlen < 0 or p + 12 > end:
        return None
    if end - p >= 20:
        num, last, rid = _IQQ.unpack_from(data, p)
    else:
        num, last = _IQ.unpack_from(data, p)
        rid = -1
    blob = data[start + 24 : p]
    return raw, size, blob if type(blob) is bytes else bytes(blob), num, last, rid


def _fast_append_block_end(data: bytes | bytearray | memoryview, start: int, end: int) -> AppendBlockEnd | None:
    # parse_append_block_end, inline (this is the hottest decoder of all)
    if end - start < 24:
        return None
    raw, size, dlen = _UUID_II.unpack_from(data, start)
    p = start + 24 + dlen
    if dlen < 0 or p + 12 > end:
        return None
    if end - p >= 20:
        num, last, rid = _IQQ.unpack_from(data, p)
    else:
        num, last = _IQ.unpack_from(data, p)
        rid = -1
    blob = data[start + 24 : p]
    if type(blob) is not bytes:
        blob = bytes(blob)
    cmd = _new(AppendBlockEnd)
    set_wid, set_size, set_data, set_num, set_last, set_rid = _ABE_SET
    set_wid(cmd, _uuid(raw))
    set_size(cmd, size)
    set_data(cmd, blob)
    set_num(cmd, num)
    set_last(cmd, last)
    set_rid(cmd, rid)
    return cmd


_AB_SET: Final = _setters(AppendBlock, "writer_id", "data")


def _fast_append_block(data: bytes | bytearray | memoryview, start: int, end: int) -> AppendBlock | None:
    if end - start < 16:
        return None
    cmd = _new(AppendBlock)
    set_wid, set_data = _AB_SET
    set_wid(cmd, _uuid(bytes(data[start : start + 16])))
    set_data(cmd, bytes(data[start + 16 : end]))
    return cmd


_DA_SET: Final = _setters(
    DataAppended, "writer_id", "event_number", "previous_event_number", "request_id", "current_segment_write_offset"
)


def _fast_data_appended(data: bytes | bytearray | memoryview, start: int, end: int) -> DataAppended | None:
    if end - start < 48:
        return None
    raw, ev, prev, rid, offset = _UUID_QQQQ.unpack_from(data, start)
    cmd = _new(DataAppended)
    set_wid, set_ev, set_prev, set_rid, set_offset = _DA_SET
    set_wid(cmd, _uuid(raw))
    set_ev(cmd, ev)
    set_prev(cmd, prev)
    set_rid(cmd, rid)
    set_offset(cmd, offset)
    return cmd


def _fast_segment_read(data: bytes | bytearray | memoryview, start: int, end: int) -> SegmentRead | None:
    got = _ascii_utf(data, start, end)
    if got is None:
        return None
    segment, p = got
    if p + 14 > end:
        return None
    (offset,) = _Q.unpack_from(data, p)
    tail, eos = data[p + 8], data[p + 9]
    (dlen,) = struct.unpack_from(">i", data, p + 10)
    q = p + 14 + dlen
    if dlen < 0 or q > end:
        return None
    rid = _Q.unpack_from(data, q)[0] if end - q >= 8 else -1
    return SegmentRead(
        segment=segment, offset=offset, at_tail=tail != 0, end_of_segment=eos != 0, data=bytes(data[p + 14 : q]), request_id=rid
    )


_FAST.update(
    {
        AppendBlockEnd.TYPE: _fast_append_block_end,
        AppendBlock.TYPE: _fast_append_block,
        DataAppended.TYPE: _fast_data_appended,
        SegmentRead.TYPE: _fast_segment_read,
    }
)
