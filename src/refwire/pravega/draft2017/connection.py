"""Sans-IO machines of the 2017 draft dialect (specs/pravega-draft-2017/README.md §4-§6).

Same API shape as every refwire machine: ``receive_data``, ``next_event`` →
event or ``NEED_DATA``, ``send`` → bytes, ``data_to_send`` for what the machine
owes on its own (KeepAlive echoes).

* **Partial messages** (§4): any message may arrive as PartialMessage parts
  (Begin, Middle…, End) whose data are consecutive slices of its serialized
  frame; one partial message at a time; reassembly is limited.
* **Append blocks** (§5): BeginAppendBlock(offset, wire length) … Events (whole
  or as partial messages; KeepAlives as padding) … EndAppendBlock(offset, block
  length).  Offsets count segment bytes per (ConnectionId, segment) and continue
  from the stored ack level; every offset, wire length and block length is
  checked, and a violation is a :class:`RemoteProtocolError` naming the field
  (the connection closes; nothing of the block is stored).  An Event whose
  partial message begins inside the block may end after EndAppendBlock: the
  block completes when it does.
"""

from __future__ import annotations

import enum
import uuid
from typing import Final

import attrs

from ...errors import LocalProtocolError
from ...sansio import FrameMachine, NeedData
from ...wire import Limits, check_limit
from ..codec import HEADER, MAX_WIRECOMMAND_SIZE, Command, CommandDecoder, decode_command
from .commands import (
    DRAFT,
    PROTOCOL,
    AppendSetup,
    BeginAppendBlock,
    DataAppended,
    EndAppendBlock,
    Event,
    KeepAlive,
    Part,
    PartialMessage,
    SetupAppend,
)

__all__ = [
    "DEFAULT_LIMITS",
    "SERVER_TRANSITIONS",
    "BlockAppend",
    "ClientConnection",
    "ConnectionClosed",
    "KeepAliveReceived",
    "ReplyReceived",
    "RequestReceived",
    "ServerConnection",
    "State",
    "split_message",
]

DEFAULT_LIMITS: Final = Limits(
    max_frame_size=MAX_WIRECOMMAND_SIZE,
    max_decompressed_size=16 * 1024 * 1024,  #: largest reassembled partial message
    max_string_size=0xFFFF,
    max_window=2000,  #: ConnectionIds set up per connection
    max_buffered=32 * 1024 * 1024,  #: largest append block (segment bytes)
)


class State(enum.Enum):
    OPEN = "open"
    IN_BLOCK = "in-block"  #: between BeginAppendBlock and EndAppendBlock
    TRAILER = "trailer"  #: EndAppendBlock seen; the block's last Event is still arriving in parts
    CLOSED = "closed"
    ERROR = "error"


#: (state, input) -> next state; anything else is a protocol error (tests walk every pair).
SERVER_TRANSITIONS: Final[dict[tuple[State, str], State]] = {
    (State.OPEN, "setup"): State.OPEN,
    (State.OPEN, "begin"): State.IN_BLOCK,
    (State.OPEN, "request"): State.OPEN,
    (State.OPEN, "keepalive"): State.OPEN,
    (State.OPEN, "partial"): State.OPEN,
    (State.OPEN, "eof"): State.CLOSED,
    (State.OPEN, "reset"): State.CLOSED,
    (State.IN_BLOCK, "event"): State.IN_BLOCK,
    (State.IN_BLOCK, "partial"): State.IN_BLOCK,
    (State.IN_BLOCK, "keepalive"): State.IN_BLOCK,
    (State.IN_BLOCK, "end"): State.OPEN,
    (State.IN_BLOCK, "end-trailer"): State.TRAILER,
    (State.IN_BLOCK, "reset"): State.CLOSED,
    (State.TRAILER, "partial"): State.TRAILER,
    (State.TRAILER, "trailer-done"): State.OPEN,
    (State.TRAILER, "keepalive"): State.TRAILER,
    (State.TRAILER, "reset"): State.CLOSED,
}

CLIENT_TRANSITIONS: Final[dict[tuple[State, str], State]] = {
    (State.OPEN, "reply"): State.OPEN,
    (State.OPEN, "keepalive"): State.OPEN,
    (State.OPEN, "partial"): State.OPEN,
    (State.OPEN, "eof"): State.CLOSED,
    (State.OPEN, "reset"): State.CLOSED,
}


