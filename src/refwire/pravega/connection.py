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

This is the plain path: every frame decoded to its command and taken through
the methods that follow the spec's sections (§5.3 ``_on_block_end`` and
``_reassemble``, §5.4 ``_begin_append``, §7 Hello).  The server's speed path for
the appends writers send, straight from the buffer to the :class:`Append`, is
:mod:`._fast_connection`, registered into :data:`_FAST_APPEND`; a machine takes
it unless built with ``fast=False`` or run under ``REFWIRE_REFERENCE=1``
(:mod:`refwire.speed`).
"""

from __future__ import annotations

import enum
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from typing import Final

import attrs

from ..errors import LocalProtocolError
from ..sansio import NEED_DATA, FrameMachine, NeedData, closed_inside
from ..speed import use_fast
from ..wire import Limits, check_limit
from .budget import capped
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
)
from .partial import check_block_end, reassemble

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


def _versions_compatible(high: int, low: int) -> bool:
    """The server's rule (§7): close unless ``low <= ours <= high`` overlap."""
    return not (low > WIRE_VERSION or high < OLDEST_COMPATIBLE_VERSION)


class _Base(FrameMachine):
    PROTOCOL = PROTOCOL
    ERROR_STATE = State.ERROR
    CLOSED_STATE = State.CLOSED

    def __init__(self, limits: Limits, fast: bool | None, frame_limit: str = "max_frame_size") -> None:
        super().__init__(State.OPEN)
        self.limits = limits
        #: whether this machine takes its speed paths (the decoder's, and the server's
        #: :mod:`._fast_connection`): decided once, here (:mod:`refwire.speed`)
        self.fast = use_fast(fast)
        self._decoder = CommandDecoder(limits, fast=self.fast, frame_limit=frame_limit)
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

    def __init__(
        self,
        limits: Limits = DEFAULT_LIMITS,
        *,
        max_writers: int | None = None,
        frame_timeout: float | None = 30.0,
        fast: bool | None = None,
    ) -> None:
        """``fast``: take the speed path of appends (:mod:`._fast_connection`) and of
        the decoder; None follows :mod:`refwire.speed`.

        ``limits.max_connection_memory`` caps frames at its frame share (§11,
        :mod:`.budget`): a frame past it is refused at its length field, naming the limit;
        :attr:`limits` holds the caps in force."""
        limits, bound = capped(limits, "max_frame_size")
        super().__init__(limits, fast, "max_connection_memory" if bound else "max_frame_size")
        #: spec §11: an idle connection *between* frames stays open, as the real
        #: server keeps it, but one stuck inside a frame is closed (the shared
        #: frame timer of :class:`~refwire.sansio.FrameMachine`).
        self.frame_timeout = frame_timeout
        #: SetupAppends per connection (spec §11: the Java client's MAX_SETUP_SEGMENTS_SIZE)
        self.max_writers = limits.max_window if max_writers is None else max_writers
        self._sessions: dict[uuid.UUID, _Session] = {}
        self._writers: dict[tuple[str, uuid.UUID], WriterState] = {}
        self._block: AppendBlock | None = None
        self._block_offset = 0
        #: the speed path of appends (:mod:`._fast_connection`), or None for the plain
        #: path only.  It stands for the methods of _SPEED_STANDS_FOR, so a subclass
        #: that changes one of them goes the plain way.
        cls = type(self)
        unchanged = all(getattr(cls, name) is getattr(ServerConnection, name) for name in _SPEED_STANDS_FOR)
        self._fast_append: Callable[[ServerConnection], Append | None] | None = (
            _FAST_APPEND[0] if self.fast and _FAST_APPEND and unchanged else None
        )
        # The speed path's state, kept here so that the plain path can drop what it
        # caches: writer id bytes -> (id, session, writer state), cleared whenever
        # ``_sessions`` or ``_writers`` change; and the bare AppendBlockEnds decoded
        # ahead in columns (CommandDecoder.block_ends), still buffered, each consumed
        # when its Append is delivered, with the stream offset of the next one.
        self._fast_writers: dict[bytes, tuple[uuid.UUID, _Session, WriterState]] = {}
        self._run_rows: Iterator[tuple[bytes, bytes, int, int, int, int]] | None = None
        self._run_offset = -1
        #: bytes of AppendBlockEnd data dropped by Java's quirk (§5.3); the driver logs them
        self.ignored_block_end_bytes = 0
        #: replies waiting behind a reserved slot, in order (the head is unfilled)
        self._replies: deque[ReplySlot] = deque()
        self._waiting_bytes = 0  #: bytes of the replies in ``_replies``

    def next_event(self) -> ServerEvent | NeedData:
        """The next event or :data:`NEED_DATA`; raises :class:`RemoteProtocolError`
        (after the events decoded before the bad byte) on a violation."""
        fast_append = self._fast_append
        if fast_append is not None and self.state is _OPEN and self._block is None and not self._events and self._error is None:
            append = fast_append(self)
            if append is not None:
                return append
        return self._next()  # type: ignore[no-any-return]

    def writer_state(self, segment: str, writer_id: uuid.UUID) -> WriterState | None:
        return self._writers.get((segment, writer_id))

    # -- receive -------------------------------------------------------------
    def _pump(self) -> None:
        dec = self._decoder
        while self.state in (State.OPEN, State.IN_BLOCK) and not self._events:
            start = dec.offset
            cmd = dec.next_command()
            if cmd is None:
                return
            self._on_command(cmd, start)

    def _on_command(self, cmd: Command, offset: int) -> None:
        """One command at stream ``offset``: Hello (§7.1), KeepAlive (§7.2), the
        append path by the rules of §5.3 in their order, any other request."""
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
        """§5.3 rule 5: an AppendBlockEnd closes the held block (Java) or is bare (Rust)."""
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
            size = check_block_end(block, end, offset)
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
        """The block's whole events and its remainder completed by ``end`` (at stream
        offset ``end_offset``), :func:`.partial.reassemble` (§5.3 rule 5.4); the bytes of
        ``end`` that AppendDecoder's quirk ignores are counted in :attr:`ignored_block_end_bytes`."""
        data, ignored = reassemble(block, self._block_offset, size, end, end_offset)
        self.ignored_block_end_bytes += ignored
        return data

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
        self._events.append(
            Append(
                segment=segment,
                writer_id=writer_id,
                event_number=event_number,
                event_count=count,
                data=data,
                request_id=request_id,
                expected_offset=expected_offset,
                previous_stored=previous,
            )
        )

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
                self._waiting_bytes += len(data)
            else:
                self._out += data
            return
        if slot.data is not None:
            raise RuntimeError("reply slot filled twice")
        slot.data = data
        self._waiting_bytes += len(data)
        while replies and (ready := replies[0].data) is not None:
            replies.popleft()
            self._waiting_bytes -= len(ready)
            self._out += ready

    @property
    def queued_bytes(self) -> int:
        """Bytes of replies queued and not yet taken by :meth:`data_to_send`, those waiting
        behind a reserved slot included (what the connection owes, §11)."""
        return len(self._out) + self._waiting_bytes

    @property
    def holds(self) -> bool:
        """The connection holds something (§11): a frame begun or not yet handled, an
        AppendBlock awaiting its end, a reply reserved or not yet taken."""
        return self.holds_input or self._block is not None or bool(self._replies) or bool(self._out)

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
        self._waiting_bytes = 0
        super().send_failed(now=now)


#: The speed path of :meth:`ServerConnection.next_event`, registered by
#: :mod:`._fast_connection` (which ``refwire.pravega`` imports).  A machine built
#: with the speed path off never calls it.
_FAST_APPEND: list[Callable[[ServerConnection], Append | None]] = []
#: the methods of the plain path the speed path of appends stands for
_SPEED_STANDS_FOR: Final = (
    "_pump",
    "_on_command",
    "_session_for",
    "_on_block_end",
    "_reassemble",
    "_begin_append",
    "_transition",
)


# --------------------------------------------------------------------------- client


class ClientConnection(_Base):
    """The client side: sends Hello first and checks the server's Hello (§7).

    Replies are delivered as :class:`ReplyReceived`; routing them to requests
    by ``request_id`` is the caller's (the driver's) job.
    """

    role = "client"
    TRANSITIONS = CLIENT_TRANSITIONS

    def __init__(
        self,
        limits: Limits = DEFAULT_LIMITS,
        *,
        version: tuple[int, int] = (WIRE_VERSION, OLDEST_COMPATIBLE_VERSION),
        fast: bool | None = None,
    ) -> None:
        """``fast``: take the decoder's speed path; None follows :mod:`refwire.speed`."""
        super().__init__(limits, fast)
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
