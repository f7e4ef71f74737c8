"""The Pravega describer and layout (refwire.pravega.describe; specs/pravega/README.md §1, §2.4, §4, §5.3):
every vector frame is described with its type and fields, any split of a stream
describes the same, the first byte that is no frame is one undecoded record with
its error and the rest raw bytes, and the layout reads what the codec decodes."""

from __future__ import annotations

import itertools
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from describing import comparable, split_invariant
from hypothesis import given, settings
from hypothesis import strategies as st

from refwire.describe import UNDECODED, Described
from refwire.pravega.describe import LAYOUT, describer
from refwire.pravega.frames import CURRENT, Hello, SetupAppend

VECTORS = Path(__file__).resolve().parent.parent / "specs" / "pravega" / "vectors"
COMMANDS = json.loads((VECTORS / "commands.json").read_text())["vectors"]
BIG = 1 << 24


def _one(raw: bytes) -> Described:
    d = describer(BIG)
    got = d.feed(raw)
    assert len(got) == 1 and d.held() == 0 and d.end() == []
    return got[0]


def _same(value: Any, want: Any) -> bool:
    """A decoded value against the vector's JSON of it."""
    if isinstance(value, bytes | bytearray):
        return bool(bytes(value).hex() == want)
    if isinstance(value, uuid.UUID):
        return bool(str(value) == want)
    if isinstance(value, tuple):
        return len(value) == len(want)  # keys / entries / versions: the codec's tests compare their insides
    return bool(value == want)


# --------------------------------------------------------------------------- (a) vectors


