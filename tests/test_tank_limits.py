"""TANK bundles and chunks at their edges (specs/tank/README.md §4, §5).

Exact encodings (the count in the flags up to 15, timestamps repeated, sparse
deltas), the C++ client's compression thresholds at the line, unknown message
flag bits, sparse bundles through :func:`read_chunk` with their lastSeq
consistency check, partial trailing bundles, and the field and offset of every
refusal.
"""

from __future__ import annotations

import struct

import attrs
import cramjam
import pytest

from refwire.errors import LimitExceeded, LocalProtocolError, ProtocolError
from refwire.tank import Message, decode_bundle, encode_bundle, encode_entry, read_chunk
from refwire.tank import frames as tf
from refwire.tank.bundles import U64_MAX, choose_compression, parse_bundle_header, snappy_decompress
from refwire.tank.connection import BrokerConnection
from refwire.tank.errors import TruncatedBundle
from refwire.wire import Limits, encode_uvarint

uv = encode_uvarint


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def raw_msg(content: bytes, ts: int | None = 0, key: bytes | None = None, *, flags: int = 0, delta: int | None = None) -> bytes:
    """One message as bytes; ``ts=None`` sets UseLastSpecifiedTS."""
    f = flags | (1 if key is not None else 0) | (2 if ts is None else 0)
    out = bytes([f])
    if delta is not None:
        out += uv(delta)
    if ts is not None:
        out += u64(ts)
    if key is not None:
        out += bytes([len(key)]) + key
    return out + uv(len(content)) + content


def err(fn: object, *args: object, **kw: object) -> ProtocolError:
    with pytest.raises(ProtocolError) as ei:
        fn(*args, **kw)  # type: ignore[operator]
    return ei.value


def loc(e: ProtocolError) -> tuple[object, ...]:
    """A bundle error's (field, offset), once its protocol and frame are checked."""
    assert (e.protocol, e.frame) == ("tank", "bundle"), e
    return (e.field, e.offset)


# --------------------------------------------------------------------------- encoding


def test_compression_thresholds_at_the_line() -> None:
    assert not choose_compression([Message(b"")] * 512)
    assert choose_compression([Message(b"")] * 513)
    assert not choose_compression([Message(b"x" * 1000, key=b"k" * 24)])
    assert choose_compression([Message(b"x" * 1000, key=b"k" * 25)])
    assert choose_compression([Message(b"x" * 1025)])
    assert not choose_compression([Message(b"x" * 512), Message(b"y" * 512)])
    # compress=None applies it: 1024 bytes plain, 1025 Snappy
    assert encode_bundle([Message(b"x" * 1024)])[0] & 3 == 0
    assert encode_bundle([Message(b"x" * 1025)])[0] & 3 == 1


def test_encode_exact_bytes() -> None:
    msgs = [Message(b"a", 5), Message(b"bc", 5, key=b"K"), Message(b"", 6)]
    assert encode_bundle(msgs, compress=False) == bytes([3 << 2]) + raw_msg(b"a", 5) + raw_msg(b"bc", None, b"K") + raw_msg(
        b"", 6
    )
    # 15 messages: count in the flags; 16: a varint after them
    fifteen = encode_bundle([Message(b"m", 1)] * 15, compress=False)
    assert fifteen[0] == 15 << 2 and fifteen[1:] == raw_msg(b"m", 1) + raw_msg(b"m", None) * 14
    sixteen = encode_bundle([Message(b"m", 1)] * 16, compress=False)
    assert sixteen[:2] == b"\x00\x10" and sixteen[2:] == raw_msg(b"m", 1) + raw_msg(b"m", None) * 15
    # the first message always carries its timestamp, even 0
    assert encode_bundle([Message(b"z", 0)], compress=False) == b"\x04" + raw_msg(b"z", 0)
    body = raw_msg(b"q" * 2000, 9)
    snappy = encode_bundle([Message(b"q" * 2000, 9)], compress=True)
    assert snappy == b"\x05" + bytes(cramjam.snappy.compress_raw(body))
    assert encode_entry(b"abc") == b"\x03abc"
    assert encode_entry(b"x" * 200) == b"\xc8\x01" + b"x" * 200


def test_encode_sparse_exact_bytes() -> None:
    msgs = [Message(b"a", 1, seq=10), Message(b"b", 1, seq=11), Message(b"c", 2, seq=15), Message(b"d", 3, seq=20)]
    got = encode_bundle(msgs, compress=False, sparse=True)
    head = bytes([0x40 | 4 << 2]) + u64(10) + uv(20 - 10 - 1)
    body = raw_msg(b"a", 1) + raw_msg(b"b", None, flags=4) + raw_msg(b"c", 2, delta=3) + raw_msg(b"d", 3)
    assert got == head + body
    one = encode_bundle([Message(b"a", 1, seq=7)], compress=False, sparse=True)
    assert one == bytes([0x40 | 1 << 2]) + u64(7) + raw_msg(b"a", 1)
    _, back = decode_bundle(got)
    assert [m.seq for m in back] == [10, 11, 15, 20]
    top = encode_bundle([Message(b"a", seq=U64_MAX - 1)], compress=False, sparse=True)
    assert decode_bundle(top)[1][0].seq == U64_MAX - 1


@pytest.mark.parametrize(
    ("msgs", "field", "reason"),
    [
        ([Message(b"a")], "seq", "needs a sequence number"),
        ([Message(b"a", seq=0)], "seq", "needs a sequence number"),
        ([Message(b"a", seq=U64_MAX)], "seq", "needs a sequence number"),
        ([Message(b"a", seq=5), Message(b"b", seq=5)], "seq", "seq 5 not above 5"),
        ([Message(b"a", seq=1), Message(b"b", seq=2**33)], "lastSeq", "does not fit"),
    ],
)
def test_encode_sparse_refusals(msgs: list[Message], field: str, reason: str) -> None:
    e = err(encode_bundle, msgs, compress=False, sparse=True)
    assert e.field == field and reason in e.reason and e.offset == 0


def test_encode_refusals() -> None:
    e = err(encode_bundle, [])
    assert loc(e) == ("count", 0)
    assert encode_bundle([Message(b"", key=b"k" * 255)], compress=False)[2 + 8] == 255
    e = err(encode_bundle, [Message(b"", key=b"k" * 256)], compress=False)
    assert loc(e) == ("key", 0) and "256 bytes" in e.reason
    assert loc(err(encode_bundle, [Message(b"", ts=-1)])) == ("ts", 0)
    assert loc(err(encode_bundle, [Message(b"", ts=U64_MAX + 1)])) == ("ts", 0)
    assert encode_bundle([Message(b"", ts=U64_MAX)], compress=False) == b"\x04" + raw_msg(b"", U64_MAX)


# --------------------------------------------------------------------------- headers


def test_header_errors_name_field_and_offset() -> None:
    e = err(parse_bundle_header, b"xx", 2, base=100)
    assert isinstance(e, TruncatedBundle) and loc(e) == ("flags", 102)
    e = err(parse_bundle_header, b"..\x84", 2, base=100)
    assert loc(e) == ("flags", 102) and "bit 7" in e.reason
    e = err(parse_bundle_header, b"..\x07", 2, base=100)
    assert loc(e) == ("flags", 102) and "codec 3" in e.reason
    e = err(parse_bundle_header, b"..\x00\x00", 2, base=100)
    assert loc(e) == ("count", 103) and not isinstance(e, TruncatedBundle)
    e = err(parse_bundle_header, b"..\x00\x80\x00", 2, base=100)
    assert loc(e) == ("count", 104)
    e = err(parse_bundle_header, b"..\x44" + b"\x01" * 7, 2, base=100)
    assert isinstance(e, TruncatedBundle) and loc(e) == ("firstSeq", 103)
    e = err(parse_bundle_header, b"..\x44" + u64(0), 2, base=100)
    assert loc(e) == ("firstSeq", 103) and "out of range" in e.reason


