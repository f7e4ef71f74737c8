"""Lumberjack capture decoder (specs/lumberjack/README.md §2) on :class:`refwire.lumberjack.frames.FrameDecoder`.

One row per frame, ``type`` = the frame letter (``W``, ``J``, ``D``, ``C``,
``A``).  Key fields: ``seq`` (J/D/A), ``count`` (W: window size; C: inner
frames; D: pairs).  The frames inside a compressed frame follow it, with
``parent_offset`` set to its offset and ``offset`` counted inside the
inflated bytes; an error inside the payload is a row, and decoding goes on.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from ..errors import ProtocolError
from .decoders import FrameRow, Peer, error_row

__all__ = ["decode"]


def _lumberjack_rows(frames: list[Any], base: int, frame_no: int, parent: int | None, limits: Any) -> Iterator[FrameRow]:
    from refwire.lumberjack.frames import Ack, Compressed, DataFrame, FrameDecoder, JsonFrame, Window, frame_size, inflate

    offset = base
    for f in frames:
        size = frame_size(f)
        if isinstance(f, JsonFrame):
            doc = f.fields()
            yield FrameRow(
                frame_no,
                offset,
                "J",
                size,
                parent,
                seq=f.seq,
                fields_json=orjson.dumps({"seq": f.seq, "version": 2, "event": doc}).decode(),
            )
        elif isinstance(f, DataFrame):
            yield FrameRow(
                frame_no,
                offset,
                "D",
                size,
                parent,
                seq=f.seq,
                count=len(f.pairs),
                fields_json=orjson.dumps({"seq": f.seq, "version": 1, "event": f.fields()}).decode(),
            )
        elif isinstance(f, Window):
            yield FrameRow(
                frame_no,
                offset,
                "W",
                size,
                parent,
                count=f.count,
                fields_json=orjson.dumps({"count": f.count, "version": f.version - 0x30}).decode(),
            )
        elif isinstance(f, Ack):
            yield FrameRow(
                frame_no,
                offset,
                "A",
                size,
                parent,
                seq=f.seq,
                fields_json=orjson.dumps({"seq": f.seq, "version": f.version - 0x30}).decode(),
            )
        elif isinstance(f, Compressed):
            # Inner frames, then (if any) the error inside the payload; the outer stream goes on.
            inner_rows: list[FrameRow] = []
            err: ProtocolError | None = None
            try:
                raw = inflate(f.payload, max_size=limits.max_decompressed_size, offset=offset + 6)
            except ProtocolError as exc:
                raw, err = b"", exc
            if err is None:
                dec = FrameDecoder(limits)
                dec.feed(raw)
                inner, err = dec.frames_before_error()
                inner_rows = list(_lumberjack_rows(inner, 0, frame_no + 1, offset, limits))
                if err is None and dec.buffered:
                    err = ProtocolError(
                        f"{dec.buffered} bytes of an incomplete frame at the end of the inflated payload",
                        protocol="lumberjack",
                        frame=dec.pending_frame_name(),
                        field="(end)",
                        offset=dec.offset,
                    )
            info = {
                "version": f.version - 0x30,
                "compressed_len": len(f.payload),
                "inflated_len": len(raw),
                "frames": len(inner_rows),
            }
            yield FrameRow(frame_no, offset, "C", size, parent, count=len(inner_rows), fields_json=orjson.dumps(info).decode())
            yield from inner_rows
            frame_no += len(inner_rows)
            if err is not None:
                frame_no += 1
                # Errors from inflate() are in stream offsets; those from the inner decoder in inflated offsets.
                yield error_row(frame_no, err, offset, parent if raw == b"" else offset)
        frame_no += 1
        offset += size


def decode(chunks: Iterable[bytes], direction: str, peer: Peer | None = None) -> Iterator[FrameRow]:
    """Lumberjack v1/v2 (specs/lumberjack/README.md §2) on :class:`refwire.lumberjack.FrameDecoder`.

    Key fields: ``seq`` (J/D/A), ``count`` (W: window size; C: inner frames; D: pairs)."""
    from refwire.lumberjack.frames import DEFAULT_LIMITS, FrameDecoder

    dec = FrameDecoder(DEFAULT_LIMITS, validate_json=True)
    frame_no = 0
    for chunk in chunks:
        base = dec.offset
        dec.feed(chunk)
        frames, err = dec.frames_before_error()
        rows = list(_lumberjack_rows(frames, base, frame_no, None, DEFAULT_LIMITS))
        yield from rows
        frame_no = rows[-1].frame_no + 1 if rows else frame_no
        if err is not None:
            yield error_row(frame_no, err, dec.offset, None)
            return
    if dec.buffered:
        name = dec.pending_frame_name()
        exc = ProtocolError(
            f"{dec.buffered} bytes of an incomplete {name or 'frame'} at the end of the stream",
            protocol="lumberjack",
            frame=name,
            field="(end)",
            offset=dec.offset,
        )
        yield error_row(frame_no, exc, dec.offset, None)
