"""Pravega clients on trio: a request/reply connection, an event writer that
survives reconnects without duplicates, and a segment reader
(specs/pravega/README.md §5-§7).

These talk to a segment store directly (addressed by ``HOST:PORT`` and a
fully qualified segment name such as ``scope/stream/0.#epoch.0``); finding the
store through a controller is the application's business.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
import struct
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Final

import attrs
import trio

from ..drivers import READ_TIMEOUT, WRITE_FAILED, WRITE_TIMEOUT, Pump, open_stream, permanent_error
from ..errors import LocalProtocolError, ProtocolError
from ..logs import plural
from ..transport import PeerTimeout, peer_name
from ..wire import Limits
from .connection import ClientConnection, State
from .errors import RequestFailed, WriteFailed
from .events import AppendBytes, ClientEvent, ConnectionClosed, HelloReceived, ReplyReceived
from .frames import (
    CLIENT_LIMITS,
    PROTOCOL,
    AppendSetup,
    Command,
    CreateSegment,
    DataAppended,
    GetStreamSegmentInfo,
    NoSuchSegment,
    ReadSegment,
    SealSegment,
    SegmentAlreadyExists,
    SegmentCreated,
    SegmentIsSealed,
    SegmentRead,
    SegmentSealed,
    StreamSegmentInfo,
    request_id_of,
)
from .writer import MAX_EVENT_SIZE, Style, WriterSession

__all__ = [
    "EventWriter",
    "PravegaConnection",
    "RequestFailed",
    "SegmentReader",
    "WriteFailed",
    "WriterConfig",
    "create_segment",
    "parse_events",
    "seal_segment",
    "segment_info",
]

log = logging.getLogger("refwire.pravega.client")
#: Seconds a client waits by default to connect, for the server's Hello, and
#: (requests other than reads and appends) for a reply.
DEFAULT_TIMEOUT: Final = 10.0
_HDR = struct.Struct(">ii")
_ids = itertools.count(1)


def next_request_id() -> int:
    return next(_ids)


class PravegaConnection:
    """One connection to a segment store: Hello exchanged, replies routed by requestId.

    ``await conn.request(cmd)`` sends a request and returns its reply (any
    reply with the same requestId); ``subscribe(rid, handler)`` routes every
    reply with ``rid`` to ``handler`` (writers' DataAppended).
    """

    def __init__(
        self, stream: trio.abc.Stream, *, limits: Limits = CLIENT_LIMITS, hello_timeout: float | None = DEFAULT_TIMEOUT
    ) -> None:
        self.stream = stream
        #: ``HOST:PORT`` of the segment store, for messages
        self.peer = peer_name(stream, "the segment store")
        #: :meth:`run` gives up (:class:`~refwire.transport.PeerTimeout`) when the
        #: server's Hello has not come this many seconds after ours (None: never)
        self.hello_timeout = hello_timeout
        self.machine = ClientConnection(limits)
        #: the reader, timer and writer of this connection (:class:`refwire.drivers.Pump`)
        self.pump = Pump(stream, self.machine, self._on_event, receive_size=256 * 1024, write_timeout=None)
        self._waiters: dict[int, trio.MemorySendChannel[Command]] = {}
        self._subscribers: dict[int, trio.MemorySendChannel[Command]] = {}
        self.closed = trio.Event()
        self.error: BaseException | None = None
        #: request ids of this connection (they route replies; unique per connection is enough,
        #: and a per-connection count keeps a seeded run's bytes the same run after run)
        self._request_ids = itertools.count(1)
        self._hello = trio.Event()
        self._task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
        self._foreground = False
        self._inboxes: dict[int, deque[Command]] = {}

    @classmethod
    async def connect(cls, host: str, port: int, *, timeout: float = DEFAULT_TIMEOUT, **kwargs: Any) -> PravegaConnection:
        """Open a TCP connection to a segment store within ``timeout`` seconds; start
        it with ``await nursery.start(conn.run)`` (which waits as long again, by
        default, for the server's Hello: ``hello_timeout``)."""
        stream = await open_stream(host, port, timeout=timeout)
        kwargs.setdefault("hello_timeout", timeout)
        conn = cls(stream, **kwargs)
        if conn.peer == "the segment store":
            conn.peer = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return conn

    def _no_hello(self, seconds: float) -> PeerTimeout:
        return PeerTimeout(
            f"no Pravega Hello from {self.peer} in {seconds:g} s (is it a segment store?)", peer=self.peer, seconds=seconds
        )

    def new_request_id(self) -> int:
        """The next request id of this connection."""
        return next(self._request_ids)

    async def send(self, cmd: Command | AppendBytes) -> None:
        """Queue ``cmd`` on the machine and write it from this task (in the
        foreground mode of :meth:`start`, the next :meth:`next_reply` writes it)."""
        self.queue(cmd)
        if self._foreground:
            return  # the next reply's Pump.run_until writes it
        await self.pump.flush()
        if self.pump.ended in (WRITE_FAILED, WRITE_TIMEOUT):
            raise trio.BrokenResourceError(f"connection broken ({self.pump.ended})")

    def queue(self, cmd: Command | AppendBytes) -> None:
        """Queue ``cmd`` on the machine without writing it: the foreground mode's
        next :meth:`next_reply` writes it (:meth:`send` in either mode)."""
        if self.closed.is_set() or self.machine.state is not State.OPEN:
            name = "appends" if isinstance(cmd, AppendBytes) else cmd.NAME
            raise trio.ClosedResourceError(f"connection closed; cannot send {name}") from self.error
        self.machine.send(cmd, now=trio.current_time())

    @property
    def ready(self) -> bool:
        """The server's Hello arrived."""
        return self._hello.is_set()

    async def send_appends(self, data: bytes) -> None:
        """A writer session's encoded appends (``WriterSession.take()``)."""
        if data:
            await self.send(AppendBytes(data))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send Hello, wait for the server's Hello (then ``task_status.started()``),
        then route replies until the connection ends."""
        self._task_status = task_status
        hello_missing = False
        try:
            async with trio.open_nursery() as nursery:
                if self.hello_timeout is not None:

                    async def watch_hello(timeout: float) -> None:
                        nonlocal hello_missing
                        with trio.move_on_after(timeout):
                            await self._hello.wait()
                            return
                        hello_missing = True
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(watch_hello, self.hello_timeout)
                self.machine.initiate(now=trio.current_time())
                await self.pump.flush()
                await self.pump.run()
                nursery.cancel_scope.cancel()
        except ProtocolError as exc:
            self.error = exc
            raise
        finally:
            self._end()
            await trio.aclose_forcefully(self.stream)
        if hello_missing:
            assert self.hello_timeout is not None
            self.error = self._no_hello(self.hello_timeout)
            raise self.error

    async def start(self, *, timeout: float = 10.0) -> None:
        """The foreground mode, instead of :meth:`run` in a task of its own: send
        Hello and read until the server's, in this task.  From then on replies
        are read only while a task waits for one (:meth:`next_reply`), and by
        that task: a stop-and-wait writer's round trip is then one task, with no
        hand-off (``Pump.run_until``)."""
        self._foreground = True
        self.machine.initiate(now=trio.current_time())
        with trio.move_on_after(timeout) as waited:
            await self._run_until(self._hello.is_set)
        if waited.cancelled_caught and not self._hello.is_set():
            self._end()
            raise self._no_hello(timeout)
        if not self._hello.is_set():
            raise trio.BrokenResourceError("connection closed before the server's Hello") from self.error

    def inbox(self, request_id: int) -> deque[Command]:
        """Foreground mode: every reply with ``request_id`` from now on is
        appended to the deque returned (:meth:`next_reply` takes them)."""
        box: deque[Command] = deque()
        self._inboxes[request_id] = box
        return box

    async def next_reply(self, inbox: deque[Command], *, timeout: float | None = None) -> Command:
        """Foreground mode: the next reply in ``inbox`` (from :meth:`inbox`),
        reading for it in this task; ``trio.EndOfChannel`` once the connection
        has ended without one.  Past ``timeout`` seconds without it the
        connection is given up (``Pump.run_until``'s ``give_up_at``: the stream
        is closed) and ``trio.TooSlowError`` is raised."""
        if not inbox:
            give_up_at = None if timeout is None else trio.current_time() + timeout
            await self._run_until(inbox.__len__, give_up_at)
            if not inbox:
                if self.pump.ended == READ_TIMEOUT:
                    raise PeerTimeout(
                        f"no reply from {self.peer} in {timeout:g} s; connection given up", peer=self.peer, seconds=timeout
                    )
                raise trio.EndOfChannel
        return inbox.popleft()

    async def _run_until(self, done: Callable[[], object], give_up_at: float | None = None) -> None:
        try:
            await self.pump.run_until(done, give_up_at=give_up_at)
        except BaseException as exc:
            if isinstance(exc, Exception):
                self.error = exc
            self._end()
            raise
        if self.pump.ended is not None:
            self._end()

    def _end(self) -> None:
        """The connection is over: every reply channel ends (and the pump, with its
        watchdog in the foreground mode)."""
        self.pump.stop()
        self.closed.set()
        for ch in [*self._waiters.values(), *self._subscribers.values()]:
            ch.close()

    async def _on_event(self, ev: ClientEvent) -> None:
        if isinstance(ev, ReplyReceived):
            self._route(ev.command)
        elif isinstance(ev, HelloReceived):
            if not self._hello.is_set():
                self._hello.set()
                self._task_status.started()
        elif isinstance(ev, ConnectionClosed):
            if not self._hello.is_set():
                raise trio.BrokenResourceError("connection closed before the server's Hello")
        # KeepAliveReceived: nothing to do

    def _route(self, cmd: Command) -> None:
        rid = request_id_of(cmd)
        box = self._inboxes.get(rid)
        if box is not None:
            box.append(cmd)
            return
        sub = self._subscribers.get(rid)
        if sub is not None:
            sub.send_nowait(cmd)
            return
        ch = self._waiters.pop(rid, None)
        if ch is not None:
            ch.send_nowait(cmd)
            ch.close()
            return
        log.warning("pravega: reply with unknown requestId %d ignored: %s", rid, cmd.NAME)

    def subscribe(self, request_id: int) -> trio.MemoryReceiveChannel[Command]:
        """Every reply with ``request_id`` from now on (a writer's AppendSetup and
        DataAppended); the channel ends when the connection does."""
        send, recv = trio.open_memory_channel[Command](math.inf)
        if self.closed.is_set():
            send.close()
        self._subscribers[request_id] = send
        return recv

    def unsubscribe(self, request_id: int) -> None:
        ch = self._subscribers.pop(request_id, None)
        if ch is not None:
            ch.close()

    async def request(self, cmd: Command, *, timeout: float | None = 30.0) -> Command:
        """Send ``cmd`` and wait for the reply with its requestId, at most
        ``timeout`` seconds (Rust's 30 s request timeout; None: as long as the
        connection lives -- a read parked at the tail of a followed segment);
        past it, :class:`~refwire.transport.PeerTimeout` names the request."""
        rid = int(cmd.request_id)  # type: ignore[attr-defined]
        send, recv = trio.open_memory_channel[Command](1)
        self._waiters[rid] = send
        try:
            with trio.move_on_after(math.inf if timeout is None else timeout):
                await self.send(cmd)
                try:
                    return await recv.receive()
                except trio.EndOfChannel:
                    if isinstance(self.error, PeerTimeout):
                        raise self.error from None
                    raise trio.BrokenResourceError(f"connection closed before the reply to {cmd.NAME}") from self.error
            raise PeerTimeout(f"no reply to {cmd.NAME} from {self.peer} in {timeout:g} s", peer=self.peer, seconds=timeout)
        finally:
            self._waiters.pop(rid, None)

    async def aclose(self) -> None:
        """Close the connection at once."""
        await trio.aclose_forcefully(self.stream)


async def _with_connection(
    host: str, port: int, fn: Callable[[PravegaConnection], Awaitable[Any]], *, timeout: float = DEFAULT_TIMEOUT
) -> Any:
    conn = await PravegaConnection.connect(host, port, timeout=timeout, hello_timeout=timeout)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)  # (within hello_timeout, or PeerTimeout)
            try:
                return await fn(conn)
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # one error: raised as it is, not in the nursery's group
        if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
            raise group.exceptions[0]  # noqa: B904 (its own cause chain is kept)
        raise


async def create_segment(host: str, port: int, segment: str, *, timeout: float = DEFAULT_TIMEOUT) -> bool:
    """Create ``segment``; False if it already existed.  Connecting, the Hello and
    the reply each take at most ``timeout`` seconds (:class:`~refwire.transport.PeerTimeout`)."""

    async def go(conn: PravegaConnection) -> bool:
        reply = await conn.request(CreateSegment(request_id=conn.new_request_id(), segment=segment), timeout=timeout)
        if isinstance(reply, SegmentCreated):
            return True
        if isinstance(reply, SegmentAlreadyExists):
            return False
        raise RequestFailed(reply)

    return bool(await _with_connection(host, port, go, timeout=timeout))


async def seal_segment(host: str, port: int, segment: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Seal ``segment`` on the store at ``host:port`` (already sealed is fine)."""

    async def go(conn: PravegaConnection) -> None:
        reply = await conn.request(SealSegment(request_id=conn.new_request_id(), segment=segment), timeout=timeout)
        if not isinstance(reply, SegmentSealed | SegmentIsSealed):
            raise RequestFailed(reply)

    await _with_connection(host, port, go, timeout=timeout)


@attrs.frozen(kw_only=True)
class WriterConfig:
    """:class:`EventWriter` settings: the append ``style`` (``"rust"``: one bare
    AppendBlockEnd per batch; ``"java"``: Java's streamed blocks; see
    :mod:`refwire.pravega.writer` and specs/pravega/README.md §5.2), reconnecting,
    timeouts and the delegation ``token`` sent in SetupAppend."""

    style: Style = "rust"
    max_attempts: int | None = 10  #: consecutive failed connections before giving up (None = forever)
    #: reconnect after the store broke the protocol; False gives up at once (a host
    #: name that does not resolve or a TLS certificate that fails always does).
    retry_protocol_errors: bool = True
    backoff: tuple[float, float] = (0.05, 2.0)  #: first and largest reconnect delay (jittered)
    connect_timeout: float = 10.0
    ack_timeout: float = 30.0  #: reconnect when nothing is acked for this long while events are unacked
    token: str = ""


class _Link:
    """One live connection of a writer, set up for its session."""

    def __init__(self, conn: PravegaConnection, acks: deque[Command]) -> None:
        self.conn = conn
        self.acks = acks


class EventWriter:
    """Writes events to one segment, exactly once and in order across reconnects (§5.5).

    ``await writer.write(payloads)`` returns when all are durably stored.  The
    writer reconnects on any failure, sends SetupAppend, and resends only what
    the server's AppendSetup says it does not have.

    Used as ``async with EventWriter(...) as w:`` it keeps one connection open
    across writes; otherwise each flush connects and disconnects.  The
    connection runs in the foreground (:meth:`PravegaConnection.start`): the
    writing task reads its own acks, so a write waits for no other task.  A
    write that is cancelled drops the connection (the next one reconnects and
    resends what the store does not have).
    """

    def __init__(
        self,
        host: str,
        port: int,
        segment: str,
        *,
        writer_id: uuid.UUID | None = None,
        config: WriterConfig = WriterConfig(),
        connect: Callable[[], Awaitable[trio.abc.Stream]] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.session = WriterSession(
            segment, uuid.uuid4() if writer_id is None else writer_id, style=config.style, token=config.token
        )
        self.config = config
        self._connect = connect or (lambda: open_stream(host, port, timeout=config.connect_timeout))
        self._rng = rng or random.Random()
        self._keep = False  # inside ``async with``: the connection outlives a flush
        self._link: _Link | None = None
        self.last_protocol_error: ProtocolError | None = None
        self.stats = {"connections": 0, "reconnects": 0, "acked": 0, "protocol_errors": 0}
        #: the client machines' transitions over every connection (coverage)
        self.transitions_seen: set[tuple[str, str, str]] = set()

    @property
    def writer_id(self) -> uuid.UUID:
        """The writer id this writer's appends carry (the store keys event numbers by it)."""
        return self.session.writer_id

    async def __aenter__(self) -> EventWriter:
        self._keep = True
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._keep = False
        await self._drop_link()

    async def write(self, payloads: Sequence[bytes]) -> None:
        """Queue ``payloads`` as events and :meth:`flush`: returns once the store
        holds every one durably, each exactly once."""
        for p in payloads:
            self.session.add(p)
        await self.flush()

    async def flush(self) -> None:
        """Until every queued event is acked (or :class:`WriteFailed`)."""
        failures = 0
        delay = self.config.backoff[0]
        try:
            while self.session.pending:
                try:
                    if self._link is None:
                        self._link = await self._open()
                    await self._drain(self._link)
                    failures = 0
                    delay = self.config.backoff[0]
                except (
                    OSError,
                    trio.BrokenResourceError,
                    trio.ClosedResourceError,
                    trio.TooSlowError,
                    ProtocolError,
                    RequestFailed,
                ) as exc:
                    failures += 1
                    await self._drop_link()
                    self.session.connection_lost()
                    if isinstance(exc, ProtocolError) and exc.field != "(eof)":
                        self.stats["protocol_errors"] += 1  # the server sent something we had to reject
                        self.last_protocol_error = exc
                    if isinstance(exc, RequestFailed) and isinstance(exc.reply, NoSuchSegment):
                        raise WriteFailed(
                            f"segment {self.session.segment!r} does not exist", [e.number for e in self.session.pending]
                        ) from exc
                    if isinstance(exc, PeerTimeout) and "Hello" in str(exc) and not self.config.retry_protocol_errors:
                        # a peer that accepts but never says Hello is not a segment store
                        raise WriteFailed(f"gave up: {exc}", [e.number for e in self.session.pending]) from exc
                    if permanent_error(exc, protocol_errors=not self.config.retry_protocol_errors):
                        raise WriteFailed(
                            f"gave up: {exc} (retrying cannot fix it)", [e.number for e in self.session.pending]
                        ) from exc
                    if self.config.max_attempts is not None and failures >= self.config.max_attempts:
                        raise WriteFailed(
                            f"gave up after {plural(failures, 'failed attempt')}: {exc}", [e.number for e in self.session.pending]
                        ) from exc
                    log.info("pravega writer: %s; reconnecting", exc)
                    await trio.sleep(delay * (0.5 + self._rng.random()))
                    delay = min(delay * 2, self.config.backoff[1])
                    self.stats["reconnects"] += 1
        except BaseException:
            if self._link is not None and self._link.conn.closed.is_set():
                await self._drop_link()  # cancelled while the connection was in use: it is not reused
                self.session.connection_lost()
            raise
        finally:
            if not self._keep:
                await self._drop_link()

    async def _drop_link(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            self.transitions_seen |= link.conn.machine.transitions_seen
            link.conn._end()
            await trio.aclose_forcefully(link.conn.stream)

    async def _open(self) -> _Link:
        """Connect, exchange Hello, SetupAppend; the session resends what the server lacks."""
        stream = await self._connect()
        self.stats["connections"] += 1
        conn = PravegaConnection(stream)
        try:
            await conn.start(timeout=self.config.connect_timeout)
            link = _Link(conn, conn.inbox(rid := conn.new_request_id()))
            await conn.send(self.session.setup(rid))
            reply = await self._next_reply(link)
            if not isinstance(reply, AppendSetup):
                raise RequestFailed(reply)
            self.session.on_append_setup(reply)
        except BaseException:
            self.transitions_seen |= conn.machine.transitions_seen
            conn._end()
            await trio.aclose_forcefully(stream)
            raise
        return link

    async def _next_reply(self, link: _Link) -> Command:
        acks = link.acks
        if acks:  # already read
            return acks.popleft()
        # (the connection's watchdog keeps the ack timeout: no cancel scope per ack)
        try:
            return await link.conn.next_reply(acks, timeout=self.config.ack_timeout)
        except trio.EndOfChannel:
            if isinstance(link.conn.error, ProtocolError):
                raise link.conn.error from None
            raise trio.BrokenResourceError("connection closed") from link.conn.error

    async def _drain(self, link: _Link) -> None:
        """Send what is unsent; wait until every pending event is acked.  (The
        link's connection runs in the foreground: what is queued here is written
        by the next :meth:`_next_reply`, in the same pass as its read.)"""
        session = self.session
        conn = link.conn
        while True:
            data = session.take()
            if data:
                conn.queue(AppendBytes(data))
            if not session.pending:
                return
            reply = await self._next_reply(link)
            if isinstance(reply, DataAppended):
                self.stats["acked"] += len(session.on_data_appended(reply))
            else:  # ConditionalCheckFailed, SegmentIsSealed, NoSuchSegment, WrongHost...: the server dropped our state
                raise RequestFailed(reply)


def parse_events(data: bytes, *, base: int = 0, max_event_size: int = MAX_EVENT_SIZE) -> tuple[list[tuple[int, bytes]], int]:
    """Split segment bytes into ``(offset, payload)`` of whole Event frames (§6);
    returns them and the number of bytes consumed (a partial event is left).
    An Event header above ``max_event_size`` is an error (spec §11)."""
    out: list[tuple[int, bytes]] = []
    pos = 0
    n = len(data)
    while pos + 8 <= n:
        t, ln = _HDR.unpack_from(data, pos)
        if t == 0 and ln > max_event_size:
            raise LocalProtocolError(
                f"event of {ln} bytes is larger than {max_event_size}",
                protocol=PROTOCOL,
                frame="Event",
                field="length",
                offset=base + pos + 4,
            )
        if t != 0 or ln < 0:
            raise LocalProtocolError(
                f"event was of wrong type {t}" if t != 0 else f"negative event length {ln}",
                protocol=PROTOCOL,
                frame="Event",
                field="type",
                offset=base + pos,
            )
        if pos + 8 + ln > n:
            break
        out.append((base + pos, bytes(data[pos + 8 : pos + 8 + ln])))
        pos += 8 + ln
    return out, pos


class SegmentReader:
    """Reads a segment from ``offset`` on: raw bytes or events, waiting at the tail."""

    def __init__(
        self, conn: PravegaConnection, segment: str, *, offset: int = 0, read_size: int = 1024 * 1024, token: str = ""
    ) -> None:
        self.conn = conn
        self.segment = segment
        self.offset = offset
        self.read_size = read_size
        self.token = token
        self.end_of_segment = False
        self._carry = b""

    async def read(self, *, timeout: float | None = 30.0) -> SegmentRead:
        """One ReadSegment at the current offset; advances past the data.  The
        reply takes at most ``timeout`` seconds (None: a read that may park at
        the tail of a followed segment, as long as the connection lives)."""
        reply = await self.conn.request(
            ReadSegment(
                segment=self.segment,
                offset=self.offset,
                suggested_length=self.read_size,
                delegation_token=self.token,
                request_id=self.conn.new_request_id(),
            ),
            timeout=timeout,
        )
        if isinstance(reply, SegmentIsSealed):
            self.end_of_segment = True
            return SegmentRead(
                segment=self.segment, offset=self.offset, at_tail=True, end_of_segment=True, data=b"", request_id=reply.request_id
            )
        if not isinstance(reply, SegmentRead):
            raise RequestFailed(reply)
        if reply.offset != self.offset:
            raise LocalProtocolError(
                f"SegmentRead offset {reply.offset} does not echo the request's {self.offset}",
                protocol=PROTOCOL,
                frame="SegmentRead",
                field="offset",
            )
        self.offset += len(reply.data)
        self.end_of_segment = reply.end_of_segment
        return reply

    async def events(self, *, until_tail: bool = False, timeout: float | None = 30.0) -> AsyncIterator[tuple[int, bytes]]:
        """``(offset, payload)`` of each event; stops at the end of a sealed
        segment, or at the tail when ``until_tail``.  Each read's reply takes at
        most ``timeout`` seconds (see :meth:`read`).

        Events are written whole (an append holds whole Event frames, §5.1), so
        a segment whose tail or end falls inside an event was read from an
        offset that is not an event's start: with ``until_tail``, or at the end
        of a sealed segment, that is :class:`~refwire.errors.LocalProtocolError`
        naming the offset (not a wait for bytes that never come)."""
        start = self.offset - len(self._carry)
        while not self.end_of_segment:
            r = await self.read(timeout=timeout)
            buf = self._carry + r.data
            evs, used = parse_events(buf, base=start)
            self._carry = buf[used:]
            start += used
            for ev in evs:
                yield ev
            if self._carry and ((until_tail and r.at_tail) or self.end_of_segment):
                raise LocalProtocolError(
                    f"the segment ends inside an event: {len(self._carry)} bytes from offset {start} on are not a whole "
                    "Event frame (was the first offset not the start of an event?)",
                    protocol=PROTOCOL,
                    frame="Event",
                    field="length",
                    offset=start,
                )
            if until_tail and r.at_tail:
                return


async def segment_info(conn: PravegaConnection, segment: str, *, timeout: float = 30.0) -> StreamSegmentInfo:
    """GetStreamSegmentInfo over a running connection (length, sealed, ...);
    raises :class:`~refwire.pravega.errors.RequestFailed` with any other reply."""
    reply = await conn.request(GetStreamSegmentInfo(request_id=conn.new_request_id(), segment_name=segment), timeout=timeout)
    if not isinstance(reply, StreamSegmentInfo):
        raise RequestFailed(reply)
    return reply
