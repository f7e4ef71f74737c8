"""Lumberjack frame codec (specs/lumberjack/README.md §2).

Every frame is ``version:u8`` (``'1'`` = 0x31 or ``'2'`` = 0x32), ``type:u8``
(ASCII) and a payload whose integers are all unsigned 32-bit big-endian:

======  =====  =========  ==================================================
type    hex    direction  payload
======  =====  =========  ==================================================
``W``   0x57   client     ``count:u32`` -- a batch header: *count* events follow
``D``   0x44   client     ``seq:u32 pairs:u32 (klen:u32 key vlen:u32 value)*`` (v1 only)
``J``   0x4A   client     ``seq:u32 len:u32 json[len]`` (v2 only)
``C``   0x43   client     ``len:u32 zlib[len]`` inflating to a whole frame stream
``A``   0x41   server     ``seq:u32``
======  =====  =========  ==================================================

This module knows the bytes of frames and nothing about batches or acks as
state (that is :mod:`refwire.lumberjack.connection`); it also prepares
application events for the wire (:func:`encode_event`, :func:`next_seq`) and
lays out a client's whole window (:func:`encode_window`); the client reads
its acks with :func:`scan_acks`.  :class:`FrameDecoder` is
incremental and O(n) however the input is chunked; it checks every length
against :class:`~refwire.wire.Limits` before reading or allocating for it.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import attrs
import orjson

from ..errors import LimitExceeded, LocalProtocolError, ProtocolError
from ..wire import U32BE, Limits, ReceiveBuffer

__all__ = [
    "ACK",
    "COMPRESSED",
    "DATA",
    "DEFAULT_LIMITS",
    "JSON",
    "V1",
    "V2",
    "WINDOW",
    "Ack",
    "Compressed",
    "DataFrame",
    "Frame",
    "FrameDecoder",
    "JsonFrame",
    "JsonRun",
    "EncodedEvent",
    "EncodedWindow",
    "Window",
    "decode_all",
    "encode_ack",
    "encode_data",
    "encode_event",
    "encode_events",
    "encode_window",
    "frame_size",
    "held_bytes",
    "inflate",
    "inflate_frames",
    "json_frames",
    "next_seq",
    "scan_acks",
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


# --------------------------------------------------------------------------- frames


@attrs.frozen
class Window:
    """``W``: the batch header -- exactly ``count`` data events follow."""

    count: int
    version: int = V2

    def __attrs_post_init__(self) -> None:
        _check_version(self)
        _check_u32(self, "count")

    def encode(self) -> bytes:
        return _PACK_6(self.version, WINDOW, self.count)


@attrs.frozen
class Ack:
    """``A``: the server acknowledges every event up to and including ``seq``
    (``seq`` 0 is a keepalive)."""

    seq: int
    version: int = V2

    def __attrs_post_init__(self) -> None:
        _check_version(self)
        _check_u32(self, "seq")

    def encode(self) -> bytes:
        return _PACK_6(self.version, ACK, self.seq)


@attrs.frozen
class JsonFrame:
    """``J`` (v2): one event as a JSON document, kept as the raw bytes received.

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
    """``D`` (v1): one event as ordered key/value byte-string pairs.

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
    """``C``: a zlib stream (RFC 1950) that inflates to a whole frame stream."""

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


_new = object.__new__
_set = object.__setattr__


# Slot descriptors of JsonFrame: setting through them skips the frozen __setattr__.
_JSON_SETTERS: Final = tuple(JsonFrame.__dict__[name].__set__ for name in ("seq", "payload", "version", "data"))


class JsonRun:
    """Consecutive complete ``J`` frames with one version byte, decoded in
    columns instead of one :class:`JsonFrame` each: the server's hot path
    (``frames(runs=True)``), where a window's events go to a
    :class:`~refwire.lumberjack.events.Batch` that builds its frames only if
    the application asks for them.  ``docs`` holds the parsed documents when
    the decoder validates JSON, else it is ``None``.
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


_ONLY_DICTS: Final = {dict}


