"""TANK codec properties and hostile inputs (specs/tank/README.md §2, §4, §5):
round trips, split invariance, garbage safety, and a clear typed error --
naming field and offset -- for bad varints, counts of 0, lengths past the
limit, unknown ids, bundles whose declared sizes lie and Snappy garbage."""

from __future__ import annotations

import attrs
import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.tank_strategies import messages_st
from tank_vectors import load, unhex

from refwire.errors import LimitExceeded, LocalProtocolError, ProtocolError
from refwire.tank import Message, decode_bundle, decode_request, decode_response, encode_bundle, encode_entry, read_chunk
from refwire.tank.bundles import snappy_decompress
from refwire.tank.errors import TruncatedBundle
from refwire.tank.frames import DEFAULT_LIMITS, REQUEST_IDS, RESPONSE_IDS, FrameDecoder, frame

FRAMES = load("frames.json")


@given(messages_st, st.booleans())
@settings(max_examples=150, deadline=None)
def test_bundle_round_trip(msgs: list[Message], compress: bool) -> None:
    b = encode_bundle(msgs, compress=compress)
    _, out = decode_bundle(b, base_seq=5)
    assert [(m.content, m.ts, m.key) for m in out] == [(m.content, m.ts, m.key) for m in msgs]
    assert [m.seq for m in out] == list(range(5, 5 + len(msgs)))


@given(messages_st, st.lists(st.integers(0, 3), min_size=40, max_size=40), st.integers(1, 2**40))
@settings(max_examples=150, deadline=None)
def test_sparse_round_trip(msgs: list[Message], gaps: list[int], first: int) -> None:
    seqs, s = [], first
    for i in range(len(msgs)):
        seqs.append(s)
        s += 1 + gaps[i]
    msgs = [attrs.evolve(m, seq=q) for m, q in zip(msgs, seqs, strict=False)]
    b = encode_bundle(msgs, sparse=True, compress=False)
    h, out = decode_bundle(b)
    assert (h.first_seq, h.last_seq) == (seqs[0], seqs[-1])
    assert [m.seq for m in out] == seqs


@given(st.binary(max_size=300))
@settings(max_examples=400, deadline=None)
def test_garbage_bundles_and_chunks(data: bytes) -> None:
    for call in (lambda: decode_bundle(data, base_seq=1), lambda: read_chunk(data, base_seq=1, hwmark=2**40, requested_seq=0)):
        try:
            call()
        except ProtocolError:
            pass


@given(st.sampled_from(sorted(REQUEST_IDS | RESPONSE_IDS)), st.binary(max_size=120))
@settings(max_examples=400, deadline=None)
def test_garbage_payloads(msg_id: int, payload: bytes) -> None:
    for dec in (decode_request, decode_response):
        try:
            dec(msg_id, payload)
        except ProtocolError:
            pass


@given(st.data())
@settings(max_examples=60, deadline=None)
def test_frame_split_invariance(data: st.DataObject) -> None:
    stream = b"".join(unhex(v["hex"]) for v in FRAMES if v["direction"] == "b2c")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=30)))
    d = FrameDecoder(RESPONSE_IDS)
    got = []
    prev = 0
    for c in [*cuts, len(stream)]:
        d.feed(stream[prev:c])
        prev = c
        while (f := d.next_frame()) is not None:
            got.append(f[:2])
    assert [bytes([i]) + len(p).to_bytes(4, "little") + p for i, p in got] == [
        unhex(v["hex"]) for v in FRAMES if v["direction"] == "b2c"
    ]


# --------------------------------------------------------------------------- hostile inputs


def _err(fn: object, *args: object, **kw: object) -> ProtocolError:
    with pytest.raises(ProtocolError) as ei:
        fn(*args, **kw)  # type: ignore[operator]
    return ei.value


def test_varint_overflow_and_truncation() -> None:
    e = _err(decode_bundle, b"\x00\xff\xff\xff\xff\xff\x01")
    assert e.field == "count" and "longer than 5" in e.reason and e.offset == 1
    assert not isinstance(e, TruncatedBundle)
    e = _err(decode_bundle, b"\x00\xff\xff\xff\xff\x7f")
    assert e.field == "count" and "overflows u32" in e.reason
    assert not isinstance(e, TruncatedBundle)
    e = _err(decode_bundle, b"\x00\x80")
    assert e.field == "count" and "truncated" in e.reason
    assert isinstance(e, TruncatedBundle)  # the kind is a class, the reason is for people
    e = _err(decode_bundle, b"\x00\xff\xff\xff\xff")  # five continuation bytes and the end: truncated, not too long
    assert isinstance(e, TruncatedBundle) and "truncated" in e.reason