@attrs.frozen
class RequestReceived:
    command: Command


@attrs.frozen
class BlockAppend:
    """A complete append block: store ``data`` and the new level atomically."""

    segment: str
    connection_id: uuid.UUID
    data: bytes  #: the block's Event frames, as stored
    level: int  #: the connection offset after this block
    previous_level: int  #: the level before it (what the store's record must still say)


@attrs.frozen
class ReplyReceived:
    command: Command


@attrs.frozen
class KeepAliveReceived:
    data: bytes


@attrs.frozen
class ConnectionClosed:
    clean: bool = True
    reason: str = ""


def split_message(frame: bytes, cuts: list[int]) -> list[bytes]:
    """``frame`` (one serialized message) as PartialMessage frames cut at ``cuts``
    (offsets inside the frame, sorted; repeats give empty parts).  No cuts gives
    a Begin with everything and an empty End."""
    points = [0, *sorted(min(max(c, 0), len(frame)) for c in cuts), len(frame)]
    slices = [frame[points[i] : points[i + 1]] for i in range(len(points) - 1)]
    if len(slices) == 1:
        slices.append(b"")
    last = len(slices) - 1
    return [
        PartialMessage(part=int(Part.BEGIN if i == 0 else Part.END if i == last else Part.MIDDLE), data=piece).encode()
        for i, piece in enumerate(slices)
    ]


@attrs.define
class _Session:
    segment: str
    offset: int  #: running connection offset: stored level + blocks received since


@attrs.define
class _Block:
    connection_id: uuid.UUID
    begin_offset: int
    wire_length: int
    begin_at: int  #: stream offset of the BeginAppendBlock frame
    wire_seen: int = 0
    data: bytearray = attrs.field(factory=bytearray)
    end: EndAppendBlock | None = None


