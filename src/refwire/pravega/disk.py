"""The segment store's log in a directory (specs/pravega/README.md §13): the
file-backed :class:`~refwire.pravega.storage.Log`.  The only Pravega module that
touches files; the record format and the protocol it implements are in
:mod:`~refwire.pravega.storage`.

On start (:meth:`FileLog.replay`): a torn tail (damage with no intact record
after it: a crash in mid-write) is cut, and the cut is logged; damage followed
by intact records is corruption: :class:`~refwire.errors.CorruptLog`, unless
the log was opened with ``repair=True``, which moves each damaged part aside
into ``segments.log.damaged-OFFSET`` (never deleting it), rewrites the log
without it, and logs what was lost.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import CorruptLog
from .storage import scan_log

__all__ = ["FileLog"]

log = logging.getLogger("refwire.pravega.store")


class FileLog:
    """A log file in a directory; ``sync`` is ``fsync`` (run it in a worker thread)."""

    def __init__(self, path: str | os.PathLike[str], *, repair: bool = False) -> None:
        self.repair = repair
        #: what :meth:`replay` cut or moved aside, one line each (also logged).
        self.repairs: list[str] = []
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._written = os.lseek(self._fd, 0, os.SEEK_END)
        self._durable = self._written

    def append(self, record: bytes) -> int:
        view = memoryview(record)
        while view:
            n = os.pwrite(self._fd, view, self._written)
            self._written += n
            view = view[n:]
        return self._written

    def sync(self) -> int:
        target = self._written
        os.fsync(self._fd)
        self._durable = max(self._durable, target)
        return self._durable

    @property
    def durable(self) -> int:
        return self._durable

    @property
    def written(self) -> int:
        return self._written

    def replay(self) -> Iterator[tuple[int, dict[str, Any], bytes]]:
        with open(self.path, "rb") as fh:
            data = fh.read()
        size = len(data)
        records: list[tuple[int, dict[str, Any], bytes]] = []
        kept = bytearray()  # the log as it will be: intact records only
        base = 0  # the file offset of data[0]
        moved = False
        while True:
            scan = scan_log(data)
            records.extend(scan.records)
            kept += data[: scan.end]
            damage = scan.damage
            if damage is None:
                break
            at = base + damage.start
            if damage.resume is None:
                self._note(
                    f"{self.path}: cut a torn tail of {damage.size} bytes at offset {at} "
                    f"(a write a crash interrupted: nothing in it was acknowledged)"
                )
                break
            if not self.repair:
                raise CorruptLog(str(self.path), at, base + damage.resume, hint="start with --repair to move it aside")
            aside = self.path.with_name(f"{self.path.name}.damaged-{at}")
            aside.write_bytes(data[damage.start : damage.resume])
            moved = True
            self._note(
                f"{self.path}: moved {damage.size} damaged bytes at offset {at} aside to {aside.name}; the records "
                f"they held are lost (appends in them are missing from their segments, acknowledged or not)"
            )
            base += damage.resume
            data = data[damage.resume :]
        if moved:
            self._replace(bytes(kept))
        elif len(kept) != size:
            os.ftruncate(self._fd, len(kept))
            os.fsync(self._fd)
        self._written = self._durable = len(kept)
        yield from records

    def _note(self, text: str) -> None:
        self.repairs.append(text)
        log.warning("%s", text)

    def _replace(self, data: bytes) -> None:
        """The log becomes ``data``: written to a temporary file, synced, renamed over it."""
        tmp = self.path.with_name(self.path.name + ".rewrite")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR, 0o644)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
