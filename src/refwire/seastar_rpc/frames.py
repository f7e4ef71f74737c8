"""Seastar RPC frame codec (specs/seastar-rpc/README.md, "the spec" below: §2-§5).

Everything is little-endian.

* Negotiation (spec §2): ``"SSTARRPC" len:u32 {feature:u32 flen:u32 data[flen]}*``.
* Request (spec §3): ``[timeout_ms:u64] verb:u64 msg_id:i64 len:u32 data[len]`` -- the
  timeout only when TIMEOUT was negotiated; ``len`` counts the data only.
* Response (spec §3): ``msg_id:i64 len:u32 [handler_duration:u32] data[len]`` -- the
  duration only when HANDLER_DURATION was negotiated, and never counted in ``len``.
* Stream frame (spec §3): ``len:u32 data[len]``; ``len = 0xffffffff`` is end-of-stream.
* Compressed envelope (spec §4): ``clen:u32 payload[clen]`` decompressing to exactly one of
  the frames above (trailing bytes ignored, short data fatal, empty output a no-op).
* Exception payload (spec §3): ``type:u32 len:u32 body[len]`` (USER: the message;
  UNKNOWN_VERB: ``verb:u64``).

:class:`FrameDecoder` is incremental and O(n) however the input is chunked, checks
every length against :class:`~refwire.wire.Limits` before waiting for or allocating
it, and raises :class:`~refwire.errors.LocalProtocolError` naming frame, field and
stream offset.  It knows nothing about msg ids or deadlines (that is
:mod:`refwire.seastar_rpc.connection`).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from typing import Final, Literal, cast

import attrs
import lz4.block  # type: ignore[import-untyped]

from ..errors import LocalProtocolError, ProtocolError
from ..sansio import closed_inside
from ..wire import Limits, Reader, ReceiveBuffer, check_limit
from .compression import PROTOCOL, Compressor, LZ4Compressor, LZ4FragmentedCompressor

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
]

MAGIC: Final = b"SSTARRPC"
#: handler_duration value meaning "not measured" (spec §3).
UNMEASURED: Final = 0xFFFFFFFF
#: stream ``len`` value meaning end-of-stream (spec §3).
EOS: Final = 0xFFFFFFFF
MAX_U32: Final = 0xFFFFFFFF
MAX_U64: Final = 0xFFFFFFFFFFFFFFFF

#: Seastar has no frame limit (spec §6); refwire caps frames and
#: decompressed frames at 64 MiB and the negotiation frame (``max_string_size``)
#: at 64 KiB.
DEFAULT_LIMITS: Final = Limits(
    max_frame_size=64 * 1024 * 1024,
    max_decompressed_size=64 * 1024 * 1024,
    max_string_size=64 * 1024,
    max_buffered=64 * 1024 * 1024,
)


class Feature(enum.IntEnum):
    """Negotiation feature numbers (spec §2)."""

    COMPRESS = 0
    TIMEOUT = 1
    CONNECTION_ID = 2
    STREAM_PARENT = 3
    ISOLATION = 4
    HANDLER_DURATION = 5


class ExceptionType(enum.IntEnum):
    """Exception types on the wire (spec §3); any other is decoded as :class:`UnknownException`."""

    USER = 0
    UNKNOWN_VERB = 1


_U32: Final = struct.Struct("<I")
_U32X2: Final = struct.Struct("<II")
_U64: Final = struct.Struct("<Q")
_HDR12: Final = struct.Struct("<8sI")
_REC: Final = struct.Struct("<II")
_REQ28: Final = struct.Struct("<QQqI")
_REQ20: Final = struct.Struct("<QqI")
_RSP16: Final = struct.Struct("<qII")
_RSP12: Final = struct.Struct("<qI")
_EXC: Final = struct.Struct("<II")


# LZ4_FRAGMENTED's last-chunk flag and LZ4's maximum expansion (as in compression.py, spec §4, §6).
_LAST: Final = 0x80000000
_MAX_RATIO: Final = 255
#: the most responses one :meth:`FrameDecoder.next_responses` run holds: a run's
#: columns cost more memory per small response than its bytes on the wire did
MAX_RUN: Final = 256


def _err(reason: str, frame: str, field: str, offset: int | None) -> LocalProtocolError:
    return LocalProtocolError(reason, protocol=PROTOCOL, frame=frame, field=field, offset=offset)


def _check_range(name: str, value: int, lo: int, hi: int, frame: str) -> None:
    if not (isinstance(value, int) and lo <= value <= hi):
        raise _err(f"{name} {value!r} is out of range {lo}..{hi}", frame, name, None)


# --------------------------------------------------------------------------- negotiation


@attrs.frozen
class Negotiation:
    """The raw negotiation frame: feature records in wire order (duplicates kept).

    Seastar builds the list from a ``std::map``, so it always sends the records
    sorted by feature number (:meth:`from_features`); receivers keep the first
    record of a repeated number and ignore the rest (spec §2).
    """

    records: tuple[tuple[int, bytes], ...] = ()

    @classmethod
    def from_features(cls, features: Mapping[int, bytes]) -> Negotiation:
        return cls(tuple(sorted((int(k), bytes(v)) for k, v in features.items())))

    def features(self) -> dict[int, bytes]:
        """Feature number -> data, the first record of each number winning."""
        out: dict[int, bytes] = {}
        for number, data in self.records:
            out.setdefault(number, data)
        return out

    def encode(self) -> bytes:
        parts = []
        for number, data in self.records:
            _check_range("feature_number", number, 0, MAX_U32, "negotiation")
            parts.append(_REC.pack(number, len(data)))
            parts.append(data)
        body = b"".join(parts)
        return _HDR12.pack(MAGIC, len(body)) + body


def decode_negotiation_records(body: bytes, *, base: int = 12) -> Negotiation:
    """Parse the records of a negotiation frame whose 12-byte header is already read.

    ``base`` is the stream offset of ``body[0]``.  Errors are Seastar's (spec §2):
    fewer than 8 bytes for a record header, or a ``flen`` past the end.
    """
    records = []
    pos = 0
    n = len(body)
    while pos < n:
        if n - pos < 8:
            raise _err(f"bad feature data format in negotiation frame: {n - pos} bytes left for an 8-byte record header",
                       "negotiation", "feature_number", base + pos)
        number, flen = _REC.unpack_from(body, pos)
        if flen > n - pos - 8:
            raise _err(f"buffer underflow in feature data in negotiation frame: feature {number} claims {flen} bytes, "
                       f"{n - pos - 8} left", "negotiation", "flen", base + pos + 4)
        records.append((number, bytes(body[pos + 8 : pos + 8 + flen])))
        pos += 8 + flen
    return Negotiation(tuple(records))


@attrs.frozen(kw_only=True)
class Features:
    """What one side's negotiation frame says, per feature (spec §2).

    Client -> server: ``compress`` is the offered list (``"LZ4,LZ4_FRAGMENTED"``),
    ``stream_parent`` marks a stream connection.  Server -> client: ``compress`` is
    the one chosen name, ``connection_id`` the id of this connection.  ``timeout``,
    ``handler_duration`` and ``isolation`` are present/echoed in both directions.
    ``unknown`` keeps feature numbers no-one knows (ignored, never echoed).
    """

    compress: str | None = None
    timeout: bool = False
    connection_id: int | None = None
    stream_parent: int | None = None
    isolation: bytes | None = None
    handler_duration: bool = False
    unknown: tuple[tuple[int, bytes], ...] = ()

    def compress_names(self) -> tuple[str, ...]:
        """The comma-separated compressor names (client order), empty if none."""
        return tuple(self.compress.split(",")) if self.compress is not None else ()

    def to_negotiation(self) -> Negotiation:
        f: dict[int, bytes] = {}
        if self.compress is not None:
            f[Feature.COMPRESS] = self.compress.encode("latin-1")
        if self.timeout:
            f[Feature.TIMEOUT] = b""
        if self.connection_id is not None:
            _check_range("connection_id", self.connection_id, 0, MAX_U64, "negotiation")
            f[Feature.CONNECTION_ID] = _U64.pack(self.connection_id)
        if self.stream_parent is not None:
            _check_range("stream_parent", self.stream_parent, 0, MAX_U64, "negotiation")
            f[Feature.STREAM_PARENT] = _U64.pack(self.stream_parent)
        if self.isolation is not None:
            f[Feature.ISOLATION] = bytes(self.isolation)
        if self.handler_duration:
            f[Feature.HANDLER_DURATION] = b""
        for number, data in self.unknown:
            f.setdefault(number, data)
        return Negotiation.from_features(f)

    def encode(self) -> bytes:
        return self.to_negotiation().encode()

    @classmethod
    def from_negotiation(cls, neg: Negotiation, *, base: int = 12) -> Features:
        """Interpret ``neg`` (first record wins).  A CONNECTION_ID or STREAM_PARENT
        whose data is not exactly 8 bytes is refused (Seastar reads 8 bytes
        unchecked; spec §6)."""
        seen: dict[int, bytes] = {}
        offsets: dict[int, int] = {}
        pos = base
        for number, data in neg.records:
            if number not in seen:
                seen[number] = data
                offsets[number] = pos
            pos += 8 + len(data)
        compress = seen.get(Feature.COMPRESS)
        return cls(
            compress=None if compress is None else compress.decode("latin-1"),
            timeout=Feature.TIMEOUT in seen,
            connection_id=_feature_u64(seen, offsets, Feature.CONNECTION_ID),
            stream_parent=_feature_u64(seen, offsets, Feature.STREAM_PARENT),
            isolation=seen.get(Feature.ISOLATION),
            handler_duration=Feature.HANDLER_DURATION in seen,
            unknown=tuple((k, v) for k, v in seen.items() if k not in Feature._value2member_map_),
        )


def _feature_u64(seen: dict[int, bytes], offsets: dict[int, int], feature: Feature) -> int | None:
    """The u64 of a CONNECTION_ID or STREAM_PARENT record, if present (a module
    function, not a closure: mypyc cannot compile a closure in an attrs class's method)."""
    data = seen.get(feature)
    if data is None:
        return None
    if len(data) != 8:
        raise _err(f"{feature.name} must carry 8 bytes, got {len(data)}", "negotiation", feature.name.lower(),
                   offsets[feature] + 4)
    return int(_U64.unpack(data)[0])


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

# Trusted construction of the frames the decoder's hot path builds: every field
# filled through its slot (the classes have no validators), half the cost of
# the keyword __init__.
_new = object.__new__
_SET_REQ_VERB, _SET_REQ_ID, _SET_REQ_PAYLOAD, _SET_REQ_TIMEOUT = (
    Request.__dict__[a.name].__set__ for a in attrs.fields(Request)
)
_SET_RSP_ID, _SET_RSP_PAYLOAD, _SET_RSP_DURATION = (Response.__dict__[a.name].__set__ for a in attrs.fields(Response))
assert [a.name for a in attrs.fields(Request)] == ["verb", "msg_id", "payload", "timeout_ms"]
assert [a.name for a in attrs.fields(Response)] == ["msg_id", "payload", "handler_duration"]


class ResponseRun:
    """Consecutive complete regular responses with ``msg_id >= 0`` (spec §3),
    decoded in columns instead of one :class:`Response` each: what
    :meth:`FrameDecoder.next_responses` returns, the client connection's hot
    path.  ``durations`` is ``None`` when HANDLER_DURATION was not negotiated
    (every response's ``handler_duration`` is then ``None``)."""

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


class FrameDecoder:
    """Incremental decoder of one direction of one connection.

    It starts by expecting the negotiation frame (``negotiation=True``); after
    returning it, it returns nothing until :meth:`configure` says which frame
    layout follows (``kind``, timeout and duration fields, the compressor).
    ``discard_over``: a request whose ``len`` is larger is not buffered; its data
    is skipped as it arrives and an :class:`OversizedRequest` is returned once
    the last of it has been read, so the answer never overtakes the body (the
    real server reads it all before it answers; answering early made the real
    client abort, §3).  A request over the frame limit is an error first.
    """

    def __init__(self, kind: Kind, *, limits: Limits = DEFAULT_LIMITS, negotiation: bool = True) -> None:
        self.kind: Kind = kind
        self.limits = limits
        self.timeout = False
        self.duration = False
        self.compressor: Compressor | None = None
        self.discard_over: int | None = None
        self._buf = ReceiveBuffer()
        self._phase: Literal["negotiation", "paused", "frames"] = "negotiation" if negotiation else "frames"
        self._skip = 0
        #: an oversized request whose body is still being skipped (returned once it has been)
        self._held: OversizedRequest | None = None
        self._need = 12 if negotiation else 0
        #: the compressor whose single-block envelopes :meth:`next_frame` opens inline
        #: (exactly an ``LZ4Compressor`` or ``LZ4FragmentedCompressor`` given to
        #: :meth:`configure`), and the flag its first payload word must carry
        self._fast_compressor: Compressor | None = None
        self._fast_flag = 0

    def configure(
        self,
        *,
        kind: Kind | None = None,
        timeout: bool = False,
        duration: bool = False,
        compressor: Compressor | None = None,
        discard_over: int | None = None,
    ) -> None:
        if kind is not None:
            self.kind = kind
        self.timeout = timeout
        self.duration = duration
        self.compressor = compressor
        self.discard_over = discard_over
        self._phase = "frames"
        self._need = 0
        self._fast_compressor = None
        self._fast_flag = 0
        if compressor is not None and self._held is None:
            # (an oversized request still held -- being skipped, or skipped and not yet
            # returned -- is the general path's to finish)
            if type(compressor) is LZ4Compressor:
                self._fast_compressor = compressor
            elif type(compressor) is LZ4FragmentedCompressor:
                self._fast_compressor = compressor
                self._fast_flag = _LAST

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
        comp = self.compressor
        if comp is not None:
            if comp is not self._fast_compressor:
                return self._next_frame()
            # The compressed hot path (spec §4): a complete envelope that
            # is one LZ4 block -- ``LZ4``'s ``uncompressed_size:u32 + block``, or
            # ``LZ4_FRAGMENTED``'s single last chunk ``0x80000000|U:u32 + block`` -- within
            # every limit (checked before decompressing, as the general path does), that
            # decodes to exactly the declared size, holding a regular request or response
            # (spec §3), is opened and parsed here with the general path's checks and
            # result.  Anything else -- incomplete, over a limit, a no-op, several chunks,
            # a bad block, a stream frame, an oversized or short inner frame -- goes to the
            # general path (:meth:`_next_frame`, or :meth:`_open` once decompressed),
            # which raises the same errors at the same offsets.
            buf = self._buf
            data = buf.data
            pos = buf.pos
            end = len(data)
            if end - pos < 8:
                return self._next_frame()
            clen, word = _U32X2.unpack_from(data, pos)
            stop = pos + 4 + clen
            flag = self._fast_flag
            size = word ^ flag
            limits = self.limits
            # (the ratio check also refuses a payload under 4 bytes, a no-op: 255 * (clen - 4) + 16 < 1)
            if not (
                clen <= limits.max_frame_size
                and stop <= end
                and word & _LAST == flag
                and 0 < size <= limits.max_decompressed_size
                and size <= _MAX_RATIO * (clen - 4) + 16
            ):
                return self._next_frame()
            try:
                # positional (source, uncompressed_size): the keyword form costs more than a small block
                inner: bytes = lz4.block.decompress(data[pos + 8 : stop], size)
            except lz4.block.LZ4BlockError:
                return self._next_frame()  # the general path raises it with its field and offset
            if len(inner) != size:
                return self._next_frame()
            kind = self.kind
            limit = limits.max_frame_size
            if kind == "response":
                if self.duration:
                    if size >= 16:
                        msg_id, n, duration = _RSP16.unpack_from(inner, 0)
                        if n <= limit and 16 + n <= size:
                            rsp = _new(Response)
                            _SET_RSP_ID(rsp, msg_id)
                            _SET_RSP_PAYLOAD(rsp, inner[16 : 16 + n])
                            _SET_RSP_DURATION(rsp, duration)
                            buf.advance_to(stop)
                            self._need = 0
                            return rsp
                elif size >= 12:
                    msg_id, n = _RSP12.unpack_from(inner, 0)
                    if n <= limit and 12 + n <= size:
                        rsp = _new(Response)
                        _SET_RSP_ID(rsp, msg_id)
                        _SET_RSP_PAYLOAD(rsp, inner[12 : 12 + n])
                        _SET_RSP_DURATION(rsp, None)
                        buf.advance_to(stop)
                        self._need = 0
                        return rsp
            elif kind == "request":
                timeout: int | None = None
                hs = 0
                if self.timeout:
                    if size >= 28:
                        timeout, verb, msg_id, n = _REQ28.unpack_from(inner, 0)
                        hs = 28
                elif size >= 20:
                    verb, msg_id, n = _REQ20.unpack_from(inner, 0)
                    hs = 20
                discard_over = self.discard_over
                if hs and n <= limit and (discard_over is None or n <= discard_over) and hs + n <= size:
                    req = _new(Request)
                    _SET_REQ_VERB(req, verb)
                    _SET_REQ_ID(req, msg_id)
                    _SET_REQ_PAYLOAD(req, inner[hs : hs + n])
                    _SET_REQ_TIMEOUT(req, timeout)
                    buf.advance_to(stop)
                    self._need = 0
                    return req
            base = buf.consumed
            buf.advance_to(stop)
            self._need = 0
            return self._open(inner, clen, base)
        if self._phase == "frames" and not self._skip and self._held is None:
            # The hot path: a complete, regular uncompressed request or response,
            # built without the general path's calls (same checks, same result);
            # anything else (incomplete, over a limit, a stream) takes the general path.
            buf = self._buf
            data = buf.data
            pos = buf.pos
            have = len(data) - pos
            kind = self.kind
            if kind == "response":
                if self.duration:
                    if have >= 16:
                        msg_id, n, duration = _RSP16.unpack_from(data, pos)
                        stop = pos + 16 + n
                        if n <= self.limits.max_frame_size and stop <= len(data):
                            payload = data[pos + 16 : stop]
                            rsp = _new(Response)
                            _SET_RSP_ID(rsp, msg_id)
                            _SET_RSP_PAYLOAD(rsp, payload if type(payload) is bytes else bytes(payload))
                            _SET_RSP_DURATION(rsp, duration)
                            buf.advance_to(stop)
                            self._need = 0
                            return rsp
                elif have >= 12:
                    msg_id, n = _RSP12.unpack_from(data, pos)
                    stop = pos + 12 + n
                    if n <= self.limits.max_frame_size and stop <= len(data):
                        payload = data[pos + 12 : stop]
                        rsp = _new(Response)
                        _SET_RSP_ID(rsp, msg_id)
                        _SET_RSP_PAYLOAD(rsp, payload if type(payload) is bytes else bytes(payload))
                        _SET_RSP_DURATION(rsp, None)
                        buf.advance_to(stop)
                        self._need = 0
                        return rsp
            elif kind == "request":
                if self.timeout:
                    if have < 28:
                        return self._next_frame()
                    timeout, verb, msg_id, n = _REQ28.unpack_from(data, pos)
                    hs = 28
                else:
                    if have < 20:
                        return self._next_frame()
                    verb, msg_id, n = _REQ20.unpack_from(data, pos)
                    timeout, hs = None, 20
                stop = pos + hs + n
                discard_over = self.discard_over
                if (
                    n <= self.limits.max_frame_size
                    and (discard_over is None or n <= discard_over)
                    and stop <= len(data)
                ):
                    payload = data[pos + hs : stop]
                    req = _new(Request)
                    _SET_REQ_VERB(req, verb)
                    _SET_REQ_ID(req, msg_id)
                    _SET_REQ_PAYLOAD(req, payload if type(payload) is bytes else bytes(payload))
                    _SET_REQ_TIMEOUT(req, timeout)
                    buf.advance_to(stop)
                    self._need = 0
                    return req
        return self._next_frame()

    def next_responses(self, max_frames: int = MAX_RUN) -> ResponseRun | None:
        """The complete regular responses with ``msg_id >= 0`` at the head of the
        buffer, up to ``max_frames``, in columns (the response decoder's hot path,
        spec §3), or ``None`` when the next frame is not one -- incomplete, over a
        limit, an exception (``msg_id < 0``), a no-op, an envelope that is not one
        LZ4 block, anything :meth:`next_frame` would not decode on its fast path
        -- or is all that is buffered (one frame costs less as :meth:`next_frame`'s
        :class:`Response` than as a run): :meth:`next_frame` then decodes it, with
        its errors at its offsets.

        The run stops before the first frame that is not such a response, so
        calling this and then :meth:`next_frame` in turn decodes the stream
        exactly as :meth:`next_frame` alone does, frame for frame.
        """
        if max_frames < 1:
            raise ValueError(f"a run holds at least 1 response: max_frames={max_frames}")
        buf = self._buf
        data = buf.data
        pos = buf.pos
        end = len(data)
        if end - pos <= 8:  # (the usual miss, first: less than any frame and a byte behind it)
            return None
        if self.kind != "response" or self._phase != "frames":  # (only requests are ever skipped or held)
            return None
        comp = self.compressor
        if comp is not None and comp is not self._fast_compressor:
            return None
        # A lone frame (nothing buffered behind it) costs less as next_frame's
        # Response than as a run: checked before anything is allocated.
        if comp is None:
            hs = 16 if self.duration else 12
            if end - pos < hs or pos + hs + _U32.unpack_from(data, pos + 8)[0] >= end:
                return None
        elif end - pos < 8 or pos + 4 + _U32.unpack_from(data, pos)[0] >= end:
            return None
        limit = self.limits.max_frame_size
        msg_ids: list[int] = []
        payloads: list[bytes] = []
        durations: list[int] | None = [] if self.duration else None
        if comp is not None:
            pos = self._compressed_responses(data, pos, end, msg_ids, payloads, durations, max_frames)
        else:
            sliced: list[bytes | bytearray] = []  # (bytearray slices when the buffer is one)
            add_id = msg_ids.append
            add_payload = sliced.append
            if durations is not None:
                add_duration = durations.append
                unpack16 = _RSP16.unpack_from
                while end - pos >= 16 and len(msg_ids) < max_frames:
                    msg_id, n, duration = unpack16(data, pos)
                    stop = pos + 16 + n
                    if msg_id < 0 or n > limit or stop > end:
                        break
                    add_id(msg_id)
                    add_payload(data[pos + 16 : stop])
                    add_duration(duration)
                    pos = stop
            else:
                unpack12 = _RSP12.unpack_from
                while end - pos >= 12 and len(msg_ids) < max_frames:
                    msg_id, n = unpack12(data, pos)
                    stop = pos + 12 + n
                    if msg_id < 0 or n > limit or stop > end:
                        break
                    add_id(msg_id)
                    add_payload(data[pos + 12 : stop])
                    pos = stop
            payloads = cast("list[bytes]", sliced) if type(data) is bytes else list(map(bytes, sliced))
        if not msg_ids:
            return None
        buf.advance_to(pos)
        self._need = 0
        return ResponseRun(msg_ids, payloads, durations)

    def _compressed_responses(
        self,
        data: bytes | bytearray,
        pos: int,
        end: int,
        msg_ids: list[int],
        payloads: list[bytes],
        durations: list[int] | None,
        max_frames: int,
    ) -> int:
        """:meth:`next_responses` over single-block LZ4 envelopes (spec §4), with
        :meth:`next_frame`'s fast-path checks: the position after the last
        envelope taken."""
        limits = self.limits
        limit = limits.max_frame_size
        max_size = limits.max_decompressed_size
        flag = self._fast_flag
        hs = 12 if durations is None else 16
        unpack = _RSP12.unpack_from if durations is None else _RSP16.unpack_from
        decompress = lz4.block.decompress
        while end - pos >= 8 and len(msg_ids) < max_frames:
            clen, word = _U32X2.unpack_from(data, pos)
            stop = pos + 4 + clen
            size = word ^ flag
            # (the ratio check also refuses a payload under 4 bytes, a no-op: 255 * (clen - 4) + 16 < 1)
            if not (
                clen <= limit
                and stop <= end
                and word & _LAST == flag
                and hs <= size <= max_size
                and size <= _MAX_RATIO * (clen - 4) + 16
            ):
                break
            try:
                inner: bytes = decompress(data[pos + 8 : stop], size)
            except lz4.block.LZ4BlockError:
                break  # next_frame raises it with its field and offset
            if len(inner) != size:
                break
            head = unpack(inner, 0)
            msg_id, n = head[0], head[1]
            if msg_id < 0 or n > limit or hs + n > size:
                break
            msg_ids.append(msg_id)
            payloads.append(inner[hs : hs + n])
            if durations is not None:
                durations.append(head[2])
            pos = stop
        return pos

    def _next_frame(self) -> Frame | None:
        """:meth:`next_frame`'s general path."""
        if self._skip or self._phase == "paused":
            return None
        if self._held is not None:
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
        buf = self._buf
        base = buf.consumed
        magic, n = _HDR12.unpack_from(buf.data, buf.pos)
        if magic != MAGIC:
            raise _err(f"wrong protocol magic: {magic.hex()}", "negotiation", "magic", base)
        check_limit(n, self.limits.max_string_size, name="max_string_size", field="len", frame="negotiation", offset=base + 8,
                    protocol=PROTOCOL)
        if len(buf) < 12 + n:
            self._need = 12 + n
            return None
        body = buf.take(12 + n)[12:]
        neg = decode_negotiation_records(body, base=base + 12)
        self._phase = "paused"
        self._need = 0
        return neg

    def _compressed(self) -> Frame | None:
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
            check_limit(clen, self.limits.max_frame_size, name="max_frame_size", field="clen", frame="compressed", offset=base,
                        protocol=PROTOCOL)
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
            raise _err(f"the decompressed frame is {len(inner)} bytes, shorter than the {got} its header needs",
                       f"compressed>{self.kind}", "len", base)
        return got[0]

    def eof_error(self) -> LocalProtocolError | None:
        """The error to report if the stream ends now (inside a frame)."""
        if not self.in_frame:
            return None
        if self._phase == "negotiation":  # Seastar's own text for this one
            return _err("unexpected eof during negotiation frame", self.frame_name(), "(eof)", self.offset)
        return closed_inside("a frame", protocol=PROTOCOL, frame=self.frame_name(), offset=self.offset,
                             detail=f"{self.buffered} bytes of it outstanding")


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