class _Reassembly:
    """One partial message in progress (§4)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf: bytearray | None = None
        self.started_at = 0
        self.in_block = False  #: began inside an append block

    def feed(self, msg: PartialMessage, offset: int, *, in_block: bool) -> bytes | None:
        """The complete frame when ``msg`` is its End part, else None."""
        if msg.part == Part.BEGIN:
            if self.buf is not None:
                raise LocalProtocolError(
                    f"a partial message begins while the one begun at offset {self.started_at} is incomplete",
                    protocol=PROTOCOL,
                    frame="PartialMessage",
                    field="part",
                    offset=offset + HEADER,
                )
            self.buf = bytearray()
            self.started_at = offset
            self.in_block = in_block
        elif msg.part in (Part.MIDDLE, Part.END):
            if self.buf is None:
                raise LocalProtocolError(
                    f"{Part(msg.part).name.title()} part without a Begin",
                    protocol=PROTOCOL,
                    frame="PartialMessage",
                    field="part",
                    offset=offset + HEADER,
                )
        else:
            raise LocalProtocolError(
                f"part must be 0 (Begin), 1 (Middle) or 2 (End), got {msg.part}",
                protocol=PROTOCOL,
                frame="PartialMessage",
                field="part",
                offset=offset + HEADER,
            )
        assert self.buf is not None
        check_limit(
            len(self.buf) + len(msg.data),
            self.limit,
            name="max_decompressed_size",
            field="data",
            frame="PartialMessage",
            offset=offset + HEADER + 1,
            protocol=PROTOCOL,
        )
        self.buf += msg.data
        if msg.part != Part.END:
            return None
        frame = bytes(self.buf)
        self.buf = None
        return frame

    @property
    def active(self) -> bool:
        return self.buf is not None


def _decode_whole(frame: bytes, at: int) -> Command:
    """The one message a reassembled partial message must hold."""
    if len(frame) < HEADER:
        raise LocalProtocolError(
            f"reassembled partial message of {len(frame)} bytes is shorter than a header",
            protocol=PROTOCOL,
            frame="PartialMessage",
            field="data",
            offset=at,
        )
    code = int.from_bytes(frame[:4], "big", signed=True)
    n = int.from_bytes(frame[4:8], "big", signed=True)
    if n != len(frame) - HEADER:
        raise LocalProtocolError(
            f"reassembled message says {n} payload bytes but holds {len(frame) - HEADER}",
            protocol=PROTOCOL,
            frame="PartialMessage",
            field="data",
            offset=at,
        )
    if code == PartialMessage.TYPE:
        raise LocalProtocolError(
            "a partial message may not carry a partial message",
            protocol=PROTOCOL,
            frame="PartialMessage",
            field="data",
            offset=at,
        )
    return decode_command(code, frame, start=HEADER, base=at, allow_inner=True, dialect=DRAFT)


class _Base(FrameMachine):
    PROTOCOL = PROTOCOL
    ERROR_STATE = State.ERROR
    CLOSED_STATE = State.CLOSED

    def __init__(self, limits: Limits) -> None:
        super().__init__(State.OPEN)
        self.limits = limits
        self._decoder = CommandDecoder(limits, allow_inner=True, dialect=DRAFT)
        self._partial = _Reassembly(limits.max_decompressed_size)

    def _feed(self, data: bytes | bytearray | memoryview) -> None:
        self._decoder.feed(data)

    def _on_frame(self, cmd: Command, offset: int, size: int) -> None:
        raise NotImplementedError

    def _idle_event(self) -> ConnectionClosed | None:
        if self.state is State.CLOSED:
            return ConnectionClosed(clean=not self._reset, reason="reset" if self._reset else "")
        return None

    def _pump(self) -> None:
        dec = self._decoder
        while not self._events:
            start = dec.offset
            cmd = dec.next_command()
            if cmd is None:
                return
            self._on_frame(cmd, start, dec.offset - start)

    def _at_eof(self) -> None:
        if self._reset:
            self._transition("reset")
            self._events.append(ConnectionClosed(clean=False, reason="reset"))
            return
        dec = self._decoder
        if dec.buffered:
            raise LocalProtocolError(
                f"connection closed inside a frame ({dec.buffered} bytes of it received)",
                protocol=PROTOCOL,
                frame=dec.pending_frame_name(),
                field="(eof)",
                offset=dec.offset,
            )
        if self._partial.active:
            raise LocalProtocolError(
                "connection closed inside a partial message",
                protocol=PROTOCOL,
                frame="PartialMessage",
                field="(eof)",
                offset=self._partial.started_at,
            )
        self._transition("eof", offset=dec.offset)
        self._events.append(ConnectionClosed())


class ServerConnection(_Base):
    """The segment-store side of one draft-dialect connection."""

    TRANSITIONS = SERVER_TRANSITIONS

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        super().__init__(limits)
        self._sessions: dict[uuid.UUID, _Session] = {}
        self._block: _Block | None = None

    def next_event(self) -> RequestReceived | BlockAppend | KeepAliveReceived | ConnectionClosed | NeedData:
        return self._next()  # type: ignore[no-any-return]

    # -- receive --------------------------------------------------------------------
    def _on_frame(self, cmd: Command, offset: int, size: int) -> None:
        block = self._block
        if block is not None and self.state is State.IN_BLOCK and not isinstance(cmd, EndAppendBlock):
            block.wire_seen += size  # wire bytes *between* Begin and End
        if isinstance(cmd, PartialMessage):
            in_block = self.state is State.IN_BLOCK
            if self.state is State.TRAILER and cmd.part == Part.BEGIN:
                raise LocalProtocolError(
                    "a new partial message begins before the block's last Event is complete",
                    protocol=PROTOCOL,
                    frame="PartialMessage",
                    field="part",
                    offset=offset + HEADER,
                )
            if self.state is State.IN_BLOCK and cmd.part != Part.BEGIN and not self._partial.in_block:
                raise LocalProtocolError(
                    "a partial message begun outside the block continues inside it",
                    protocol=PROTOCOL,
                    frame="PartialMessage",
                    field="part",
                    offset=offset + HEADER,
                )
            self._transition("partial", offset=offset, frame="PartialMessage")
            frame = self._partial.feed(cmd, offset, in_block=in_block)
            if frame is not None:
                self._on_message(_decode_whole(frame, self._partial.started_at), self._partial.started_at, reassembled=True)
            return
        if self._partial.active and not self._partial.in_block and isinstance(cmd, BeginAppendBlock):
            raise LocalProtocolError(
                "BeginAppendBlock while a partial message is incomplete",
                protocol=PROTOCOL,
                frame="BeginAppendBlock",
                field="type",
                offset=offset,
            )
        self._on_message(cmd, offset, reassembled=False)

    def _on_message(self, cmd: Command, offset: int, *, reassembled: bool) -> None:
        if reassembled and self.state is State.TRAILER and not isinstance(cmd, Event):
            raise LocalProtocolError(
                f"the partial message that straddles EndAppendBlock must be an Event, not {cmd.NAME}",
                protocol=PROTOCOL,
                frame=cmd.NAME,
                field="type",
                offset=offset,
            )
        if isinstance(cmd, KeepAlive):
            self._transition("keepalive", offset=offset, frame="KeepAlive")
            self._out += KeepAlive(data=cmd.data).encode()
            self._events.append(KeepAliveReceived(cmd.data))
        elif isinstance(cmd, Event):
            block = self._block
            if block is None or self.state is State.OPEN:
                raise LocalProtocolError(
                    "Event outside an append block", protocol=PROTOCOL, frame="Event", field="type", offset=offset
                )
            block.data += cmd.encode()
            check_limit(
                len(block.data),
                self.limits.max_buffered,
                name="max_buffered",
                field="data",
                frame="Event",
                offset=offset,
                protocol=PROTOCOL,
            )
            if self.state is State.TRAILER:
                self._finish_block(offset, trailer=True)
            else:
                self._transition("event", offset=offset, frame="Event")
        elif self.state is not State.OPEN:
            if isinstance(cmd, EndAppendBlock) and not reassembled:
                self._on_end(cmd, offset)
            else:
                raise LocalProtocolError(
                    f"{cmd.NAME} inside an append block (only Events, partial messages and KeepAlives may be)",
                    protocol=PROTOCOL,
                    frame=cmd.NAME,
                    field="type",
                    offset=offset,
                )
        elif isinstance(cmd, SetupAppend):
            self._transition("setup", offset=offset, frame="SetupAppend")
            if cmd.connection_id not in self._sessions:
                check_limit(
                    len(self._sessions) + 1,
                    self.limits.max_window,
                    name="max_window",
                    field="connection_id",
                    frame="SetupAppend",
                    offset=offset,
                    protocol=PROTOCOL,
                )
            self._sessions.pop(cmd.connection_id, None)  # until the AppendSetup goes out
            self._events.append(RequestReceived(cmd))
        elif isinstance(cmd, BeginAppendBlock):
            self._on_begin(cmd, offset)
        elif isinstance(cmd, EndAppendBlock):
            raise LocalProtocolError(
                "EndAppendBlock without a BeginAppendBlock",
                protocol=PROTOCOL,
                frame="EndAppendBlock",
                field="type",
                offset=offset,
            )
        elif cmd.DIRECTION == "request":
            self._transition("request", offset=offset, frame=cmd.NAME)
            self._events.append(RequestReceived(cmd))
        else:
            raise LocalProtocolError(
                f"{cmd.NAME} is a reply, not a request", protocol=PROTOCOL, frame=cmd.NAME, field="type", offset=offset
            )

    def _on_begin(self, cmd: BeginAppendBlock, offset: int) -> None:
        session = self._sessions.get(cmd.connection_id)
        if session is None:
            raise LocalProtocolError(
                f"ConnectionId {cmd.connection_id} used before its AppendSetup",
                protocol=PROTOCOL,
                frame="BeginAppendBlock",
                field="connection_id",
                offset=offset + HEADER,
            )
        if cmd.connection_offset != session.offset:
            raise LocalProtocolError(
                f"ConnectionOffset {cmd.connection_offset} does not continue from {session.offset}",
                protocol=PROTOCOL,
                frame="BeginAppendBlock",
                field="connection_offset",
                offset=offset + HEADER + 16,
            )
        if cmd.length < 0:
            raise LocalProtocolError(
                f"negative block length {cmd.length}",
                protocol=PROTOCOL,
                frame="BeginAppendBlock",
                field="length",
                offset=offset + HEADER + 24,
            )
        self._transition("begin", offset=offset, frame="BeginAppendBlock")
        self._block = _Block(cmd.connection_id, cmd.connection_offset, cmd.length, offset)

    def _on_end(self, cmd: EndAppendBlock, offset: int) -> None:
        block = self._block
        assert block is not None
        if self.state is not State.IN_BLOCK:
            raise LocalProtocolError(
                "a second EndAppendBlock for the block", protocol=PROTOCOL, frame="EndAppendBlock", field="type", offset=offset
            )
        if cmd.connection_id != block.connection_id:
            raise LocalProtocolError(
                f"EndAppendBlock ConnectionId {cmd.connection_id} does not match its Begin's {block.connection_id}",
                protocol=PROTOCOL,
                frame="EndAppendBlock",
                field="connection_id",
                offset=offset + HEADER,
            )
        if block.wire_seen != block.wire_length:
            raise LocalProtocolError(
                f"{block.wire_seen} bytes between Begin and End, Begin said {block.wire_length}",
                protocol=PROTOCOL,
                frame="EndAppendBlock",
                field="length",
                offset=block.begin_at + HEADER + 24,
            )
        if cmd.block_length < 0 or cmd.connection_offset != block.begin_offset + cmd.block_length:
            raise LocalProtocolError(
                f"ConnectionOffset {cmd.connection_offset} is not Begin's {block.begin_offset} + block length {cmd.block_length}",
                protocol=PROTOCOL,
                frame="EndAppendBlock",
                field="connection_offset",
                offset=offset + HEADER + 16,
            )
        block.end = cmd
        if self._partial.active and self._partial.in_block:
            self._transition("end-trailer", offset=offset, frame="EndAppendBlock")
            return
        self._finish_block(offset, trailer=False)

    def _finish_block(self, offset: int, *, trailer: bool) -> None:
        block = self._block
        assert block is not None and block.end is not None
        end = block.end
        if len(block.data) != end.block_length:
            raise LocalProtocolError(
                f"the block holds {len(block.data)} bytes of Events, its End says {end.block_length}",
                protocol=PROTOCOL,
                frame="EndAppendBlock",
                field="block_length",
                offset=offset,
            )
        self._transition("trailer-done" if trailer else "end", offset=offset, frame="EndAppendBlock")
        session = self._sessions[block.connection_id]
        previous = session.offset
        session.offset = end.connection_offset
        self._block = None
        self._events.append(BlockAppend(session.segment, block.connection_id, bytes(block.data), end.connection_offset, previous))

    # -- send -------------------------------------------------------------------------
    def send(self, cmd: Command) -> bytes:
        """Encode a reply; an AppendSetup starts the ConnectionId's session at its level."""
        if cmd.DIRECTION not in ("reply", "both"):
            raise LocalProtocolError(f"a server does not send {cmd.NAME}", protocol=PROTOCOL, frame=cmd.NAME)
        if isinstance(cmd, AppendSetup):
            self._sessions[cmd.connection_id] = _Session(cmd.segment, cmd.connection_offset_ack_level)
        return cmd.encode()

    def block_stored(self, append: BlockAppend) -> bytes:
        """The block is durable: its DataAppended."""
        return DataAppended(connection_id=append.connection_id, ack_level=append.level).encode()


