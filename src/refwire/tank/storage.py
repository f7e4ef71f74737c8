"""Partition logs for the TANK broker: the storage interface and the in-memory
implementation (specs/tank/README.md §6).

A log holds *entries* -- ``bundleLen:varint bundle`` exactly as the producer
sent them (compressed or not) -- with the sequence range of each.
:class:`Storage` and :class:`PartitionLog` are the interface the
:class:`~refwire.tank.service.BrokerService` uses; :class:`MemoryStorage` is the
default.  The directory-backed implementation, which survives a restart, is
:class:`~refwire.tank.disk.DirectoryStorage`.  This module does no I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

__all__ = ["Entry", "MemoryLog", "MemoryStorage", "PartitionLog", "Storage"]


@attrs.frozen
class Entry:
    first: int
    last: int
    sparse: bool
    data: bytes  #: varint length + bundle


class PartitionLog(Protocol):
    """One partition's entries.  ``first_avail``/``last_assigned`` are 0 while empty (§6)."""

    @property
    def entries(self) -> Sequence[Entry]: ...

    @property
    def first_avail(self) -> int: ...

    @property
    def last_assigned(self) -> int: ...

    def append(self, entry: Entry) -> None:
        """Store ``entry`` after the last one; may raise :class:`OSError` (answered as a system error)."""

    def read(self, seq: int, fetch_size: int) -> tuple[Entry, bytes]:
        """Whole entries from the one containing ``seq`` until ``fetch_size`` is
        reached; the first entry is always whole even past ``fetch_size`` (§6)."""

    def close(self) -> None:
        """Release what the log holds."""


class Storage(Protocol):
    """Topics and their partition logs."""

    @property
    def topics(self) -> Mapping[str, Sequence[PartitionLog]]: ...

    def create_topic(self, name: str, partitions: int) -> Sequence[PartitionLog]:
        """A topic with partitions ``0..partitions-1``; may raise :class:`OSError` (answered as a system error)."""

    def close(self) -> None:
        """Close every log."""


class MemoryLog:
    """A :class:`PartitionLog` in memory."""

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


class MemoryStorage:
    """A :class:`Storage` in memory (the default)."""

    def __init__(self) -> None:
        self.topics: dict[str, list[MemoryLog]] = {}

    def create_topic(self, name: str, partitions: int) -> list[MemoryLog]:
        logs = [self._new_log(name, i) for i in range(partitions)]
        self.topics[name] = logs
        return logs

    def _new_log(self, topic: str, partition: int) -> MemoryLog:
        return MemoryLog()

    def close(self) -> None:
        for logs in self.topics.values():
            for lg in logs:
                lg.close()
