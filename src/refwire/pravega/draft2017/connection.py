"""Sans-IO machines of the 2017 draft dialect (specs/pravega-draft-2017/README.md §1-§6).

The one machine contract of :mod:`refwire.sansio`: ``receive_data(data, now=)``,
``next_event`` → event or ``NEED_DATA``, ``send(event, now=)`` (bytes leave only
through ``data_to_send``), ``next_deadline``/``handle_timer`` and ``send_failed``.

* **Timers** (§8): a :class:`ClientConnection` built with ``keepalive_interval``
  queues an empty KeepAlive every that many seconds, and with ``silence_timeout``
  gives up after that long without input (``ConnectionClosed(clean=False,
  reason="silence")``).  Deadlines are absolute times (the previous KeepAlive's
  time plus the interval, the latest input's plus the timeout), so repeated or
  early timer calls cannot make them creep.
* **Reply order** (§6.5, §7): the segment store's replies (KeepAlive echoes too)
  leave in the order of the requests that caused them, each once what it
  reports is durable: ``send(reply, now=, after=position)`` holds it (and every
  reply after it) until :meth:`ServerConnection.durable` says ``position`` is.

* **Frames** (§1-§3): an unknown or wrong-direction type is refused as soon
  as its 4 bytes are in, the length as soon as the header is in (not negative,
  whole frame ≤ ``limits.max_frame_size``, inside a block not past the Begin's
  wire length W), before any payload is buffered; whether the frame is allowed
  in the current state is checked once it is decoded.  Layouts are strict:
  trailing bytes are an error (§2, D11).
* **Partial messages** (§5): Begin, Middle…, End parts whose data are
  consecutive slices of one frame.  While one is incomplete only its parts,
  KeepAlive and (for one begun in a block) that block's EndAppendBlock may
  arrive (:data:`WHILE_PARTIAL`).  The reassembled bytes are checked as soon as
  4 bytes (type), 8 bytes (length ≤ ``limits.max_decompressed_size``, the
  ``max_partial_size``) and more than the announced length are in; errors
  about them are reported on the part (``PartialMessage``/``data``, stream
  offset of the part's first data byte) with an ``inner`` location.
* **Append blocks** (§6.3-§6.4): Begin(offset O, wire length W ≤
  ``limits.max_buffered``, the ``max_block_size``) … Events / parts /
  KeepAlive padding … End(O + N, N); every offset and length checked in the
  order of §6.3, each failure a :class:`RemoteProtocolError` naming the field
  (nothing of the block is stored).  An Event whose partial message begins in
  the block may end after EndAppendBlock: the block completes when it does.
* **Replies** (§5 "Sending"): a server reply longer than ``reply_part_size``
  goes out as parts of exactly that many data bytes, the last one shorter.

The frame intake both machines share (the header, layout and partial-message
checks above, the end of input) is :mod:`refwire.pravega.draft2017.machine`; the events the machines give
and take are in :mod:`~refwire.pravega.draft2017.events`.  The draft dialect has
no speed path: this is the one path.
"""

from __future__ import annotations

import math
import struct
import uuid
from collections import deque
from typing import Final

import attrs

from ...errors import LocalProtocolError, ProtocolError
from ...sansio import NeedData, closed_inside
from ...wire import Limits, check_limit
from ..budget import capped, check_share
from ..frames import HEADER, MAX_WIRECOMMAND_SIZE, Command, encode_command
from .events import BlockAppend, Blocks, ConnectionClosed, KeepAliveReceived, ReplyReceived, RequestReceived
from .frames import (
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
    ReadSegment,
    SegmentRead,
    SetupAppend,
)
from .machine import State, _Base
from .partial import error, split_message, split_reply, wrap_inner

__all__ = [
    "CLIENT_TRANSITIONS",
    "DEFAULT_LIMITS",
    "MAX_BLOCK_SIZE",
    "MAX_PARTIAL_SIZE",
    "REPLY_PART_SIZE",
    "SERVER_TRANSITIONS",
    "WHILE_PARTIAL",
    "ClientConnection",
    "ServerConnection",
    "State",
    "split_message",
    "split_reply",
]

MAX_PARTIAL_SIZE: Final = 16 * 1024 * 1024  #: §5 rule 4, §11: largest reassembled message
MAX_BLOCK_SIZE: Final = 16 * 1024 * 1024  #: §6.3 rule 1, §11: largest Begin ``length``
REPLY_PART_SIZE: Final = 1024 * 1024  #: §5 "Sending", §11

