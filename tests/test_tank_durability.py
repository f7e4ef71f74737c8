"""TANK's directory log never serves altered data nor silently drops what it
acknowledged (specs/tank/README.md §11): each entry of ``data.log`` is checked
against ``data.crc`` on open; a torn tail is cut and logged; damage followed by
intact entries refuses to start unless ``repair`` moves it aside."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from refwire.errors import CorruptLog
from refwire.tank.bundles import Message, encode_bundle, encode_entry
from refwire.tank.disk import DirectoryStorage, FileLog
from refwire.tank.storage import Entry


def write_partition(directory: Path, bundles: int) -> list[int]:
    """``bundles`` entries of two messages each; returns where each entry starts, then the end."""
    log = FileLog(directory)
    starts = [0]
    last = 0
    for i in range(bundles):
        data = encode_entry(
            encode_bundle([Message(f"message {i}a".encode(), 1), Message(f"message {i}b".encode(), 2)], compress=False)
        )
        log.append(Entry(last + 1, last + 2, False, data))
        last += 2
        starts.append(starts[-1] + len(data))
    log.close()
    return starts


def messages(log: FileLog) -> list[tuple[int, int]]:
    return [(e.first, e.last) for e in log.entries]


def flip(path: Path, at: int) -> bytes:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    return bytes(data)


def test_a_flipped_byte_inside_a_message_is_never_served(tmp_path: Path) -> None:
    starts = write_partition(tmp_path, 6)
    flip(tmp_path / "data.log", starts[2] + 12)  # inside the 3rd entry's messages: the structure still parses
    with pytest.raises(CorruptLog) as info:
        FileLog(tmp_path)
    assert (info.value.offset, info.value.resume) == (starts[2], starts[3])
    assert "data.crc" in str(info.value) and "--repair" in str(info.value)


def test_a_damaged_bundle_header_no_longer_cuts_everything_after_it(tmp_path: Path) -> None:
    starts = write_partition(tmp_path, 6)
    before = flip(tmp_path / "data.log", starts[1] + 1)
    with pytest.raises(CorruptLog):
        FileLog(tmp_path)
    assert (tmp_path / "data.log").read_bytes() == before  # refusing changes nothing


def test_repair_moves_the_damaged_entry_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    starts = write_partition(tmp_path, 6)
    damaged = flip(tmp_path / "data.log", starts[2] + 12)
    with caplog.at_level(logging.WARNING):
        log = FileLog(tmp_path, repair=True)
    assert (tmp_path / f"data.log.damaged-{starts[2]}").read_bytes() == damaged[starts[2] : starts[3]]
    assert messages(log) == [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10)]  # one entry fewer; later seqs move down
    assert len(log.repairs) == 1 and "are lost" in log.repairs[0]
    log.close()
    again = FileLog(tmp_path)  # whole again: no repair needed
    assert again.repairs == [] and len(again.entries) == 5
    again.close()


def test_a_torn_tail_is_cut_at_every_offset(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    starts = write_partition(tmp_path / "whole", 3)
    whole = (tmp_path / "whole" / "data.log").read_bytes()
    sums = (tmp_path / "whole" / "data.crc").read_bytes()
    for cut in range(starts[2] + 1, starts[3]):
        d = tmp_path / str(cut)
        d.mkdir()
        (d / "data.log").write_bytes(whole[:cut])
        (d / "data.crc").write_bytes(sums)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            log = FileLog(d)
        assert messages(log) == [(1, 2), (3, 4)], cut
        assert any(f"cut a torn tail of {cut - starts[2]} bytes at offset {starts[2]}" in r.getMessage() for r in caplog.records)
        log.close()
        assert (d / "data.log").stat().st_size == starts[2] and (d / "data.crc").stat().st_size == 16


def test_a_complete_last_entry_that_fails_its_checksum_is_a_torn_tail(tmp_path: Path) -> None:
    starts = write_partition(tmp_path, 3)
    flip(tmp_path / "data.log", starts[3] - 2)
    log = FileLog(tmp_path)
    assert messages(log) == [(1, 2), (3, 4)] and "torn tail" in log.repairs[0]
    log.close()


def test_a_log_written_without_checksums_is_adopted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    starts = write_partition(tmp_path, 3)
    (tmp_path / "data.crc").unlink()
    with caplog.at_level(logging.WARNING):
        log = FileLog(tmp_path)
    assert messages(log) == [(1, 2), (3, 4), (5, 6)] and any("no checksums" in r.getMessage() for r in caplog.records)
    log.close()
    assert (tmp_path / "data.crc").stat().st_size == 8 * 3
    # without checksums, a damaged header followed by entries that parse to the end is corruption too
    (tmp_path / "data.crc").unlink()
    flip(tmp_path / "data.log", starts[1])
    with pytest.raises(CorruptLog):
        FileLog(tmp_path)


def test_directory_storage_passes_repair_on(tmp_path: Path) -> None:
    part = tmp_path / "logs" / "0"
    starts = write_partition(part, 4)
    flip(part / "data.log", starts[1] + 12)
    with pytest.raises(CorruptLog):
        DirectoryStorage(tmp_path)
    storage = DirectoryStorage(tmp_path, repair=True)
    assert len(storage.topics["logs"][0].entries) == 3
    storage.close()
