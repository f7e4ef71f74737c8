"""What the Pravega 2017 draft cases share: the spec, its one profile, each case's
segment (:func:`segment_of`), :class:`ServerObserver` (what a draft segment store
sends) and the helpers of the cases.
"""

from __future__ import annotations

import uuid
from typing import Any

import trio

from ....errors import ProtocolError
from ....pravega.draft2017.connection import DEFAULT_LIMITS, ClientConnection
from ....pravega.draft2017.events import ConnectionClosed, KeepAliveReceived, ReplyReceived
from ....pravega.draft2017.frames import (
    AppendSetup,
    BeginAppendBlock,
    DataAppended,
    EndAppendBlock,
    PartialMessage,
    ReadSegment,
    SegmentRead,
    SetupAppend,
)
from ....pravega.frames import HEADER, encode_event
from ...conversation import Conversation, MachineObserver, Token
from ...model import Verdict

SPEC = "specs/pravega-draft-2017/README.md"
PASS = Verdict.PASS
ALL = "strict"
CLOSED = "FIN RST"

PROFILES = {"strict": f"the behaviour {SPEC} specifies (refwire's segment store, draft listener)"}
FEATURES: dict[str, str] = {}

#: Event payload size of the small cases: every Event frame is 8 + 16 = 24 segment bytes (§6.1).
PAYLOAD = 16
EVENT = HEADER + PAYLOAD


def segment_of(case_id: str, run_id: str = "") -> str:
    """The case's own segment in run ``run_id`` (§13): ``pd.S2.1`` in run
    ``0a1b2c3d`` -> ``conform-pd-S2-1-0a1b2c3d`` (without a run id: ``conform-pd-S2-1``).
    The run id keeps runs against one long-lived store apart (:mod:`refwire.conform.ids`)."""
    name = "conform-" + case_id.replace(".", "-")
    return f"{name}-{run_id}" if run_id else name


# --------------------------------------------------------------------------- observer


class ServerObserver(MachineObserver):
    """Tokens for what a draft segment store sends, decoded (and reassembled from
    partial messages, §5) by refwire's own client machine: ``setup L``,
    ``ack L``, ``read O n=N``, ``keepalive N``; ``invalid <field>`` at the first
    byte that does not decode.  It also counts the PartialMessage frames that
    carried the replies (:attr:`parts`) and keeps the SegmentReads and KeepAlive
    data for the cases to compare."""

    def __init__(self) -> None:
        super().__init__(ClientConnection(DEFAULT_LIMITS), eof="eof")
        self.reads: list[SegmentRead] = []
        self.keepalives: list[bytes] = []
        #: PartialMessage frames received (a header scan, independent of the machine)
        self.parts = 0
        self._scan = bytearray()
        self._skip = 0

    def feed(self, data: bytes) -> list[Token]:
        if not self.broken:
            self._count_parts(data)
        return super().feed(data)

    def _count_parts(self, data: bytes) -> None:
        """Walk the frame headers (§1) to count PartialMessage frames."""
        buf = self._scan
        buf += data
        while True:
            if self._skip:
                n = min(self._skip, len(buf))
                del buf[:n]
                self._skip -= n
                if self._skip:
                    return
            if len(buf) < HEADER:
                return
            code = int.from_bytes(buf[:4], "big", signed=True)
            length = int.from_bytes(buf[4:8], "big", signed=True)
            if length < 0:
                return
            if code == PartialMessage.TYPE:
                self.parts += 1
            del buf[:HEADER]
            self._skip = length

    def tokens(self, ev: Any) -> list[Token]:
        if isinstance(ev, ConnectionClosed):
            return [("closed", {"type": "closed", "reason": ev.reason})]
        if isinstance(ev, KeepAliveReceived):
            self.keepalives.append(ev.data)
            return [(f"keepalive {len(ev.data)}", {"type": "KeepAlive", "data": ev.data.hex()})]
        if not isinstance(ev, ReplyReceived):
            return []
        cmd = ev.command
        if isinstance(cmd, AppendSetup):
            lvl = cmd.connection_offset_ack_level
            return [(f"setup {lvl}", {"type": "AppendSetup", "segment": cmd.segment, "level": lvl})]
        if isinstance(cmd, DataAppended):
            return [(f"ack {cmd.ack_level}", {"type": "DataAppended", "level": cmd.ack_level})]
        if isinstance(cmd, SegmentRead):
            self.reads.append(cmd)
            info = {"type": "SegmentRead", "at_tail": cmd.at_tail, "end_of_segment": cmd.end_of_segment}
            return [(f"read {cmd.offset} n={len(cmd.data)}", info)]
        return [(cmd.NAME, {"type": cmd.NAME})]


