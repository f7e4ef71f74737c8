"""Durable operation logs for the segment store (specs/pravega/README.md §13):
the :class:`Log` protocol, the record format and the in-memory log.  A core: no
file I/O here; the log in a directory is :class:`refwire.pravega.disk.FileLog`.

The store writes every mutating operation as one record; a record is durable
once the log is synced, and only then is its append acked or its data visible
to readers (as Pravega acks only what its durable log holds).  On start the
store replays the log.  Damage with no intact record after it is a torn tail
(a crash in mid-write, which nothing acknowledged can be in): it is cut off.
Damage *followed* by an intact record is corruption (:func:`scan_log` says
where): the store refuses to start rather than silently drop acknowledged data.

Record: ``u32 length, u32 crc32(body), body``; body = ``u8 kind, u32 meta_len,
meta (JSON), data``.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import Any, Protocol

import attrs
import orjson

__all__ = ["Damage", "Log", "LogScan", "MemoryLog", "decode_records", "encode_record", "scan_log"]

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
    while (found := _record_at(buf, pos)) is not None:
        pos, record = found
        out.append(record)
    return out, pos


def _record_at(buf: bytes | bytearray, pos: int) -> tuple[int, tuple[int, dict[str, Any], bytes]] | None:
    """The end of an intact record starting at ``pos`` and the record (kind,
    meta, data), or None: too short, a length out of bounds, a CRC-32 that
    does not match, or a meta that is not JSON."""
    n = len(buf)
    if pos + 8 > n:
        return None
    length, crc = _REC.unpack_from(buf, pos)
    end: int = pos + 8 + length
    if length < _BODY.size or length > MAX_RECORD or end > n:
        return None
    body = bytes(buf[pos + 8 : end])
    if zlib.crc32(body) != crc:
        return None
    kind, mlen = _BODY.unpack_from(body, 0)
    if _BODY.size + mlen > len(body):
        return None
    try:
        meta = orjson.loads(body[_BODY.size : _BODY.size + mlen])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(meta, dict):
        return None
    return end, (kind, meta, body[_BODY.size + mlen :])


@attrs.frozen
class Damage:
    """Bytes of a log that hold no intact record: from ``start`` to ``resume``
    (the next intact record), or to the end (``resume`` None: a torn tail)."""

    start: int
    resume: int | None
    size: int

    @property
    def torn_tail(self) -> bool:
        return self.resume is None


@attrs.frozen
class LogScan:
    """The intact records before the first damage, where they end, and the damage."""

    records: list[tuple[int, dict[str, Any], bytes]]
    end: int
    damage: Damage | None


def scan_log(buf: bytes | bytearray) -> LogScan:
    """:func:`decode_records`, and whether what follows the intact prefix is a
    torn tail or damage with intact records after it (searched byte by byte:
    an intact record needs a matching CRC-32, a sane length and a JSON meta)."""
    records, end = decode_records(buf)
    if end == len(buf):
        return LogScan(records, end, None)
    resume = next((pos for pos in range(end + 1, len(buf) - 7) if _record_at(buf, pos) is not None), None)
    size = (resume if resume is not None else len(buf)) - end
    return LogScan(records, end, Damage(end, resume, size))


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
