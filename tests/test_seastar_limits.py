"""Seastar RPC limits at the line and error locations (specs/seastar-rpc/README.md §2-§4).

Each limit is tested at exactly the limit and one past it; every refusal names
its field and stream offset.  The LZ4 expansion-ratio check and the per-chunk
size are checked *before* anything is allocated: the tests count the calls to
``lz4.block.decompress`` and the bytes it was asked for.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import attrs
import lz4.block
import pytest

from refwire.errors import LimitExceeded, LocalProtocolError, ProtocolError
from refwire.seastar_rpc import DEFAULT_LIMITS, LZ4Compressor, LZ4FragmentedCompressor, envelope, make_compressor
from refwire.seastar_rpc import compression as comp_mod
from refwire.seastar_rpc import frames as sf
from refwire.seastar_rpc.compression import CHUNK_SIZE, choose_compressor
from refwire.wire import Limits

u32 = struct.Struct("<I").pack
LAST = 0x80000000


@pytest.fixture
def lz4_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The ``uncompressed_size`` of every call to ``lz4.block.decompress`` (what it would allocate)."""
    calls: list[int] = []
    real = lz4.block.decompress

    def spy(block: bytes, *args: Any, **kw: Any) -> Any:  # called positionally or with keywords
        calls.append(args[0] if args else kw["uncompressed_size"])
        return real(block, *args, **kw)

    monkeypatch.setattr(comp_mod.lz4.block, "decompress", spy)
    yield calls


def _block(data: bytes, window: bytes = b"") -> bytes:
    if window:
        return bytes(lz4.block.compress(data, mode="default", store_size=False, dict=window))
    return bytes(lz4.block.compress(data, mode="default", store_size=False))


# --------------------------------------------------------------------------- LZ4


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_lz4_payload_under_four_bytes_is_a_noop(n: int) -> None:
    assert LZ4Compressor().decompress(b"\x01" * n, limits=DEFAULT_LIMITS, offset=0) == b""
    assert LZ4FragmentedCompressor().decompress(b"\x81" * n, limits=DEFAULT_LIMITS, offset=0) == b""


def test_lz4_declared_size_zero_is_fatal_at_its_offset() -> None:
    with pytest.raises(LocalProtocolError, match="cannot be zero") as info:
        LZ4Compressor().decompress(u32(0), limits=DEFAULT_LIMITS, offset=77)
    e = info.value
    assert (e.protocol, e.frame, e.field, e.offset) == ("seastar-rpc", "compressed", "uncompressed_size", 77)


def test_lz4_round_trip_exact_bytes() -> None:
    frame = b"hello seastar " * 20
    payload = LZ4Compressor().compress(frame)
    assert payload == u32(len(frame)) + _block(frame)
    assert type(payload) is bytes
    assert envelope(LZ4Compressor(), frame) == u32(len(payload)) + payload
    out = LZ4Compressor().decompress(payload, limits=DEFAULT_LIMITS, offset=0)
    assert out == frame and type(out) is bytes


def test_lz4_decompressed_limit_at_the_line(lz4_calls: list[int]) -> None:
    frame = b"z" * 1000
    payload = LZ4Compressor().compress(frame)
    assert LZ4Compressor().decompress(payload, limits=Limits(max_decompressed_size=1000), offset=5) == frame
    lz4_calls.clear()
    with pytest.raises(LimitExceeded) as info:
        LZ4Compressor().decompress(payload, limits=Limits(max_decompressed_size=999), offset=5)
    e = info.value
    assert (e.protocol, e.frame, e.field, e.offset) == ("seastar-rpc", "compressed", "uncompressed_size", 5)
    assert "max_decompressed_size=999" in str(e)
    assert lz4_calls == []  # refused before anything was allocated


def test_lz4_expansion_ratio_refused_before_allocation(lz4_calls: list[int]) -> None:
    """A 5-byte payload (size + 1-byte block) declaring 50 MB: refused without
    asking LZ4 for a 50 MB buffer."""
    with pytest.raises(LocalProtocolError, match="cannot decompress to the declared") as info:
        LZ4Compressor().decompress(u32(50_000_000) + b"\x00", limits=DEFAULT_LIMITS, offset=10)
    assert lz4_calls == []
    e = info.value
    assert (e.field, e.offset, e.frame) == ("block", 14, "compressed")


def test_lz4_expansion_ratio_at_the_line(lz4_calls: list[int]) -> None:
    # 1-byte block: 255 * 1 + 16 = 271 bytes may be asked for, 272 may not.
    with pytest.raises(LocalProtocolError, match="decompression failure"):
        LZ4Compressor().decompress(u32(271) + b"\x00", limits=DEFAULT_LIMITS, offset=0)
    assert lz4_calls == [271]
    lz4_calls.clear()
    with pytest.raises(LocalProtocolError, match="cannot decompress to the declared 272 bytes"):
        LZ4Compressor().decompress(u32(272) + b"\x00", limits=DEFAULT_LIMITS, offset=0)
    assert lz4_calls == []
    # A real maximal-ratio block stays accepted: 10 000 zero bytes compress to ~50.
    frame = bytes(10_000)
    block = _block(frame)
    assert 255 * len(block) + 16 >= len(frame)
    assert LZ4Compressor().decompress(u32(len(frame)) + block, limits=DEFAULT_LIMITS, offset=0) == frame


def test_lz4_block_errors_name_the_block() -> None:
    with pytest.raises(LocalProtocolError, match="RPC frame LZ4 decompression failure") as info:
        LZ4Compressor().decompress(u32(10) + b"\xff\xff\xff", limits=DEFAULT_LIMITS, offset=100)
    assert (info.value.field, info.value.offset) == ("block", 104)
    assert not isinstance(info.value, LimitExceeded)


def test_lz4_block_shorter_than_declared_is_refused() -> None:
    block = _block(b"abc")
    with pytest.raises(LocalProtocolError, match="decompressed to 3 bytes, 10 declared") as info:
        LZ4Compressor().decompress(u32(10) + block, limits=DEFAULT_LIMITS, offset=3)
    assert (info.value.field, info.value.offset) == ("block", 7)


# --------------------------------------------------------------------------- LZ4_FRAGMENTED


def test_fragmented_compress_exact_bytes() -> None:
    """Chunk headers and blocks are exactly Seastar's: the window is the previous
    64 KiB of the message (all of it while shorter)."""
    import random

    rnd = random.Random(7)
    frame = bytes(rnd.getrandbits(8) for _ in range(1000)) * 100  # 100 000 bytes, repetitive
    payload = LZ4FragmentedCompressor(dependent=True).compress(frame)
    expected = []
    pos = 0
    while len(frame) - pos > CHUNK_SIZE:
        b = _block(frame[pos : pos + CHUNK_SIZE], frame[max(0, pos - 65536) : pos])
        expected += [u32(len(b)), b]
        pos += CHUNK_SIZE
    expected += [u32(LAST | (len(frame) - pos)), _block(frame[pos:], frame[max(0, pos - 65536) : pos])]
    assert payload == b"".join(expected)
    independent = LZ4FragmentedCompressor(dependent=False).compress(frame)
    assert independent[4 : 4 + len(_block(frame[:CHUNK_SIZE]))] == _block(frame[:CHUNK_SIZE])
    (c1,) = struct.unpack_from("<I", independent, 0)
    (c2,) = struct.unpack_from("<I", independent, 4 + c1)
    assert independent[8 + c1 : 8 + c1 + c2] == _block(frame[CHUNK_SIZE : 2 * CHUNK_SIZE])
    for p in (payload, independent):
        out = LZ4FragmentedCompressor().decompress(p, limits=DEFAULT_LIMITS, offset=0)
        assert out == frame and type(out) is bytes


