"""The Lumberjack frames as values, and their bytes (specs/lumberjack/README.md §2, §3.1, §3.2).

Every frame is ``version:u8`` (``'1'`` = 0x31 or ``'2'`` = 0x32), ``type:u8``
(ASCII) and a payload whose integers are all unsigned 32-bit big-endian (§1):

======  =====  =========  ==================================================
type    hex    direction  payload
======  =====  =========  ==================================================
``W``   0x57   client     ``count:u32`` -- a batch header: *count* events follow (§2.1)
``D``   0x44   client     ``seq:u32 pairs:u32 (klen:u32 key vlen:u32 value)*`` (v1 only, §2.2)
``J``   0x4A   client     ``seq:u32 len:u32 json[len]`` (v2 only, §2.3)
``C``   0x43   client     ``len:u32 zlib[len]`` inflating to a whole frame stream (§2.4)
``A``   0x41   server     ``seq:u32`` (§2.5)
======  =====  =========  ==================================================

This module holds one class per frame (each ``encode()`` writes its bytes), the
limits of §4, and what a client puts on the wire for the application's events:
:func:`encode_event` prepares one event once, :func:`encode_events` lays out a
whole window of them (:class:`EncodedWindow`), :func:`window_bytes` adds the
``W`` header and the optional ``C`` around them (§3.1, §3.6), :func:`next_seq`
numbers them (§3.2).  Reading frames is :mod:`refwire.lumberjack.frames`'s
(:class:`~refwire.lumberjack.frames.FrameDecoder`), inflating a ``C`` is
:mod:`refwire.lumberjack.compression`'s; :mod:`refwire.lumberjack.frames`
re-exports every name of this module.

:class:`JsonRun` and :func:`encode_events`' ``fast`` path belong to the speed
paths (:mod:`refwire.lumberjack._fast_frames`, chosen by :mod:`refwire.speed`).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs
import orjson

from ..errors import LimitExceeded, LocalProtocolError
from ..speed import use_fast
from ..wire import U32BE, Limits

__all__ = [
    "ACK",
    "COMPRESSED",
    "DATA",
    "DEFAULT_LIMITS",
    "EVENT_ENCODERS",
    "JSON",
    "MAX_U32",
    "PROTOCOL",
    "TYPE_NAMES",
    "V1",
    "V2",
    "VERSIONS",
    "WINDOW",
    "Ack",
    "Compressed",
    "DataFrame",
    "EncodedEvent",
    "EncodedWindow",
    "Frame",
    "JsonFrame",
    "JsonRun",
    "Window",
    "encode_ack",
    "encode_data",
    "encode_event",
    "encode_events",
    "encode_window",
    "D_PAIR_HELD",
    "frame_size",
    "held_bytes",
    "json_frames",
    "next_seq",
    "window_bytes",
]

PROTOCOL: Final = "lumberjack"

V1: Final = 0x31  #: ``'1'``
V2: Final = 0x32  #: ``'2'``
WINDOW: Final = 0x57  #: ``'W'``
DATA: Final = 0x44  #: ``'D'``
JSON: Final = 0x4A  #: ``'J'``
COMPRESSED: Final = 0x43  #: ``'C'``
ACK: Final = 0x41  #: ``'A'``

TYPE_NAMES: Final = {WINDOW: "W", DATA: "D", JSON: "J", COMPRESSED: "C", ACK: "A"}
VERSIONS: Final = (V1, V2)
MAX_U32: Final = 0xFFFFFFFF

#: Defaults: window 10000 as go-lumber's ``MaxWindowSize``; 64 MiB frames and
#: inflated payloads; compressed frames nested at most 4 deep; 128 MiB of
#: events held per connection for the batch being received (§4).
DEFAULT_LIMITS: Final = Limits(
    max_frame_size=64 * 1024 * 1024,
    max_decompressed_size=64 * 1024 * 1024,
    max_window=10_000,
    max_nesting_depth=4,
    max_buffered=64 * 1024 * 1024,
    max_batch_bytes=128 * 1024 * 1024,
)

_HDR8: Final = struct.Struct(">II")
_HDR10: Final = struct.Struct(">BBII")
_PACK_J_HDR: Final = struct.Struct(">BBII").pack
_PACK_6: Final = struct.Struct(">BBI").pack


def _check_u32(frame: object, name: str) -> None:
    # The field is read untyped (getattr), so the compiled build (setup.py) also
    # reaches the LocalProtocolError for a value that is not an int at all.
    value = getattr(frame, name)
    if not (isinstance(value, int) and 0 <= value <= MAX_U32):
        raise LocalProtocolError(f"{name} must be a u32, got {value!r}", protocol=PROTOCOL, field=name)


def _check_version(frame: object) -> None:
    version = getattr(frame, "version")  # noqa: B009 (untyped read, as in _check_u32)
    if version not in VERSIONS:
        raise LocalProtocolError(f"version must be 0x31 ('1') or 0x32 ('2'), got {version!r}", protocol=PROTOCOL, field="version")


# --------------------------------------------------------------------------- frames (§2)


@attrs.frozen
class Window:
    """``W`` (§2.1): the batch header -- exactly ``count`` data events follow."""

    count: int
    version: int = V2

    def __attrs_post_init__(self) -> None:
        _check_version(self)
        _check_u32(self, "count")

    def encode(self) -> bytes:
        return _PACK_6(self.version, WINDOW, self.count)


@attrs.frozen
class Ack:
    """``A`` (§2.5): the server acknowledges every event up to and including ``seq``
    (``seq`` 0 is a keepalive, §3.4)."""

    seq: int
    version: int = V2

    def __attrs_post_init__(self) -> None:
        _check_version(self)
        _check_u32(self, "seq")

    def encode(self) -> bytes:
        return _PACK_6(self.version, ACK, self.seq)


@attrs.frozen
class JsonFrame:
    """``J`` (v2, §2.3): one event as a JSON document, kept as the raw bytes received.

    ``data`` is the parsed document when the decoder validated it (strict JSON
    mode); otherwise :meth:`fields` parses on demand.  ``version`` is the byte
    received: ``'1'`` only from a decoder with ``strict_versions`` off (Logstash
    accepts a ``'1J'`` inside a v2 batch, §3.10); the constructor insists on ``'2'``.
    """

    seq: int
    payload: bytes
    version: int = V2
    data: Any = attrs.field(default=None, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if getattr(self, "version") != V2:  # noqa: B009 (untyped read, as in _check_u32)
            raise LocalProtocolError("a J frame exists only in version 2", protocol=PROTOCOL, frame="J", field="version")
        _check_u32(self, "seq")

    def fields(self) -> Any:
        """The decoded JSON document."""
        return self.data if self.data is not None else json.loads(self.payload)

    def encode(self) -> bytes:
        return _PACK_J_HDR(self.version, JSON, self.seq, len(self.payload)) + self.payload


@attrs.frozen
class DataFrame:
    """``D`` (v1, §2.2): one event as ordered key/value byte-string pairs.

    ``version`` is the byte received: ``'2'`` only from a decoder with
    ``strict_versions`` off; the constructor insists on ``'1'``.
    """

    seq: int
    pairs: tuple[tuple[bytes, bytes], ...]
    version: int = V1

    def __attrs_post_init__(self) -> None:
        if getattr(self, "version") != V1:  # noqa: B009 (untyped read, as in _check_u32)
            raise LocalProtocolError("a D frame exists only in version 1", protocol=PROTOCOL, frame="D", field="version")
        _check_u32(self, "seq")

    def fields(self) -> dict[str, str]:
        """The pairs as a dict of UTF-8 strings (invalid bytes replaced, the
        last duplicate key winning -- as both real servers build their maps)."""
        return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in self.pairs}

    def encode(self) -> bytes:
        parts = [_HDR8.pack(self.seq, len(self.pairs))]
        for k, v in self.pairs:
            parts.append(U32BE.pack(len(k)))
            parts.append(k)
            parts.append(U32BE.pack(len(v)))
            parts.append(v)
        return bytes((self.version, DATA)) + b"".join(parts)


@attrs.frozen
class Compressed:
    """``C`` (§2.4): a zlib stream (RFC 1950) that inflates to a whole frame stream."""

    payload: bytes
    version: int = V2

    def __attrs_post_init__(self) -> None:
        _check_version(self)

    @classmethod
    def wrap(cls, frames: bytes, *, level: int = 3, version: int = V2) -> Compressed:
        return cls(zlib.compress(frames, level), version)

    def encode(self) -> bytes:
        return _PACK_6(self.version, COMPRESSED, len(self.payload)) + self.payload


Frame = Window | Ack | JsonFrame | DataFrame | Compressed


def encode_ack(seq: int, version: int = V2) -> bytes:
    """``A seq`` (§2.5) without building an object (hot path of the server)."""
    return _PACK_6(version, ACK, seq)


def frame_size(f: Frame | JsonRun) -> int:
    """The encoded size of a decoded frame (or of a :class:`JsonRun`'s frames)."""
    if type(f) is JsonRun:
        return f.size()
    if isinstance(f, (JsonFrame, Compressed)):
        return (10 if isinstance(f, JsonFrame) else 6) + len(f.payload)
    if isinstance(f, DataFrame):
        return 10 + sum(8 + len(k) + len(v) for k, v in f.pairs)
    return 6


#: What a ``D`` pair is held as beyond its key and value (§4): its Python objects (a
#: tuple, two bytes objects, a list slot) take about this much, so a frame of empty
#: pairs -- 8 bytes each on the wire -- cannot hold ten times its size uncounted.
D_PAIR_HELD: Final = 32


def held_bytes(frame: Frame) -> int:
    """The bytes of events a frame makes a server hold (§4 ``max_batch_bytes``):
    a ``J``'s payload, a ``D``'s keys and values plus :data:`D_PAIR_HELD` a pair,
    a ``C``'s compressed payload (its inflated frames count once they are decoded)."""
    if isinstance(frame, JsonFrame | Compressed):
        return len(frame.payload)
    if isinstance(frame, DataFrame):
        return sum(D_PAIR_HELD + len(k) + len(v) for k, v in frame.pairs)
    return 0


def _err(reason: str, *, frame: str | None, field: str | None, offset: int) -> LocalProtocolError:
    """A decoding error at stream ``offset`` (§4: frame, field, offset)."""
    return LocalProtocolError(reason, protocol=PROTOCOL, frame=frame, field=field, offset=offset)


def _limit(reason: str, *, frame: str, field: str, offset: int) -> LimitExceeded:
    """A configured limit (§4) refused the field at stream ``offset``."""
    return LimitExceeded(reason, protocol=PROTOCOL, frame=frame, field=field, offset=offset)


# --------------------------------------------------------------------------- decoded frames, trusted


_new = object.__new__
_set = object.__setattr__


# Slot descriptors of JsonFrame: setting through them skips the frozen __setattr__.
_JSON_SETTERS: Final = tuple(JsonFrame.__dict__[name].__set__ for name in ("seq", "payload", "version", "data"))


class JsonRun:
    """Consecutive complete ``J`` frames with one version byte, decoded in
    columns instead of one :class:`JsonFrame` each: what the speed path of the
    server decodes (``frames(runs=True)`` of a decoder built with ``fast``),
    where a window's events go to a :class:`~refwire.lumberjack.events.Batch`
    that builds its frames only if the application asks for them.  ``docs``
    holds the parsed documents when the decoder validates JSON, else it is
    ``None``.  The plain path never makes one.
    """

    __slots__ = ("docs", "payloads", "seqs", "start", "version")

    def __init__(self, version: int, start: int = 0) -> None:
        self.version = version
        self.start = start  #: the stream offset of the first frame
        self.seqs: list[int] = []
        self.payloads: list[bytes] = []
        self.docs: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.seqs)

    def size(self) -> int:
        """The encoded size of the frames (§2.3: 10 header bytes each)."""
        return 10 * len(self.seqs) + sum(map(len, self.payloads))

    def frames(self) -> list[JsonFrame]:
        """The frames as :class:`JsonFrame` objects."""
        return json_frames(self.version, self.seqs, self.payloads, self.docs)


