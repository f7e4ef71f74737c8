"""Seastar RPC frame codec (specs/seastar-rpc/README.md, "the spec" below: §2-§6).

Everything is little-endian.

* Negotiation (spec §2): ``"SSTARRPC" len:u32 {feature:u32 flen:u32 data[flen]}*`` --
  :mod:`refwire.seastar_rpc.negotiation` (re-exported here).
* Request (spec §3): ``[timeout_ms:u64] verb:u64 msg_id:i64 len:u32 data[len]`` -- the
  timeout only when TIMEOUT was negotiated; ``len`` counts the data only.
* Response (spec §3): ``msg_id:i64 len:u32 [handler_duration:u32] data[len]`` -- the
  duration only when HANDLER_DURATION was negotiated, and never counted in ``len``.
* Exception payload (spec §3): ``type:u32 len:u32 body[len]`` (USER: the message;
  UNKNOWN_VERB: ``verb:u64``).
* Compressed envelope (spec §4): ``clen:u32 payload[clen]`` decompressing to exactly one of
  the frames above (trailing bytes ignored, short data fatal, empty output a no-op) --
  the compressors are :mod:`refwire.seastar_rpc.compression`'s.
* Stream frame (spec §5): ``len:u32 data[len]``; ``len = 0xffffffff`` is end-of-stream.

:class:`FrameDecoder` is incremental and O(n) however the input is chunked, checks
every length against :class:`~refwire.wire.Limits` before waiting for or allocating
it (spec §6), and raises :class:`~refwire.errors.LocalProtocolError` naming frame,
field and stream offset.  It knows nothing about msg ids or deadlines (that is
:mod:`refwire.seastar_rpc.connection`).  Its plain path, here, decodes one frame at
a time as the sections read; its speed path is :mod:`refwire.seastar_rpc._fast_frames`
(``fast=`` and :mod:`refwire.speed` choose).
"""

from __future__ import annotations

import enum
import struct
from typing import Final, Literal, TypedDict

import attrs

from .._mypyc import mypyc_attr
from ..errors import LimitExceeded, LocalProtocolError, ProtocolError
from ..sansio import closed_inside
from ..speed import use_fast
from ..wire import Limits, Reader, ReceiveBuffer, check_limit
from .compression import PROTOCOL, Compressor
from .negotiation import _HDR12 as _HDR12  # (describe.py reads the header's layout here)
from .negotiation import (
    MAGIC,
    MAX_U32,
    MAX_U64,
    Feature,
    Features,
    Negotiation,
    _check_range,
    _err,
    decode_negotiation_records,
)

__all__ = [
    "DEFAULT_LIMITS",
    "EOS",
    "MAGIC",
    "PROTOCOL",
    "UNMEASURED",
    "ExceptionType",
    "Feature",
    "Features",
    "FrameDecoder",
    "Negotiation",
    "NoOp",
    "OversizedRequest",
    "RemoteException",
    "Request",
    "Response",
    "ResponseRun",
    "StreamEnd",
    "StreamMessage",
    "UnknownException",
    "UnknownVerb",
    "UserError",
    "decode_exception",
    "decode_negotiation_records",
]

#: handler_duration value meaning "not measured" (spec §3).
UNMEASURED: Final = 0xFFFFFFFF
#: stream ``len`` value meaning end-of-stream (spec §3).
EOS: Final = 0xFFFFFFFF

#: Seastar has no frame limit (spec §6); refwire caps frames and
#: decompressed frames at 64 MiB and the negotiation frame (``max_string_size``)
#: at 64 KiB.
DEFAULT_LIMITS: Final = Limits(
    max_frame_size=64 * 1024 * 1024,
    max_decompressed_size=64 * 1024 * 1024,
    max_string_size=64 * 1024,
    max_buffered=64 * 1024 * 1024,
)


class ExceptionType(enum.IntEnum):
    """Exception types on the wire (spec §3); any other is decoded as :class:`UnknownException`."""

    USER = 0
    UNKNOWN_VERB = 1