def _check_runs(out: list[Any]) -> None:
    """Parse the payloads of every :class:`JsonRun` in ``out`` as strict JSON
    objects (``docs``), a run at a time.  At the first that is not one, ``out``
    is cut to the frames before it and the error the frame-by-frame decoder
    raises is raised (same words, field ``json``, at the payload's offset)."""
    loads = orjson.loads
    for i, f in enumerate(out):
        if type(f) is not JsonRun:
            continue
        payloads = f.payloads
        try:
            docs = list(map(loads, payloads))
        except ValueError:
            docs = None
        if docs is not None and set(map(type, docs)) == _ONLY_DICTS:
            f.docs = docs
            continue
        at = f.start
        for k, payload in enumerate(payloads):  # the first that is not a JSON object
            try:
                doc = loads(payload)
            except ValueError as exc:
                error = _err(f"J payload is not valid JSON: {exc}", frame="J", field="json", offset=at + 10)
            else:
                if type(doc) is dict:
                    at += 10 + len(payload)
                    continue
                error = _err(
                    f"J payload must be a JSON object, got {type(doc).__name__}", frame="J", field="json", offset=at + 10
                )
            del out[i + 1 :]
            if k == 0:
                del out[i]
            else:
                del f.seqs[k:], payloads[k:]
                f.docs = list(map(loads, payloads))
            raise error
        raise AssertionError("a run failed its check as a whole but not payload by payload")  # pragma: no cover


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


def encode_ack(seq: int, version: int = V2) -> bytes:
    """``A seq`` without building an object (hot path of the server)."""
    return _PACK_6(version, ACK, seq)


def scan_acks(buf: bytes | bytearray, *, base: int = 0) -> Iterator[tuple[int, int, int]]:
    """The ``A`` frames at the start of ``buf`` (what a client reads), one at a
    time as ``(version, seq, position in buf)``; stops at an incomplete frame.

    The version and type bytes are checked as soon as they are there, not once
    all 6 bytes are in: anything but ``1A`` / ``2A`` raises
    :class:`~refwire.errors.LocalProtocolError` at ``base`` + its position, after
    the good acks before it have been yielded.
    """
    pos = 0
    while len(buf) - pos >= 1:
        ver = buf[pos]
        if ver != V1 and ver != V2:
            raise LocalProtocolError(f"bad version byte 0x{ver:02x}", protocol=PROTOCOL, field="version", offset=base + pos)
        if len(buf) - pos < 2:
            return
        typ = buf[pos + 1]
        if typ != ACK:
            raise LocalProtocolError(
                f"unexpected frame type 0x{typ:02x} from the server (only A is allowed)",
                protocol=PROTOCOL,
                field="type",
                offset=base + pos + 1,
            )
        if len(buf) - pos < 6:
            return
        (seq,) = U32BE.unpack_from(buf, pos + 2)
        yield ver, seq, pos
        pos += 6


# --------------------------------------------------------------------------- encoding events

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
    JSON-encoded compactly.  v1: a mapping becomes ``D`` pairs (strings as
    UTF-8, ``bytes`` as is, anything else JSON-encoded); ``str``/``bytes``
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
    """The ``J`` (v2) or ``D`` (v1) frame of one event prepared by :func:`encode_event`."""
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
    if version == V2:
        body = b"".join([_PACK_J_HDR(V2, JSON, seq, len(p)) + p for seq, p in zip(seqs, payloads, strict=True)])  # type: ignore[operator]
    else:
        body = b"".join([encode_data(V1, seq, p) for seq, p in zip(seqs, payloads, strict=True)])
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
    before.  One buffer per window instead of one ``bytes`` per event: far fewer
    objects for the allocator, the cheap way to prepare a large window.
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
        return [decode_all(body[a:b])[0].pairs for a, b in zip(self.starts, ends, strict=True)]  # type: ignore[union-attr]


def encode_events(version: int, events: Sequence[Any], seqs: Sequence[int] | None = None) -> EncodedWindow:
    """Encode a window's application events once (:func:`encode_event` for
    each), numbered ``seqs`` (default ``1..n``, the window numbering of §3.2).

    The hot path of a client: a plain ``dict`` goes straight to orjson and
    each encoded event is copied into the window's buffer and dropped at once.
    """
    n = len(events)
    numbers = list(range(1, n + 1)) if seqs is None else list(seqs)
    if len(numbers) != n:
        raise ValueError(f"{len(numbers)} sequence numbers for {n} events")
    body = bytearray()
    starts: list[int] = []
    mark = starts.append
    if version == V2:
        dumps = orjson.dumps
        pack = _PACK_J_HDR
        for seq, event in zip(numbers, events, strict=True):
            if type(event) is dict:
                try:
                    payload = dumps(event)
                except TypeError:  # what orjson refuses (non-string keys, integers past 64 bits)
                    payload = _dumps(event)
            else:
                payload = encode_event(event, V2)  # type: ignore[assignment]
            mark(len(body))
            body += pack(V2, JSON, seq, len(payload))
            body += payload
    else:
        for seq, event in zip(numbers, events, strict=True):
            mark(len(body))
            body += encode_data(V1, seq, encode_event(event, V1))
    return EncodedWindow(version, body, starts, numbers)


