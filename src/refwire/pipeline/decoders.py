"""Capture decoders: protocol name -> byte stream of one direction -> frame rows.

One connection-direction is the unit of decoding (a
stateful stream decoder cannot start at an arbitrary offset), and a decoder
must deliver *the frames before a bad byte and then the error at its offset*,
never losing the good frames.  Each protocol's decoder (named by its
descriptor, :mod:`refwire.protocols`, and living in its dialect module,
``dialects/<protocol>.py``, next to its rules) is a small function ``decode(chunks, direction) -> Iterator[FrameRow]`` built on the
protocol's own Sans-IO frame decoder; it reads the stream chunk by chunk, so
a huge capture never has to fit in memory.

Rows of one stream carry ``frame_no`` in decode order (the frames inside a
compressed frame follow it, with ``parent_offset`` set to the compressed
frame's offset and ``offset`` counted inside the inflated bytes).  After an
error in the outer stream decoding stops (the framing is lost); an error
inside a compressed frame's payload is a row, and decoding goes on after it.

Adding a protocol: write ``decode(chunks, direction, peer=None)`` in
``dialects/<protocol>.py`` and name it in the protocol's descriptor (``key fields``: put the sequence number / request
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

__all__ = [
    "FRAME_COLUMNS",
    "Decoder",
    "FrameRow",
    "Peer",
    "decode_bytes",
    "decode_stream",
    "decoder_names",
    "get_decoder",
    "error_row",
    "json_value",
]


def text(s: str) -> str:
    """``s`` as text any UTF-8 writer takes: a name a codec kept byte for byte
    (TANK's ``surrogateescape``, Pravega's lone surrogates of modified UTF-8, §2.3)
    has each lone surrogate written as a ``\\udcNN`` escape instead of failing the
    row.  Valid text is returned as it is."""
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")
    return s


def _optional_text(s: str | None) -> str | None:
    return None if s is None else text(s)


def _clean(obj: Any) -> Any:
    """``obj`` with every string (keys included) made :func:`text`."""
    if isinstance(obj, str):
        return text(obj)
    if isinstance(obj, dict):
        return {_clean(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(x) for x in obj]
    return obj


@attrs.frozen
class FrameRow:
    """One decoded frame (or one error) of one direction of one connection.

    Its strings are valid UTF-8 whatever the bytes said (:func:`text`): a hostile
    name never fails a capture's decode."""

    frame_no: int
    offset: int  #: in the stream, or inside the inflated payload when ``parent_offset`` is set
    type: str  #: the frame's name, or "error"
    size: int
    parent_offset: int | None = None
    seq: int | None = None
    count: int | None = None
    name: str | None = attrs.field(default=None, converter=_optional_text)
    fields_json: str = "{}"
    error: str | None = attrs.field(default=None, converter=_optional_text)


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


def decoder_names() -> tuple[str, ...]:
    """The protocols that have a capture decoder (from :mod:`refwire.protocols`)."""
    from refwire.protocols import names

    return names("decoder")


def get_decoder(protocol: str) -> Decoder:
    """``protocol``'s capture decoder, imported on first use (:class:`ValueError` if none)."""
    from refwire.protocols import descriptor

    decoder: Decoder = descriptor(protocol, "decoder").load("decoder")
    return decoder


def decode_stream(protocol: str, chunks: Iterable[bytes], direction: str, peer: Peer | None = None) -> Iterator[FrameRow]:
    """Decode one direction of one connection with ``protocol``'s decoder
    (``peer``: the other direction, for protocols that need it)."""
    return get_decoder(protocol)(chunks, direction, peer)


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
    """``obj`` as JSON; strings that are no valid UTF-8 are escaped (:func:`text`)."""
    try:
        return orjson.dumps(obj).decode()
    except orjson.JSONEncodeError:
        return orjson.dumps(_clean(obj)).decode()


def error_row(frame_no: int, exc: ProtocolError, fallback_offset: int, parent: int | None) -> FrameRow:
    """The row of a protocol error (shared by the protocol decoders)."""
    offset = exc.offset if exc.offset is not None else fallback_offset
    info = {"frame": exc.frame, "field": exc.field, "reason": exc.reason, "kind": type(exc).__name__}
    return FrameRow(frame_no, offset, "error", 0, parent_offset=parent, fields_json=dumps(info), error=str(exc))