def test_header_edges() -> None:
    h = parse_bundle_header(b"..\x48" + u64(U64_MAX - 2) + b"\x00", 2)
    assert (h.first_seq, h.last_seq, h.count, h.size, h.sparse, h.codec) == (U64_MAX - 2, U64_MAX - 1, 2, 10, True, 0)
    e = err(parse_bundle_header, b"..\x48" + u64(U64_MAX - 1) + b"\x00", 2, base=100)
    assert loc(e) == ("firstSeq", 103) and "out of range" in e.reason
    # the range must hold the count: 3 messages in 5..7 fit, in 5..6 not
    assert parse_bundle_header(b"\x4c" + u64(5) + b"\x01").last_seq == 7
    e = err(parse_bundle_header, b"..\x4c" + u64(5) + b"\x00", 2, base=100)
    assert loc(e) == ("lastSeq", 111)
    h = parse_bundle_header(b"\x45" + u64(1))
    assert (h.first_seq, h.last_seq, h.size, h.codec) == (1, 1, 9, 1)
    h = parse_bundle_header(b"\x00\x80\x01")
    assert (h.count, h.size, h.first_seq) == (128, 3, None)
    h = parse_bundle_header(b"\x3c")
    assert h.count == 15 and h.size == 1
    h = parse_bundle_header(b"\x40\x10" + u64(3) + b"\x0e")  # count 16 in a varint, 3..18
    assert (h.count, h.first_seq, h.last_seq) == (16, 3, 18)


def test_header_varint_truncation_at_five_bytes() -> None:
    e = err(parse_bundle_header, b"\x00" + b"\xff" * 5)
    assert isinstance(e, TruncatedBundle) and e.field == "count"
    e = err(parse_bundle_header, b"\x00" + b"\xff" * 6)
    assert not isinstance(e, TruncatedBundle) and "longer than 5" in e.reason
    e = err(parse_bundle_header, b"\x00\xff\xff\x7f\x00", 0, 3)  # ends (end=3) inside the varint
    assert isinstance(e, TruncatedBundle)
    e = err(parse_bundle_header, b"\x00\xff\xff\xff\xff\x7f")  # overflow in 5 bytes, the last not continuing
    assert not isinstance(e, TruncatedBundle) and "overflows" in e.reason


# --------------------------------------------------------------------------- messages


@pytest.mark.parametrize("flag", [0x08, 0x10, 0x20, 0x40, 0x80, 0xF8])
def test_unknown_message_flag_bits(flag: int) -> None:
    bundle = b"\x08" + raw_msg(b"a", 1) + raw_msg(b"b", 1, flags=flag)
    e = err(decode_bundle, bundle, base=50)
    assert loc(e) == ("messageFlags", 50 + 1 + len(raw_msg(b"a", 1)))
    assert "unknown flags" in e.reason
    e = err(read_chunk, encode_entry(bundle), base_seq=1, hwmark=10, requested_seq=0, offset=7)
    assert loc(e) == ("messageFlags", 7 + 1 + 1 + len(raw_msg(b"a", 1)))


def test_known_message_flags_decode() -> None:
    bundle = b"\x0c" + raw_msg(b"a", 9, b"k") + raw_msg(b"b", None) + raw_msg(b"c", 4)
    _, msgs = decode_bundle(bundle, base_seq=100)
    assert msgs == [Message(b"a", 9, b"k", 100), Message(b"b", 9, None, 101), Message(b"c", 4, None, 102)]
    _, msgs = decode_bundle(bundle)
    assert [m.seq for m in msgs] == [None, None, None]
    _, msgs = decode_bundle(bundle, base_seq=0)
    assert [m.seq for m in msgs] == [0, 1, 2]


@pytest.mark.parametrize(
    ("bundle", "field", "offset"),
    [
        (b"\x08" + raw_msg(b"a", 1), "messageFlags", 1 + 11),
        (b"\x04\x00" + b"\x01" * 7, "ts", 2),
        (b"\x04\x01" + u64(1), "keyLen", 10),
        (b"\x04\x01" + u64(1) + b"\x03ab", "key", 11),
        (b"\x04\x00" + u64(1), "contentLen", 10),
        (b"\x04\x00" + u64(1) + b"\x80", "contentLen", 10),
        (b"\x04\x00" + u64(1) + b"\x03ab", "content", 11),
    ],
)
def test_truncated_messages_name_field_and_offset(bundle: bytes, field: str, offset: int) -> None:
    e = err(decode_bundle, bundle, base=1000)
    assert isinstance(e, TruncatedBundle)
    assert loc(e) == (field, 1000 + offset)


def test_exact_fits_decode() -> None:
    assert decode_bundle(b"\x04\x01" + u64(1) + b"\x02ab\x01c")[1] == [Message(b"c", 1, b"ab")]
    assert decode_bundle(b"\x04\x00" + u64(1) + b"\x00")[1] == [Message(b"", 1)]
    # a count of exactly half the bytes (2-byte messages: UseLastTS + contentLen 0) fits; one more does not
    two = b"\x08\x02\x00\x02\x00"
    assert [m.ts for m in decode_bundle(two)[1]] == [0, 0]
    e = err(decode_bundle, b"\x0c\x02\x00\x02\x00\x02", base=3)
    assert loc(e) == ("count", 3) and "cannot fit in 5 bytes" in e.reason


def test_trailing_bytes_and_snappy_offsets() -> None:
    body = raw_msg(b"x", 1)
    e = err(decode_bundle, b"\x04" + body + b"\x00\x00", base=10)
    assert loc(e) == ("messageSet", 10 + 1 + len(body)) and "2 bytes after the last of 1" in e.reason
    comp = bytes(cramjam.snappy.compress_raw(body + b"\x00"))
    e = err(decode_bundle, b"\x05" + comp, base=10)
    assert loc(e) == ("messageSet", 11 + len(body))  # offsets inside the inflated set start at the message set
    comp = bytes(cramjam.snappy.compress_raw(b"\x00" + u64(1) + b"\x05ab"))
    e = err(decode_bundle, b"\x05" + comp, base=10)
    assert loc(e) == ("content", 11 + 10)


def test_snappy_limit_at_the_line() -> None:
    body = raw_msg(b"s" * 3000, 1)
    comp = bytes(cramjam.snappy.compress_raw(body))
    assert snappy_decompress(comp, max_size=len(body)) == body
    e = err(snappy_decompress, comp, max_size=len(body) - 1, offset=33)
    assert isinstance(e, LimitExceeded) and loc(e) == ("snappyLength", 33) and e.frame == "bundle"
    assert f"Snappy length {len(body)} exceeds the limit max_decompressed_size={len(body) - 1}" in e.reason
    bundle = b"\x05" + comp
    assert decode_bundle(bundle, limits=Limits(max_decompressed_size=len(body)))[1][0].content == b"s" * 3000
    e = err(decode_bundle, bundle, limits=Limits(max_decompressed_size=len(body) - 1), base=5)
    assert isinstance(e, LimitExceeded) and e.offset == 6
    chunk = encode_entry(bundle)
    assert read_chunk(chunk, base_seq=1, hwmark=9, requested_seq=0, limits=Limits(max_decompressed_size=len(body))).messages
    e = err(
        read_chunk, chunk, base_seq=1, hwmark=9, requested_seq=0, limits=Limits(max_decompressed_size=len(body) - 1), offset=100
    )
    assert isinstance(e, LimitExceeded) and e.offset == 100 + 2 + 1  # bundleLen (2 bytes) + flags
    # the default limit is 64 MiB: a declared length just over it is refused from the header alone
    over = b"\x05" + uv(64 * 1024 * 1024 + 1)
    assert isinstance(err(decode_bundle, over), LimitExceeded)
    assert isinstance(err(read_chunk, encode_entry(over), base_seq=1, hwmark=9, requested_seq=0), LimitExceeded)
    at = b"\x05" + uv(64 * 1024 * 1024)
    assert not isinstance(err(decode_bundle, at), LimitExceeded)
    assert not isinstance(err(read_chunk, encode_entry(at), base_seq=1, hwmark=9, requested_seq=0), LimitExceeded)
    e = err(snappy_decompress, b"\x05garbage", max_size=100, offset=4)
    assert loc(e) == ("messageSet", 4) and "corrupt Snappy" in e.reason


