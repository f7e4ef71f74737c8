"""Pravega commands and their layouts (specs/pravega/README.md §1-§4, §9): the
layout interpreter.

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

This module registers no command: :mod:`.frames` fills :data:`COMMANDS`
(``refwire.pravega`` imports it, so the table is filled before any submodule is
used), and the 2017 draft dialect (``refwire.pravega.draft2017.frames``) has a
table of its own.  The stream decoder is :mod:`.frames_codec`, which re-exports
this module; the speed path's hand-written decoders (:mod:`._fast_frames`)
register into :data:`_FAST`.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

import attrs

from .._mypyc import mypyc_attr
from ..errors import LocalProtocolError
from ..speed import use_fast
from ..wire import I32BE, I64BE, Limits, Reader, encode_mutf8

__all__ = [
    "BLOB32",
    "BOOL",
    "CLIENT_LIMITS",
    "COMMANDS",
    "CURRENT",
    "DEFAULT_LIMITS",
    "ENTRIES",
    "EVENT",
    "HEADER",
    "I32",
    "I64",
    "I64_ANY",
    "KEYS",
    "LONGS",
    "MAX_WIRECOMMAND_SIZE",
    "NO_VERSION",
    "NOT_EXISTS",
    "NULL_VALUE",
    "OLDEST_COMPATIBLE_VERSION",
    "OPT_BLOB32",
    "PROTOCOL",
    "REST",
    "U8",
    "UTF",
    "UUID",
    "WIRE_VERSION",
    "Command",
    "Dialect",
    "TableEntry",
    "TableKey",
    "command",
    "decode_command",
    "encode_command",
    "encode_event",
    "f",
    "uuid_of",
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


#: The speed path's hand-written decoders of the hot commands (type code ->
#: function), filled by :mod:`._fast_frames`; they return None for anything
#: irregular, which the layout interpreter then decodes or reports.
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
    fast: bool | None = None,
) -> Command:
    """Decode the payload ``data[start:end]`` of type ``code`` (the 8-byte header already read).

    ``base`` is the stream offset of ``data[start]``, for error messages.  Event,
    Padding and PartialEvent exist only inside append blocks; at the top level
    they are refused unless ``allow_inner`` (§5.3).  The fields are read in the
    order of the command's layout (§4), trailing optional ones defaulted (§2.4).
    ``fast``: try the dialect's hand-written decoder first (the speed path,
    :mod:`._fast_frames`); None follows :mod:`refwire.speed`.
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
    if use_fast(fast):
        decoder = dialect.fast.get(code)
        if decoder is not None:
            cmd: Command | None = decoder(data, start, end)
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