def json_frames(version: int, seqs: Sequence[int], payloads: Sequence[bytes], docs: Sequence[Any] | None) -> list[JsonFrame]:
    """:class:`JsonFrame` objects for frames decoded in columns (trusted input:
    the decoder checked every field, so no validation runs again)."""
    new = _new
    set_seq, set_payload, set_version, set_data = _JSON_SETTERS
    out: list[JsonFrame] = []
    append = out.append
    for k, (seq, payload) in enumerate(zip(seqs, payloads, strict=True)):
        f = new(JsonFrame)
        set_seq(f, seq)
        set_payload(f, payload)
        set_version(f, version)
        set_data(f, None if docs is None else docs[k])
        append(f)
    return out


# --------------------------------------------------------------------------- the client's events (§3.1, §3.2)

#: One application event prepared for the wire by :func:`encode_event`: a ``J``
#: payload (v2) or the ``D`` pairs (v1).
EncodedEvent = bytes | tuple[tuple[bytes, bytes], ...]

_PACK_U32: Final = U32BE.pack


def next_seq(seq: int) -> int:
    """The sequence number after ``seq``: u32, wrapping at 2**32 and skipping 0
    (0 is the keepalive value of an ack, so no event is ever numbered 0; §3.2)."""
    return 1 if seq >= MAX_U32 else seq + 1