# --------------------------------------------------------------------------- chunks


def _plain(contents: list[bytes], ts: int = 1) -> bytes:
    return encode_entry(encode_bundle([Message(c, ts) for c in contents], compress=False))


def test_sparse_chunk_through_read_chunk() -> None:
    """err 0xfe: the first bundle is sparse and numbers the ones after it."""
    sparse = encode_bundle(
        [Message(b"a", 1, seq=10), Message(b"b", 1, seq=11), Message(b"c", 1, seq=15)], compress=False, sparse=True
    )
    chunk = encode_entry(sparse) + _plain([b"d", b"e"])
    r = read_chunk(chunk, base_seq=None, hwmark=100, requested_seq=0)
    assert [(m.content, m.seq) for m in r.messages] == [(b"a", 10), (b"b", 11), (b"c", 15), (b"d", 16), (b"e", 17)]
    assert (r.next_seq, r.partial, r.min_fetch_size, r.drained) == (18, False, 0, False)
    r = read_chunk(chunk, base_seq=None, hwmark=100, requested_seq=12)
    assert [m.seq for m in r.messages] == [15, 16, 17]
    # a sparse bundle may jump forward after another bundle
    later = encode_entry(encode_bundle([Message(b"z", 1, seq=40)], compress=False, sparse=True))
    r = read_chunk(chunk + later, base_seq=None, hwmark=100, requested_seq=0)
    assert [m.seq for m in r.messages][-2:] == [17, 40] and r.next_seq == 41
    # ... and may equal the running seq
    same = encode_entry(encode_bundle([Message(b"z", 1, seq=18)], compress=False, sparse=True))
    assert read_chunk(chunk + same, base_seq=None, hwmark=100, requested_seq=0).messages[-1].seq == 18
    # but not go back below it
    back = encode_entry(encode_bundle([Message(b"z", 1, seq=17)], compress=False, sparse=True))
    e = err(read_chunk, chunk + back, base_seq=None, hwmark=100, requested_seq=0, offset=1000)
    assert loc(e) == ("firstSeq", 1000 + len(chunk) + 1 + 1) and "below the running seq 18" in e.reason
    # the first bundle of a chunk may start anywhere (below base_seq too)
    assert read_chunk(encode_entry(sparse), base_seq=50, hwmark=100, requested_seq=0).messages[0].seq == 10


def test_sparse_last_seq_consistency() -> None:
    head = bytes([0x40 | 3 << 2]) + u64(10) + uv(5 - 1)  # 10..15
    good = head + raw_msg(b"a", 1) + raw_msg(b"b", 1, delta=2) + raw_msg(b"c", 1)
    assert [m.seq for m in decode_bundle(good)[1]] == [10, 13, 15]
    # a middle delta reaching past lastSeq
    e = err(decode_bundle, head + raw_msg(b"a", 1) + raw_msg(b"b", 1, delta=5) + raw_msg(b"c", 1), base=20)
    assert loc(e) == ("seqDelta", 20 + len(head) + len(raw_msg(b"a", 1))) and "seq 16 disagrees with lastSeq 15" in e.reason
    # a middle message at lastSeq leaves nothing for the last one (it would repeat 15)
    e = err(decode_bundle, head + raw_msg(b"a", 1) + raw_msg(b"b", 1, delta=4) + raw_msg(b"c", 1))
    assert e.field == "seqDelta" and "seq 15 disagrees" in e.reason
    assert [m.seq for m in decode_bundle(head + raw_msg(b"a", 1) + raw_msg(b"b", 1, delta=3) + raw_msg(b"c", 1))[1]] == [
        10,
        14,
        15,
    ]
    # SeqNumPrevPlusOne on the last message must land exactly on lastSeq
    e = err(decode_bundle, head + raw_msg(b"a", 1) + raw_msg(b"b", 1, delta=0) + raw_msg(b"c", 1, flags=4))
    assert e.field == "seqDelta" and "seq 12 disagrees" in e.reason
    head2 = bytes([0x40 | 2 << 2]) + u64(10) + uv(0)  # 10..11
    assert [m.seq for m in decode_bundle(head2 + raw_msg(b"a", 1) + raw_msg(b"b", 1, flags=4))[1]] == [10, 11]
    chunk = encode_entry(head + raw_msg(b"a", 1) + raw_msg(b"b", 1, delta=5) + raw_msg(b"c", 1))
    assert err(read_chunk, chunk, base_seq=None, hwmark=100, requested_seq=0).field == "seqDelta"


def test_chunk_errors_name_field_and_offset() -> None:
    e = err(read_chunk, _plain([b"a"]) + b"\x00", base_seq=1, hwmark=9, requested_seq=0, offset=10)
    assert loc(e) == ("bundleLen", 10 + len(_plain([b"a"])))
    e = err(read_chunk, _plain([b"a"]), base_seq=None, hwmark=9, requested_seq=0, offset=10)
    assert loc(e) == ("flags", 11) and "not sparse" in e.reason
    # a whole entry whose header is truncated is an error
    e = err(read_chunk, b"\x01\x00", base_seq=1, hwmark=9, requested_seq=0)
    assert isinstance(e, TruncatedBundle) and e.field == "count"
    # count too large for a whole entry
    e = err(read_chunk, encode_entry(b"\x0c" + b"\x02\x00" * 2 + b"\x02"), base_seq=1, hwmark=9, requested_seq=0, offset=4)
    assert loc(e) == ("count", 5) and "cannot fit in 5 bytes" in e.reason
    # trailing bytes in a whole entry
    e = err(read_chunk, encode_entry(b"\x04" + raw_msg(b"a", 1) + b"\x00"), base_seq=1, hwmark=9, requested_seq=0, offset=4)
    assert loc(e) == ("messageSet", 4 + 1 + 1 + len(raw_msg(b"a", 1)))
    comp = b"\x05" + bytes(cramjam.snappy.compress_raw(raw_msg(b"a", 1) + b"\x00"))
    e = err(read_chunk, encode_entry(comp), base_seq=1, hwmark=9, requested_seq=0, offset=4)
    assert loc(e) == ("messageSet", 4 + 1 + 1 + len(raw_msg(b"a", 1)))


def test_partial_trailing_bundles() -> None:
    first = _plain([b"a", b"b"])
    second = _plain([b"c", b"dd", b"e"])
    chunk = first + second
    r = read_chunk(chunk, base_seq=1, hwmark=100, requested_seq=0)
    assert [m.seq for m in r.messages] == [1, 2, 3, 4, 5] and not r.partial and r.next_seq == 6
    # cut inside the second bundle's fourth message: its complete messages are delivered
    cut = len(first) + 2 + len(raw_msg(b"c", 1)) + 3
    r = read_chunk(chunk[:cut], base_seq=1, hwmark=100, requested_seq=0)
    assert [m.content for m in r.messages] == [b"a", b"b", b"c"]
    assert (r.partial, r.min_fetch_size, r.next_seq) == (True, len(second), 4)
    # cut one byte short of the end: all but the last message
    r = read_chunk(chunk[:-1], base_seq=1, hwmark=100, requested_seq=0)
    assert [m.content for m in r.messages] == [b"a", b"b", b"c", b"dd"] and r.partial and r.min_fetch_size == len(second)
    # cut inside the header (count varint) of a partial entry
    big = encode_entry(encode_bundle([Message(b"x", 1)] * 20, compress=False))
    r = read_chunk(first + big[:3], base_seq=1, hwmark=100, requested_seq=0)
    assert r.partial and r.min_fetch_size == len(big) and r.next_seq == 3
    # cut inside the bundleLen varint (2 bytes for a bundle of 128 bytes or more)
    big = encode_entry(encode_bundle([Message(b"x" * 10, 1)] * 20, compress=False))
    assert big[0] & 0x80
    r = read_chunk(first + big[:1], base_seq=1, hwmark=100, requested_seq=0)
    assert r.partial and r.min_fetch_size == 1 + 1024
    # a partial compressed bundle is skipped whole
    snap = encode_entry(encode_bundle([Message(b"q" * 2000, 1)], compress=True))
    r = read_chunk(first + snap[:-1], base_seq=1, hwmark=100, requested_seq=0)
    assert [m.seq for m in r.messages] == [1, 2] and r.partial and r.min_fetch_size == len(snap) and r.next_seq == 3
    # a partial bundle wholly before the requested seq: skipped without looking inside
    r = read_chunk(first + second[:-1], base_seq=1, hwmark=100, requested_seq=6)
    assert r.messages == () and r.partial and r.min_fetch_size == len(second) and r.next_seq == 6


