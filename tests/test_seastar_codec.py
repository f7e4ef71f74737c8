"""Seastar RPC codec properties and hostile input (specs/seastar-rpc/README.md §2-§4, §6).

Round trips, split invariance, garbage safety (any bytes -> frames or a
ProtocolError, never another exception), LZ4_FRAGMENTED multi-chunk edges
(k x 32 KiB, dependent chunks), LZ4 bombs, and lying lengths.
"""

from __future__ import annotations

import struct

import lz4.block
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refwire.errors import LimitExceeded, LocalProtocolError, ProtocolError
from refwire.seastar_rpc import (
    DEFAULT_LIMITS,
    Features,
    FrameDecoder,
    LZ4Compressor,
    LZ4FragmentedCompressor,
    Negotiation,
    NoOp,
    OversizedRequest,
    Request,
    Response,
    StreamEnd,
    StreamMessage,
    envelope,
    make_compressor,
)
from refwire.seastar_rpc.compression import CHUNK_SIZE
from refwire.seastar_rpc.frames import Frame, Kind
from refwire.wire import Limits

u32 = struct.Struct("<I").pack

requests = st.builds(
    Request,
    verb=st.integers(0, 2**64 - 1),
    msg_id=st.integers(-(2**63), 2**63 - 1),
    payload=st.binary(max_size=300),
    timeout_ms=st.integers(0, 2**64 - 1),
)
responses = st.builds(
    Response,
    msg_id=st.integers(-(2**63), 2**63 - 1),
    payload=st.binary(max_size=300),
    handler_duration=st.integers(0, 2**32 - 1),
)
stream_frames = st.one_of(st.builds(StreamMessage, st.binary(max_size=300)), st.just(StreamEnd()))
compressors = st.sampled_from([None, "LZ4", "LZ4_FRAGMENTED"])


def _decoder(kind: Kind, comp: str | None, *, timeout: bool = True, duration: bool = True, limits: Limits = DEFAULT_LIMITS) -> FrameDecoder:
    dec = FrameDecoder(kind, negotiation=False, limits=limits)
    dec.configure(timeout=timeout, duration=duration, compressor=make_compressor(comp) if comp else None)
    return dec


def _encode(f: Frame, comp: str | None) -> bytes:
    if isinstance(f, Request):
        raw = f.encode(with_timeout=True)
    elif isinstance(f, Response):
        raw = f.encode(with_duration=True)
    else:
        assert isinstance(f, (StreamMessage, StreamEnd))
        raw = f.encode()
    return envelope(make_compressor(comp), raw) if comp else raw


def _feed_all(dec: FrameDecoder, chunks: list[bytes]) -> list[Frame]:
    out = []
    for c in chunks:
        dec.feed(c)
        while (f := dec.next_frame()) is not None:
            out.append(f)
    return out


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in [*points, len(data)]:
        out.append(data[prev:p])
        prev = p
    return out


@settings(max_examples=150, deadline=None)
@given(st.data(), compressors)
def test_round_trip_and_split_invariance(data: st.DataObject, comp: str | None) -> None:
    kind: Kind = data.draw(st.sampled_from(["request", "response", "stream"]))
    strat = {"request": requests, "response": responses, "stream": stream_frames}[kind]
    frames = data.draw(st.lists(strat, max_size=6))
    wire = b"".join(_encode(f, comp) for f in frames)
    cuts = data.draw(st.lists(st.integers(0, 10_000), max_size=8))
    assert _feed_all(_decoder(kind, comp), _split(wire, cuts)) == frames


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(["request", "response", "stream"]), compressors, st.booleans())
def test_garbage_never_escapes(data: bytes, kind: Kind, comp: str | None, negotiation: bool) -> None:
    limits = Limits(max_frame_size=4096, max_decompressed_size=4096, max_string_size=512)
    dec = FrameDecoder(kind, negotiation=negotiation, limits=limits)
    if not negotiation:
        dec.configure(timeout=True, duration=True, compressor=make_compressor(comp) if comp else None)
    try:
        dec.feed(data)
        while (f := dec.next_frame()) is not None:
            if isinstance(f, Negotiation):
                Features.from_negotiation(f)
                dec.configure(kind=kind, compressor=make_compressor(comp) if comp else None)
        dec.eof_error()
    except ProtocolError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_lz4_payloads(payload: bytes) -> None:
    limits = Limits(max_decompressed_size=100_000)
    for comp in (LZ4Compressor(), LZ4FragmentedCompressor()):
        try:
            comp.decompress(payload, limits=limits, offset=0)
        except ProtocolError:
            pass


def test_negotiation_records_sorted_and_first_duplicate_wins() -> None:
    f = Features(handler_duration=True, compress="LZ4", timeout=True, isolation=b"x", unknown=((42, b"?"),))
    numbers = [n for n, _ in f.to_negotiation().records]
    assert numbers == sorted(numbers) == [0, 1, 4, 5, 42]
    neg = Negotiation(((0, b"LZ4"), (0, b"LZ4_FRAGMENTED"), (42, b"zz"), (1, b"")))
    got = Features.from_negotiation(neg)
    assert got.compress == "LZ4" and got.timeout and got.unknown == ((42, b"zz"),)


