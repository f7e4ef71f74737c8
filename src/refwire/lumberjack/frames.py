"""Lumberjack frame codec (specs/lumberjack/README.md §2): reading frames.

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

This module reads frames: :class:`FrameDecoder` the ones a client sends (§2.1-§2.4),
:func:`read_ack` / :func:`scan_acks` the ``A`` frames a server sends (§2.5),
:func:`inflate_frames` the frames inside a ``C`` payload (§3.6).  The decoder is
incremental and O(n) however the input is chunked; it checks every length
against :class:`~refwire.wire.Limits` before reading or allocating for it (§4).
It knows nothing about batches or acks as state (that is
:mod:`refwire.lumberjack.connection`).

It is also the codec's one name to import: the frames as values and the
encoding of the client's events (:mod:`refwire.lumberjack.codec`) and the
inflating of ``C`` payloads (:mod:`refwire.lumberjack.compression`) are
re-exported here.

**Plain path and speed path.**  What is written here is the plain path: one
frame after another, as the spec's sections read.  The speed path of the
decoder (a hot loop over complete ``J`` frames, runs of them decoded in columns
as :class:`JsonRun`), of :func:`scan_acks` and of
:func:`~refwire.lumberjack.codec.encode_events` lives in
:mod:`refwire.lumberjack._fast_frames`, which registers itself in
:data:`SCANNERS`, :data:`ACK_SCANNERS` and
:data:`~refwire.lumberjack.codec.EVENT_ENCODERS` when the package is imported.
Which one runs is decided once per decoder (``fast=``, else
:mod:`refwire.speed`'s ``REFWIRE_REFERENCE`` switch); both give the same frames
and the same errors at the same offsets (tests/test_lumberjack_differential.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

import orjson

from ..errors import LocalProtocolError, ProtocolError
from ..speed import use_fast
from ..wire import U32BE, Limits, ReceiveBuffer
from .codec import (
    _HDR8,
    ACK,
    COMPRESSED,
    D_PAIR_HELD,
    DATA,
    DEFAULT_LIMITS,
    EVENT_ENCODERS,
    JSON,
    MAX_U32,
    PROTOCOL,
    TYPE_NAMES,
    V1,
    V2,
    VERSIONS,
    WINDOW,
    Ack,
    Compressed,
    DataFrame,
    EncodedEvent,
    EncodedWindow,
    Frame,
    JsonFrame,
    JsonRun,
    Window,
    _err,
    _limit,
    _new,
    _set,
    encode_ack,
    encode_data,
    encode_event,
    encode_events,
    encode_window,
    frame_size,
    held_bytes,
    json_frames,
    next_seq,
    window_bytes,
)
from .compression import INFLATE_STEP, _inflate_steps, _inside, inflate

__all__ = [
    "ACK",
    "ACK_SCANNERS",
    "COMPRESSED",
    "DATA",
    "DEFAULT_LIMITS",
    "EVENT_ENCODERS",
    "INFLATE_STEP",
    "JSON",
    "MAX_U32",
    "PROTOCOL",
    "SCANNERS",
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
    "FrameDecoder",
    "JsonFrame",
    "JsonRun",
    "Window",
    "decode_all",
    "encode_ack",
    "encode_data",
    "encode_event",
    "encode_events",
    "encode_window",
    "frame_size",
    "D_PAIR_HELD",
    "held_bytes",
    "inflate",
    "inflate_frames",
    "json_frames",
    "next_seq",
    "read_ack",
    "scan_acks",
    "window_bytes",
]

_F = TypeVar("_F")


def _decoded(cls: type[_F], **fields: Any) -> _F:
    """A frame of fields the decoder has checked, built without the constructor:
    its checks would refuse the version bytes a decoder with ``strict_versions``
    off lets through (a ``'1J'`` or a ``'2D'``, §3.10)."""
    frame: _F = _new(cls)
    for name, value in fields.items():
        _set(frame, name, value)
    return frame


def _json_object(payload: bytes, offset: int) -> Any:
    """``payload`` parsed as one strict RFC 8259 JSON object (§4: UTF-8 only, no
    byte-order mark, no NaN or Infinity -- Jackson's defaults, as Logstash
    parses), or the error at ``offset``.  Integers beyond 64 bits come back as
    floats; ``JsonFrame.payload`` always keeps the exact bytes."""
    try:
        doc = orjson.loads(payload)
    except ValueError as exc:
        raise _err(f"J payload is not valid JSON: {exc}", frame="J", field="json", offset=offset) from None
    if type(doc) is not dict:
        raise _err(f"J payload must be a JSON object, got {type(doc).__name__}", frame="J", field="json", offset=offset)
    return doc


# --------------------------------------------------------------------------- the client's frames (§2.1-§2.4)

#: How a :class:`FrameDecoder` scans its buffer: ``scan(decoder, data, pos, end,
#: base, out, runs)`` appends the complete frames of ``data[pos:end]`` to ``out``
#: (``pos + base`` is the stream offset) and returns ``(new pos, bytes the next
#: frame needs)``.
Scanner = Callable[["FrameDecoder", "bytes | bytearray", int, int, int, list[Any], bool], tuple[int, int]]


class FrameDecoder:
    """Incremental decoder: ``feed()`` bytes, ``frames()`` returns what is complete.

    ``need`` holds how many buffered bytes the next frame requires; until that
    many are present ``frames()`` returns at once without looking at the
    buffer, so a frame trickling in one byte at a time costs O(its size).

    ``validate_json``: parse every ``J`` payload as strict JSON (orjson)
    (keeping the result in ``JsonFrame.data``) and require a JSON object, as
    Logstash does (§4); off, payloads are passed on unparsed.

    ``frame_limit``: the limit that set ``limits.max_frame_size``, named in its
    errors.

    ``fast``: take the speed path (:mod:`refwire.lumberjack._fast_frames`), the
    plain one (``False``), or as the process-wide switch says (``None``,
    :mod:`refwire.speed`); decided once, here.
    """

    __slots__ = ("_buf", "_d_resume", "_need", "_scan", "fast", "frame_limit", "limits", "strict_versions", "validate_json")

    def __init__(
        self,
        limits: Limits = DEFAULT_LIMITS,
        *,
        validate_json: bool = True,
        strict_versions: bool = True,
        fast: bool | None = None,
        frame_limit: str = "max_frame_size",
    ) -> None:
        self._buf = ReceiveBuffer()
        self._need = 2
        self.limits = limits
        #: what bounds a frame, as its errors say: ``limits.max_frame_size``, or
        #: (``frame_limit="max_connection_memory"``, a server machine's) the share
        #: of the connection's memory budget it set ``max_frame_size`` to (§4).
        self.frame_limit = (
            f"the limit max_frame_size={limits.max_frame_size}"
            if frame_limit == "max_frame_size"
            else f"the {limits.max_frame_size} bytes the limit {frame_limit}={limits.max_connection_memory} allows a frame"
        )
        self.validate_json = validate_json
        #: refuse ``J`` with version byte '1' and ``D`` with '2' (go-lumber); off,
        #: the type decides (J is always v2 data, D v1) and the connection checks
        #: it against its batch, as Logstash does (§3.10).
        self.strict_versions = strict_versions
        # Resumable walk over a D frame's pairs: (frame start, walked-to offset, pairs left)
        self._d_resume: tuple[int, int, int] | None = None
        #: True when this decoder takes the speed path.
        self.fast = use_fast(fast)
        self._scan: Scanner = SCANNERS[self.fast]

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

        ``runs`` (the speed path's): consecutive complete ``J`` frames of one
        version byte come as one :class:`JsonRun` (columns, no object per frame)
        instead of :class:`JsonFrame` objects; the server machine decodes so.  The
        plain path gives :class:`JsonFrame` objects either way.
        """
        buf = self._buf
        if len(buf) < self._need:
            return []
        out: list[Any] = []
        data = buf.data
        start = buf.pos
        pos, need = self._scan(self, data, start, len(data), buf.consumed - start, out, runs)
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
            pos, need = self._scan(self, data, start, len(data), buf.consumed - start, out, runs)
        except ProtocolError as exc:
            return out, exc
        buf.advance_to(pos)
        self._need = need
        return out, None

    def _read_frame(self, data: bytes | bytearray, pos: int, end: int, base: int) -> tuple[Frame, int] | int:
        """The frame at ``data[pos:end]`` and where the next one starts, or how
        many bytes from ``pos`` it needs before it can be read.  ``pos + base``
        is its stream offset, where its errors are reported (§4)."""
        if end - pos < 2:
            return 2
        version = data[pos]
        kind = data[pos + 1]
        if version != V1 and version != V2:  # §1: ASCII '1' or '2', whatever the frame
            raise _err(
                f"bad version byte 0x{version:02x} (expected 0x31 '1' or 0x32 '2')",
                frame=None,
                field="version",
                offset=pos + base,
            )
        if kind == WINDOW or kind == ACK:
            return self._read_window_or_ack(data, pos, end, version, kind)
        if kind == JSON:
            return self._read_json(data, pos, end, base, version)
        if kind == DATA:
            return self._scan_data(data, None, pos, end, base, version)
        if kind == COMPRESSED:
            return self._read_compressed(data, pos, end, base, version)
        raise _err(f"unknown frame type 0x{kind:02x}", frame=None, field="type", offset=pos + 1 + base)

    @staticmethod
    def _read_window_or_ack(data: bytes | bytearray, pos: int, end: int, version: int, kind: int) -> tuple[Frame, int] | int:
        """``W count:u32`` (§2.1) or ``A seq:u32`` (§2.5): 6 bytes.  (An ``A``
        from a client is the machine's error, not the decoder's.)"""
        if end - pos < 6:
            return 6
        (value,) = U32BE.unpack_from(data, pos + 2)
        return (Window(value, version) if kind == WINDOW else Ack(value, version)), pos + 6

    def _read_json(self, data: bytes | bytearray, pos: int, end: int, base: int, version: int) -> tuple[Frame, int] | int:
        """``J seq:u32 len:u32 json[len]`` (§2.3): version '2' only (unless
        ``strict_versions`` is off, §3.10), ``len`` at least 1, the frame within
        ``max_frame_size``, and with ``validate_json`` one JSON object (§4)."""
        if end - pos < 10:
            return 10
        seq: int
        length: int
        seq, length = _HDR8.unpack_from(data, pos + 2)
        if version != V2 and self.strict_versions:
            raise _err("J frame with version byte '1' (J exists only in v2)", frame="J", field="version", offset=pos + base)
        if length == 0:
            raise _err("J payload length is 0", frame="J", field="len", offset=pos + 6 + base)
        max_frame = self.limits.max_frame_size
        if length + 10 > max_frame:
            raise _limit(
                f"J frame of {length + 10} bytes exceeds {self.frame_limit}",
                frame="J",
                field="len",
                offset=pos + 6 + base,
            )
        stop = pos + 10 + length
        if stop > end:
            return 10 + length
        payload = bytes(data[pos + 10 : stop])
        doc = _json_object(payload, pos + 10 + base) if self.validate_json else None
        return _decoded(JsonFrame, seq=seq, payload=payload, version=version, data=doc), stop

    def _read_compressed(self, data: bytes | bytearray, pos: int, end: int, base: int, version: int) -> tuple[Frame, int] | int:
        """``C len:u32 zlib[len]`` (§2.4) within ``max_frame_size``; the payload
        is kept as it came (inflating it is the machine's, §3.6)."""
        if end - pos < 6:
            return 6
        length: int = U32BE.unpack_from(data, pos + 2)[0]
        max_frame = self.limits.max_frame_size
        if length + 6 > max_frame:
            raise _limit(
                f"C frame of {length + 6} bytes exceeds {self.frame_limit}",
                frame="C",
                field="len",
                offset=pos + 2 + base,
            )
        stop = pos + 6 + length
        if stop > end:
            return 6 + length
        return Compressed(bytes(data[pos + 6 : stop]), version), stop

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
        if 10 + D_PAIR_HELD * count > max_frame:  # each pair is held as D_PAIR_HELD bytes or more
            raise _limit(
                f"D frame with {count} pairs cannot fit {self.frame_limit} (a pair is held as {D_PAIR_HELD} bytes or more)",
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
                    f"D key of {klen} bytes exceeds {self.frame_limit}",
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
                    f"D value of {vlen} bytes exceeds {self.frame_limit}",
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


def scan_frames(
    dec: FrameDecoder, data: bytes | bytearray, pos: int, end: int, base: int, out: list[Any], runs: bool = False
) -> tuple[int, int]:
    """The plain :data:`Scanner`: one frame after another
    (:meth:`FrameDecoder._read_frame`) until one is incomplete (``runs`` is the
    speed path's; here every ``J`` is a :class:`JsonFrame`)."""
    while True:
        got = dec._read_frame(data, pos, end, base)
        if isinstance(got, int):
            return pos, got
        frame, pos = got
        out.append(frame)


#: The scanners of :class:`FrameDecoder` by ``fast``: the plain :func:`scan_frames`;
#: ``True`` is registered by :mod:`refwire.lumberjack._fast_frames`.
SCANNERS: Final[dict[bool, Scanner]] = {False: scan_frames}


def decode_all(
    data: bytes,
    limits: Limits = DEFAULT_LIMITS,
    *,
    validate_json: bool = True,
    strict_versions: bool = True,
    fast: bool | None = None,
) -> list[Frame]:
    """Decode a byte string that must hold whole frames only (as a ``C`` payload must)."""
    dec = FrameDecoder(limits, validate_json=validate_json, strict_versions=strict_versions, fast=fast)
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


# --------------------------------------------------------------------------- the frames inside a C (§2.4, §3.6)


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
    budget_reason: str | None = None,
    frame_limit: str = "max_frame_size",
    runs: bool = False,
    fast: bool | None = None,
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
    :class:`~refwire.errors.LimitExceeded` names ``max_batch_bytes`` at once
    (or says ``budget_reason``, when another limit set the budget);
    ``frame_limit``: as :class:`FrameDecoder` takes it.
    ``runs`` and ``fast``: as :class:`FrameDecoder` takes them.
    """
    dec = FrameDecoder(limits, validate_json=validate_json, strict_versions=strict_versions, fast=fast, frame_limit=frame_limit)
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
                why = budget_reason or f"the C frame's events, with the batch's before it, exceed the limit max_batch_bytes={limits.max_batch_bytes}"
                raise _limit(
                    f"{why} (a C frame's events are held together, even when they span windows)",
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


# --------------------------------------------------------------------------- the server's frames (§2.5)


def read_ack(buf: bytes | bytearray, pos: int, *, base: int = 0) -> Ack | None:
    """The ``A`` frame at ``buf[pos:]`` (§2.5; the only frame a server sends), or
    ``None`` while it is incomplete.

    The version and type bytes are checked as soon as each is there, not once
    all 6 bytes are in: anything but ``1A`` / ``2A`` raises
    :class:`~refwire.errors.LocalProtocolError` at ``base`` + its position.
    """
    if len(buf) - pos < 1:
        return None
    version = buf[pos]
    if version != V1 and version != V2:
        raise LocalProtocolError(f"bad version byte 0x{version:02x}", protocol=PROTOCOL, field="version", offset=base + pos)
    if len(buf) - pos < 2:
        return None
    kind = buf[pos + 1]
    if kind != ACK:
        raise LocalProtocolError(
            f"unexpected frame type 0x{kind:02x} from the server (only A is allowed)",
            protocol=PROTOCOL,
            field="type",
            offset=base + pos + 1,
        )
    if len(buf) - pos < 6:
        return None
    (seq,) = U32BE.unpack_from(buf, pos + 2)
    return Ack(seq, version)


def scan_acks_plain(buf: bytes | bytearray, base: int = 0) -> Iterator[tuple[int, int, int]]:
    """:func:`scan_acks`' plain path: :func:`read_ack` at each position in turn."""
    pos = 0
    while (ack := read_ack(buf, pos, base=base)) is not None:
        yield ack.version, ack.seq, pos
        pos += 6


#: ``scan(buf, base)`` yielding ``(version, seq, position in buf)`` per ``A`` frame.
AckScanner = Callable[["bytes | bytearray", int], Iterator[tuple[int, int, int]]]

#: :func:`scan_acks` by ``fast``: the plain :func:`scan_acks_plain`; ``True`` is
#: registered by :mod:`refwire.lumberjack._fast_frames`.
ACK_SCANNERS: Final[dict[bool, AckScanner]] = {False: scan_acks_plain}


def scan_acks(buf: bytes | bytearray, *, base: int = 0, fast: bool | None = None) -> Iterator[tuple[int, int, int]]:
    """The ``A`` frames at the start of ``buf`` (what a client reads), one at a
    time as ``(version, seq, position in buf)``; stops at an incomplete frame.

    The version and type bytes are checked as soon as they are there
    (:func:`read_ack`): anything but ``1A`` / ``2A`` raises
    :class:`~refwire.errors.LocalProtocolError` at ``base`` + its position, after
    the good acks before it have been yielded.  ``fast``: as
    :class:`FrameDecoder` takes it.
    """
    return ACK_SCANNERS[use_fast(fast)](buf, base)