def test_fast_skip_does_not_look_inside() -> None:
    garbage = encode_entry(b"\x08" + b"\xff" * 10)  # 2 messages with unknown flags
    good = _plain([b"c"])
    r = read_chunk(garbage + good, base_seq=1, hwmark=100, requested_seq=3)
    assert [(m.content, m.seq) for m in r.messages] == [(b"c", 3)] and r.next_seq == 4
    # one seq earlier and the garbage is read
    assert err(read_chunk, garbage + good, base_seq=1, hwmark=100, requested_seq=2).field == "messageFlags"


def test_hwmark_and_requested() -> None:
    chunk = _plain([b"a", b"b", b"c"]) + _plain([b"d"])
    r = read_chunk(chunk, base_seq=5, hwmark=6, requested_seq=0)
    assert [m.seq for m in r.messages] == [5, 6] and r.next_seq == 7
    r = read_chunk(chunk, base_seq=5, hwmark=8, requested_seq=6)
    assert [m.seq for m in r.messages] == [6, 7, 8] and r.next_seq == 9
    r = read_chunk(chunk, base_seq=5, hwmark=4, requested_seq=0)
    assert r.messages == () and r.next_seq == 0
    r = read_chunk(chunk, base_seq=5, hwmark=100, requested_seq=50)
    assert r.messages == () and r.next_seq == 50
    # requested beyond what the chunk delivered in part: next is still requested
    r = read_chunk(chunk, base_seq=5, hwmark=100, requested_seq=7)
    assert [m.seq for m in r.messages] == [7, 8] and r.next_seq == 9


def test_tail_reads() -> None:
    chunk = _plain([b"a", b"b"])
    r = read_chunk(chunk, base_seq=5, hwmark=100, requested_seq=U64_MAX)
    assert [m.seq for m in r.messages] == [5, 6] and r.next_seq == 7
    r = read_chunk(b"", base_seq=5, hwmark=41, requested_seq=U64_MAX)
    assert r == read_chunk(b"", base_seq=5, hwmark=41, requested_seq=U64_MAX)
    assert (r.messages, r.next_seq, r.drained, r.partial, r.min_fetch_size) == ((), 42, True, False, 0)
    r = read_chunk(b"", base_seq=5, hwmark=41, requested_seq=9)
    assert (r.next_seq, r.drained) == (9, True)
    r = read_chunk(chunk, base_seq=5, hwmark=5, requested_seq=U64_MAX)
    assert [m.seq for m in r.messages] == [5] and r.next_seq == 6 and not r.drained


# --------------------------------------------------------------------------- frames (tank/frames.py)


def _decoder(accept: frozenset[int] = tf.REQUEST_IDS, max_frame: int = 1000) -> tf.FrameDecoder:
    return tf.FrameDecoder(accept, Limits(max_frame_size=max_frame), obsolete_msg={4: "obsolete ReplicaID"})


@pytest.mark.parametrize("step", [1, 2, 5, 1000])
def test_frame_limit_at_the_line_and_one_past(step: int) -> None:
    ok = tf.frame(tf.STATUS, b"x" * 95)  # 100 bytes
    data = tf.frame(tf.PING, b"") + ok
    dec = _decoder(max_frame=100)
    got = []
    for i in range(0, len(data), step):
        dec.feed(data[i : i + step])
        while (f := dec.next_frame()) is not None:
            got.append(f)
    assert got == [(tf.PING, b"", 0), (tf.STATUS, b"x" * 95, 5)] and dec.at_boundary
    dec = _decoder(max_frame=99)
    with pytest.raises(LimitExceeded) as info:
        for i in range(0, len(data), step):
            dec.feed(data[i : i + step])
            while dec.next_frame() is not None:
                pass
    e = info.value
    assert (e.frame, e.field, e.offset) == ("Status", "payloadLen", 6)
    assert "payloadLen 95 exceeds the limit max_frame_size=99" in e.reason


def test_frame_ids_refused_at_the_header() -> None:
    dec = _decoder()
    dec.feed(tf.frame(tf.PING, b"") + b"\x04\x00\x00\x00\x00")
    assert dec.next_frame() == (tf.PING, b"", 0)
    assert not dec.at_boundary
    with pytest.raises(LocalProtocolError) as info:
        dec.next_frame()
    assert info.value.reason == "obsolete ReplicaID 0x04"
    dec = _decoder()
    dec.feed(b"\xee\x00\x00\x00\x00")
    with pytest.raises(LocalProtocolError) as info:
        dec.next_frame()
    assert (info.value.frame, info.value.field, info.value.offset, info.value.reason) == (
        "0xee",
        "msgId",
        0,
        "unknown message id 0xee",
    )
    dec = _decoder(tf.RESPONSE_IDS)
    dec.feed(tf.frame(tf.PRODUCE_WITH_SEQNUM, b""))
    with pytest.raises(LocalProtocolError):
        dec.next_frame()
    dec = _decoder()
    dec.feed(b"\x03\x00\x00\x00")
    assert dec.next_frame() is None and not dec.at_boundary
    dec.feed(b"\x00")
    assert dec.next_frame() == (3, b"", 0) and dec.at_boundary


REQUESTS = [
    tf.Ping(),
    tf.ProduceRequest(
        7,
        (tf.ProduceTopic("t", (tf.ProducePartition(1, b"B1"), tf.ProducePartition(2, b""))),),
        client_id=b"cid",
        required_acks=1,
        ack_timeout_ms=9,
    ),
    tf.ProduceRequest(8, (tf.ProduceTopic("u", (tf.ProducePartition(3, b"BB", 77),)),), with_seqnum=True),
    tf.ConsumeRequest(
        9, (tf.ConsumeTopic("t", (tf.ConsumePartition(1, 5, 4096),)),), max_wait_ms=10, min_bytes=20, client_id=b"c"
    ),
    tf.ConsumeRequest(9, (tf.ConsumeTopic("t", (tf.ConsumePartition(1, U64_MAX, 1),)),), client_version=3, op_flags=1),
    tf.DiscoverPartitionsRequest(1, "t", (0, 65535)),
    tf.DiscoverPartitionsRequest(1, "t"),
    tf.CreateTopicRequest(2, "new", 3, b"k=v"),
    tf.ReloadConfRequest(3, "t", 4),
    tf.StatusRequest(5),
    tf.DiscoverTopicsRequest(6, 1),
    tf.DiscoverTopologyRequest(7, 2),
]