def test_fragmented_window_reaches_64k_back() -> None:
    """The third chunk repeats the first from 65535 bytes back (LZ4's farthest match)."""
    import os

    a, b = os.urandom(CHUNK_SIZE), os.urandom(CHUNK_SIZE)
    frame = a + b + a[1:] + b"end"
    payload = LZ4FragmentedCompressor(dependent=True).compress(frame)
    assert LZ4FragmentedCompressor().decompress(payload, limits=DEFAULT_LIMITS, offset=0) == frame
    # 4 headers + small third chunk: the window really was used
    assert len(payload) < 2 * CHUNK_SIZE + 2000


def test_fragmented_missing_last_chunk_names_the_header_offset() -> None:
    first = _block(b"q" * CHUNK_SIZE)
    payload = u32(len(first)) + first + b"\x00\x00"  # 2 bytes: not a header
    with pytest.raises(LocalProtocolError, match=f"ends after {CHUNK_SIZE} bytes without a last chunk") as info:
        LZ4FragmentedCompressor().decompress(payload, limits=DEFAULT_LIMITS, offset=1000)
    assert (info.value.field, info.value.offset) == ("chunk_header", 1000 + 4 + len(first))
    # exactly the chunk and nothing else: the same, with 0 bytes left
    with pytest.raises(LocalProtocolError, match="without a last chunk"):
        LZ4FragmentedCompressor().decompress(u32(len(first)) + first, limits=DEFAULT_LIMITS, offset=0)
    # 3 bytes left is still not a header; 4 are (a last chunk of 0 bytes is allowed)
    with pytest.raises(LocalProtocolError, match="without a last chunk"):
        LZ4FragmentedCompressor().decompress(u32(len(first)) + first + b"\x00\x00\x80", limits=DEFAULT_LIMITS, offset=0)
    last = _block(b"")
    got = LZ4FragmentedCompressor().decompress(u32(len(first)) + first + u32(LAST) + last, limits=DEFAULT_LIMITS, offset=0)
    assert got == b"q" * CHUNK_SIZE


def test_fragmented_chunk_size_at_the_line() -> None:
    first = _block(b"q" * CHUNK_SIZE)
    tail = u32(LAST | 1) + _block(b"!")
    ok = u32(len(first)) + first + tail
    assert LZ4FragmentedCompressor().decompress(ok, limits=DEFAULT_LIMITS, offset=0) == b"q" * CHUNK_SIZE + b"!"
    # the chunk claims exactly what is left (its block then eats the tail): not a length error
    whole = u32(len(first) + len(tail)) + first + tail
    with pytest.raises(LocalProtocolError) as info:
        LZ4FragmentedCompressor().decompress(whole, limits=DEFAULT_LIMITS, offset=0)
    assert info.value.field == "chunk"
    # one byte more than is left
    over = u32(len(first) + len(tail) + 1) + first + tail
    with pytest.raises(
        LocalProtocolError, match=f"claims {len(first) + len(tail) + 1} compressed bytes, {len(first) + len(tail)} left"
    ) as info:
        LZ4FragmentedCompressor().decompress(over, limits=DEFAULT_LIMITS, offset=9)
    assert (info.value.field, info.value.offset) == ("chunk_size", 9)


def test_fragmented_intermediate_chunk_limit_at_the_line(lz4_calls: list[int]) -> None:
    frame = b"q" * CHUNK_SIZE + b"!"
    payload = LZ4FragmentedCompressor().compress(frame)
    assert LZ4FragmentedCompressor().decompress(payload, limits=Limits(max_decompressed_size=CHUNK_SIZE + 1), offset=0) == frame
    with pytest.raises(LimitExceeded) as info:
        LZ4FragmentedCompressor().decompress(payload, limits=Limits(max_decompressed_size=CHUNK_SIZE), offset=50)
    assert (info.value.field, info.value.offset) == ("last_chunk_size", 50 + len(payload) - 4 - len(_block(b"!")))
    lz4_calls.clear()
    with pytest.raises(LimitExceeded) as info:
        LZ4FragmentedCompressor().decompress(payload, limits=Limits(max_decompressed_size=CHUNK_SIZE - 1), offset=50)
    assert (info.value.field, info.value.offset, info.value.frame) == ("chunk_size", 50, "compressed")
    assert lz4_calls == []
    # a single intermediate chunk exactly at the limit passes the chunk check
    exact = LZ4FragmentedCompressor().compress(b"q" * CHUNK_SIZE * 2)
    assert (
        len(LZ4FragmentedCompressor().decompress(exact, limits=Limits(max_decompressed_size=2 * CHUNK_SIZE), offset=0))
        == 2 * CHUNK_SIZE
    )


def test_fragmented_last_chunk_limit_at_the_line(lz4_calls: list[int]) -> None:
    frame = b"w" * 500
    payload = LZ4FragmentedCompressor().compress(frame)
    assert LZ4FragmentedCompressor().decompress(payload, limits=Limits(max_decompressed_size=500), offset=0) == frame
    lz4_calls.clear()
    with pytest.raises(LimitExceeded) as info:
        LZ4FragmentedCompressor().decompress(payload, limits=Limits(max_decompressed_size=499), offset=20)
    assert (info.value.field, info.value.offset) == ("last_chunk_size", 20)
    assert lz4_calls == []


def test_fragmented_per_chunk_ratio_refused_before_allocation(lz4_calls: list[int]) -> None:
    # an intermediate chunk of 10 compressed bytes cannot make 32 KiB (255 * 10 + 16 < 32768)
    payload = u32(10) + b"\x00" * 10 + u32(LAST | 1) + _block(b"x")
    with pytest.raises(LocalProtocolError, match="cannot decompress to the declared 32768") as info:
        LZ4FragmentedCompressor().decompress(payload, limits=DEFAULT_LIMITS, offset=3)
    assert (info.value.field, info.value.offset) == ("chunk", 7)
    assert lz4_calls == []
    # a last chunk of 1 byte claiming 2 GiB - 1: refused before allocation too
    payload = u32(LAST | 0x7FFFFFFF) + b"\x00"
    with pytest.raises(ProtocolError):
        LZ4FragmentedCompressor().decompress(payload, limits=Limits(max_decompressed_size=2**31), offset=0)
    assert lz4_calls == []


