"""Seastar RPC in the fault proxy (specs/seastar-rpc/README.md).

Observed (§2-§5): the negotiation frames, then ``request`` (fields ``verb``,
``msg_id``, ``timeout_ms``, ``length``), ``response`` (``msg_id``,
``length``), stream messages and ``noop`` messages, each opened from its compressed
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

from ...describe import UNDECODED, Described
from ...seastar_rpc.describe import LAYOUT, SeastarDescriber
from ..adapter import Adapter
from ..check import Checker, Violation
from ..observe import Observed, Observer

__all__ = ["ADAPTER", "FIELDS", "SeastarChecker", "SeastarObserver"]

#: The spec's field names a rule sees under another name (the proxy's since its start).
_RULE_NAME = {"len": "length"}
#: Per frame type, the fields a rule may match, rewrite or corrupt (by the spec's names, in
#: the order the proxy logs them).
_RULE_FIELDS: dict[str, tuple[str, ...]] = {
    "negotiation": (),
    "request": ("verb", "msg_id", "timeout_ms", "len"),
    "response": ("msg_id", "len"),
    "stream": ("len",),
    "stream-end": (),
    "noop": (),
}


class SeastarObserver:
    """Seastar RPC, one direction, as :mod:`refwire.seastar_rpc.describe` describes it;
    the two observers of a connection share ``session`` (the server's negotiation reply
    configures both, §2)."""

    def __init__(self, max_frame_size: int, direction: str, session: dict[str, Any]) -> None:
        self.describer = SeastarDescriber(max_frame_size, direction, session)

    @property
    def unblocked(self) -> bool:
        """The server's negotiation reply configured this (client) direction while it held
        bytes: feeding it ``b""`` now decodes them (the proxy does)."""
        return self.describer.unblocked

    @unblocked.setter
    def unblocked(self, value: bool) -> None:
        self.describer.unblocked = value

    def held(self) -> int:
        return self.describer.held()

    def feed(self, data: bytes) -> list[Observed]:
        return [_observed(d) for d in self.describer.feed(data)]


def _observed(d: Described) -> Observed:
    if d.type == UNDECODED:
        return Observed(UNDECODED, d.data, d.fields)
    if d.type == "negotiation":
        return Observed("negotiation", d.data, {"compress": d.fields["compress"] or "", "timeout": d.fields["timeout"]})
    frame = d.inner[0] if d.inner else d
    fields = {_RULE_NAME.get(k, k): frame.fields[k] for k in _RULE_FIELDS[frame.type]}
    if "timeout_ms" in fields:
        fields["timeout_ms"] = fields["timeout_ms"] or 0
    if not fields:
        return Observed(frame.type, d.data, {}, {})
    if d.type in ("compressed", "noop"):  # no spans inside an envelope
        return Observed(frame.type, d.data, fields, None)
    spans = {_RULE_NAME.get(k, k): v for k, v in (d.spans or {}).items() if _RULE_NAME.get(k, k) in fields}
    return Observed(frame.type, d.data, fields, spans)


#: Per frame type: each field a rule may match, rewrite or corrupt, as (offset, size)
#: in an uncompressed frame sent with a timeout (a frame's own spans say where, §3).
FIELDS: dict[str, dict[str, tuple[int, int]]] = {
    kind: {_RULE_NAME.get(k, k): span for k, span in LAYOUT.spans(kind).items() if k in names}
    for kind, names in _RULE_FIELDS.items()
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
        elif mid in self._answered.get(conn, set()):
            self.violations.append(Violation("reply-twice", conn, direction, index, f"a second reply for msg_id {mid}"))
        # (also after a reply without a request: the first reply a connection gets may be one)
        self._answered.setdefault(conn, set()).add(mid)


def _observer(max_frame_size: int, direction: str, session: dict[str, Any]) -> Observer:
    return SeastarObserver(max_frame_size, direction, session)


ADAPTER = Adapter(observer=_observer, fields=FIELDS, byte_order="little", checker=SeastarChecker, prefix="ss")
