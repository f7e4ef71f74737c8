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


# --------------------------------------------------------------------------- gaps found by mutation testing
# (scripts/mutation.sh src/refwire/wire.py): boundaries, exact error locations,
# and the branches the tests above do not reach.


def _bytearray_buffer(total: int) -> ReceiveBuffer:
    """A buffer whose backing store is a ``bytearray`` of ``total`` bytes at pos 0."""
    buf = ReceiveBuffer()
    buf.feed(b"x" * (total - 1))
    buf.feed(b"y")  # smaller than what is buffered: copied into a bytearray
    assert type(buf.data) is bytearray and buf.pos == 0 and len(buf.data) == total
    return buf


@pytest.mark.parametrize(
    ("total", "dead", "compacts"),
    [
        (131072, 65536, True),  # dead prefix exactly 64 KiB and exactly half the buffer
        (131073, 65536, False),  # one byte short of half
        (131070, 65535, False),  # half, but one byte under 64 KiB
        (200_000, 150_000, True),
    ],
)
def test_buffer_compaction_threshold(total: int, dead: int, compacts: bool) -> None:
    buf = _bytearray_buffer(total)
    buf.advance_to(dead)
    buf.feed(b"z")
    assert type(buf.data) is bytearray
    if compacts:
        assert (buf.pos, len(buf.data)) == (0, total - dead + 1)
    else:
        assert (buf.pos, len(buf.data)) == (dead, total + 1)
    assert len(buf) == total - dead + 1
    assert buf.take(len(buf)) == b"x" * (total - dead - 1) + b"yz"
    assert buf.consumed == total + 1


def test_buffer_feed_branches() -> None:
    buf = ReceiveBuffer()
    buf.feed(b"")
    assert buf.data == b"" and not buf
    src = bytearray(b"abcd")
    buf.feed(src)  # empty buffer: a bytearray is copied into bytes, not adopted
    src[0] = ord("z")
    assert type(buf.data) is bytes and buf.data == b"abcd"
    buf.feed(memoryview(b""))
    assert buf.take(1) == b"a"
    buf.feed(b"efg")  # exactly what remains: joined into bytes
    assert type(buf.data) is bytes and (buf.pos, buf.data) == (0, b"bcdefg")
    buf.take(2)
    buf.feed(b"hi")  # smaller than what remains (4): bytearray from pos
    assert type(buf.data) is bytearray and (buf.pos, bytes(buf.data)) == (0, b"defghi")
    buf.feed(memoryview(b"jk"))
    assert bytes(buf.data) == b"defghijk" and buf.pos == 0
    buf2 = ReceiveBuffer()
    buf2.feed(memoryview(b"mv"))
    assert type(buf2.data) is bytes and buf2.data == b"mv"


def test_buffer_advance_take_peek_clear_bool() -> None:
    buf = ReceiveBuffer()
    assert not buf and len(buf) == 0
    buf.feed(b"abcdef")
    assert buf and buf.peek(2) == b"ab" and buf.peek(100) == b"abcdef" and len(buf) == 6
    buf.advance_to(2)
    assert (buf.pos, buf.consumed, len(buf)) == (2, 2, 4)
    assert buf.peek(1) == b"c"
    buf.advance_to(6)  # everything: the buffer lets go of the data
    assert (buf.pos, buf.data, buf.consumed, bool(buf)) == (0, b"", 6, False)
    buf.feed(b"x" * 5)
    buf.feed(b"yz")
    out = buf.take(3)
    assert type(out) is bytes and out == b"xxx"
    assert buf.take(4) == b"xxyz" and not buf
    assert (buf.pos, buf.data) == (0, b"")
    buf.feed(b"12345")
    with pytest.raises(ValueError, match=r"^take\(\) past the end of the buffer$"):
        buf.take(6)
    assert buf.take(5) == b"12345"
    buf.feed(b"abc")
    buf.take(1)
    buf.clear()
    assert (buf.consumed, len(buf), buf.pos, buf.data, bool(buf)) == (21, 0, 0, b"", False)


# -- Reader


def _err(exc_type: type[BaseException], fn: object, *args: object, **kw: object) -> LocalProtocolError:
    with pytest.raises(exc_type) as info:
        fn(*args, **kw)  # type: ignore[operator]
    assert isinstance(info.value, LocalProtocolError)
    return info.value