def encode_event(event: Any, version: int) -> EncodedEvent:
    """Prepare one application event for the wire, once (resends reuse it).

    v2: ``bytes`` are taken as an already-encoded JSON object; a mapping is
    JSON-encoded compactly (§2.3).  v1: a mapping becomes ``D`` pairs (strings
    as UTF-8, ``bytes`` as is, anything else JSON-encoded; §2.2); ``str``/``bytes``
    becomes the single pair ``line``.
    """
    if version == V2:
        if type(event) is dict:  # the common case, before the abstract Mapping check
            return _dumps(event)
        if isinstance(event, (bytes, bytearray, memoryview)):
            return bytes(event)
        if isinstance(event, str):
            return event.encode("utf-8")
        if isinstance(event, Mapping):  # (a dict subclass, or a mapping JSON encoders do not take as it is)
            return _dumps(dict(event))
        raise LocalProtocolError(
            f"a v2 event must be a mapping or JSON bytes, got {type(event).__name__}", protocol=PROTOCOL, frame="J"
        )
    if isinstance(event, (bytes, bytearray, str)):
        event = {"line": event}
    if not isinstance(event, Mapping):
        raise LocalProtocolError(f"a v1 event must be a mapping, got {type(event).__name__}", protocol=PROTOCOL, frame="D")
    return tuple((_kv_bytes(k), _kv_bytes(v)) for k, v in event.items())


