"""Shared byte primitives: the one place every protocol takes them from (no protocol package defines its own).

* :class:`ReceiveBuffer` -- bytes arrive in any chunking; cost stays O(n) overall.
* :class:`Reader` -- a bounds-checked cursor over one complete frame; every read
  names its field, and running off the end raises :class:`LocalProtocolError`
  with the field and the absolute offset instead of ``IndexError``/``struct.error``.
* :class:`Writer` -- the matching builder.
* LEB128 unsigned varints (TANK), Java "modified UTF-8" (Pravega), and
  :class:`Limits` with :func:`check_limit`.

Nothing here does I/O, reads a clock or draws random numbers.
"""

from __future__ import annotations

import struct
from typing import Final

import attrs

from .errors import LimitExceeded, LocalProtocolError

__all__ = [
    "Limits",
    "ReceiveBuffer",
    "Reader",
    "Writer",
    "check_limit",
    "decode_mutf8",
    "decode_uvarint",
    "encode_mutf8",
    "encode_uvarint",
]

# Compiled once: the hot paths of every codec use these.
U8: Final = struct.Struct("B")
U16BE: Final = struct.Struct(">H")
U32BE: Final = struct.Struct(">I")
I32BE: Final = struct.Struct(">i")
U64BE: Final = struct.Struct(">Q")
I64BE: Final = struct.Struct(">q")
U16LE: Final = struct.Struct("<H")
U32LE: Final = struct.Struct("<I")
U64LE: Final = struct.Struct("<Q")
I64LE: Final = struct.Struct("<q")

_COMPACT_AT: Final = 64 * 1024


# --------------------------------------------------------------------------- limits


@attrs.frozen(kw_only=True)
class Limits:
    """Configured ceilings.  Every length, window and size a peer can claim is
    checked against one of these *before* anything is allocated for it.

    Each protocol publishes its own defaults (``attrs.evolve`` them to change one).
    """

    #: largest single frame (header + payload), bytes.
    max_frame_size: int = 64 * 1024 * 1024
    #: largest inflated payload of one compressed frame, bytes.
    max_decompressed_size: int = 64 * 1024 * 1024
    #: largest window / batch / in-flight count a peer may announce.
    max_window: int = 10_000
    #: how deep compressed frames may nest inside each other.
    max_nesting_depth: int = 4
    #: largest string field, bytes.
    max_string_size: int = 1024 * 1024
    #: most bytes buffered for one incomplete frame (and most bytes queued by a parser).
    max_buffered: int = 64 * 1024 * 1024
    #: most bytes of events one connection holds for the batch it is receiving
    #: (Lumberjack: the payloads of its events, plain or inflated), bytes.
    max_batch_bytes: int = 128 * 1024 * 1024
    #: most memory one connection may hold, bytes: a server counts against it
    #: every byte it keeps for the connection (received bytes of an incomplete
    #: frame, held events at what each really costs, batches awaiting their
    #: ack); the limits above stay caps inside it.  A server that does not
    #: count yet ignores it (each server's docs say whether it counts).
    max_connection_memory: int = 256 * 1024 * 1024
    #: most memory a server may hold for all its connections together, bytes
    #: (``--server-memory``): a connection takes its share before it holds
    #: anything and waits, its reads paused, while the server has none to give
    #: (see :mod:`refwire.admission`).  0, the default, means half of the
    #: machine's physical memory, read when the server starts (at least 12 times
    #: ``max_connection_memory``: eight busy connections).  Clients ignore it.
    max_server_memory: int = 0

    def __attrs_post_init__(self) -> None:
        for field in attrs.fields(type(self)):
            value = getattr(self, field.name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"Limits.{field.name} must be a non-negative int, got {value!r}")


def check_limit(
    value: int,
    limit: int,
    *,
    name: str,
    field: str,
    frame: str | None = None,
    offset: int | None = None,
    protocol: str | None = None,
) -> None:
    """Raise :class:`LimitExceeded` if ``value > limit`` (``name`` is the Limits field)."""
    if value > limit:
        raise LimitExceeded(
            f"{field} {value} exceeds the limit {name}={limit}",
            protocol=protocol,
            frame=frame,
            field=field,
            offset=offset,
        )


# --------------------------------------------------------------------------- receive buffer


