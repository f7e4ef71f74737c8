"""TANK traffic, described frame by frame (specs/tank/README.md §2, §3).

Every frame, in both directions, is ``msgId:u8 payloadLen:u32le payload`` (§2);
its type is the message's name (:data:`~refwire.tank.frames.MSG_NAMES`:
``Produce``, ``Consume``, ``Ping`` ...).  :data:`LAYOUT` gives each type's
fixed-position fields as data, named as refwire's rules and vectors name them:
``msg_id`` (the spec's ``msgId``), ``length`` (``payloadLen``, the payload's size,
header excluded) and ``request_id`` (``reqId``), where a request has one (§3).
A response puts its ``request_id`` elsewhere: :data:`RESPONSE_LAYOUT`, and every
:class:`~refwire.describe.Described` frame carries the spans of its direction.

:func:`describer` is lenient: any known message id starts a frame in either
direction, whatever a conformant peer may send there; a frame is cut by its
header alone and its payload decoded with refwire's own codec
(:func:`~refwire.tank.frames.decode_request` client to broker,
:func:`~refwire.tank.responses.decode_response` broker to client) into
``frame``.  A payload that does not decode leaves its frame a frame (its
header still cuts the stream): ``frame`` is None and ``error`` says why.  An
unknown message id, or a ``payloadLen`` over the limit, is the first byte that
is no frame: the rest of the direction is undecoded bytes.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from ..describe import Described, Describer, Field, FrameLayout, Layout, LengthFramed
from ..errors import LocalProtocolError, ProtocolError
from .frames import (
    CONSUME,
    DEFAULT_LIMITS,
    HEADER_SIZE,
    MSG_NAMES,
    PING,
    PRODUCE,
    PRODUCE_WITH_SEQNUM,
    REQUEST_IDS,
    RESPONSE_IDS,
    decode_request,
)
from .responses import decode_response

__all__ = ["LAYOUT", "RESPONSE_LAYOUT", "TankDescriber", "describer"]

PROTOCOL: Final = "tank"

_HEAD: Final = (Field("msg_id", 0, 1), Field("length", 1, 4))
#: requests that open with ``clientVersion:u16`` (§3): their ``requestId`` follows it
_VERSIONED: Final = frozenset({PRODUCE, PRODUCE_WITH_SEQNUM, CONSUME})
#: the smallest payload of each request (§3: every count zero, every string empty)
_MIN_REQUEST: Final = {
    PRODUCE: 2 + 4 + 1 + 1 + 4 + 1, PRODUCE_WITH_SEQNUM: 2 + 4 + 1 + 1 + 4 + 1, CONSUME: 2 + 4 + 1 + 8 + 4 + 1,
    0x06: 4 + 1, 0x07: 4 + 1 + 2 + 1, 0x08: 4 + 1 + 2, 0x0A: 4, 0x0B: 4 + 1, 0x0C: 4 + 1,
}  # fmt: skip
#: the smallest payload of each response (Produce: no partition; Consume: headerLen, reqId, no topic)
_MIN_RESPONSE: Final = {PRODUCE: 4, CONSUME: 4 + 4 + 1, 0x06: 4 + 1 + 2, 0x07: 4 + 1 + 1, 0x08: 4 + 1 + 2 + 1,
                        0x0A: 4 + 1 + 1 + 4 + 4, 0x0B: 4 + 4 + 1, 0x0C: 4}  # fmt: skip


def _layout(ids: frozenset[int], rid_at: dict[int, int], minimum: dict[int, int]) -> dict[str, FrameLayout]:
    out: dict[str, FrameLayout] = {}
    for msg_id, name in MSG_NAMES.items():
        if msg_id in ids and msg_id != PING:
            at = rid_at.get(msg_id, HEADER_SIZE)
            out[name] = FrameLayout(name, (*_HEAD, Field("request_id", at, 4)), HEADER_SIZE + minimum[msg_id])
        else:
            out[name] = FrameLayout(name, _HEAD, HEADER_SIZE)
    return out


_NOTES: Final = (
    "Every frame is msgId:u8 payloadLen:u32le payload (§2): 'length' is payloadLen, the payload's size without the "
    "5-byte header. These are the requests' layouts (client to broker, §3): requestId follows clientVersion:u16 in "
    "Produce, ProduceWithSeqnum and Consume (offset 7) and opens the payload of the others (offset 5); Ping has none "
    "(never answered); ReplicaID (0x04, obsolete) and ConsumePeer (0x09, broker to broker) are refused by a broker, "
    "their payload unknown. A response (RESPONSE_LAYOUT) has its requestId at 5, but a Consume response's at 9 "
    "(after headerLen:u32); a ProduceWithSeqnum is answered by a Produce. Past these fields nothing is at a fixed "
    "place: str8 strings (u8 length), LEB128 varints (bundleLen, configLen), per-topic and per-partition lists, "
    "opFlags only when clientVersion >= 3, consume partition entries by their error code, bundles (§4) and consume "
    "chunks (§5) nested in Produce requests and Consume responses."
)

#: The requests' frames (client to broker, §3): what a rule on a frame type names.
LAYOUT: Final = Layout("little", _layout(REQUEST_IDS, {i: 7 for i in _VERSIONED}, _MIN_REQUEST), _NOTES)
#: The responses' frames (broker to client, §3): ``request_id`` after ``headerLen:u32`` in a Consume's.
RESPONSE_LAYOUT: Final = Layout("little", _layout(RESPONSE_IDS, {CONSUME: 9}, _MIN_RESPONSE), _NOTES)


class TankDescriber(LengthFramed):
    """One direction (``c2s``: requests, ``s2c``: responses) of one TANK connection."""

    HEADER = HEADER_SIZE
    PROTOCOL = PROTOCOL

    def __init__(self, max_frame_size: int, direction: str = "c2s") -> None:
        super().__init__(max_frame_size)
        self.direction = direction
        self._layout = LAYOUT if direction == "c2s" else RESPONSE_LAYOUT
        self._decode = decode_request if direction == "c2s" else decode_response
        self._limits = attrs.evolve(DEFAULT_LIMITS, max_frame_size=max_frame_size)

    def starts(self, first: int, offset: int) -> ProtocolError | None:
        if first in MSG_NAMES:
            return None
        return LocalProtocolError(
            f"unknown message id {first:#04x}", protocol=PROTOCOL, frame=f"0x{first:02x}", field="msgId", offset=offset
        )

    def header(self, head: bytes, offset: int) -> tuple[str, int]:
        return MSG_NAMES[head[0]], HEADER_SIZE + int.from_bytes(head[1:5], "little")

    def describe(self, frame_type: str, data: bytes, offset: int) -> Described:
        fields = self._layout.read(frame_type, data)
        spans = {k: v for k, v in self._layout.spans(frame_type).items() if k in fields}
        try:
            frame: Any = self._decode(data[0], data[HEADER_SIZE:], offset=offset, limits=self._limits)
        except ProtocolError as exc:  # its header still cuts the stream: the next frame follows it
            return Described(frame_type, offset, data, fields, spans=spans, error=exc)
        return Described(frame_type, offset, data, fields, frame=frame, spans=spans)


def describer(max_frame_size: int, direction: str = "c2s", session: dict[str, Any] | None = None) -> Describer:
    """A fresh lenient describer of one direction (``c2s`` or ``s2c``) of one TANK
    connection; frames over ``max_frame_size`` (header included) end the framing.
    ``session`` is not used (the directions are described apart: a produce
    response's errors are laid out by its request, which the tools match)."""
    return TankDescriber(max_frame_size, direction)