_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")
_REQ28: Final = struct.Struct("<QQqI")
_REQ20: Final = struct.Struct("<QqI")
_RSP16: Final = struct.Struct("<qII")
_RSP12: Final = struct.Struct("<qI")
_EXC: Final = struct.Struct("<II")

#: the most responses one :meth:`FrameDecoder.next_responses` run holds: a run's
#: columns cost more memory per small response than its bytes on the wire did
MAX_RUN: Final = 256


# --------------------------------------------------------------------------- frames


@attrs.frozen
class Request:
    """A call (spec §3).  ``timeout_ms`` is the remaining time, 0 = none; it is
    on the wire only when TIMEOUT was negotiated (``None`` when it was not)."""

    verb: int
    msg_id: int
    payload: bytes = b""
    timeout_ms: int | None = None

    def encode(self, *, with_timeout: bool) -> bytes:
        n = len(self.payload)
        try:
            if with_timeout:
                return _REQ28.pack(self.timeout_ms or 0, self.verb, self.msg_id, n) + self.payload
            return _REQ20.pack(self.verb, self.msg_id, n) + self.payload
        except struct.error:
            _check_range("timeout_ms", self.timeout_ms or 0, 0, MAX_U64, "request")
            _check_range("verb", self.verb, 0, MAX_U64, "request")
            _check_range("msg_id", self.msg_id, -(2**63), 2**63 - 1, "request")
            _check_range("len", n, 0, MAX_U32, "request")
            raise


@attrs.frozen
class OversizedRequest:
    """A request whose data was skipped unread because it is larger than the
    server admits (spec §3); answered with a USER exception."""

    verb: int
    msg_id: int
    length: int
    timeout_ms: int | None = None


@attrs.frozen
class Response:
    """A reply (spec §3): ``msg_id < 0`` carries an exception for ``-msg_id``.
    ``handler_duration`` (µs, :data:`UNMEASURED` = not measured) is on the wire only
    when HANDLER_DURATION was negotiated."""

    msg_id: int
    payload: bytes = b""
    handler_duration: int | None = None

    @property
    def is_exception(self) -> bool:
        return self.msg_id < 0

    def encode(self, *, with_duration: bool) -> bytes:
        n = len(self.payload)
        try:
            if with_duration:
                d = UNMEASURED if self.handler_duration is None else self.handler_duration
                return _RSP16.pack(self.msg_id, n, d) + self.payload
            return _RSP12.pack(self.msg_id, n) + self.payload
        except struct.error:
            _check_range("msg_id", self.msg_id, -(2**63), 2**63 - 1, "response")
            _check_range("handler_duration", self.handler_duration or 0, 0, MAX_U32, "response")
            _check_range("len", n, 0, MAX_U32, "response")
            raise


@attrs.frozen
class StreamMessage:
    """One message on a stream connection (spec §5)."""

    payload: bytes

    def encode(self) -> bytes:
        if len(self.payload) >= EOS:
            raise _err("a stream message must be shorter than 0xffffffff bytes", "stream", "len", None)
        return _U32.pack(len(self.payload)) + self.payload


@attrs.frozen
class StreamEnd:
    """End of stream in one direction: ``len = 0xffffffff``."""

    def encode(self) -> bytes:
        return _U32.pack(EOS)


@attrs.frozen
class NoOp:
    """A compressed frame that decompressed to nothing (spec §4); skipped.  Sent
    (``send(NoOp())``) it is the universal ``00 00 00 00``."""

    clen: int = 0


Frame = Negotiation | Request | OversizedRequest | Response | StreamMessage | StreamEnd | NoOp


# --------------------------------------------------------------------------- exceptions


@attrs.frozen
class UserError:
    """USER (0): the handler failed; ``message`` is opaque text (spec §3)."""

    message: bytes

    def encode(self) -> bytes:
        return _EXC.pack(ExceptionType.USER, len(self.message)) + self.message


@attrs.frozen
class UnknownVerb:
    """UNKNOWN_VERB (1): no handler for ``verb``; ``len`` is always 8."""

    verb: int

    def encode(self) -> bytes:
        return _EXC.pack(ExceptionType.UNKNOWN_VERB, 8) + _U64.pack(self.verb)


