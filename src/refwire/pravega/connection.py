"""Pravega Sans-IO connections: the segment-store side and the client side.

Both follow the machine contract of :mod:`refwire.sansio`:
``receive_data(data, now=...)`` (``b""`` = EOF), ``connection_lost(now=...)``,
``next_event()`` → event or :data:`NEED_DATA`, ``send(command, now=...)``
(returns nothing; every byte, replies and the Hello/KeepAlive echoes the
machine owes on its own, leaves through ``data_to_send()``), and
``send_failed(now=...)`` (specs/pravega/README.md §5.5: what a broken
connection loses).

The server machine is the protocol half of a segment store: Java's
``AppendDecoder`` (block reassembly, specs/pravega/README.md §5.3) and the
per-writer ``WriterState`` of ``AppendProcessor`` (§5.4: event numbers must not
go backwards, acks chain ``previousEventNumber``).  Storing, reading and
answering requests is the application's (:mod:`~refwire.pravega.store`).  Every violation that
makes real Pravega close the connection without a reply raises a
:class:`RemoteProtocolError` naming the field and offset; the machine is then
in the ERROR state and the driver closes the connection.  The events they give
and take are in :mod:`~refwire.pravega.events`.
"""

from __future__ import annotations

import enum
import struct
import uuid
from collections import deque
from collections.abc import Iterator
from typing import Final

import attrs

from ..errors import LocalProtocolError
from ..sansio import NEED_DATA, FrameMachine, NeedData, closed_inside
from ..wire import Limits, check_limit
from .events import (
    Append,
    AppendBytes,
    ClientEvent,
    ConnectionClosed,
    HelloReceived,
    KeepAliveReceived,
    ReplyReceived,
    ReplySlot,
    RequestReceived,
    ServerEvent,
)
from .frames import (
    DEFAULT_LIMITS,
    OLDEST_COMPATIBLE_VERSION,
    PROTOCOL,
    WIRE_VERSION,
    AppendBlock,
    AppendBlockEnd,
    AppendSetup,
    Command,
    CommandDecoder,
    ConditionalAppend,
    ConditionalBlockEnd,
    ConditionalCheckFailed,
    DataAppended,
    Hello,
    KeepAlive,
    Padding,
    PartialEvent,
    SetupAppend,
    encode_event,
    parse_append_block_end,
)

__all__ = [
    "CLIENT_TRANSITIONS",
    "SERVER_TRANSITIONS",
    "ServerConnection",
    "ClientConnection",
    "State",
]

_APPEND_PATH: Final = frozenset(
    {SetupAppend.TYPE, AppendBlock.TYPE, AppendBlockEnd.TYPE, Padding.TYPE, ConditionalAppend.TYPE, ConditionalBlockEnd.TYPE}
)


class State(enum.Enum):
    OPEN = "open"  #: commands flow
    IN_BLOCK = "in-block"  #: server: an AppendBlock is held until its AppendBlockEnd
    CLOSING = "closing"  #: the machine owes a last reply and then the connection must close
    CLOSED = "closed"  #: EOF or reset
    ERROR = "error"  #: a protocol violation; nothing more is received


# Inputs: the command kinds that move the machine.  Anything not listed for a
# state is a protocol violation (real Pravega closes the connection).
SERVER_TRANSITIONS: Final[dict[tuple[State, str], State]] = {
    (State.OPEN, "hello"): State.OPEN,
    (State.OPEN, "hello-incompatible"): State.CLOSING,
    (State.OPEN, "keepalive"): State.OPEN,
    (State.OPEN, "setup"): State.OPEN,
    (State.OPEN, "block"): State.IN_BLOCK,
    (State.OPEN, "block-end"): State.OPEN,
    (State.OPEN, "conditional"): State.OPEN,
    (State.OPEN, "padding"): State.OPEN,
    (State.OPEN, "request"): State.OPEN,
    (State.OPEN, "eof"): State.CLOSED,
    (State.OPEN, "reset"): State.CLOSED,
    (State.IN_BLOCK, "block-end"): State.OPEN,
    # Types outside the append path slip past AppendDecoder's "unexpected
    # command after a block" check (§5.3), so they are allowed mid-block.
    (State.IN_BLOCK, "hello"): State.IN_BLOCK,
    (State.IN_BLOCK, "hello-incompatible"): State.CLOSING,
    (State.IN_BLOCK, "keepalive"): State.IN_BLOCK,
    (State.IN_BLOCK, "request"): State.IN_BLOCK,
    (State.IN_BLOCK, "reset"): State.CLOSED,
    (State.IN_BLOCK, "eof"): State.CLOSED,
}

