"""Seastar RPC compressors: ``LZ4`` and ``LZ4_FRAGMENTED`` (specs/seastar-rpc/README.md §2, §4).

Both wrap one whole frame in the envelope ``clen:u32 payload[clen]``:

* ``LZ4``: ``payload = uncompressed_size:u32 + raw LZ4 block``.  A payload under 4
  bytes is a no-op; a declared size of 0 is fatal ("decompressed size cannot be
  zero"), as in Seastar (specs/seastar-rpc/README.md §4, vector D8e).
* ``LZ4_FRAGMENTED``: ``payload = chunk*``; an intermediate chunk is
  ``C:u32 (MSB 0) + C bytes`` decompressing to exactly 32768 bytes; the last is
  ``0x80000000|U:u32 + the rest`` decompressing to ``U`` bytes.  Chunks of one
  message may refer back into the previous 64 KiB of that message's output
  (LZ4 streaming, reset per message) (specs/seastar-rpc/README.md §4).

Hostile input: every declared size is checked against
``Limits.max_decompressed_size`` and against what the compressed bytes could
possibly produce (LZ4 expands at most 255x) *before* anything is allocated; a
block that does not decode to exactly the declared size is refused.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Final, Protocol, TypedDict

import lz4.block  # type: ignore[import-untyped]

from .._mypyc import mypyc_attr
from ..errors import LocalProtocolError
from ..speed import REFERENCE, use_fast
from ..wire import Limits, check_limit

__all__ = [
    "CHUNK_SIZE",
    "COMPRESSOR_NAMES",
    "LZ4",
    "LZ4_FRAGMENTED",
    "PROTOCOL",
    "Compressor",
    "LZ4Compressor",
    "LZ4FragmentedCompressor",
    "choose_compressor",
    "envelope",
    "envelope_function",
    "make_compressor",
]

#: The protocol's name in errors (``ProtocolError.protocol``).  It is defined here, in
#: the lowest of the codec modules, and :mod:`~refwire.seastar_rpc.frames` re-exports
#: it: frames imports this module (for the compressors), never the other way round.
PROTOCOL: Final = "seastar-rpc"
LZ4: Final = "LZ4"
LZ4_FRAGMENTED: Final = "LZ4_FRAGMENTED"
#: The names Seastar's built-in factories match, exactly and case-sensitively.
COMPRESSOR_NAMES: Final = (LZ4, LZ4_FRAGMENTED)
#: LZ4_FRAGMENTED chunk size (uncompressed).
CHUNK_SIZE: Final = 32 * 1024
_WINDOW: Final = 64 * 1024
_LAST: Final = 0x80000000
_U32: Final = struct.Struct("<I")
# The block API, called positionally: ``compress(source, mode, store_size)`` and
# ``decompress(source, uncompressed_size, return_bytearray, dict)`` -- the same
# calls as the keyword forms (tests/test_seastar_fast_lz4.py pins that), without
# the keyword parsing, which costs more than compressing a small frame.
# ``decompress`` is looked up at each call, so a test's spy on it sees every call.
_lz4_compress: Final = lz4.block.compress
# An LZ4 block of n bytes cannot decode to more than about 255 * n bytes.
_MAX_RATIO: Final = 255


class Compressor(Protocol):
    """What a connection needs from a compressor."""

    @property
    def name(self) -> str:
        """The name negotiated in the COMPRESS feature."""
        ...

    def compress(self, frame: bytes) -> bytes:
        """The envelope payload for one whole frame (without ``clen``)."""
        ...

    def decompress(self, payload: bytes, *, limits: Limits, offset: int) -> bytes:
        """The frame inside one envelope payload (``b""`` = no-op).  ``offset`` is the
        stream offset of ``payload[0]``, for errors."""
        ...


def envelope(compressor: Compressor, frame: bytes, *, fast: bool | None = None) -> bytes:
    """One whole frame in its envelope (specs/seastar-rpc/README.md §4):
    ``clen:u32 + compressor.compress(frame)``.

    ``fast`` chooses the path (:func:`refwire.speed.use_fast`): the speed path
    (:mod:`refwire.seastar_rpc._fast_compression`) builds a single-block envelope
    in one concatenation, the same bytes.  A machine picks its path once, with
    :func:`envelope_function`.
    """
    if (not REFERENCE) if fast is None else fast:  # (use_fast(fast), inline)
        return _SPEED["envelope"](compressor, frame)
    return _envelope(compressor, frame)


def _envelope(compressor: Compressor, frame: bytes) -> bytes:
    """:func:`envelope` on the plain path."""
    payload = compressor.compress(frame)
    return _U32.pack(len(payload)) + payload


def envelope_function(fast: bool | None = None) -> Callable[[Compressor, bytes], bytes]:
    """:func:`envelope` without the choice: the plain path's function, or the speed
    path's when ``fast`` (:func:`refwire.speed.use_fast`) says so."""
    return _SPEED["envelope"] if use_fast(fast) else _envelope