@attrs.frozen
class UnknownException:
    """Any other type: the Seastar client raises ``unknown_exception_error``."""

    type: int
    body: bytes

    def encode(self) -> bytes:
        return _EXC.pack(self.type, len(self.body)) + self.body


RemoteException = UserError | UnknownVerb | UnknownException


def decode_exception(payload: bytes, *, base: int = 0) -> RemoteException:
    """Decode the data of a negative-id response (``base``: stream offset of ``payload[0]``)."""
    r = Reader(payload, base=base, protocol=PROTOCOL, frame="exception")
    etype = r.u32le("type")
    n = r.u32le("len")
    if n > r.remaining:
        raise r.error(f"exception body claims {n} bytes, the response has {r.remaining}", field="len", offset=r.offset - 4)
    if etype == ExceptionType.USER:
        return UserError(r.raw(n, "message"))
    if etype == ExceptionType.UNKNOWN_VERB:
        if n != 8:
            raise r.error(f"UNKNOWN_VERB body must be 8 bytes, got {n}", field="len", offset=r.offset - 4)
        return UnknownVerb(r.u64le("verb"))
    return UnknownException(etype, r.raw(n, "body"))


# --------------------------------------------------------------------------- decoder


Kind = Literal["request", "response", "stream"]


class ResponseRun:
    """Consecutive complete regular responses with ``msg_id >= 0`` (spec §3),
    decoded in columns instead of one :class:`Response` each: what
    :meth:`FrameDecoder.next_responses` returns on the speed path, the client
    connection's hot path.  ``durations`` is ``None`` when HANDLER_DURATION was not
    negotiated (every response's ``handler_duration`` is then ``None``)."""

    __slots__ = ("durations", "msg_ids", "payloads")

    def __init__(self, msg_ids: list[int], payloads: list[bytes], durations: list[int] | None) -> None:
        if len(payloads) != len(msg_ids) or (durations is not None and len(durations) != len(msg_ids)):
            raise ValueError("a ResponseRun's columns must have one entry per response")
        self.msg_ids = msg_ids
        self.payloads = payloads
        self.durations = durations

    def __len__(self) -> int:
        return len(self.msg_ids)

    def __repr__(self) -> str:
        return f"ResponseRun({len(self.msg_ids)} responses, msg_ids {self.msg_ids[:3]}{'...' if len(self.msg_ids) > 3 else ''})"

    def frames(self) -> list[Response]:
        """The responses as :class:`Response` objects."""
        durations = self.durations
        if durations is None:
            return [Response(m, p, None) for m, p in zip(self.msg_ids, self.payloads, strict=True)]
        return [Response(m, p, d) for m, p, d in zip(self.msg_ids, self.payloads, durations, strict=True)]