def test_request_exact_bytes() -> None:
    p = tf.ProduceRequest(
        7, (tf.ProduceTopic("t", (tf.ProducePartition(1, b"B1"),)),), client_id=b"cid", required_acks=1, ack_timeout_ms=9
    )
    body = b"\x02\x00" + u32le(7) + b"\x03cid" + b"\x01" + u32le(9) + b"\x01" + b"\x01t" + b"\x01" + b"\x01\x00" + b"\x02" + b"B1"
    assert p.encode() == b"\x01" + u32le(len(body)) + body
    s = tf.ProduceRequest(8, (tf.ProduceTopic("u", (tf.ProducePartition(3, b"BB", 77),)),), with_seqnum=True, client_id=b"")
    body = (
        b"\x02\x00"
        + u32le(8)
        + b"\x00"
        + b"\x00"
        + u32le(0)
        + b"\x01"
        + b"\x01u"
        + b"\x01"
        + b"\x03\x00"
        + b"\x02"
        + u64(77)
        + b"BB"
    )
    assert s.encode() == b"\x05" + u32le(len(body)) + body
    c = tf.ConsumeRequest(
        9,
        (tf.ConsumeTopic("t", (tf.ConsumePartition(1, 5, 4096),)),),
        max_wait_ms=10,
        min_bytes=20,
        client_id=b"c",
        client_version=3,
        op_flags=1,
    )
    body = (
        b"\x03\x00"
        + u32le(9)
        + b"\x01c"
        + u64(10)
        + u32le(20)
        + b"\x01"
        + b"\x01"
        + b"\x01t"
        + b"\x01"
        + b"\x01\x00"
        + u64(5)
        + u32le(4096)
    )
    assert c.encode() == b"\x02" + u32le(len(body)) + body
    assert tf.Ping().encode() == b"\x03" + u32le(0)
    assert tf.DiscoverPartitionsRequest(1, "t", (2,)).encode() == b"\x06" + u32le(8) + u32le(1) + b"\x01t" + b"\x02\x00"
    assert tf.CreateTopicRequest(2, "n", 3, b"kv").encode() == b"\x07" + u32le(11) + u32le(2) + b"\x01n" + b"\x03\x00" + b"\x02kv"
    assert tf.ReloadConfRequest(3, "t", 4).encode() == b"\x08" + u32le(8) + u32le(3) + b"\x01t" + b"\x04\x00"
    assert tf.StatusRequest(5).encode() == b"\x0a" + u32le(4) + u32le(5)
    assert tf.DiscoverTopicsRequest(6, 1).encode() == b"\x0b" + u32le(5) + u32le(6) + b"\x01"
    assert tf.DiscoverTopologyRequest(7, 2).encode() == b"\x0c" + u32le(5) + u32le(7) + b"\x02"
    assert p.msg_id == tf.PRODUCE and s.msg_id == tf.PRODUCE_WITH_SEQNUM
    assert p.layout() == (("t", (1,)),)


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: type(r).__name__)
def test_request_round_trip(req: tf.Request) -> None:
    wire = req.encode()
    dec = _decoder(max_frame=10_000)
    dec.feed(wire)
    f = dec.next_frame()
    assert f is not None
    assert tf.decode_request(f[0], f[1], offset=f[2]) == req


def test_request_encode_refusals() -> None:
    with pytest.raises(LocalProtocolError) as info:
        tf.ProduceRequest(1, (tf.ProduceTopic("t", (tf.ProducePartition(1, b""),)),), with_seqnum=True).encode()
    assert info.value.field == "baseSeqNum"
    with pytest.raises(LocalProtocolError) as info:
        tf.ConsumeRequest(1, (), op_flags=1).encode()
    assert (info.value.frame, info.value.field) == ("Consume", "opFlags")
    assert tf.StatusRequest(1).encode()  # no topic at all
    with pytest.raises(LocalProtocolError, match="256 bytes; str8 holds at most 255") as info:
        tf.DiscoverPartitionsRequest(1, "t" * 256).encode()
    assert info.value.field == "topic"
    assert tf.DiscoverPartitionsRequest(1, "t" * 255).encode()[9] == 255


def u32le(v: int) -> bytes:
    return struct.pack("<I", v)


def test_request_decode_errors_name_field_and_offset() -> None:
    e = err(tf.decode_request, tf.PING, b"x", offset=100)
    assert (e.frame, e.offset) == ("Ping", 105)
    e = err(tf.decode_request, tf.STATUS, u32le(1) + b"z", offset=100)
    assert e.offset == 109 and e.frame == "Status"
    e = err(tf.decode_request, tf.DISCOVER_PARTITIONS, u32le(1) + b"\x01t\x01", offset=100)
    assert (e.field, e.frame) == ("partitionId", "DiscoverPartitions") and "odd byte count" in e.reason
    e = err(tf.decode_request, tf.CONSUME_PEER, u32le(1), offset=100)
    assert (e.field, e.offset) == ("msgId", 100) and "not a client request id 0x09" in e.reason
    e = err(tf.decode_request, tf.CREATE_TOPIC, u32le(1) + b"\x01t\x01\x00" + b"\x05ab", offset=100)
    assert e.field == "config"
    # config length at the limit (max_string_size * 256) and one past
    lim = Limits(max_string_size=1)
    cfg = b"c" * 256
    payload = u32le(1) + b"\x01t\x01\x00" + encode_uvarint(256) + cfg
    assert tf.decode_request(tf.CREATE_TOPIC, payload, limits=lim) == tf.CreateTopicRequest(1, "t", 1, cfg)
    payload = u32le(1) + b"\x01t\x01\x00" + encode_uvarint(257) + cfg + b"c"
    e = err(tf.decode_request, tf.CREATE_TOPIC, payload, limits=lim, offset=10)
    assert isinstance(e, LimitExceeded) and e.field == "config"
    # a produce bundle at the frame limit and one past
    body = tf.ProduceRequest(1, (tf.ProduceTopic("t", (tf.ProducePartition(1, b"b" * 50),)),)).encode()[5:]
    assert tf.decode_request(tf.PRODUCE, body, limits=Limits(max_frame_size=50)).topics[0].partitions[0].bundle == b"b" * 50
    e = err(tf.decode_request, tf.PRODUCE, body, limits=Limits(max_frame_size=49))
    assert isinstance(e, LimitExceeded) and e.field == "bundle"
    e = err(tf.decode_request, tf.PRODUCE, body + b"!", offset=3)
    assert e.offset == 3 + 5 + len(body)
    e = err(tf.decode_request, tf.CONSUME, tf.ConsumeRequest(1, ()).encode()[5:] + b"!", offset=3)
    assert e.offset == 3 + 5 + len(tf.ConsumeRequest(1, ()).encode()) - 5


# --------------------------------------------------------------------------- bundles: what the first run left