def _fail(reason: str, field: str, offset: int) -> LocalProtocolError:
    return LocalProtocolError(reason, protocol=PROTOCOL, frame="compressed", field=field, offset=offset)


def _decode_block(block: bytes | memoryview, size: int, *, window: bytes | memoryview, field: str, offset: int) -> bytes:
    if size > _MAX_RATIO * len(block) + 16:
        raise _fail(f"LZ4 block of {len(block)} bytes cannot decompress to the declared {size} bytes", field, offset)
    try:
        out: bytes = lz4.block.decompress(block, size, False, window) if window else lz4.block.decompress(block, size)
    except lz4.block.LZ4BlockError as exc:
        raise _fail(f"RPC frame LZ4 decompression failure: {exc}", field, offset) from None
    if len(out) != size:
        raise _fail(
            f"RPC frame LZ4 decompression failure: block decompressed to {len(out)} bytes, {size} declared", field, offset
        )
    return out


# Subclassing a compressor (a variant, a test's spy) must work in the optional
# mypyc build too; a subclass leaves the envelope fast paths (``type(c) is``).
@mypyc_attr(allow_interpreted_subclasses=True)
class LZ4Compressor:
    """``LZ4``: ``uncompressed_size:u32 + LZ4 raw block`` (``LZ4_compress_default``)."""

    name: Final[str] = LZ4

    def compress(self, frame: bytes) -> bytes:
        if not frame:
            # Seastar's receiver refuses a declared size of 0 (specs/seastar-rpc/README.md §4): never send one.
            raise LocalProtocolError(
                "LZ4 cannot carry an empty frame; send the no-op 00 00 00 00 instead", protocol=PROTOCOL, frame="compressed"
            )
        block: bytes = _lz4_compress(frame, "default", False)
        return _U32.pack(len(frame)) + block

    def decompress(self, payload: bytes, *, limits: Limits, offset: int) -> bytes:
        if len(payload) < 4:
            return b""
        (size,) = _U32.unpack_from(payload, 0)
        if size == 0:
            raise _fail("RPC frame LZ4 decompression failure: decompressed size cannot be zero", "uncompressed_size", offset)
        if size > limits.max_decompressed_size:
            check_limit(
                size,
                limits.max_decompressed_size,
                name="max_decompressed_size",
                field="uncompressed_size",
                frame="compressed",
                offset=offset,
                protocol=PROTOCOL,
            )
        return _decode_block(payload[4:], size, window=b"", field="block", offset=offset + 4)