#: §11.  ``max_decompressed_size`` is the ``max_partial_size``, ``max_buffered``
#: the ``max_block_size``, ``max_window`` the ConnectionIds set up per connection.
DEFAULT_LIMITS: Final = Limits(
    max_frame_size=MAX_WIRECOMMAND_SIZE,
    max_decompressed_size=MAX_PARTIAL_SIZE,
    max_string_size=0xFFFF,
    max_window=2000,
    max_buffered=MAX_BLOCK_SIZE,
)

#: (state, input) -> next state; anything else is a protocol error on ``type`` (tests walk every pair).
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

#: §5 rule 3 (D12): the inputs allowed while a partial message is incomplete, per state.
WHILE_PARTIAL: Final[dict[State, frozenset[str]]] = {
    State.OPEN: frozenset({"partial", "keepalive"}),
    State.IN_BLOCK: frozenset({"partial", "keepalive", "end", "end-trailer"}),  # only for one begun in the block
    State.TRAILER: frozenset({"partial", "keepalive"}),
}

_SERVER_INPUT: Final = {
    SetupAppend.TYPE: "setup",
    BeginAppendBlock.TYPE: "begin",
    EndAppendBlock.TYPE: "end",
    ReadSegment.TYPE: "request",
    KeepAlive.TYPE: "keepalive",
    PartialMessage.TYPE: "partial",
    Event.TYPE: "event",
}
_CLIENT_INPUT: Final = {
    AppendSetup.TYPE: "reply",
    DataAppended.TYPE: "reply",
    SegmentRead.TYPE: "reply",
    KeepAlive.TYPE: "keepalive",
    PartialMessage.TYPE: "partial",
}


def _add_event(block: bytearray, payload: bytes) -> None:
    """Append ``payload`` framed as an Event (``encode_event``) without copying it twice (§11)."""
    block += _EVENT_HEADER.pack(0, len(payload))
    block += payload


_EVENT_HEADER: Final = struct.Struct(">ii")


@attrs.define
class _Session:
    segment: str
    offset: int  #: running connection offset: stored level + blocks received since


@attrs.define
class _Block:
    connection_id: uuid.UUID
    begin_offset: int
    wire_length: int
    length_at: int  #: stream offset of Begin's ``length`` (or of the data of the End part that completed a partial Begin)
    partial_begin: bool  #: the Begin arrived as a partial message
    wire_seen: int = 0
    data: bytearray = attrs.field(factory=bytearray)
    end: EndAppendBlock | None = None
    end_at: int = 0

    def length_error(self, reason: str) -> LocalProtocolError:
        """§6.3 rule 3: an error on Begin's ``length``."""
        if self.partial_begin:
            return wrap_inner(error(reason, "BeginAppendBlock", "length", HEADER + 24), self.length_at)
        return error(reason, "BeginAppendBlock", "length", self.length_at)