@pytest.mark.parametrize("v", COMMANDS, ids=[v["name"] for v in COMMANDS])
def test_every_vector_frame_is_described_with_its_type_and_fields(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    d = _one(raw)
    assert (d.type, d.offset, d.data, d.error) == (v["command"], 0, raw, None)
    assert d.fields["type"] == int.from_bytes(raw[:4], "big", signed=True)
    assert d.fields["length"] == len(raw) - 8 or v["command"] == "Padding"
    for name, want in v["fields"].items():
        assert _same(getattr(d.frame, name), want), name
        if isinstance(want, bool | int) or (isinstance(want, str) and not isinstance(getattr(d.frame, name), bytes)):
            assert d.fields[name] == want, name  # scalars (and writer ids) are fields by the spec's names


# --------------------------------------------------------------------------- (b) splits

TOP = [bytes.fromhex(v["hex"]) for v in COMMANDS if v.get("context") is None][:40]


@settings(max_examples=200, deadline=None)
@given(
    frames=st.lists(st.sampled_from(TOP), min_size=1, max_size=6),
    tail=st.binary(max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=8),
)
def test_any_split_describes_the_same_as_one_chunk(frames: list[bytes], tail: bytes, cuts: list[int]) -> None:
    stream = b"".join(frames) + tail
    whole = describer(BIG)
    want = whole.feed(stream) + whole.end()
    pts = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    split = describer(BIG)
    got: list[Described] = []
    for a, b in itertools.pairwise(pts):
        got += split.feed(stream[a:b])
    got += split.end()
    assert split_invariant(got) == split_invariant(want)
    assert [d.type for d in want[: len(frames)]] == [_one(f).type for f in frames]


def test_a_stream_of_frames_is_the_same_in_any_split() -> None:
    stream = b"".join(TOP)
    want = [comparable(d) for d in describer(BIG).feed(stream)]
    assert [k[0] for k in want] == [_one(f).type for f in TOP]
    for step in (1, 3, 7, 64):
        d = describer(BIG)
        got = [comparable(x) for i in range(0, len(stream), step) for x in d.feed(stream[i : i + step])]
        assert got == want and d.end() == []


# --------------------------------------------------------------------------- (c) hostile

HELLO = Hello().encode()
SETUP = SetupAppend(request_id=7, writer_id=uuid.UUID(int=5), segment="sc/st/0.#epoch.0", delegation_token="").encode()


def test_a_truncated_stream_holds_its_last_frame_and_end_reports_it() -> None:
    d = describer(BIG)
    got = d.feed(HELLO + SETUP[:-3])
    assert [g.type for g in got] == ["Hello"] and d.held() == len(SETUP) - 3
    (end,) = d.end()
    assert end.type == UNDECODED and end.data == SETUP[:-3] and end.offset == len(HELLO)
    assert end.error is not None and end.error.field == "(end)" and end.error.offset == len(HELLO) + len(SETUP) - 3
    assert d.held() == 0 and d.feed(b"xy")[0].error is None


@pytest.mark.parametrize(
    ("bad", "field", "at"),
    [
        (b"\x12" + SETUP[1:], "type", 0),  # no type code starts with 0x12 (§1)
        (b"\x00\x00\x00\x63" + SETUP[4:], "type", 0),  # unknown type 99
        (SETUP[:4] + b"\xff\xff\xff\xf0" + SETUP[8:], "length", 4),  # negative length
        (SETUP[:4] + b"\x00\xff\xff\xff" + SETUP[8:], "length", 0),  # over max_frame_size
    ],
    ids=["first-byte", "unknown-type", "negative-length", "over-max"],
)
def test_the_first_byte_that_is_no_frame_is_one_undecoded_record_then_raw_bytes(bad: bytes, field: str, at: int) -> None:
    d = describer(1 << 20)
    got = d.feed(HELLO + bad)
    assert [g.type for g in got] == ["Hello", UNDECODED]
    rest = got[1]
    assert rest.offset == len(HELLO) and rest.data == bad and rest.frame is None
    assert rest.error is not None and rest.error.field == field and rest.error.offset == len(HELLO) + at
    assert rest.fields == {"error": str(rest.error)}
    more = d.feed(HELLO)
    assert [(m.type, m.offset, m.data, m.error) for m in more] == [(UNDECODED, len(HELLO) + len(bad), HELLO, None)]
    assert d.held() == 0 and d.end() == []


def test_a_first_byte_that_starts_no_command_is_undecoded_at_once() -> None:
    # every type code is -127..100 (§1): a proxy need not hold bytes to know 0x12 starts none
    d = describer(BIG)
    got = d.feed(HELLO + b"\x12")
    assert [g.type for g in got] == ["Hello", UNDECODED] and d.held() == 0
    assert got[1].error is not None and (got[1].error.field, got[1].error.offset) == ("type", len(HELLO))
    assert "0x12" in got[1].error.reason


def test_a_payload_that_does_not_decode_is_one_frame_with_the_codecs_error() -> None:
    # SetupAppend whose segment string claims 0x40 bytes, inside a frame of the same length
    bad = SETUP[:32] + b"\x00\x40" + SETUP[34:]
    got = describer(BIG).feed(HELLO + bad + HELLO)
    assert [g.type for g in got] == ["Hello", "SetupAppend", "Hello"]
    frame = got[1]
    assert frame.frame is None and frame.error is not None
    assert (frame.error.frame, frame.error.field, frame.error.offset) == ("SetupAppend", "segment", len(HELLO) + 32)
    assert frame.fields["type"] == 1 and frame.fields["length"] == len(SETUP) - 8
    assert "field segment" in frame.fields["error"] and frame.offset == len(HELLO)


def test_an_inner_command_at_the_top_level_is_described_where_it_stands() -> None:
    event = b"\x00\x00\x00\x00\x00\x00\x00\x02hi"
    (d,) = describer(BIG).feed(event)
    assert d.type == "Event" and d.error is None and d.frame.data == b"hi"


# --------------------------------------------------------------------------- (d) layout


def _codec_value(cmd: Any, name: str, raw: bytes) -> Any:
    if name == "type":
        return type(cmd).TYPE
    if name == "length":
        return len(raw) - 8
    value = getattr(cmd, name)
    if isinstance(value, uuid.UUID):
        return value.bytes
    return int(value) if isinstance(value, bool) else value


@pytest.mark.parametrize("v", COMMANDS, ids=[v["name"] for v in COMMANDS])
def test_the_layout_reads_what_the_codec_decoded(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    d = _one(raw)
    frame = LAYOUT.frames[d.type]
    assert len(raw) >= frame.min_size == max(f.offset + f.size for f in frame.fields)
    read = LAYOUT.read(d.type, raw)
    assert set(read) == {f.name for f in frame.fields}
    for name, value in read.items():
        if not (name == "length" and d.type == "Padding"):  # Padding's own field is its length
            assert value == _codec_value(d.frame, name, raw), name
        assert d.fields[name] == (str(uuid.UUID(bytes=value)) if isinstance(value, bytes) else value) or isinstance(
            d.fields[name], bool
        )


def test_every_command_the_codec_knows_has_a_layout_entry() -> None:
    assert [cls.NAME for cls in CURRENT.commands.values()] == list(LAYOUT.frames)
    assert LAYOUT.byte_order == "big" and "§2.4" in LAYOUT.notes and "Event" in LAYOUT.notes
    assert LAYOUT.spans("DataAppended") == {"type": (0, 4), "length": (4, 4), "writer_id": (8, 16), "event_number": (24, 8)}
    assert LAYOUT.spans("SetupAppend") == {"type": (0, 4), "length": (4, 4), "request_id": (8, 8), "writer_id": (16, 16)}