@mypyc_attr(allow_interpreted_subclasses=True)
class LZ4FragmentedCompressor:
    """``LZ4_FRAGMENTED``: 32 KiB chunks, the last flagged by the MSB of its header.

    ``dependent=True`` (the default, as Seastar's streaming compressor) lets each
    chunk refer back into the previous 64 KiB of the message; ``False`` compresses
    every chunk on its own, which Seastar accepts too (specs/seastar-rpc/README.md §4).
    """

    name: Final[str] = LZ4_FRAGMENTED

    def __init__(self, *, dependent: bool = True) -> None:
        self.dependent = dependent

    def compress(self, frame: bytes) -> bytes:
        parts = []
        pos = 0
        n = len(frame)
        view = memoryview(frame)
        while n - pos > CHUNK_SIZE:
            block = self._block(view, pos, CHUNK_SIZE)
            parts.append(_U32.pack(len(block)))
            parts.append(block)
            pos += CHUNK_SIZE
        parts.append(_U32.pack(_LAST | (n - pos)))
        parts.append(self._block(view, pos, n - pos))
        return b"".join(parts)

    def _block(self, view: memoryview, pos: int, size: int) -> bytes:
        # The chunk and its window are read in place (views of the frame, not copies).
        chunk = view[pos : pos + size]
        block: bytes
        if self.dependent and pos:
            block = lz4.block.compress(chunk, mode="default", store_size=False, dict=view[max(0, pos - _WINDOW) : pos])
        else:
            block = _lz4_compress(chunk, "default", False)
        return block

    def decompress(self, payload: bytes, *, limits: Limits, offset: int) -> bytes:
        if len(payload) < 4:
            return b""
        out = bytearray()
        pos = 0
        n = len(payload)
        limit = limits.max_decompressed_size
        # Chunks and the window are read in place: views of the payload and of the
        # output so far (that one released before the output grows), not copies.
        chunks = memoryview(payload)
        while True:
            if n - pos < 4:
                raise _fail(
                    f"LZ4_FRAGMENTED payload ends after {len(out)} bytes without a last chunk", "chunk_header", offset + pos
                )
            (hdr,) = _U32.unpack_from(payload, pos)
            if hdr & _LAST:
                size = hdr & ~_LAST
                check_limit(
                    len(out) + size,
                    limit,
                    name="max_decompressed_size",
                    field="last_chunk_size",
                    frame="compressed",
                    offset=offset + pos,
                    protocol=PROTOCOL,
                )
                with memoryview(out) as done:
                    block = _decode_block(
                        chunks[pos + 4 :], size, window=done[-_WINDOW:], field="last_chunk", offset=offset + pos + 4
                    )
                if not out:
                    return block  # one chunk: no copy into the bytearray and out again
                out += block
                return bytes(out)
            if hdr > n - pos - 4:
                raise _fail(f"LZ4_FRAGMENTED chunk claims {hdr} compressed bytes, {n - pos - 4} left", "chunk_size", offset + pos)
            check_limit(
                len(out) + CHUNK_SIZE,
                limit,
                name="max_decompressed_size",
                field="chunk_size",
                frame="compressed",
                offset=offset + pos,
                protocol=PROTOCOL,
            )
            with memoryview(out) as done:
                block = _decode_block(
                    chunks[pos + 4 : pos + 4 + hdr], CHUNK_SIZE, window=done[-_WINDOW:], field="chunk", offset=offset + pos + 4
                )
            out += block
            pos += 4 + hdr


def make_compressor(name: str) -> Compressor:
    """The compressor called ``name`` (exact, case-sensitive)."""
    if name == LZ4:
        return LZ4Compressor()
    if name == LZ4_FRAGMENTED:
        return LZ4FragmentedCompressor()
    raise ValueError(f"unknown compressor {name!r}; known: {', '.join(COMPRESSOR_NAMES)}")


def choose_compressor(offer: str, accepted: Sequence[str], *, multi_algo: bool = True) -> str | None:
    """The server's choice (specs/seastar-rpc/README.md §2): the first name *in the client's order*
    that the server accepts.  ``multi_algo=False`` is a server with one plain
    factory: the offer must be exactly one accepted name."""
    if not multi_algo:
        return offer if offer in accepted else None
    for name in offer.split(","):
        if name in accepted:
            return name
    return None


# --------------------------------------------------------------------------- the speed path's hook


class _SpeedPath(TypedDict, total=False):
    """The speed path's functions (:mod:`refwire.seastar_rpc._fast_compression`)."""

    envelope: Callable[[Compressor, bytes], bytes]


#: Filled by :mod:`refwire.seastar_rpc._fast_compression` when it is imported (the
#: package's ``__init__`` imports it, so before any use); read only on the speed
#: path.  This module never imports the speed path itself.
_SPEED: Final[_SpeedPath] = {}