class ReceiveBuffer:
    """Accumulates received bytes; consumers read from ``data`` at ``pos``.

    O(n) however the bytes arrive: appends are amortised O(1) per byte (a
    ``bytearray``), consumed bytes are dropped by advancing an offset and
    compacting only once the dead prefix is both large and at least half the
    buffer.  When the buffer is empty a new chunk is kept as the very ``bytes``
    object that arrived (no copy), so slicing payloads out of it yields
    ``bytes`` directly.

    Decoders hold a ``need`` count of their own and do not look at the buffer
    again until ``len(buffer) >= need``: a header is never re-parsed while its
    payload trickles in.
    """

    __slots__ = ("consumed", "data", "pos")

    def __init__(self) -> None:
        #: the underlying buffer; valid bytes are ``data[pos:]``.  Read it, do not
        #: keep it or assign it (plain attributes, not properties: decoders read
        #: them once per frame).
        self.data: bytes | bytearray = b""
        #: index into ``data`` of the first unconsumed byte (change it with :meth:`advance_to`)
        self.pos = 0
        #: total bytes consumed since creation (the stream offset of ``pos``).
        self.consumed = 0

    def __len__(self) -> int:
        return len(self.data) - self.pos

    def __bool__(self) -> bool:
        return len(self.data) > self.pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes."""
        if not data:
            return
        if self.pos == len(self.data):
            # Empty: adopt the chunk itself (bytes is immutable, so no copy needed).
            self.data = data if type(data) is bytes else bytes(data)
            self.pos = 0
            return
        remaining = len(self.data) - self.pos
        if len(data) >= remaining:
            # Joining copies at most twice the new chunk (linear overall) and keeps
            # the buffer a ``bytes``, so decoders slice payloads out without a view.
            with memoryview(self.data) as view:
                self.data = b"".join((view[self.pos :], data))
            self.pos = 0
            return
        if type(self.data) is bytes:
            self.data = bytearray(memoryview(self.data)[self.pos :])
            self.pos = 0
        assert isinstance(self.data, bytearray)
        if self.pos >= _COMPACT_AT and self.pos * 2 >= len(self.data):
            del self.data[: self.pos]
            self.pos = 0
        self.data += data

    def advance_to(self, pos: int) -> None:
        """Mark everything before ``pos`` (an index into ``data``) consumed."""
        self.consumed += pos - self.pos
        if pos >= len(self.data):
            self.data = b""
            self.pos = 0
        else:
            self.pos = pos

    def take(self, n: int) -> bytes:
        """Remove and return the next ``n`` bytes (``n <= len(self)``)."""
        if n > len(self):
            raise ValueError("take() past the end of the buffer")
        start = self.pos
        data = self.data
        if type(data) is bytearray:
            # One copy: a bytearray slice and then bytes() of it would be two.
            with memoryview(data) as view:
                out = bytes(view[start : start + n])
        else:
            out = data[start : start + n]  # type: ignore[assignment]
        self.advance_to(start + n)
        return out

    def peek(self, n: int) -> bytes:
        """Return up to ``n`` next bytes without consuming them."""
        return bytes(self.data[self.pos : self.pos + n])

    def clear(self) -> None:
        self.consumed += len(self)
        self.data = b""
        self.pos = 0


# --------------------------------------------------------------------------- reader / writer


class Reader:
    """Bounds-checked cursor over one complete frame.

    ``base`` is the absolute offset of ``data[start]`` in the stream, so errors
    carry offsets a person can find in a capture.
    """

    __slots__ = ("_base_delta", "_data", "_end", "_pos", "frame", "protocol")

    def __init__(
        self,
        data: bytes | bytearray | memoryview,
        *,
        start: int = 0,
        end: int | None = None,
        base: int = 0,
        protocol: str | None = None,
        frame: str | None = None,
    ) -> None:
        self._data = data
        self._pos = start
        self._end = len(data) if end is None else end
        self._base_delta = base - start
        self.protocol = protocol
        self.frame = frame

    # -- position -----------------------------------------------------------
    @property
    def pos(self) -> int:
        return self._pos

    @property
    def offset(self) -> int:
        """Absolute stream offset of the next byte."""
        return self._pos + self._base_delta

    @property
    def remaining(self) -> int:
        return self._end - self._pos

    def error(self, reason: str, *, field: str | None = None, offset: int | None = None) -> LocalProtocolError:
        return LocalProtocolError(
            reason,
            protocol=self.protocol,
            frame=self.frame,
            field=field,
            offset=self.offset if offset is None else offset,
        )

    def _need(self, n: int, field: str) -> None:
        if self._end - self._pos < n:
            raise self.error(
                f"truncated: {field} needs {n} bytes, {self._end - self._pos} left", field=field
            )

    def _unpack(self, s: struct.Struct, field: str) -> int:
        self._need(s.size, field)
        (v,) = s.unpack_from(self._data, self._pos)
        self._pos += s.size
        return int(v)

    # -- integers -----------------------------------------------------------
    def u8(self, field: str) -> int:
        return self._unpack(U8, field)

    def u16be(self, field: str) -> int:
        return self._unpack(U16BE, field)

    def u32be(self, field: str) -> int:
        return self._unpack(U32BE, field)

    def i32be(self, field: str) -> int:
        return self._unpack(I32BE, field)

    def u64be(self, field: str) -> int:
        return self._unpack(U64BE, field)

    def i64be(self, field: str) -> int:
        return self._unpack(I64BE, field)

    def u16le(self, field: str) -> int:
        return self._unpack(U16LE, field)

    def u32le(self, field: str) -> int:
        return self._unpack(U32LE, field)

    def u64le(self, field: str) -> int:
        return self._unpack(U64LE, field)

    def bool8(self, field: str) -> bool:
        v = self.u8(field)
        if v > 1:
            raise self.error(f"boolean byte must be 0 or 1, got {v}", field=field, offset=self.offset - 1)
        return v == 1

    def uvarint(self, field: str, *, max_bytes: int = 5, bits: int = 32) -> int:
        try:
            value, self._pos = decode_uvarint(
                self._data, self._pos, self._end, field=field, max_bytes=max_bytes, bits=bits, base=self._base_delta
            )
        except LocalProtocolError as exc:  # decode_uvarint knows no protocol or frame; this reader does
            raise exc.located(protocol=self.protocol, frame=self.frame) from None
        return value

    # -- byte strings -------------------------------------------------------
    def raw(self, n: int, field: str, *, limit: int | None = None, limit_name: str = "max_frame_size") -> bytes:
        """``n`` bytes as ``bytes``.  ``n`` is checked against ``limit`` and the
        bytes actually present before anything is copied."""
        if n < 0:
            raise self.error(f"negative length {n}", field=field)
        if limit is not None:
            check_limit(n, limit, name=limit_name, field=field, frame=self.frame, offset=self.offset, protocol=self.protocol)
        self._need(n, field)
        start = self._pos
        self._pos += n
        return bytes(self._data[start : start + n])

    def rest(self, field: str) -> bytes:
        return self.raw(self.remaining, field)

    def java_utf(self, field: str) -> str:
        """A ``u16`` length + modified UTF-8, as ``DataInput.readUTF``."""
        start = self.offset
        n = self.u16be(field)
        self._need(n, field)
        raw = self._data[self._pos : self._pos + n]
        self._pos += n
        try:
            return decode_mutf8(bytes(raw))
        except ValueError as exc:
            raise self.error(f"malformed modified UTF-8: {exc}", field=field, offset=start) from None

    def expect_end(self) -> None:
        if self._pos != self._end:
            raise self.error(f"{self._end - self._pos} unexpected trailing bytes", field="(end)")


class Writer:
    """Builds a frame; ``getvalue()`` returns the bytes."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def __len__(self) -> int:
        return len(self._buf)

    def getvalue(self) -> bytes:
        return bytes(self._buf)

    def raw(self, data: bytes | bytearray | memoryview) -> Writer:
        self._buf += data
        return self

    def _pack(self, s: struct.Struct, value: int, name: str) -> Writer:
        try:
            self._buf += s.pack(value)
        except struct.error:
            raise LocalProtocolError(f"{name} value {value!r} out of range", field=name) from None
        return self

    def u8(self, v: int, name: str = "u8") -> Writer:
        return self._pack(U8, v, name)

    def u16be(self, v: int, name: str = "u16") -> Writer:
        return self._pack(U16BE, v, name)

    def u32be(self, v: int, name: str = "u32") -> Writer:
        return self._pack(U32BE, v, name)

    def i32be(self, v: int, name: str = "i32") -> Writer:
        return self._pack(I32BE, v, name)

    def u64be(self, v: int, name: str = "u64") -> Writer:
        return self._pack(U64BE, v, name)

    def i64be(self, v: int, name: str = "i64") -> Writer:
        return self._pack(I64BE, v, name)

    def u16le(self, v: int, name: str = "u16") -> Writer:
        return self._pack(U16LE, v, name)

    def u32le(self, v: int, name: str = "u32") -> Writer:
        return self._pack(U32LE, v, name)

    def u64le(self, v: int, name: str = "u64") -> Writer:
        return self._pack(U64LE, v, name)

    def bool8(self, v: bool) -> Writer:
        self._buf.append(1 if v else 0)
        return self

    def uvarint(self, v: int, *, bits: int = 32) -> Writer:
        self._buf += encode_uvarint(v, bits=bits)
        return self

    def java_utf(self, s: str, name: str = "string") -> Writer:
        """``u16`` length + modified UTF-8, as ``DataOutput.writeUTF`` (65535-byte limit)."""
        body = encode_mutf8(s)
        if len(body) > 0xFFFF:
            raise LocalProtocolError(
                f"encoded string is {len(body)} bytes; modified UTF-8 strings are limited to 65535",
                field=name,
            )
        self._buf += U16BE.pack(len(body))
        self._buf += body
        return self


