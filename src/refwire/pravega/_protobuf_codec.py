"""A small hand-rolled protobuf (proto3) codec, for the Pravega controller messages.

The wire format only; the controller's message classes are in :mod:`._protobuf`,
which re-exports this module and is the one to import.  Two modules because they
are two jobs: the encoding rules below are protobuf's, the messages are the controller's.

Only what the controller subset needs: varint scalars
(int32, int64, bool, enum), length-delimited strings, bytes and embedded
messages, fixed64 doubles, repeated fields (packed or not on decode; packed on
encode for scalars, as proto3 does).  Unknown fields of wire types 0, 1, 2 and 5
are skipped; groups (3/4) and the reserved wire types 6/7 are rejected.

proto3 semantics kept: fields equal to their default are not written; on
decode a missing field is its default, and a scalar seen twice keeps the last
value.  One simplification: an embedded (non-repeated) message seen twice is
also last-wins instead of being merged.

Every malformed input raises :class:`~refwire.errors.LocalProtocolError`
(protocol ``pravega-controller``) naming the message, the field and the byte
offset inside the encoded message; lengths are checked against
:class:`~refwire.wire.Limits` before anything is sliced.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any, ClassVar, Final, Literal, Self, TypeVar

import attrs

from ..errors import LocalProtocolError
from ..wire import Limits, check_limit, decode_uvarint, encode_uvarint

__all__ = [
    "DEFAULT_LIMITS",
    "PROTOCOL",
    "Kind",
    "M",
    "Message",
    "ProtoField",
    "decode_message",
    "encode_message",
]

PROTOCOL: Final = "pravega-controller"

#: 4 MiB messages (gRPC's default receive limit), nesting up to 32 messages deep.
DEFAULT_LIMITS: Final = Limits(max_frame_size=4 * 1024 * 1024, max_string_size=1024 * 1024, max_nesting_depth=32)

WT_VARINT: Final = 0
WT_FIXED64: Final = 1
WT_LEN: Final = 2
WT_FIXED32: Final = 5

_U64_MASK: Final = (1 << 64) - 1
_DOUBLE: Final = struct.Struct("<d")
_MAX_FIELD_NUMBER: Final = (1 << 29) - 1

Kind = Literal["int32", "int64", "bool", "enum", "string", "bytes", "double", "message"]
_VARINT_KINDS: Final = frozenset({"int32", "int64", "bool", "enum"})
_WIRE_TYPE: Final[dict[str, int]] = {
    "int32": WT_VARINT,
    "int64": WT_VARINT,
    "bool": WT_VARINT,
    "enum": WT_VARINT,
    "double": WT_FIXED64,
    "string": WT_LEN,
    "bytes": WT_LEN,
    "message": WT_LEN,
}
_DEFAULTS: Final[dict[str, Any]] = {
    "int32": 0,
    "int64": 0,
    "bool": False,
    "enum": 0,
    "double": 0.0,
    "string": "",
    "bytes": b"",
    "message": None,
}


@attrs.frozen
class ProtoField:
    """One field of a message: its number, attribute name, kind and (for
    ``message``) the class of the embedded message."""

    number: int
    name: str
    kind: Kind
    repeated: bool = False
    message: type[Message] | None = None


class Message:
    """Base of the message classes: frozen attrs classes that list their
    :class:`ProtoField` s in ``FIELDS`` (attribute names equal field names)."""

    FIELDS: ClassVar[tuple[ProtoField, ...]] = ()

    def encode(self) -> bytes:
        return encode_message(self)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, *, limits: Limits = DEFAULT_LIMITS) -> Self:
        return decode_message(cls, data, limits=limits)


M = TypeVar("M", bound=Message)


# --------------------------------------------------------------------------- encode


def _tag(number: int, wire_type: int) -> bytes:
    return encode_uvarint(number << 3 | wire_type, bits=64)


def _encode_varint_value(kind: str, value: Any, msg: str, name: str) -> bytes:
    if kind == "bool":
        return b"\x01" if value else b"\x00"
    v = int(value)
    lo, hi = (-(1 << 31), (1 << 31) - 1) if kind in ("int32", "enum") else (-(1 << 63), (1 << 63) - 1)
    if not lo <= v <= hi:
        raise LocalProtocolError(f"value {v} does not fit in {kind}", protocol=PROTOCOL, frame=msg, field=name)
    # negative int32/int64/enum are sign-extended to 64 bits (10 bytes), as protobuf does
    return encode_uvarint(v & _U64_MASK, bits=64)


def _encode_scalar(kind: str, value: Any, msg: str, name: str) -> bytes:
    if kind in _VARINT_KINDS:
        return _encode_varint_value(kind, value, msg, name)
    if kind == "double":
        return _DOUBLE.pack(float(value))
    raise AssertionError(kind)  # pragma: no cover


def _encode_len(payload: bytes) -> bytes:
    return encode_uvarint(len(payload), bits=64) + payload


def _encode_single(f: ProtoField, value: Any, msg: str) -> bytes:
    if f.kind == "string":
        return _tag(f.number, WT_LEN) + _encode_len(str(value).encode("utf-8"))
    if f.kind == "bytes":
        return _tag(f.number, WT_LEN) + _encode_len(bytes(value))
    if f.kind == "message":
        return _tag(f.number, WT_LEN) + _encode_len(encode_message(value))
    return _tag(f.number, _WIRE_TYPE[f.kind]) + _encode_scalar(f.kind, value, msg, f.name)


def encode_message(msg: Message) -> bytes:
    """Serialize ``msg`` (proto3: default-valued singular fields are omitted)."""
    name = type(msg).__name__
    out = bytearray()
    for f in msg.FIELDS:
        value = getattr(msg, f.name)
        if f.repeated:
            if not value:
                continue
            if f.kind in _VARINT_KINDS or f.kind == "double":  # packed
                body = b"".join(_encode_scalar(f.kind, v, name, f.name) for v in value)
                out += _tag(f.number, WT_LEN) + _encode_len(body)
            else:
                for v in value:
                    out += _encode_single(f, v, name)
            continue
        if value is None or (f.kind != "message" and value == _DEFAULTS[f.kind] and not _is_negative_zero(value)):
            continue
        out += _encode_single(f, value, name)
    return bytes(out)


def _is_negative_zero(value: Any) -> bool:
    return isinstance(value, float) and value == 0.0 and math.copysign(1.0, value) < 0


# --------------------------------------------------------------------------- decode


_BY_NUMBER: dict[type[Message], dict[int, ProtoField]] = {}


def _fields_by_number(cls: type[Message]) -> dict[int, ProtoField]:
    table = _BY_NUMBER.get(cls)
    if table is None:
        table = _BY_NUMBER[cls] = {f.number: f for f in cls.FIELDS}
    return table


class _Decoder:
    """Decodes one top-level message; offsets in errors are relative to its start."""

    def __init__(self, data: bytes | bytearray | memoryview, limits: Limits) -> None:
        self.data = memoryview(data)
        self.limits = limits

    def error(self, reason: str, msg: str, field: str, offset: int) -> LocalProtocolError:
        return LocalProtocolError(reason, protocol=PROTOCOL, frame=msg, field=field, offset=offset)

    def varint(self, pos: int, end: int, msg: str, field: str) -> tuple[int, int]:
        try:
            return decode_uvarint(self.data, pos, end, field=field, max_bytes=10, bits=64)
        except LocalProtocolError as exc:
            raise exc.located(protocol=PROTOCOL, frame=msg) from None

    def length(self, pos: int, end: int, msg: str, field: str, *, limit: int, limit_name: str) -> tuple[int, int]:
        start = pos
        n, pos = self.varint(pos, end, msg, field)
        check_limit(n, limit, name=limit_name, field=field, frame=msg, offset=start, protocol=PROTOCOL)
        if n > end - pos:
            raise self.error(f"truncated: {field} claims {n} bytes, {end - pos} left", msg, field, start)
        return n, pos

    def skip(self, wire_type: int, pos: int, end: int, msg: str, field: str, tag_pos: int) -> int:
        if wire_type == WT_VARINT:
            return self.varint(pos, end, msg, field)[1]
        if wire_type in (WT_FIXED64, WT_FIXED32):
            n = 8 if wire_type == WT_FIXED64 else 4
            if end - pos < n:
                raise self.error(f"truncated: {field} needs {n} bytes, {end - pos} left", msg, field, pos)
            return pos + n
        if wire_type == WT_LEN:
            n, pos = self.length(pos, end, msg, field, limit=self.limits.max_frame_size, limit_name="max_frame_size")
            return pos + n
        raise self.error(f"unsupported wire type {wire_type}", msg, field, tag_pos)

    def scalar(self, kind: str, pos: int, end: int, msg: str, field: str) -> tuple[Any, int]:
        if kind == "double":
            if end - pos < 8:
                raise self.error(f"truncated: {field} needs 8 bytes, {end - pos} left", msg, field, pos)
            return _DOUBLE.unpack_from(self.data, pos)[0], pos + 8
        raw, new_pos = self.varint(pos, end, msg, field)
        if kind == "bool":
            return raw != 0, new_pos
        if kind == "int64":
            return raw - (1 << 64) if raw >> 63 else raw, new_pos
        # int32 / enum: protobuf truncates to the low 32 bits
        raw &= 0xFFFFFFFF
        return raw - (1 << 32) if raw >> 31 else raw, new_pos

    def message(self, cls: type[M], pos: int, end: int, depth: int) -> M:
        name = cls.__name__
        if depth > self.limits.max_nesting_depth:
            raise self.error(
                f"messages nested deeper than max_nesting_depth={self.limits.max_nesting_depth}", name, "(message)", pos
            )
        table = _fields_by_number(cls)
        values: dict[str, Any] = {}
        lists: dict[str, list[Any]] = {f.name: [] for f in cls.FIELDS if f.repeated}
        while pos < end:
            tag_pos = pos
            key, pos = self.varint(pos, end, name, "(tag)")
            number, wire_type = key >> 3, key & 7
            if number == 0 or number > _MAX_FIELD_NUMBER:
                raise self.error(f"invalid field number {number}", name, "(tag)", tag_pos)
            f = table.get(number)
            if f is None:
                pos = self.skip(wire_type, pos, end, name, f"#{number}", tag_pos)
                continue
            value: Any
            expected = _WIRE_TYPE[f.kind]
            packable = f.repeated and f.kind not in ("string", "bytes", "message")
            if packable and wire_type == WT_LEN:
                n, pos = self.length(pos, end, name, f.name, limit=self.limits.max_frame_size, limit_name="max_frame_size")
                stop = pos + n
                while pos < stop:
                    item, pos = self.scalar(f.kind, pos, stop, name, f.name)
                    lists[f.name].append(item)
                continue
            if wire_type != expected:
                raise self.error(f"wire type {wire_type} where {f.kind} needs {expected}", name, f.name, tag_pos)
            if f.kind in ("string", "bytes"):
                n, pos = self.length(pos, end, name, f.name, limit=self.limits.max_string_size, limit_name="max_string_size")
                raw = bytes(self.data[pos : pos + n])
                value_pos, pos = pos, pos + n
                value = raw
                if f.kind == "string":
                    try:
                        value = raw.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        raise self.error(f"invalid UTF-8: {exc.reason}", name, f.name, value_pos + exc.start) from None
            elif f.kind == "message":
                assert f.message is not None
                n, pos = self.length(pos, end, name, f.name, limit=self.limits.max_frame_size, limit_name="max_frame_size")
                value = self.message(f.message, pos, pos + n, depth + 1)
                pos += n
            else:
                value, pos = self.scalar(f.kind, pos, end, name, f.name)
            if f.repeated:
                lists[f.name].append(value)
            else:
                values[f.name] = value
        for key_name, items in lists.items():
            values[key_name] = tuple(items)
        factory: Callable[..., M] = cls
        return factory(**values)


def decode_message(cls: type[M], data: bytes | bytearray | memoryview, *, limits: Limits = DEFAULT_LIMITS) -> M:
    """Parse ``data`` as a ``cls`` message; raise LocalProtocolError on bad input."""
    check_limit(
        len(data),
        limits.max_frame_size,
        name="max_frame_size",
        field="(message)",
        frame=cls.__name__,
        offset=0,
        protocol=PROTOCOL,
    )
    return _Decoder(data, limits).message(cls, 0, len(data), 1)