@pytest.mark.parametrize(
    ("method", "size"),
    [("u8", 1), ("u16be", 2), ("u32be", 4), ("i32be", 4), ("u64be", 8), ("i64be", 8), ("u16le", 2), ("u32le", 4), ("u64le", 8), ("bool8", 1)],
)
def test_reader_every_int_at_exactly_its_size_and_one_short(method: str, size: int) -> None:
    r = Reader(b"\x01" * 3 + b"\x00" * size, start=3, base=500, protocol="p", frame="F")
    assert (r.pos, r.offset, r.remaining) == (3, 500, size)
    getattr(r, method)("f")
    assert (r.pos, r.offset, r.remaining) == (3 + size, 500 + size, 0)
    r.expect_end()
    short = Reader(b"\x00" * (size - 1) + b"\x09", end=size - 1, base=10, protocol="p", frame="F")
    err = _err(LocalProtocolError, getattr(short, method), "the_field")
    assert (err.protocol, err.frame, err.field, err.offset) == ("p", "F", "the_field", 10)
    assert f"the_field needs {size} bytes, {size - 1} left" in str(err)


def test_reader_int_values_and_byte_order() -> None:
    data = bytes(range(1, 9))
    assert Reader(data).u16be("x") == 0x0102 and Reader(data).u16le("x") == 0x0201
    assert Reader(data).u32be("x") == 0x01020304 and Reader(data).u32le("x") == 0x04030201
    assert Reader(data).u64be("x") == 0x0102030405060708 and Reader(data).u64le("x") == 0x0807060504030201
    assert Reader(b"\xff" * 8).i32be("x") == -1 and Reader(b"\xff" * 8).i64be("x") == -1
    assert Reader(b"\xff").u8("x") == 255


def test_reader_bool8_error_points_at_the_byte() -> None:
    r = Reader(b"\x00\x01\x02", base=40, protocol="p", frame="F")
    assert r.bool8("a") is False
    assert r.bool8("b") is True
    err = _err(LocalProtocolError, r.bool8, "flag")
    assert (err.protocol, err.frame, err.field, err.offset) == ("p", "F", "flag", 42)
    assert "got 2" in str(err)


def test_reader_uvarint_offsets_and_position() -> None:
    r = Reader(b"\xff\xac\x02\x05\x80\x01", start=1, end=5, base=100, protocol="p", frame="F")
    assert r.uvarint("a") == 300 and (r.pos, r.offset) == (3, 102)
    assert r.uvarint("b") == 5 and r.offset == 103
    err = _err(LocalProtocolError, r.uvarint, "c")  # \x80 then end (the \x01 is past end)
    assert (err.field, err.offset) == ("c", 103) and "truncated" in str(err)
    big = encode_uvarint(1 << 40, bits=64)
    assert Reader(big).uvarint("v", max_bytes=10, bits=64) == 1 << 40
    err = _err(LocalProtocolError, Reader(big, base=7).uvarint, "v")
    assert (err.field, err.offset) == ("v", 7) and "longer than 5" in str(err)
    err = _err(LocalProtocolError, Reader(encode_uvarint(256, bits=64), base=7).uvarint, "v", bits=8)
    assert (err.field, err.offset) == ("v", 7) and "overflows u8" in str(err)
    assert Reader(encode_uvarint(255)).uvarint("v", bits=8) == 255


def test_reader_raw_limits_at_and_one_past() -> None:
    r = Reader(b"\x00" * 3 + b"abcdefgh", start=3, base=1000, protocol="p", frame="F")
    assert r.raw(4, "body", limit=4) == b"abcd"  # exactly the limit
    err = _err(LimitExceeded, r.raw, 4, "body", limit=3, limit_name="max_string_size")
    assert (err.protocol, err.frame, err.field, err.offset) == ("p", "F", "body", 1004)
    assert "body 4 exceeds the limit max_string_size=3" in str(err)
    err = _err(LimitExceeded, r.raw, 5, "body", limit=4)
    assert "max_frame_size=4" in str(err)
    assert r.pos == 7  # nothing consumed by the failures
    err = _err(LocalProtocolError, r.raw, -1, "body")
    assert (err.field, err.offset) == ("body", 1004) and "negative length -1" in str(err)
    err = _err(LocalProtocolError, r.raw, 5, "body")  # one past what is there
    assert (err.protocol, err.frame, err.field, err.offset) == ("p", "F", "body", 1004)
    out = r.raw(4, "body")  # exactly what is there
    assert type(out) is bytes and out == b"efgh" and r.remaining == 0
    assert r.raw(0, "empty") == b""


