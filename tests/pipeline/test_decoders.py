"""Capture decoders and the pure rule helpers, without Spark."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refwire.lumberjack.frames import Ack, Compressed, JsonFrame, Window
from refwire.pipeline.capture import plan_partitions
from refwire.pipeline.decoders import FrameRow, decode_bytes, decode_stream, decoder_names
from refwire.pipeline.dialects.lumberjack import check_acks, lumberjack_connection

C2S, S2C = lumberjack_connection(windows=4, window_size=5)


def _key(rows: list[FrameRow]) -> list[tuple[object, ...]]:
    return [(r.frame_no, r.offset, r.parent_offset, r.type, r.size, r.seq, r.count, r.fields_json, r.error) for r in rows]


def test_clean_stream_rows() -> None:
    rows = decode_bytes("lumberjack", C2S)
    assert [r.type for r in rows].count("J") == 20 and [r.type for r in rows].count("W") == 4
    assert [r.frame_no for r in rows] == list(range(len(rows)))
    assert not [r for r in rows if r.type == "error"]
    top = [r for r in rows if r.parent_offset is None]
    assert sum(r.size for r in top) == len(C2S)
    assert [r.offset for r in top] == [sum(t.size for t in top[:i]) for i in range(len(top))]
    c = next(r for r in rows if r.type == "C")
    inner = [r for r in rows if r.parent_offset == c.offset]
    assert c.count == len(inner) == 5 and inner[0].offset == 0 and inner[0].frame_no == c.frame_no + 1
    acks = decode_bytes("lumberjack", S2C, "s2c")
    assert [r.seq for r in acks] == [0, 5, 10, 15, 20]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=60))
def test_any_chunking_gives_the_same_rows(sizes: list[int]) -> None:
    chunks, pos = [], 0
    for n in sizes:
        chunks.append(C2S[pos : pos + n])
        pos += n
    chunks.append(C2S[pos:])
    assert _key(list(decode_stream("lumberjack", chunks, "c2s"))) == _key(decode_bytes("lumberjack", C2S))


def test_frames_before_a_bad_byte_then_the_error_at_its_offset() -> None:
    good = Window(2).encode() + JsonFrame(1, b'{"a":1}').encode() + JsonFrame(2, b'{"a":2}').encode()
    data = good + b"\x33J" + b"junk"
    for chunks in ([data], [data[:7], data[7:]], [bytes([b]) for b in data]):
        rows = list(decode_stream("lumberjack", chunks, "c2s"))
        assert [r.type for r in rows] == ["W", "J", "J", "error"]
        assert rows[-1].offset == len(good) and "version" in (rows[-1].error or "")


def test_truncated_last_frame_is_reported() -> None:
    data = Window(1).encode() + JsonFrame(1, b'{"a":1}').encode()[:-3]
    rows = decode_bytes("lumberjack", data)
    assert [r.type for r in rows] == ["W", "error"]
    assert rows[1].offset == 6 and "incomplete J" in (rows[1].error or "")


def test_error_inside_a_compressed_frame_keeps_going() -> None:
    inner = JsonFrame(1, b'{"a":1}').encode() + b"\x32Zxx"
    bad_c = Compressed(zlib.compress(inner)).encode()
    data = Window(2).encode() + bad_c + Ack(5).encode()
    rows = decode_bytes("lumberjack", data)
    assert [(r.type, r.parent_offset) for r in rows] == [("W", None), ("C", None), ("J", 6), ("error", 6), ("A", None)]
    assert rows[3].offset == len(JsonFrame(1, b'{"a":1}').encode()) + 1 and "unknown frame type" in (rows[3].error or "")
    not_zlib = Window(1).encode() + Compressed(b"not zlib").encode()
    rows = decode_bytes("lumberjack", not_zlib)
    assert [r.type for r in rows] == ["W", "C", "error"] and "zlib" in (rows[2].error or "")


def test_unknown_protocol() -> None:
    assert "lumberjack" in decoder_names()
    with pytest.raises(ValueError, match="no capture decoder"):
        decode_bytes("nope", b"")


W3 = [(0, 0, [1, 2, 3]), (5, 40, [4, 5, 6])]


@pytest.mark.parametrize(
    ("acks", "expected"),
    [
        ([(0, 0, 3), (1, 6, 6)], []),
        ([(0, 0, 0), (1, 6, 2), (2, 12, 3), (3, 18, 0), (4, 24, 6)], []),  # keepalive and partial ack
        ([(0, 0, 2), (1, 6, 6)], [("s2c", 1, 6, "ack 6 closes window 2 but window 1 (seqs 1..3, 3 events, partial ack 2) was never acked in full")]),
        ([(0, 0, 3)], [("c2s", 5, 40, "window of 3 events (seqs 4..6) never acked")]),
        ([(0, 0, 3), (1, 6, 6), (2, 12, 9)], [("s2c", 2, 12, "ack 9 but no window is outstanding (2 sent)")]),
        ([(0, 0, 7), (1, 6, 6)], [("s2c", 0, 0, "ack 7 does not match window 1 (seqs 1..3, 3 events)")]),
    ],
)
def test_check_acks(acks: list[tuple[int, int, int]], expected: list[tuple[str, int, int, str]]) -> None:
    assert check_acks(W3, acks) == expected


def test_partitions_keep_connections_whole_and_balance_bytes() -> None:
    streams = [(f"c{i}", d, f"/x/c{i}.{d}", size, None) for i, size in enumerate([100, 5, 5, 60, 40]) for d in ("c2s", "s2c")]
    parts = plan_partitions(streams, 2)
    assert len(parts) == 2
    for p in parts:
        conns = {s[0] for s in p}
        assert all(sum(1 for s in p if s[0] == c) == 2 for c in conns)
    assert sorted(sum(s[3] for s in p) for p in parts) == [210, 210]
    assert len(plan_partitions(streams[:2], 8)) == 1


def test_a_name_that_is_no_utf8_is_escaped_not_a_crash() -> None:
    """A TANK topic is bytes on the wire (§3, str8); one that is no UTF-8 is kept
    byte for byte by the codec and written escaped in the row and its JSON."""
    import json

    from refwire.tank.frames import CreateTopicRequest

    bad = CreateTopicRequest(7, b"t\xff".decode("utf-8", "surrogateescape"), 1).encode()
    rows = decode_bytes("tank", bad, "c2s")
    assert [r.type for r in rows] == ["CreateTopic"]
    assert rows[0].name == "t\\udcff"
    assert json.loads(rows[0].fields_json)["topic"] == "t\\udcff"
    assert rows[0].name.encode("utf-8")  # writable as text


def test_a_draft_partial_message_with_no_such_part_is_an_error_row() -> None:
    """The 2017 draft's part byte is 0, 1 or 2 (specs/pravega-draft-2017/README.md §5):
    any other is the error row of the machine's own words, at the part byte."""
    from refwire.pravega.draft2017.frames import PartialMessage
    from refwire.pravega.frames_codec import encode_command

    wire = encode_command(PartialMessage(part=3, data=b"xyz"))
    rows = decode_bytes("pravega-draft-2017", wire, "c2s")
    assert [r.type for r in rows] == ["PartialMessage", "error"]
    assert rows[1].offset == 8 and rows[1].error is not None
    assert "part must be 0 (Begin), 1 (Middle) or 2 (End), got 3" in rows[1].error
    assert '"field":"part"' in rows[1].fields_json