def frame_size(f: Frame | JsonRun) -> int:
    """The encoded size of a decoded frame (or of a :class:`JsonRun`'s frames)."""
    if type(f) is JsonRun:
        return f.size()
    if isinstance(f, (JsonFrame, Compressed)):
        return (10 if isinstance(f, JsonFrame) else 6) + len(f.payload)
    if isinstance(f, DataFrame):
        return 10 + sum(8 + len(k) + len(v) for k, v in f.pairs)
    return 6


# --------------------------------------------------------------------------- decoding


def _err(reason: str, *, frame: str | None, field: str | None, offset: int) -> LocalProtocolError:
    return LocalProtocolError(reason, protocol=PROTOCOL, frame=frame, field=field, offset=offset)


def _limit(reason: str, *, frame: str, field: str, offset: int) -> LimitExceeded:
    return LimitExceeded(reason, protocol=PROTOCOL, frame=frame, field=field, offset=offset)


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


#: Inflated bytes produced per step of :func:`inflate` and :func:`inflate_frames`.
INFLATE_STEP: Final = 256 * 1024


def held_bytes(frame: Frame) -> int:
    """The bytes of events a frame makes a server hold (§4 ``max_batch_bytes``):
    a ``J``'s payload, a ``D``'s keys and values, a ``C``'s compressed payload
    (its inflated frames count once they are decoded)."""
    if isinstance(frame, JsonFrame | Compressed):
        return len(frame.payload)
    if isinstance(frame, DataFrame):
        return sum(len(k) + len(v) for k, v in frame.pairs)
    return 0


def _held_total(frames: list[Any]) -> int:
    """:func:`held_bytes` summed over decoded frames, :class:`JsonRun` included."""
    total = 0
    for f in frames:
        if type(f) is JsonRun:
            total += sum(map(len, f.payloads))
        else:
            total += held_bytes(f)
    return total


def inflate_frames(
    payload: bytes,
    limits: Limits = DEFAULT_LIMITS,
    *,
    validate_json: bool = True,
    strict_versions: bool = True,
    offset: int = 0,
    budget: int | None = None,
    runs: bool = False,
) -> list[Any]:
    """The frames inside a ``C`` payload (§2.4), inflated a step at a time into
    the frame decoder: what is held at once is the decoded frames plus one
    step, not the whole inflated payload *and* the frames cut from it.

    Refuses, like :func:`inflate` then :func:`decode_all`, an inflated size
    over ``max_decompressed_size``, a stream that is not zlib, truncated or
    followed by bytes, a bad frame inside (its offset counts in the inflated
    bytes), or an incomplete frame at the end; what is wrong with the ``C``
    itself is reported first.  ``budget``: the most bytes of events
    (:func:`held_bytes`) the frames may hold, past which
    :class:`~refwire.errors.LimitExceeded` names ``max_batch_bytes`` at once.
    ``runs``: complete ``J`` frames come in :class:`JsonRun` columns
    (:meth:`FrameDecoder.frames`).
    """
    dec = FrameDecoder(limits, validate_json=validate_json, strict_versions=strict_versions)
    frames: list[Any] = []
    inner_error: ProtocolError | None = None
    held = 0
    for chunk in _inflate_steps(payload, max_size=limits.max_decompressed_size, offset=offset):
        if inner_error is not None:
            continue  # only the C's own checks are left to run
        dec.feed(chunk)
        try:
            new = dec.frames(runs=runs)
        except ProtocolError as exc:
            inner_error = _inside(exc, offset)
            continue
        if budget is not None:
            held += _held_total(new)
            if held > budget:
                raise _limit(
                    f"the C frame's events, with the batch's before it, exceed the limit max_batch_bytes={limits.max_batch_bytes}"
                    " (a C frame's events are held together, even when they span windows)",
                    frame="C",
                    field="payload",
                    offset=offset,
                )
        frames.extend(new)
    if inner_error is not None:
        raise inner_error
    if dec.buffered:
        end = _err(f"{dec.buffered} bytes of an incomplete frame at the end", frame=None, field="(end)", offset=dec.offset)
        raise _inside(end, offset)
    return frames


