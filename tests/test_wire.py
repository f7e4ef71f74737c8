"""The shared byte layer on its own: buffer, reader/writer, varint, modified UTF-8, limits."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from refwire.errors import LimitExceeded, LocalProtocolError, RemoteLimitExceeded, RemoteProtocolError
from refwire.wire import (
    Limits,
    Reader,
    ReceiveBuffer,
    Writer,
    check_limit,
    decode_mutf8,
    decode_uvarint,
    encode_mutf8,
    encode_uvarint,
)

# --------------------------------------------------------------------------- ReceiveBuffer


def test_buffer_adopts_first_chunk_without_copy() -> None:
    chunk = b"abcdef"
    buf = ReceiveBuffer()
    buf.feed(chunk)
    assert buf.data is chunk
    assert buf.take(2) == b"ab"
    buf.feed(b"gh")
    assert len(buf) == 6
    assert buf.take(6) == b"cdefgh"
    assert len(buf) == 0 and buf.consumed == 8


@given(st.binary(max_size=300), st.lists(st.integers(1, 40), max_size=50))
def test_buffer_any_chunking_preserves_bytes(data: bytes, cuts: list[int]) -> None:
    buf = ReceiveBuffer()
    out = bytearray()
    pos = 0
    for c in cuts:
        buf.feed(data[pos : pos + c])
        pos += c
        if len(buf) >= 3:
            out += buf.take(3)
    buf.feed(data[pos:])
    out += buf.take(len(buf))
    assert bytes(out) == data
    assert buf.consumed == len(data)


class _CountingBytearray(bytearray):
    pass


def test_buffer_one_byte_at_a_time_is_linear() -> None:
    """Feeding n bytes one at a time and consuming them in frames costs O(n):
    the buffer never holds more than a bounded dead prefix (so copies stay linear)."""
    n = 300_000
    buf = ReceiveBuffer()
    max_backing = 0
    for _ in range(n):
        buf.feed(b"x")
        if len(buf) == 10:
            buf.advance_to(buf.pos + 10)
        max_backing = max(max_backing, len(buf.data))
    # The backing store never grows with n: the dead prefix is dropped.
    assert max_backing <= 2 * 64 * 1024 + 10
    assert buf.consumed == n - len(buf)


def test_buffer_compacts_dead_prefix() -> None:
    buf = ReceiveBuffer()
    buf.feed(b"a" * 100)
    buf.feed(b"b" * 200_000)  # now a bytearray
    buf.advance_to(buf.pos + 150_000)
    buf.feed(b"c")  # compaction happens here
    assert buf.pos == 0
    assert len(buf) == 50_101
    assert buf.peek(1) == b"b"


def test_buffer_take_past_end_is_an_error() -> None:
    buf = ReceiveBuffer()
    buf.feed(b"ab")
    with pytest.raises(ValueError):
        buf.take(3)


# --------------------------------------------------------------------------- Reader / Writer


def test_reader_reads_every_int_kind() -> None:
    w = Writer().u8(1).u16be(2).u32be(3).i32be(-4).u64be(5).i64be(-6).u16le(7).u32le(8).u64le(9).bool8(True)
    r = Reader(w.getvalue())
    assert [r.u8("a"), r.u16be("b"), r.u32be("c"), r.i32be("d"), r.u64be("e"), r.i64be("f")] == [1, 2, 3, -4, 5, -6]
    assert [r.u16le("g"), r.u32le("h"), r.u64le("i"), r.bool8("j")] == [7, 8, 9, True]
    r.expect_end()


def test_reader_truncation_names_field_and_absolute_offset() -> None:
    r = Reader(b"\x00\x01\x02", base=1000, protocol="demo", frame="Thing")
    r.u16be("first")
    with pytest.raises(LocalProtocolError) as info:
        r.u32be("length")
    err = info.value
    assert (err.protocol, err.frame, err.field, err.offset) == ("demo", "Thing", "length", 1002)
    assert "length" in str(err) and "1002" in str(err)


def test_reader_raw_checks_limit_before_reading() -> None:
    r = Reader(b"\x00" * 10, protocol="demo", frame="F")
    with pytest.raises(LimitExceeded) as info:
        r.raw(1 << 40, "payload", limit=1024)
    assert info.value.field == "payload"
    with pytest.raises(LocalProtocolError):
        r.raw(11, "payload")
    with pytest.raises(LocalProtocolError):
        r.raw(-1, "payload")


def test_reader_trailing_bytes_and_bad_bool() -> None:
    r = Reader(b"\x02\x00")
    with pytest.raises(LocalProtocolError):
        r.bool8("flag")
    with pytest.raises(LocalProtocolError):
        Reader(b"\x00").expect_end()


def test_writer_range_errors_name_the_field() -> None:
    with pytest.raises(LocalProtocolError) as info:
        Writer().u32be(1 << 32, "count")
    assert info.value.field == "count"


@given(st.lists(st.binary(max_size=20), max_size=20))
def test_reader_never_raises_anything_but_protocol_errors(chunks: list[bytes]) -> None:
    data = b"".join(chunks)
    r = Reader(data)
    try:
        while True:
            n = r.u8("n")
            r.raw(n, "body", limit=16)
            r.u32be("x")
    except LocalProtocolError:
        pass


# --------------------------------------------------------------------------- varint


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"), (16384, "808001"), (0xFFFFFFFF, "ffffffff0f")],
)
def test_uvarint_vectors(value: int, encoded: str) -> None:
    assert encode_uvarint(value).hex() == encoded
    assert decode_uvarint(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


@given(st.integers(0, 0xFFFFFFFF))
def test_uvarint_round_trip(v: int) -> None:
    enc = encode_uvarint(v)
    assert 1 <= len(enc) <= 5
    assert decode_uvarint(enc + b"\xff", 0) == (v, len(enc))


def test_uvarint_errors() -> None:
    with pytest.raises(LocalProtocolError, match="truncated"):
        decode_uvarint(b"\x80\x80", 0)
    with pytest.raises(LocalProtocolError, match="longer than 5"):
        decode_uvarint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(LocalProtocolError, match="overflows"):
        decode_uvarint(b"\xff\xff\xff\xff\x1f", 0)
    with pytest.raises(LocalProtocolError) as info:
        decode_uvarint(b"\x00\x80", 1, base=100, field="count")
    assert info.value.offset == 101 and info.value.field == "count"
    with pytest.raises(LocalProtocolError):
        encode_uvarint(1 << 32)
    assert decode_uvarint(encode_uvarint(1 << 40, bits=64), 0, max_bytes=10, bits=64)[0] == 1 << 40


# --------------------------------------------------------------------------- modified UTF-8


@pytest.mark.parametrize(
    ("text", "encoded"),
    [
        ("abc", "616263"),
        ("\x00", "c080"),  # NUL is never a raw zero byte
        ("a\x00b", "61c08062"),
        ("é", "c3a9"),
        ("€", "e282ac"),
        ("\U0001f600", "eda0bdedb880"),  # surrogate pair, 3 bytes each (not the 4-byte UTF-8 form)
        ("\ud800", "eda080"),  # a lone surrogate, as a Java String may hold
    ],
)
def test_mutf8_vectors(text: str, encoded: str) -> None:
    assert encode_mutf8(text).hex() == encoded
    assert decode_mutf8(bytes.fromhex(encoded)) == text


@given(st.text())
def test_mutf8_round_trip(text: str) -> None:
    enc = encode_mutf8(text)
    assert b"\x00" not in enc
    assert decode_mutf8(enc) == text


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), min_codepoint=1, max_codepoint=0xFFFF)))
def test_mutf8_equals_utf8_inside_the_bmp_without_nul(text: str) -> None:
    assert encode_mutf8(text) == text.encode("utf-8")


@pytest.mark.parametrize("bad", ["f09f9880", "80", "c3", "e282", "ff", "c341"])
def test_mutf8_malformed(bad: str) -> None:
    with pytest.raises(ValueError):
        decode_mutf8(bytes.fromhex(bad))


def test_mutf8_tolerates_raw_nul_and_overlong_like_the_jdk() -> None:
    assert decode_mutf8(b"a\x00") == "a\x00"
    assert decode_mutf8(bytes.fromhex("c1a1")) == "a"  # overlong 2-byte form: DataInputStream accepts it


def test_java_utf_length_prefix_and_limit() -> None:
    w = Writer().java_utf("hé")
    assert w.getvalue() == b"\x00\x03h\xc3\xa9"
    assert Reader(w.getvalue()).java_utf("name") == "hé"
    with pytest.raises(LocalProtocolError, match="65535"):
        Writer().java_utf("€" * 21846)  # 65538 bytes encoded
    Writer().java_utf("a" * 65535)
    with pytest.raises(LocalProtocolError) as info:
        Reader(b"\x00\x02\xc3\x41", base=7).java_utf("name")
    assert info.value.field == "name" and info.value.offset == 7


# --------------------------------------------------------------------------- limits and errors


def test_limits_validate_and_check() -> None:
    with pytest.raises(ValueError):
        Limits(max_window=-1)
    check_limit(10, 10, name="max_window", field="count")
    with pytest.raises(LimitExceeded) as info:
        check_limit(11, 10, name="max_window", field="count", frame="W", offset=3, protocol="lumberjack")
    assert "max_window=10" in str(info.value) and info.value.offset == 3


def test_local_errors_become_remote_with_the_same_location() -> None:
    local = LimitExceeded("too big", protocol="p", frame="F", field="len", offset=9)
    remote = local.as_remote()
    assert isinstance(remote, RemoteLimitExceeded) and isinstance(remote, RemoteProtocolError)
    assert (remote.protocol, remote.frame, remote.field, remote.offset) == ("p", "F", "len", 9)
    plain = LocalProtocolError("bad").as_remote()
    assert type(plain) is RemoteProtocolError


def test_struct_is_never_leaked() -> None:
    # A reader over any prefix of a valid frame raises only LocalProtocolError.
    frame = Writer().u32be(5).raw(b"hello").u64le(1).getvalue()
    for cut in range(len(frame)):
        r = Reader(frame[:cut])
        with pytest.raises(LocalProtocolError):
            n = r.u32be("len")
            r.raw(n, "body")
            r.u64le("tail")
    assert struct.calcsize(">I") == 4
