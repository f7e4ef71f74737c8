"""Pravega frame codec machinery (specs/pravega/README.md §1-§4): field kinds, decoder.

This is the half of :mod:`.frames` that interprets command layouts; :mod:`.frames`
holds today's command table, re-exports this module and is the one to import.
They are two modules because they are two jobs of over 500 lines each, and the
machinery here is shared by a second command table (the 2017 draft dialect,
``refwire.pravega.draft2017.frames``).  This module registers no command:
:mod:`.frames` fills :data:`COMMANDS` (``refwire.pravega`` imports it, so the table
is filled before any submodule is used).

Every frame is ``i32 type, i32 length`` (big-endian) and ``length`` payload
bytes.  Each command is a frozen attrs class whose fields carry their wire
kind in metadata; one interpreter encodes and decodes them all from that
layout, so the field order on the wire is exactly the order of the class
fields (which is *not* always Java's constructor order: DataAppended,
CreateSegment).

Decoding is Java-tolerant as ``WireCommands.readFrom`` is (§2.4): fields added
after version 1 are *optional* and take their default when the payload ends
before them; bytes after the last known field are ignored (newer peers add
fields that way).  Mandatory fields that are missing are an error naming the
field and its stream offset.  Encoding always writes the full current layout.

Strings are Java modified UTF-8 with a u16 length (``DataOutput.writeUTF``),
decoded leniently as the JDK does.  Booleans decode as Java does (any non-zero
byte is true) and encode as 00/01.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Final

import attrs

from .._mypyc import mypyc_attr
from ..errors import LocalProtocolError
from ..wire import I32BE, I64BE, Limits, Reader, ReceiveBuffer, check_limit, encode_mutf8

__all__ = [
    "COMMANDS",
    "CURRENT",
    "Dialect",
    "CLIENT_LIMITS",
    "DEFAULT_LIMITS",
    "HEADER",
    "MAX_WIRECOMMAND_SIZE",
    "NO_VERSION",
    "NOT_EXISTS",
    "NULL_VALUE",
    "OLDEST_COMPATIBLE_VERSION",
    "WIRE_VERSION",
    "BLOCK_END_CODE",
    "MAX_RUN",
    "MAX_RUN_BYTES",
    "BlockEndRun",
    "Command",
    "CommandDecoder",
    "TableEntry",
    "TableKey",
    "decode_command",
    "encode_command",
]

PROTOCOL: Final = "pravega"

#: The wire version refwire speaks (Pravega master, specs/pravega/README.md) and the oldest it accepts.
WIRE_VERSION: Final = 17
OLDEST_COMPATIBLE_VERSION: Final = 5

#: Netty's ``LengthFieldBasedFrameDecoder(0x00FFFFFF, 4, 4)`` caps the whole
#: frame, header included, at 16 MiB - 1 (§1).
MAX_WIRECOMMAND_SIZE: Final = 0x00FFFFFF
HEADER: Final = 8

#: ``Long.MIN_VALUE``: "no event number yet" in AppendSetup, NO_VERSION for table keys, null attribute.
NULL_VALUE: Final = -(1 << 63)
NO_VERSION: Final = NULL_VALUE
NOT_EXISTS: Final = -1

DEFAULT_LIMITS: Final = Limits(
    max_frame_size=MAX_WIRECOMMAND_SIZE,
    max_decompressed_size=MAX_WIRECOMMAND_SIZE,
    max_string_size=0xFFFF,
    max_window=2000,  # SetupAppends per connection (the Java client's MAX_SETUP_SEGMENTS_SIZE)
    max_buffered=8 * 1024 * 1024 + 8,  # largest reassembled event / append data (Serializer.MAX_EVENT_SIZE + header)
)

#: What the Java and Rust clients accept: a payload of up to 0x00FFFFFF bytes (§1).
CLIENT_LIMITS: Final = Limits(
    max_frame_size=MAX_WIRECOMMAND_SIZE + HEADER,
    max_decompressed_size=MAX_WIRECOMMAND_SIZE,
    max_string_size=0xFFFF,
    max_window=2000,
    max_buffered=8 * 1024 * 1024 + 8,
)

_HDR = struct.Struct(">ii")
_IQ = struct.Struct(">iq")
_IQQ = struct.Struct(">iqq")
_UUID_II = struct.Struct(">16sii")  # AppendBlockEnd's writer_id, size_of_whole_events, data length
#: AppendBlockEnd's type code (§5.1): :meth:`CommandDecoder.block_ends` decodes runs of it
BLOCK_END_CODE: Final = 4
#: the most AppendBlockEnds one :meth:`CommandDecoder.block_ends` run holds (each run
#: copies its data out while the frames stay buffered until they are consumed)
MAX_RUN: Final = 256
#: the most data bytes one run holds: its copies of the frames' data exist beside the
#: frames themselves until they are consumed, so this bounds that doubling per connection
MAX_RUN_BYTES: Final = 1 << 20
_UUID = struct.Struct(">QQ")
_I64I32 = struct.Struct(">qi")

# --------------------------------------------------------------------------- field kinds

I32: Final = "i32"
I64: Final = "i64"
U8: Final = "u8"
BOOL: Final = "bool"
UUID: Final = "uuid"
UTF: Final = "utf"
BLOB32: Final = "blob32"  #: i32 length + bytes
REST: Final = "rest"  #: bytes to the end of the frame
EVENT: Final = "event"  #: an Event frame (i32 type 0, i32 length, bytes) inside a command
ENTRIES: Final = "entries"  #: TableEntries
KEYS: Final = "keys"  #: i32 count + TableKey*
LONGS: Final = "longs"  #: i32 count + i64*
OPT_BLOB32: Final = "opt_blob32"  #: TableIteratorArgs buffer: i32 length + bytes, or empty if < 4 bytes remain
I64_ANY: Final = "i64_any"  #: an optional i64 read when *any* byte remains (``available() > 0``; tables)

_MIN_BYTES = {
    I32: 4,
    I64: 8,
    I64_ANY: 1,
    U8: 1,
    BOOL: 1,
    UUID: 16,
    UTF: 1,
    BLOB32: 4,
    REST: 0,
    EVENT: 8,
    ENTRIES: 4,
    KEYS: 4,
    LONGS: 4,
}

_NO_DEFAULT = object()
_LENIENT_BLOB = frozenset({"AppendBlockEnd", "ConditionalBlockEnd"})
_PREFIXED = frozenset({"utf", "blob32", "event", "opt_blob32"})


def _auth_code(values: dict[str, Any]) -> dict[str, Any]:
    # AuthTokenCheckFailed.ErrorCode.valueOf: unknown codes are TOKEN_CHECK_FAILED (§4.4)
    if values.get("error_code") not in (-1, 0, 1):
        values["error_code"] = 0
    return values


def _error_message_code(values: dict[str, Any]) -> dict[str, Any]:
    # ErrorMessage.ErrorCode.valueOf: unknown codes are UNSPECIFIED (§4.4)
    if values.get("error_code") not in (-1, 0):
        values["error_code"] = -1
    return values


#: hand-written decoders for the hot commands (type code -> function); they
#: return None for anything irregular, which the generic path then reports.
_FAST: dict[int, Any] = {}

#: decode-time mappings Java applies to some fields (type code -> function)
_NORMALIZE: dict[int, Any] = {60: _auth_code, 61: _error_message_code}


def f(kind: str, *, default: Any = _NO_DEFAULT, optional: Any = _NO_DEFAULT) -> Any:
    """A command field of wire ``kind``.

    ``default`` is the constructor default; ``optional`` marks a trailing field
    added after version 1 and is the value decoding uses when the payload ends
    before it (§2.4).
    """
    meta = {"kind": kind, "optional": optional}
    if default is _NO_DEFAULT and optional is not _NO_DEFAULT:
        default = optional
    if default is _NO_DEFAULT:
        return attrs.field(metadata=meta)
    return attrs.field(default=default, metadata=meta)


@attrs.frozen
class TableKey:
    """A table-segment key (§9): ``i32 payloadLen, i32 len, bytes, i64 version``.
    Java writes no version for an empty key (payloadLen still counts it) and
    reads none back, so an empty key always has NO_VERSION."""

    data: bytes
    key_version: int = NO_VERSION


@attrs.frozen
class TableEntry:
    key: TableKey
    value: bytes


# --------------------------------------------------------------------------- base class


@mypyc_attr(native_class=False)  # compiled (setup.py), its attrs subclasses need a Python base
class Command:
    """Base of every wire command.  Subclasses are frozen attrs classes
    registered with :func:`command`."""

    __slots__ = ()
    TYPE: ClassVar[int]
    NAME: ClassVar[str]
    PROTOCOL: ClassVar[str]
    DIRECTION: ClassVar[str]  #: "request", "reply" or "both"
    LAYOUT: ClassVar[tuple[tuple[str, str, Any], ...]]

    def encode(self) -> bytes:
        """The whole frame, header included."""
        return encode_command(self)


COMMANDS: dict[int, type[Command]] = {}


@attrs.frozen
class Dialect:
    """A table of commands sharing this codec: today's Pravega (:data:`CURRENT`)
    or the 2017 draft (``refwire.pravega.draft2017``); the same type code means
    different commands in each."""

    protocol: str  #: the name errors carry
    commands: dict[int, type[Command]]
    # (Mapping, not dict: the compiled build (setup.py) checks a dict-typed class
    # attribute when the class body runs, and the field specifier is none)
    fast: Mapping[int, Any] = attrs.field(factory=dict)  #: hand-written decoders for hot commands
    normalize: Mapping[int, Any] = attrs.field(factory=dict)  #: decode-time mappings Java applies
    #: bytes after the last field are an error on field ``(trailing)`` (the draft
    #: dialect, specs/pravega-draft-2017/README.md §2 D11); today's Pravega ignores them (§2.4)
    strict_trailing: bool = False

    def command(self, code: int, direction: str) -> Callable[[type[Any]], type[Any]]:
        """Class decorator registering a command class under ``code``."""
        # A partial, not a closure: mypyc (the optional compiled build) cannot
        # compile a closure inside a method of an attrs class.
        return functools.partial(_register, self, code, direction)


def _register(dialect: Dialect, code: int, direction: str, cls: type[Any]) -> type[Any]:
    if code in dialect.commands:
        raise ValueError(f"type code {code} registered twice")
    cls.TYPE = code
    cls.NAME = cls.__name__
    cls.DIRECTION = direction
    cls.PROTOCOL = dialect.protocol
    cls.LAYOUT = tuple((a.name, a.metadata["kind"], a.metadata["optional"]) for a in attrs.fields(cls))
    dialect.commands[code] = cls
    return cls


CURRENT: Final = Dialect(PROTOCOL, COMMANDS, _FAST, _NORMALIZE)


def command(code: int, direction: str) -> Callable[[type[Any]], type[Any]]:
    """Register a command of the current dialect."""
    return CURRENT.command(code, direction)


# --------------------------------------------------------------------------- encoding


def _put_utf(out: bytearray, s: str, name: str, cmd: str, protocol: str = PROTOCOL) -> None:
    raw = encode_mutf8(s)
    if len(raw) > 0xFFFF:
        raise LocalProtocolError(
            f"encoded string too long: {len(raw)} bytes (writeUTF allows 65535)", protocol=protocol, frame=cmd, field=name
        )
    out += len(raw).to_bytes(2, "big")
    out += raw


def _put_key(out: bytearray, key: TableKey) -> None:
    n = len(key.data)
    out += _HDR.pack(4 + n + 8, n)
    if n:
        out += key.data
        out += I64BE.pack(key.key_version)


def _encode_field(out: bytearray, kind: str, v: Any, name: str, cmd: str, protocol: str = PROTOCOL) -> None:
    try:
        if kind == I64 or kind == I64_ANY:
            out += I64BE.pack(v)
        elif kind == I32:
            out += I32BE.pack(v)
        elif kind == UUID:
            out += v.bytes
        elif kind == UTF:
            _put_utf(out, v, name, cmd, protocol)
        elif kind == BLOB32 or kind == OPT_BLOB32:
            out += I32BE.pack(len(v))
            out += v
        elif kind == BOOL:
            out.append(1 if v else 0)
        elif kind == U8:
            out.append(v)
        elif kind == REST:
            if isinstance(v, int):  # Padding
                out += bytes(v)
            else:
                out += v
        elif kind == EVENT:
            out += _HDR.pack(0, len(v))
            out += v
        elif kind == LONGS:
            out += I32BE.pack(len(v))
            for x in v:
                out += I64BE.pack(x)
        elif kind == KEYS:
            out += I32BE.pack(len(v))
            for k in v:
                _put_key(out, k)
        elif kind == ENTRIES:
            out += I32BE.pack(len(v))
            for e in v:
                _put_key(out, e.key)
                out += _HDR.pack(4 + len(e.value), len(e.value))
                out += e.value
        else:  # pragma: no cover - a layout bug
            raise AssertionError(kind)
    except (struct.error, ValueError, OverflowError, TypeError, AttributeError) as exc:
        raise LocalProtocolError(f"cannot encode {v!r}: {exc}", protocol=protocol, frame=cmd, field=name) from None


def encode_command(cmd: Command, *, max_frame_size: int = MAX_WIRECOMMAND_SIZE) -> bytes:
    """The whole frame for ``cmd`` (§1); refuses frames past ``max_frame_size``."""
    out = bytearray(8)
    name = cmd.NAME
    protocol = cmd.PROTOCOL
    for fname, kind, _opt in cmd.LAYOUT:
        _encode_field(out, kind, getattr(cmd, fname), fname, name, protocol)
    n = len(out) - HEADER
    if n + HEADER > max_frame_size:
        raise LocalProtocolError(
            f"frame of {n + HEADER} bytes is larger than the limit of {max_frame_size}",
            protocol=protocol,
            frame=name,
            field="length",
        )
    _HDR.pack_into(out, 0, cmd.TYPE, n)
    return bytes(out)


def encode_event(payload: bytes | bytearray | memoryview) -> bytes:
    """An Event frame as stored in segments and carried in append data (§5)."""
    return _HDR.pack(0, len(payload)) + bytes(payload)


# --------------------------------------------------------------------------- decoding


@functools.lru_cache(maxsize=4096)
def uuid_of(raw: bytes) -> uuid.UUID:
    """The UUID of 16 wire bytes, one object per value while it is in the cache:
    a connection's writer id then finds its dict entries by identity, without
    calling ``uuid.UUID.__eq__`` (UUIDs are immutable, so sharing is safe)."""
    return uuid.UUID(bytes=raw)


def _read_key(r: Reader, field: str) -> TableKey:
    r.i32be(f"{field}.payload_length")
    n = r.i32be(f"{field}.length")
    if n == 0:
        return TableKey(b"", NO_VERSION)
    data = r.raw(n, f"{field}.data")
    return TableKey(data, r.i64be(f"{field}.key_version"))


def _read_count(r: Reader, field: str, min_item: int) -> int:
    n = r.i32be(field)
    if n < 0:
        raise r.error(f"negative count {n}", field=field, offset=r.offset - 4)
    if n * min_item > r.remaining:
        raise r.error(f"count {n} needs at least {n * min_item} bytes, {r.remaining} left", field=field, offset=r.offset - 4)
    return n


def _decode_field(r: Reader, kind: str, name: str) -> Any:
    if kind == I64 or kind == I64_ANY:
        return r.i64be(name)
    if kind == I32:
        return r.i32be(name)
    if kind == UUID:
        return uuid_of(r.raw(16, name))
    if kind == UTF:
        return r.java_utf(name)
    if kind == BLOB32:
        n = r.i32be(f"{name}.length")
        if n < 0 and r.frame in _LENIENT_BLOB:
            return b""  # these read the data only "if (dataLength > 0)" (§4)
        return r.raw(n, name)
    if kind == OPT_BLOB32:
        if r.remaining < 4:
            return b""
        n = r.i32be(f"{name}.length")
        return r.raw(n, name) if n > 0 else b""
    if kind == BOOL:
        return r.u8(name) != 0
    if kind == U8:
        return r.u8(name)
    if kind == REST:
        return r.rest(name)
    if kind == EVENT:
        start = r.offset
        t = r.i32be(f"{name}.type")
        if t != 0:
            raise r.error(f"event type must be 0, got {t}", field=f"{name}.type", offset=start)
        n = r.i32be(f"{name}.length")
        return r.raw(n, name)
    if kind == LONGS:
        count = _read_count(r, f"{name}.count", 8)
        return tuple(r.i64be(f"{name}[{i}]") for i in range(count))
    if kind == KEYS:
        count = _read_count(r, f"{name}.count", 8)
        return tuple(_read_key(r, f"{name}[{i}]") for i in range(count))
    if kind == ENTRIES:
        count = _read_count(r, f"{name}.count", 16)
        out = []
        for i in range(count):
            key = _read_key(r, f"{name}[{i}].key")
            r.i32be(f"{name}[{i}].value.payload_length")
            vn = r.i32be(f"{name}[{i}].value.length")
            out.append(TableEntry(key, r.raw(vn, f"{name}[{i}].value") if vn else b""))
        return tuple(out)
    raise AssertionError(kind)  # pragma: no cover


def decode_command(
    code: int,
    data: bytes | bytearray | memoryview,
    *,
    start: int = 0,
    end: int | None = None,
    base: int = 0,
    allow_inner: bool = False,
    dialect: Dialect = CURRENT,
) -> Command:
    """Decode the payload ``data[start:end]`` of type ``code`` (the 8-byte header already read).

    ``base`` is the stream offset of ``data[start]``, for error messages.  Event,
    Padding and PartialEvent exist only inside append blocks; at the top level
    they are refused unless ``allow_inner`` (§5.3).
    """
    cls = dialect.commands.get(code)
    protocol = dialect.protocol
    if cls is None or (cls.DIRECTION == "inner" and not allow_inner and code != -1):
        what = "unknown wire command" if cls is None else f"{cls.NAME} is not a top-level command"
        raise LocalProtocolError(
            f"{what}: type {code}", protocol=protocol, frame=None if cls is None else cls.NAME, field="type", offset=base - 8
        )
    if end is None:
        end = len(data)
    fast = dialect.fast.get(code)
    if fast is not None:
        cmd: Command | None = fast(data, start, end)
        if cmd is not None:
            return cmd
    if code == -1:  # Padding: its length is the payload length
        return cls(length=end - start)  # type: ignore[call-arg]
    r = Reader(data, start=start, end=end, base=base, protocol=protocol, frame=cls.NAME)
    values: dict[str, Any] = {}
    for name, kind, optional in cls.LAYOUT:
        if optional is not _NO_DEFAULT and r.remaining < _MIN_BYTES.get(kind, 1):
            values[name] = optional
            continue
        if kind in _PREFIXED:
            start_at = r.offset
            try:
                values[name] = _decode_field(r, kind, name)
            except LocalProtocolError as exc:
                # A length-prefixed field is located at its first byte (the prefix), named as in §4.
                exc.offset = start_at
                exc.field = name
                raise
        else:
            values[name] = _decode_field(r, kind, name)
    if dialect.strict_trailing and r.remaining:
        raise r.error(f"{r.remaining} bytes after the last field of {cls.NAME}", field="(trailing)")
    post = dialect.normalize.get(code)
    return cls(**(post(values) if post else values))


# --------------------------------------------------------------------------- stream decoder


class CommandDecoder:
    """Incremental frame decoder over a :class:`ReceiveBuffer` (§1).

    ``feed(data)`` then iterate :meth:`commands`; a malformed frame raises
    :class:`LocalProtocolError` *after* every complete frame before it was
    delivered.  The length field is checked against ``limits.max_frame_size``
    before the payload is waited for, so a lying length never allocates.
    """

    __slots__ = ("_buf", "_fast", "_max_payload", "allow_inner", "dialect", "limits", "offset")

    def __init__(self, limits: Limits = DEFAULT_LIMITS, *, allow_inner: bool = False, dialect: Dialect = CURRENT) -> None:
        self.dialect = dialect
        #: the dialect's hand-written decoders of top-level commands: taken without
        #: decode_command's checks, which they always pass (known, not inner)
        self._fast: dict[int, Any] = {
            code: fn
            for code, fn in dialect.fast.items()
            if code in dialect.commands and dialect.commands[code].DIRECTION != "inner"
        }
        self.limits = limits
        self._max_payload = limits.max_frame_size - HEADER
        self._buf = ReceiveBuffer()
        self.offset = 0  #: stream offset of the next undecoded byte
        self.allow_inner = allow_inner

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf.feed(data)

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def pending_frame_name(self) -> str | None:
        """The command name of the incomplete frame buffered, once its whole header arrived."""
        head = self._buf.peek(HEADER)
        if len(head) < HEADER:
            return None
        cls = self.dialect.commands.get(int.from_bytes(head[:4], "big", signed=True))
        return None if cls is None else cls.NAME

    def next_command(self) -> Command | None:
        """The next complete command, or None if more bytes are needed."""
        buf = self._buf
        data = buf.data
        pos = buf.pos
        if len(data) - pos < HEADER:
            return None
        code, n = _HDR.unpack_from(data, pos)
        if n < 0 or n > self._max_payload:
            known = self.dialect.commands
            protocol = self.dialect.protocol
            frame = known[code].NAME if code in known else f"type {code}"
            if n < 0:
                raise LocalProtocolError(
                    f"negative frame length {n}", protocol=protocol, frame=frame, field="length", offset=self.offset + 4
                )
            check_limit(
                n,
                self._max_payload,
                name="max_frame_size-8",
                field="length",
                frame=frame,
                offset=self.offset + 4,
                protocol=protocol,
            )
        end = pos + HEADER + n
        if len(data) < end:
            return None
        start = self.offset
        fast = self._fast.get(code)
        cmd: Command | None = None if fast is None else fast(data, pos + HEADER, end)
        if cmd is None:
            cmd = decode_command(
                code, data, start=pos + HEADER, end=end, base=start + HEADER, allow_inner=self.allow_inner, dialect=self.dialect
            )
        buf.advance_to(end)
        self.offset = start + HEADER + n
        return cmd

    def commands(self) -> Iterator[Command]:
        """Every complete command, as :meth:`next_command` gives them one by one."""
        buf = self._buf
        unpack = _HDR.unpack_from
        fast_get = self._fast.get
        max_payload = self._max_payload
        while True:
            # Inline for the commands with a hand-written decoder, when the frame is
            # complete and regular; anything else goes through next_command.
            data = buf.data
            pos = buf.pos
            if len(data) - pos >= HEADER:
                code, n = unpack(data, pos)
                end = pos + HEADER + n
                fast = fast_get(code)
                if fast is not None and 0 <= n <= max_payload and end <= len(data):
                    cmd = fast(data, pos + HEADER, end)
                    if cmd is not None:
                        buf.advance_to(end)
                        self.offset += HEADER + n
                        yield cmd
                        continue
            cmd = self.next_command()
            if cmd is None:
                return
            yield cmd

    def peek_frame(self, *, skip: int = 0) -> tuple[int, bytes | bytearray, int, int] | None:
        """``(type code, buffer, payload start, payload end)`` of the next frame if it
        is complete and its length is within the limits, without consuming it;
        None otherwise (then :meth:`next_command` waits, decodes or reports).  The
        buffer is only valid until the next :meth:`feed` or :meth:`consume_frame`.
        ``skip``: the frame that starts this many bytes further (after frames
        already peeked)."""
        buf = self._buf
        data = buf.data
        pos = buf.pos + skip
        if len(data) - pos < HEADER:
            return None
        code, n = _HDR.unpack_from(data, pos)
        end = pos + HEADER + n
        if n < 0 or n > self._max_payload or len(data) < end:
            return None
        return code, data, pos + HEADER, end

    def block_ends(self, max_frames: int = MAX_RUN) -> BlockEndRun | None:
        """The complete regular AppendBlockEnd frames at the head of the buffer, up
        to ``max_frames`` and :data:`MAX_RUN_BYTES` of data, in columns (§5.1),
        without consuming them; None when
        fewer than two frames make one -- the next frame is not one (incomplete,
        over a limit, another command, an irregular AppendBlockEnd), or it is
        one with no other behind it (a lone frame costs less as
        :meth:`next_command`'s command than as a run): :meth:`next_command`
        then decodes it, with its errors at its offsets.  Only the current
        dialect's decoder makes runs.

        A frame joins the run exactly when :meth:`next_command` would decode it
        on its fast path, to the same fields: the run's commands equal the
        commands :meth:`next_command` gives for the same frames.
        """
        if max_frames < 2:
            raise ValueError(f"a run holds at least 2 frames: max_frames={max_frames}")
        buf = self._buf
        data = buf.data
        pos = buf.pos
        end = len(data)
        # The common misses first, before anything is allocated: another command
        # next, or an AppendBlockEnd without another behind it.
        if end - pos < 2 * HEADER:
            return None
        code, n = _HDR.unpack_from(data, pos)
        second = pos + HEADER + n
        if (
            code != BLOCK_END_CODE
            or n < 0
            or end - second < HEADER
            or _HDR.unpack_from(data, second)[0] != BLOCK_END_CODE
            or self.dialect is not CURRENT
        ):
            return None
        max_payload = self._max_payload
        writer_ids: list[bytes] = []
        sizes: list[int] = []
        blobs: list[bytes] = []
        nums: list[int] = []
        lasts: list[int] = []
        rids: list[int] = []
        frame_sizes: list[int] = []
        unpack_header = _HDR.unpack_from
        unpack_body = _UUID_II.unpack_from
        held = 0  # data bytes in the run
        while end - pos >= HEADER and len(frame_sizes) < max_frames:
            code, n = unpack_header(data, pos)
            start = pos + HEADER
            stop = start + n
            # (as the fast decoder: at least 24 + 12 bytes, a data length inside the frame)
            if code != BLOCK_END_CODE or not 36 <= n <= max_payload or stop > end:
                break
            raw, size, dlen = unpack_body(data, start)
            p = start + 24 + dlen
            held += dlen
            if dlen < 0 or p + 12 > stop or held > MAX_RUN_BYTES:
                break
            if stop - p >= 20:
                num, last, rid = _IQQ.unpack_from(data, p)
            else:
                num, last = _IQ.unpack_from(data, p)
                rid = -1
            blob = data[start + 24 : p]
            writer_ids.append(raw)
            sizes.append(size)
            blobs.append(blob if type(blob) is bytes else bytes(blob))
            nums.append(num)
            lasts.append(last)
            rids.append(rid)
            frame_sizes.append(HEADER + n)
            pos = stop
        if len(frame_sizes) < 2:
            return None
        return BlockEndRun(writer_ids, sizes, blobs, nums, lasts, rids, frame_sizes)

    def consume(self, n: int) -> None:
        """Consume the next ``n`` buffered bytes: whole frames a :meth:`block_ends`
        run holds (its ``frame_sizes``)."""
        buf = self._buf
        if n > len(buf.data) - buf.pos:
            raise ValueError("consume() past the end of the buffer")
        self.offset += n
        buf.advance_to(buf.pos + n)

    def consume_frame(self, end: int) -> None:
        """Consume the frames up to and including the one :meth:`peek_frame` returned
        (``end`` is its payload end)."""
        buf = self._buf
        self.offset += end - buf.pos
        buf.advance_to(end)


class BlockEndRun:
    """Consecutive complete regular AppendBlockEnd frames (§5.1, §5.3), decoded in
    columns instead of one command object each: what
    :meth:`CommandDecoder.block_ends` returns, the server's hot path for the
    Rust client's bare AppendBlockEnds.  ``writer_ids`` holds the ids' 16 raw
    bytes; ``frame_sizes`` each frame's length with its header.  The frames stay
    in the decoder's buffer until :meth:`CommandDecoder.consume` takes them."""

    __slots__ = ("data", "frame_sizes", "last_event_numbers", "num_events", "request_ids", "sizes", "writer_ids")

    def __init__(
        self,
        writer_ids: list[bytes],
        sizes: list[int],
        data: list[bytes],
        num_events: list[int],
        last_event_numbers: list[int],
        request_ids: list[int],
        frame_sizes: list[int],
    ) -> None:
        if not (
            len(writer_ids) == len(sizes) == len(data) == len(num_events)
            == len(last_event_numbers) == len(request_ids) == len(frame_sizes)
        ):
            raise ValueError("a BlockEndRun's columns must have one entry per frame")
        self.writer_ids = writer_ids
        self.sizes = sizes
        self.data = data
        self.num_events = num_events
        self.last_event_numbers = last_event_numbers
        self.request_ids = request_ids
        self.frame_sizes = frame_sizes

    def __len__(self) -> int:
        return len(self.writer_ids)

    def __repr__(self) -> str:
        return f"BlockEndRun({len(self.writer_ids)} AppendBlockEnds, {sum(self.frame_sizes)} bytes)"

    def commands(self) -> list[Command]:
        """The frames as ``AppendBlockEnd`` commands."""
        cls: Any = CURRENT.commands[BLOCK_END_CODE]
        return [
            cls(writer_id=uuid.UUID(bytes=w), size_of_whole_events=s, data=d, num_events=n, last_event_number=e, request_id=r)
            for w, s, d, n, e, r in zip(
                self.writer_ids, self.sizes, self.data, self.num_events, self.last_event_numbers, self.request_ids, strict=True
            )
        ]


def split_frames(data: bytes, *, base: int = 0, allow_inner: bool = True) -> Sequence[Command]:
    """Decode a buffer holding whole frames only (an append block's content)."""
    dec = CommandDecoder(allow_inner=allow_inner)
    dec.offset = base
    dec.feed(data)
    out = list(dec.commands())
    if dec.buffered:
        raise LocalProtocolError("truncated frame at the end of the buffer", protocol=PROTOCOL, offset=dec.offset)
    return out