def _inside(exc: ProtocolError, offset: int) -> ProtocolError:
    """An error about a frame inside a ``C``: named ``C>X`` at the ``C``'s stream
    offset (inflated bytes have none), the offset inside the inflated bytes in the reason."""
    exc.reason = f"{exc.reason} (at offset {exc.offset} of the inflated payload)"
    exc.frame = f"C>{exc.frame}" if exc.frame and not exc.frame.startswith("C") else (exc.frame or "C")
    exc.offset = offset
    exc.args = (exc._render(),)
    return exc


class FrameDecoder:
    """Incremental decoder: ``feed()`` bytes, ``frames()`` returns what is complete.

    ``need`` holds how many buffered bytes the next frame requires; until that
    many are present ``frames()`` returns at once without looking at the
    buffer, so a frame trickling in one byte at a time costs O(its size).

    ``validate_json``: parse every ``J`` payload as strict JSON (orjson)
    (keeping the result in ``JsonFrame.data``) and require a JSON object, as
    Logstash does; off, payloads are passed on unparsed (the fast path).
    """

    __slots__ = ("_buf", "_d_resume", "_need", "limits", "strict_versions", "validate_json")

    def __init__(self, limits: Limits = DEFAULT_LIMITS, *, validate_json: bool = True, strict_versions: bool = True) -> None:
        self._buf = ReceiveBuffer()
        self._need = 2
        self.limits = limits
        self.validate_json = validate_json
        #: refuse ``J`` with version byte '1' and ``D`` with '2' (go-lumber); off,
        #: the type decides (J is always v2 data, D v1) and the connection checks
        #: it against its batch, as Logstash does.
        self.strict_versions = strict_versions
        # Resumable walk over a D frame's pairs: (frame start, walked-to offset, pairs left)
        self._d_resume: tuple[int, int, int] | None = None

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def offset(self) -> int:
        """Stream offset of the first byte not yet decoded."""
        return self._buf.consumed

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf.feed(data)

    def frames(self, *, runs: bool = False) -> list[Any]:
        """Every complete frame buffered so far (possibly none).

        Raises :class:`LocalProtocolError` (with frame, field and stream
        offset) at the first bad byte; the frames before it are returned by the
        previous calls only, so a caller that wants them should call once per
        fed chunk (the connection does).

        ``runs``: consecutive complete ``J`` frames of one version byte come as
        one :class:`JsonRun` (columns, no object per frame) instead of
        :class:`JsonFrame` objects; the server machine decodes so.
        """
        buf = self._buf
        if len(buf) < self._need:
            return []
        out: list[Any] = []
        data = buf.data
        start = buf.pos
        pos, need = self._scan(data, start, len(data), buf.consumed - start, out, runs)
        buf.advance_to(pos)
        self._need = need
        return out

    def frames_before_error(self, *, runs: bool = False) -> tuple[list[Any], ProtocolError | None]:
        """Like :meth:`frames` but returns the good frames *and* the error."""
        buf = self._buf
        out: list[Any] = []
        if len(buf) < self._need:
            return out, None
        data = buf.data
        start = buf.pos
        try:
            pos, need = self._scan(data, start, len(data), buf.consumed - start, out, runs)
        except ProtocolError as exc:
            return out, exc
        buf.advance_to(pos)
        self._need = need
        return out, None

    def _scan(
        self, data: bytes | bytearray, pos: int, end: int, base: int, out: list[Any], runs: bool = False
    ) -> tuple[int, int]:
        """Decode frames in ``data[pos:end]`` into ``out``; ``pos + base`` is the
        stream offset.  Returns ``(new_pos, need)``."""
        mv = memoryview(data) if type(data) is not bytes else None
        try:
            try:
                done = self._scan_inner(data, mv, pos, end, base, out, runs)
            except ProtocolError:
                if runs and self.validate_json:
                    _check_runs(out)  # a bad payload before the bad frame is the first error
                raise
            if runs and self.validate_json:
                _check_runs(out)
            return done
        finally:
            if mv is not None:
                mv.release()

    def _scan_inner(
        self,
        data: bytes | bytearray,
        mv: memoryview | None,
        pos: int,
        end: int,
        base: int,
        out: list[Any],
        runs: bool,
    ) -> tuple[int, int]:
        max_frame = self.limits.max_frame_size
        validate = self.validate_json
        unpack8 = _HDR8.unpack_from
        unpack4 = U32BE.unpack_from
        append = out.append
        # Strict RFC 8259 JSON (orjson): UTF-8 only, no byte-order mark, no NaN or
        # Infinity -- Jackson's defaults, as Logstash parses.  Integers beyond 64
        # bits come back as floats; JsonFrame.payload always keeps the exact bytes.
        loads = orjson.loads
        new = _new
        json_cls = JsonFrame
        set_seq, set_payload, set_version, set_data = _JSON_SETTERS
        strict_versions = self.strict_versions
        unpack10 = _HDR10.unpack_from
        v1 = V1
        v2 = V2
        json_t = JSON
        run: JsonRun | None = None  # the run the next fast-path J joins (runs mode)
        run_version = 0
        add_seq = add_payload = append
        while True:
            avail = end - pos
            if avail >= 10:
                ver, typ, seq, ln = unpack10(data, pos)
                if (
                    typ == json_t
                    and (ver == v2 or (ver == v1 and not strict_versions))
                    and 0 < ln
                    and ln + 10 <= max_frame
                    and pos + 10 + ln <= end
                ):
                    # Fast path: a complete, well-formed J frame (the common case).
                    # (A non-J frame, or a J that is short or malformed, goes to the
                    # checks below, which return what it needs or raise.)
                    stop = pos + 10 + ln
                    payload = data[pos + 10 : stop] if mv is None else mv[pos + 10 : stop].tobytes()
                    if runs:  # (JSON is checked for the whole run at once, by _check_runs)
                        if run is None or ver != run_version:
                            run = JsonRun(ver, pos + base)
                            run_version = ver
                            append(run)
                            add_seq = run.seqs.append
                            add_payload = run.payloads.append
                        add_seq(seq)
                        add_payload(payload)
                        pos = stop
                        continue
                    if validate:
                        try:
                            doc = loads(payload)
                        except ValueError as exc:
                            raise _err(
                                f"J payload is not valid JSON: {exc}", frame="J", field="json", offset=pos + 10 + base
                            ) from None
                        if type(doc) is not dict:
                            raise _err(
                                f"J payload must be a JSON object, got {type(doc).__name__}",
                                frame="J",
                                field="json",
                                offset=pos + 10 + base,
                            )
                    else:
                        doc = None
                    f = new(json_cls)
                    set_seq(f, seq)
                    set_payload(f, payload)
                    set_version(f, ver)  # '1' only when strict_versions is off (the type decides then)
                    set_data(f, doc)
                    append(f)
                    pos = stop
                    continue
            elif avail < 2:
                return pos, 2
            run = None  # any other frame ends the run (a J comes back to the fast path)
            ver = data[pos]
            typ = data[pos + 1]
            if ver != V2 and ver != V1:
                raise _err(
                    f"bad version byte 0x{ver:02x} (expected 0x31 '1' or 0x32 '2')",
                    frame=None,
                    field="version",
                    offset=pos + base,
                )
            if typ == JSON:
                if avail < 10:
                    return pos, 10
                seq, ln = unpack8(data, pos + 2)
                if ver != V2 and strict_versions:
                    raise _err(
                        "J frame with version byte '1' (J exists only in v2)", frame="J", field="version", offset=pos + base
                    )
                if ln == 0:
                    raise _err("J payload length is 0", frame="J", field="len", offset=pos + 6 + base)
                if ln + 10 > max_frame:
                    raise _limit(
                        f"J frame of {ln + 10} bytes exceeds the limit max_frame_size={max_frame}",
                        frame="J",
                        field="len",
                        offset=pos + 6 + base,
                    )
                stop = pos + 10 + ln
                if stop > end:
                    return pos, 10 + ln
                # Complete and well-formed: the fast path above takes it on the next
                # turn (its condition is exactly the negation of the checks here).
                continue
            elif typ == WINDOW or typ == ACK:
                if avail < 6:
                    return pos, 6
                (val,) = unpack4(data, pos + 2)
                append(Window(val, ver) if typ == WINDOW else Ack(val, ver))
                pos += 6
            elif typ == COMPRESSED:
                if avail < 6:
                    return pos, 6
                (ln,) = unpack4(data, pos + 2)
                if ln + 6 > max_frame:
                    raise _limit(
                        f"C frame of {ln + 6} bytes exceeds the limit max_frame_size={max_frame}",
                        frame="C",
                        field="len",
                        offset=pos + 2 + base,
                    )
                stop = pos + 6 + ln
                if stop > end:
                    return pos, 6 + ln
                payload = data[pos + 6 : stop] if mv is None else mv[pos + 6 : stop].tobytes()
                append(Compressed(payload, ver))  # type: ignore[arg-type]
                pos = stop
            elif typ == DATA:
                r = self._scan_data(data, mv, pos, end, base, ver)
                if isinstance(r, int):
                    return pos, r
                append(r[0])
                pos = r[1]
            else:
                raise _err(f"unknown frame type 0x{typ:02x}", frame=None, field="type", offset=pos + 1 + base)

    def _scan_data(
        self,
        data: bytes | bytearray,
        mv: memoryview | None,
        pos: int,
        end: int,
        base: int,
        ver: int,
    ) -> tuple[DataFrame, int] | int:
        """Walk a ``D`` frame at ``pos``: ``(frame, next_pos)`` or the byte
        count the frame needs from ``pos`` to make progress.  The walk over the
        pairs resumes where it stopped, so a huge D trickling in stays O(n)."""
        if end - pos < 10:
            return 10
        if ver != V1 and self.strict_versions:
            raise _err("D frame with version byte '2' (D exists only in v1)", frame="D", field="version", offset=pos + base)
        seq, count = _HDR8.unpack_from(data, pos + 2)
        max_frame = self.limits.max_frame_size
        if 10 + 8 * count > max_frame:
            raise _limit(
                f"D frame with {count} pairs cannot fit the limit max_frame_size={max_frame}",
                frame="D",
                field="pairs",
                offset=pos + 6 + base,
            )
        stream_pos = pos + base
        resume = self._d_resume
        if resume is not None and resume[0] == stream_pos:
            p = resume[1] - base
            left = resume[2]
        else:
            p = pos + 10
            left = count
        while left:
            if end - p < 4:
                self._d_resume = (stream_pos, p + base, left)
                return p + 4 - pos
            klen: int = U32BE.unpack_from(data, p)[0]
            if p + 4 + klen - pos > max_frame:
                raise _limit(
                    f"D key of {klen} bytes exceeds the limit max_frame_size={max_frame}",
                    frame="D",
                    field="klen",
                    offset=p + base,
                )
            if end - p < 8 + klen:
                self._d_resume = (stream_pos, p + base, left)
                return p + 8 + klen - pos
            vlen: int = U32BE.unpack_from(data, p + 4 + klen)[0]
            if p + 8 + klen + vlen - pos > max_frame:
                raise _limit(
                    f"D value of {vlen} bytes exceeds the limit max_frame_size={max_frame}",
                    frame="D",
                    field="vlen",
                    offset=p + 4 + klen + base,
                )
            if end - p < 8 + klen + vlen:
                self._d_resume = (stream_pos, p + base, left)
                return p + 8 + klen + vlen - pos
            p += 8 + klen + vlen
            left -= 1
        self._d_resume = None
        # Second pass over a frame known to be complete: slice the pairs out.
        pairs = []
        q = pos + 10
        for _ in range(count):
            klen = U32BE.unpack_from(data, q)[0]
            k = data[q + 4 : q + 4 + klen] if mv is None else mv[q + 4 : q + 4 + klen].tobytes()
            q += 4 + klen
            vlen = U32BE.unpack_from(data, q)[0]
            v = data[q + 4 : q + 4 + vlen] if mv is None else mv[q + 4 : q + 4 + vlen].tobytes()
            q += 4 + vlen
            pairs.append((bytes(k), bytes(v)))
        f: DataFrame = _new(DataFrame)
        _set(f, "seq", seq)
        _set(f, "pairs", tuple(pairs))
        _set(f, "version", ver)  # '2' only when strict_versions is off (the type decides then)
        return f, q

    def pending_frame_name(self) -> str | None:
        """The type letter of the incomplete frame buffered, if its type byte arrived."""
        head = self._buf.peek(2)
        return TYPE_NAMES.get(head[1]) if len(head) == 2 else None


def decode_all(
    data: bytes, limits: Limits = DEFAULT_LIMITS, *, validate_json: bool = True, strict_versions: bool = True
) -> list[Frame]:
    """Decode a byte string that must hold whole frames only (as a ``C`` payload must)."""
    dec = FrameDecoder(limits, validate_json=validate_json, strict_versions=strict_versions)
    dec.feed(data)
    frames = dec.frames()
    if dec.buffered:
        raise _err(
            f"{dec.buffered} bytes of an incomplete frame at the end",
            frame=None,
            field="(end)",
            offset=dec.offset,
        )
    return frames
