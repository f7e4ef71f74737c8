"""Inflating a Lumberjack ``C`` frame's payload (specs/lumberjack/README.md §2.4, §3.6, §4).

A ``C`` payload is one zlib stream (RFC 1950: a 2-byte header, DEFLATE blocks,
stored blocks included, an Adler-32 trailer) that inflates to a whole frame
stream.  refwire requires the stream to be complete and to end exactly at the
end of the payload, and caps the inflated size at ``max_decompressed_size``
while inflating, before the memory is used (§3.6, §4).  Reading the inflated
frames is :func:`refwire.lumberjack.frames.inflate_frames`'s.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Final

from ..errors import ProtocolError
from .codec import _err, _limit

__all__ = ["INFLATE_STEP", "inflate"]

#: Inflated bytes produced per step of :func:`inflate` and
#: :func:`~refwire.lumberjack.frames.inflate_frames`.
INFLATE_STEP: Final = 256 * 1024


def inflate(payload: bytes, *, max_size: int, offset: int = 0) -> bytes:
    """Inflate a ``C`` payload, refusing (without allocating it) anything larger
    than ``max_size`` bytes, a stream that is not zlib, a truncated stream, or
    bytes after the end of the zlib stream (errors at ``offset``)."""
    return b"".join(_inflate_steps(payload, max_size=max_size, offset=offset))


def _inflate_steps(payload: bytes, *, max_size: int, offset: int, step: int | None = None) -> Iterator[bytes]:
    """The inflated bytes of a ``C`` payload, ``step`` bytes at a time (default
    :data:`INFLATE_STEP`), checked as :func:`inflate` says; the checks that need
    the end of the stream run after the last step."""
    d = zlib.decompressobj()
    total = 0
    data = payload
    step = step or INFLATE_STEP
    while True:
        try:
            chunk = d.decompress(data, step)
        except zlib.error as exc:
            raise _err(f"bad zlib stream: {exc}", frame="C", field="payload", offset=offset) from None
        data = d.unconsumed_tail
        total += len(chunk)
        if total > max_size:
            raise _limit(
                f"inflated payload exceeds the limit max_decompressed_size={max_size}",
                frame="C",
                field="payload",
                offset=offset,
            )
        if chunk:
            yield chunk
        if d.eof or not chunk:  # the end, or no progress: what is left is judged below
            break
    if not d.eof:
        raise _err("zlib stream is truncated (no end of stream)", frame="C", field="payload", offset=offset)
    if d.unused_data:
        raise _err(f"{len(d.unused_data)} bytes after the end of the zlib stream", frame="C", field="payload", offset=offset)


def _inside(exc: ProtocolError, offset: int) -> ProtocolError:
    """An error about a frame inside a ``C``: named ``C>X`` at the ``C``'s stream
    offset (inflated bytes have none), the offset inside the inflated bytes in the reason."""
    exc.reason = f"{exc.reason} (at offset {exc.offset} of the inflated payload)"
    exc.frame = f"C>{exc.frame}" if exc.frame and not exc.frame.startswith("C") else (exc.frame or "C")
    exc.offset = offset
    exc.args = (exc._render(),)
    return exc