def test_reader_rest_and_expect_end() -> None:
    r = Reader(memoryview(b"hdr-rest-tail"), start=4, end=8, base=20, protocol="p", frame="F")
    out = r.rest("tail")
    assert type(out) is bytes and out == b"rest" and r.remaining == 0
    r.expect_end()
    r = Reader(b"abc", base=5, protocol="p", frame="F")
    r.u8("a")
    err = _err(LocalProtocolError, r.expect_end)
    assert (err.protocol, err.frame, err.field, err.offset) == ("p", "F", "(end)", 6)
    assert "2 unexpected trailing bytes" in str(err)


def test_reader_error_defaults_to_the_current_offset() -> None:
    r = Reader(b"abc", base=10, protocol="p", frame="F")
    r.u8("a")
    err = r.error("why", field="f")
    assert (err.protocol, err.frame, err.field, err.offset) == ("p", "F", "f", 11)
    assert r.error("why", offset=3).offset == 3 and r.error("why").field is None


def test_reader_java_utf_errors_and_position() -> None:
    data = b"\xff" + Writer().java_utf("h\u00e9").getvalue() + b"!"
    r = Reader(data, start=1, base=50, protocol="p", frame="F")
    assert r.java_utf("name") == "h\u00e9" and r.offset == 55 and r.u8("x") == ord("!")
    err = _err(LocalProtocolError, Reader(b"\x00\x03ab", base=9, protocol="p", frame="F").java_utf, "name")
    assert (err.protocol, err.frame, err.field, err.offset) == ("p", "F", "name", 11)  # after the length
    assert "needs 3 bytes, 2 left" in str(err)
    err = _err(LocalProtocolError, Reader(b"\x00\x03a\xc3\x41", base=9, protocol="p", frame="F").java_utf, "name")
    assert (err.protocol, err.frame, err.field, err.offset) == ("p", "F", "name", 9)  # the string's start
    assert "malformed modified UTF-8: malformed input around byte 1" in str(err)
    assert Reader(b"\x00\x00").java_utf("e") == ""


# -- Writer


@pytest.mark.parametrize(
    ("method", "default", "lo", "hi"),
    [
        ("u8", "u8", 0, 0xFF),
        ("u16be", "u16", 0, 0xFFFF),
        ("u16le", "u16", 0, 0xFFFF),
        ("u32be", "u32", 0, 0xFFFFFFFF),
        ("u32le", "u32", 0, 0xFFFFFFFF),
        ("i32be", "i32", -(1 << 31), (1 << 31) - 1),
        ("u64be", "u64", 0, (1 << 64) - 1),
        ("u64le", "u64", 0, (1 << 64) - 1),
        ("i64be", "i64", -(1 << 63), (1 << 63) - 1),
    ],
)
def test_writer_ranges_at_and_one_past(method: str, default: str, lo: int, hi: int) -> None:
    w = Writer()
    assert getattr(w, method)(lo) is w and getattr(w, method)(hi, "named") is w
    r = Reader(w.getvalue())
    reader_method = getattr(r, method)
    assert (reader_method("lo"), reader_method("hi")) == (lo, hi)
    r.expect_end()
    for bad in (lo - 1, hi + 1):
        err = _err(LocalProtocolError, getattr(Writer(), method), bad)
        assert err.field == default and f"{default} value {bad} out of range" in str(err)
        assert _err(LocalProtocolError, getattr(Writer(), method), bad, "count").field == "count"


def test_writer_raw_bool_uvarint_len() -> None:
    w = Writer()
    assert len(w) == 0
    assert w.raw(b"ab") is w and w.raw(memoryview(b"c")) is w
    assert w.bool8(False) is w and w.bool8(True) is w
    assert w.uvarint(300) is w and w.uvarint(1 << 40, bits=64) is w
    assert w.getvalue() == b"abc\x00\x01\xac\x02" + encode_uvarint(1 << 40, bits=64)
    assert len(w) == 7 + 6 and type(w.getvalue()) is bytes
    err = _err(LocalProtocolError, Writer().uvarint, 1 << 32)
    assert err.field == "varint"


def test_writer_java_utf_limit_at_and_one_past() -> None:
    w = Writer()
    assert w.java_utf("a" * 0xFFFF) is w
    assert w.getvalue()[:2] == b"\xff\xff" and len(w) == 2 + 0xFFFF
    err = _err(LocalProtocolError, Writer().java_utf, "a" * 0x10000)
    assert err.field == "string" and "encoded string is 65536 bytes" in str(err)
    err = _err(LocalProtocolError, Writer().java_utf, "\x00" * 0x8000, "label")  # 2 bytes per NUL: 65536
    assert err.field == "label"
    assert Writer().java_utf("\x00" * 0x7FFF).getvalue()[:2] == b"\xff\xfe"
    assert Writer().java_utf("").getvalue() == b"\x00\x00"


