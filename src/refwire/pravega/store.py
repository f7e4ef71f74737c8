"""The segment store's state: segments, writer attributes and table segments
(specs/pravega/README.md §5.4, §6, §9).  Pure and synchronous: no I/O but the
:class:`~.storage.Log` it is given, no clock (``now`` comes in).

Segments hold exactly the bytes appended (for event streams, ``Event``
frames).  Every mutation is one log record; data becomes *visible* to readers
and *acked* to writers only once its record is durable (:meth:`SegmentStore.
mark_durable`).  Writer attributes (the last event number per writer) are
updated atomically with the data they describe, which is what makes
``AppendSetup.lastEventNumber`` exact after a crash.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from .errors import (
    BadAttributeError,
    BadKeyVersionError,
    BadOffsetError,
    IllegalArgumentError,
    KeyDoesNotExistError,
    NoSuchSegmentError,
    SegmentExistsError,
    SegmentSealedError,
    SegmentTruncatedError,
    StoreError,
    TableNotEmptyError,
)
from .frames import NO_VERSION, NOT_EXISTS, NULL_VALUE, TableEntry, TableKey
from .storage import Log, encode_record

__all__ = [
    "BadAttributeError",
    "BadKeyVersionError",
    "BadOffsetError",
    "IllegalArgumentError",
    "KeyDoesNotExistError",
    "NoSuchSegmentError",
    "ReadResult",
    "Segment",
    "SegmentExistsError",
    "SegmentSealedError",
    "SegmentStore",
    "SegmentTruncatedError",
    "StoreError",
    "TableNotEmptyError",
]

MAX_READ = 2 * 1024 * 1024  # PravegaRequestProcessor's read size cap (§6)

_CREATE, _SEAL, _DELETE, _TRUNCATE, _APPEND, _ATTR, _TABLE_PUT, _TABLE_REMOVE = range(1, 9)


@attrs.define
class _TableValue:
    value: bytes
    version: int


@attrs.define(eq=False)
class Segment:
    name: str
    is_table: bool = False
    start_offset: int = 0
    data: bytearray = attrs.field(factory=bytearray)  #: bytes from ``start_offset`` on (durable and pending)
    length: int = 0  #: total length, including appends not yet durable
    visible: int = 0  #: durable length: what readers see
    sealed: bool = False
    sealed_visible: bool = False
    last_modified: int = 0
    attributes: dict[uuid.UUID, int] = attrs.field(factory=dict)
    event_count: int = 0
    table: dict[bytes, _TableValue] = attrs.field(factory=dict)
    #: (log position, visible length once durable, sealed) of operations in flight
    pending: deque[tuple[int, int, bool]] = attrs.field(factory=deque)

    def read_bytes(self, offset: int, n: int) -> bytes:
        i = offset - self.start_offset
        return bytes(self.data[i : i + n])


@attrs.frozen
class ReadResult:
    data: bytes
    at_tail: bool
    end_of_segment: bool


class SegmentStore:
    """All segments of one store.

    ``log`` is None for a store that is durable at once (in memory, nothing
    survives the process).  ``on_visible(name)`` is called whenever readers of
    ``name`` may see more (data became durable, the segment was sealed or
    deleted): the server wakes parked tail reads with it.
    """

    def __init__(self, log: Log | None = None, *, on_visible: Callable[[str], None] | None = None) -> None:
        self.log = log
        self.segments: dict[str, Segment] = {}
        self.on_visible = on_visible
        self._replaying = False
        #: records a repaired log still held for segments whose creation was lost (skipped)
        self.orphan_records = 0
        if log is not None:
            self._replaying = True
            for kind, meta, data in log.replay():
                if kind != _CREATE and meta.get("s") not in self.segments:
                    self.orphan_records += 1  # only after a repair moved the segment's creation aside
                    continue
                self._apply(kind, meta, data, now=int(meta.get("t", 0)))
            self._replaying = False
            for seg in self.segments.values():
                seg.visible = seg.length
                seg.sealed_visible = seg.sealed

    # -- log ------------------------------------------------------------------
    def _record(self, seg: Segment | None, kind: int, meta: dict[str, Any], data: bytes = b"") -> int:
        """Write one record; returns its log position (0 without a log)."""
        if self.log is None or self._replaying:
            return 0
        return self.log.append(encode_record(kind, meta, data))

    def _track(self, seg: Segment, lsn: int) -> None:
        if self.log is None:
            self._publish(seg, seg.length, seg.sealed)
        else:
            seg.pending.append((lsn, seg.length, seg.sealed))

    def _publish(self, seg: Segment, visible: int, sealed: bool) -> None:
        changed = visible != seg.visible or sealed != seg.sealed_visible
        seg.visible = visible
        seg.sealed_visible = sealed
        if changed and self.on_visible is not None:
            self.on_visible(seg.name)

    def mark_durable(self, lsn: int) -> None:
        """Everything the log holds up to ``lsn`` is durable: publish it."""
        for seg in list(self.segments.values()):
            while seg.pending and seg.pending[0][0] <= lsn:
                _, visible, sealed = seg.pending.popleft()
                self._publish(seg, visible, sealed)

    @property
    def written_lsn(self) -> int:
        return 0 if self.log is None else self.log.written

    def _apply(self, kind: int, meta: dict[str, Any], data: bytes, *, now: int) -> Segment | None:
        """Apply one operation (live or on replay)."""
        name = meta["s"]
        if kind == _CREATE:
            seg = Segment(name, is_table=bool(meta.get("table")), last_modified=now)
            self.segments[name] = seg
            return seg
        seg = self.segments[name]
        seg.last_modified = now
        if kind == _APPEND:
            seg.data += data
            seg.length += len(data)
            if "w" in meta:
                seg.attributes[uuid.UUID(meta["w"])] = meta["e"]
            seg.event_count += meta.get("n", 0)
        elif kind == _SEAL:
            seg.sealed = True
        elif kind == _DELETE:
            del self.segments[name]
        elif kind == _TRUNCATE:
            off = meta["o"]
            if off > seg.start_offset:
                del seg.data[: off - seg.start_offset]
                seg.start_offset = off
        elif kind == _ATTR:
            seg.attributes[uuid.UUID(meta["a"])] = meta["v"]
        elif kind == _TABLE_PUT:
            self._table_put(seg, [(bytes.fromhex(k), bytes.fromhex(v)) for k, v in meta["kv"]])
        elif kind == _TABLE_REMOVE:
            for k in meta["k"]:
                seg.table.pop(bytes.fromhex(k), None)
            seg.length += 1 + sum(len(k) // 2 for k in meta["k"])
        return seg

    # -- segments -------------------------------------------------------------
    def get(self, name: str) -> Segment:
        seg = self.segments.get(name)
        if seg is None:
            raise NoSuchSegmentError(name)
        return seg

    def create(self, name: str, *, table: bool = False, now: int = 0) -> int:
        """Create a segment; raises :class:`SegmentExistsError`.  Returns the LSN to await."""
        if name in self.segments:
            raise SegmentExistsError(name)
        lsn = self._record(None, _CREATE, {"s": name, "table": table, "t": now})
        seg = self._apply(_CREATE, {"s": name, "table": table}, b"", now=now)
        assert seg is not None
        self._track(seg, lsn)
        return lsn

    def seal(self, name: str, *, now: int = 0) -> int:
        seg = self.get(name)
        if seg.sealed:
            return 0
        lsn = self._record(seg, _SEAL, {"s": name, "t": now})
        self._apply(_SEAL, {"s": name}, b"", now=now)
        self._track(seg, lsn)
        return lsn

    def delete(self, name: str, *, now: int = 0) -> int:
        seg = self.get(name)
        lsn = self._record(seg, _DELETE, {"s": name, "t": now})
        self._apply(_DELETE, {"s": name}, b"", now=now)
        seg.sealed = True
        if self.on_visible is not None:
            self.on_visible(name)
        return lsn

    def truncate(self, name: str, offset: int, *, now: int = 0) -> int:
        seg = self.get(name)
        if offset < 0 or offset > seg.length:
            raise IllegalArgumentError(f"truncation offset {offset} is outside 0..{seg.length}")
        if offset <= seg.start_offset:
            return 0
        lsn = self._record(seg, _TRUNCATE, {"s": name, "o": offset, "t": now})
        self._apply(_TRUNCATE, {"s": name, "o": offset}, b"", now=now)
        return lsn

    def writer_attribute(self, name: str, writer_id: uuid.UUID) -> int:
        """The writer's last event number in ``name`` (``Long.MIN_VALUE`` if none)."""
        return self.get(name).attributes.get(writer_id, NULL_VALUE)

    def append(
        self,
        name: str,
        data: bytes,
        *,
        writer_id: uuid.UUID | None = None,
        event_number: int = 0,
        event_count: int = 0,
        expected_offset: int | None = None,
        expected_attribute: int | None = None,
        now: int = 0,
    ) -> tuple[int, int]:
        """Append ``data`` and set the writer's attribute to ``event_number``
        atomically.  Returns (LSN to await, new segment length).

        Raises NoSuchSegmentError, SegmentSealedError, BadOffsetError (conditional appends)
        or BadAttributeError (the writer's attribute is not ``expected_attribute``).
        """
        seg = self.get(name)
        if seg.is_table:
            raise IllegalArgumentError(f"{name} is a table segment")
        if seg.sealed:
            raise SegmentSealedError(name)
        if expected_offset is not None and expected_offset != seg.length:
            raise BadOffsetError(expected_offset, seg.length)
        if writer_id is not None and expected_attribute is not None:
            if seg.attributes.get(writer_id, NULL_VALUE) != expected_attribute:
                raise BadAttributeError(f"writer {writer_id}: attribute is not {expected_attribute}")
        meta: dict[str, Any] = {"s": name, "n": event_count, "t": now}
        if writer_id is not None:
            meta["w"] = str(writer_id)
            meta["e"] = event_number
        lsn = self._record(seg, _APPEND, meta, data)
        self._apply(_APPEND, meta, data, now=now)
        self._track(seg, lsn)
        return lsn, seg.length

    def read(self, name: str, offset: int, suggested_length: int) -> ReadResult | None:
        """What ``ReadSegment`` returns now (§6), or None when the read must
        wait at the tail for more data (or a seal)."""
        seg = self.get(name)
        if offset < seg.start_offset:
            raise SegmentTruncatedError(seg.start_offset)
        if offset > seg.visible:
            raise IllegalArgumentError(f"offset {offset} is beyond the end of the segment ({seg.visible})")
        if offset == seg.visible:
            if seg.sealed_visible:
                return ReadResult(b"", False, True)
            return None
        n = min(MAX_READ, max(8, suggested_length), seg.visible - offset)
        end = offset + n
        return ReadResult(
            seg.read_bytes(offset, n), end == seg.visible and not seg.sealed_visible, end == seg.visible and seg.sealed_visible
        )

    def update_attribute(self, name: str, attr: uuid.UUID, new: int, expected: int, *, now: int = 0) -> tuple[int, bool]:
        seg = self.get(name)
        if seg.attributes.get(attr, NULL_VALUE) != expected:
            return 0, False
        lsn = self._record(seg, _ATTR, {"s": name, "a": str(attr), "v": new, "t": now})
        self._apply(_ATTR, {"s": name, "a": str(attr), "v": new}, b"", now=now)
        self._track(seg, lsn)
        return lsn, True

    # -- tables (§9) --------------------------------------------------------------
    def _table(self, name: str) -> Segment:
        seg = self.get(name)
        if not seg.is_table:
            raise IllegalArgumentError(f"{name} is not a table segment")
        return seg

    @staticmethod
    def _check_versions(seg: Segment, keys: Iterable[TableKey], offset: int) -> None:
        if offset != -1 and offset != seg.length:
            raise BadOffsetError(offset, seg.length)
        for key in keys:
            cur = seg.table.get(key.data)
            if key.key_version == NO_VERSION:
                continue
            if key.key_version == NOT_EXISTS:
                if cur is not None:
                    raise BadKeyVersionError(f"key {key.data!r} exists (version {cur.version})")
            elif cur is None:
                raise KeyDoesNotExistError(f"key {key.data!r} does not exist")
            elif cur.version != key.key_version:
                raise BadKeyVersionError(f"key {key.data!r} has version {cur.version}, not {key.key_version}")

    @staticmethod
    def _table_put(seg: Segment, kvs: Sequence[tuple[bytes, bytes]]) -> list[int]:
        versions = []
        for k, v in kvs:
            version = seg.length  # a key's version is where its entry sits in the table segment
            seg.table[k] = _TableValue(v, version)
            seg.length += 16 + len(k) + len(v)
            versions.append(version)
        return versions

    def table_update(self, name: str, entries: Sequence[TableEntry], offset: int = -1, *, now: int = 0) -> tuple[int, list[int]]:
        """All-or-nothing conditional update; returns (LSN, new versions)."""
        seg = self._table(name)
        self._check_versions(seg, (e.key for e in entries), offset)
        kv = [(e.key.data, e.value) for e in entries]
        lsn = self._record(seg, _TABLE_PUT, {"s": name, "kv": [(k.hex(), v.hex()) for k, v in kv], "t": now})
        seg.last_modified = now
        versions = self._table_put(seg, kv)
        self._track(seg, lsn)
        return lsn, versions

    def table_remove(self, name: str, keys: Sequence[TableKey], offset: int = -1, *, now: int = 0) -> int:
        seg = self._table(name)
        self._check_versions(seg, keys, offset)
        meta = {"s": name, "k": [k.data.hex() for k in keys], "t": now}
        lsn = self._record(seg, _TABLE_REMOVE, meta)
        self._apply(_TABLE_REMOVE, meta, b"", now=now)
        self._track(seg, lsn)
        return lsn

    def table_get(self, name: str, keys: Sequence[TableKey]) -> list[TableEntry]:
        """ReadTable: each key with its value and version; a missing key has
        version NOT_EXISTS and an empty value."""
        seg = self._table(name)
        out = []
        for key in keys:
            cur = seg.table.get(key.data)
            out.append(TableEntry(TableKey(key.data, cur.version if cur else NOT_EXISTS), cur.value if cur else b""))
        return out

    def table_delta(self, name: str, from_position: int, count: int) -> tuple[list[TableEntry], bool, int]:
        """ReadTableEntriesDelta: entries written at or after ``from_position``
        in write order, at most ``count``; (entries, reached_end, last_position).
        ``last_position`` is where the next delta read starts; at the end it is
        the table segment's length, which is also the CAS offset."""
        seg = self._table(name)
        live = sorted((tv.version, k, tv.value) for k, tv in seg.table.items() if tv.version >= from_position)
        chosen = live[: max(count, 1)]
        reached_end = len(chosen) == len(live)
        if reached_end:
            last = max(seg.length, from_position)
        else:
            v, k, val = chosen[-1]
            last = v + 16 + len(k) + len(val)
        return [TableEntry(TableKey(k, v), val) for v, k, val in chosen], reached_end, last

    def table_entries(self, name: str, after: bytes | None, count: int) -> tuple[list[TableEntry], bytes]:
        """ReadTableEntries / ReadTableKeys: in key order after the continuation
        token (the last key returned); an empty page means the end."""
        seg = self._table(name)
        keys = sorted(k for k in seg.table if after is None or k > after)[: max(count, 1)]
        out = [TableEntry(TableKey(k, seg.table[k].version), seg.table[k].value) for k in keys]
        return out, (keys[-1] if keys else (after or b""))
