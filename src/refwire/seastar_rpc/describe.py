"""Seastar RPC traffic described: the one lenient reading every tool uses
(specs/seastar-rpc/README.md, "the spec" below: §2-§5; see :mod:`refwire.describe`).

:data:`LAYOUT` is the frames as data, derived from the codec's own ``struct``
tables in :mod:`~refwire.seastar_rpc.frames` (so it cannot drift from them);
everything is little-endian (spec, top):

* ``negotiation`` (§2): ``magic`` ``"SSTARRPC"``, ``len`` of the records that follow.
* ``request`` (§3), as sent once TIMEOUT was negotiated (the default offer):
  ``timeout_ms verb msg_id len``; ``request/no-timeout``: ``verb msg_id len``.
* ``response`` (§3), as sent once HANDLER_DURATION was negotiated (the default
  offer): ``msg_id len handler_duration``; ``response/no-duration``: ``msg_id len``.
* ``stream`` (§3, §5): ``len``; ``stream-end``: ``len`` = 0xffffffff.
* ``compressed`` (§4): ``clen``, then the compressor's payload holding one whole
  frame; ``noop``: an envelope whose payload decompresses to nothing.

:func:`describer` reads one direction with the codec's
:class:`~refwire.seastar_rpc.frames.FrameDecoder` (never a second parser).  The
two directions of one connection share ``session`` (a dict), as the endpoints
share what the negotiation said (§1, §2):

* ``"offer"`` -- the client's negotiation (:class:`~refwire.seastar_rpc.frames.Features`),
  written by the ``c2s`` describer, or set beforehand by a tool that knows it;
* ``"reply"`` -- the server's, written by the ``s2c`` describer (or set beforehand);
  it names the compressor of *both* directions, so the ``c2s`` describer holds
  what follows its own negotiation frame until the reply is known: when the
  ``s2c`` describer sees it, it configures the ``c2s`` one, which then sets
  ``unblocked`` if it held bytes (feeding it ``b""`` describes them);
* ``"stream"`` -- optional: whether this is a stream connection (§5), when a tool
  decides it; else the offer's STREAM_PARENT says;
* ``"c2s"`` / ``"s2c"`` -- the describers themselves.

A reply naming several compressors is read with the first; one naming none
that is known leaves the frames after it undecoded (``field`` ``COMPRESS``).

Described frames: ``negotiation`` (``fields``: the features, as
:class:`~refwire.seastar_rpc.frames.Features`' attributes), ``request``
(``timeout_ms`` -- None when TIMEOUT was not negotiated --, ``verb``,
``msg_id``, ``len``), ``response`` (``msg_id``, ``handler_duration`` -- None
without HANDLER_DURATION --, ``len``; the exception in a negative id's data is
the codec's :func:`~refwire.seastar_rpc.frames.decode_exception` of
``frame.payload``), ``stream`` (``len``), ``stream-end``; once a compressor is
negotiated, every frame is a ``compressed`` envelope (``compressor``,
``clen``, ``inflated_len``) whose ``inner`` is the one frame it holds (at
offset 0 of the decompressed bytes, its ``data`` the frame's exact bytes, no
spans), or a ``noop`` (same fields, nothing inside).  Spans are given for
every uncompressed frame (they depend on the negotiation, not only on the type).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

from ..describe import UNDECODED, Described, Describer, Field, FrameLayout, Layout
from ..errors import ProtocolError
from ..wire import Limits
from .compression import COMPRESSOR_NAMES, Compressor, make_compressor
from .frames import (
    _HDR12,
    _REQ20,
    _REQ28,
    _RSP12,
    _RSP16,
    _U32,
    PROTOCOL,
    Features,
    FrameDecoder,
    Negotiation,
    NoOp,
    Request,
    Response,
    StreamEnd,
    StreamMessage,
)

__all__ = ["LAYOUT", "SeastarDescriber", "describer"]


def _frame(frame_type: str, table: struct.Struct, names: tuple[str, ...]) -> FrameLayout:
    """The layout of a frame whose fixed part is the codec's ``table`` (a little-endian
    ``struct``), its fields ``names`` in wire order: offsets, sizes and kinds from the table."""
    assert table.format.startswith("<"), table.format
    codes = re.findall(r"\d*s|[a-zA-Z?]", table.format[1:])
    fields: list[Field] = []
    offset = 0
    for name, code in zip(names, codes, strict=True):
        size = struct.calcsize("<" + code)
        kind: Literal["uint", "int", "bytes"] = "bytes" if code.endswith("s") else "int" if code.islower() else "uint"
        fields.append(Field(name, offset, size, kind))
        offset += size
    assert offset == table.size, (frame_type, table.format)
    return FrameLayout(frame_type, tuple(fields), table.size)


#: The frames as data (spec §2-§4), from the codec's tables.
LAYOUT: Final = Layout(
    byte_order="little",
    frames={
        "negotiation": _frame("negotiation", _HDR12, ("magic", "len")),
        "request": _frame("request", _REQ28, ("timeout_ms", "verb", "msg_id", "len")),
        "request/no-timeout": _frame("request/no-timeout", _REQ20, ("verb", "msg_id", "len")),
        "response": _frame("response", _RSP16, ("msg_id", "len", "handler_duration")),
        "response/no-duration": _frame("response/no-duration", _RSP12, ("msg_id", "len")),
        "stream": _frame("stream", _U32, ("len",)),
        "stream-end": _frame("stream-end", _U32, ("len",)),
        "compressed": _frame("compressed", _U32, ("clen",)),
        "noop": _frame("noop", _U32, ("clen",)),
    },
    notes=(
        "Which request and response layout a connection uses is negotiated (§2): 'request' and 'response' are "
        "the layouts once TIMEOUT and HANDLER_DURATION were (the default offer; the server always accepts them), "
        "'request/no-timeout' and 'response/no-duration' the others; a described frame's spans say which. "
        "Every len counts only the data after the header (never timeout_ms or handler_duration). "
        "negotiation: len bytes of records follow the header, each feature:u32 flen:u32 data[flen] (the first "
        "record of a number wins; COMPRESS holds names, CONNECTION_ID and STREAM_PARENT a u64). "
        "stream-end is a stream frame whose len is 0xffffffff. "
        "A response with a negative msg_id carries an exception in its data: type:u32 len:u32 body[len] "
        "(USER: the message; UNKNOWN_VERB: verb:u64). "
        "compressed (§4): once a compressor is negotiated every frame of both directions is wrapped, one whole "
        "frame per envelope clen:u32 payload[clen]: LZ4's payload is uncompressed_size:u32 and an LZ4 block; "
        "LZ4_FRAGMENTED's is chunks, C:u32 (MSB 0) and C bytes inflating to 32768, then a last chunk "
        "0x80000000|U:u32 inflating to U bytes. The inflated bytes hold one frame (its fields at the same offsets "
        "from the start of the inflated bytes; bytes after it are ignored); a payload under 4 bytes or one that "
        "inflates to nothing is a noop. OversizedRequest is no frame of its own: a request whose data a server "
        "skipped unread (§3), laid out as a request."
    ),
)

_SPANS: Final = {name: layout.spans() for name, layout in LAYOUT.frames.items()}


class SeastarDescriber:
    """One direction of one Seastar RPC connection, described frame by frame (see the module docstring)."""

    def __init__(self, max_frame_size: int, direction: str, session: dict[str, Any]) -> None:
        self.direction = direction
        self.session = session
        limits = Limits(max_frame_size=max_frame_size, max_decompressed_size=max_frame_size, max_string_size=1 << 16)
        self.decoder = FrameDecoder("request" if direction == "c2s" else "response", limits=limits)
        self._pending = bytearray()
        self._start = 0  #: stream offset of ``_pending[0]``
        self._broken = False
        #: why the frames after the negotiation cannot be read (a compressor no-one knows)
        self._unreadable: str | None = None
        #: set when the server's negotiation reply configured this (client) direction
        #: while it held bytes: feeding it ``b""`` now describes them
        self.unblocked = False
        session[direction] = self

    def held(self) -> int:
        return len(self._pending)

    @property
    def offset(self) -> int:
        """Stream offset of the first byte not described yet."""
        return self._start

    def feed(self, data: bytes) -> list[Described]:
        if self._broken:
            return [self._undecoded(bytes(data), None)] if data else []
        self._pending += data
        self.decoder.feed(data)
        out: list[Described] = []
        while True:
            try:
                if self._unreadable is not None and self._pending:
                    raise ProtocolError(self._unreadable, protocol=PROTOCOL, frame="negotiation", field="COMPRESS",
                                        offset=self._start)
                frame = self.decoder.next_frame()
                if frame is None:
                    return out
                end = self.decoder.offset
                described = self._describe(frame, bytes(self._pending[: end - self._start]))
            except ProtocolError as exc:
                if self._pending:
                    out.append(self._undecoded(bytes(self._pending), exc))
                self._pending.clear()
                self._broken = True
                return out
            del self._pending[: end - self._start]
            self._start = end
            out.append(described)

    def end(self) -> list[Described]:
        if not self._pending:
            return []
        err: ProtocolError | None = self.decoder.eof_error()
        if err is None:  # (held before the reply configured this direction)
            err = ProtocolError(f"the stream ended inside a frame ({len(self._pending)} bytes held)", protocol=PROTOCOL,
                                frame=self.decoder.frame_name(), field="(end)", offset=self._start + len(self._pending))
        out = self._undecoded(bytes(self._pending), err)
        self._pending.clear()
        self._broken = True
        return [out]

    def _undecoded(self, data: bytes, error: ProtocolError | None) -> Described:
        out = Described(UNDECODED, self._start, data, {"error": str(error)} if error is not None else {}, error=error)
        self._start += len(data)
        return out

    def _describe(self, frame: object, raw: bytes) -> Described:
        at = self._start
        if isinstance(frame, Negotiation):
            features = Features.from_negotiation(frame, base=at + 12)
            self._negotiated(features)
            fields = {a.name: getattr(features, a.name) for a in attrs.fields(Features)}
            return Described("negotiation", at, raw, fields, frame, _SPANS["negotiation"])
        dec = self.decoder
        comp = dec.compressor
        if comp is None:
            return _plain(frame, at, raw, dec.timeout, dec.duration, inner=False)
        info = {"compressor": comp.name, "clen": len(raw) - 4}
        if isinstance(frame, NoOp):
            return Described("noop", at, raw, {**info, "inflated_len": 0}, frame, _SPANS["noop"])
        inside = _plain(frame, 0, _encode(frame, dec.timeout, dec.duration), dec.timeout, dec.duration, inner=True)
        return Described("compressed", at, raw, {**info, "inflated_len": len(inside.data)}, frame, _SPANS["compressed"],
                         inner=(inside,))

    # ------------------------------------------------------------------ negotiation

    def _negotiated(self, features: Features) -> None:
        """This direction's negotiation frame: what both directions' frames look like from now on (§2, §4)."""
        session = self.session
        if self.direction == "c2s":
            session["offer"] = features
            reply = session.get("reply")
            if reply is not None:
                self._configure(features, reply)
            return  # else held until the server's reply configures this direction
        session["reply"] = features
        offer = session.get("offer")
        self._configure(offer, features)
        client = session.get("c2s")
        if isinstance(client, SeastarDescriber) and client is not self:
            client._configure(offer, features)
            client.unblocked = client.held() > 0

    def _configure(self, offer: Features | None, reply: Features) -> None:
        session = self.session
        stream = bool(session["stream"]) if "stream" in session else offer is not None and offer.stream_parent is not None
        name = reply.compress.split(",")[0] if reply.compress else None
        compressor: Compressor | None = None
        if name is not None:
            if name in COMPRESSOR_NAMES:
                compressor = make_compressor(name)
            else:
                self._unreadable = f"the server chose compressor {name!r}, which is not one of {', '.join(COMPRESSOR_NAMES)}"
        if self.direction == "c2s":
            self.decoder.configure(kind="stream" if stream else "request", timeout=bool(offer is not None and offer.timeout),
                                   compressor=compressor)
        else:
            self.decoder.configure(kind="stream" if stream else "response", duration=reply.handler_duration,
                                   compressor=compressor)


def _encode(frame: object, timeout: bool, duration: bool) -> bytes:
    """A decoded frame's exact bytes (what its envelope inflated to, without anything after it)."""
    if isinstance(frame, Request):
        return frame.encode(with_timeout=timeout)
    if isinstance(frame, Response):
        return frame.encode(with_duration=duration)
    if isinstance(frame, StreamMessage | StreamEnd):
        return frame.encode()
    raise AssertionError(f"no frame is sent so: {frame!r}")  # pragma: no cover