@pytest.mark.parametrize("size", [0, 1, CHUNK_SIZE - 1, CHUNK_SIZE, CHUNK_SIZE + 1, 2 * CHUNK_SIZE, 3 * CHUNK_SIZE + 7, 110_000])
@pytest.mark.parametrize("dependent", [True, False])
def test_fragmented_chunking(size: int, dependent: bool) -> None:
    frame = (b"seastar-" * (size // 8 + 1))[:size]
    payload = LZ4FragmentedCompressor(dependent=dependent).compress(frame)
    # Walk the chunk headers: intermediate chunks while more than 32 KiB remain, then one last chunk.
    pos, total, headers = 0, 0, []
    while True:
        (hdr,) = struct.unpack_from("<I", payload, pos)
        headers.append(hdr)
        if hdr & 0x80000000:
            total += hdr & 0x7FFFFFFF
            break
        pos += 4 + hdr
        total += CHUNK_SIZE
    assert total == size
    assert len(headers) == max(1, -(-size // CHUNK_SIZE))
    if size and size % CHUNK_SIZE == 0:
        assert headers[-1] == 0x80008000  # a full last chunk at the k x 32 KiB edge
    assert LZ4FragmentedCompressor().decompress(payload, limits=DEFAULT_LIMITS, offset=0) == frame


def test_fragmented_dependent_chunks_refer_back() -> None:
    # The second chunk repeats the first: with the window it compresses to almost nothing,
    # and decoding it without the previous output fails.
    import os

    first = os.urandom(CHUNK_SIZE)
    frame = first + first + b"tail"
    payload = LZ4FragmentedCompressor(dependent=True).compress(frame)
    (c1,) = struct.unpack_from("<I", payload, 0)
    (c2,) = struct.unpack_from("<I", payload, 4 + c1)
    assert c2 < 1000
    second = payload[8 + c1 : 8 + c1 + c2]
    with pytest.raises(lz4.block.LZ4BlockError):
        lz4.block.decompress(second, uncompressed_size=CHUNK_SIZE)
    assert LZ4FragmentedCompressor().decompress(payload, limits=DEFAULT_LIMITS, offset=0) == frame


def test_lz4_refuses_to_encode_an_empty_frame() -> None:
    with pytest.raises(LocalProtocolError, match="no-op"):
        LZ4Compressor().compress(b"")


def test_one_frame_per_envelope_trailing_bytes_ignored() -> None:
    req = Request(7, 1, b"abc", 0).encode(with_timeout=True)
    wire = envelope(LZ4Compressor(), req + b"garbage after the frame")
    assert _feed_all(_decoder("request", "LZ4"), [wire]) == [Request(7, 1, b"abc", 0)]


def test_noops_are_skipped_between_frames() -> None:
    req = Request(7, 1, b"abc", 0)
    wire = b"\x00\x00\x00\x00" + u32(3) + b"\x01\x02\x03" + _encode(req, "LZ4")
    got = _feed_all(_decoder("request", "LZ4"), [wire])
    assert isinstance(got[0], NoOp) and isinstance(got[1], NoOp) and got[2] == req


@pytest.mark.parametrize("comp", ["LZ4", "LZ4_FRAGMENTED"])
def test_decompressed_limit(comp: str) -> None:
    limits = Limits(max_decompressed_size=1000)
    wire = _encode(Request(1, 1, b"z" * 2000, 0), comp)
    with pytest.raises(LimitExceeded) as info:
        _feed_all(_decoder("request", comp, limits=limits), [wire])
    assert info.value.frame == "compressed"


def test_an_oversized_request_is_returned_once_its_body_is_skipped() -> None:
    """Skipped as it arrives, never buffered, and returned only after its last
    byte (§3: the answer must not overtake the body); the next frame follows."""
    dec = _decoder("request", None)
    dec.discard_over = 100
    hdr = struct.pack("<QQqI", 0, 9, 3, 1_000_000)
    assert _feed_all(dec, [hdr]) == []
    for _ in range(99):
        assert _feed_all(dec, [b"x" * 10_000]) == []
        assert len(dec._buf) == 0  # nothing of the body is held
    assert dec.in_frame and dec.buffered == 10_000
    nxt = Request(1, 4, b"ok", 0)
    assert _feed_all(dec, [b"x" * 10_000 + _encode(nxt, None)]) == [OversizedRequest(9, 3, 1_000_000, 0), nxt]
    assert dec.buffered == 0 and not dec.in_frame


def test_a_request_over_the_frame_limit_is_an_error_even_over_the_memory_limit() -> None:
    dec = _decoder("request", None, limits=Limits(max_frame_size=1024))
    dec.discard_over = 100
    dec.feed(struct.pack("<QQqI", 0, 9, 3, 1025))
    with pytest.raises(LimitExceeded) as info:
        dec.next_frame()
    assert (info.value.field, info.value.offset) == ("len", 24)
    ok = _decoder("request", None, limits=Limits(max_frame_size=1024))
    ok.discard_over = 100
    assert _feed_all(ok, [struct.pack("<QQqI", 0, 9, 3, 1024) + b"y" * 1024]) == [OversizedRequest(9, 3, 1024, 0)]


def test_lying_lengths_over_the_frame_limit() -> None:
    limits = Limits(max_frame_size=1024)
    with pytest.raises(LimitExceeded):
        _feed_all(_decoder("request", None, limits=limits), [struct.pack("<QQqI", 0, 1, 1, 1025)])
    with pytest.raises(LimitExceeded):
        _feed_all(_decoder("response", None, limits=limits), [struct.pack("<qII", 1, 1025, 0)])


def test_feeding_is_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes trickling in one at a time cost the same parse work as whole frames."""
    from refwire.seastar_rpc import frames as frames_mod

    wire = b"".join(_encode(Request(1, i, b"p" * 50, 0), None) for i in range(1, 200))
    calls = 0
    orig = frames_mod._parse_frame

    def counting(*a: object, **k: object) -> object:
        nonlocal calls
        calls += 1
        return orig(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(frames_mod, "_parse_frame", counting)
    got = _feed_all(_decoder("request", None), [wire[i : i + 1] for i in range(len(wire))])
    assert len(got) == 199
    # One call per frame to learn its length, one to take it: the header is not
    # re-parsed for every byte of the payload.
    assert calls <= 199 * 3 + 1