def _dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON; orjson for speed, the standard library for what orjson
    refuses (non-string keys, integers beyond 64 bits)."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _kv_bytes(x: Any) -> bytes:
    if isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode("utf-8")
    return _dumps(x)


def encode_data(version: int, seq: int, payload: EncodedEvent) -> bytes:
    """The ``J`` (v2, §2.3) or ``D`` (v1, §2.2) frame of one event prepared by :func:`encode_event`."""
    if version == V2:
        assert isinstance(payload, bytes)
        return _PACK_J_HDR(V2, JSON, seq, len(payload)) + payload
    assert isinstance(payload, tuple)
    parts = [_PACK_J_HDR(V1, DATA, seq, len(payload))]
    for k, v in payload:
        parts.append(_PACK_U32(len(k)))
        parts.append(k)
        parts.append(_PACK_U32(len(v)))
        parts.append(v)
    return b"".join(parts)


def encode_window(version: int, seqs: Sequence[int], payloads: Sequence[EncodedEvent], *, compression_level: int = 0) -> bytes:
    """A whole window as the client sends it: ``W n`` and the ``n`` data frames
    numbered ``seqs``, those inside one ``C`` when ``compression_level`` is not 0
    (specs/lumberjack/README.md §3.1, §3.6)."""
    body = b"".join([encode_data(version, seq, p) for seq, p in zip(seqs, payloads, strict=True)])
    return window_bytes(version, len(seqs), body, compression_level)


def window_bytes(version: int, count: int, body: bytes | bytearray, compression_level: int) -> bytes:
    """``W count`` followed by ``body`` (the window's data frames end to end),
    inside one ``C`` when ``compression_level`` is not 0 (§3.1, §3.6)."""
    head = _PACK_6(version, WINDOW, count)
    if compression_level:
        z = zlib.compress(body, compression_level)
        return b"".join((head, _PACK_6(version, COMPRESSED, len(z)), z))
    return head + body


_PACK_SEQ_INTO: Final = U32BE.pack_into