# The speed path's decoder is a subclass (compiled or not, in the optional mypyc build).
@mypyc_attr(allow_interpreted_subclasses=True)
class FrameDecoder:
    """Incremental decoder of one direction of one connection.

    It starts by expecting the negotiation frame (``negotiation=True``, spec §2);
    after returning it, it returns nothing until :meth:`configure` says which frame
    layout follows (``kind``, timeout and duration fields, the compressor: spec §3,
    §4, §5).  ``discard_over``: a request whose ``len`` is larger is not buffered;
    its data is skipped as it arrives and an :class:`OversizedRequest` is returned
    once the last of it has been read, so the answer never overtakes the body (the
    real server reads it all before it answers; answering early made the real
    client abort, §3).  A request over the frame limit is an error first (§6).

    ``fast`` chooses the path once, at construction (:func:`refwire.speed.use_fast`):
    ``FrameDecoder(...)`` is this class, the plain path, or -- ``fast=True``, or
    ``None`` unless ``REFWIRE_REFERENCE`` is set -- the speed path's subclass,
    :class:`refwire.seastar_rpc._fast_frames.FastFrameDecoder` (regular frames
    built without the plain path's calls, single-block LZ4 envelopes opened
    inline, responses decoded in runs).  Both decode every stream to the same
    frames and the same errors at the same offsets; :attr:`fast` says which this
    is.  A subclass of this class takes the plain path.
    """

    def __new__(
        cls, kind: Kind | None = None, *, limits: Limits = DEFAULT_LIMITS, negotiation: bool = True, fast: bool | None = None
    ) -> FrameDecoder:
        # (no ``kind``: ``copy`` and ``pickle`` recreating a decoder of ``cls``)
        if cls is FrameDecoder and kind is not None and use_fast(fast):
            speed = _SPEED["decoder"]
            return speed.__new__(speed, kind, limits=limits, negotiation=negotiation, fast=fast)
        return super().__new__(cls)

    def __init__(
        self, kind: Kind, *, limits: Limits = DEFAULT_LIMITS, negotiation: bool = True, fast: bool | None = None
    ) -> None:
        self.kind: Kind = kind
        self.limits = limits
        self.timeout = False
        self.duration = False
        self.compressor: Compressor | None = None
        self.discard_over: int | None = None
        #: the connection's memory budget when it, not the limits, caps this decoder's
        #: frames (spec §6): ``(max_connection_memory, the cap it leaves a frame)``;
        #: a refusal at that cap then names ``max_connection_memory``
        self.budget: tuple[int, int] | None = None
        self._buf = ReceiveBuffer()
        self._phase: Literal["negotiation", "paused", "frames"] = "negotiation" if negotiation else "frames"
        self._skip = 0
        #: an oversized request whose body is still being skipped (returned once it has been)
        self._held: OversizedRequest | None = None
        self._need = 12 if negotiation else 0
        #: whether this decoder takes the speed path (the plain path's is False)
        self.fast = False

    def configure(
        self,
        *,
        kind: Kind | None = None,
        timeout: bool = False,
        duration: bool = False,
        compressor: Compressor | None = None,
        discard_over: int | None = None,
    ) -> None:
        """The layout the negotiation agreed on (spec §2): requests with or without
        ``timeout_ms``, responses with or without ``handler_duration`` (§3), stream
        frames (§5), each frame in an envelope of ``compressor`` (§4)."""
        if kind is not None:
            self.kind = kind
        self.timeout = timeout
        self.duration = duration
        self.compressor = compressor
        self.discard_over = discard_over
        self._phase = "frames"
        self._need = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._skip:
            n = min(self._skip, len(data))
            self._skip -= n
            self._buf.consumed += n
            data = data[n:]
        self._buf.feed(data)

    @property
    def offset(self) -> int:
        """Stream offset of the next unconsumed byte."""
        return self._buf.consumed

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held (or still to skip)."""
        return len(self._buf) + self._skip

    @property
    def in_frame(self) -> bool:
        return self._skip > 0 or len(self._buf) > 0

    def frame_name(self) -> str:
        if self._phase == "negotiation":
            return "negotiation"
        return "compressed" if self.compressor is not None else self.kind

    def next_frame(self) -> Frame | None:
        """The next complete frame, or ``None`` when more bytes are needed."""
        return self._next_frame()

    def next_responses(self, max_frames: int = MAX_RUN) -> ResponseRun | None:
        """The complete regular responses with ``msg_id >= 0`` at the head of the
        buffer, up to ``max_frames``, in columns (spec §3), or ``None`` when the
        next frame is not one -- incomplete, over a limit, an exception (``msg_id <
        0``), a no-op, an envelope that is not one LZ4 block -- or is all that is
        buffered: :meth:`next_frame` then decodes it, with its errors at its
        offsets.  The plain path makes no runs (always ``None``: every frame is
        :meth:`next_frame`'s); the speed path does.

        A run stops before the first frame that is not such a response, so
        calling this and then :meth:`next_frame` in turn decodes the stream
        exactly as :meth:`next_frame` alone does, frame for frame.
        """
        if max_frames < 1:
            raise ValueError(f"a run holds at least 1 response: max_frames={max_frames}")
        return None

    def _next_frame(self) -> Frame | None:
        """:meth:`next_frame` on the plain path (and the speed path's general path):
        a held oversized request once its body is skipped, the negotiation frame
        (§2), an envelope (§4), or a request, response or stream frame (§3, §5).
        A frame over the cap the connection's memory budget leaves it is refused
        naming ``max_connection_memory`` (§6)."""
        if self.budget is None:
            return self._decode()
        try:
            return self._decode()
        except LimitExceeded as exc:
            budget, cap = self.budget
            for name in ("max_frame_size", "max_decompressed_size"):
                exc.reason = exc.reason.replace(
                    f"the limit {name}={cap}", f"the {cap} bytes the limit max_connection_memory={budget} allows a frame"
                )
            exc.args = (exc._render(),)
            raise

    def _decode(self) -> Frame | None:
        if self._skip or self._phase == "paused":
            return None
        if self._held is not None:  # its body has been skipped (§3): answered now
            held, self._held = self._held, None
            return held
        buf = self._buf
        if len(buf) < self._need:
            return None
        if self._phase == "negotiation":
            return self._negotiation()
        if self.compressor is not None:
            return self._compressed()
        data = buf.data
        pos = buf.pos
        got = _parse_frame(self, data, pos, len(data), buf.consumed, inner=False)
        if isinstance(got, int):
            self._need = got
            return None
        frame, end = got
        if isinstance(frame, OversizedRequest):
            have = len(data) - end
            self._skip = frame.length - min(have, frame.length)
            end += min(have, frame.length)
            if self._skip:
                buf.advance_to(end)
                self._need = 0
                self._held = frame  # answered once its whole body has been read and discarded (§3)
                return None
        buf.advance_to(end)
        self._need = 0
        return frame

    def _negotiation(self) -> Negotiation | None:
        """The negotiation frame (spec §2): magic, ``len`` within ``max_string_size``
        (§6), then the records."""
        buf = self._buf
        base = buf.consumed
        magic, n = _HDR12.unpack_from(buf.data, buf.pos)
        if magic != MAGIC:
            raise _err(f"wrong protocol magic: {magic.hex()}", "negotiation", "magic", base)
        check_limit(
            n,
            self.limits.max_string_size,
            name="max_string_size",
            field="len",
            frame="negotiation",
            offset=base + 8,
            protocol=PROTOCOL,
        )
        if len(buf) < 12 + n:
            self._need = 12 + n
            return None
        body = buf.take(12 + n)[12:]
        neg = decode_negotiation_records(body, base=base + 12)
        self._phase = "paused"
        self._need = 0
        return neg

    def _compressed(self) -> Frame | None:
        """One envelope (spec §4): ``clen:u32`` within ``max_frame_size`` (§6), the
        payload decompressed by the compressor, the frame inside it opened."""
        buf = self._buf
        base = buf.consumed
        data = buf.data
        pos = buf.pos
        have = len(data) - pos
        if have < 4:
            self._need = 4
            return None
        (clen,) = _U32.unpack_from(data, pos)
        if clen > self.limits.max_frame_size:
            check_limit(
                clen,
                self.limits.max_frame_size,
                name="max_frame_size",
                field="clen",
                frame="compressed",
                offset=base,
                protocol=PROTOCOL,
            )
        if have < 4 + clen:
            self._need = 4 + clen
            return None
        payload = _slice(data, pos + 4, pos + 4 + clen)  # one copy, not a take() and a slice of it
        buf.advance_to(pos + 4 + clen)
        self._need = 0
        assert self.compressor is not None
        return self._open(self.compressor.decompress(payload, limits=self.limits, offset=base + 4), clen, base)

    def _open(self, inner: bytes, clen: int, base: int) -> Frame:
        """The frame in the decompressed ``inner`` of an envelope of ``clen`` payload
        bytes at stream offset ``base`` (spec §4): a no-op if empty, else exactly one
        frame (trailing bytes ignored); errors inside it are reported at ``base``."""
        if not inner:
            return NoOp(clen)
        try:
            got = _parse_frame(self, inner, 0, len(inner), 0, inner=True)
        except ProtocolError as exc:
            exc.reason = f"{exc.reason} (at offset {exc.offset} of the decompressed frame)"
            exc.frame = f"compressed>{exc.frame}"
            exc.offset = base
            exc.args = (exc._render(),)
            raise
        if isinstance(got, int):
            raise _err(
                f"the decompressed frame is {len(inner)} bytes, shorter than the {got} its header needs",
                f"compressed>{self.kind}",
                "len",
                base,
            )
        return got[0]

    def eof_error(self) -> LocalProtocolError | None:
        """The error to report if the stream ends now (inside a frame)."""
        if not self.in_frame:
            return None
        if self._phase == "negotiation":  # Seastar's own text for this one
            return _err("unexpected eof during negotiation frame", self.frame_name(), "(eof)", self.offset)
        return closed_inside(
            "a frame",
            protocol=PROTOCOL,
            frame=self.frame_name(),
            offset=self.offset,
            detail=f"{self.buffered} bytes of it outstanding",
        )


def _slice(data: bytes | bytearray, a: int, b: int) -> bytes:
    return data[a:b] if type(data) is bytes else bytes(data[a:b])


def _parse_frame(
    dec: FrameDecoder, data: bytes | bytearray, pos: int, end: int, base: int, *, inner: bool
) -> tuple[Frame, int] | int:
    """Parse one uncompressed frame at ``data[pos:end]``: ``(frame, new_pos)``, or the
    number of bytes (from ``pos``) needed before it can be parsed."""
    have = end - pos
    kind = dec.kind
    limit = dec.limits.max_frame_size
    if kind == "request":
        if dec.timeout:
            if have < 28:
                return 28
            timeout, verb, msg_id, n = _REQ28.unpack_from(data, pos)
            hs = 28
        else:
            if have < 20:
                return 20
            verb, msg_id, n = _REQ20.unpack_from(data, pos)
            timeout, hs = None, 20
        n = int(n)
        if n > limit:  # over the frame limit: an error, before the memory admission (§6)
            check_limit(n, limit, name="max_frame_size", field="len", frame="request", offset=base + hs - 4, protocol=PROTOCOL)
        if dec.discard_over is not None and n > dec.discard_over:
            # The data is skipped (not buffered) when not inside a decompressed frame.
            if inner and have < hs + n:
                return hs + n
            return OversizedRequest(verb, msg_id, n, timeout), pos + hs
        if have < hs + n:
            return hs + n
        return Request(verb, msg_id, _slice(data, pos + hs, pos + hs + n), timeout), pos + hs + n
    if kind == "response":
        if dec.duration:
            if have < 16:
                return 16
            msg_id, n, duration = _RSP16.unpack_from(data, pos)
            hs = 16
        else:
            if have < 12:
                return 12
            msg_id, n = _RSP12.unpack_from(data, pos)
            duration, hs = None, 12
        n = int(n)
        if n > limit:
            check_limit(n, limit, name="max_frame_size", field="len", frame="response", offset=base + 8, protocol=PROTOCOL)
        if have < hs + n:
            return hs + n
        return Response(msg_id, _slice(data, pos + hs, pos + hs + n), duration), pos + hs + n
    if have < 4:
        return 4
    n = int(_U32.unpack_from(data, pos)[0])
    if n == EOS:
        return StreamEnd(), pos + 4
    if n > limit:
        check_limit(n, limit, name="max_frame_size", field="len", frame="stream", offset=base, protocol=PROTOCOL)
    if have < 4 + n:
        return 4 + n
    return StreamMessage(_slice(data, pos + 4, pos + 4 + n)), pos + 4 + n


# --------------------------------------------------------------------------- the speed path's hook


class _SpeedPath(TypedDict, total=False):
    """The speed path (:mod:`refwire.seastar_rpc._fast_frames`)."""

    decoder: type[FrameDecoder]


#: Filled by :mod:`refwire.seastar_rpc._fast_frames` when it is imported (the
#: package's ``__init__`` imports it, so before any use); read only when a decoder
#: that takes the speed path is made.  This module never imports the speed path itself.
_SPEED: Final[_SpeedPath] = {}