# -- varint at the edges


def test_uvarint_at_2_to_the_32() -> None:
    assert encode_uvarint((1 << 32) - 1) == b"\xff\xff\xff\xff\x0f"
    err = _err(LocalProtocolError, encode_uvarint, 1 << 32)
    assert err.field == "varint" and "does not fit in u32" in str(err)
    assert encode_uvarint(1 << 32, bits=64) == b"\x80\x80\x80\x80\x10"
    err = _err(LocalProtocolError, decode_uvarint, b"\x00\x80\x80\x80\x80\x10", 1, base=30, field="n")
    assert (err.field, err.offset) == ("n", 31) and "varint value 4294967296 overflows u32" in str(err)
    assert decode_uvarint(b"\x80\x80\x80\x80\x10", 0, bits=33) == (1 << 32, 5)
    err = _err(LocalProtocolError, encode_uvarint, -1)
    assert err.field == "varint" and "-1" in str(err)
    assert encode_uvarint(0x7F) == b"\x7f" and encode_uvarint(0x3FFF) == b"\xff\x7f"
    assert encode_uvarint((1 << 64) - 1, bits=64) == b"\xff" * 9 + b"\x01"
    assert decode_uvarint(b"\xff" * 9 + b"\x01", 0, max_bytes=10, bits=64) == ((1 << 64) - 1, 10)


def test_uvarint_max_bytes_and_end_exactly() -> None:
    five = b"\x80\x80\x80\x80\x01"
    assert decode_uvarint(five, 0, max_bytes=5, bits=64) == (1 << 28, 5)  # exactly max_bytes long
    err = _err(LocalProtocolError, decode_uvarint, five, 0, max_bytes=4, bits=64, field="n", base=3)
    assert (err.field, err.offset) == ("n", 3) and "varint longer than 4 bytes" in str(err)
    assert decode_uvarint(b"\x05\x81\x01", 1, 3) == (129, 3)  # ends exactly at end
    err = _err(LocalProtocolError, decode_uvarint, b"\x05\x81\x01", 1, 2, field="n", base=3)
    assert (err.field, err.offset) == ("n", 4) and "truncated varint after 1 bytes" in str(err)
    err = _err(LocalProtocolError, decode_uvarint, b"", 0)
    assert (err.field, err.offset) == ("varint", 0) and "after 0 bytes" in str(err)
    assert decode_uvarint(bytearray(b"\x07"), 0) == (7, 1) and decode_uvarint(memoryview(b"\x07"), 0) == (7, 1)


# -- modified UTF-8 at its boundaries


@pytest.mark.parametrize(
    ("text", "encoded"),
    [
        ("\x7f\x80", "7fc280"),  # last 1-byte, first 2-byte (outside the ASCII fast path)
        ("\x01\u07ff", "01dfbf"),
        ("\u0800", "e0a080"),  # first 3-byte
        ("\uffff", "efbfbf"),  # last BMP character: 3 bytes
        ("\U00010000", "eda080edb080"),  # first supplementary: a surrogate pair
        ("\U0010ffff", "edafbfedbfbf"),  # last code point
        ("\udc00", "edb080"),  # lone low surrogate
        ("\ud800a", "eda08061"),  # high surrogate followed by a non-surrogate
        ("\udc00\ud800", "edb080eda080"),  # mismatched order: two lone surrogates
        ("\udbff\ue000", "edafbfee8080"),  # high followed by the first code after the lows
        ("\ud7ff\udc00", "ed9fbfedb080"),  # the code before the highs, then a low
        ("\ud800\U00010000", "eda080eda080edb080"),  # high high low: lone high, then a pair
        ("\U0001f600\x00", "eda0bdedb880c080"),
    ],
)
def test_mutf8_boundaries(text: str, encoded: str) -> None:
    assert encode_mutf8(text).hex() == encoded
    assert decode_mutf8(bytes.fromhex(encoded)) == text


def test_mutf8_pairs_join_at_both_ends_of_the_range() -> None:
    assert decode_mutf8(bytes.fromhex("eda080edb080")) == "\U00010000"  # D800 DC00
    assert decode_mutf8(bytes.fromhex("edafbfedbfbf")) == "\U0010ffff"  # DBFF DFFF
    assert decode_mutf8(bytes.fromhex("edafbfedb080")) == "\U0010fc00"  # DBFF DC00
    assert decode_mutf8(bytes.fromhex("eda080edbfbf")) == "\U000103ff"  # D800 DFFF
    assert decode_mutf8(bytes.fromhex("eda080")) == "\ud800"  # lone high at the very end
    # two separately written halves are one pair on the wire
    assert encode_mutf8("\ud800\udc00") == bytes.fromhex("eda080edb080")


