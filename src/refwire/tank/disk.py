"""Partition logs in a directory that survives a restart (specs/tank/README.md §6).

The on-disk layout follows TANK's: ``DIR/<topic>/<partition>/`` per partition
(a topic can be created with ``mkdir -p`` before starting), and the partition's
entries appended verbatim to ``data.log``, so the file is a TANK segment body.
Ranges are rebuilt on open by walking the entries (sparse bundles carry theirs;
others follow the previous one); a torn tail left by a crash is cut off.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..errors import LocalProtocolError
from ..wire import decode_uvarint
from .bundles import parse_bundle_header
from .storage import Entry, MemoryLog, MemoryStorage

__all__ = ["DirectoryStorage", "FileLog"]

log = logging.getLogger("refwire.tank")


class FileLog(MemoryLog):
    """A :class:`~refwire.tank.storage.PartitionLog` kept in memory and backed by ``<dir>/data.log``; ``fsync`` makes every append durable before it is acknowledged."""

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


class DirectoryStorage(MemoryStorage):
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

    def _new_log(self, topic: str, partition: int) -> MemoryLog:
        return FileLog(self.root / topic / str(partition), fsync=self._fsync)
