"""Partition logs for the TANK broker: in memory, or a directory that survives a restart
(specs/tank/README.md §6).

A log holds *entries* -- ``bundleLen:varint bundle`` exactly as the producer
sent them (compressed or not) -- with the sequence range of each.  The on-disk
layout follows TANK's: ``DIR/<topic>/<partition>/`` per partition (a topic can
be created with ``mkdir -p`` before starting), and the partition's entries
appended verbatim to ``data.log``, so the file is a TANK segment body.  Ranges
are rebuilt on open by walking the entries (sparse bundles carry theirs;
others follow the previous one); a torn tail left by a crash is cut off.
"""

from __future__ import annotations

import bisect
import logging
import os
from pathlib import Path

import attrs

from ..errors import LocalProtocolError
from ..wire import decode_uvarint
from .bundles import parse_bundle_header

__all__ = ["DirectoryStorage", "Entry", "MemoryStorage", "PartitionLog", "Storage"]

log = logging.getLogger("refwire.tank")


@attrs.frozen
class Entry:
    first: int
    last: int
    sparse: bool
    data: bytes  #: varint length + bundle


class PartitionLog:
    """One partition's entries in memory.  ``first_avail``/``last_assigned`` are 0 while empty (§6)."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self._lasts: list[int] = []

    @property
    def first_avail(self) -> int:
        return self.entries[0].first if self.entries else 0

    @property
    def last_assigned(self) -> int:
        return self._lasts[-1] if self._lasts else 0

    def _add(self, e: Entry) -> None:
        self.entries.append(e)
        self._lasts.append(e.last)

    def append(self, entry: Entry) -> None:
        self._add(entry)

    def index_of(self, seq: int) -> int:
        """Index of the first entry whose range reaches ``seq`` (a seq in a
        sparse gap moves forward to the next stored message, §6)."""
        return bisect.bisect_left(self._lasts, seq)

    def read(self, seq: int, fetch_size: int) -> tuple[Entry, bytes]:
        """Whole entries from the one containing ``seq`` until ``fetch_size`` is
        reached; the first entry is always whole even past ``fetch_size`` (§6)."""
        i = self.index_of(seq)
        first = self.entries[i]
        parts = [first.data]
        total = len(first.data)
        for e in self.entries[i + 1 :]:
            if total >= fetch_size:
                break
            parts.append(e.data)
            total += len(e.data)
        return first, b"".join(parts)

    def close(self) -> None:
        """Nothing to release in memory."""


class FileLog(PartitionLog):
    """A :class:`PartitionLog` backed by ``<dir>/data.log``; ``fsync`` makes every append durable before it is acknowledged."""

    def __init__(self, directory: Path, *, fsync: bool = False) -> None:
        super().__init__()
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "data.log"
        self._fsync = fsync
        good = self._load()
        self._fh = open(self.path, "ab")
        if self._fh.tell() != good:
            log.warning("%s: cutting a torn tail of %d bytes", self.path, self._fh.tell() - good)
            self._fh.truncate(good)
            self._fh.seek(good)

    def _load(self) -> int:
        if not self.path.exists():
            return 0
        data = self.path.read_bytes()
        p = 0
        last = 0
        while p < len(data):
            try:
                blen, q = decode_uvarint(data, p, len(data), field="bundleLen")
                if blen == 0 or q + blen > len(data):
                    break
                h = parse_bundle_header(data, q, q + blen)
            except LocalProtocolError:
                break
            if h.sparse:
                assert h.first_seq is not None and h.last_seq is not None
                first, lst = h.first_seq, h.last_seq
            else:
                first, lst = last + 1, last + h.count
            self._add(Entry(first, lst, h.sparse, data[p : q + blen]))
            last = lst
            p = q + blen
        return p

    def append(self, entry: Entry) -> None:
        self._fh.write(entry.data)
        self._fh.flush()
        if self._fsync:
            os.fsync(self._fh.fileno())
        super().append(entry)

    def close(self) -> None:
        self._fh.close()


class Storage:
    """Topics and their partition logs, in memory (the default)."""

    def __init__(self) -> None:
        self.topics: dict[str, list[PartitionLog]] = {}

    def create_topic(self, name: str, partitions: int) -> list[PartitionLog]:
        logs = [self._new_log(name, i) for i in range(partitions)]
        self.topics[name] = logs
        return logs

    def _new_log(self, topic: str, partition: int) -> PartitionLog:
        return PartitionLog()

    def close(self) -> None:
        for logs in self.topics.values():
            for lg in logs:
                lg.close()


MemoryStorage = Storage


class DirectoryStorage(Storage):
    """``root/<topic>/<partition>/data.log``; existing topics are loaded on open."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = False) -> None:
        super().__init__()
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        for d in sorted(self.root.iterdir()):
            if not d.is_dir():
                continue
            ids = sorted(int(p.name) for p in d.iterdir() if p.is_dir() and p.name.isdigit())
            if ids and ids == list(range(len(ids))):
                self.topics[d.name] = [FileLog(d / str(i), fsync=fsync) for i in ids]
            elif ids:
                log.warning("%s: partition directories %s are not 0..n-1; topic skipped", d, ids)

    def _new_log(self, topic: str, partition: int) -> PartitionLog:
        return FileLog(self.root / topic / str(partition), fsync=self._fsync)
