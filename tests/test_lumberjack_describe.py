"""The Lumberjack describer and layout (refwire.lumberjack.describe, specs/lumberjack/README.md §2):
every vector frame described with its type and fields, the same at any split,
one undecoded record with the codec's error at the first bad byte, and a
layout that reads from the bytes what the codec decodes."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

from describing import split_invariant
from hypothesis import given, settings
from hypothesis import strategies as st

from refwire.describe import UNDECODED, Described
from refwire.errors import LimitExceeded, ProtocolError
from refwire.lumberjack.describe import LAYOUT, describe_compressed, describer
from refwire.lumberjack.frames import TYPE_NAMES, Ack, Compressed, DataFrame, JsonFrame, Window

VECTOR_DIR = Path(__file__).resolve().parents[1] / "specs" / "lumberjack" / "vectors"
VECTORS = [v for f in sorted(VECTOR_DIR.glob("*.json")) for v in json.loads(f.read_text())["vectors"]]
FRAME_VECTORS = [v for v in VECTORS if "frames" in v]
ERROR_VECTORS = [v for v in VECTORS if "error" in v]
BIG = 1 << 20


def describe(data: bytes, *, chunks: list[bytes] | None = None, strict: bool = False, end: bool = True) -> list[Described]:
    d = describer(BIG, strict=strict)
    out = [x for c in (chunks if chunks is not None else [data]) for x in d.feed(c)]
    return out + d.end() if end else out


def check_frame(d: Described, want: dict[str, Any]) -> None:
    """``d`` is the vector's frame ``want`` (its type and every field it lists)."""
    assert d.type == want["type"] and d.fields["version"] == want["version"]
    f = d.frame
    if "count" in want:
        assert d.fields["count"] == want["count"] == f.count
    if "seq" in want:
        assert d.fields["seq"] == want["seq"] == f.seq
    if "json" in want:
        assert json.loads(f.payload) == want["json"] and d.fields["len"] == len(f.payload)
    if "json_text" in want:
        assert f.payload == want["json_text"].encode()
    if "pairs" in want:
        assert [[k.decode(), v.decode()] for k, v in f.pairs] == want["pairs"] and d.fields["pairs"] == len(want["pairs"])
    if "inflated_frames" in want:
        assert "inner_error" not in d.fields and d.fields["inflated_len"] == len(zlib.decompress(f.payload))
        assert len(d.inner) == len(want["inflated_frames"])
        for g, w in zip(d.inner, want["inflated_frames"], strict=True):
            check_frame(g, w)


def walk(ds: Any) -> list[Described]:
    """Every described frame, inner frames included."""
    return [x for d in ds for x in (d, *walk(d.inner))]


# --------------------------------------------------------------------------- (a) the vectors


def test_every_vector_frame_is_described_with_its_type_and_fields() -> None:
    assert len(FRAME_VECTORS) >= 40
    for v in FRAME_VECTORS:
        data = bytes.fromhex(v["hex"])
        got = describe(data)
        assert len(got) == len(v["frames"]), v["name"]
        offset = 0
        for d, want in zip(got, v["frames"], strict=True):
            check_frame(d, want)
            assert d.offset == offset and d.data == data[offset : offset + len(d.data)] and d.error is None
            offset += len(d.data)
        assert offset == len(data)


def test_error_vectors_describe_their_frames_and_the_codec_errors_where_the_vector_says() -> None:
    codec = 0
    for v in ERROR_VECTORS:
        data = bytes.fromhex(v["hex"])
        strict = describe(data, strict=True)
        for d, want in zip(strict, v["frames_before_error"], strict=False):
            check_frame(d, want)
        if v["error"]["layer"] != "codec":
            continue
        codec += 1
        n = len(v["frames_before_error"])
        assert [d.type for d in strict] == [d.type for d in strict[:n]] + [UNDECODED], v["name"]
        bad = strict[n]
        assert bad.error is not None and bad.data == data[bad.offset :], v["name"]
        want = v["error"]
        assert (bad.error.field, bad.error.offset, bad.error.frame) == (want["field"], want["offset"], want["frame"]), v["name"]
        assert isinstance(bad.error, LimitExceeded) == want["limit"]
    assert codec >= 10


# --------------------------------------------------------------------------- (b) any split


