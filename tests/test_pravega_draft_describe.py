"""The 2017 draft's describer and layout (refwire.pravega.draft2017.describe;
specs/pravega-draft-2017/README.md §1-§5): every vector frame and partial-message
part is described with its type and fields, any split describes the same, the
codec's errors are located as the spec's error vectors say, and the layout reads
what the codec decodes."""

from __future__ import annotations

import itertools
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from describing import split_invariant
from hypothesis import given, settings
from hypothesis import strategies as st

from refwire.describe import UNDECODED, Described
from refwire.pravega.draft2017.describe import LAYOUT, describer
from refwire.pravega.draft2017.frames import DRAFT

VECTORS = Path(__file__).resolve().parent.parent / "specs" / "pravega-draft-2017" / "vectors"
FRAMES = json.loads((VECTORS / "frames.json").read_text())["vectors"]
PARTIALS = json.loads((VECTORS / "partials.json").read_text())["vectors"]
ERRORS = {v["name"]: v for v in json.loads((VECTORS / "errors.json").read_text())["vectors"]}
BIG = 1 << 24


def _one(raw: bytes) -> Described:
    d = describer(BIG)
    got = d.feed(raw)
    assert len(got) == 1 and d.held() == 0 and d.end() == []
    return got[0]


def _same(value: Any, want: Any) -> bool:
    if isinstance(value, bytes):
        return bool(value.hex() == want)
    if isinstance(value, uuid.UUID):
        return bool(str(value) == want)
    return bool(value == want)


# --------------------------------------------------------------------------- (a) vectors


@pytest.mark.parametrize("v", FRAMES, ids=[v["name"] for v in FRAMES])
def test_every_vector_frame_is_described_with_its_type_and_fields(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    d = _one(raw)
    assert (d.type, d.offset, d.data, d.error) == (v["command"], 0, raw, None)
    assert DRAFT.commands[d.fields["type"]].NAME == v["command"]
    # by name, BeginAppendBlock's own length field shadows the header's (as the proxy has always had it)
    assert d.fields["length"] == v["fields"].get("length", len(raw) - 8)
    for name, want in v["fields"].items():
        value = getattr(d.frame, name)
        assert _same(value, want), name
        if not isinstance(value, bytes):
            assert d.fields[name] == want, name


@pytest.mark.parametrize("v", PARTIALS, ids=[v["name"] for v in PARTIALS])
def test_partial_message_parts_are_described_as_parts(v: dict[str, Any]) -> None:
    d = describer(BIG)
    got = d.feed(bytes.fromhex(v["hex"]))
    parts = [g for g in got if g.type == "PartialMessage"]
    assert [(g.fields["part"], g.frame.data.hex()) for g in parts] == [(p["part"], p["data"]) for p in v["parts"]]
    assert all(g.error is None for g in got)


# --------------------------------------------------------------------------- (b) splits

TOP = [bytes.fromhex(v["hex"]) for v in FRAMES]


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


# --------------------------------------------------------------------------- (c) hostile

#: error vectors the codec finds in one frame: (name, undecoded?, field, offset as the vector says)
CODEC_ERRORS = [
    ("unknown-code-8", True),
    ("unknown-code-current-hello", True),
    ("unknown-code-after-keep-alive", True),
    ("negative-length", True),
    ("setup-append-truncated-connection-id", False),
    ("setup-append-segment-past-frame", False),
    ("setup-append-trailing-byte", False),
    ("begin-append-block-missing-length", False),
    ("segment-read-missing-end-of-segment", False),
    ("data-appended-truncated-ack-level", False),
    ("partial-message-empty-payload", False),
]


@pytest.mark.parametrize(("name", "undecoded"), CODEC_ERRORS, ids=[n for n, _ in CODEC_ERRORS])
def test_the_codecs_errors_are_located_as_the_vectors_say(name: str, undecoded: bool) -> None:
    v = ERRORS[name]
    before = TOP[0]  # a frame first: offsets are the stream's
    raw = before + bytes.fromhex(v["hex"])
    d = describer(BIG)
    got = d.feed(raw)
    bad = got[-1]
    assert got[0].data == before and bad.error is not None
    assert (bad.error.field, bad.error.offset) == (v["expect"]["field"], len(before) + v["expect"]["offset"])
    if undecoded:  # no frame: the rest of the direction is raw bytes
        assert bad.type == UNDECODED and bad.frame is None and bad.data == raw[bad.offset :]
        assert [(m.type, m.error) for m in d.feed(b"\x00")] == [(UNDECODED, None)]
    else:  # a frame whose payload does not decode: the next one is described
        assert bad.type != UNDECODED and bad.frame is None and bad.data == raw[bad.offset :]
        assert "error" in bad.fields
        assert [m.type for m in d.feed(TOP[0])] == [FRAMES[0]["command"]]


def test_a_truncated_stream_is_held_and_end_reports_it() -> None:
    v = ERRORS["eof-inside-payload"]
    raw = bytes.fromhex(v["hex"])
    d = describer(BIG)
    assert d.feed(raw) == [] and d.held() == len(raw)
    (end,) = d.end()
    assert (end.type, end.offset, end.data) == (UNDECODED, 0, raw)
    assert end.error is not None and end.error.field == "(end)" and end.error.offset == len(raw)


# --------------------------------------------------------------------------- (d) layout


@pytest.mark.parametrize("v", FRAMES, ids=[v["name"] for v in FRAMES])
def test_the_layout_reads_what_the_codec_decoded(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    d = _one(raw)
    frame = LAYOUT.frames[d.type]
    assert len(raw) >= frame.min_size == max(f.offset + f.size for f in frame.fields)
    for f in frame.fields:  # by position: BeginAppendBlock's own ``length`` follows the header's
        codec = (type(d.frame).TYPE, len(raw) - 8)[f.offset // 4] if f.offset < 8 else getattr(d.frame, f.name)
        if isinstance(codec, uuid.UUID):
            codec = codec.bytes
        assert f.read(raw, LAYOUT.byte_order) == (int(codec) if isinstance(codec, bool) else codec), f.name


def test_every_command_the_codec_knows_has_a_layout_entry() -> None:
    assert [cls.NAME for cls in DRAFT.commands.values()] == list(LAYOUT.frames)
    assert "PartialMessage" in LAYOUT.notes and "(trailing)" in LAYOUT.notes
    begin = LAYOUT.frames["BeginAppendBlock"]
    assert [(f.name, f.offset, f.size) for f in begin.fields] == [
        ("type", 0, 4), ("length", 4, 4), ("connection_id", 8, 16), ("connection_offset", 24, 8), ("length", 32, 4),
    ]
    assert LAYOUT.spans("BeginAppendBlock")["length"] == (32, 4)  # by name, the command's own field (as the proxy has it)