class ServerConnection(_Base):
    """The segment-store side of one draft-dialect connection."""

    TRANSITIONS = SERVER_TRANSITIONS
    _INPUT = _SERVER_INPUT

    def __init__(
        self, limits: Limits = DEFAULT_LIMITS, *, reply_part_size: int = REPLY_PART_SIZE, frame_timeout: float | None = None
    ) -> None:
        """``limits.max_connection_memory`` caps frames, partial messages and blocks at its
        frame share each (§11, :mod:`refwire.pravega.budget`); :attr:`limits` holds the caps in force."""
        #: the limits replies are split by: the dialect's, not the budget's receive caps
        self._reply_limits = limits
        limits, bound = capped(limits, "max_frame_size", "max_decompressed_size", "max_buffered")
        super().__init__(limits, bound)
        if reply_part_size < 1:
            raise ValueError("reply_part_size must be positive")
        self.frame_timeout = frame_timeout
        self.reply_part_size = reply_part_size
        self._sessions: dict[uuid.UUID, _Session] = {}
        self._block: _Block | None = None
        #: replies waiting for their position to be durable (and those after them), in order
        self._held: deque[tuple[int, bytes]] = deque()
        self._held_bytes = 0  #: bytes of the replies in ``_held``
        self._durable = 0  #: the durable position reported by :meth:`durable`

    def next_event(self) -> RequestReceived | BlockAppend | KeepAliveReceived | ConnectionClosed | NeedData:
        return self._next()  # type: ignore[no-any-return]

    def _allowed(self, inp: str) -> bool:
        state = self.state
        ok = (state, inp) in SERVER_TRANSITIONS or (inp == "end" and (state, "end-trailer") in SERVER_TRANSITIONS)
        if ok and self._partial.active:
            ok = inp in WHILE_PARTIAL.get(state, frozenset()) and (state is not State.IN_BLOCK or self._partial.in_block)
        return ok

    def _check_length(self, code: int, n: int, offset: int) -> None:
        super()._check_length(code, n, offset)
        block = self._block
        if self.state is State.IN_BLOCK and code != EndAppendBlock.TYPE and block is not None:
            if block.wire_seen + HEADER + n > block.wire_length:
                raise block.length_error(
                    f"a frame of {HEADER + n} bytes at offset {offset} would end past the block's "
                    f"{block.wire_length} wire bytes ({block.wire_seen} used)"
                )

    def _at_eof(self) -> None:
        if not self._reset:
            self._eof_errors()
            if self._block is not None:
                raise closed_inside("an append block", protocol=PROTOCOL, frame="BeginAppendBlock")
        super()._at_eof()

    # -- receive --------------------------------------------------------------------
    def _on_frame(self, cmd: Command, offset: int, size: int) -> None:
        block = self._block
        if block is not None and self.state is State.IN_BLOCK and not isinstance(cmd, EndAppendBlock):
            block.wire_seen += size  # wire bytes *between* Begin and End
        if not isinstance(cmd, PartialMessage):
            self._on_message(cmd, offset, whole=True)
            return
        in_block = self.state is State.IN_BLOCK
        self._start_part(cmd, offset, in_block=in_block)
        self._transition("partial", offset=offset, frame="PartialMessage")
        pm = self._partial
        data_at = offset + HEADER + 1
        pm.add(cmd.data, data_at, self._check_inner_type)
        if cmd.part != Part.END:
            return
        began_in_block = pm.in_block
        msg = self._decode_reassembled(pm.finish(data_at), data_at)
        if began_in_block:  # an Event or a KeepAlive (rule 4), maybe after the End (§6.4)
            if isinstance(msg, KeepAlive):
                self._echo(msg)
            else:
                assert self._block is not None
                _add_event(self._block.data, msg.data)  # type: ignore[attr-defined]
            if self.state is State.TRAILER:
                self._finish_block(trailer=True)
            return
        try:
            self._on_message(msg, 0, whole=False, data_at=data_at)
        except ProtocolError as exc:
            raise wrap_inner(exc, data_at) from None

    def _check_inner_type(self, code: int) -> None:
        """§5 rule 4 at 4 bytes: known, a request, not a partial message; in a block Event or KeepAlive only."""
        cls = DRAFT.commands.get(code)
        if cls is None:
            raise error(f"unknown type code {code}", None, "type", 0)
        if code == PartialMessage.TYPE:
            raise error("a partial message may not carry a partial message", cls.NAME, "type", 0)
        if code not in _SERVER_INPUT:
            raise error(f"{cls.NAME} is not sent to a server", cls.NAME, "type", 0)
        if self._partial.in_block:
            if code not in (Event.TYPE, KeepAlive.TYPE):
                raise error(
                    f"a partial message begun in a block must be an Event or KeepAlive, not {cls.NAME}", cls.NAME, "type", 0
                )
        elif code == Event.TYPE:
            raise error("Event outside an append block", cls.NAME, "type", 0)

    def _echo(self, msg: KeepAlive) -> None:
        self._queue(self._reply(msg), 0)
        self._events.append(KeepAliveReceived(msg.data))

    def _on_message(self, cmd: Command, offset: int, *, whole: bool, data_at: int = 0) -> None:
        """One message, whole at ``offset`` or reassembled (then ``offset`` is 0 and the
        caller reports errors on the part, §5 rule 5-6)."""
        if not whole:
            inp = _SERVER_INPUT[cmd.TYPE]
            if not self._allowed(inp):
                raise error(f"{cmd.NAME} is not allowed in state {self.state.value}", cmd.NAME, "type", offset)
        if isinstance(cmd, KeepAlive):
            self._transition("keepalive", offset=offset, frame="KeepAlive")
            self._echo(cmd)
        elif isinstance(cmd, Event):
            self._transition("event", offset=offset, frame="Event")
            assert self._block is not None
            _add_event(self._block.data, cmd.data)
        elif isinstance(cmd, SetupAppend):
            if cmd.connection_id not in self._sessions:
                check_limit(
                    len(self._sessions) + 1,
                    self.limits.max_window,
                    name="max_window",
                    field="connection_id",
                    frame="SetupAppend",
                    offset=offset + HEADER,
                    protocol=PROTOCOL,
                )
            self._transition("setup", offset=offset, frame="SetupAppend")
            self._sessions.pop(cmd.connection_id, None)  # until the AppendSetup goes out
            self._events.append(RequestReceived(cmd, offset if whole else None))
        elif isinstance(cmd, BeginAppendBlock):
            self._on_begin(cmd, offset, whole=whole, data_at=data_at)
        elif isinstance(cmd, EndAppendBlock):
            self._on_end(cmd, offset)
        else:
            self._transition("request", offset=offset, frame=cmd.NAME)
            self._events.append(RequestReceived(cmd, offset if whole else None))

    def _on_begin(self, cmd: BeginAppendBlock, offset: int, *, whole: bool, data_at: int) -> None:
        """§6.3 rule 1."""
        session = self._sessions.get(cmd.connection_id)
        if session is None:
            raise error(
                f"ConnectionId {cmd.connection_id} used before its AppendSetup",
                "BeginAppendBlock",
                "connection_id",
                offset + HEADER,
            )
        if cmd.connection_offset != session.offset:
            raise error(
                f"ConnectionOffset {cmd.connection_offset} is not the running offset {session.offset}",
                "BeginAppendBlock",
                "connection_offset",
                offset + HEADER + 16,
            )
        if cmd.length < 0:
            raise error(f"negative block length {cmd.length}", "BeginAppendBlock", "length", offset + HEADER + 24)
        check_share(
            cmd.length,
            self.limits,
            "max_buffered",
            self._bound,
            name="max_block_size",
            field="length",
            frame="BeginAppendBlock",
            offset=offset + HEADER + 24,
            protocol=PROTOCOL,
        )
        self._transition("begin", offset=offset, frame="BeginAppendBlock")
        length_at = offset + HEADER + 24 if whole else data_at
        self._block = _Block(cmd.connection_id, cmd.connection_offset, cmd.length, length_at, not whole)

    def _on_end(self, cmd: EndAppendBlock, offset: int) -> None:
        """§6.3 rules 3-4; rule 5 at once or when the trailing partial message completes."""
        block = self._block
        assert block is not None
        if cmd.connection_id != block.connection_id:
            raise error(
                f"EndAppendBlock ConnectionId {cmd.connection_id} is not its Begin's {block.connection_id}",
                "EndAppendBlock",
                "connection_id",
                offset + HEADER,
            )
        if cmd.block_length < 0:
            raise error(f"negative block length {cmd.block_length}", "EndAppendBlock", "block_length", offset + HEADER + 24)
        if cmd.connection_offset != block.begin_offset + cmd.block_length:
            raise error(
                f"ConnectionOffset {cmd.connection_offset} is not Begin's {block.begin_offset} + block length {cmd.block_length}",
                "EndAppendBlock",
                "connection_offset",
                offset + HEADER + 16,
            )
        if block.wire_seen != block.wire_length:
            raise block.length_error(f"{block.wire_seen} wire bytes between Begin and End, Begin said {block.wire_length}")
        block.end = cmd
        block.end_at = offset
        if self._partial.active:
            self._transition("end-trailer", offset=offset, frame="EndAppendBlock")
            return
        self._finish_block(trailer=False)

    def _finish_block(self, *, trailer: bool) -> None:
        block = self._block
        assert block is not None and block.end is not None
        end = block.end
        if len(block.data) != end.block_length:
            raise error(
                f"the block holds {len(block.data)} bytes of Events, its End says {end.block_length}",
                "EndAppendBlock",
                "block_length",
                block.end_at + HEADER + 24,
            )
        self._transition("trailer-done" if trailer else "end", offset=block.end_at, frame="EndAppendBlock")
        session = self._sessions[block.connection_id]
        previous = session.offset
        session.offset = end.connection_offset
        self._block = None
        self._events.append(BlockAppend(session.segment, block.connection_id, bytes(block.data), end.connection_offset, previous))

    # -- send -------------------------------------------------------------------------
    def _reply(self, cmd: Command) -> bytes:
        limits = self._reply_limits
        frame = encode_command(cmd, max_frame_size=max(limits.max_frame_size, limits.max_decompressed_size))
        part = self.reply_part_size
        if len(frame) > limits.max_frame_size:
            part = min(part, limits.max_frame_size - HEADER - 1)
        return split_reply(frame, part)

    def _queue(self, data: bytes, after: int) -> None:
        if not self._held and after <= self._durable:
            self._out += data
        else:
            self._held.append((after, data))
            self._held_bytes += len(data)

    @property
    def queued_bytes(self) -> int:
        """Bytes of replies queued and not yet taken by :meth:`data_to_send`, those held
        for durability included (what the connection owes, §11)."""
        return len(self._out) + self._held_bytes

    @property
    def holds(self) -> bool:
        """The connection holds something (§11): a frame begun or not yet handled, a block
        or a partial message being received, a reply held for durability or not yet taken."""
        return self.holds_input or self._block is not None or self._partial.active or bool(self._held) or bool(self._out)

    def send(self, cmd: Command, *, now: float, after: int = 0) -> None:
        """Queue a reply (split per §5 "Sending"); an AppendSetup starts the
        ConnectionId's session at its level at once (§6.2).  The reply leaves
        after every reply queued before it, and once ``after`` (a store position,
        e.g. a log sequence number) is :meth:`durable` (0: at once)."""
        self._now = now
        if cmd.DIRECTION not in ("reply", "both"):
            raise LocalProtocolError(f"a server does not send {cmd.NAME}", protocol=PROTOCOL, frame=cmd.NAME)
        if isinstance(cmd, AppendSetup):
            self._sessions[cmd.connection_id] = _Session(cmd.segment, cmd.connection_offset_ack_level)
        self._queue(self._reply(cmd), after)

    def block_stored(self, append: BlockAppend, *, now: float, after: int = 0) -> None:
        """The block is stored (durable once ``after`` is): its DataAppended (§6.5)."""
        self.send(DataAppended(connection_id=append.connection_id, ack_level=append.level), now=now, after=after)

    def durable(self, position: int, *, now: float, limit: int | None = None) -> None:
        """The store is durable up to ``position``: release the replies waiting for it
        (at most ``limit`` of them, for a driver that writes each reply on its own)."""
        self._now = now
        self._durable = max(self._durable, position)
        held = self._held
        n = 0
        while held and held[0][0] <= self._durable and (limit is None or n < limit):
            data = held.popleft()[1]
            self._held_bytes -= len(data)
            self._out += data
            n += 1

    def held_until(self) -> int | None:
        """The position the first held reply waits for (``None``: nothing held)."""
        return self._held[0][0] if self._held else None

    def send_failed(self, *, now: float) -> None:
        """Replies not written are lost (blocks already stored stay stored: the
        writer's next SetupAppend learns of them)."""
        self._held.clear()
        self._held_bytes = 0
        super().send_failed(now=now)