def test_fragmented_intermediate_chunk_must_make_exactly_32k() -> None:
    short = _block(b"s" * (CHUNK_SIZE - 1))
    payload = u32(len(short)) + short + u32(LAST | 1) + _block(b"x")
    with pytest.raises(LocalProtocolError, match=f"decompressed to {CHUNK_SIZE - 1} bytes, {CHUNK_SIZE} declared") as info:
        LZ4FragmentedCompressor().decompress(payload, limits=DEFAULT_LIMITS, offset=0)
    assert (info.value.field, info.value.offset) == ("chunk", 4)


def test_fragmented_last_chunk_errors_name_its_offset() -> None:
    first = _block(b"q" * CHUNK_SIZE)
    payload = u32(len(first)) + first + u32(LAST | 5) + _block(b"abc")
    with pytest.raises(LocalProtocolError, match="decompressed to 3 bytes, 5 declared") as info:
        LZ4FragmentedCompressor().decompress(payload, limits=DEFAULT_LIMITS, offset=2)
    assert (info.value.field, info.value.offset) == ("last_chunk", 2 + 4 + len(first) + 4)


# --------------------------------------------------------------------------- negotiation


def test_make_compressor_names_are_exact() -> None:
    assert isinstance(make_compressor("LZ4"), LZ4Compressor)
    assert isinstance(make_compressor("LZ4_FRAGMENTED"), LZ4FragmentedCompressor)
    assert make_compressor("LZ4").name == "LZ4" and make_compressor("LZ4_FRAGMENTED").name == "LZ4_FRAGMENTED"
    assert LZ4FragmentedCompressor().dependent is True
    for bad in ("lz4", "LZ4 ", "", "lz4_fragmented"):
        with pytest.raises(ValueError, match="unknown compressor"):
            make_compressor(bad)


def test_choose_compressor() -> None:
    both = ["LZ4", "LZ4_FRAGMENTED"]
    assert choose_compressor("LZ4_FRAGMENTED,LZ4", both) == "LZ4_FRAGMENTED"
    assert choose_compressor("zstd,LZ4", both) == "LZ4"
    assert choose_compressor("zstd,snappy", both) is None
    assert choose_compressor("LZ4", both, multi_algo=False) == "LZ4"
    assert choose_compressor("LZ4,LZ4_FRAGMENTED", both, multi_algo=False) is None
    assert choose_compressor("zstd", both, multi_algo=False) is None


# --------------------------------------------------------------------------- frames (seastar_rpc/frames.py)


def _dec(kind: sf.Kind, max_frame: int = 100, **cfg: Any) -> sf.FrameDecoder:
    d = sf.FrameDecoder(kind, limits=Limits(max_frame_size=max_frame, max_string_size=64), negotiation=False)
    d.configure(**cfg)
    return d


def _drain(d: sf.FrameDecoder, data: bytes, step: int) -> list[object]:
    out: list[object] = []
    for i in range(0, len(data), step):
        d.feed(data[i : i + step])
        while (f := d.next_frame()) is not None:
            out.append(f)
    return out


def _refused(d: sf.FrameDecoder, data: bytes, step: int) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        _drain(d, data, step)
    return info.value


PRE = u32(0)  # a 4-byte stream message: the frame under test starts at offset 4


@pytest.mark.parametrize("step", [1, 7, 1000])
@pytest.mark.parametrize("timeout", [True, False])
def test_request_len_at_the_limit_and_one_past(step: int, timeout: bool) -> None:
    hs = 28 if timeout else 20
    first = sf.Request(1, 1, b"", 5 if timeout else None).encode(with_timeout=timeout)
    ok = sf.Request(2, 3, b"r" * 100, 9 if timeout else None).encode(with_timeout=timeout)
    got = _drain(_dec("request", timeout=timeout), first + ok, step)
    assert got == [sf.Request(1, 1, b"", 5 if timeout else None), sf.Request(2, 3, b"r" * 100, 9 if timeout else None)]
    e = _refused(_dec("request", 99, timeout=timeout), first + ok, step)
    assert isinstance(e, LimitExceeded)
    assert (e.frame, e.field, e.offset) == ("request", "len", len(first) + hs - 4)


@pytest.mark.parametrize("step", [1, 1000])
@pytest.mark.parametrize("duration", [True, False])
def test_response_len_at_the_limit_and_one_past(step: int, duration: bool) -> None:
    first = sf.Response(1, b"", 7 if duration else None).encode(with_duration=duration)
    ok = sf.Response(-2, b"p" * 100, None).encode(with_duration=duration)
    got = _drain(_dec("response", duration=duration), first + ok, step)
    assert got == [sf.Response(1, b"", 7 if duration else None), sf.Response(-2, b"p" * 100, sf.UNMEASURED if duration else None)]
    e = _refused(_dec("response", 99, duration=duration), first + ok, step)
    assert isinstance(e, LimitExceeded) and (e.frame, e.field, e.offset) == ("response", "len", len(first) + 8)


@pytest.mark.parametrize("step", [1, 1000])
def test_stream_len_at_the_limit_and_one_past(step: int) -> None:
    data = PRE + sf.StreamMessage(b"s" * 100).encode() + sf.StreamEnd().encode()
    assert _drain(_dec("stream"), data, step) == [sf.StreamMessage(b""), sf.StreamMessage(b"s" * 100), sf.StreamEnd()]
    e = _refused(_dec("stream", 99), data, step)
    assert isinstance(e, LimitExceeded) and (e.frame, e.field, e.offset) == ("stream", "len", 4)
    # EOS is never a length, whatever the limit
    assert _drain(_dec("stream", 0), sf.StreamEnd().encode(), 1) == [sf.StreamEnd()]
    if not sf.__file__ or not sf.__file__.endswith(".py"):
        pytest.skip("the compiled build (setup.py) takes only real bytes as a payload, so no _Len stand-in")
    huge = object.__new__(sf.StreamMessage)
    object.__setattr__(huge, "payload", _Len(sf.EOS))  # claims 2**32 - 1 bytes without holding them
    with pytest.raises(LocalProtocolError, match="shorter than 0xffffffff"):
        huge.encode()


REQ20 = struct.Struct("<QqI").pack  # verb, msg_id, len