@attrs.define(eq=False)
class EncodedWindow:
    """A window's events encoded once: their data frames (``J`` for v2, ``D``
    for v1; specs/lumberjack/README.md §2.2, §2.3) laid end to end in ``body``,
    the frame of event ``i`` starting at ``starts[i]``, numbered ``seqs``.

    Built by :func:`encode_events`.  A client resends the unacked tail of a
    window (:meth:`tail`) on a new connection, where numbering starts again:
    :meth:`renumber` rewrites the seq fields in place, so an event is encoded
    once however often it is sent and the bytes sent again are the ones sent
    before (§3.7).  One buffer per window instead of one ``bytes`` per event: far
    fewer objects for the allocator, the cheap way to prepare a large window.
    """

    version: int
    body: bytearray
    starts: list[int]
    seqs: list[int]

    def __len__(self) -> int:
        return len(self.starts)

    def renumber(self, seqs: list[int]) -> None:
        """Give the events the sequence numbers ``seqs`` (one per event)."""
        if seqs == self.seqs:
            return
        if len(seqs) != len(self.starts):
            raise ValueError(f"{len(seqs)} sequence numbers for {len(self.starts)} events")
        body = self.body
        for at, seq in zip(self.starts, seqs, strict=True):  # the seq field follows version and type (§2.2, §2.3)
            _PACK_SEQ_INTO(body, at + 2, seq)
        self.seqs = list(seqs)

    def tail(self, k: int) -> EncodedWindow:
        """The last ``k`` events (``0 <= k <= len(self)``), as a window of their own."""
        n = len(self.starts)
        if not 0 <= k <= n:
            raise ValueError(f"a tail of {k} events of a window of {n}")
        if k == n:
            return EncodedWindow(self.version, bytearray(self.body), list(self.starts), list(self.seqs))
        if k == 0:
            return EncodedWindow(self.version, bytearray(), [], [])
        first = self.starts[n - k]
        return EncodedWindow(self.version, self.body[first:], [s - first for s in self.starts[n - k :]], self.seqs[n - k :])

    def payloads(self) -> list[EncodedEvent]:
        """The events as :func:`encode_event` prepares them (``J`` payloads, or
        ``D`` pairs), read back from the frames."""
        body = bytes(self.body)
        ends = [*self.starts[1:], len(body)] if self.starts else []
        if self.version == V2:
            return [body[a + 10 : b] for a, b in zip(self.starts, ends, strict=True)]
        return [_pairs_of(body, a) for a in self.starts]


def _pairs_of(body: bytes, at: int) -> tuple[tuple[bytes, bytes], ...]:
    """The pairs of the ``D`` frame this module encoded at ``body[at:]`` (§2.2:
    ``seq pairs`` then ``klen key vlen value`` per pair)."""
    (count,) = U32BE.unpack_from(body, at + 6)
    pairs = []
    p = at + 10
    for _ in range(count):
        (klen,) = U32BE.unpack_from(body, p)
        key = body[p + 4 : p + 4 + klen]
        p += 4 + klen
        (vlen,) = U32BE.unpack_from(body, p)
        pairs.append((key, body[p + 4 : p + 4 + vlen]))
        p += 4 + vlen
    return tuple(pairs)


#: ``encode_events(version, events, seqs)`` by path: the plain :func:`encode_events_plain`
#: here; the speed path (``True``) is registered by :mod:`refwire.lumberjack._fast_frames`.
EncodeEvents = Callable[[int, Sequence[Any], "Sequence[int] | None"], EncodedWindow]


def encode_events(
    version: int, events: Sequence[Any], seqs: Sequence[int] | None = None, *, fast: bool | None = None
) -> EncodedWindow:
    """Encode a window's application events once (:func:`encode_event` for
    each), numbered ``seqs`` (default ``1..n``, the window numbering of §3.2).

    ``fast``: the speed path (``True``), the plain one (``False``), or as the
    process-wide switch says (``None``, :mod:`refwire.speed`); both give the same
    bytes.
    """
    return EVENT_ENCODERS[use_fast(fast)](version, events, seqs)


def encode_events_plain(version: int, events: Sequence[Any], seqs: Sequence[int] | None = None) -> EncodedWindow:
    """:func:`encode_events`' plain path: each event through :func:`encode_event`
    and :func:`encode_data`, its frame appended to the window's buffer."""
    n = len(events)
    numbers = list(range(1, n + 1)) if seqs is None else list(seqs)
    if len(numbers) != n:
        raise ValueError(f"{len(numbers)} sequence numbers for {n} events")
    window = EncodedWindow(version, bytearray(), [], numbers)
    for seq, event in zip(numbers, events, strict=True):
        window.starts.append(len(window.body))
        window.body += encode_data(version, seq, encode_event(event, version))
    return window


#: :func:`encode_events` by ``fast``; ``True`` is registered by :mod:`refwire.lumberjack._fast_frames`.
EVENT_ENCODERS: Final[dict[bool, EncodeEvents]] = {False: encode_events_plain}