# --------------------------------------------------------------------------- LEB128 varint


def encode_uvarint(value: int, *, bits: int = 32) -> bytes:
    """Unsigned LEB128: 7 bits per byte, least significant group first."""
    if value < 0 or value >> bits:
        raise LocalProtocolError(f"varint value {value} does not fit in u{bits}", field="varint")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_uvarint(
    data: bytes | bytearray | memoryview,
    pos: int,
    end: int | None = None,
    *,
    field: str = "varint",
    max_bytes: int = 5,
    bits: int = 32,
    base: int = 0,
) -> tuple[int, int]:
    """Decode an unsigned LEB128 at ``pos``; return ``(value, new_pos)``.

    Raises :class:`LocalProtocolError` if the varint runs past ``end``
    (truncated), is longer than ``max_bytes``, or does not fit in ``bits``.
    ``base`` shifts reported offsets (``pos + base`` is the stream offset).
    """
    if end is None:
        end = len(data)
    result = 0
    shift = 0
    i = pos
    while True:
        if i >= end:
            raise LocalProtocolError(
                f"truncated varint after {i - pos} bytes", field=field, offset=pos + base
            )
        if i - pos >= max_bytes:
            raise LocalProtocolError(
                f"varint longer than {max_bytes} bytes", field=field, offset=pos + base
            )
        b = data[i]
        result |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            break
        shift += 7
    if result >> bits:
        raise LocalProtocolError(f"varint value {result} overflows u{bits}", field=field, offset=pos + base)
    return result, i