class _Many:
    """A message sequence that claims ``n`` messages and holds none."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> object:
        raise RuntimeError("iterated")

    def __getitem__(self, i: int) -> Message:
        raise RuntimeError("indexed")


def test_count_at_the_u32_line() -> None:
    with pytest.raises(RuntimeError, match="iterated"):  # U32_MAX messages are allowed: encoding starts
        encode_bundle(_Many(2**32 - 1), compress=False)  # type: ignore[arg-type]
    e = err(encode_bundle, _Many(2**32), compress=False)
    assert loc(e) == ("count", 0) and e.reason == "too many messages for one bundle"
    e = err(encode_bundle, [])
    assert e.reason == "a bundle needs at least one message (count 0 crashes the real broker)"


def test_sparse_gap_at_the_u32_line() -> None:
    ok = encode_bundle([Message(b"a", seq=1), Message(b"b", seq=2 + 2**32 - 1)], compress=False, sparse=True)
    assert [m.seq for m in decode_bundle(ok)[1]] == [1, 2**32 + 1]
    e = err(encode_bundle, [Message(b"a", seq=1), Message(b"b", seq=2 + 2**32)], compress=False, sparse=True)
    assert loc(e) == ("lastSeq", 0) and e.reason == f"lastSeq {2**32} does not fit in a u32 varint"


def test_error_texts() -> None:
    e = err(encode_bundle, [Message(b"", ts=-1)])
    assert e.reason == "message 0: timestamp -1 is not a u64"
    e = err(parse_bundle_header, b"")
    assert loc(e) == ("flags", 0) and e.reason == "truncated: empty bundle"
    e = err(parse_bundle_header, b"\x00\x00")
    assert e.reason == "bundle message count is 0"
    e = err(parse_bundle_header, b"\x44" + b"\x00" * 7)
    assert loc(e) == ("firstSeq", 1) and e.reason == "truncated: firstSeq needs 8 bytes"
    e = err(parse_bundle_header, b"\x4c" + u64(5) + b"\x00", base=3)
    assert loc(e) == ("lastSeq", 12) and e.reason == "sparse range 5..6 cannot hold 3 messages"
    e = err(decode_bundle, b"\x08" + raw_msg(b"ab", 1))
    assert loc(e) == ("messageFlags", 13) and e.reason == "truncated: message 1 of 2"
    e = err(decode_bundle, b"\x04\x00" + b"\x00" * 7)
    assert e.reason == "truncated: ts needs 8 bytes"
    e = err(decode_bundle, b"\x04\x01" + u64(0))
    assert loc(e) == ("keyLen", 10) and e.reason == "truncated: keyLen"
    e = err(decode_bundle, b"\x04\x01" + u64(0) + b"\x02a")
    assert loc(e) == ("key", 11) and e.reason == "truncated: key needs 2 bytes"
    # a key ending exactly at the end leaves no contentLen: that is what is missing
    e = err(decode_bundle, b"\x04\x01" + u64(0) + b"\x02ab")
    assert loc(e) == ("contentLen", 13)
    e = err(decode_bundle, b"\x04\x00" + u64(0) + b"\x05abc")
    assert loc(e) == ("content", 11) and e.reason == "truncated: content needs 5 bytes, 3 left"
    e = err(read_chunk, b"\x00", base_seq=1, hwmark=9, requested_seq=0)
    assert loc(e) == ("bundleLen", 0) and e.reason == "empty bundle (bundleLen 0)"
    e = err(read_chunk, _plain([b"a"]), base_seq=None, hwmark=9, requested_seq=0)
    assert e.reason == "err 0xfe but the first bundle is not sparse"
    e = err(read_chunk, encode_entry(b"\x04" + raw_msg(b"a", 1) + b"\x00\x00"), base_seq=1, hwmark=9, requested_seq=0)
    assert e.reason == "2 bytes after the last of 1 messages"


def test_varint_errors_in_bundles_name_tank_and_the_field() -> None:
    """Varints are decoded by refwire.wire, which knows no protocol: the bundle
    code names it (tank, bundle) and keeps the field and offset."""
    e = err(parse_bundle_header, b"\x00\x80", base=7)
    assert isinstance(e, TruncatedBundle) and loc(e) == ("count", 8)
    e = err(parse_bundle_header, b"\x48" + u64(5) + b"\xff", base=7)
    assert isinstance(e, TruncatedBundle) and loc(e) == ("lastSeq", 16)
    e = err(parse_bundle_header, b"\x00\xff\xff\xff\xff\xff\x01")
    assert not isinstance(e, TruncatedBundle) and loc(e) == ("count", 1)
    head = bytes([0x40 | 3 << 2]) + u64(10) + uv(5)
    e = err(decode_bundle, head + raw_msg(b"a", 1) + b"\x00\x80", base=100)
    assert isinstance(e, TruncatedBundle) and loc(e) == ("seqDelta", 100 + len(head) + len(raw_msg(b"a", 1)) + 1)
    e = err(read_chunk, b"\xff\xff\xff\xff\xff\x01", base_seq=1, hwmark=9, requested_seq=0, offset=4)
    assert loc(e) == ("bundleLen", 4)
    e = err(snappy_decompress, b"\x80", max_size=10, offset=6)
    assert loc(e) == ("snappyLength", 6)


def test_header_is_read_inside_its_entry() -> None:
    # a 1-byte bundle whose varint count would run into the next entry: truncated, not read from it
    chunk = encode_entry(b"\x00") + _plain([b"a"])
    e = err(read_chunk, chunk, base_seq=1, hwmark=9, requested_seq=0, offset=20)
    assert isinstance(e, TruncatedBundle) and loc(e) == ("count", 22)
    e = err(read_chunk, encode_entry(b"\x84"), base_seq=1, hwmark=9, requested_seq=0, offset=20)
    assert loc(e) == ("flags", 21)
    e = err(decode_bundle, b"\x84", base=10)
    assert loc(e) == ("flags", 10)


def test_content_length_is_read_inside_its_entry() -> None:
    # a bundle ending where its message's contentLen should be, or inside it: truncated there,
    # never read on into the next entry (whose bundleLen would pass for a length)
    for cut in (b"", b"\x80"):
        chunk = encode_entry(b"\x04\x00" + u64(1) + cut) + _plain([b"a"])
        e = err(read_chunk, chunk, base_seq=1, hwmark=9, requested_seq=0, offset=20)
        assert isinstance(e, TruncatedBundle) and loc(e) == ("contentLen", 20 + 1 + 10)
        assert e.reason == f"truncated varint after {len(cut)} bytes"


def test_contents_of_a_memoryview_are_copied_out_to_bytes() -> None:
    bundle = encode_bundle([Message(b"a", 1), Message(b"bc", 2, b"k")], compress=False)
    for data in (bundle, memoryview(bundle)):
        _, msgs = decode_bundle(data, base_seq=1)
        assert msgs == [Message(b"a", 1, None, 1), Message(b"bc", 2, b"k", 2)]
        assert [type(m.content) for m in msgs] == [bytes, bytes]
        entry = encode_entry(bundle)
        r = read_chunk(memoryview(entry) if type(data) is memoryview else entry, base_seq=1, hwmark=9, requested_seq=0)
        assert list(r.messages) == msgs and [type(m.content) for m in r.messages] == [bytes, bytes]


def test_count_exactly_half_the_bytes_in_a_chunk() -> None:
    entry = encode_entry(b"\x08\x02\x00\x02\x00")  # two 2-byte messages in 4 bytes
    r = read_chunk(entry, base_seq=1, hwmark=9, requested_seq=0)
    assert [m.seq for m in r.messages] == [1, 2]


def test_sparse_bundle_after_the_first_must_not_go_back() -> None:
    first = encode_entry(encode_bundle([Message(b"a", 1, seq=10)], compress=False, sparse=True))
    back = encode_entry(encode_bundle([Message(b"b", 1, seq=9)], compress=False, sparse=True))
    e = err(read_chunk, first + back, base_seq=None, hwmark=100, requested_seq=0)
    assert e.field == "firstSeq"


def test_hwmark_stops_the_walk() -> None:
    chunk = _plain([b"a", b"b", b"c"]) + _plain([b"d"])
    r = read_chunk(chunk, base_seq=5, hwmark=5, requested_seq=0)
    assert [m.seq for m in r.messages] == [5] and r.next_seq == 6
    r = read_chunk(chunk, base_seq=5, hwmark=5, requested_seq=U64_MAX)
    assert [m.seq for m in r.messages] == [5] and r.next_seq == 6
    # requested beyond the delivered messages but within the chunk: next is at least requested
    r = read_chunk(_plain([b"a", b"b"]), base_seq=5, hwmark=100, requested_seq=6)
    assert r.next_seq == 7
    r = read_chunk(_plain([b"a"]), base_seq=5, hwmark=100, requested_seq=5)
    assert r.next_seq == 6


def test_the_walk_stops_at_hwmark_before_later_bundles() -> None:
    chunk = _plain([b"a", b"b"]) + encode_entry(b"\x08" + b"\xff" * 10)  # a malformed bundle past hwmark
    r = read_chunk(chunk, base_seq=5, hwmark=5, requested_seq=0)
    assert [m.seq for m in r.messages] == [5] and r.next_seq == 6


def test_a_bundle_ending_at_hwmark_does_not_stop_the_walk() -> None:
    """Only a message above hwmark stops the walk: after a bundle whose last
    message is hwmark itself the next entry is still read (its cut end is
    reported, its malformed message refused)."""
    first = _plain([b"a", b"b"])  # seqs 5, 6
    second = _plain([b"c", b"d"])  # seqs 7, 8
    r = read_chunk(first + second, base_seq=5, hwmark=6, requested_seq=0)
    assert (r.seqs, r.next_seq, r.partial, r.min_fetch_size) == ([5, 6], 7, False, 0)
    r = read_chunk(first + second[:-1], base_seq=5, hwmark=6, requested_seq=0)
    assert (r.seqs, r.next_seq, r.partial, r.min_fetch_size) == ([5, 6], 7, True, len(second))
    garbage = encode_entry(b"\x08" + b"\xff" * 10)  # 2 messages with unknown flags
    e = err(read_chunk, first + garbage, base_seq=5, hwmark=6, requested_seq=0, offset=100)
    assert loc(e) == ("messageFlags", 100 + len(first) + 2)
    # one below and the first bundle's second message passes hwmark: the walk ends there
    r = read_chunk(first + garbage, base_seq=5, hwmark=5, requested_seq=0)
    assert (r.seqs, r.next_seq, r.partial) == ([5], 6, False)


def test_snappy_errors_at_offset_zero_by_default() -> None:
    e = err(snappy_decompress, b"\x05garbage", max_size=100)
    assert loc(e) == ("messageSet", 0)
    e = err(snappy_decompress, b"\x80", max_size=100)
    assert loc(e) == ("snappyLength", 0)


# --------------------------------------------------------------------------- frames: field names of every read and write

Seg = tuple[str, bytes]


def _requests_by_field() -> list[tuple[int, list[Seg]]]:
    """Each request's payload cut into (field, bytes) in wire order."""
    t = b"\x01t"
    return [
        (
            tf.PRODUCE,
            [
                ("clientVersion", b"\x02\x00"),
                ("requestId", u32le(7)),
                ("clientId", b"\x02ci"),
                ("requiredAcks", b"\x01"),
                ("ackTimeoutMs", u32le(9)),
                ("topicsCnt", b"\x01"),
                ("topic", t),
                ("partitionsCnt", b"\x01"),
                ("partitionId", b"\x01\x00"),
                ("bundleLen", b"\x02"),
                ("bundle", b"BB"),
            ],
        ),
        (
            tf.PRODUCE_WITH_SEQNUM,
            [
                ("clientVersion", b"\x02\x00"),
                ("requestId", u32le(7)),
                ("clientId", b"\x00"),
                ("requiredAcks", b"\x01"),
                ("ackTimeoutMs", u32le(9)),
                ("topicsCnt", b"\x01"),
                ("topic", t),
                ("partitionsCnt", b"\x01"),
                ("partitionId", b"\x01\x00"),
                ("bundleLen", b"\x82\x00"),
                ("baseSeqNum", u64(5)),
                ("bundle", b"B" * 2),
            ],
        ),
        (
            tf.CONSUME,
            [
                ("clientVersion", b"\x03\x00"),
                ("requestId", u32le(7)),
                ("clientId", b"\x01c"),
                ("maxWaitMs", u64(1)),
                ("minBytes", u32le(2)),
                ("opFlags", b"\x00"),
                ("topicsCnt", b"\x01"),
                ("topic", t),
                ("partitionsCnt", b"\x01"),
                ("partitionId", b"\x01\x00"),
                ("absSeqNum", u64(3)),
                ("fetchSize", u32le(4)),
            ],
        ),
        (tf.DISCOVER_PARTITIONS, [("requestId", u32le(1)), ("topic", t)]),
        (
            tf.CREATE_TOPIC,
            [
                ("requestId", u32le(1)),
                ("topic", t),
                ("partitions", b"\x01\x00"),
                ("configLen", b"\x82\x00"),
                ("config", b"c" * 2),
            ],
        ),
        (tf.RELOAD_CONF, [("requestId", u32le(1)), ("topic", t), ("partition", b"\x01\x00")]),
        (tf.STATUS, [("requestId", u32le(1))]),
        (tf.DISCOVER_TOPICS, [("requestId", u32le(1)), ("flags", b"\x01")]),
        (tf.DISCOVER_TOPOLOGY, [("requestId", u32le(1)), ("flags", b"\x01")]),
    ]


