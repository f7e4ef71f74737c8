"""The segment store's log in a directory (specs/pravega/README.md §11): the
file-backed :class:`~refwire.pravega.storage.Log`.  The only Pravega module that touches files;
the record format and the protocol it implements are in :mod:`~refwire.pravega.storage`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .storage import decode_records

__all__ = ["FileLog"]


class FileLog:
    """A log file in a directory; ``sync`` is ``fsync`` (run it in a worker thread)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
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
        records, end = decode_records(data)
        if end < len(data):  # a torn tail from a crash: cut it
            os.ftruncate(self._fd, end)
            os.fsync(self._fd)
        self._written = self._durable = end
        yield from records

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
