"""Partition logs in a directory that survives a restart (specs/tank/README.md §6, §11).

The on-disk layout follows TANK's: ``DIR/<topic>/<partition>/`` per partition
(a topic can be created with ``mkdir -p`` before starting), and the partition's
entries appended verbatim to ``data.log``, so the file is a TANK segment body.
Ranges are rebuilt on open by walking the entries (sparse bundles carry theirs;
others follow the previous one).

TANK's format has no checksum, so refwire keeps one beside it: ``data.crc``
holds, per entry of ``data.log``, ``u32 length, u32 crc32(entry)``.  On
open every entry is checked against it, so a flipped byte is never served.
Damage with no intact entry after it is a torn tail (a crash in mid-write):
cut, and the cut logged.  Damage followed by an intact entry refuses to start
(:class:`~refwire.errors.CorruptLog`) unless ``repair`` moves the damaged
entries aside to ``data.log.damaged-OFFSET`` (never deleted) and logs what was
lost.  A ``data.log`` without ``data.crc`` (written by TANK itself) is checked
for structure only, and its checksums are written on first open.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from pathlib import Path

from ..errors import CorruptLog, LocalProtocolError
from ..wire import decode_uvarint
from .bundles import parse_bundle_header
from .storage import Entry, MemoryLog, MemoryStorage

__all__ = ["DirectoryStorage", "FileLog"]

log = logging.getLogger("refwire.tank")

_CRC = struct.Struct(">II")


def _entry_at(data: bytes, p: int) -> tuple[int, int, bool, int | None, int | None] | None:
    """``(end, count, sparse, first, last)`` of a structurally sound entry at ``p``, or None."""
    try:
        blen, q = decode_uvarint(data, p, len(data), field="bundleLen")
        if blen == 0 or q + blen > len(data):
            return None
        h = parse_bundle_header(data, q, q + blen)
    except LocalProtocolError:
        return None
    return q + blen, h.count, h.sparse, h.first_seq, h.last_seq


def _chain_to_end(data: bytes, p: int) -> bool:
    """Whether structurally sound entries run from ``p`` exactly to the end of ``data``."""
    while p < len(data):
        found = _entry_at(data, p)
        if found is None:
            return False
        p = found[0]
    return True


class FileLog(MemoryLog):
    """A :class:`~refwire.tank.storage.PartitionLog` kept in memory and backed
    by ``<dir>/data.log`` and its checksums ``<dir>/data.crc``; ``fsync`` makes
    every append durable before it is acknowledged."""

    def __init__(self, directory: Path, *, fsync: bool = False, repair: bool = False) -> None:
        super().__init__()
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "data.log"
        self.crc_path = directory / "data.crc"
        self._fsync = fsync
        self.repair = repair
        #: what the open cut or moved aside, one line each (also logged).
        self.repairs: list[str] = []
        data, sums = self._load()
        self._rewrite(data, sums)
        self._fh = open(self.path, "ab")
        self._crc = open(self.crc_path, "ab")

    # ------------------------------------------------------------------ open

    def _note(self, text: str) -> None:
        self.repairs.append(text)
        log.warning("%s", text)

    def _load(self) -> tuple[bytes, bytes]:
        """The verified log and checksums to keep; the entries go into memory."""
        data = self.path.read_bytes() if self.path.exists() else b""
        legacy = not self.crc_path.exists()
        raw = b"" if legacy else self.crc_path.read_bytes()
        sums = [_CRC.unpack_from(raw, i) for i in range(0, len(raw) - len(raw) % _CRC.size, _CRC.size)]
        if legacy and data:
            log.warning("%s has no checksums (written by another broker?): checking its structure only, then adding them", self.path)
        kept_data, kept_sums = bytearray(), bytearray()
        p = 0  # offset in data
        i = 0  # index in sums
        last = 0
        while p < len(data):
            found = _entry_at(data, p)
            ok = found is not None
            if ok and not legacy:
                assert found is not None
                ok = i < len(sums) and sums[i] == (found[0] - p, zlib.crc32(data[p : found[0]]))
            if not ok:
                resume = self._resume(data, p, sums, i, legacy)
                if resume is None:
                    self._note(
                        f"{self.path}: cut a torn tail of {len(data) - p} bytes at offset {p} "
                        f"(a write a crash interrupted: nothing in it was acknowledged)"
                    )
                    break
                r_data, r_index = resume
                if not self.repair:
                    raise CorruptLog(str(self.path), p, r_data, hint="checked against data.crc; start with --repair to move it aside")
                aside = self.path.with_name(f"{self.path.name}.damaged-{p}")
                aside.write_bytes(data[p:r_data])
                self._note(
                    f"{self.path}: moved {r_data - p} damaged bytes at offset {p} aside to {aside.name}; the messages "
                    f"they held are lost, and the sequence numbers of the non-sparse bundles after them move down"
                )
                p, i = r_data, r_index
                continue
            assert found is not None
            end, count, sparse, first, lst = found
            if sparse:
                assert first is not None and lst is not None
            else:
                first, lst = last + 1, last + count
            entry = data[p:end]
            self._add(Entry(first, lst, sparse, entry))
            kept_data += entry
            kept_sums += _CRC.pack(len(entry), zlib.crc32(entry))
            last = lst
            p, i = end, i + 1
        if not legacy and len(sums) > i and not self.repairs:
            self._note(f"{self.crc_path}: {len(sums) - i} checksums without their entries (a crash after writing them): dropped")
        return bytes(kept_data), bytes(kept_sums)

    @staticmethod
    def _resume(data: bytes, p: int, sums: list[tuple[int, int]], i: int, legacy: bool) -> tuple[int, int] | None:
        """Where intact entries resume after damage at ``p`` (data offset, checksum
        index), or None when none does: with checksums, the next entry whose
        recorded length and CRC match where the checksums say it starts."""
        if legacy:
            # Without checksums: an offset from which whole entries run exactly to
            # the end of the file is where intact entries resume.
            for q in range(p + 1, len(data)):
                if _entry_at(data, q) is not None and _chain_to_end(data, q):
                    return q, 0
            return None
        pos = p
        for j in range(i, len(sums)):
            length, crc = sums[j]
            if j > i and pos + length <= len(data) and zlib.crc32(data[pos : pos + length]) == crc:
                if _entry_at(data, pos) is not None:
                    return pos, j
            pos += length
        return None

    def _rewrite(self, data: bytes, sums: bytes) -> None:
        """Make the files hold exactly ``data`` and ``sums``: truncated in place
        when they are a prefix, else written anew (temporary file, fsync, rename)."""
        for path, content in ((self.path, data), (self.crc_path, sums)):
            current = path.read_bytes() if path.exists() else None
            if current == content:
                continue
            if current is not None and current.startswith(content):
                with open(path, "r+b") as fh:
                    fh.truncate(len(content))
                    os.fsync(fh.fileno())
                continue
            tmp = path.with_name(path.name + ".rewrite")
            with open(tmp, "wb") as fh:
                fh.write(content)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)

    # ------------------------------------------------------------------ live

    def append(self, entry: Entry) -> None:
        self._fh.write(entry.data)
        self._fh.flush()
        self._crc.write(_CRC.pack(len(entry.data), zlib.crc32(entry.data)))
        self._crc.flush()
        if self._fsync:
            os.fsync(self._fh.fileno())
            os.fsync(self._crc.fileno())
        super().append(entry)

    def close(self) -> None:
        self._fh.close()
        self._crc.close()


class DirectoryStorage(MemoryStorage):
    """``root/<topic>/<partition>/data.log``; existing topics are loaded on open
    (``repair``: see :class:`FileLog`)."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = False, repair: bool = False) -> None:
        super().__init__()
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        for d in sorted(self.root.iterdir()):
            if not d.is_dir():
                continue
            ids = sorted(int(p.name) for p in d.iterdir() if p.is_dir() and p.name.isdigit())
            if ids and ids == list(range(len(ids))):
                self.topics[d.name] = [FileLog(d / str(i), fsync=fsync, repair=repair) for i in ids]
            elif ids:
                log.warning("%s: partition directories %s are not 0..n-1; topic skipped", d, ids)

    def _new_log(self, topic: str, partition: int) -> MemoryLog:
        return FileLog(self.root / topic / str(partition), fsync=self._fsync)