# --------------------------------------------------------------------------- helpers

def obs(c: Conversation) -> ServerObserver:
    o = c.observer
    assert isinstance(o, ServerObserver)
    return o


def connection_id(c: Conversation) -> uuid.UUID:
    """The case's ConnectionId, from the case seed (§6.1)."""
    return uuid.UUID(int=c.rng.getrandbits(128))


def payloads(c: Conversation, n: int, size: int = PAYLOAD) -> list[bytes]:
    """``n`` event payloads from the case seed."""
    return [c.rng.randbytes(size) for _ in range(n)]


def events_of(items: list[bytes]) -> bytes:
    """The segment bytes of these payloads: their whole Event frames (§6.1)."""
    return b"".join(encode_event(p) for p in items)


def block(cid: uuid.UUID, offset: int, inner: bytes, n: int) -> bytes:
    """BeginAppendBlock(offset, W = len(inner)) + inner + EndAppendBlock(offset + n, n) (§6.3)."""
    begin = BeginAppendBlock(connection_id=cid, connection_offset=offset, length=len(inner)).encode()
    end = EndAppendBlock(connection_id=cid, connection_offset=offset + n, block_length=n).encode()
    return begin + inner + end


def raw_frame(code: int, payload: bytes, length: int | None = None) -> bytes:
    """A frame with any type code and (declared) length (§1), for hostile input."""
    n = len(payload) if length is None else length
    return code.to_bytes(4, "big", signed=True) + n.to_bytes(4, "big", signed=True) + payload


async def answered(c: Conversation, token: str, timeout: float = 3.0) -> bool:
    return await c.wait_for(lambda cv: token in cv.tokens, timeout, label=token)


async def setup(c: Conversation, cid: uuid.UUID, segment: str, *, split: str = "whole") -> bool:
    await c.send(SetupAppend(connection_id=cid, segment=segment).encode(), label=f"SetupAppend {segment}", split=split)
    return await c.wait_for(lambda cv: any(t.startswith("setup ") for t in cv.tokens), 3.0, label="AppendSetup")


async def read_back(c: Conversation, segment: str, want: bytes, *, label: str = "read-back identical") -> None:
    """ReadSegment from 0 for a little more than ``want`` (§7): the reply must carry exactly ``want``."""
    before = len(obs(c).reads)
    await c.send(ReadSegment(segment=segment, offset=0, suggested_length=len(want) + 64).encode(), label="ReadSegment 0")
    if await c.wait_for(lambda cv: len(obs(cv).reads) > before, 4.0, label="SegmentRead"):
        if obs(c).reads[before].data == want:
            c.note(label)


async def side_read(c: Conversation, segment: str, suggested: int) -> bytes | None:
    """Read ``segment`` from 0 over a second connection (``c.open_another``); None if no reply."""
    if c.open_another is None:
        raise RuntimeError("this runner cannot open a second connection to the testee")
    o = ServerObserver()
    stream: trio.abc.Stream | None = None
    with trio.move_on_at(min(trio.current_time() + 3.0 * c.time_scale, c.deadline)):
        stream = await c.open_another()
        await stream.send_all(ReadSegment(segment=segment, offset=0, suggested_length=suggested).encode())
        while not o.reads:
            data = await stream.receive_some(65536)
            if not data:
                break
            o.feed(bytes(data))
    if stream is not None:
        with trio.move_on_after(1.0) as scope:
            scope.shield = True
            await stream.aclose()
    return o.reads[0].data if o.reads else None


def _parse_events(data: bytes) -> list[bytes] | None:
    """The payloads of the Event frames stored (§6.1); None if the bytes are not whole Events."""
    from ....pravega.client import parse_events

    try:
        found, used = parse_events(data)
    except ProtocolError:
        return None
    return [payload for _offset, payload in found] if used == len(data) else None
