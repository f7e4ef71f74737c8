"""Durable operation logs for the segment store (specs/pravega/README.md §11):
the :class:`Log` protocol, the record format and the in-memory log.  A core: no
file I/O here; the log in a directory is :class:`refwire.pravega.disk.FileLog`.

The store writes every mutating operation as one record; a record is durable
once the log is synced, and only then is its append acked or its data visible
to readers (as Pravega acks only what its durable log holds).  On start the
store replays the log; a torn or corrupt tail (a crash in mid-write) is cut off.

Record: ``u32 length, u32 crc32(body), body``; body = ``u8 kind, u32 meta_len,
meta (JSON), data``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import Any, Protocol

import orjson

__all__ = ["Log", "MemoryLog", "decode_records", "encode_record"]

_REC = struct.Struct(">II")
_BODY = struct.Struct(">BI")
MAX_RECORD = 64 * 1024 * 1024


class Log(Protocol):
    """An append-only byte log."""

    def append(self, record: bytes) -> int:
        """Write ``record``; returns the log position after it (its LSN)."""
        ...

    def sync(self) -> int:
        """Make everything written so far durable; returns the durable LSN."""
        ...

    @property
    def durable(self) -> int: ...

    @property
    def written(self) -> int: ...

    def replay(self) -> Iterator[tuple[int, dict[str, Any], bytes]]:
        """Every durable record (kind, meta, data) in order; cuts a torn tail."""
        ...


def encode_record(kind: int, meta: dict[str, Any], data: bytes = b"") -> bytes:
    m = orjson.dumps(meta)
    body = _BODY.pack(kind, len(m)) + m + data
    return _REC.pack(len(body), zlib.crc32(body)) + body


def decode_records(buf: bytes | bytearray) -> tuple[list[tuple[int, dict[str, Any], bytes]], int]:
    """The complete, intact records at the start of ``buf`` and the length they span."""
    out: list[tuple[int, dict[str, Any], bytes]] = []
    pos = 0
    n = len(buf)
    while pos + 8 <= n:
        length, crc = _REC.unpack_from(buf, pos)
        end = pos + 8 + length
        if length < _BODY.size or length > MAX_RECORD or end > n:
            break
        body = bytes(buf[pos + 8 : end])
        if zlib.crc32(body) != crc:
            break
        kind, mlen = _BODY.unpack_from(body, 0)
        if _BODY.size + mlen > len(body):
            break
        try:
            meta = orjson.loads(body[_BODY.size : _BODY.size + mlen])
        except orjson.JSONDecodeError:
            break
        out.append((kind, meta, body[_BODY.size + mlen :]))
        pos = end
    return out, pos


class MemoryLog:
    """A log in memory with a durable prefix; :meth:`crashed` keeps only that
    prefix, as a power cut would.  Used by the simulator."""

    def __init__(self, data: bytes = b"") -> None:
        self.data = bytearray(data)
        self._durable = len(data)

    def append(self, record: bytes) -> int:
        self.data += record
        return len(self.data)

    def sync(self) -> int:
        self._durable = len(self.data)
        return self._durable

    @property
    def durable(self) -> int:
        return self._durable

    @property
    def written(self) -> int:
        return len(self.data)

    def crashed(self) -> MemoryLog:
        """A new log holding what survived a crash now."""
        return MemoryLog(bytes(self.data[: self._durable]))

    def replay(self) -> Iterator[tuple[int, dict[str, Any], bytes]]:
        records, end = decode_records(self.data)
        del self.data[end:]
        self._durable = end
        yield from records