_PIECES = [bytes.fromhex(v["hex"]) for v in FRAME_VECTORS] + [
    Compressed.wrap(Window(1).encode() + JsonFrame(5, b'{"a":1}').encode() + b"2J\0\0").encode(),  # held inside
    Compressed(b"not zlib").encode(),
    b"2X\0\0\0\1",  # no frame type
    b"3",  # no version
]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(_PIECES), min_size=1, max_size=6),
    st.binary(max_size=12),
    st.lists(st.integers(min_value=0, max_value=10_000), max_size=8),
    st.booleans(),
)
def test_any_split_describes_the_same_as_one_chunk(pieces: list[bytes], tail: bytes, cuts: list[int], strict: bool) -> None:
    data = b"".join(pieces) + tail
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    whole = describe(data, strict=strict)
    assert split_invariant(describe(data, chunks=chunks, strict=strict)) == split_invariant(whole)
    assert [d.type for d in whole].count(UNDECODED) <= 1
    assert b"".join(d.data for d in whole) == data
    assert [d.offset for d in whole] == [sum(len(d.data) for d in whole[:k]) for k in range(len(whole))]


# --------------------------------------------------------------------------- (c) hostile


W2 = Window(2).encode()
J1 = JsonFrame(1, b'{"a":1}').encode()


def test_a_corrupted_stream_gives_one_undecoded_record_with_the_codec_error_then_bytes() -> None:
    d = describer(BIG)
    got = d.feed(W2 + J1 + b"2Z\0\0\0\1" + J1)
    assert [x.type for x in got] == ["W", "J", UNDECODED]
    bad = got[-1]
    assert bad.offset == 6 + len(J1) and bad.data == b"2Z\0\0\0\1" + J1
    assert isinstance(bad.error, ProtocolError) and (bad.error.field, bad.error.offset) == ("type", 6 + len(J1) + 1)
    assert bad.fields == {"error": str(bad.error)}
    later = d.feed(W2)
    assert [(x.type, x.offset, x.data, x.error, x.fields) for x in later] == [(UNDECODED, bad.offset + len(bad.data), W2, None, {})]
    assert d.held() == 0 and d.end() == []

    v = describer(BIG)
    (only,) = v.feed(b"\x00" + W2)
    assert only.type == UNDECODED and only.error is not None and (only.error.field, only.error.offset) == ("version", 0)


def test_a_length_over_max_frame_size_is_the_error() -> None:
    d = describer(64)
    got = d.feed(W2 + b"2J\0\0\0\1\0\0\0\x40" + b"{}" * 32)
    assert [x.type for x in got] == ["W", UNDECODED]
    err = got[1].error
    assert isinstance(err, LimitExceeded) and (err.field, err.offset, err.frame) == ("len", 12, "J")


def test_a_truncated_stream_holds_the_frame_and_end_reports_it() -> None:
    d = describer(BIG)
    got = d.feed(W2 + J1[:9])
    assert [x.type for x in got] == ["W"] and d.held() == 9
    (held,) = d.end()
    assert held.type == UNDECODED and held.offset == 6 and held.data == J1[:9]
    assert held.error is not None and (held.error.field, held.error.offset, held.error.frame) == ("(end)", 15, "J")
    assert d.held() == 0 and d.end() == []
    assert [(x.type, x.data, x.error) for x in d.feed(b"more")] == [(UNDECODED, b"more", None)]


def test_strict_refuses_what_a_conformant_peer_refuses() -> None:
    d1 = b"1D\0\0\0\1\0\0\0\0"
    assert [x.type for x in describe(W2 + b"2" + d1[1:])] == ["W", "D"]  # lenient: either version byte
    strict = describe(W2 + b"2" + d1[1:], strict=True)
    assert [x.type for x in strict] == ["W", UNDECODED]
    assert strict[1].error is not None and (strict[1].error.field, strict[1].error.offset) == ("version", 6)
    bad_json = JsonFrame(1, b"[1]").encode()
    assert [x.type for x in describe(bad_json)] == ["J"]
    (u,) = describe(bad_json, strict=True)
    assert u.error is not None and (u.error.field, u.error.offset) == ("json", 10)


