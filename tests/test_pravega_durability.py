"""The segment store's directory log never silently drops acknowledged data
(specs/pravega/README.md §13): a torn tail is cut (and the cut logged) and
costs only what was never acknowledged; damage with intact records after it
refuses to start, naming the file and the offset, unless ``repair`` moves the
damaged part aside (never deleting it) and says what was lost."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from refwire.errors import CorruptLog
from refwire.pravega.disk import FileLog
from refwire.pravega.storage import decode_records, encode_record, scan_log
from refwire.pravega.store import SegmentStore

SEG = "sc/st/0.#epoch.0"
WRITER = uuid.UUID(int=7)


def write_log(path: Path, events: int) -> list[int]:
    """A log holding a segment and ``events`` appends, all synced (acknowledged);
    returns where each record ends."""
    log = FileLog(path)
    store = SegmentStore(log)
    ends = [store.create(SEG)]
    for i in range(events):
        lsn, _ = store.append(SEG, f"event {i:03d};".encode(), writer_id=WRITER, event_number=i + 1, event_count=1)
        ends.append(lsn)
    log.sync()
    log.close()
    return ends


def reopen(path: Path, *, repair: bool = False) -> tuple[SegmentStore, FileLog]:
    log = FileLog(path, repair=repair)
    return SegmentStore(log), log


def test_a_torn_tail_is_cut_at_every_offset_and_only_the_unfinished_record_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "segments.log"
    ends = write_log(path, 5)
    whole = path.read_bytes()
    last_start = ends[-2]
    for cut in range(last_start + 1, len(whole)):
        path.write_bytes(whole[:cut])
        caplog.clear()
        store, log = reopen(path)
        assert bytes(store.segments[SEG].data) == b"".join(f"event {i:03d};".encode() for i in range(4)), cut
        assert path.stat().st_size == last_start and log.written == last_start
        assert [r.getMessage() for r in caplog.records] == [
            f"{path}: cut a torn tail of {cut - last_start} bytes at offset {last_start} "
            "(a write a crash interrupted: nothing in it was acknowledged)"
        ]
        log.close()


def test_a_complete_last_record_whose_checksum_fails_is_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "segments.log"
    ends = write_log(path, 3)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))
    store, log = reopen(path)
    assert store.segments[SEG].event_count == 2 and log.repairs and "torn tail" in log.repairs[0]
    assert path.stat().st_size == ends[-2]


@pytest.mark.parametrize("where", ["first-append", "middle", "header-of-a-record"])
def test_damage_followed_by_intact_records_refuses_to_start(tmp_path: Path, where: str) -> None:
    path = tmp_path / "segments.log"
    ends = write_log(path, 8)
    data = bytearray(path.read_bytes())
    at = {"first-append": ends[0] + 12, "middle": (ends[3] + ends[4]) // 2, "header-of-a-record": ends[5] + 1}[where]
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    before = path.read_bytes()
    with pytest.raises(CorruptLog) as info:
        reopen(path)
    damaged_record = max(e for e in ends if e <= at)
    assert (info.value.path, info.value.offset) == (str(path), damaged_record)
    assert info.value.resume == min(e for e in ends if e > at)
    assert f"{path} is damaged at offset {damaged_record}" in str(info.value) and "--repair" in str(info.value)
    assert path.read_bytes() == before  # refusing changes nothing


def test_repair_moves_the_damage_aside_and_says_what_was_lost(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "segments.log"
    ends = write_log(path, 8)
    data = bytearray(path.read_bytes())
    data[ends[3] + 20] ^= 0xFF  # inside the 4th append's record
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        store, log = reopen(path, repair=True)
    aside = tmp_path / f"segments.log.damaged-{ends[3]}"
    assert aside.read_bytes() == bytes(data[ends[3] : ends[4]])  # the damaged record, moved aside, not deleted
    events = [f"event {i:03d};" for i in range(8) if i != 3]
    assert bytes(store.segments[SEG].data).decode() == "".join(events)
    assert len(log.repairs) == 1 and f"moved {ends[4] - ends[3]} damaged bytes at offset {ends[3]} aside" in log.repairs[0]
    assert any("are lost" in r.getMessage() for r in caplog.records)
    log.close()
    # the log is whole again: reopening without repair needs none
    store2, log2 = reopen(path)
    assert bytes(store2.segments[SEG].data) == bytes(store.segments[SEG].data) and log2.repairs == []
    records, end = decode_records(path.read_bytes())
    assert end == path.stat().st_size and len(records) == 8


def test_repair_skips_records_of_a_segment_whose_creation_was_lost(tmp_path: Path) -> None:
    path = tmp_path / "segments.log"
    write_log(path, 3)
    data = bytearray(path.read_bytes())
    data[12] ^= 0xFF  # the create record
    path.write_bytes(bytes(data))
    store, log = reopen(path, repair=True)
    assert SEG not in store.segments and store.orphan_records == 3
    log.close()


def test_scan_log_finds_the_next_intact_record() -> None:
    recs = [encode_record(1, {"s": f"seg{i}"}, b"x" * i) for i in range(4)]
    buf = b"".join(recs)
    assert scan_log(buf).damage is None
    bad = bytearray(buf)
    bad[len(recs[0]) + 9] ^= 1
    scan = scan_log(bad)
    assert scan.end == len(recs[0]) and len(scan.records) == 1
    assert scan.damage is not None and scan.damage.resume == len(recs[0]) + len(recs[1]) and not scan.damage.torn_tail
    torn = scan_log(buf[:-2])
    assert torn.damage is not None and torn.damage.torn_tail and torn.damage.size == len(recs[3]) - 2


def test_serve_refuses_a_damaged_log_in_one_line_and_repairs_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "segments.log"
    ends = write_log(path, 4)
    data = bytearray(path.read_bytes())
    data[ends[1] + 20] ^= 0xFF
    path.write_bytes(bytes(data))
    cmd = [sys.executable, "-m", "refwire.cli", "serve", "pravega", "--listen", "127.0.0.1:0", "--no-controller"]
    refused = subprocess.run([*cmd, "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"refwire: {path} is damaged at offset {ends[1]}" in refused.stderr
    proc = subprocess.Popen([*cmd, "--data-dir", str(tmp_path), "--repair"], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if "listening on" in line:
                break
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = "".join(lines) + (rest or "")
    assert proc.returncode == 130 and f"moved {ends[2] - ends[1]} damaged bytes at offset {ends[1]} aside" in text, text
    assert (tmp_path / f"segments.log.damaged-{ends[1]}").exists()