def _plain(frame: object, at: int, raw: bytes, timeout: bool, duration: bool, *, inner: bool) -> Described:
    """An uncompressed frame (``inner``: the one inside an envelope, without spans)."""
    spans: Mapping[str, tuple[int, int]]
    if isinstance(frame, Request):
        fields: dict[str, Any] = {"timeout_ms": frame.timeout_ms, "verb": frame.verb, "msg_id": frame.msg_id,
                                  "len": len(frame.payload)}
        spans = _SPANS["request" if timeout else "request/no-timeout"]
        kind = "request"
    elif isinstance(frame, Response):
        fields = {"msg_id": frame.msg_id, "handler_duration": frame.handler_duration, "len": len(frame.payload)}
        spans = _SPANS["response" if duration else "response/no-duration"]
        kind = "response"
    elif isinstance(frame, StreamMessage):
        fields, spans, kind = {"len": len(frame.payload)}, _SPANS["stream"], "stream"
    elif isinstance(frame, StreamEnd):
        fields, spans, kind = {}, _SPANS["stream-end"], "stream-end"
    else:  # pragma: no cover - the decoder makes no other frame without discard_over
        raise AssertionError(f"unexpected frame {frame!r}")
    return Described(kind, at, raw, fields, frame, {} if inner else dict(spans))


def describer(max_frame_size: int, direction: str = "c2s", session: dict[str, Any] | None = None) -> Describer:
    """A fresh lenient describer of ``direction`` (``c2s`` or ``s2c``) of one connection;
    the two directions share ``session`` (see the module docstring)."""
    return SeastarDescriber(max_frame_size, direction, {} if session is None else session)