class ClientConnection(_Base):
    """The client side: replies (reassembled when the server splits them)."""

    TRANSITIONS = CLIENT_TRANSITIONS

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        super().__init__(limits)

    def next_event(self) -> ReplyReceived | KeepAliveReceived | ConnectionClosed | NeedData:
        return self._next()  # type: ignore[no-any-return]

    def send(self, cmd: Command) -> bytes:
        if cmd.DIRECTION not in ("request", "both", "inner"):
            raise LocalProtocolError(f"a client does not send {cmd.NAME}", protocol=PROTOCOL, frame=cmd.NAME)
        return cmd.encode()

    def _on_frame(self, cmd: Command, offset: int, size: int) -> None:
        if isinstance(cmd, PartialMessage):
            self._transition("partial", offset=offset, frame="PartialMessage")
            frame = self._partial.feed(cmd, offset, in_block=False)
            if frame is not None:
                self._on_reply(_decode_whole(frame, self._partial.started_at), self._partial.started_at)
            return
        self._on_reply(cmd, offset)

    def _on_reply(self, cmd: Command, offset: int) -> None:
        if isinstance(cmd, KeepAlive):
            self._transition("keepalive", offset=offset, frame="KeepAlive")
            self._events.append(KeepAliveReceived(cmd.data))
        elif cmd.DIRECTION == "reply":
            self._transition("reply", offset=offset, frame=cmd.NAME)
            self._events.append(ReplyReceived(cmd))
        else:
            raise LocalProtocolError(f"{cmd.NAME} is not a reply", protocol=PROTOCOL, frame=cmd.NAME, field="type", offset=offset)
