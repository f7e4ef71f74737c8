"""The LZ4 fast paths against the general ones (specs/seastar-rpc/README.md §3, §4, §6).

* ``FrameDecoder`` on its speed path (``fast=True``, refwire.seastar_rpc._fast_frames)
  opens a single-block envelope inline when its compressor is exactly
  ``LZ4Compressor`` / ``LZ4FragmentedCompressor``; a subclass of either takes the
  general path.  The oracle is a decoder on the plain path (``fast=False``) with
  the subclass.  Both must decode every vector in specs/seastar-rpc/vectors, and
  crafted edge cases, to the same frames, the same errors (type, text, frame,
  field, offset) and the same decoder state, however the bytes are split.
* ``envelope(fast=True)`` builds a single-block envelope itself for the same two
  types: byte for byte what ``compressor.compress()`` gives (``fast=False``).
* The block API is called positionally: the same results as the keyword form.
* Hostile sizes are still refused before LZ4 is asked for any memory.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import lz4.block
import pytest

from refwire.errors import ProtocolError
from refwire.seastar_rpc import (
    DEFAULT_LIMITS,
    LZ4Compressor,
    LZ4FragmentedCompressor,
    Request,
    Response,
    StreamEnd,
    StreamMessage,
    envelope,
)
from refwire.seastar_rpc._fast_frames import FastFrameDecoder
from refwire.seastar_rpc.compression import CHUNK_SIZE, Compressor
from refwire.seastar_rpc.frames import FrameDecoder, Kind
from refwire.wire import Limits

VECTOR_DIR = Path(__file__).resolve().parents[1] / "specs" / "seastar-rpc" / "vectors"
u32 = struct.Struct("<I").pack
LAST = 0x80000000


class _GenericLZ4(LZ4Compressor):
    """LZ4, but not exactly the type: the decoder's and envelope()'s general path."""


class _GenericFragmented(LZ4FragmentedCompressor):
    """LZ4_FRAGMENTED, but not exactly the type: the general path."""


def _pair(name: str) -> tuple[Compressor, Compressor]:
    if name == "LZ4":
        return LZ4Compressor(), _GenericLZ4()
    assert name == "LZ4_FRAGMENTED"
    return LZ4FragmentedCompressor(), _GenericFragmented()


def _decoder(
    kind: Kind,
    comp: Compressor,
    *,
    timeout: bool,
    duration: bool,
    limits: Limits = DEFAULT_LIMITS,
    discard_over: int | None = None,
    fast: bool = True,
) -> FrameDecoder:
    dec = FrameDecoder(kind, limits=limits, negotiation=False, fast=fast)
    dec.configure(timeout=timeout, duration=duration, compressor=comp, discard_over=discard_over)
    return dec


def _outcome(dec: FrameDecoder, parts: Sequence[bytes], eof: bool) -> list[object]:
    """Everything observable: each frame (with its payload's type), then the error
    if any (type, text, frame, field, offset), then the decoder's position."""
    got: list[object] = []
    try:
        for part in parts:
            dec.feed(part)
            while (f := dec.next_frame()) is not None:
                got.append((f, type(getattr(f, "payload", None))))
        if eof:
            err = dec.eof_error()
            if err is not None:
                raise err
    except ProtocolError as e:
        got.append(("error", type(e), str(e), e.frame, e.field, e.offset))
    got.append(("state", dec.offset, dec.buffered, dec.in_frame))
    return got


def _splits(raw: bytes) -> Iterator[list[bytes]]:
    yield [raw]
    yield [raw[i : i + 1] for i in range(len(raw))]
    for i in range(1, len(raw)):
        yield [raw[:i], raw[i:]]


def _check_same(
    raw: bytes,
    name: str,
    kind: Kind,
    *,
    timeout: bool,
    duration: bool,
    eof: bool = False,
    limits: Limits = DEFAULT_LIMITS,
    discard_over: int | None = None,
    every_split: bool = True,
) -> list[object]:
    """Fast and general decoders agree on ``raw`` split at every byte; returns the outcome of the whole."""
    whole: list[object] | None = None
    splits = _splits(raw) if every_split else iter([[raw], [raw[:5], raw[5:]], [raw[:-1], raw[-1:]]])
    for parts in splits:
        fast, generic = _pair(name)
        fd = _decoder(kind, fast, timeout=timeout, duration=duration, limits=limits, discard_over=discard_over)
        gd = _decoder(kind, generic, timeout=timeout, duration=duration, limits=limits, discard_over=discard_over, fast=False)
        assert isinstance(fd, FastFrameDecoder) and fd._fast_compressor is fast and not gd.fast
        want = _outcome(gd, parts, eof)
        assert _outcome(fd, parts, eof) == want, [len(p) for p in parts]
        if whole is None:
            whole = want
    assert whole is not None
    return whole


# --------------------------------------------------------------------------- vectors


def _vectors(name: str) -> list[dict[str, Any]]:
    vs: list[dict[str, Any]] = json.loads((VECTOR_DIR / name).read_text())["vectors"]
    return vs


COMPRESSED = _vectors("compressed.json")
FRAME_ERRORS = [v for v in _vectors("errors.json") if v["context"]["phase"] == "frames" and v["context"]["compressor"]]
FRAMES = _vectors("frames.json")


@pytest.mark.parametrize("v", COMPRESSED, ids=lambda v: v["name"])
def test_compressed_vectors_decode_alike(v: dict[str, Any]) -> None:
    ctx = v["context"]
    out = _check_same(bytes.fromhex(v["hex"]), ctx["compressor"], ctx["kind"], timeout=ctx["timeout"], duration=ctx["duration"])
    assert len(out) == len(v["frames"]) + 1 and out[-1][:2] == ("state", len(v["hex"]) // 2)  # type: ignore[index]


@pytest.mark.parametrize("v", FRAME_ERRORS, ids=lambda v: v["name"])
def test_error_vectors_decode_alike(v: dict[str, Any]) -> None:
    ctx = v["context"]
    out = _check_same(
        bytes.fromhex(v["hex"]), ctx["compressor"], ctx["kind"], timeout=ctx["timeout"], duration=ctx["duration"], eof=v["eof"]
    )
    err = out[-2]
    assert isinstance(err, tuple) and err[0] == "error"
    assert (err[3], err[4], err[5]) == (v["error"]["frame"], v["error"]["field"], v["error"]["offset"])


def _frame_bytes(f: dict[str, Any], ctx: dict[str, Any]) -> bytes:
    t = f["type"]
    if t == "request":
        return Request(f["verb"], f["msg_id"], bytes.fromhex(f["payload_hex"]), f["timeout_ms"]).encode(
            with_timeout=ctx["timeout"]
        )
    if t == "response":
        return Response(f["msg_id"], bytes.fromhex(f["payload_hex"]), f["handler_duration"]).encode(with_duration=ctx["duration"])
    if t == "stream":
        return StreamMessage(bytes.fromhex(f["payload_hex"])).encode()
    assert t == "eos"
    return StreamEnd().encode()


@pytest.mark.parametrize("name", ["LZ4", "LZ4_FRAGMENTED"])
@pytest.mark.parametrize("v", FRAMES, ids=lambda v: v["name"])
def test_plain_vectors_compressed_decode_alike(v: dict[str, Any], name: str) -> None:
    """Every plain frame vector, each frame wrapped by the compressor (both the fast
    and the general envelope), decodes alike and back to the vector's frames."""
    ctx = v["context"]
    fast, generic = _pair(name)
    inner = [_frame_bytes(f, ctx) for f in v["frames"]]
    raw = b"".join(envelope(fast, b, fast=True) for b in inner)
    assert raw == b"".join(envelope(generic, b, fast=False) for b in inner)
    out = _check_same(raw, name, ctx["kind"], timeout=ctx["timeout"], duration=ctx["duration"])
    assert len(out) == len(v["frames"]) + 1


# --------------------------------------------------------------------------- crafted edges


def _lz4_env(inner: bytes, *, declared: int | None = None) -> bytes:
    payload: bytes = u32(len(inner) if declared is None else declared) + lz4.block.compress(inner, store_size=False)
    return u32(len(payload)) + payload


def _frag_env(inner: bytes, *, declared: int | None = None) -> bytes:
    payload: bytes = u32(LAST | (len(inner) if declared is None else declared)) + lz4.block.compress(inner, store_size=False)
    return u32(len(payload)) + payload


REQ28 = struct.Struct("<QQqI").pack
REQ20 = struct.Struct("<QqI").pack
RSP16 = struct.Struct("<qII").pack
RSP12 = struct.Struct("<qI").pack

# (kind, timeout, duration, inner frame bytes): regular, trailing bytes, short header,
# data past the end, exception ids, empty data, a lying len.
INNERS: list[tuple[Kind, bool, bool, bytes]] = [
    ("request", True, False, REQ28(1000, 2, 1, 16) + b"0123456789abcdef"),
    ("request", True, False, REQ28(0, 2, -7, 0)),
    ("request", True, False, REQ28(5, 2, 1, 3) + b"abc" + b"trailing"),
    ("request", True, False, REQ28(5, 2, 1, 4) + b"abc"),
    ("request", True, False, REQ28(5, 2, 1, 0)[:27]),
    ("request", True, False, REQ28(5, 2, 1, 0xFFFFFFFF) + b"x"),
    ("request", False, False, REQ20(2, 1, 16) + b"0123456789abcdef"),
    ("request", False, False, REQ20(2, 1, 2) + b"ab\x00"),
    ("request", False, False, REQ20(2, 1, 2)[:19]),
    ("request", False, False, REQ20(2, 1, 3) + b"ab"),
    ("response", False, True, RSP16(1, 16, 5) + b"0123456789abcdef"),
    ("response", False, True, RSP16(-1, 13, 0xFFFFFFFF) + b"\x00" * 8 + b"boom!"),
    ("response", False, True, RSP16(1, 2, 5) + b"abcd"),
    ("response", False, True, RSP16(1, 5, 5) + b"abcd"),
    ("response", False, True, RSP16(1, 0, 5)[:15]),
    ("response", False, True, RSP16(1, 0x7FFFFFFF, 5) + b"abcd"),
    ("response", False, False, RSP12(1, 16) + b"0123456789abcdef"),
    ("response", False, False, RSP12(-3, 0)),
    ("response", False, False, RSP12(1, 1) + b"ab"),
    ("response", False, False, RSP12(1, 3) + b"ab"),
    ("response", False, False, RSP12(1, 0)[:11]),
    # compressible data: an envelope far smaller than its inner len (limits between the two below)
    ("request", True, False, REQ28(5, 2, 1, 1000) + bytes(1000)),
    ("request", False, False, REQ20(2, 1, 1000) + bytes(1000)),
    ("response", False, True, RSP16(1, 1000, 5) + bytes(1000)),
    ("response", False, False, RSP12(1, 1000) + bytes(1000)),
    ("stream", False, False, u32(3) + b"abc"),
    ("stream", False, False, u32(0xFFFFFFFF)),
    ("stream", False, False, u32(4) + b"abc"),
]


@pytest.mark.parametrize("name", ["LZ4", "LZ4_FRAGMENTED"])
@pytest.mark.parametrize("case", INNERS, ids=lambda c: f"{c[0]}-{c[3][:8].hex()}-{len(c[3])}")
def test_crafted_inner_frames_decode_alike(case: tuple[Kind, bool, bool, bytes], name: str) -> None:
    kind, timeout, duration, inner = case
    wrap = _lz4_env if name == "LZ4" else _frag_env
    raw = wrap(inner) + wrap(inner)  # two in a row: the decoder moves on correctly
    _check_same(raw, name, kind, timeout=timeout, duration=duration)
    # The same against tight limits and a small admission: over-limit and oversized inner frames.
    n = len(inner)
    hs = {"request": 28 if timeout else 20, "response": 16 if duration else 12, "stream": 4}[kind]
    for limits in (
        Limits(max_frame_size=15, max_decompressed_size=64),
        Limits(max_frame_size=64, max_decompressed_size=20),
        Limits(max_frame_size=100, max_decompressed_size=2000),  # clen within, the inner len not
        Limits(max_frame_size=n, max_decompressed_size=n),  # at the line
        Limits(max_frame_size=n, max_decompressed_size=n - 1),
        Limits(max_frame_size=max(0, n - hs), max_decompressed_size=n),  # the inner len at the line
        Limits(max_frame_size=max(0, n - hs - 1), max_decompressed_size=n),
    ):
        _check_same(raw, name, kind, timeout=timeout, duration=duration, limits=limits, every_split=n < 200)
    if kind == "request":
        for discard_over in (2, 16, 1000):
            _check_same(raw, name, kind, timeout=timeout, duration=duration, discard_over=discard_over, every_split=n < 200)


@pytest.mark.parametrize("name", ["LZ4", "LZ4_FRAGMENTED"])
@pytest.mark.parametrize(
    "raw",
    [
        bytes.fromhex("00000000"),  # the universal no-op
        bytes.fromhex("0100000000"),  # payloads under 4 bytes: no-ops
        bytes.fromhex("03000000000000"),
        bytes.fromhex("0400000000000000"),  # declared 0 with no block
        bytes.fromhex("050000000000008000"),  # LZ4_FRAGMENTED empty message
        bytes.fromhex("0500000000000000" + "00"),  # LZ4 declared 0
        u32(9) + u32(20) + b"\xff" * 5,  # garbage block
        u32(5) + u32(272) + b"\x00",  # past LZ4's ratio
        u32(5) + u32(LAST | 272) + b"\x00",
        u32(5) + u32(271) + b"\x00",  # at the ratio: a failing block
        u32(5) + u32(LAST | 271) + b"\x00",
        u32(8) + u32(3) + b"\x00\x00\x00\x00",  # a chunk claiming what it lacks / a short LZ4 block
    ],
    ids=lambda r: r[:12].hex(),
)
def test_crafted_envelopes_decode_alike(raw: bytes, name: str) -> None:
    for kind in ("request", "response"):
        _check_same(raw, name, kind, timeout=True, duration=True, eof=True)
        _check_same(raw + raw, name, kind, timeout=False, duration=False)


@pytest.mark.parametrize("name", ["LZ4", "LZ4_FRAGMENTED"])
def test_declared_size_mismatch_decodes_alike(name: str) -> None:
    inner = RSP16(1, 16, 5) + b"0123456789abcdef"
    wrap = _lz4_env if name == "LZ4" else _frag_env
    for declared in (len(inner) - 1, len(inner) + 1, len(inner) + 100, 0x7FFFFFFF, 0):
        _check_same(wrap(inner, declared=declared), name, "response", timeout=False, duration=True, eof=True)
    # the MSB of LZ4's declared size set: over the decompressed limit, not a "last chunk"
    if name == "LZ4":
        _check_same(_lz4_env(inner, declared=LAST | len(inner)), name, "response", timeout=False, duration=True)
    else:  # a first (non-last) chunk header for a small message: the general path's business
        _check_same(_lz4_env(inner), name, "response", timeout=False, duration=True, eof=True)


@pytest.mark.parametrize("name", ["LZ4", "LZ4_FRAGMENTED"])
def test_large_frames_decode_alike(name: str) -> None:
    """Frames over one chunk: LZ4_FRAGMENTED's several chunks (general path) and LZ4's one large block."""
    fast, generic = _pair(name)
    for size in (CHUNK_SIZE - 16, CHUNK_SIZE - 15, CHUNK_SIZE, 40_000, 100_000):
        data = (b"the quick brown fox " * (size // 20 + 1))[: size // 2] + os.urandom(size - size // 2)
        inner = Response(9, data, 7).encode(with_duration=True)
        raw = envelope(fast, inner, fast=True)
        assert raw == envelope(generic, inner, fast=False)
        out = _check_same(raw + raw, name, "response", timeout=False, duration=True, every_split=False)
        assert out[0] == (Response(9, data, 7), bytes)


@pytest.mark.parametrize("name", ["LZ4", "LZ4_FRAGMENTED"])
def test_the_fast_path_is_taken(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The common compressed shapes never reach the general path (a fast path that is
    never taken would pass every comparison above)."""

    real = FrameDecoder._compressed

    def only_waits(self: FrameDecoder) -> object:
        got = real(self)
        assert got is None, f"general path decoded {got}"  # it may only say "more bytes needed"
        return got

    fast, _ = _pair(name)
    monkeypatch.setattr(FrameDecoder, "_compressed", only_waits)
    cases: list[tuple[Kind, bool, bool, list[Request] | list[Response]]] = [
        ("request", True, False, [Request(2, i, b"x" * i, i) for i in range(1, 40)]),
        ("request", False, False, [Request(2, -i, b"y" * i, None) for i in range(40)]),
        ("response", False, True, [Response(i, b"z" * abs(i), abs(i)) for i in range(-20, 20)]),
        ("response", False, False, [Response(i, b"w" * i, None) for i in range(40)]),
    ]
    for kind, timeout, duration, frames in cases:
        raw = b""
        for f in frames:
            raw += envelope(
                fast, f.encode(with_timeout=timeout) if isinstance(f, Request) else f.encode(with_duration=duration), fast=True
            )
        dec = _decoder(kind, fast, timeout=timeout, duration=duration, discard_over=1 << 20)
        got = _outcome(dec, [raw[i : i + 7] for i in range(0, len(raw), 7)], True)
        assert got == [(f, bytes) for f in frames] + [("state", len(raw), 0, False)]


@pytest.mark.parametrize("skipped", [2, 10], ids=["skipping", "skipped"])
@pytest.mark.parametrize("name", ["LZ4", "LZ4_FRAGMENTED"])
def test_configured_while_skipping_takes_the_general_path(name: str, skipped: int) -> None:
    """A compressor configured while an oversized request is still being skipped (or
    skipped and not yet returned): the general path returns it first (spec §3)."""
    outs = []
    for comp in _pair(name):
        dec = FrameDecoder("request", negotiation=False, fast=True)
        dec.configure(timeout=False, discard_over=4)
        dec.feed(REQ20(2, 1, 10) + b"ab")
        assert dec.next_frame() is None
        dec.feed(b"a" * (skipped - 2))
        dec.configure(timeout=False, compressor=comp, discard_over=4)
        assert isinstance(dec, FastFrameDecoder) and dec._fast_compressor is None
        outs.append(
            _outcome(
                dec,
                [
                    b"c" * (10 - skipped)
                    + envelope(LZ4Compressor() if name == "LZ4" else LZ4FragmentedCompressor(), REQ20(2, 2, 1) + b"x")
                ],
                False,
            )
        )
    assert outs[0] == outs[1]
    assert [type(f[0]).__name__ for f in outs[0][:-1]] == ["OversizedRequest", "Request"]  # type: ignore[index]


def test_a_compressor_set_behind_configure_takes_the_general_path() -> None:
    """Tests and the conformance harness swap ``decoder.compressor`` directly: the fast
    path is only for the very compressor ``configure`` was given."""

    class Marker(LZ4Compressor):
        def decompress(self, payload: bytes, *, limits: Limits, offset: int) -> bytes:
            return RSP12(77, 0)

    dec = _decoder("response", LZ4Compressor(), timeout=False, duration=False)
    dec.compressor = Marker()
    dec.feed(envelope(LZ4Compressor(), RSP12(1, 0)))
    assert dec.next_frame() == Response(77, b"", None)
    dec = _decoder("response", Marker(), timeout=False, duration=False)
    assert isinstance(dec, FastFrameDecoder) and dec._fast_compressor is None
    dec.configure(compressor=None)
    assert dec._fast_compressor is None


# --------------------------------------------------------------------------- encode side


@pytest.mark.parametrize(
    "comp",
    [LZ4Compressor(), LZ4FragmentedCompressor(), LZ4FragmentedCompressor(dependent=False)],
    ids=["LZ4", "LZ4_FRAGMENTED", "LZ4_FRAGMENTED-independent"],
)
def test_envelope_fast_path_is_byte_exact(comp: Compressor) -> None:
    sizes = [1, 2, 15, 16, 32, 100, 4096, CHUNK_SIZE - 1, CHUNK_SIZE, CHUNK_SIZE + 1, 2 * CHUNK_SIZE + 5, 100_000]
    for n in sizes:
        for frame in (os.urandom(n), b"a" * n, (b"abc" * n)[:n]):
            payload = comp.compress(frame)
            assert envelope(comp, frame, fast=True) == u32(len(payload)) + payload == envelope(comp, frame, fast=False)
            assert type(envelope(comp, frame, fast=True)) is bytes


@pytest.mark.parametrize("fast", [True, False])
def test_envelope_empty_frame_as_before(fast: bool) -> None:
    with pytest.raises(ProtocolError, match="cannot carry an empty frame"):
        envelope(LZ4Compressor(), b"", fast=fast)
    assert envelope(LZ4FragmentedCompressor(), b"", fast=fast) == bytes.fromhex("050000000000008000")


def test_envelope_subclass_takes_compress() -> None:
    class Marked(LZ4Compressor):
        def compress(self, frame: bytes) -> bytes:
            return b"mark" + frame

    assert envelope(Marked(), b"abc", fast=True) == u32(7) + b"markabc"


def test_block_api_positional_is_the_keyword_form() -> None:
    """compression.py and the speed paths call ``compress(source, mode, store_size)`` and
    ``decompress(source, uncompressed_size[, return_bytearray, dict])`` positionally."""
    window = os.urandom(500) + b"hello world " * 50
    for n in (0, 1, 16, 32, 1000, 70_000):
        for data in (os.urandom(n), b"hello world " * (n // 12), bytes(n)):
            block = lz4.block.compress(data, "default", False)
            assert block == lz4.block.compress(data, mode="default", store_size=False)
            assert type(block) is bytes
            if data:
                out = lz4.block.decompress(block, len(data))
                assert out == lz4.block.decompress(block, uncompressed_size=len(data)) == data
                assert type(out) is bytes
            dep = lz4.block.compress(data, mode="default", store_size=False, dict=window)
            if data:
                assert lz4.block.decompress(dep, len(data), False, window) == data
                assert lz4.block.decompress(dep, uncompressed_size=len(data), dict=window) == data


# --------------------------------------------------------------------------- hostile sizes


@pytest.fixture
def lz4_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The ``uncompressed_size`` of every call to ``lz4.block.decompress``, from either module."""
    calls: list[int] = []
    real = lz4.block.decompress

    def spy(block: bytes, *args: Any, **kw: Any) -> Any:
        calls.append(args[0] if args else kw["uncompressed_size"])
        return real(block, *args, **kw)

    monkeypatch.setattr(lz4.block, "decompress", spy)
    yield calls


@pytest.mark.parametrize("name", ["LZ4", "LZ4_FRAGMENTED"])
def test_hostile_sizes_refused_before_allocation(name: str, lz4_calls: list[int]) -> None:
    flag = 0 if name == "LZ4" else LAST
    limits = Limits(max_frame_size=1 << 20, max_decompressed_size=1000)
    for declared in (272, 50_000_000, 1001, 0x7FFFFFFF):
        fast, _ = _pair(name)
        dec = _decoder("response", fast, timeout=False, duration=False, limits=limits)
        dec.feed(u32(5) + u32(flag | declared) + b"\x00")
        with pytest.raises(ProtocolError):
            dec.next_frame()
        assert lz4_calls == [], declared
    # a regular frame asks for exactly its declared size, once
    fast, _ = _pair(name)
    dec = _decoder("response", fast, timeout=False, duration=False, limits=limits)
    dec.feed(envelope(fast, RSP12(1, 4) + b"abcd", fast=True))
    assert dec.next_frame() == Response(1, b"abcd", None)
    assert lz4_calls == [16]


# --------------------------------------------------------------------------- LZ4_FRAGMENTED in place


def _reference_fragmented(frame: bytes, *, dependent: bool) -> bytes:
    """LZ4_FRAGMENTED as spec §4 says, with bytes copies and the keyword API."""
    out = b""
    pos = 0
    while len(frame) - pos > CHUNK_SIZE:
        window = frame[max(0, pos - 65536) : pos] if dependent and pos else b""
        kw: dict[str, Any] = {"dict": window} if window else {}
        block = lz4.block.compress(frame[pos : pos + CHUNK_SIZE], mode="default", store_size=False, **kw)
        out += u32(len(block)) + block
        pos += CHUNK_SIZE
    window = frame[max(0, pos - 65536) : pos] if dependent and pos else b""
    kw = {"dict": window} if window else {}
    last: bytes = out + u32(LAST | (len(frame) - pos)) + lz4.block.compress(frame[pos:], mode="default", store_size=False, **kw)
    return last


@pytest.mark.parametrize("dependent", [True, False])
@pytest.mark.parametrize("size", [0, 1, CHUNK_SIZE, CHUNK_SIZE + 1, 2 * CHUNK_SIZE, 3 * CHUNK_SIZE + 5, 200_000])
def test_fragmented_views_match_the_reference(size: int, dependent: bool) -> None:
    """Chunks and windows read as views (no copies) give the reference bytes, and
    decode back through windows that are views of the output so far."""
    text = (b"lorem ipsum dolor sit amet " * (size // 27 + 1))[: size // 2]
    frame = text + os.urandom(size - len(text))
    comp = LZ4FragmentedCompressor(dependent=dependent)
    payload = comp.compress(frame)
    assert payload == _reference_fragmented(frame, dependent=dependent)
    assert envelope(comp, frame, fast=True) == u32(len(payload)) + payload == envelope(comp, frame, fast=False)
    out = comp.decompress(payload, limits=DEFAULT_LIMITS, offset=0)
    assert out == frame and type(out) is bytes


def test_fragmented_bad_later_chunk_is_a_protocol_error() -> None:
    """A failing chunk after good ones: the protocol error (not a BufferError from the
    window view), naming the chunk and its offset."""
    frame = os.urandom(CHUNK_SIZE) + b"tail"
    payload = LZ4FragmentedCompressor().compress(frame)
    (c1,) = struct.unpack_from("<I", payload, 0)
    for bad in (
        payload[: 4 + c1] + u32(10) + b"\xff" * 10 + u32(LAST | 4) + b"\x40tail",
        payload[: 4 + c1] + u32(LAST | 4) + b"\xff" * 6,
    ):
        with pytest.raises(ProtocolError) as info:
            LZ4FragmentedCompressor().decompress(bad, limits=DEFAULT_LIMITS, offset=100)
        assert (info.value.field, info.value.offset) in (("chunk", 100 + 8 + c1), ("last_chunk", 100 + 8 + c1))