def test_a_compressed_frame_that_does_not_open_keeps_no_inner_frames_and_says_why() -> None:
    inner = W2 + J1
    (ok,) = describe(Compressed.wrap(inner).encode())
    assert [x.type for x in ok.inner] == ["W", "J"] and [x.offset for x in ok.inner] == [0, 6]
    assert ok.fields["inflated_len"] == len(inner) and "inner_error" not in ok.fields

    at = 6 + len(J1)  # the C's offset
    (_, _, c) = describe(W2 + J1 + Compressed(b"not zlib").encode())
    assert c.type == "C" and c.inner == () and "inflated_len" not in c.fields
    err = c.fields["inner_error"]
    assert (err.field, err.offset, err.frame) == ("payload", at + 6, "C") and c.fields["inner_before_error"] == ()

    (held,) = describe(Compressed.wrap(inner + J1[:4]).encode())
    err = held.fields["inner_error"]
    assert held.inner == () and held.fields["inner_held"] == 4 and (err.field, err.offset) == ("(end)", len(inner) + 4)
    assert [x.type for x in held.fields["inner_before_error"]] == ["W", "J"]

    (bad,) = describe(Compressed.wrap(inner + b"2Q\0\0\0\0").encode())
    err = bad.fields["inner_error"]
    assert bad.inner == () and (err.field, err.offset) == ("type", len(inner) + 1) and "inner_held" not in bad.fields


def test_a_describer_that_does_not_open_compressed_frames_reads_their_header_only() -> None:
    c = Compressed.wrap(W2 + J1).encode()
    d = describer(BIG, open_compressed=False)
    (only,) = d.feed(W2 + c)[1:]
    assert (only.type, only.offset, only.data, only.inner) == ("C", 6, c, ())
    assert only.fields == {"version": "2", "len": len(c) - 6}
    # a payload that would not open is no error when it is not opened
    (bad,) = describer(BIG, open_compressed=False).feed(Compressed(b"not zlib").encode())
    assert bad.type == "C" and bad.error is None and "inner_error" not in bad.fields


def test_compressed_frames_open_four_deep_and_no_deeper() -> None:
    body = W2 + J1
    for _ in range(5):
        body = Compressed.wrap(body).encode()
    (c,) = describe(body)
    chain = [c]
    while chain[-1].inner:
        (nxt,) = chain[-1].inner
        chain.append(nxt)
    assert [x.type for x in chain] == ["C"] * 5
    err = chain[-1].fields["inner_error"]
    assert isinstance(err, LimitExceeded) and (err.field, err.offset) == ("payload", 6)
    assert all("inner_error" not in x.fields for x in chain[:-1])
    inner, why = describe_compressed(chain[-1].frame.payload, BIG)
    assert [x.type for x in inner] == ["W", "J"] and why == {"inflated_len": len(W2 + J1)}


# --------------------------------------------------------------------------- (d) the layout agrees with the codec


def _codec_values(d: Described) -> dict[str, Any]:
    """What the codec decoded, by the spec's names."""
    f = d.frame
    out: dict[str, Any] = {"version": chr(f.version), "type": TYPE_NAMES[f.encode()[1]]}
    if isinstance(f, Window):
        out["count"] = f.count
    elif isinstance(f, Ack):
        out["seq"] = f.seq
    elif isinstance(f, JsonFrame):
        out |= {"seq": f.seq, "len": len(f.payload)}
    elif isinstance(f, DataFrame):
        out |= {"seq": f.seq, "pairs": len(f.pairs)}
    else:
        assert isinstance(f, Compressed)
        out["len"] = len(f.payload)
    return out


def test_the_layout_reads_from_every_vector_frame_what_the_codec_decoded() -> None:
    frames = [d for v in FRAME_VECTORS for d in walk(describe(bytes.fromhex(v["hex"])))]
    assert {d.type for d in frames} == set(TYPE_NAMES.values())
    for d in frames:
        layout = LAYOUT.frames[d.type]
        assert len(d.data) >= layout.min_size
        read = LAYOUT.read(d.type, d.data)
        assert read == _codec_values(d) and list(read) == [f.name for f in layout.fields]
        assert d.fields | {"type": d.type} == read | {k: v for k, v in d.fields.items() if k not in read}


def test_every_frame_type_the_codec_knows_has_a_layout() -> None:
    assert set(LAYOUT.frames) == set(TYPE_NAMES.values()) == {"W", "D", "J", "C", "A"}
    assert LAYOUT.byte_order == "big"
    for letter, layout in LAYOUT.frames.items():
        assert layout.type == letter and layout.fields[:2] == LAYOUT.frames["W"].fields[:2]
        ends = [f.offset + f.size for f in layout.fields]
        assert [f.offset for f in layout.fields] == [0, *ends[:-1]] and layout.min_size == ends[-1]
    for word in ("klen", "vlen", "json[len]", "zlib", "inner frames", "nested"):
        assert word in LAYOUT.notes
