"""Lumberjack codec limits at the line, error locations, and decoders that never spin
(specs/lumberjack/README.md §2, §4).

Every frame limit is tested at exactly ``max_frame_size`` and one byte past it,
with the frame whole and split at every byte; the refusal names its frame,
field and stream offset.  Decoding runs under a signal timeout: a decoder
that loops on a frame at the line fails the test in seconds, not after the
suite's 120 s.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refwire.errors import LimitExceeded, LocalProtocolError, ProtocolError, RemoteLimitExceeded
from refwire.lumberjack.connection import EVENT_COST, ServerConnection, memory_caps
from refwire.lumberjack.events import Batch
from refwire.lumberjack.frames import (
    D_PAIR_HELD,
    DEFAULT_LIMITS,
    V1,
    V2,
    Ack,
    Compressed,
    DataFrame,
    FrameDecoder,
    JsonFrame,
    Window,
    decode_all,
    encode_ack,
    encode_data,
    encode_event,
    encode_window,
    frame_size,
    held_bytes,
    inflate,
    inflate_frames,
    next_seq,
    scan_acks,
)
from refwire.wire import Limits

pytestmark = pytest.mark.timeout(10, method="signal")

PREFIX = Window(1).encode()  # 6 bytes before the frame under test: offsets are stream offsets


def u32(v: int) -> bytes:
    return struct.pack(">I", v)


def limits(max_frame: int) -> Limits:
    return Limits(max_frame_size=max_frame, max_decompressed_size=1 << 20)


def decode_split(data: bytes, lim: Limits, step: int, **kw: bool) -> list[object]:
    dec = FrameDecoder(lim, **kw)
    out: list[object] = []
    for i in range(0, len(data), step):
        dec.feed(data[i : i + step])
        out += dec.frames()
    assert dec.buffered == 0
    return out


def refused(data: bytes, lim: Limits, step: int | None = None, **kw: bool) -> ProtocolError:
    dec = FrameDecoder(lim, **kw)
    with pytest.raises(ProtocolError) as info:
        for i in range(0, len(data), step or len(data)):
            dec.feed(data[i : i + (step or len(data))])
            dec.frames()
    return info.value


def where(e: ProtocolError) -> tuple[object, ...]:
    return (type(e).__name__, e.frame, e.field, e.offset)


# --------------------------------------------------------------------------- J


@pytest.mark.parametrize("step", [1, 3, 10, 10_000])
def test_j_frame_at_the_limit_and_one_past(step: int) -> None:
    payload = b'{"k":"' + b"v" * 84 + b'"}'  # 92 bytes: a 102-byte frame
    frame = JsonFrame(7, payload).encode()
    assert len(frame) == 102
    (got,) = decode_split(PREFIX + frame, limits(102), step)[1:]
    assert isinstance(got, JsonFrame) and (got.seq, got.payload, got.data) == (7, payload, {"k": "v" * 84})
    e = refused(PREFIX + frame, limits(101), step)
    assert where(e) == ("LimitExceeded", "J", "len", 6 + 6)
    assert "J frame of 102 bytes exceeds the limit max_frame_size=101" in e.reason


def test_j_header_alone_is_refused_one_past_the_limit() -> None:
    e = refused(PREFIX + b"2J" + u32(1) + u32(92), limits(101))
    assert where(e) == ("LimitExceeded", "J", "len", 12)
    dec = FrameDecoder(limits(102))
    dec.feed(PREFIX + b"2J" + u32(1) + u32(92))
    assert len(dec.frames()) == 1 and dec.buffered == 10  # waits for the payload


def test_j_length_zero_and_one() -> None:
    e = refused(PREFIX + b"2J" + u32(1) + u32(0), DEFAULT_LIMITS)
    assert where(e) == ("LocalProtocolError", "J", "len", 12)
    e = refused(PREFIX + b"2J" + u32(1) + u32(1) + b"7", DEFAULT_LIMITS)
    assert where(e) == ("LocalProtocolError", "J", "json", 16) and "must be a JSON object, got int" in e.reason
    (f,) = decode_split(b"2J" + u32(1) + u32(1) + b"7", DEFAULT_LIMITS, 100, validate_json=False)
    assert isinstance(f, JsonFrame) and f.payload == b"7" and f.data is None


@pytest.mark.parametrize("step", [1, 10_000])
def test_j_version_byte(step: int) -> None:
    frame = b"1J" + u32(3) + u32(2) + b"{}"
    e = refused(PREFIX + frame, DEFAULT_LIMITS, step)
    assert where(e) == ("LocalProtocolError", "J", "version", 6)
    (f,) = decode_split(frame, DEFAULT_LIMITS, step, strict_versions=False)
    assert isinstance(f, JsonFrame) and (f.version, f.seq, f.data) == (V1, 3, {})
    e = refused(PREFIX + b"3J" + u32(3) + u32(2) + b"{}", DEFAULT_LIMITS, step)
    assert where(e) == ("LocalProtocolError", None, "version", 6)


def test_j_invalid_json_offset() -> None:
    e = refused(PREFIX + PREFIX + b"2J" + u32(1) + u32(3) + b"{x}", DEFAULT_LIMITS)
    assert where(e) == ("LocalProtocolError", "J", "json", 22) and "not valid JSON" in e.reason


# --------------------------------------------------------------------------- C, W, A


@pytest.mark.parametrize("step", [1, 6, 10_000])
def test_c_frame_at_the_limit_and_one_past(step: int) -> None:
    frame = Compressed(b"z" * 94).encode()  # 100 bytes
    (got,) = decode_split(PREFIX + frame, limits(100), step)[1:]
    assert got == Compressed(b"z" * 94)
    e = refused(PREFIX + frame, limits(99), step)
    assert where(e) == ("LimitExceeded", "C", "len", 8)
    assert "C frame of 100 bytes exceeds the limit max_frame_size=99" in e.reason


def test_window_and_ack_frames() -> None:
    data = Window(5, V1).encode() + Ack(0xFFFFFFFF).encode() + Window(0).encode()
    assert decode_split(data, DEFAULT_LIMITS, 1) == [Window(5, V1), Ack(0xFFFFFFFF), Window(0)]
    e = refused(PREFIX + b"2Z", DEFAULT_LIMITS)
    assert where(e) == ("LocalProtocolError", None, "type", 7) and "unknown frame type 0x5a" in e.reason


def test_incomplete_frames_wait() -> None:
    for partial in (b"2", b"2W\x00\x00\x00", b"2J\x00\x00\x00\x01\x00\x00\x00", b"2C\x00\x00\x00", b"2C\x00\x00\x00\x02z"):
        dec = FrameDecoder()
        dec.feed(partial)
        assert dec.frames() == [] and dec.buffered == len(partial)
        f, err = dec.frames_before_error()
        assert (f, err) == ([], None)
    dec = FrameDecoder()
    dec.feed(b"2J")
    assert dec.pending_frame_name() == "J"
    dec = FrameDecoder()
    dec.feed(b"2")
    assert dec.pending_frame_name() is None


def test_frames_before_error_returns_both() -> None:
    dec = FrameDecoder()
    dec.feed(Window(1).encode() + Ack(3).encode() + b"9X")
    frames, err = dec.frames_before_error()
    assert frames == [Window(1), Ack(3)]
    assert err is not None and (err.field, err.offset) == ("version", 12)
    dec = FrameDecoder()
    dec.feed(Window(1).encode())
    assert dec.frames_before_error() == ([Window(1)], None)
    assert dec.buffered == 0 and dec.offset == 6


# --------------------------------------------------------------------------- D


def d_frame(pairs: list[tuple[bytes, bytes]], seq: int = 1) -> bytes:
    return DataFrame(seq, tuple(pairs)).encode()


@pytest.mark.parametrize("step", [1, 4, 10_000])
def test_d_frame_at_the_limit_and_one_past_in_the_value(step: int) -> None:
    frame = d_frame([(b"ab", b"cd"), (b"key", b"v" * 71)])  # 10 + 12 + 82 = 104
    assert len(frame) == 104
    (got,) = decode_split(PREFIX + frame, limits(104), step)[1:]
    assert isinstance(got, DataFrame) and got.pairs == ((b"ab", b"cd"), (b"key", b"v" * 71))
    e = refused(PREFIX + frame, limits(103), step)
    assert where(e) == ("LimitExceeded", "D", "vlen", 6 + 10 + 12 + 4 + 3)
    assert "D value of 71 bytes" in e.reason


@pytest.mark.parametrize("step", [1, 4, 10_000])
def test_d_frame_one_past_the_limit_in_the_key(step: int) -> None:
    frame = d_frame([(b"ab", b"cd"), (b"k" * 79, b"")])  # 10 + 12 + 87 = 109; the key ends at 105
    assert decode_split(frame, limits(109), step)[0] == DataFrame(1, ((b"ab", b"cd"), (b"k" * 79, b"")))
    e = refused(PREFIX + frame, limits(104), step)
    assert where(e) == ("LimitExceeded", "D", "klen", 6 + 10 + 12)
    # the key alone fits exactly (frame through the key = 105): the value length is what goes over
    e = refused(PREFIX + frame, limits(105), step)
    assert where(e) == ("LimitExceeded", "D", "vlen", 6 + 10 + 12 + 4 + 79)


def test_d_frame_pair_count_at_the_line() -> None:
    # each pair is held as D_PAIR_HELD (32) bytes or more: 10 + 32 * 11 = 362 fits 362,
    # not 361; refused from the header alone (a frame of empty pairs, 8 bytes each on the
    # wire, would otherwise be held as ten times its size)
    assert D_PAIR_HELD == 32
    head = b"1D" + u32(1) + u32(11)
    dec = FrameDecoder(limits(362))
    dec.feed(head)
    assert dec.frames() == []
    e = refused(PREFIX + head, limits(361))
    assert where(e) == ("LimitExceeded", "D", "pairs", 6 + 6)
    frame = d_frame([(b"", b"")] * 11)
    assert len(frame) == 98 and decode_split(frame, limits(362), 1) == [DataFrame(1, ((b"", b""),) * 11)]


def test_d_frame_version_and_empty() -> None:
    e = refused(PREFIX + b"2D" + u32(1) + u32(0), DEFAULT_LIMITS)
    assert where(e) == ("LocalProtocolError", "D", "version", 6)
    (f,) = decode_split(b"2D" + u32(1) + u32(0), DEFAULT_LIMITS, 1, strict_versions=False)
    assert isinstance(f, DataFrame) and (f.version, f.seq, f.pairs) == (V2, 1, ())
    assert decode_split(b"1D" + u32(9) + u32(0), DEFAULT_LIMITS, 100) == [DataFrame(9, ())]


def test_two_d_frames_trickling_do_not_mix_their_walks() -> None:
    a = d_frame([(b"k1", b"v1"), (b"k2", b"v" * 30)], seq=1)
    b = d_frame([(b"x" * 20, b"y"), (b"z", b"")], seq=2)
    got = decode_split(a + b + a, DEFAULT_LIMITS, 1)
    assert got == [DataFrame(1, ((b"k1", b"v1"), (b"k2", b"v" * 30))), DataFrame(2, ((b"x" * 20, b"y"), (b"z", b""))), got[0]]
    got = decode_split(a + b, DEFAULT_LIMITS, 7)
    assert [f.seq for f in got] == [1, 2]  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- never spin


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["J", "C", "D"]),
    size=st.integers(20, 200),
    over=st.integers(-2, 2),
    step=st.integers(1, 50),
)
def test_frames_near_the_limit_end_quickly(kind: str, size: int, over: int, step: int) -> None:
    """Whatever the frame's size against the limit and however it is split,
    decoding ends with the frame or an error, doing work proportional to the bytes."""
    if kind == "J":
        frame = JsonFrame(1, b'"' + b"a" * (size - 12) + b'"').encode()
    elif kind == "C":
        frame = Compressed(b"c" * (size - 6)).encode()
    else:
        size = max(size, 10 + D_PAIR_HELD + 2)  # a pair is held as 32 bytes or more
        frame = d_frame([(b"k", b"v" * (size - 19))])
    lim = limits(len(frame) + over)
    dec = FrameDecoder(lim, validate_json=False)
    calls = 0
    try:
        for i in range(0, len(frame), step):
            dec.feed(frame[i : i + step])
            calls += 1
            dec.frames()
        assert over >= 0 and dec.buffered == 0
    except LimitExceeded as e:
        assert over < 0 and e.field in ("len", "vlen", "pairs")
    assert calls <= len(frame)


# --------------------------------------------------------------------------- inflate


def test_inflate_at_the_limit_and_one_past() -> None:
    z = zlib.compress(b"q" * 1000)
    assert inflate(z, max_size=1000) == b"q" * 1000
    with pytest.raises(LimitExceeded) as info:
        inflate(z, max_size=999, offset=40)
    assert where(info.value) == ("LimitExceeded", "C", "payload", 40)
    assert "max_decompressed_size=999" in info.value.reason
    assert inflate(zlib.compress(b""), max_size=0) == b""


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"not zlib", "bad zlib stream"),
        (zlib.compress(b"abc")[:-2], "truncated"),
        (zlib.compress(b"abc") + b"xyz", "3 bytes after the end of the zlib stream"),
        (b"", "truncated"),
    ],
)
def test_inflate_refusals_name_the_c_payload(payload: bytes, reason: str) -> None:
    with pytest.raises(LocalProtocolError) as info:
        inflate(payload, max_size=1000, offset=12)
    assert where(info.value) == ("LocalProtocolError", "C", "payload", 12) and reason in info.value.reason


def test_inflate_frames_inner_errors_and_budget() -> None:
    inner = JsonFrame(1, b"{}").encode() + JsonFrame(2, b'{"a":1}').encode()
    z = zlib.compress(inner)
    got = inflate_frames(z, offset=5)
    assert [f.seq for f in got] == [1, 2]  # type: ignore[union-attr]
    assert inflate_frames(z, budget=2 + 7) == got
    with pytest.raises(LimitExceeded) as info:
        inflate_frames(z, budget=2 + 6, offset=5)
    assert where(info.value) == ("LimitExceeded", "C", "payload", 5) and "max_batch_bytes" in info.value.reason
    bad = zlib.compress(JsonFrame(1, b"{}").encode() + b"2J" + u32(1) + u32(0))
    with pytest.raises(LocalProtocolError) as info2:
        inflate_frames(bad, offset=5)
    e = info2.value
    assert (e.frame, e.field, e.offset) == ("C>J", "len", 5) and "(at offset 18 of the inflated payload)" in e.reason
    short = zlib.compress(JsonFrame(1, b"{}").encode()[:-1])
    with pytest.raises(LocalProtocolError) as info3:
        inflate_frames(short, offset=5)
    e = info3.value
    assert (e.frame, e.field, e.offset) == ("C", "(end)", 5) and "11 bytes of an incomplete frame" in e.reason
    # an inner error is reported after the C's own checks: a truncated stream wins
    with pytest.raises(LocalProtocolError, match="truncated"):
        inflate_frames(bad[:-2])


def test_decode_all_incomplete_end() -> None:
    assert decode_all(Window(1).encode()) == [Window(1)]
    with pytest.raises(LocalProtocolError) as info:
        decode_all(Window(1).encode() + b"2W\x00")
    assert where(info.value) == ("LocalProtocolError", None, "(end)", 6) and "3 bytes of an incomplete frame" in info.value.reason


# --------------------------------------------------------------------------- acks and encoding


def test_scan_acks() -> None:
    data = encode_ack(1) + encode_ack(0xFFFFFFFF, V1)
    assert list(scan_acks(data)) == [(V2, 1, 0), (V1, 0xFFFFFFFF, 6)]
    assert list(scan_acks(data + b"2A\x00")) == [(V2, 1, 0), (V1, 0xFFFFFFFF, 6)]
    assert list(scan_acks(data + b"2")) == [(V2, 1, 0), (V1, 0xFFFFFFFF, 6)]
    with pytest.raises(LocalProtocolError) as info:
        list(scan_acks(data + b"3", base=100))
    assert (info.value.field, info.value.offset) == ("version", 112)
    with pytest.raises(LocalProtocolError) as info:
        list(scan_acks(data + b"1W", base=100))
    assert (info.value.field, info.value.offset) == ("type", 113)
    assert list(scan_acks(b"")) == []


def test_next_seq_wraps_and_skips_zero() -> None:
    assert next_seq(0) == 1
    assert next_seq(0xFFFFFFFE) == 0xFFFFFFFF
    assert next_seq(0xFFFFFFFF) == 1


def test_encode_window_exact_bytes() -> None:
    ev2 = [encode_event({"a": 1}, V2), encode_event(b'{"b":2}', V2)]
    plain = encode_window(V2, [7, 8], ev2)
    assert plain == Window(2).encode() + JsonFrame(7, b'{"a":1}').encode() + JsonFrame(8, b'{"b":2}').encode()
    packed = encode_window(V2, [7, 8], ev2, compression_level=6)
    body = JsonFrame(7, b'{"a":1}').encode() + JsonFrame(8, b'{"b":2}').encode()
    assert packed == Window(2).encode() + Compressed(zlib.compress(body, 6)).encode()
    ev1 = [encode_event("line one", V1), encode_event({"k": b"v", "n": 3}, V1)]
    assert ev1 == [((b"line", b"line one"),), ((b"k", b"v"), (b"n", b"3"))]
    v1 = encode_window(V1, [1, 2], ev1)
    assert v1 == Window(2, V1).encode() + d_frame([(b"line", b"line one")], 1) + d_frame([(b"k", b"v"), (b"n", b"3")], 2)
    assert encode_data(V1, 5, ev1[1]) == d_frame([(b"k", b"v"), (b"n", b"3")], 5)
    assert encode_data(V2, 5, b"{}") == JsonFrame(5, b"{}").encode()


def test_encode_event_shapes() -> None:
    assert encode_event("é", V2) == "é".encode()
    assert encode_event(bytearray(b"{}"), V2) == b"{}"
    assert encode_event({1: 2**70}, V2) == b'{"1":1180591620717411303424}'
    assert encode_event({"é": "ü"}, V1) == (("é".encode(), "ü".encode()),)
    with pytest.raises(LocalProtocolError) as info:
        encode_event(3, V2)
    assert info.value.frame == "J" and "got int" in info.value.reason
    with pytest.raises(LocalProtocolError) as info:
        encode_event(3, V1)
    assert info.value.frame == "D" and "got int" in info.value.reason


def test_sizes_and_held_bytes() -> None:
    j, c, d = JsonFrame(1, b"{}"), Compressed(b"xyz"), DataFrame(1, ((b"ab", b"c"), (b"", b"")))
    assert [frame_size(f) for f in (j, c, d, Window(1), Ack(1))] == [12, 9, 10 + 11 + 8, 6, 6]
    assert [len(f.encode()) for f in (j, c, d)] == [12, 9, 29]
    assert [held_bytes(f) for f in (j, c, d, Window(1), Ack(1))] == [2, 3, 3 + 2 * D_PAIR_HELD, 0, 0]


def test_constructors_check_ranges() -> None:
    for bad in (-1, 2**32):
        with pytest.raises(LocalProtocolError, match="u32") as info:
            Window(bad)
        assert info.value.field == "count"
        with pytest.raises(LocalProtocolError, match="u32"):
            Ack(bad)
    assert Window(2**32 - 1).count == 2**32 - 1
    with pytest.raises(LocalProtocolError) as info:
        Window(1, 0x33)
    assert info.value.field == "version"
    with pytest.raises(LocalProtocolError, match="only in version 2"):
        JsonFrame(1, b"{}", V1)
    with pytest.raises(LocalProtocolError, match="only in version 1"):
        DataFrame(1, (), V2)
    assert JsonFrame(1, b'{"a": 2}').fields() == {"a": 2}
    assert DataFrame(1, ((b"a", b"\xff"), (b"a", b"2"))).fields() == {"a": "2"}


# --------------------------------------------------------------------------- what the first run left


def test_constructor_errors_name_lumberjack() -> None:
    for make, field in (
        (lambda: Window(-1), "count"),
        (lambda: Ack(2**32), "seq"),
        (lambda: JsonFrame(-1, b"{}"), "seq"),
        (lambda: DataFrame(2**32, ()), "seq"),
    ):
        with pytest.raises(LocalProtocolError) as info:
            make()
        assert (info.value.protocol, info.value.field) == ("lumberjack", field)
    with pytest.raises(LocalProtocolError) as info:
        Ack(1, 0x30)
    e = info.value
    assert (e.protocol, e.field, e.reason) == ("lumberjack", "version", "version must be 0x31 ('1') or 0x32 ('2'), got 48")
    with pytest.raises(LocalProtocolError) as info:
        JsonFrame(1, b"{}", V1)
    e = info.value
    assert (e.reason, e.protocol, e.frame, e.field) == ("a J frame exists only in version 2", "lumberjack", "J", "version")
    with pytest.raises(LocalProtocolError) as info:
        DataFrame(1, (), V2)
    e = info.value
    assert (e.reason, e.protocol, e.frame, e.field) == ("a D frame exists only in version 1", "lumberjack", "D", "version")
    with pytest.raises(LocalProtocolError) as info:
        Window(1.5)  # type: ignore[arg-type]
    assert info.value.reason == "count must be a u32, got 1.5"


def test_event_encoding_fallbacks() -> None:
    # orjson refuses non-string keys: the standard library writes them, compact and unescaped
    assert encode_event({1: "é", 2: [3, 4]}, V2) == '{"1":"é","2":[3,4]}'.encode()
    assert encode_event({"n": 2**70, "s": "ü"}, V1) == ((b"n", b"1180591620717411303424"), (b"s", "ü".encode()))
    for bad, version, frame in ((3.5, V2, "J"), (None, V1, "D")):
        with pytest.raises(LocalProtocolError) as info:
            encode_event(bad, version)
        assert (info.value.protocol, info.value.frame) == ("lumberjack", frame)
    with pytest.raises(ValueError):
        encode_window(V2, [1, 2], [b"{}"])
    with pytest.raises(ValueError):
        encode_window(V1, [1], [((b"a", b"b"),), ((b"c", b"d"),)])
    body = JsonFrame(1, b"{}").encode()
    assert (
        encode_window(V2, [1], [b"{}"], compression_level=1) == Window(1).encode() + Compressed(zlib.compress(body, 1)).encode()
    )
    assert Compressed.wrap(b"x" * 300).payload == zlib.compress(b"x" * 300, 3)
    assert Compressed.wrap(b"x" * 300, level=9).payload == zlib.compress(b"x" * 300, 9)


def test_fields_decode_leniently() -> None:
    d = DataFrame(1, ((b"k\xff", b"v\xfe"),))
    assert d.fields() == {"k\ufffd": "v\ufffd"}
    (j,) = decode_split(JsonFrame(1, b'{"big": 18446744073709551616}').encode(), DEFAULT_LIMITS, 1000)
    assert isinstance(j, JsonFrame) and j.fields() is j.data  # the validated document, not parsed again


def test_inflate_steps_join_and_defaults() -> None:
    big = bytes(range(256)) * 1200  # 307 200 bytes: more than one 256 KiB step
    assert inflate(zlib.compress(big), max_size=len(big)) == big
    with pytest.raises(LocalProtocolError) as info:
        inflate(b"junk", max_size=10)
    assert info.value.offset == 0 and info.value.protocol == "lumberjack"
    with pytest.raises(LocalProtocolError) as info:
        inflate(zlib.compress(b"abc")[:-2], max_size=10)
    assert info.value.reason == "zlib stream is truncated (no end of stream)"


def test_inflate_frames_defaults_and_budget_across_steps() -> None:
    frames = JsonFrame(1, b'"' + b"a" * 200_000 + b'"').encode() + JsonFrame(2, b'"' + b"b" * 200_000 + b'"').encode()
    z = zlib.compress(frames)
    got = inflate_frames(z, validate_json=False, budget=400_004)
    assert [f.seq for f in got] == [1, 2]  # type: ignore[union-attr]
    with pytest.raises(LimitExceeded):
        inflate_frames(z, validate_json=False, budget=400_003)  # the budget counts both steps' frames
    with pytest.raises(LocalProtocolError) as info:  # validate_json defaults to True: '"aaa"' is not an object
        inflate_frames(z)
    assert info.value.offset == 0 and info.value.frame == "C>J"
    with pytest.raises(LocalProtocolError) as info:  # strict_versions defaults to True
        inflate_frames(zlib.compress(b"1J" + u32(1) + u32(2) + b"{}"))
    assert info.value.field == "version"
    with pytest.raises(LimitExceeded):  # the limits given are the decoder's
        inflate_frames(zlib.compress(JsonFrame(1, b"{}").encode()), Limits(max_frame_size=11, max_decompressed_size=100))
    with pytest.raises(LocalProtocolError) as info:
        inflate_frames(zlib.compress(Window(1).encode() + b"2W"), offset=9)
    e = info.value
    assert e.reason == "2 bytes of an incomplete frame at the end (at offset 6 of the inflated payload)"
    # an error about a C inside the C keeps its own name
    nested = Compressed(b"z" * 200).encode()
    with pytest.raises(LimitExceeded) as info2:
        inflate_frames(zlib.compress(nested), Limits(max_frame_size=100, max_decompressed_size=1000), offset=3)
    assert (info2.value.frame, info2.value.offset) == ("C", 3)


def test_decode_all_defaults() -> None:
    with pytest.raises(LocalProtocolError):
        decode_all(b"2J" + u32(1) + u32(1) + b"7")  # validate_json defaults to True
    with pytest.raises(LocalProtocolError):
        decode_all(b"1J" + u32(1) + u32(2) + b"{}")  # strict_versions defaults to True
    with pytest.raises(LimitExceeded):
        decode_all(JsonFrame(1, b"{}").encode(), Limits(max_frame_size=11))
    assert decode_all(b"2J" + u32(1) + u32(1) + b"7", validate_json=False)[0].payload == b"7"  # type: ignore[union-attr]
    assert decode_all(b"1J" + u32(1) + u32(2) + b"{}", strict_versions=False)[0].version == V1  # type: ignore[union-attr]


def test_scan_acks_errors() -> None:
    with pytest.raises(LocalProtocolError) as info:
        list(scan_acks(b"3"))
    e = info.value
    assert (e.reason, e.protocol, e.offset) == ("bad version byte 0x33", "lumberjack", 0)
    with pytest.raises(LocalProtocolError) as info:
        list(scan_acks(b"2W"))
    e = info.value
    assert (e.reason, e.protocol, e.offset) == ("unexpected frame type 0x57 from the server (only A is allowed)", "lumberjack", 1)


def test_error_texts_in_the_decoder() -> None:
    e = refused(b"1J" + u32(1) + u32(2) + b"{}", DEFAULT_LIMITS)
    assert e.reason == "J frame with version byte '1' (J exists only in v2)" and e.protocol == "lumberjack"
    e = refused(b"2J" + u32(1) + u32(0), DEFAULT_LIMITS)
    assert e.reason == "J payload length is 0"
    e = refused(b"2D" + u32(1) + u32(0), DEFAULT_LIMITS)
    assert e.reason == "D frame with version byte '2' (D exists only in v1)"
    e = refused(b"1D" + u32(1) + u32(50), limits(97))
    assert e.reason == "D frame with 50 pairs cannot fit the limit max_frame_size=97 (a pair is held as 32 bytes or more)"
    assert e.protocol == "lumberjack"
    e = refused(d_frame([(b"k" * 100, b"")]), limits(50))
    assert e.reason == "D key of 100 bytes exceeds the limit max_frame_size=50"
    e = refused(b"9X", DEFAULT_LIMITS)
    assert e.reason == "bad version byte 0x39 (expected 0x31 '1' or 0x32 '2')"


def test_two_bytes_are_enough_to_refuse() -> None:
    dec = FrameDecoder()
    dec.feed(b"9")
    assert dec.frames() == []
    dec.feed(b"X")
    with pytest.raises(LocalProtocolError):
        dec.frames()
    dec = FrameDecoder()
    dec.feed(Window(1).encode() + b"9")
    assert dec.frames() == [Window(1)]
    dec.feed(b"X")
    with pytest.raises(LocalProtocolError) as info:
        dec.frames()
    assert info.value.offset == 6  # stream offsets count the frames already taken


def test_frames_cut_from_a_growing_buffer_are_bytes() -> None:
    j, c, d = JsonFrame(1, b'{"a":1}'), Compressed(b"zz"), DataFrame(2, ((b"k", b"v"),))
    data = j.encode() + c.encode() + Window(1, V1).encode() + d.encode()
    for step in (1, 3):
        got = decode_split(data, DEFAULT_LIMITS, step, strict_versions=False)
        assert got == [j, c, Window(1, V1), d]
        assert type(got[0].payload) is bytes and type(got[1].payload) is bytes  # type: ignore[union-attr]
        assert all(type(x) is bytes for pair in got[3].pairs for x in pair)  # type: ignore[union-attr]


def test_a_trickling_d_frame_resumes_its_walk() -> None:
    frame = d_frame([(b"k" * 10, b"v" * 10)] * 5)
    dec = FrameDecoder()
    dec.feed(frame[:40])
    assert dec.frames() == []
    assert dec._d_resume == (0, 38, 4)  # walked past the first pair (10..38), 4 left
    dec.feed(frame[40:44])
    assert dec.frames() == []
    assert dec._d_resume == (0, 38, 4)  # the second pair's key is not all in yet: same place
    dec.feed(frame[44:])
    assert len(dec.frames()) == 1 and dec._d_resume is None


@pytest.mark.parametrize("fast", [False, True], ids=["plain", "fast"])
def test_a_trickling_c_frame_is_scanned_once_for_its_length(monkeypatch: pytest.MonkeyPatch, fast: bool) -> None:
    import refwire.lumberjack.frames as frames_module

    calls = 0
    real = frames_module.SCANNERS[fast]

    def counting(*a: Any) -> tuple[int, int]:
        nonlocal calls
        calls += 1
        return real(*a)

    monkeypatch.setitem(frames_module.SCANNERS, fast, counting)
    frame = Compressed(b"z" * 1000).encode()
    got = decode_split(frame, DEFAULT_LIMITS, 1, fast=fast)
    assert got == [Compressed(b"z" * 1000)]
    assert calls <= 4  # the header (2 and 6 bytes), then the whole frame: not once per byte


def test_offsets_inside_a_buffer_with_a_dead_prefix() -> None:
    """Chunks shorter than what is buffered are appended behind the consumed bytes
    (no compaction while the dead prefix is small): offsets still count from the stream."""
    dec = FrameDecoder()
    for chunk in (b"2W", b"\x00", b"\x00", b"\x00\x01", b"2J"):
        dec.feed(chunk)
    assert dec.frames() == [Window(1)]
    for chunk in (b"\x00", b"\x00\x00", b"\x00\x00\x00\x00", b"\x00"):  # seq 0, len 0
        dec.feed(chunk)
    assert dec._buf.pos == 6  # the W is still there, dead
    with pytest.raises(LocalProtocolError) as info:
        dec.frames()
    assert (info.value.field, info.value.offset) == ("len", 12)


def test_inflate_frames_passes_strict_versions_on() -> None:
    lenient = inflate_frames(zlib.compress(b"1J" + u32(1) + u32(2) + b"{}"), strict_versions=False)
    assert [f.version for f in lenient] == [V1]  # type: ignore[union-attr]


def test_a_d_frame_waiting_for_its_value_keeps_its_place() -> None:
    frame = d_frame([(b"k" * 10, b"v" * 10)] * 2)
    dec = FrameDecoder()
    dec.feed(frame[: 10 + 4 + 10 + 4 + 5])  # inside the first value
    assert dec.frames() == []
    assert dec._d_resume == (0, 10, 2)


def test_a_trickling_d_frame_walks_each_pair_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The walk resumes where the previous call stopped: the pair headers read are
    # bounded by the pairs plus one stop per call, not pairs x calls.
    import refwire.lumberjack.frames as frames_module

    class CountingU32:
        n = 0

        def __init__(self, s: struct.Struct) -> None:
            self.s = s

        def unpack_from(self, buf: bytes | bytearray, offset: int = 0) -> tuple[int, ...]:
            CountingU32.n += 1
            return self.s.unpack_from(buf, offset)

        def __getattr__(self, name: str) -> object:
            return getattr(self.s, name)

    monkeypatch.setattr(frames_module, "U32BE", CountingU32(frames_module.U32BE))
    pairs = [(b"k%02d" % i, b"v" * 5) for i in range(40)]
    frame = d_frame(pairs)
    dec = FrameDecoder()
    dec.feed(frame[:10])
    assert dec.frames() == []
    got = []
    for i in range(40):  # one pair (4 + 3 + 4 + 5 bytes) per call
        dec.feed(frame[10 + 16 * i : 26 + 16 * i])
        got += dec.frames()
    assert got == [DataFrame(1, tuple(pairs))]
    # 2 reads per pair in the walk, 2 more when the complete frame is sliced, one stop per call
    assert CountingU32.n <= 4 * 40 + 2 * 41


@pytest.mark.parametrize("runs", [False, True])
def test_an_error_after_a_consumed_frame_in_the_same_buffer_is_at_its_stream_offset(runs: bool) -> None:
    # W (6) and J1 (12) are consumed; J2's payload is not a JSON object.  The
    # chunks are small, so the buffer keeps its consumed prefix (pos > 0).
    j1 = JsonFrame(1, b"{}").encode()
    j2 = JsonFrame(2, b"[]").encode()
    dec = FrameDecoder(fast=True if runs else None)  # runs are the speed path's
    dec.feed(Window(2).encode() + j1[:4])
    assert dec.frames_before_error(runs=runs) == ([Window(2)], None)
    for chunk in (j1[4:5], j1[5:8], j1[8:10], j1[10:] + j2[:7]):
        dec.feed(chunk)
        good, err = dec.frames_before_error(runs=runs)
        assert err is None
    assert [f.seq for f in (good[0].frames() if runs else good)] == [1]
    dec.feed(j2[7:])
    assert dec._buf.pos == 12 and dec.offset == 18
    good, err = dec.frames_before_error(runs=runs)
    assert good == [] and err is not None
    assert (err.reason, err.frame, err.field, err.offset) == ("J payload must be a JSON object, got list", "J", "json", 28)


# --------------------------------------------------------------------------- max_connection_memory (§4)


def _server(budget: int, **kw: Any) -> ServerConnection:
    return ServerConnection(limits=Limits(max_connection_memory=budget, **kw), now=0.0, idle_timeout=None, batch_timeout=None)


def _events(conn: ServerConnection, data: bytes, step: int) -> list[Any]:
    out: list[Any] = []
    for i in range(0, len(data), step):
        conn.receive_data(data[i : i + step], now=0.0)
        while (ev := conn.next_event()).__class__.__name__ != "NeedData":
            out.append(ev)
    return out


def test_memory_caps_take_the_tighter_limit() -> None:
    """A frame may take a quarter of the budget, or max_frame_size if that is less."""
    limits = Limits(max_connection_memory=4000, max_frame_size=2000)
    capped, name = memory_caps(limits)
    assert (capped.max_frame_size, name) == (1000, "max_connection_memory")
    assert memory_caps(Limits(max_connection_memory=8000, max_frame_size=2000)) == (
        Limits(max_connection_memory=8000, max_frame_size=2000),
        "max_frame_size",
    )
    assert memory_caps(Limits(max_connection_memory=8003, max_frame_size=2000))[1] == "max_frame_size"
    assert memory_caps(Limits(max_connection_memory=7999, max_frame_size=2000))[0].max_frame_size == 1999
    assert EVENT_COST == 4


@pytest.mark.parametrize("step", [1, 7, 1 << 20])
def test_a_frame_at_a_quarter_of_the_budget_and_one_past(step: int) -> None:
    """Budget 4000: a J frame of 1000 bytes is taken, one of 1001 is refused at its
    length field (offset 6 + 6), naming max_connection_memory, however it is split."""
    ok = Window(1).encode() + JsonFrame(1, b'{"a":"' + b"x" * (990 - 8) + b'"}').encode()
    assert len(ok) == 6 + 1000
    assert isinstance(_events(_server(4000), ok, step)[-1], Batch)
    over = Window(1).encode() + JsonFrame(1, b'{"a":"' + b"x" * (991 - 8) + b'"}').encode()
    with pytest.raises(RemoteLimitExceeded) as info:
        _events(_server(4000), over, step)
    e = info.value
    assert (e.frame, e.field, e.offset) == ("J", "len", 12)
    assert e.reason == "J frame of 1001 bytes exceeds the 1000 bytes the limit max_connection_memory=4000 allows a frame"


def _j(payload_len: int, seq: int) -> bytes:
    return JsonFrame(seq, b'{"a":"' + b"x" * (payload_len - 8) + b'"}').encode()


@pytest.mark.parametrize("step", [1, 13, 1 << 20])
@pytest.mark.parametrize("compressed", [False, True])
def test_a_batch_at_a_quarter_of_the_budget_and_one_past(step: int, compressed: bool) -> None:
    """Budget 8000: a batch's events may hold 2000 bytes -- at the line taken, one past refused
    at the frame that went over, plain or inside a C."""
    def window(last: int) -> bytes:
        body = _j(1000, 1) + _j(last, 2)
        return Window(2).encode() + (Compressed.wrap(body).encode() if compressed else body)

    assert isinstance(_events(_server(8000), window(1000), step)[-1], Batch)
    with pytest.raises(RemoteLimitExceeded) as info:
        _events(_server(8000), window(1001), step)
    e = info.value
    assert "the batch's events exceed the 2000 bytes the limit max_connection_memory=8000 leaves them" in e.reason
    if compressed:
        assert (e.frame, e.field, e.offset) == ("C", "payload", 6)
    else:
        assert (e.frame, e.field, e.offset) == ("J", "payload", 6 + 1010 + 10)


def test_batches_awaiting_their_ack_count_against_the_next_batch() -> None:
    """A delivered, unacked batch of 1500 bytes leaves the next batch 500 (budget 8000);
    once it is acked, the next gets 2000 again (its frame, 1990 + 10 bytes, at the frame cap)."""
    conn = _server(8000)
    first = _events(conn, Window(1).encode() + _j(1500, 1), 1 << 20)[-1]
    assert isinstance(first, Batch)
    with pytest.raises(RemoteLimitExceeded, match=r"exceed the 500 bytes .* 1500 bytes of events await their ack"):
        _events(conn, Window(1).encode() + _j(501, 2), 1 << 20)
    conn = _server(8000)
    first = _events(conn, Window(1).encode() + _j(1500, 1), 1 << 20)[-1]
    conn.accept(first, now=0.0)
    assert isinstance(_events(conn, Window(1).encode() + _j(1990, 2), 1 << 20)[-1], Batch)


def test_max_batch_bytes_still_binds_inside_the_budget() -> None:
    """When max_batch_bytes is the tighter, it is the one named (the budget is a cap around it)."""
    with pytest.raises(RemoteLimitExceeded) as info:
        _events(_server(1 << 20, max_batch_bytes=1500), Window(2).encode() + _j(1000, 1) + _j(501, 2), 1 << 20)
    assert info.value.reason == "the batch's events exceed the limit max_batch_bytes=1500"
