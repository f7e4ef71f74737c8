"""Seastar RPC in the fault proxy (specs/seastar-rpc/README.md).

Observed (§2-§5): the negotiation frames, then ``request`` (fields ``verb``,
``msg_id``, ``timeout_ms``, ``length``), ``response`` (``msg_id``,
``length``), stream messages and ``noop``s, each opened from its compressed
envelope when a compressor was negotiated.  The two directions of a
connection share what the negotiation said (the server's reply picks the
compressor for both), so a request sent before the reply is held until the
reply has been seen and the client sends again.  Rule fields get byte spans
only in uncompressed frames; integers are little-endian.

``--check`` (§3): ``reply-without-request``, a response (as the client
received it) for a message id the client never sent on that connection -- the
server's bug when it sent it so, an injected fault when the proxy changed it;
``reply-twice``, a second response to one id.
"""

from __future__ import annotations

from typing import Any

from ...errors import ProtocolError
from ...seastar_rpc.compression import make_compressor
from ...seastar_rpc.frames import (
    Features,
    FrameDecoder,
    Negotiation,
    NoOp,
    Request,
    Response,
    StreamEnd,
    StreamMessage,
)
from ...wire import Limits
from ..adapter import Adapter
from ..check import Checker, Violation
from ..observe import Observed, Observer

__all__ = ["ADAPTER", "FIELDS", "SeastarChecker", "SeastarObserver"]


class SeastarObserver:
    """Seastar RPC, one direction, decoded by refwire's own frame decoder; the two
    observers of a connection share ``session`` (the server's negotiation reply
    configures both, §2)."""

    def __init__(self, max_frame_size: int, direction: str, session: dict[str, Any]) -> None:
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
            fields = {
                "verb": frame.verb,
                "msg_id": frame.msg_id,
                "timeout_ms": frame.timeout_ms or 0,
                "length": len(frame.payload),
            }
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


#: Per frame type: each field a rule may match, rewrite or corrupt, as (offset, size)
#: in an uncompressed frame sent with a timeout (a frame's own spans say where, §3).
FIELDS: dict[str, dict[str, tuple[int, int]]] = {
    "negotiation": {},
    "request": {"timeout_ms": (0, 8), "verb": (8, 8), "msg_id": (16, 8), "length": (24, 4)},
    "response": {"msg_id": (0, 8), "length": (8, 4)},
    "stream": {"length": (0, 4)},
    "stream-end": {},
    "noop": {},
}


class SeastarChecker(Checker):
    """See the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self._issued: dict[int, set[int]] = {}
        self._server_sent: dict[int, set[int]] = {}
        self._answered: dict[int, set[int]] = {}

    def sent(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        if direction == "c2s" and frame.type == "request":
            self._issued.setdefault(conn, set()).add(abs(int(frame.fields["msg_id"])))
        elif direction == "s2c" and frame.type == "response":
            self._server_sent.setdefault(conn, set()).add(abs(int(frame.fields["msg_id"])))

    def received(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        if direction != "s2c" or frame.type != "response":
            return
        mid = abs(int(frame.fields["msg_id"]))
        if mid not in self._issued.get(conn, set()):
            who = "the server sent it so" if mid in self._server_sent.get(conn, set()) else "an injected fault changed it"
            self.violations.append(
                Violation(
                    "reply-without-request",
                    conn,
                    direction,
                    index,
                    f"a reply for msg_id {mid}, never sent on this connection ({who})",
                )
            )
        elif mid in self._answered.setdefault(conn, set()):
            self.violations.append(Violation("reply-twice", conn, direction, index, f"a second reply for msg_id {mid}"))
        self._answered[conn].add(mid)


def _observer(max_frame_size: int, direction: str, session: dict[str, Any]) -> Observer:
    return SeastarObserver(max_frame_size, direction, session)


ADAPTER = Adapter(observer=_observer, fields=FIELDS, byte_order="little", checker=SeastarChecker, prefix="ss")