CLIENT_TRANSITIONS: Final[dict[tuple[State, str], State]] = {
    (State.OPEN, "hello"): State.OPEN,
    (State.OPEN, "keepalive"): State.OPEN,
    (State.OPEN, "reply"): State.OPEN,
    (State.OPEN, "eof"): State.CLOSED,
    (State.OPEN, "reset"): State.CLOSED,
}


@attrs.define
class WriterState:
    """``AppendProcessor.WriterState`` for one (segment, writer) (§5.4)."""

    last_stored: int  #: highest event number handed to storage
    last_acked: int  #: highest event number acked with DataAppended
    in_flight: int = 0


@attrs.define
class _Session:
    """``AppendDecoder``'s per-writer record (§5.3)."""

    segment: str
    last_event_number: int = 0  # Java's default, not Long.MIN_VALUE


_OPEN: Final = State.OPEN  # a module global: State.OPEN is a lookup through the Enum metaclass
_BLOCK: Final = AppendBlock.TYPE
_BLOCK_END: Final = AppendBlockEnd.TYPE
_PARTIAL: Final = PartialEvent.TYPE
_PADDING: Final = Padding.TYPE
_II: Final = struct.Struct(">ii")


def _seen(state: State, inp: str) -> tuple[str, str, str]:
    return (state.value, inp, SERVER_TRANSITIONS[(state, inp)].value)


#: the transitions the hot path of appends goes through
_OPEN_BLOCK_END: Final = _seen(State.OPEN, "block-end")
_OPEN_BLOCK: Final = _seen(State.OPEN, "block")
_IN_BLOCK_BLOCK_END: Final = _seen(State.IN_BLOCK, "block-end")
assert _OPEN_BLOCK_END[2] == _IN_BLOCK_BLOCK_END[2] == State.OPEN.value and _OPEN_BLOCK[2] == State.IN_BLOCK.value
_new: Final = object.__new__
#: the slots of Append, filled directly on the trusted path (every field is set)
_APPEND_SET: Final = tuple(
    Append.__dict__[name].__set__
    for name in (
        "segment",
        "writer_id",
        "event_number",
        "event_count",
        "data",
        "request_id",
        "expected_offset",
        "previous_stored",
    )
)
assert {a.name for a in attrs.fields(Append)} == {
    "segment",
    "writer_id",
    "event_number",
    "event_count",
    "data",
    "request_id",
    "expected_offset",
    "previous_stored",
}


def _versions_compatible(high: int, low: int) -> bool:
    """The server's rule (§7): close unless ``low <= ours <= high`` overlap."""
    return not (low > WIRE_VERSION or high < OLDEST_COMPATIBLE_VERSION)


class _Base(FrameMachine):
    PROTOCOL = PROTOCOL
    ERROR_STATE = State.ERROR
    CLOSED_STATE = State.CLOSED

    def __init__(self, limits: Limits) -> None:
        super().__init__(State.OPEN)
        self.limits = limits
        self._decoder = CommandDecoder(limits)
        self.peer_version: tuple[int, int] | None = None
        self._closed_owed = False

    def _receive_progress(self) -> tuple[int, int]:
        return self._decoder.buffered, self._decoder.offset

    def _pending_frame_name(self) -> str | None:
        return self._decoder.pending_frame_name()

    def _feed(self, data: bytes | bytearray | memoryview) -> None:
        self._decoder.feed(data)

    def has_data_to_send(self) -> bool:
        """Whether :meth:`data_to_send` would return bytes (without taking them)."""
        return bool(self._out)

    @property
    def must_close(self) -> bool:
        """True once the connection must be closed after :meth:`data_to_send` is flushed."""
        return self.state in (State.CLOSING, State.ERROR)

    def receive_data(self, data: bytes | bytearray | memoryview, *, now: float) -> None:
        if not data and self.state is State.CLOSED:
            self._closed_owed = True  # a repeated EOF is answered again, once
        super().receive_data(data, now=now)

    def connection_lost(self, *, now: float) -> None:
        if self.state is State.CLOSED and not self._reset:
            self._closed_owed = True
        super().connection_lost(now=now)

    def _idle_event(self) -> ConnectionClosed | NeedData | None:
        if self.state is State.CLOSED:
            # The closing event goes out once per end of input, then NEED_DATA
            # (a driver reads events until NEED_DATA).
            if not self._closed_owed:
                return NEED_DATA
            self._closed_owed = False
            return ConnectionClosed(clean=not self._reset, reason="reset" if self._reset else "")
        if self.state is State.CLOSING:
            return NEED_DATA
        return None

    def _at_eof(self) -> None:
        if self._reset:
            self._transition("reset")
            self._events.append(ConnectionClosed(clean=False, reason="reset"))
            return
        if self._decoder.buffered:
            raise closed_inside(
                "a frame",
                protocol=PROTOCOL,
                frame=self._decoder.pending_frame_name(),
                offset=self._decoder.offset,
                detail=f"{self._decoder.buffered} bytes of it received",
            )
        clean = self.state is not State.IN_BLOCK
        self._transition("eof")
        self._events.append(ConnectionClosed(clean=clean, reason="" if clean else "closed inside an append block"))


