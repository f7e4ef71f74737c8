"""Capture decoders: protocol name -> byte stream of one direction -> frame rows.

One connection-direction is the unit of decoding (a
stateful stream decoder cannot start at an arbitrary offset), and a decoder
must deliver *the frames before a bad byte and then the error at its offset*,
never losing the good frames.  Each entry of :data:`DECODERS` is a small
function ``decode(chunks, direction) -> Iterator[FrameRow]`` built on the
protocol's own Sans-IO frame decoder; it reads the stream chunk by chunk, so
a huge capture never has to fit in memory.

Rows of one stream carry ``frame_no`` in decode order (the frames inside a
compressed frame follow it, with ``parent_offset`` set to the compressed
frame's offset and ``offset`` counted inside the inflated bytes).  After an
error in the outer stream decoding stops (the framing is lost); an error
inside a compressed frame's payload is a row, and decoding goes on after it.

Adding a protocol: write ``def _decode_x(chunks, direction, peer=None)`` and
add it to :data:`DECODERS` (``key fields``: put the sequence number / request
id in ``seq``, a window or batch size in ``count``, a stream / topic / verb
name in ``name``; everything in ``fields_json``).

``peer`` is the other direction of the same connection, as a function that
reads it again from the start (``None`` when the capture lacks it).  A
decoder whose framing depends on what the peer said uses it the way the real
endpoint does: Seastar RPC reads the peer's negotiation frame (it fixes the
frame layout and the compressor of both directions), and TANK decodes the
server direction with the client's requests in hand (a produce response is
decoded against its request's partitions, a consume chunk from the requested
sequence number).  The other protocols ignore it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import attrs
import orjson

from ..errors import ProtocolError
from .schema import Columns

__all__ = ["DECODERS", "FRAME_COLUMNS", "Decoder", "FrameRow", "Peer", "decode_bytes", "decode_stream", "error_row", "json_value"]


@attrs.frozen
class FrameRow:
    """One decoded frame (or one error) of one direction of one connection."""

    frame_no: int
    offset: int  #: in the stream, or inside the inflated payload when ``parent_offset`` is set
    type: str  #: the frame's name, or "error"
    size: int
    parent_offset: int | None = None
    seq: int | None = None
    count: int | None = None
    name: str | None = None
    fields_json: str = "{}"
    error: str | None = None


#: The frames table (conn and direction are added by the caller; ts from a time index).
FRAME_COLUMNS: Columns = (
    ("protocol", "string"),
    ("conn", "string"),
    ("direction", "string"),
    ("frame_no", "int64"),
    ("offset", "int64"),
    ("parent_offset", "int64"),
    ("type", "string"),
    ("size", "int64"),
    ("seq", "int64"),
    ("count", "int64"),
    ("name", "string"),
    ("fields_json", "string"),
    ("error", "string"),
    ("ts", "double"),
)

#: Reads one direction of a connection again, from its first byte.
Peer = Callable[[], Iterable[bytes]]


class Decoder(Protocol):
    """``decode(chunks, direction, peer)`` -> rows; direction is "c2s" or "s2c"."""

    def __call__(self, chunks: Iterable[bytes], direction: str, peer: Peer | None = None, /) -> Iterator[FrameRow]: ...


def _error_row(frame_no: int, exc: ProtocolError, fallback_offset: int, parent: int | None) -> FrameRow:
    offset = exc.offset if exc.offset is not None else fallback_offset
    info = {"frame": exc.frame, "field": exc.field, "reason": exc.reason, "kind": type(exc).__name__}
    return FrameRow(frame_no, offset, "error", 0, parent_offset=parent, fields_json=orjson.dumps(info).decode(), error=str(exc))


# --------------------------------------------------------------------------- lumberjack


def _lumberjack_rows(frames: list[Any], base: int, frame_no: int, parent: int | None, limits: Any) -> Iterator[FrameRow]:
    from refwire.lumberjack.frames import Ack, Compressed, DataFrame, FrameDecoder, JsonFrame, Window, frame_size, inflate

    offset = base
    for f in frames:
        size = frame_size(f)
        if isinstance(f, JsonFrame):
            doc = f.fields()
            yield FrameRow(frame_no, offset, "J", size, parent, seq=f.seq, fields_json=orjson.dumps({"seq": f.seq, "version": 2, "event": doc}).decode())
        elif isinstance(f, DataFrame):
            yield FrameRow(frame_no, offset, "D", size, parent, seq=f.seq, count=len(f.pairs), fields_json=orjson.dumps({"seq": f.seq, "version": 1, "event": f.fields()}).decode())
        elif isinstance(f, Window):
            yield FrameRow(frame_no, offset, "W", size, parent, count=f.count, fields_json=orjson.dumps({"count": f.count, "version": f.version - 0x30}).decode())
        elif isinstance(f, Ack):
            yield FrameRow(frame_no, offset, "A", size, parent, seq=f.seq, fields_json=orjson.dumps({"seq": f.seq, "version": f.version - 0x30}).decode())
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
            info = {"version": f.version - 0x30, "compressed_len": len(f.payload), "inflated_len": len(raw), "frames": len(inner_rows)}
            yield FrameRow(frame_no, offset, "C", size, parent, count=len(inner_rows), fields_json=orjson.dumps(info).decode())
            yield from inner_rows
            frame_no += len(inner_rows)
            if err is not None:
                frame_no += 1
                # Errors from inflate() are in stream offsets; those from the inner decoder in inflated offsets.
                yield _error_row(frame_no, err, offset, parent if raw == b"" else offset)
        frame_no += 1
        offset += size


def _decode_lumberjack(chunks: Iterable[bytes], direction: str, peer: Peer | None = None) -> Iterator[FrameRow]:
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
            yield _error_row(frame_no, err, dec.offset, None)
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
        yield _error_row(frame_no, exc, dec.offset, None)


def _decode_pravega(chunks: Iterable[bytes], direction: str, peer: Peer | None = None) -> Iterator[FrameRow]:
    from .decode_pravega import decode

    return decode(chunks, direction, peer)


def _decode_tank(chunks: Iterable[bytes], direction: str, peer: Peer | None = None) -> Iterator[FrameRow]:
    from .decode_tank import decode

    return decode(chunks, direction, peer)


def _decode_seastar(chunks: Iterable[bytes], direction: str, peer: Peer | None = None) -> Iterator[FrameRow]:
    from .decode_seastar import decode

    return decode(chunks, direction, peer)


#: protocol -> decoder (the protocol modules are imported on first use).
DECODERS: dict[str, Decoder] = {
    "lumberjack": _decode_lumberjack,
    "pravega": _decode_pravega,
    "tank": _decode_tank,
    "seastar-rpc": _decode_seastar,
}


def decode_stream(protocol: str, chunks: Iterable[bytes], direction: str, peer: Peer | None = None) -> Iterator[FrameRow]:
    """Decode one direction of one connection with ``protocol``'s decoder
    (``peer``: the other direction, for protocols that need it)."""
    try:
        decoder = DECODERS[protocol]
    except KeyError:
        raise ValueError(f"no capture decoder for {protocol!r}; known: {', '.join(sorted(DECODERS))}") from None
    return decoder(chunks, direction, peer)


def decode_bytes(protocol: str, data: bytes, direction: str = "c2s", peer: bytes | None = None) -> list[FrameRow]:
    """Decode a whole stream held in memory (tests, small files); ``peer`` is the
    other direction's bytes, when the protocol needs them."""
    return list(decode_stream(protocol, [data], direction, None if peer is None else (lambda: [peer])))


def json_value(v: Any) -> Any:
    """A field value as JSON: bytes become their length, UUIDs and enums strings."""
    if isinstance(v, bytes | bytearray | memoryview):
        return {"len": len(v)}
    if isinstance(v, bool | int | float | str) or v is None:
        return v
    if isinstance(v, tuple | list):
        return [json_value(x) for x in v]
    if attrs.has(type(v)):
        return {a.name: json_value(getattr(v, a.name)) for a in attrs.fields(type(v))}
    return str(getattr(v, "value", v))


def dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def error_row(frame_no: int, exc: ProtocolError, fallback_offset: int, parent: int | None) -> FrameRow:
    """The row of a protocol error (shared by the protocol decoders)."""
    return _error_row(frame_no, exc, fallback_offset, parent)