@pytest.mark.parametrize(
    ("bad", "at"),
    [
        ("61c3", 1),  # 2-byte lead at the end
        ("6162e282", 2),  # 3-byte lead, one continuation missing at the end
        ("e2", 0),
        ("c341", 0),  # 2-byte lead, bad continuation
        ("e241ac", 0),  # 3-byte lead, bad first continuation
        ("e282c3", 0),  # 3-byte lead, bad second continuation
        ("e2c282", 0),
        ("61f09f9880", 1),  # 4-byte UTF-8 lead (1111xxxx)
        ("6180", 1),  # a continuation byte where a character starts
        ("61bf", 1),
        ("ff", 0),
        ("c3a9e0", 2),
    ],
)
def test_mutf8_malformed_names_the_byte(bad: str, at: int) -> None:
    with pytest.raises(ValueError, match=rf"^malformed input around byte {at}$"):
        decode_mutf8(bytes.fromhex(bad))


def test_mutf8_accepts_exact_lengths() -> None:
    assert decode_mutf8(bytes.fromhex("c3a9")) == "\u00e9"  # 2-byte form ending the input
    assert decode_mutf8(bytes.fromhex("e282ac")) == "\u20ac"  # 3-byte form ending the input
    assert decode_mutf8(bytes.fromhex("c080")) == "\x00"
    assert decode_mutf8(bytes.fromhex("dfbf")) == "\u07ff" and decode_mutf8(bytes.fromhex("efbfbf")) == "\uffff"
    assert decode_mutf8(b"") == "" and encode_mutf8("") == b""
    assert decode_mutf8(bytes.fromhex("7fc3a9")) == "\x7f\u00e9"


# -- limits at exactly the limit and one past


@pytest.mark.parametrize("name", [f.name for f in Limits.__attrs_attrs__])
def test_every_limit_field_is_validated(name: str) -> None:
    assert getattr(Limits(**{name: 0}), name) == 0  # zero is allowed
    for bad in (-1, 1.5, "1", None):
        with pytest.raises(ValueError, match=rf"^Limits\.{name} must be a non-negative int, got {bad!r}$"):
            Limits(**{name: bad})


def test_check_limit_at_and_one_past_with_location() -> None:
    check_limit(0, 0, name="max_window", field="count")
    check_limit(10, 10, name="max_window", field="count")
    with pytest.raises(LimitExceeded) as info:
        check_limit(11, 10, name="max_window", field="count", frame="W", offset=3, protocol="lumberjack")
    err = info.value
    assert (err.protocol, err.frame, err.field, err.offset) == ("lumberjack", "W", "count", 3)
    assert str(err).startswith("count 11 exceeds the limit max_window=10 (")
    with pytest.raises(LimitExceeded) as info:
        check_limit(1, 0, name="max_nesting_depth", field="depth")
    assert (info.value.protocol, info.value.frame, info.value.field, info.value.offset) == (None, None, "depth", None)


def test_second_round_of_survivors() -> None:
    # Reader defaults: base 0, and uvarint is a u32 (2^32 is refused).
    err = _err(LocalProtocolError, Reader(b"").u8, "x")
    assert (err.field, err.offset) == ("x", 0)
    err = _err(LocalProtocolError, Reader(b"\x80\x80\x80\x80\x10").uvarint, "n")
    assert (err.field, err.offset) == ("n", 0) and "overflows u32" in str(err)
    # java_utf: a truncated length prefix names the string's field
    err = _err(LocalProtocolError, Reader(b"\x00", base=4).java_utf, "name")
    assert (err.field, err.offset) == ("name", 4)
    # rest() over a reader whose start is past its end names its field
    err = _err(LocalProtocolError, Reader(b"abc", start=3, end=2).rest, "tail")
    assert err.field == "tail"
    # a string after other fields keeps them
    assert Writer().u8(7).java_utf("a").getvalue() == b"\x07\x00\x01a"
    # two low surrogates in a row are two lone surrogates, not a pair
    assert encode_mutf8("\udc00\udc00").hex() == "edb080edb080"
    assert decode_mutf8(bytes.fromhex("edb080edb080")) == "\udc00\udc00"
