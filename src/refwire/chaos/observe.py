"""Frame observers for the fault proxy: the bytes of one direction of one
connection cut into frames, with their exact bytes, without enforcing any
state machine (a proxy must pass on what a conformant machine would refuse).

An observer is lenient: it decodes with the protocol's own codec and generous
limits; at the first byte it cannot decode it gives up on framing for the rest
of that direction and hands back raw byte runs (``type`` ``"?"``), so traffic
it does not understand still flows, unchanged.

Observed frame by frame, each with its protocol's own codec:

* Lumberjack (specs/lumberjack/README.md §2): ``W``, ``J``, ``D``, ``C`` and ``A``;
* Pravega and its 2017 draft (specs/pravega/README.md §1, §4;
  specs/pravega-draft-2017/README.md §1, §4): every command by name
  (``DataAppended``, ``AppendBlockEnd`` ...), with its fixed-width leading
  fields (``request_id``, ``event_number`` ...) as rule fields;
* TANK (specs/tank/README.md §2, §3): every frame by message name
  (``Produce``, ``Consume``, ``Ping`` ...), and a request's ``request_id``.

* Seastar RPC (specs/seastar-rpc/README.md §2-§5): the negotiation frames, then
  ``request`` (fields ``verb``, ``msg_id``, ``timeout_ms``, ``length``),
  ``response`` (``msg_id``, ``length``), stream messages and ``noop``s, each
  opened from its compressed envelope when a compressor was negotiated.  The
  two directions of a connection share what the negotiation said (the
  server's reply picks the compressor for both), so a request sent before the
  reply is held until the reply has been seen and the client sends again.
  Rule fields get byte spans only in uncompressed frames.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, Literal, Protocol, cast

import attrs

from ..wire import Limits

__all__ = ["BYTE_ORDER", "FIELDS", "inner_frames", "rewrap", "Observed", "Observer", "observer_for", "observed_types"]


@attrs.frozen
class Observed:
    """One frame (or a run of bytes that did not decode: ``type`` ``"?"``)."""

    type: str
    data: bytes
    fields: dict[str, Any] = attrs.field(factory=dict)
    #: where this frame's fields lie, when it depends on more than its type
    #: (TANK: a request and its response put ``request_id`` apart); else :data:`FIELDS`
    spans: dict[str, tuple[int, int]] | None = None


class Observer(Protocol):
    def feed(self, data: bytes) -> list[Observed]:
        """The frames the new bytes complete (an incomplete frame is held)."""
        ...

    def held(self) -> int:
        """Bytes held for an incomplete frame."""
        ...


class BytesObserver:
    """No framing: every chunk is a run of bytes."""

    def feed(self, data: bytes) -> list[Observed]:
        return [Observed("?", data)] if data else []

    def held(self) -> int:
        return 0


class LumberjackObserver:
    """Lumberjack v1/v2 frames (§2), decoded leniently (no JSON validation, either version byte)."""

    def __init__(self, max_frame_size: int) -> None:
        from ..lumberjack.frames import FrameDecoder

        self._dec = FrameDecoder(
            Limits(max_window=2**32 - 1, max_frame_size=max_frame_size, max_buffered=max_frame_size),
            validate_json=False,
            strict_versions=False,
        )
        self._pending = bytearray()
        self._broken = False

    def held(self) -> int:
        return len(self._pending)

    def feed(self, data: bytes) -> list[Observed]:
        from ..lumberjack.frames import frame_size

        if self._broken:
            return [Observed("?", data)] if data else []
        self._pending += data
        self._dec.feed(data)
        frames, err = self._dec.frames_before_error()
        out = []
        for f in frames:
            size = frame_size(f)
            raw = bytes(self._pending[:size])
            del self._pending[:size]
            out.append(Observed(*_lumberjack_fields(f, raw)))
        if err is not None:
            self._broken = True
            if self._pending:
                out.append(Observed("?", bytes(self._pending), {"error": str(err)}))
            self._pending.clear()
        return out


def inner_frames(protocol: str, frame: Observed, max_size: int) -> list[Observed] | None:
    """The frames inside an envelope (a Lumberjack ``C``: its inflated payload,
    §2.5), or None when ``frame`` is none or does not open (it then passes as it is)."""
    if protocol != "lumberjack" or frame.type != "C":
        return None
    from ..errors import ProtocolError
    from ..lumberjack.frames import inflate

    try:
        payload = inflate(frame.data[6:], max_size=max_size)
    except ProtocolError:
        return None
    inner = LumberjackObserver(max_size)
    frames = inner.feed(payload)
    if inner.held() or any(f.type == "?" for f in frames):
        return None  # not whole frames: leave the envelope alone
    return frames


def rewrap(protocol: str, envelope: Observed, inner: list[bytes]) -> bytes:
    """``envelope`` again around the (changed) ``inner`` frames: a Lumberjack ``C``
    keeps its version byte and compresses them anew."""
    import zlib

    body = zlib.compress(b"".join(inner))
    return envelope.data[:2] + len(body).to_bytes(4, "big") + body


def _lumberjack_fields(f: Any, raw: bytes) -> tuple[str, bytes, dict[str, Any]]:
    from ..lumberjack.frames import Ack, Compressed, DataFrame, JsonFrame, Window

    version = chr(raw[0])
    if isinstance(f, Ack):
        return "A", raw, {"version": version, "seq": f.seq}
    if isinstance(f, Window):
        return "W", raw, {"version": version, "count": f.count}
    if isinstance(f, JsonFrame):
        return "J", raw, {"version": version, "seq": f.seq, "length": len(f.payload)}
    if isinstance(f, DataFrame):
        return "D", raw, {"version": version, "seq": f.seq, "pairs": len(f.pairs)}
    assert isinstance(f, Compressed)
    return "C", raw, {"version": version, "length": len(f.payload)}


class _LengthFramed:
    """Frames that a fixed header sizes (Pravega's and TANK's): the shared cut.
    A subclass says whether a first byte can start a frame (:meth:`_starts`),
    reads its header (:meth:`_header`: the frame's name and whole size, or an
    error) and describes a whole frame (:meth:`_observe`).  At the first byte
    that fits no frame the rest of the direction is relayed as bytes."""

    HEADER: int

    def __init__(self, max_frame_size: int) -> None:
        self._max = max_frame_size
        self._pending = bytearray()
        self._broken = False

    def held(self) -> int:
        return len(self._pending)

    def _starts(self, first: int) -> str | None:
        """Why no frame starts with byte ``first`` (None: one may)."""
        raise NotImplementedError

    def _header(self, head: bytes) -> tuple[str, int] | str:
        """(name, whole frame size) from the header bytes, or why they are no header."""
        raise NotImplementedError

    def _observe(self, name: str, raw: bytes) -> Observed:
        raise NotImplementedError

    def feed(self, data: bytes) -> list[Observed]:
        if self._broken:
            return [Observed("?", data)] if data else []
        self._pending += data
        out: list[Observed] = []
        buf = self._pending
        while buf:
            why = self._starts(buf[0])  # known from the first byte: nothing is held for it
            if why is None and len(buf) >= self.HEADER:
                head = self._header(bytes(buf[: self.HEADER]))
                if isinstance(head, str):
                    why = head
                elif head[1] > self._max:
                    why = f"{head[0]} of {head[1]} bytes is over max_frame_size={self._max}"
            if why is not None:
                self._broken = True
                out.append(Observed("?", bytes(buf), {"error": why}))
                buf.clear()
                break
            if len(buf) < self.HEADER:
                break
            name, size = cast(tuple[str, int], head)
            if len(buf) < size:
                break
            raw = bytes(buf[:size])
            del buf[:size]
            out.append(self._observe(name, raw))
        return out


class PravegaObserver(_LengthFramed):
    """Pravega commands (or the draft's), split by the 8-byte header and decoded
    by the dialect's own command table; a command whose payload does not decode
    is still one frame (``fields`` has the error), since its length is known."""

    HEADER = 8

    def __init__(self, max_frame_size: int, *, draft: bool = False) -> None:
        from ..pravega.frames_codec import CURRENT

        super().__init__(max_frame_size)
        if draft:
            from ..pravega.draft2017.frames import DRAFT

            self._dialect = DRAFT
        else:
            self._dialect = CURRENT

    def _starts(self, first: int) -> str | None:
        # every type code is -127..100: its first byte is 0x00 or 0xff
        return None if first in (0x00, 0xFF) else f"no command starts with byte {first:#04x}"

    def _header(self, head: bytes) -> tuple[str, int] | str:
        code = int.from_bytes(head[:4], "big", signed=True)
        n = int.from_bytes(head[4:8], "big", signed=True)
        cls = self._dialect.commands.get(code)
        if cls is None or n < 0:
            return f"{'unknown type' if cls is None else 'bad length'} {code}/{n}"
        return cls.NAME, 8 + n

    def _observe(self, name: str, raw: bytes) -> Observed:
        from ..errors import ProtocolError
        from ..pravega.frames_codec import decode_command

        code = int.from_bytes(raw[:4], "big", signed=True)
        fields: dict[str, Any] = {"type": code, "length": len(raw) - 8}
        try:
            cmd = decode_command(code, raw, start=8, end=len(raw), base=8, allow_inner=True, dialect=self._dialect)
            for a in attrs.fields(cast(Any, type(cmd))):  # every scalar field (rules may corrupt those with a span)
                value = getattr(cmd, a.name)
                if isinstance(value, bool | int | str):
                    fields[a.name] = value
                elif isinstance(value, uuid.UUID):
                    fields[a.name] = str(value)
        except ProtocolError as exc:
            fields["error"] = str(exc)
        return Observed(name, raw, fields)


class TankObserver(_LengthFramed):
    """TANK frames (``msgId:u8 payloadLen:u32le``, §2), named by message id, with
    the ``request_id`` of each request (after ``clientVersion:u16`` for Produce and
    Consume, first for the others, §3) and of each response (after ``headerLen:u32``
    for a Consume's, first for the others)."""

    HEADER = 5

    def __init__(self, max_frame_size: int, direction: str = "c2s") -> None:
        super().__init__(max_frame_size)
        self._rid_at = _TANK_RID_C2S if direction == "c2s" else _TANK_RID_S2C

    def _starts(self, first: int) -> str | None:
        from ..tank.frames import MSG_NAMES

        return None if first in MSG_NAMES else f"message id {first:#04x}"

    def _header(self, head: bytes) -> tuple[str, int] | str:
        from ..tank.frames import MSG_NAMES

        return MSG_NAMES[head[0]], 5 + int.from_bytes(head[1:5], "little")

    def _observe(self, name: str, raw: bytes) -> Observed:
        fields: dict[str, Any] = {"msg_id": raw[0], "length": len(raw) - 5}
        spans = {"msg_id": (0, 1), "length": (1, 4)}
        at = self._rid_at.get(name)
        if at is not None and len(raw) >= at + 4:
            fields["request_id"] = int.from_bytes(raw[at : at + 4], "little")
            spans["request_id"] = (at, 4)
        return Observed(name, raw, fields, spans)


class SeastarObserver:
    """Seastar RPC, one direction, decoded by refwire's own frame decoder; the two
    observers of a connection share ``session`` (the server's negotiation reply
    configures both, §2)."""

    def __init__(self, max_frame_size: int, direction: str, session: dict[str, Any]) -> None:
        from ..seastar_rpc.frames import FrameDecoder

        self.direction = direction
        self.session = session
        limits = Limits(max_frame_size=max_frame_size, max_decompressed_size=max_frame_size, max_string_size=1 << 16)
        self.decoder = FrameDecoder("request" if direction == "c2s" else "response", limits=limits)
        self._pending = bytearray()
        self._start = 0  #: stream offset of ``_pending[0]``
        self._broken = False
        #: set when the server's negotiation reply configured this (client) direction
        #: while it held bytes: feeding it ``b""`` now decodes them (the proxy does)
        self.unblocked = False
        session[direction] = self

    def held(self) -> int:
        return len(self._pending)

    def feed(self, data: bytes) -> list[Observed]:
        from ..errors import ProtocolError

        if self._broken:
            return [Observed("?", data)] if data else []
        self._pending += data
        self.decoder.feed(data)
        out: list[Observed] = []
        while True:
            before = self.decoder.offset
            try:
                frame = self.decoder.next_frame()
            except ProtocolError as exc:
                self._broken = True
                if self._pending:
                    out.append(Observed("?", bytes(self._pending), {"error": str(exc)}))
                self._pending.clear()
                return out
            if frame is None:
                return out
            end = self.decoder.offset
            raw = bytes(self._pending[: end - self._start])
            del self._pending[: end - self._start]
            self._start = end
            out.append(self._observed(frame, raw, before))

    def _observed(self, frame: Any, raw: bytes, at: int) -> Observed:
        from ..seastar_rpc.frames import Features, Negotiation, NoOp, Request, Response, StreamEnd, StreamMessage

        if isinstance(frame, Negotiation):
            features = Features.from_negotiation(frame)
            if self.direction == "c2s":
                self.session["offer"] = features
            else:
                self._configure(features)
            return Observed("negotiation", raw, {"compress": features.compress or "", "timeout": features.timeout})
        compressed = self.decoder.compressor is not None
        if isinstance(frame, Request):
            timeout = self.decoder.timeout
            head = 8 if timeout else 0
            spans = None if compressed else {"verb": (head, 8), "msg_id": (head + 8, 8), "length": (head + 16, 4)}
            if spans is not None and timeout:
                spans["timeout_ms"] = (0, 8)
            fields = {"verb": frame.verb, "msg_id": frame.msg_id, "timeout_ms": frame.timeout_ms or 0, "length": len(frame.payload)}
            return Observed("request", raw, fields, spans)
        if isinstance(frame, Response):
            spans = None if compressed else {"msg_id": (0, 8), "length": (8, 4)}
            return Observed("response", raw, {"msg_id": frame.msg_id, "length": len(frame.payload)}, spans)
        if isinstance(frame, StreamMessage):
            return Observed("stream", raw, {"length": len(frame.payload)}, None if compressed else {"length": (0, 4)})
        if isinstance(frame, StreamEnd):
            return Observed("stream-end", raw, {}, {})
        if isinstance(frame, NoOp):
            return Observed("noop", raw, {}, {})
        return Observed(type(frame).__name__.lower(), raw, {}, {})

    def _configure(self, reply: Any) -> None:
        """The server's negotiation reply: what both directions' frames look like from now on (§2, §4)."""
        from ..seastar_rpc.compression import make_compressor

        offer = self.session.get("offer")
        stream = offer is not None and offer.stream_parent is not None
        name = reply.compress.split(",")[0] if reply.compress else None
        server_side = self.session.get("c2s")
        if server_side is not None:
            server_side.decoder.configure(
                kind="stream" if stream else "request",
                timeout=bool(offer.timeout) if offer is not None else False,
                compressor=None if name is None else make_compressor(name),
            )
            server_side.unblocked = server_side.held() > 0
        self.decoder.configure(
            kind="stream" if stream else "response",
            duration=reply.handler_duration,
            compressor=None if name is None else make_compressor(name),
        )


def _pravega_spans(commands: dict[int, Any]) -> dict[str, dict[str, tuple[int, int]]]:
    """Per command: ``type`` and ``length`` (the header), then each leading
    fixed-width field up to the first of variable width, at its offset."""
    from ..pravega.frames_codec import _NO_DEFAULT as REQUIRED  # the codec's mark of a field that is always there
    from ..pravega.frames_codec import BOOL, I32, I64, U8, UUID

    sizes = {I32: 4, I64: 8, U8: 1, BOOL: 1, UUID: 16}
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for cls in commands.values():
        spans = {"type": (0, 4), "length": (4, 4)}
        pos = 8
        for a in attrs.fields(cls):
            size = sizes.get(a.metadata.get("kind", ""))
            if size is None or a.metadata.get("optional") is not REQUIRED:
                break  # a variable-width field, or a trailing one that may be absent (§2.4)
            spans[a.name] = (pos, size)
            pos += size
        out[cls.NAME] = spans
    return out


#: Where a TANK request's ``requestId`` is (§3): after ``clientVersion:u16`` for
#: Produce and Consume, first for the others; Ping and the obsolete ids have none.
_TANK_RID_C2S = {"Produce": 7, "ProduceWithSeqnum": 7, "Consume": 7, "DiscoverPartitions": 5, "CreateTopic": 5,
                 "ReloadConf": 5, "Status": 5, "DiscoverTopics": 5, "DiscoverTopology": 5}  # fmt: skip
#: ... and a response's: after ``headerLen:u32`` for Consume, first for the others.
_TANK_RID_S2C = {**{k: 5 for k in _TANK_RID_C2S if k != "ProduceWithSeqnum"}, "Consume": 9}


def _tank_fields() -> dict[str, dict[str, tuple[int, int]]]:
    """The fields rules may name per TANK frame type (a frame's own spans say where, by direction)."""
    from ..tank.frames import MSG_NAMES

    head = {"msg_id": (0, 1), "length": (1, 4)}
    return {
        name: {**head, **({"request_id": (_TANK_RID_C2S[name], 4)} if name in _TANK_RID_C2S else {})}
        for name in MSG_NAMES.values()
    }


TANK_FIELDS = _tank_fields()


#: How a protocol writes its integer fields (a ``rewrite`` encodes its value so); big-endian otherwise.
BYTE_ORDER: dict[str, Literal["big", "little"]] = {"tank": "little", "seastar-rpc": "little"}

#: Per protocol and frame type: each field a rule may match, rewrite or corrupt,
#: as (offset in the frame, size in bytes).  specs/lumberjack/README.md §2.
FIELDS: dict[str, dict[str, dict[str, tuple[int, int]]]] = {
    "lumberjack": {
        "A": {"version": (0, 1), "type": (1, 1), "seq": (2, 4)},
        "W": {"version": (0, 1), "type": (1, 1), "count": (2, 4)},
        "J": {"version": (0, 1), "type": (1, 1), "seq": (2, 4), "length": (6, 4)},
        "D": {"version": (0, 1), "type": (1, 1), "seq": (2, 4), "pairs": (6, 4)},
        "C": {"version": (0, 1), "type": (1, 1), "length": (2, 4)},
    },
    "tank": TANK_FIELDS,
    "seastar-rpc": {
        "negotiation": {},
        "request": {"timeout_ms": (0, 8), "verb": (8, 8), "msg_id": (16, 8), "length": (24, 4)},
        "response": {"msg_id": (0, 8), "length": (8, 4)},
        "stream": {"length": (0, 4)},
        "stream-end": {},
        "noop": {},
    },
}


def observed_types(protocol: str) -> tuple[str, ...]:
    """The frame types rules can name for ``protocol`` (``"?"``: undecoded bytes)."""
    return (*FIELDS.get(protocol, {}), "?")


_OBSERVERS: dict[str, Callable[[int, str], Observer]] = {
    "lumberjack": lambda size, direction: LumberjackObserver(size),
    "pravega": lambda size, direction: PravegaObserver(size),
    "pravega-draft-2017": lambda size, direction: PravegaObserver(size, draft=True),
    "tank": TankObserver,
}


def _add_pravega_fields() -> None:
    """Pravega's and the draft's field spans, from their command tables."""
    from ..pravega.draft2017.frames import DRAFT
    from ..pravega.frames_codec import CURRENT

    for protocol, dialect in (("pravega", CURRENT), ("pravega-draft-2017", DRAFT)):
        spans = _pravega_spans(dialect.commands)
        FIELDS[protocol] = spans
        for name, s in spans.items():
            _PRAVEGA_SPANS[(id(dialect), name)] = s


_PRAVEGA_SPANS: dict[tuple[int, str], dict[str, tuple[int, int]]] = {}
_add_pravega_fields()


def observer_for(protocol: str, max_frame_size: int, direction: str = "c2s", session: dict[str, Any] | None = None) -> Observer:
    """A fresh observer of one direction (``c2s`` or ``s2c``) of one connection;
    ``session`` is shared by the two directions of one connection (Seastar RPC's
    negotiation configures both)."""
    if protocol == "seastar-rpc":
        return SeastarObserver(max_frame_size, direction, {} if session is None else session)
    make = _OBSERVERS.get(protocol)
    return make(max_frame_size, direction) if make is not None else BytesObserver()
