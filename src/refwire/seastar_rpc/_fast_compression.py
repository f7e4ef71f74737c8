"""The speed path of Seastar RPC's envelopes (specs/seastar-rpc/README.md §4).

The plain path, :func:`refwire.seastar_rpc.compression.envelope`, asks the
compressor for the payload and puts ``clen:u32`` in front of it.  Here a frame
that is one LZ4 block -- any non-empty frame for ``LZ4``, one of at most 32 KiB
for ``LZ4_FRAGMENTED`` (a single last chunk, no window; the empty frame too:
``05 00 00 00 00 00 00 80 00``) -- is built in one concatenation: the same bytes
as the plain path, which takes everything else (and any other compressor,
subclasses included).

It registers itself in :data:`refwire.seastar_rpc.compression._SPEED` when
imported (the package's ``__init__`` imports it, so before any use).
"""

from __future__ import annotations

import struct
from typing import Final

from . import compression
from .compression import _LAST, _SPEED, CHUNK_SIZE, Compressor, LZ4Compressor, LZ4FragmentedCompressor, _lz4_compress

__all__ = ["envelope"]

#: ``clen:u32`` and the first payload word (LZ4's ``uncompressed_size``, LZ4_FRAGMENTED's chunk header).
_U32X2: Final = struct.Struct("<II")
# (bound by assignment, not imported by name: CPython 3.11 compiles ``name.method(...)``
# of an imported name as an attribute load, a bound method made per call)
_U32: Final = compression._U32


def envelope(compressor: Compressor, frame: bytes) -> bytes:
    """``clen:u32 + compressor.compress(frame)``, a single-block envelope built here."""
    kind = type(compressor)
    n = len(frame)
    if kind is LZ4Compressor:
        if n:
            block: bytes = _lz4_compress(frame, "default", False)
            return _U32X2.pack(len(block) + 4, n) + block
    elif kind is LZ4FragmentedCompressor and n <= CHUNK_SIZE:
        block = _lz4_compress(frame, "default", False)
        return _U32X2.pack(len(block) + 4, _LAST | n) + block
    payload = compressor.compress(frame)
    return _U32.pack(len(payload)) + payload


_SPEED["envelope"] = envelope