class ClientConnection(_Base):
    """The client side: replies (reassembled when the server splits them)."""

    TRANSITIONS = CLIENT_TRANSITIONS
    _INPUT = _CLIENT_INPUT

    def __init__(
        self,
        limits: Limits = DEFAULT_LIMITS,
        *,
        keepalive_interval: float | None = None,
        silence_timeout: float | None = None,
        now: float | None = None,
    ) -> None:
        """``keepalive_interval`` / ``silence_timeout`` (§8: 10 s and 3 min) arm the
        timers, counted from ``now`` (then required): a KeepAlive every interval,
        closed after the timeout without input."""
        super().__init__(limits)
        if (keepalive_interval is not None or silence_timeout is not None) and now is None:
            raise TypeError("ClientConnection timers need now= (the time they count from)")
        #: an empty KeepAlive every this many seconds (§8)
        self.keepalive_interval = keepalive_interval
        #: give up after this long without hearing from the server (§8)
        self.silence_timeout = silence_timeout
        start = 0.0 if now is None else now
        self._now = start
        self._last_rx = start  #: time of the latest input (bytes, EOF or reset)
        self._next_ping = start + (math.inf if keepalive_interval is None else keepalive_interval)
        self._timed_out = False
        self._armed: float | None = None  #: the timer's absolute deadline
        self._arm()

    def next_event(self) -> ReplyReceived | KeepAliveReceived | ConnectionClosed | NeedData:
        return self._next()  # type: ignore[no-any-return]

    def send(self, cmd: Command | Blocks, *, now: float) -> None:
        """Queue a request, or the append blocks of a writer session (:class:`Blocks`)."""
        self._now = now
        if isinstance(cmd, Blocks):
            self._out += cmd.data
            return
        if cmd.DIRECTION not in ("request", "both", "inner"):
            raise LocalProtocolError(f"a client does not send {cmd.NAME}", protocol=PROTOCOL, frame=cmd.NAME)
        self._out += cmd.encode()

    def send_failed(self, *, now: float) -> None:
        """Requests not written are lost and the connection is over; a writer
        session resumes from the next AppendSetup's ack level (§6.6)."""
        super().send_failed(now=now)

    # -- timers (§8) ------------------------------------------------------------------
    def receive_data(self, data: bytes | bytearray | memoryview, *, now: float) -> None:
        self._last_rx = now
        if self._timed_out:  # given up: what still arrives is not read
            self._now = now
            return
        super().receive_data(data, now=now)

    def connection_lost(self, *, now: float) -> None:
        self._last_rx = now
        super().connection_lost(now=now)

    def _arm(self) -> None:
        """Set the deadline: the next KeepAlive, or the silence timeout counted from
        the latest input so far, whichever is first.  Input arriving later does not
        move it (the check at the deadline sees it); both are absolute times."""
        if self.keepalive_interval is None and self.silence_timeout is None:
            return
        if self.keepalive_interval is not None:
            self._next_ping = max(self._next_ping, self._last_rx + self.keepalive_interval)
        silence = math.inf if self.silence_timeout is None else self._last_rx + self.silence_timeout
        self._armed = min(silence, self._next_ping)

    def next_deadline(self) -> float | None:
        """When the next KeepAlive or the silence check is due (None once input ended)."""
        if self._eof or self.state is not State.OPEN:
            return None
        return self._armed

    def handle_timer(self, *, now: float) -> None:
        """At the deadline: closed (``reason="silence"``) after ``silence_timeout``
        without input, else an empty KeepAlive queued if one is due."""
        self._now = now
        if self._eof or self.state is not State.OPEN or self._armed is None or now < self._armed:
            return
        if self.silence_timeout is not None and now >= self._last_rx + self.silence_timeout:
            self._timed_out = True
            self._eof = self._reset = True
            self._armed = None
            self._transition("reset")
            self._events.append(ConnectionClosed(clean=False, reason="silence"))
            return
        if self.keepalive_interval is not None and now >= self._next_ping:
            self._out += KeepAlive().encode()
            self._next_ping = now + self.keepalive_interval
        self._arm()

    def _allowed(self, inp: str) -> bool:
        ok = (self.state, inp) in CLIENT_TRANSITIONS
        return ok and (not self._partial.active or inp in WHILE_PARTIAL[State.OPEN])

    def _check_inner_type(self, code: int) -> None:
        cls = DRAFT.commands.get(code)
        if cls is None:
            raise error(f"unknown type code {code}", None, "type", 0)
        if code == PartialMessage.TYPE:
            raise error("a partial message may not carry a partial message", cls.NAME, "type", 0)
        if code not in _CLIENT_INPUT:
            raise error(f"{cls.NAME} is not sent to a client", cls.NAME, "type", 0)

    def _on_frame(self, cmd: Command, offset: int, size: int) -> None:
        if isinstance(cmd, PartialMessage):
            self._start_part(cmd, offset, in_block=False)
            self._transition("partial", offset=offset, frame="PartialMessage")
            data_at = offset + HEADER + 1
            self._partial.add(cmd.data, data_at, self._check_inner_type)
            if cmd.part == Part.END:
                self._on_reply(self._decode_reassembled(self._partial.finish(data_at), data_at), 0)
            return
        self._on_reply(cmd, offset)

    def _on_reply(self, cmd: Command, offset: int) -> None:
        if isinstance(cmd, KeepAlive):
            self._transition("keepalive", offset=offset, frame="KeepAlive")
            self._events.append(KeepAliveReceived(cmd.data))
        else:
            self._transition("reply", offset=offset, frame=cmd.NAME)
            self._events.append(ReplyReceived(cmd))