# --------------------------------------------------------------------------- modified UTF-8


def encode_mutf8(s: str) -> bytes:
    """Java modified UTF-8 (``DataOutputStream.writeUTF`` without the length).

    U+0000 is written as ``C0 80``; characters above U+FFFF are written as a
    UTF-16 surrogate pair, each half as a 3-byte sequence (CESU-8); lone
    surrogates are written as themselves, as the JDK does.
    """
    if s.isascii() and "\x00" not in s:
        return s.encode("ascii")
    out = bytearray()
    for ch in s:
        c = ord(ch)
        if 0 < c < 0x80:
            out.append(c)
        elif c < 0x800:  # includes U+0000 -> C0 80
            out += bytes((0xC0 | (c >> 6), 0x80 | (c & 0x3F)))
        elif c < 0x10000:
            out += bytes((0xE0 | (c >> 12), 0x80 | ((c >> 6) & 0x3F), 0x80 | (c & 0x3F)))
        else:
            c -= 0x10000
            for unit in (0xD800 | (c >> 10), 0xDC00 | (c & 0x3FF)):
                out += bytes((0xE0 | (unit >> 12), 0x80 | ((unit >> 6) & 0x3F), 0x80 | (unit & 0x3F)))
    return bytes(out)


def decode_mutf8(data: bytes) -> str:
    """Decode Java modified UTF-8 as ``DataInputStream.readUTF`` does.

    Accepts the 1-, 2- and 3-byte forms (the JDK does not reject overlong 2- and
    3-byte forms, so neither do we); a byte pattern ``1111xxxx`` or ``10xxxxxx``
    at the start of a character, or a missing continuation byte, raises
    ``ValueError`` naming the byte index.  Surrogate pairs are joined into one
    supplementary character; lone surrogates are kept, as a Java ``String``
    keeps them.
    """
    if data.isascii():
        return data.decode("ascii")
    units: list[int] = []
    i = 0
    n = len(data)
    while i < n:
        b = data[i]
        if b < 0x80:
            units.append(b)
            i += 1
        elif b >> 5 == 0b110:
            if i + 1 >= n or data[i + 1] >> 6 != 0b10:
                raise ValueError(f"malformed input around byte {i}")
            units.append(((b & 0x1F) << 6) | (data[i + 1] & 0x3F))
            i += 2
        elif b >> 4 == 0b1110:
            if i + 2 >= n or data[i + 1] >> 6 != 0b10 or data[i + 2] >> 6 != 0b10:
                raise ValueError(f"malformed input around byte {i}")
            units.append(((b & 0x0F) << 12) | ((data[i + 1] & 0x3F) << 6) | (data[i + 2] & 0x3F))
            i += 3
        else:
            raise ValueError(f"malformed input around byte {i}")
    # Join surrogate pairs into code points; lone surrogates stay as they are.
    chars: list[str] = []
    j = 0
    m = len(units)
    while j < m:
        u = units[j]
        if 0xD800 <= u < 0xDC00 and j + 1 < m and 0xDC00 <= units[j + 1] < 0xE000:
            chars.append(chr(0x10000 + ((u - 0xD800) << 10) + (units[j + 1] - 0xDC00)))
            j += 2
        else:
            chars.append(chr(u))
            j += 1
    return "".join(chars)