@pytest.mark.parametrize(("msg_id", "segs"), _requests_by_field(), ids=lambda v: tf._name(v) if isinstance(v, int) else "")
def test_every_truncated_request_names_the_field_it_stopped_in(msg_id: int, segs: list[Seg]) -> None:
    payload = b"".join(b for _, b in segs)
    tf.decode_request(msg_id, payload)  # whole: fine
    pos = 0
    for field, raw in segs:
        for cut in range(pos, pos + len(raw)):
            with pytest.raises(LocalProtocolError) as info:
                tf.decode_request(msg_id, payload[:cut], offset=100)
            e = info.value
            assert (e.field, e.protocol, e.frame) == (field, "tank", tf._name(msg_id)), (field, cut)
            assert 105 + pos <= e.offset <= 105 + cut
        pos += len(raw)


def test_field_names_of_encode_errors() -> None:
    big = "t" * 256
    cases = [
        (lambda: tf.ProduceRequest(1, (), client_id=b"c" * 256).encode(), "clientId"),
        (lambda: tf.ProduceRequest(1, (tf.ProduceTopic(big, ()),)).encode(), "topic"),
        (lambda: tf.ConsumeRequest(1, (), client_id=b"c" * 256).encode(), "clientId"),
        (lambda: tf.ConsumeRequest(1, (tf.ConsumeTopic(big, ()),)).encode(), "topic"),
        (lambda: tf.CreateTopicRequest(1, big, 1).encode(), "topic"),
        (lambda: tf.ReloadConfRequest(1, big, 1).encode(), "topic"),
        (lambda: tf.DiscoverPartitionsRequest(1, big).encode(), "topic"),
    ]
    for make, field in cases:
        with pytest.raises(LocalProtocolError) as info:
            make()
        assert (info.value.field, info.value.protocol) == (field, "tank")
        assert info.value.reason == f"{field} is 256 bytes; str8 holds at most 255"
    # strings with lone surrogates travel as the bytes they stand for
    assert tf.DiscoverPartitionsRequest(1, "a\udcff").encode()[9:12] == b"\x02a\xff"
    assert tf.decode_request(tf.DISCOVER_PARTITIONS, u32le(1) + b"\x02a\xff") == tf.DiscoverPartitionsRequest(1, "a\udcff")
    assert tf.decode_request(tf.DISCOVER_PARTITIONS, u32le(1) + "\x02é".encode()) == tf.DiscoverPartitionsRequest(1, "é")
    with pytest.raises(LocalProtocolError) as info:
        tf.decode_request(tf.DISCOVER_PARTITIONS, u32le(1) + b"\x01t\x01")
    assert info.value.reason == "partition id list has an odd byte count"
    assert tf.decode_request(tf.DISCOVER_PARTITIONS, u32le(1) + b"\x01t\x01\x00\x02\x00").partitions == (1, 2)  # type: ignore[union-attr]
    e = err(tf.decode_request, tf.STATUS, b"")
    assert e.offset == 5  # default offset 0: the payload starts after the 5-byte header


def test_receive_buffer_limit_before_a_header() -> None:
    dec = tf.FrameDecoder(tf.REQUEST_IDS, Limits(max_buffered=10))
    dec.feed(b"\x03\x00\x00\x00\x00" * 2)  # 10 bytes: at the limit
    with pytest.raises(LimitExceeded) as info:
        dec.feed(b"\x03")
    e = info.value
    assert (e.reason, e.protocol, e.field, e.offset) == ("receive buffer overflow", "tank", "buffer", 0)
    dec = tf.FrameDecoder(tf.REQUEST_IDS, Limits(max_buffered=10))
    dec.feed(b"\x0a\x64\x00\x00\x00")
    assert dec.next_frame() is None  # a header is in: the frame limit governs from here
    dec.feed(b"x" * 20)
    assert dec.next_frame() is None