class _Len:
    """A payload that claims ``n`` bytes without holding them."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def test_discard_over_at_the_line() -> None:
    body = b"d" * 50
    at = sf.Request(1, 1, body).encode(with_timeout=False)
    assert _drain(_dec("request", discard_over=50), at, 1000) == [sf.Request(1, 1, body)]
    over = sf.Request(1, 1, body + b"d").encode(with_timeout=False)
    assert _drain(_dec("request", discard_over=50), over, 1000) == [sf.OversizedRequest(1, 1, 51, None)]
    d = _dec("request", discard_over=50)
    assert _drain(d, over[:30], 1000) == [] and d.in_frame and d.buffered == 41
    assert _drain(d, over[30:], 1000) == [sf.OversizedRequest(1, 1, 51, None)] and not d.in_frame


def test_negotiation_limits_and_locations() -> None:
    def neg(body: bytes) -> bytes:
        return sf.MAGIC + u32(len(body)) + body

    lim = Limits(max_string_size=16)
    rec = struct.pack("<II", 1, 8) + b"12345678"  # 16 bytes
    d = sf.FrameDecoder("request", limits=lim)
    assert _drain(d, neg(rec), 1) == [sf.Negotiation(((1, b"12345678"),))]
    d = sf.FrameDecoder("request", limits=lim)
    with pytest.raises(LimitExceeded) as info:
        _drain(d, neg(rec + b"x"), 1000)
    assert (info.value.frame, info.value.field, info.value.offset) == ("negotiation", "len", 8)
    d = sf.FrameDecoder("request")
    with pytest.raises(LocalProtocolError) as info2:
        _drain(d, b"SSTARRPX" + u32(0), 1)
    assert (info2.value.field, info2.value.offset) == ("magic", 0)
    # records: fewer than 8 bytes for a header, and a flen past the end, exactly and one past
    with pytest.raises(LocalProtocolError, match="7 bytes left") as info2:
        sf.decode_negotiation_records(rec + b"\x00" * 7, base=100)
    assert (info2.value.field, info2.value.offset) == ("feature_number", 116)
    assert sf.decode_negotiation_records(rec + struct.pack("<II", 2, 0)).records == ((1, b"12345678"), (2, b""))
    with pytest.raises(LocalProtocolError, match="claims 9 bytes, 8 left") as info2:
        sf.decode_negotiation_records(struct.pack("<II", 1, 9) + b"12345678", base=100)
    assert (info2.value.field, info2.value.offset) == ("flen", 104)
    # a connection id that is not 8 bytes, named at its data
    n = sf.Negotiation(((0, b"LZ4"), (2, b"1234567")))
    with pytest.raises(LocalProtocolError, match="CONNECTION_ID must carry 8 bytes, got 7") as info2:
        sf.Features.from_negotiation(n, base=12)
    assert (info2.value.field, info2.value.offset) == ("connection_id", 12 + 8 + 3 + 4)
    f = sf.Features.from_negotiation(sf.Negotiation(((3, struct.pack("<Q", 2**64 - 1)), (2, bytes(8)), (2, b"x"))))
    assert (f.stream_parent, f.connection_id, f.compress, f.timeout) == (2**64 - 1, 0, None, False)
    assert sf.Features(compress="A,B").compress_names() == ("A", "B") and sf.Features().compress_names() == ()
    enc = sf.Features(connection_id=5, stream_parent=6, isolation=b"i", handler_duration=True).encode()
    assert sf.Features.from_negotiation(sf.decode_negotiation_records(enc[12:])) == sf.Features(
        connection_id=5, stream_parent=6, isolation=b"i", handler_duration=True
    )
    with pytest.raises(LocalProtocolError, match="out of range"):
        sf.Features(connection_id=2**64).encode()
    with pytest.raises(LocalProtocolError, match="out of range"):
        sf.Features(stream_parent=-1).encode()
    with pytest.raises(LocalProtocolError, match="feature_number"):
        sf.Negotiation(((2**32, b""),)).encode()


def test_exceptions_decode_with_locations() -> None:
    assert sf.decode_exception(sf.UserError(b"boom").encode()) == sf.UserError(b"boom")
    assert sf.decode_exception(sf.UnknownVerb(2**64 - 1).encode()) == sf.UnknownVerb(2**64 - 1)
    assert sf.decode_exception(sf.UnknownException(7, b"zz").encode()) == sf.UnknownException(7, b"zz")
    with pytest.raises(LocalProtocolError, match="claims 5 bytes, the response has 4") as info:
        sf.decode_exception(struct.pack("<II", 0, 5) + b"abcd", base=50)
    assert (info.value.field, info.value.offset, info.value.frame) == ("len", 54, "exception")
    assert sf.decode_exception(struct.pack("<II", 0, 4) + b"abcd") == sf.UserError(b"abcd")
    with pytest.raises(LocalProtocolError, match="must be 8 bytes, got 9") as info:
        sf.decode_exception(struct.pack("<II", 1, 9) + bytes(9), base=50)
    assert (info.value.field, info.value.offset) == ("len", 54)


@pytest.mark.parametrize("comp", ["LZ4", "LZ4_FRAGMENTED"])
def test_compressed_envelope_limit_and_inner_errors(comp: str) -> None:
    c = make_compressor(comp)
    frame = envelope(c, sf.Request(1, 1, b"x" * 20).encode(with_timeout=False))
    clen = len(frame) - 4
    lim = Limits(max_frame_size=clen, max_decompressed_size=1000)

    def dec(limits: Limits) -> sf.FrameDecoder:
        d = sf.FrameDecoder("request", limits=limits, negotiation=False)
        d.configure(compressor=c)
        return d

    pre = b"\x00\x00\x00\x00"  # a no-op first: the frame under test starts at offset 4
    got = _drain(dec(lim), pre + frame, 1)
    assert got == [sf.NoOp(0), sf.Request(1, 1, b"x" * 20)]
    e = _refused(dec(Limits(max_frame_size=clen - 1)), pre + frame, 1)
    assert isinstance(e, LimitExceeded) and (e.frame, e.field, e.offset) == ("compressed", "clen", 4)
    # an inner frame over the limit: named compressed>request at the envelope's offset
    big = envelope(c, sf.Request(1, 1, b"x" * 200).encode(with_timeout=False))
    e = _refused(dec(Limits(max_frame_size=len(big) - 4, max_decompressed_size=1000)), pre + big, 1000)
    assert (e.frame, e.field, e.offset) == ("compressed>request", "len", 4)
    assert "(at offset 16 of the decompressed frame)" in e.reason
    # an inner frame shorter than its header
    short = envelope(c, sf.Request(1, 1, b"x" * 20).encode(with_timeout=False)[:-1])
    e = _refused(dec(lim), pre + short, 1000)
    assert (e.frame, e.field, e.offset) == ("compressed>request", "len", 4) and "shorter than the 40" in e.reason


def test_eof_errors() -> None:
    d = sf.FrameDecoder("request")
    assert d.eof_error() is None and d.frame_name() == "negotiation"
    d.feed(b"SST")
    e = d.eof_error()
    assert e is not None and (e.field, e.offset, e.reason) == ("(eof)", 0, "unexpected eof during negotiation frame")
    d = _dec("response")
    d.feed(b"\x01\x02")
    e = d.eof_error()
    assert e is not None and (e.frame, e.offset) == ("response", 0) and "2 bytes of it outstanding" in e.reason
    d = _dec("response", compressor=make_compressor("LZ4"))
    assert d.frame_name() == "compressed"


def test_encode_ranges() -> None:
    assert sf.Request(2**64 - 1, -(2**63), b"", 2**64 - 1).encode(with_timeout=True)[:8] == b"\xff" * 8
    for bad, field in (
        (sf.Request(2**64, 1), "verb"),
        (sf.Request(1, 2**63), "msg_id"),
        (sf.Request(1, 1, b"", -1), "timeout_ms"),
    ):
        with pytest.raises(LocalProtocolError) as info:
            bad.encode(with_timeout=True)
        assert info.value.field == field
    with pytest.raises(LocalProtocolError) as info:
        sf.Response(1, b"", 2**32).encode(with_duration=True)
    assert info.value.field == "handler_duration"
    assert sf.Response(1, b"", sf.UNMEASURED).encode(with_duration=True) == struct.pack("<qII", 1, 0, sf.UNMEASURED)
    assert sf.Response(-1).is_exception and not sf.Response(0).is_exception


# --------------------------------------------------------------------------- compression: what the first run left


def test_lz4_empty_frame_error_and_unknown_name_text() -> None:
    with pytest.raises(LocalProtocolError) as info:
        LZ4Compressor().compress(b"")
    e = info.value
    assert (e.reason, e.protocol, e.frame) == (
        "LZ4 cannot carry an empty frame; send the no-op 00 00 00 00 instead",
        "seastar-rpc",
        "compressed",
    )
    with pytest.raises(ValueError, match=r"^unknown compressor 'x'; known: LZ4, LZ4_FRAGMENTED$"):
        make_compressor("x")
    with pytest.raises(LocalProtocolError) as info:
        LZ4Compressor().decompress(u32(0), limits=DEFAULT_LIMITS, offset=0)
    assert info.value.reason == "RPC frame LZ4 decompression failure: decompressed size cannot be zero"


def test_lz4_block_has_no_window() -> None:
    """A block whose first match reaches back before its start decodes only with a
    dictionary: LZ4 (one block per frame) has none, so it is refused."""
    block = b"\x00\x01\x00" + b"\xf0\x01" + b"a" * 16  # match of 4 at distance 1, then 16 literals
    assert lz4.block.decompress(block, uncompressed_size=20, dict=b"XXXX") == b"XXXX" + b"a" * 16
    with pytest.raises(LocalProtocolError, match="decompression failure") as info:
        LZ4Compressor().decompress(u32(20) + block, limits=DEFAULT_LIMITS, offset=0)
    assert info.value.field == "block"


def test_fragmented_empty_last_chunk_is_a_block_error() -> None:
    # 4 bytes: a last-chunk header for 0 bytes and no block at all -- not a no-op
    with pytest.raises(LocalProtocolError) as info:
        LZ4FragmentedCompressor().decompress(u32(LAST), limits=DEFAULT_LIMITS, offset=30)
    assert (info.value.field, info.value.offset) == ("last_chunk", 34)
    first = _block(b"q" * CHUNK_SIZE)
    with pytest.raises(LocalProtocolError) as info:
        LZ4FragmentedCompressor().decompress(u32(len(first)) + first + u32(LAST), limits=DEFAULT_LIMITS, offset=30)
    assert (info.value.field, info.value.offset) == ("last_chunk", 30 + 4 + len(first) + 4)


def test_fragmented_errors_in_a_later_chunk_name_its_offset() -> None:
    first = _block(b"q" * CHUNK_SIZE)
    at = 4 + len(first)  # the second chunk's header
    # the second chunk claims one byte more than is left
    tail = _block(b"r" * CHUNK_SIZE)
    payload = u32(len(first)) + first + u32(len(tail) + 1) + tail
    with pytest.raises(LocalProtocolError) as info:
        LZ4FragmentedCompressor().decompress(payload, limits=DEFAULT_LIMITS, offset=100)
    e = info.value
    assert (e.field, e.offset) == ("chunk_size", 100 + at)
    assert e.reason == f"LZ4_FRAGMENTED chunk claims {len(tail) + 1} compressed bytes, {len(tail)} left"
    # exactly what is left: read as a chunk (then no last chunk follows)
    with pytest.raises(LocalProtocolError, match="without a last chunk"):
        LZ4FragmentedCompressor().decompress(u32(len(first)) + first + u32(len(tail)) + tail, limits=DEFAULT_LIMITS, offset=0)
    # the second chunk's block is bad: named at its data
    bad = u32(len(first)) + first + u32(3) + b"\xff\xff\xff" + u32(LAST | 1) + _block(b"!")
    with pytest.raises(LocalProtocolError) as info:
        LZ4FragmentedCompressor().decompress(bad, limits=DEFAULT_LIMITS, offset=100)
    assert (info.value.field, info.value.offset) == ("chunk", 100 + at + 4)
    # the second chunk would pass the limit: named at its header
    two = LZ4FragmentedCompressor().compress(b"q" * (2 * CHUNK_SIZE + 1))
    with pytest.raises(LimitExceeded) as info2:
        LZ4FragmentedCompressor().decompress(two, limits=Limits(max_decompressed_size=2 * CHUNK_SIZE - 1), offset=100)
    e2 = info2.value
    assert (e2.field, e2.offset, e2.protocol, e2.frame) == ("chunk_size", 100 + at, "seastar-rpc", "compressed")
    assert f"exceeds the limit max_decompressed_size={2 * CHUNK_SIZE - 1}" in e2.reason
    with pytest.raises(LimitExceeded) as info2:
        LZ4FragmentedCompressor().decompress(two, limits=Limits(max_decompressed_size=2 * CHUNK_SIZE), offset=100)
    e2 = info2.value
    assert (e2.field, e2.protocol, e2.frame) == ("last_chunk_size", "seastar-rpc", "compressed")
    assert f"exceeds the limit max_decompressed_size={2 * CHUNK_SIZE}" in e2.reason


# --------------------------------------------------------------------------- frames: what the first run left


@pytest.mark.parametrize(
    ("kind", "frame", "cfg"),
    [
        ("request", sf.Request(1, 1, b"x" * 11), {"timeout": False}),
        ("response", sf.Response(1, b"x" * 11), {"duration": False}),
        ("stream", sf.StreamMessage(b"x" * 11), {}),
    ],
)
def test_frame_limit_errors_name_the_limit(kind: sf.Kind, frame: object, cfg: dict[str, bool]) -> None:
    wire = frame.encode(
        **({"with_timeout": False} if kind == "request" else {"with_duration": False} if kind == "response" else {})
    )  # type: ignore[attr-defined]
    e = _refused(_dec(kind, 10, **cfg), wire, 1000)
    assert isinstance(e, LimitExceeded) and e.protocol == "seastar-rpc"
    assert "exceeds the limit max_frame_size=10" in e.reason
    assert _drain(_dec(kind, 11, **cfg), wire, 1) == [frame]


def test_exception_truncations_name_their_field() -> None:
    body = sf.UnknownVerb(5).encode()
    for cut, field in ((0, "type"), (3, "type"), (4, "len"), (7, "len")):
        with pytest.raises(LocalProtocolError) as info:
            sf.decode_exception(body[:cut])
        e = info.value
        assert (e.field, e.protocol, e.frame) == (field, "seastar-rpc", "exception")
        assert e.offset == (0 if field == "type" else 4)
    assert sf.decode_exception(struct.pack("<II", 1, 8) + bytes(8)) == sf.UnknownVerb(0)
    with pytest.raises(LocalProtocolError) as info:
        sf.decode_exception(struct.pack("<II", 0, 5) + b"abc")
    assert info.value.offset == 4  # default base 0


def test_negotiation_ranges_and_text() -> None:
    assert sf.Features(connection_id=0, stream_parent=0).encode()
    for kw, field in (({"connection_id": -1}, "connection_id"), ({"stream_parent": 2**64}, "stream_parent")):
        with pytest.raises(LocalProtocolError) as info:
            sf.Features(**kw).encode()  # type: ignore[arg-type]
        e = info.value
        assert (e.field, e.frame, e.protocol) == (field, "negotiation", "seastar-rpc")
        assert e.reason.startswith(f"{field} ") and "is out of range 0..18446744073709551615" in e.reason
    n = sf.Negotiation(((2**32 - 1, b""),))
    assert n.encode()[12:16] == b"\xff\xff\xff\xff"
    assert sf.Features(compress="LZ4é").encode().endswith("LZ4é".encode("latin-1"))
    assert sf.Features.from_negotiation(sf.Negotiation(((0, "é".encode("latin-1")),))).compress == "é"
    assert sf.Negotiation(((1, b"a"), (1, b"b"), (2, b"c"))).features() == {1: b"a", 2: b"c"}
    # a later record that claims one byte too many: its flen is named at its offset
    body = struct.pack("<II", 1, 0) + struct.pack("<II", 2, 3) + b"ab"
    with pytest.raises(LocalProtocolError) as info:
        sf.decode_negotiation_records(body)
    assert (info.value.field, info.value.offset, info.value.reason.endswith("claims 3 bytes, 2 left")) == (
        "flen",
        12 + 8 + 4,
        True,
    )
    d = sf.FrameDecoder("request", limits=Limits(max_string_size=4))
    with pytest.raises(LimitExceeded) as info2:
        _drain(d, sf.MAGIC + u32(5), 1000)
    assert info2.value.protocol == "seastar-rpc" and "max_string_size=4" in info2.value.reason
    d = sf.FrameDecoder("request")
    with pytest.raises(LocalProtocolError) as info:
        _drain(d, b"SSTARRPX" + u32(0), 1000)
    assert info.value.reason == "wrong protocol magic: 5353544152525058"


def test_decoder_phases() -> None:
    d = sf.FrameDecoder("request")
    assert (d.timeout, d.duration, d.compressor, d.discard_over) == (False, False, None, None)
    neg = sf.Negotiation(((1, b""),)).encode()
    req = sf.Request(1, 2, b"p").encode(with_timeout=False)
    assert _drain(d, neg + req, 1000) == [sf.Negotiation(((1, b""),))]
    assert d.next_frame() is None and d.buffered == len(req)  # paused until configured
    d.configure()
    assert (d.timeout, d.duration, d.kind) == (False, False, "request")
    assert d.next_frame() == sf.Request(1, 2, b"p")
    d2 = sf.FrameDecoder("response", negotiation=False)
    d2.feed(sf.Response(1, b"r").encode(with_duration=False))
    assert d2.next_frame() == sf.Response(1, b"r")  # no negotiation: frames at once
    d3 = sf.FrameDecoder("request")
    d3.feed(neg[:11])
    assert d3.next_frame() is None
    d3.feed(neg[11:])
    assert d3.next_frame() == sf.Negotiation(((1, b""),))
    d3.configure(kind="response", duration=True)
    assert d3.kind == "response" and d3.duration
    d4 = sf.FrameDecoder("request", negotiation=False)
    d4.feed(b"\x01")
    e = d4.eof_error()
    assert e is not None and "a frame" in e.reason


def test_encode_range_errors_name_the_frame() -> None:
    with pytest.raises(LocalProtocolError) as info:
        sf.Request(0, 2**63, b"", None).encode(with_timeout=True)
    assert (info.value.field, info.value.frame) == ("msg_id", "request")
    with pytest.raises(LocalProtocolError) as info:
        sf.Request(2**64, 0, b"", 0).encode(with_timeout=False)
    assert (info.value.field, info.value.frame) == ("verb", "request")
    with pytest.raises(LocalProtocolError) as info:
        sf.Request(1, 1, b"", 2**64).encode(with_timeout=True)
    assert (info.value.field, info.value.frame) == ("timeout_ms", "request")
    with pytest.raises(LocalProtocolError) as info:
        sf.Response(2**63, b"", 0).encode(with_duration=True)
    assert (info.value.field, info.value.frame) == ("msg_id", "response")
    with pytest.raises(LocalProtocolError) as info:
        sf.Response(1, b"", -1).encode(with_duration=True)
    assert (info.value.field, info.value.frame) == ("handler_duration", "response")
    assert sf.Response(1, b"", 0).encode(with_duration=True) == struct.pack("<qII", 1, 0, 0)
    with pytest.raises(LocalProtocolError) as info:
        sf.Response(2**63, b"", None).encode(with_duration=False)
    assert info.value.field == "msg_id"


def test_envelope_limit_and_negotiation_record_errors_in_full() -> None:
    d = sf.FrameDecoder("request", limits=Limits(max_frame_size=10), negotiation=False)
    d.configure(compressor=make_compressor("LZ4"))
    d.feed(u32(11))
    with pytest.raises(LimitExceeded) as info:
        d.next_frame()
    e = info.value
    assert (e.protocol, e.field) == ("seastar-rpc", "clen") and "exceeds the limit max_frame_size=10" in e.reason
    with pytest.raises(LocalProtocolError) as info2:
        sf.Negotiation(((-1, b""),)).encode()
    e2 = info2.value
    assert (e2.field, e2.frame, e2.protocol) == ("feature_number", "negotiation", "seastar-rpc")
    d2 = sf.FrameDecoder("response", negotiation=False)
    d2.feed(b"\x01")
    eof = d2.eof_error()
    assert eof is not None and eof.protocol == "seastar-rpc"


# --------------------------------------------------------------------------- encoders' range errors, decoder edges


def _encode_error(fn: Any, **kw: Any) -> tuple[object, ...]:
    with pytest.raises(LocalProtocolError) as info:
        fn(**kw)
    e = info.value
    return (e.reason, e.protocol, e.frame, e.field, e.offset)


def test_request_and_response_encoders_name_the_out_of_range_field_exactly() -> None:
    rng = "-9223372036854775808..9223372036854775807"
    for frame, make, kw in (
        ("request", lambda m: sf.Request(2, m), {"with_timeout": False}),
        ("response", lambda m: sf.Response(m), {"with_duration": False}),
    ):
        for m in (2**63, -(2**63) - 1):
            assert _encode_error(make(m).encode, **kw) == (f"msg_id {m} is out of range {rng}", "seastar-rpc", frame, "msg_id", None)
    if not sf.__file__ or not sf.__file__.endswith(".py"):
        pytest.skip("the compiled build (setup.py) takes only real bytes as a payload, so no _Len stand-in")
    big = _Len(2**32)
    req = sf.Request(2, 1, big, 0)  # type: ignore[arg-type]
    for with_timeout in (False, True):
        assert _encode_error(req.encode, with_timeout=with_timeout) == (
            "len 4294967296 is out of range 0..4294967295", "seastar-rpc", "request", "len", None,
        )  # fmt: skip
    for duration in (None, 0):
        rsp = sf.Response(1, big, duration)  # type: ignore[arg-type]
        for with_duration in (False, True):
            assert _encode_error(rsp.encode, with_duration=with_duration) == (
                "len 4294967296 is out of range 0..4294967295", "seastar-rpc", "response", "len", None,
            )  # fmt: skip
    assert _encode_error(sf.StreamMessage(_Len(0xFFFFFFFF)).encode) == (  # type: ignore[arg-type]
        "a stream message must be shorter than 0xffffffff bytes", "seastar-rpc", "stream", "len", None,
    )  # fmt: skip


class _SubLZ4(LZ4Compressor):
    """Not exactly LZ4Compressor: the decoder opens its envelopes on the general path."""


def _inner_error(dec: sf.FrameDecoder, inner: bytes, comp: Any) -> tuple[object, ...]:
    with pytest.raises(LocalProtocolError) as info:
        _drain(dec, envelope(comp, inner), 1 << 20)
    e = info.value
    return (e.reason, e.frame, e.field, e.offset)


@pytest.mark.parametrize("comp", [LZ4Compressor(), _SubLZ4(), LZ4FragmentedCompressor()], ids=["fast", "general", "frag"])
def test_short_decompressed_frames_name_the_bytes_their_header_needs(comp: Any) -> None:
    def short(kind: sf.Kind, inner: bytes, **cfg: Any) -> tuple[object, ...]:
        d = _dec(kind, compressor=comp, **cfg)
        d.feed(b"\x00\x00\x00\x00")  # a no-op envelope first: the next one is at stream offset 4
        assert d.next_frame() == sf.NoOp(0)
        return _inner_error(d, inner, comp)

    def want(kind: str, have: int, need: int) -> tuple[object, ...]:
        return (f"the decompressed frame is {have} bytes, shorter than the {need} its header needs", f"compressed>{kind}", "len", 4)

    req28 = struct.pack("<QQqI", 5, 2, 1, 3)
    assert short("request", req28[:27], timeout=True) == want("request", 27, 28)
    assert short("request", req28 + b"ab", timeout=True) == want("request", 30, 31)
    assert short("request", REQ20(2, 1, 0)[:19]) == want("request", 19, 20)
    assert short("request", REQ20(2, 1, 5) + b"ab") == want("request", 22, 25)
    # over discard_over inside a decompressed frame: its data must still be all there
    assert short("request", REQ20(2, 1, 5) + b"ab", discard_over=1) == want("request", 22, 25)
    assert short("response", struct.pack("<qII", 1, 0, 0)[:15], duration=True) == want("response", 15, 16)
    assert short("response", struct.pack("<qII", 1, 3, 0) + b"a", duration=True) == want("response", 17, 19)
    assert short("response", struct.pack("<qI", 1, 0)[:11]) == want("response", 11, 12)
    assert short("response", struct.pack("<qI", 1, 4) + b"abc") == want("response", 15, 16)
    assert short("stream", b"\x07\x00\x00") == want("stream", 3, 4)
    assert short("stream", u32(10) + b"abc") == want("stream", 7, 14)


@pytest.mark.parametrize("comp", [LZ4Compressor(), _SubLZ4(), LZ4FragmentedCompressor()], ids=["fast", "general", "frag"])
def test_decompressed_frames_of_exactly_their_header(comp: Any) -> None:
    def one(kind: sf.Kind, inner: bytes, **cfg: Any) -> object:
        got = _drain(_dec(kind, compressor=comp, **cfg), envelope(comp, inner), 1 << 20)
        assert len(got) == 1
        return got[0]

    assert one("request", REQ20(2, 1, 0)) == sf.Request(2, 1, b"", None)
    assert one("request", struct.pack("<QQqI", 5, 2, 1, 0), timeout=True) == sf.Request(2, 1, b"", 5)
    assert one("request", REQ20(2, 1, 5) + b"abcde", discard_over=4) == sf.OversizedRequest(2, 1, 5, None)
    assert one("response", struct.pack("<qII", -1, 0, 9), duration=True) == sf.Response(-1, b"", 9)
    assert one("response", struct.pack("<qI", 1, 0)) == sf.Response(1, b"", None)
    # a stream frame of 20 bytes and more is a stream message, never read as a request (here
    # one whose bytes 16..19 would be a request's len of 0)
    assert one("stream", u32(20) + bytes(16) + b"tail") == sf.StreamMessage(bytes(16) + b"tail")
    assert one("stream", u32(0xFFFFFFFF)) == sf.StreamEnd()


@pytest.mark.parametrize("comp", [LZ4Compressor(), LZ4FragmentedCompressor()], ids=["LZ4", "LZ4_FRAGMENTED"])
def test_two_different_envelopes_in_one_read(comp: Any) -> None:
    frames = [sf.Request(2, 1, b"a", None), sf.Request(3, 2, b"bcdefghijklmnopqrstuvwxyz" * 3, None), sf.Request(4, 3, b"", None)]
    raw = b"".join(envelope(comp, f.encode(with_timeout=False)) for f in frames)
    d = _dec("request", compressor=comp)
    assert _drain(d, raw, len(raw)) == frames and d.offset == len(raw)


@pytest.mark.parametrize("flag", [0, LAST], ids=["LZ4", "LZ4_FRAGMENTED"])
def test_the_second_envelope_of_a_read_is_opened_by_its_own_header(flag: int) -> None:
    """Hand-made blocks: the second envelope's block starts with a literal run exactly as
    long as the first frame, so the first envelope's sizes read in its place would open
    a wrong but valid-looking 20-byte frame."""
    first = REQ20(2, 1, 0)
    block1 = bytes([0xF0, 5]) + first  # 20 literals
    head = REQ20(3, 2, 16)
    second = head + head[:4] + b"0123456789ab"
    block2 = bytes([0xF0, 5]) + head + struct.pack("<H", 20) + bytes([0xC0]) + b"0123456789ab"  # 20 literals, a 4-byte match, 12 literals
    assert lz4.block.decompress(block2, len(second)) == second and lz4.block.decompress(block2[:22], 20) == head
    raw = b"".join(struct.pack("<II", len(b) + 4, flag | len(f)) + b for b, f in ((block1, first), (block2, second)))
    comp = LZ4Compressor() if not flag else LZ4FragmentedCompressor()
    d = _dec("request", compressor=comp)
    assert _drain(d, raw, len(raw)) == [sf.Request(2, 1, b"", None), sf.Request(3, 2, head[:4] + b"0123456789ab", None)]
    assert (d.offset, d.buffered) == (len(raw), 0)


def test_payloads_are_bytes_when_the_buffer_is_a_bytearray() -> None:
    # a frame whose last byte arrives alone is completed in a bytearray buffer
    cases: list[tuple[sf.Kind, dict[str, Any], object, bytes]] = [
        ("request", {}, sf.Request(2, 1, b"abc", None), REQ20(2, 1, 3) + b"abc"),
        ("request", {"timeout": True}, sf.Request(2, 1, b"abc", 7), struct.pack("<QQqI", 7, 2, 1, 3) + b"abc"),
        ("response", {}, sf.Response(1, b"abc", None), struct.pack("<qI", 1, 3) + b"abc"),
        ("response", {"duration": True}, sf.Response(1, b"abc", 5), struct.pack("<qII", 1, 3, 5) + b"abc"),
        ("stream", {}, sf.StreamMessage(b"abc"), u32(3) + b"abc"),
    ]
    for kind, cfg, frame, raw in cases:
        d = _dec(kind, **cfg)
        d.feed(raw[:-1])
        assert d.next_frame() is None
        d.feed(raw[-1:])
        assert type(d._buf.data) is bytearray
        got = d.next_frame()
        assert got == frame and type(got.payload) is bytes  # type: ignore[union-attr]


def test_a_stream_frame_of_20_bytes_and_more_is_a_stream_message() -> None:
    d = _dec("stream")
    raw = u32(20) + bytes(16) + b"tail" + u32(0xFFFFFFFF)  # bytes 16..19 would be a request's len of 0
    assert _drain(d, raw, len(raw)) == [sf.StreamMessage(bytes(16) + b"tail"), sf.StreamEnd()]
    assert (d.offset, d.buffered, d.in_frame) == (28, 0, False)


def test_a_stream_end_is_exactly_four_bytes() -> None:
    d = _dec("stream")
    raw = u32(0xFFFFFFFF) + u32(1) + b"x" + u32(0xFFFFFFFF)
    assert _drain(d, raw, len(raw)) == [sf.StreamEnd(), sf.StreamMessage(b"x"), sf.StreamEnd()]
    assert (d.offset, d.buffered, d.in_frame) == (13, 0, False)


def test_a_decoder_without_negotiation_decodes_frames_shorter_than_a_negotiation_header() -> None:
    d = sf.FrameDecoder("stream", negotiation=False)
    d.feed(u32(0xFFFFFFFF))
    assert d.next_frame() == sf.StreamEnd()
    d.feed(u32(1) + b"x")
    assert d.next_frame() == sf.StreamMessage(b"x")


def test_skipped_request_data_counts_in_the_offset() -> None:
    d = _dec("request", discard_over=4)
    d.feed(REQ20(2, 1, 10) + b"ab")
    assert d.next_frame() is None and (d.offset, d.buffered, d.in_frame) == (22, 8, True)
    d.feed(b"cdefg")
    assert d.next_frame() is None and (d.offset, d.buffered, d.in_frame) == (27, 3, True)
    d.feed(b"hij" + REQ20(3, 2, 1) + b"z")
    assert d.next_frame() == sf.OversizedRequest(2, 1, 10, None)
    assert d.next_frame() == sf.Request(3, 2, b"z", None)
    assert (d.offset, d.buffered, d.in_frame) == (30 + 21, 0, False)


def test_eof_inside_a_frame_text() -> None:
    d = _dec("request")
    d.feed(b"12345")
    assert d.next_frame() is None
    e = d.eof_error()
    assert e is not None
    assert (e.reason, e.frame, e.field, e.offset) == ("connection closed inside a frame (5 bytes of it outstanding)", "request", "(eof)", 0)


# --------------------------------------------------------------------------- the per-connection budget (§6)


def _budget_server(budget: int, fast: bool, *, lz4: bool = False, stream: bool = False) -> Any:
    """A server machine negotiated (plain or LZ4; RPC or a stream) under ``max_connection_memory=budget``."""
    from refwire.seastar_rpc.connection import ServerConnection
    from refwire.seastar_rpc.negotiation import Features

    conn = ServerConnection(limits=attrs.evolve(DEFAULT_LIMITS, max_connection_memory=budget), fast=fast)
    offer = Features(compress="LZ4" if lz4 else None, timeout=False, stream_parent=0x10000 if stream else None)
    conn.receive_data(offer.encode(), now=0.0)
    conn.next_event()
    conn.accept(connection_id=0x20000, now=0.0)
    conn.data_to_send()
    return conn


def _budget_outcome(conn: Any, data: bytes) -> object:
    """The event ``data`` makes, or the limit error it raises (the machine's remote face of it)."""
    try:
        conn.receive_data(data, now=0.0)
        return conn.next_event()
    except ProtocolError as exc:
        assert "Limit" in type(exc).__name__
        return exc


@pytest.mark.parametrize("fast", [False, True])
def test_budget_caps_a_request_at_a_quarter_at_the_line_and_one_past(fast: bool) -> None:
    """16 MiB: a request's data may be 4 MiB (admission aside: ``admit_len`` unset here)."""
    from refwire.seastar_rpc.events import CallReceived

    cap = 4 << 20
    ok = _budget_outcome(_budget_server(16 << 20, fast), sf.Request(2, 1, bytes(cap)).encode(with_timeout=False))
    assert isinstance(ok, CallReceived) and len(ok.payload) == cap
    err = _budget_outcome(_budget_server(16 << 20, fast), sf.Request(2, 1, bytes(cap + 1)).encode(with_timeout=False))
    assert isinstance(err, ProtocolError)
    assert err.reason == f"len {cap + 1} exceeds the {cap} bytes the limit max_connection_memory={16 << 20} allows a frame"
    assert (err.frame, err.field, err.offset) == ("request", "len", 28)


@pytest.mark.parametrize("fast", [False, True])
def test_budget_caps_what_an_envelope_inflates_to(fast: bool) -> None:
    from refwire.seastar_rpc.events import CallReceived

    cap = 4 << 20
    for size, fits in ((cap - 20, True), (cap - 19, False)):
        conn = _budget_server(16 << 20, fast, lz4=True)
        got = _budget_outcome(conn, envelope(LZ4Compressor(), sf.Request(2, 1, bytes(size)).encode(with_timeout=False)))
        if fits:
            assert isinstance(got, CallReceived)
        else:
            assert isinstance(got, ProtocolError)
            assert f"the {cap} bytes the limit max_connection_memory={16 << 20} allows a frame" in got.reason


@pytest.mark.parametrize("fast", [False, True])
def test_budget_caps_a_stream_message_at_a_32nd(fast: bool) -> None:
    cap = (16 << 20) // 32
    ok = _budget_outcome(_budget_server(16 << 20, fast, stream=True), sf.StreamMessage(bytes(cap)).encode())
    assert isinstance(ok, sf.StreamMessage)
    err = _budget_outcome(_budget_server(16 << 20, fast, stream=True), sf.StreamMessage(bytes(cap + 1)).encode())
    assert isinstance(err, ProtocolError)
    assert err.reason == f"len {cap + 1} exceeds the {cap} bytes the limit max_connection_memory={16 << 20} allows a frame"


def test_the_default_budget_leaves_the_frame_limits_as_they_were() -> None:
    from refwire.seastar_rpc.machine import memory_caps

    assert memory_caps(DEFAULT_LIMITS) == (DEFAULT_LIMITS, None)
    limits, budget = memory_caps(DEFAULT_LIMITS, stream=True)
    assert limits.max_frame_size == 8 << 20 and budget == (256 << 20, 8 << 20)