def test_count_zero_refused() -> None:
    e = _err(decode_bundle, b"\x00\x00")
    assert e.field == "count" and "0" in e.reason
    with pytest.raises(LocalProtocolError):
        encode_bundle([])


def test_reserved_bit_and_codec() -> None:
    assert _err(decode_bundle, b"\x84\x00\x00\x00").field == "flags"
    assert "codec 2" in _err(decode_bundle, b"\x06\x00\x00\x00").reason


def test_declared_sizes_lie() -> None:
    good = encode_bundle([Message(b"hello", 1)], compress=False)
    e = _err(decode_bundle, good[:-1])
    assert e.field == "content" and "needs 5 bytes" in e.reason and isinstance(e, TruncatedBundle)
    e = _err(decode_bundle, good + b"\x00")
    assert e.field == "messageSet" and "after the last" in e.reason
    # A count of 2**32-1 over three bytes of messages is refused before decoding.
    e = _err(decode_bundle, b"\x00\xff\xff\xff\xff\x0f\x00\x00\x00")
    assert e.field == "count" and "cannot fit" in e.reason
    # A whole chunk entry whose bundle lies is an error, not a partial bundle.
    e = _err(read_chunk, encode_entry(good[:-1]), base_seq=1, hwmark=10, requested_seq=0)
    assert e.field == "content"
    # Sparse header whose range cannot hold its messages.
    e = _err(decode_bundle, b"\x4c" + (5).to_bytes(8, "little") + b"\x00" * 8)
    assert e.field == "lastSeq"


def test_snappy_garbage_and_limit() -> None:
    e = _err(decode_bundle, b"\x05\x10\x00garbage!")
    assert e.field == "messageSet" and "Snappy" in e.reason
    big = bytes(cramjam.snappy.compress_raw(b"\x00" * 100_000))
    with pytest.raises(LimitExceeded) as ei:
        snappy_decompress(big, max_size=50_000)
    assert ei.value.field == "snappyLength"
    # Declared length far past the limit, with no data behind it: refused from the header alone.
    with pytest.raises(LimitExceeded):
        decode_bundle(b"\x05\xff\xff\xff\xff\x0f")


def test_unknown_ids_and_frame_limit() -> None:
    d = FrameDecoder(REQUEST_IDS)
    d.feed(b"\x42\x00\x00\x00\x00")
    e = _err(d.next_frame)
    assert e.field == "msgId" and e.offset == 0
    d = FrameDecoder(REQUEST_IDS, obsolete_msg={4: "obsolete ReplicaID"})
    d.feed(b"\x04\x02\x00\x00\x00")
    assert "obsolete" in _err(d.next_frame).reason
    d = FrameDecoder(REQUEST_IDS, attrs.evolve(DEFAULT_LIMITS, max_frame_size=1000))
    d.feed(b"\x01\xff\xff\xff\x7f")  # 2 GiB claimed: refused from the header, nothing buffered
    e = _err(d.next_frame)
    assert isinstance(e, LimitExceeded) and e.field == "payloadLen" and e.offset == 1


def test_request_overruns_name_field_and_offset() -> None:
    raw = unhex(FRAMES[0]["hex"])
    e = _err(decode_request, raw[0], raw[5:-1], offset=100)
    assert e.field == "bundle" and e.offset is not None and e.offset > 100
    e = _err(decode_request, raw[0], raw[5:] + b"\x00")
    assert e.field == "(end)"
    # Consume response whose chunk lengths do not add up.
    resp = unhex(next(v["hex"] for v in FRAMES if v["name"] == "consume-response-3-bundles"))
    e = _err(decode_response, 2, resp[5:-1])
    assert e.field == "chunkLen"
    e = _err(decode_response, 2, b"\xff\x00\x00\x00" + resp[9:])
    assert e.field == "headerLen"


def test_frame_encode_checks_ranges() -> None:
    from refwire.tank import ConsumePartition, ConsumeRequest, ConsumeTopic

    with pytest.raises(LocalProtocolError):
        ConsumeRequest(1, (ConsumeTopic("t" * 256, ()),)).encode()
    with pytest.raises(LocalProtocolError):
        ConsumeRequest(1, (ConsumeTopic("t", (ConsumePartition(70000, 0, 1),)),)).encode()
    assert frame(1, b"ab") == b"\x01\x02\x00\x00\x00ab"