# --------------------------------------------------------------------------- server


class ServerConnection(_Base):
    """The segment-store side of one connection.

    Usage: feed bytes, pull events; answer :class:`RequestReceived` with
    :meth:`send`; store each :class:`Append` and then call
    :meth:`append_stored` (→ DataAppended) or :meth:`append_failed`.

    Replies leave in the order they are queued.  A reply that must wait (an
    ack until its append is durable) keeps its place with :meth:`reserve`:
    everything queued after the slot (replies, KeepAlive echoes) waits until
    the slot is filled (``send(..., slot=)``, ``append_stored(..., slot=)``).
    """

    role = "server"
    TRANSITIONS = SERVER_TRANSITIONS

    def __init__(self, limits: Limits = DEFAULT_LIMITS, *, max_writers: int | None = None, frame_timeout: float | None = 30.0) -> None:
        super().__init__(limits)
        #: spec §11: an idle connection *between* frames stays open, as the real
        #: server keeps it, but one stuck inside a frame is closed (the shared
        #: frame timer of :class:`~refwire.sansio.FrameMachine`).
        self.frame_timeout = frame_timeout
        #: SetupAppends per connection (spec §11: the Java client's MAX_SETUP_SEGMENTS_SIZE)
        self.max_writers = limits.max_window if max_writers is None else max_writers
        self._sessions: dict[uuid.UUID, _Session] = {}
        self._writers: dict[tuple[str, uuid.UUID], WriterState] = {}
        #: writer id bytes -> (id, session, writer state), for :meth:`_bare_block_end`;
        #: cleared whenever ``_sessions`` or ``_writers`` change
        self._fast_writers: dict[bytes, tuple[uuid.UUID, _Session, WriterState]] = {}
        #: the hot path of :meth:`_bare_block_end` stands for these methods, so a
        #: subclass that changes one of them goes the general way
        cls = type(self)
        self._fast_path = all(
            getattr(cls, name) is getattr(ServerConnection, name)
            for name in ("_pump", "_on_command", "_session_for", "_on_block_end", "_reassemble", "_begin_append", "_transition")
        )
        self._block: AppendBlock | None = None
        self._block_offset = 0
        #: bare AppendBlockEnds decoded ahead in columns (CommandDecoder.block_ends), still
        #: buffered: each is consumed when its Append is delivered; the stream offset of
        #: the next one, and its index
        self._run_rows: Iterator[tuple[bytes, bytes, int, int, int, int]] | None = None
        self._run_offset = -1
        #: bytes of AppendBlockEnd data dropped by Java's quirk (§5.3); the driver logs them
        self.ignored_block_end_bytes = 0
        #: replies waiting behind a reserved slot, in order (the head is unfilled)
        self._replies: deque[ReplySlot] = deque()

    def next_event(self) -> ServerEvent | NeedData:
        """The next event or :data:`NEED_DATA`; raises :class:`RemoteProtocolError`
        (after the events decoded before the bad byte) on a violation."""
        if self._fast_path and self.state is _OPEN and self._block is None and not self._events and self._error is None:
            append = self._fast_append()
            if append is not None:
                return append
        return self._next()  # type: ignore[no-any-return]

    def writer_state(self, segment: str, writer_id: uuid.UUID) -> WriterState | None:
        return self._writers.get((segment, writer_id))

    # -- receive -------------------------------------------------------------
    def _fast_append(self) -> Append | None:
        """The hot path of appends, for the two shapes writers send: a bare
        AppendBlockEnd (the Rust client: no AppendBlock before it), and an
        AppendBlock whose AppendBlockEnd is already buffered behind it (the Java
        client: the block ends in whole events, or in a PartialEvent that the
        AppendBlockEnd completes).  When the frames pass every check of
        :meth:`_on_command`, :meth:`_on_block_end`, :meth:`_reassemble` and
        :meth:`_begin_append`, they go straight from the buffer to their
        :class:`Append`: no command objects, the event bytes copied once, the
        writer's records found by the id's 16 bytes.  Bare AppendBlockEnds are
        decoded a run at a time (:meth:`CommandDecoder.block_ends`, each frame
        consumed when its Append is returned).  Anything else returns None
        before changing anything, and the general path decodes, checks and
        reports it exactly as it always does."""
        dec = self._decoder
        rows = self._run_rows
        payload: bytes
        if rows is not None and self._run_offset == dec.offset and (row := next(rows, None)) is not None:
            # the next bare AppendBlockEnd of a run decoded ahead (a stale run -- anything
            # consumed since -- or a delivered one is dropped below)
            raw, payload, num, last, rid, frame_size = row
            writer = self._fast_writers.get(raw)
            if writer is None:
                writer = self._find_writer(raw)
                if writer is None:
                    self._run_rows = None  # the frame is still buffered: the general path reports it
                    return None
            writer_id, session, state = writer
            previous = state.last_stored
            if num <= 0 or last < session.last_event_number or last < previous:
                self._run_rows = None
                return None
            dec.consume(frame_size)
            self._run_offset += frame_size
            block_start = -1
        else:
            if rows is not None:
                self._run_rows = None
            frame = dec.peek_frame()
            if frame is None:
                return None
            code, data, start, end = frame
            block_start = block_end = -1  # the AppendBlock's payload in ``data``, if any
            if code == _BLOCK:
                if end - start < 16:
                    return None
                block_start, block_end = start, end
                frame = dec.peek_frame(skip=end - start + 8)
                if frame is None:
                    return None
                code, data, start, end = frame
            elif code == _BLOCK_END and end < len(data) and self._next_run() is not None:
                # bare AppendBlockEnds (the Rust client) with more behind them: decoded a
                # run at a time, delivered from the top (a lone one is parsed below)
                return self._fast_append()
            if code != _BLOCK_END:
                return None
            got = parse_append_block_end(data, start, end)
            if got is None:
                return None
            raw, size, blob, num, last, rid = got
            writer = self._fast_writers.get(raw)
            if writer is None:
                writer = self._find_writer(raw)
                if writer is None:
                    return None
            writer_id, session, state = writer
            previous = state.last_stored
            if num <= 0 or last < session.last_event_number or last < previous:
                return None
            if block_start < 0:
                payload = blob  # a bare AppendBlockEnd: sizeOfWholeEvents is ignored
            else:
                events = block_start + 16
                left = block_end - events - size  # the block's bytes after its whole events
                if data[block_start:events] != raw or size < 0 or left < 0:
                    return None
                if left == 0:
                    if blob:
                        return None  # AppendDecoder's quirk (the bytes are ignored and counted): the general path
                    payload = data[events:block_end] if type(data) is bytes else bytes(data[events:block_end])
                else:
                    if left < 8:
                        return None
                    rcode, n = _II.unpack_from(data, events + size)
                    if not 0 <= n <= left - 8:
                        return None  # a broken remainder: the general path reports it
                    if rcode == _PARTIAL:
                        with memoryview(data) as view:
                            p = events + size + 8
                            payload = b"".join((view[events : events + size], view[p : p + n], blob))
                    elif rcode == _PADDING and not blob:
                        stop = events + size
                        payload = data[events:stop] if type(data) is bytes else bytes(data[events:stop])
                    else:
                        return None
            limits = self.limits
            if len(payload) > limits.max_buffered + limits.max_frame_size:
                return None
            dec.consume_frame(end)
        # Every check passed: the same changes as the general path, in one go.
        seen = self.transitions_seen
        if block_start < 0:
            seen.add(_OPEN_BLOCK_END)
        else:
            seen.add(_OPEN_BLOCK)
            seen.add(_IN_BLOCK_BLOCK_END)
        session.last_event_number = last
        state.last_stored = last
        state.in_flight += 1
        append = _new(Append)
        set_segment, set_wid, set_number, set_count, set_data, set_rid, set_expected, set_previous = _APPEND_SET
        set_segment(append, session.segment)
        set_wid(append, writer_id)
        set_number(append, last)
        set_count(append, num)
        set_data(append, payload)
        set_rid(append, rid)
        set_expected(append, None)
        set_previous(append, previous)
        return append

    def _next_run(self) -> Iterator[tuple[bytes, bytes, int, int, int, int]] | None:
        """The rows (writer id bytes, data, num_events, last_event_number,
        request_id, frame size) of the bare AppendBlockEnds at the head of the
        buffer (:meth:`CommandDecoder.block_ends`), or None."""
        dec = self._decoder
        run = dec.block_ends()
        if run is None:
            self._run_rows = None
            return None
        self._run_offset = dec.offset
        self._run_rows = rows = zip(
            run.writer_ids, run.data, run.num_events, run.last_event_numbers, run.request_ids, run.frame_sizes, strict=True
        )
        return rows

    def _find_writer(self, raw: bytes) -> tuple[uuid.UUID, _Session, WriterState] | None:
        """The session and writer state of the writer id ``raw`` (16 bytes), kept
        in ``_fast_writers`` until a SetupAppend, an AppendSetup or a failed
        append changes them; None if either is missing."""
        writer_id = uuid.UUID(bytes=raw)
        session = self._sessions.get(writer_id)
        if session is None:
            return None
        state = self._writers.get((session.segment, writer_id))
        if state is None:
            return None
        self._fast_writers[raw] = found = (writer_id, session, state)
        return found

    def _pump(self) -> None:
        dec = self._decoder
        while self.state in (State.OPEN, State.IN_BLOCK) and not self._events:
            start = dec.offset
            cmd = dec.next_command()
            if cmd is None:
                return
            self._on_command(cmd, start)

    def _on_command(self, cmd: Command, offset: int) -> None:
        code = cmd.TYPE
        if self.state is State.IN_BLOCK and code in _APPEND_PATH and code != AppendBlockEnd.TYPE:
            raise LocalProtocolError(
                f"unexpected {cmd.NAME} following an append block", protocol=PROTOCOL, frame=cmd.NAME, field="type", offset=offset
            )
        if isinstance(cmd, Hello):
            ok = _versions_compatible(cmd.high_version, cmd.low_version)
            self.peer_version = (cmd.high_version, cmd.low_version)
            self._queue(Hello().encode(), None)
            self._transition("hello" if ok else "hello-incompatible", offset=offset, frame="Hello")
            self._events.append(HelloReceived(cmd.high_version, cmd.low_version, ok))
        elif isinstance(cmd, KeepAlive):
            self._transition("keepalive", offset=offset, frame="KeepAlive")
            self._queue(KeepAlive().encode(), None)
            self._events.append(KeepAliveReceived())
        elif isinstance(cmd, SetupAppend):
            self._transition("setup", offset=offset, frame="SetupAppend")
            if cmd.writer_id not in self._sessions:
                check_limit(
                    len(self._sessions) + 1,
                    self.max_writers,
                    name="max_writers",
                    field="writer_id",
                    frame="SetupAppend",
                    offset=offset,
                    protocol=PROTOCOL,
                )
            self._sessions[cmd.writer_id] = _Session(cmd.segment)
            self._fast_writers.clear()
            self._events.append(RequestReceived(cmd))
        elif isinstance(cmd, AppendBlock):
            self._session_for(cmd.writer_id, offset, "AppendBlock")
            self._transition("block", offset=offset, frame="AppendBlock")
            self._block = cmd
            self._block_offset = offset
        elif isinstance(cmd, AppendBlockEnd):
            self._on_block_end(cmd, offset)
        elif isinstance(cmd, ConditionalAppend | ConditionalBlockEnd):
            self._transition("conditional", offset=offset, frame=cmd.NAME)
            session = self._session_for(cmd.writer_id, offset, cmd.NAME)
            if cmd.event_number < session.last_event_number:
                raise LocalProtocolError(
                    f"event number went backwards: {cmd.event_number} after {session.last_event_number}",
                    protocol=PROTOCOL,
                    frame=cmd.NAME,
                    field="event_number",
                    offset=offset + 8 + 16,
                )
            session.last_event_number = cmd.event_number
            data = encode_event(cmd.event) if isinstance(cmd, ConditionalAppend) else cmd.data
            self._begin_append(
                session.segment, cmd.writer_id, cmd.event_number, 1, data, cmd.request_id, cmd.expected_offset, offset
            )
        elif isinstance(cmd, Padding):
            self._transition("padding", offset=offset, frame="Padding")  # accepted and ignored (§5.3)
        elif isinstance(cmd, PartialEvent):
            raise LocalProtocolError(
                "PartialEvent is only valid inside an append block",
                protocol=PROTOCOL,
                frame="PartialEvent",
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

    def _session_for(self, writer_id: uuid.UUID, offset: int, frame: str) -> _Session:
        session = self._sessions.get(writer_id)
        if session is None:
            raise LocalProtocolError(
                f"writer {writer_id} referenced before SetupAppend",
                protocol=PROTOCOL,
                frame=frame,
                field="writer_id",
                offset=offset + 8,
            )
        return session

    def _on_block_end(self, end: AppendBlockEnd, offset: int) -> None:
        session = self._session_for(end.writer_id, offset, "AppendBlockEnd")
        fo = offset + 8  # payload start: writer_id(16) size(4) len(4) data num(4) last(8) rid(8)
        if end.num_events <= 0:
            raise LocalProtocolError(
                f"numEvents must be positive, got {end.num_events}",
                protocol=PROTOCOL,
                frame="AppendBlockEnd",
                field="num_events",
                offset=fo + 24 + len(end.data),
            )
        if end.last_event_number < session.last_event_number:
            raise LocalProtocolError(
                f"last event number went backwards: {end.last_event_number} after {session.last_event_number}",
                protocol=PROTOCOL,
                frame="AppendBlockEnd",
                field="last_event_number",
                offset=fo + 28 + len(end.data),
            )
        block = self._block
        if block is None:
            data = end.data  # the Rust client's bare AppendBlockEnd: sizeOfWholeEvents is ignored
        else:
            if block.writer_id != end.writer_id:
                raise LocalProtocolError(
                    f"AppendBlockEnd writer {end.writer_id} does not match its AppendBlock writer {block.writer_id}",
                    protocol=PROTOCOL,
                    frame="AppendBlockEnd",
                    field="writer_id",
                    offset=fo,
                )
            size = end.size_of_whole_events
            if not 0 <= size <= len(block.data):
                raise LocalProtocolError(
                    f"sizeOfWholeEvents {size} is outside the block's {len(block.data)} bytes",
                    protocol=PROTOCOL,
                    frame="AppendBlockEnd",
                    field="size_of_whole_events",
                    offset=fo + 16,
                )
            data = self._reassemble(block, size, end, offset)
            self._block = None
        self._transition("block-end", offset=offset, frame="AppendBlockEnd")
        session.last_event_number = end.last_event_number
        check_limit(
            len(data),
            self.limits.max_buffered + self.limits.max_frame_size,
            name="max_buffered",
            field="data",
            frame="AppendBlockEnd",
            offset=offset,
            protocol=PROTOCOL,
        )
        self._begin_append(
            session.segment, end.writer_id, end.last_event_number, end.num_events, data, end.request_id, None, offset
        )

    def _reassemble(self, block: AppendBlock, size: int, end: AppendBlockEnd, end_offset: int) -> bytes:
        """The block's whole events and its remainder completed by ``end`` (at stream offset ``end_offset``)."""
        if size == len(block.data):
            if end.data:
                # Quirk copied from AppendDecoder: end.data is ignored when the block has no remainder.
                self.ignored_block_end_bytes += len(end.data)
            return block.data
        data = block.data
        left = len(data) - size  # the remainder after the whole events
        base = self._block_offset + 8 + 16 + size
        if left < 8:
            raise LocalProtocolError(
                f"{left} bytes after the whole events are not a command header",
                protocol=PROTOCOL,
                frame="AppendBlock",
                field="data",
                offset=base,
            )
        code = int.from_bytes(data[size : size + 4], "big", signed=True)
        n = int.from_bytes(data[size + 4 : size + 8], "big", signed=True)
        if code not in (PartialEvent.TYPE, Padding.TYPE):
            raise LocalProtocolError(
                f"the block's remainder must be a PartialEvent or Padding, found type {code}",
                protocol=PROTOCOL,
                frame="AppendBlock",
                field="data",
                offset=base,
            )
        if not 0 <= n <= left - 8:
            raise LocalProtocolError(
                f"the {'PartialEvent' if code == PartialEvent.TYPE else 'Padding'} length {n} does not match the "
                f"{left - 8} bytes left in the block",
                protocol=PROTOCOL,
                frame="PartialEvent" if code == PartialEvent.TYPE else "Padding",
                field="length",
                offset=base + 4,
            )
        if code == Padding.TYPE:
            if end.data:
                raise LocalProtocolError(
                    "an AppendBlockEnd after Padding must carry no data",
                    protocol=PROTOCOL,
                    frame="AppendBlockEnd",
                    field="data",
                    offset=end_offset + 8 + 24,  # its data: after the header, writer_id, size and data's length
                )
            return data[:size]
        # AppendDecoder decodes one frame from the remainder and ignores bytes after it (§5.3).
        with memoryview(data) as view:  # one copy of the event bytes, not three
            return b"".join((view[:size], view[size + 8 : size + 8 + n], end.data))

    def _begin_append(
        self,
        segment: str,
        writer_id: uuid.UUID,
        event_number: int,
        count: int,
        data: bytes,
        request_id: int,
        expected_offset: int | None,
        offset: int,
    ) -> None:
        """``AppendProcessor.append`` + ``WriterState.beginAppend`` (§5.4)."""
        state = self._writers.get((segment, writer_id))
        if state is None:
            raise LocalProtocolError(
                f"append for writer {writer_id} on {segment!r} before its AppendSetup",
                protocol=PROTOCOL,
                field="writer_id",
                offset=offset + 8,
            )
        previous = state.last_stored
        if event_number < previous:
            raise LocalProtocolError(
                f"event {event_number} was already appended (last stored {previous})",
                protocol=PROTOCOL,
                field="event_number",
                offset=offset,
            )
        state.last_stored = event_number
        state.in_flight += 1
        append = _new(Append)  # every field is set below (Append has no validators)
        set_segment, set_wid, set_number, set_count, set_data, set_rid, set_expected, set_previous = _APPEND_SET
        set_segment(append, segment)
        set_wid(append, writer_id)
        set_number(append, event_number)
        set_count(append, count)
        set_data(append, data)
        set_rid(append, request_id)
        set_expected(append, expected_offset)
        set_previous(append, previous)
        self._events.append(append)

    # -- send ----------------------------------------------------------------
    def reserve(self, *, now: float) -> ReplySlot:
        """Keep the next place in the reply order for a reply that is not ready
        yet (an ack waiting for durability); fill it with ``slot=``."""
        self._now = now
        slot = ReplySlot()
        self._replies.append(slot)
        return slot

    def _queue(self, data: bytes, slot: ReplySlot | None) -> None:
        replies = self._replies
        if slot is None:
            if replies:
                replies.append(ReplySlot(data))
            else:
                self._out += data
            return
        if slot.data is not None:
            raise RuntimeError("reply slot filled twice")
        slot.data = data
        while replies and (ready := replies[0].data) is not None:
            replies.popleft()
            self._out += ready

    def send(self, cmd: Command, *, now: float, slot: ReplySlot | None = None) -> None:
        """Queue a reply (into ``slot`` if given).  An AppendSetup (re)starts the
        writer's state (§5.4)."""
        if cmd.DIRECTION not in ("reply", "both"):
            raise LocalProtocolError(f"a server does not send {cmd.NAME}", protocol=PROTOCOL, frame=cmd.NAME)
        self._now = now
        if isinstance(cmd, AppendSetup):
            self._writers[(cmd.segment, cmd.writer_id)] = WriterState(cmd.last_event_number, cmd.last_event_number)
            self._fast_writers.clear()
        self._queue(cmd.encode(), slot)

    def append_stored(self, append: Append, segment_length: int, *, now: float, slot: ReplySlot | None = None) -> None:
        """The append is durable: queue its DataAppended (nothing if this event
        number was already acked).  Call in the order appends arrived."""
        self._now = now
        state = self._writers.get((append.segment, append.writer_id))
        if state is None:
            self._queue(b"", slot)  # the writer was set up again or dropped meanwhile
            return
        state.in_flight -= 1
        previous = state.last_acked
        if previous >= append.event_number:
            self._queue(b"", slot)
            return
        state.last_acked = append.event_number
        ack = DataAppended(
            writer_id=append.writer_id,
            event_number=append.event_number,
            previous_event_number=previous,
            request_id=append.request_id,
            current_segment_write_offset=segment_length,
        )
        self._queue(ack.encode(), slot)

    def append_conditional_failed(self, append: Append, *, now: float) -> None:
        """The expected offset did not match: queue ConditionalCheckFailed; the
        writer state rolls back to the last ack when nothing else is in flight."""
        state = self._writers.get((append.segment, append.writer_id))
        if state is not None:
            state.in_flight -= 1
            if state.in_flight == 0:
                state.last_stored = state.last_acked
        self.send(
            ConditionalCheckFailed(writer_id=append.writer_id, event_number=append.event_number, request_id=append.request_id),
            now=now,
        )

    def append_failed(self, append: Append, reply: Command, *, now: float) -> None:
        """The store refused the append (sealed, deleted…): queue ``reply`` and
        drop the writer state, so the writer must set up again (§5.4)."""
        self._writers.pop((append.segment, append.writer_id), None)
        self._fast_writers.clear()
        self.send(reply, now=now)

    def close(self, *, now: float) -> None:
        """The application closes the connection once the replies queued so far
        are out (an expired token, InvalidEventNumber, §8): nothing more is
        decoded, and :attr:`must_close` is true."""
        self._now = now
        if self.state in (State.OPEN, State.IN_BLOCK):
            self.state = State.CLOSING

    def send_failed(self, *, now: float) -> None:
        """The driver could not write: replies not written are lost; appends the
        store already holds stay stored (the writer's next SetupAppend learns of
        them from AppendSetup, §5.5).  The connection is over."""
        self._replies.clear()
        super().send_failed(now=now)


# --------------------------------------------------------------------------- client


class ClientConnection(_Base):
    """The client side: sends Hello first and checks the server's Hello (§7).

    Replies are delivered as :class:`ReplyReceived`; routing them to requests
    by ``request_id`` is the caller's (the driver's) job.
    """

    role = "client"
    TRANSITIONS = CLIENT_TRANSITIONS

    def __init__(
        self, limits: Limits = DEFAULT_LIMITS, *, version: tuple[int, int] = (WIRE_VERSION, OLDEST_COMPATIBLE_VERSION)
    ) -> None:
        super().__init__(limits)
        self.version = version
        self.hello_received = False

    def initiate(self, *, now: float) -> None:
        """Queue the Hello a client sends right after connecting."""
        self._now = now
        self._out += Hello(high_version=self.version[0], low_version=self.version[1]).encode()

    def next_event(self) -> ClientEvent | NeedData:
        return self._next()  # type: ignore[no-any-return]

    def send(self, cmd: Command | AppendBytes, *, now: float) -> None:
        """Queue a request (or a writer session's encoded appends, :class:`AppendBytes`)."""
        name = "appends" if isinstance(cmd, AppendBytes) else cmd.NAME
        if not isinstance(cmd, AppendBytes) and cmd.DIRECTION not in ("request", "both"):
            raise LocalProtocolError(f"a client does not send {name}", protocol=PROTOCOL, frame=name)
        if self.state is not State.OPEN:
            raise LocalProtocolError(f"cannot send {name} in state {self.state.value}", protocol=PROTOCOL, frame=name)
        self._now = now
        self._out += cmd.data if isinstance(cmd, AppendBytes) else cmd.encode()

    def send_failed(self, *, now: float) -> None:
        """The driver could not write: the connection is over and requests in
        flight fail (the driver fails their waiters on the closing event); a
        writer session resends what the next AppendSetup says the store lacks
        (§5.5)."""
        super().send_failed(now=now)

    def _pump(self) -> None:
        dec = self._decoder
        while self.state is State.OPEN and not self._events:
            start = dec.offset
            cmd = dec.next_command()
            if cmd is None:
                return
            if isinstance(cmd, Hello):
                high, low = cmd.high_version, cmd.low_version
                self.peer_version = (high, low)
                if low > self.version[0] or high < self.version[1]:  # the ranges do not overlap
                    raise LocalProtocolError(
                        f"server speaks versions {low}..{high}, we speak {self.version[1]}..{self.version[0]}",
                        protocol=PROTOCOL,
                        frame="Hello",
                        field="low_version",
                        offset=start + 12,
                    )
                self._transition("hello", offset=start, frame="Hello")
                self.hello_received = True
                self._events.append(HelloReceived(high, low, True))
            elif isinstance(cmd, KeepAlive):
                self._transition("keepalive", offset=start, frame="KeepAlive")
                self._events.append(KeepAliveReceived())
            elif cmd.DIRECTION == "reply":
                self._transition("reply", offset=start, frame=cmd.NAME)
                self._events.append(ReplyReceived(cmd))
            else:
                raise LocalProtocolError(
                    f"{cmd.NAME} is a request, not a reply", protocol=PROTOCOL, frame=cmd.NAME, field="type", offset=start
                )