def test_frame_decoder_errors_name_tank() -> None:
    dec = tf.FrameDecoder(tf.REQUEST_IDS, Limits(max_frame_size=10))
    dec.feed(b"\x0a\x06\x00\x00\x00")
    with pytest.raises(LimitExceeded) as info:
        dec.next_frame()
    assert info.value.protocol == "tank"
    dec = tf.FrameDecoder(tf.REQUEST_IDS)
    dec.feed(b"\x09\x00\x00\x00\x00")
    with pytest.raises(LocalProtocolError) as info2:
        dec.next_frame()
    assert (info2.value.protocol, info2.value.frame) == ("tank", "ConsumePeer")


def _produce(**kw: object) -> tf.ProduceRequest:
    base = {"request_id": 1, "topics": (tf.ProduceTopic("t", (tf.ProducePartition(1, b"b", 5),)),), "with_seqnum": True}
    base.update(kw)
    return tf.ProduceRequest(**base)  # type: ignore[arg-type]


def _consume(**kw: object) -> tf.ConsumeRequest:
    base = {"request_id": 1, "topics": (tf.ConsumeTopic("t", (tf.ConsumePartition(1, 2, 3),)),), "client_version": 3}
    base.update(kw)
    return tf.ConsumeRequest(**base)  # type: ignore[arg-type]


_PART = tf.ProducePartition(1, b"b", 5)
_CPART = tf.ConsumePartition(1, 2, 3)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: _produce(client_version=-1), "clientVersion"),
        (lambda: _produce(request_id=-1), "requestId"),
        (lambda: _produce(required_acks=256), "requiredAcks"),
        (lambda: _produce(ack_timeout_ms=-1), "ackTimeoutMs"),
        (lambda: _produce(topics=(tf.ProduceTopic("t", ()),) * 256), "topicsCnt"),
        (lambda: _produce(topics=(tf.ProduceTopic("t", (_PART,) * 256),)), "partitionsCnt"),
        (lambda: _produce(topics=(tf.ProduceTopic("t", (tf.ProducePartition(-1, b""),)),), with_seqnum=False), "partitionId"),
        (lambda: _produce(topics=(tf.ProduceTopic("t", (tf.ProducePartition(1, b"", -1),)),)), "baseSeqNum"),
        (lambda: _consume(client_version=2**16), "clientVersion"),
        (lambda: _consume(request_id=2**32), "requestId"),
        (lambda: _consume(max_wait_ms=-1), "maxWaitMs"),
        (lambda: _consume(min_bytes=-1), "minBytes"),
        (lambda: _consume(op_flags=256), "opFlags"),
        (lambda: _consume(topics=(tf.ConsumeTopic("t", ()),) * 256), "topicsCnt"),
        (lambda: _consume(topics=(tf.ConsumeTopic("t", (_CPART,) * 256),)), "partitionsCnt"),
        (lambda: _consume(topics=(tf.ConsumeTopic("t", (tf.ConsumePartition(-1, 2, 3),)),)), "partitionId"),
        (lambda: _consume(topics=(tf.ConsumeTopic("t", (tf.ConsumePartition(1, -2, 3),)),)), "absSeqNum"),
        (lambda: _consume(topics=(tf.ConsumeTopic("t", (tf.ConsumePartition(1, 2, -3),)),)), "fetchSize"),
        (lambda: tf.DiscoverPartitionsRequest(-1, "t"), "requestId"),
        (lambda: tf.DiscoverPartitionsRequest(1, "t", (2**16,)), "partitionId"),
        (lambda: tf.CreateTopicRequest(-1, "t", 1), "requestId"),
        (lambda: tf.CreateTopicRequest(1, "t", -1), "partitions"),
        (lambda: tf.ReloadConfRequest(-1, "t", 1), "requestId"),
        (lambda: tf.ReloadConfRequest(1, "t", -1), "partition"),
        (lambda: tf.StatusRequest(-1), "requestId"),
        (lambda: tf.DiscoverTopicsRequest(-1), "requestId"),
        (lambda: tf.DiscoverTopicsRequest(1, 256), "flags"),
        (lambda: tf.DiscoverTopologyRequest(-1), "requestId"),
        (lambda: tf.DiscoverTopologyRequest(1, 256), "flags"),
    ],
)
def test_every_encode_range_error_names_its_field(make: object, field: str) -> None:
    with pytest.raises(LocalProtocolError) as info:
        make().encode()  # type: ignore[operator]
    assert info.value.field == field


def test_request_fields_survive_a_round_trip() -> None:
    p = _produce(client_version=3, client_id=b"x", required_acks=2, ack_timeout_ms=7)
    assert tf.decode_request(p.msg_id, p.encode()[5:]) == p
    with pytest.raises(LocalProtocolError) as info:
        tf.ConsumeRequest(1, (), op_flags=1).encode()
    e = info.value
    assert (e.reason, e.protocol) == ("opFlags need clientVersion >= 3", "tank")


def test_produce_with_seqnum_needs_a_base_seq() -> None:
    with pytest.raises(LocalProtocolError) as info:
        _produce(topics=(tf.ProduceTopic("t", (tf.ProducePartition(1, b""),)),)).encode()
    e = info.value
    assert (e.reason, e.protocol, e.field) == ("ProduceWithSeqnum needs base_seq on every partition", "tank", "baseSeqNum")


# -- the connection's memory budget (specs/tank/README.md §6, limits) -----------------------


def _budget_broker(budget: int) -> BrokerConnection:
    from refwire.tank.frames import broker_limits

    return BrokerConnection(now=0.0, limits=attrs.evolve(broker_limits(), max_connection_memory=budget))


def test_a_request_may_take_a_third_of_the_budget_at_its_header() -> None:
    """At the line (header included) the frame is taken; one byte past, its header is refused."""
    from refwire.errors import RemoteLimitExceeded
    from refwire.tank.connection import NEED_DATA

    budget = 3 * 1000
    ok = _budget_broker(budget)
    ok.receive_data(struct.pack("<BI", 0x03, 1000 - 5), now=0.0)  # a Ping of 995 payload bytes: announced, not refused
    assert ok.next_event() is NEED_DATA
    over = _budget_broker(budget)
    over.receive_data(struct.pack("<BI", 0x03, 1000 - 4), now=0.0)
    with pytest.raises(RemoteLimitExceeded, match=r"max_connection_memory=3000 \(a request may take 1000 bytes"):
        over.next_event()


def test_the_default_budget_keeps_the_64_mib_request_limit() -> None:
    from refwire.tank.frames import DEFAULT_MAX_REQUEST, broker_limits, memory_caps

    limits, name = memory_caps(broker_limits())
    assert (limits.max_frame_size, name) == (DEFAULT_MAX_REQUEST, "max_frame_size")
    small, name = memory_caps(attrs.evolve(broker_limits(), max_connection_memory=16 << 20))
    assert (small.max_frame_size, small.max_decompressed_size, name) == ((16 << 20) // 3, 4 << 20, "max_connection_memory")


def test_a_bundle_is_refused_when_its_messages_would_be_held_over_the_request_share() -> None:
    """16 MiB budget: a request's share is 5592405 bytes, a message is held as 128 bytes at
    least, so 43690 messages are decoded and 43691 refused from the bundle's count, on both
    paths, before a Snappy set is inflated."""
    from refwire.tank.bundles import MESSAGE_HELD

    assert MESSAGE_HELD == 128
    lim = Limits(max_connection_memory=16 << 20)

    def bundle(n: int) -> bytes:
        return b"\x00" + encode_uvarint(n) + b"\x00" * 10 + b"\x02\x00" * (n - 1)

    for fast in (False, True):
        header, msgs = decode_bundle(bundle(43690), limits=lim, fast=fast)
        assert header.count == len(msgs) == 43690
        with pytest.raises(LimitExceeded) as info:
            decode_bundle(bundle(43691), limits=lim, fast=fast, base=7)
        assert loc(info.value) == ("count", 7) and "max_connection_memory=16777216" in info.value.reason
        snappy = b"\x01" + encode_uvarint(43691) + bytes(cramjam.snappy.compress_raw(bundle(43691)[4:]))
        with pytest.raises(LimitExceeded, match="held as 128 bytes"):
            decode_bundle(snappy, limits=lim, fast=fast)
