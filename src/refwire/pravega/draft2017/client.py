"""Draft-dialect clients on trio: a writer that resumes from the ack level and a
segment reader (specs/pravega-draft-2017/README.md §5-§6).

The draft's replies carry no request ids: AppendSetup and DataAppended are
routed by ConnectionId, SegmentRead by (segment, offset).
"""

from __future__ import annotations

import logging
import math
import random
import uuid
from collections.abc import Awaitable, Callable, Sequence

import attrs
import trio

from ...drivers import RESET, WRITE_FAILED, WRITE_TIMEOUT, Pump, first_error, open_stream, permanent_error
from ...errors import ProtocolError
from ...logs import plural
from ...transport import PeerTimeout, peer_name
from ..frames import Command
from .connection import ClientConnection
from .errors import DraftWriteFailed
from .events import Blocks, ConnectionClosed, ReplyReceived
from .frames import AppendSetup, DataAppended, ReadSegment, SegmentRead
from .writer import DraftWriterSession, Planner

__all__ = ["DraftConnection", "DraftReader", "DraftWriteFailed", "DraftWriter", "DraftWriterConfig"]

log = logging.getLogger("refwire.pravega.draft2017.client")


class DraftConnection:
    """One draft-dialect connection with replies routed to waiters, run by
    :class:`~refwire.drivers.Pump`; the KeepAlive and silence timers (§8) are the
    machine's (:class:`ClientConnection`)."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        *,
        keepalive_interval: float | None = 10.0,
        silence_timeout: float | None = 180.0,
        receive_size: int = 256 * 1024,
    ) -> None:
        self.stream = stream
        self.machine = ClientConnection(
            keepalive_interval=keepalive_interval, silence_timeout=silence_timeout, now=trio.current_time()
        )
        self.pump = Pump(stream, self.machine, self._on_event, receive_size=receive_size, write_timeout=None)
        self._by_id: dict[uuid.UUID, trio.MemorySendChannel[Command]] = {}
        self._reads: dict[tuple[str, int], trio.MemorySendChannel[Command]] = {}
        self.closed = trio.Event()
        self.error: BaseException | None = None

    async def send(self, cmd: Command | Blocks) -> None:
        """Send ``cmd`` (or a writer session's blocks) and return once written."""
        if self.closed.is_set():
            raise trio.ClosedResourceError("draft connection closed") from self.error
        self.machine.send(cmd, now=trio.current_time())
        await self.pump.flush()
        if self.pump.ended in (RESET, WRITE_FAILED, WRITE_TIMEOUT):
            raise trio.BrokenResourceError(f"draft connection broken ({self.pump.ended})")

    def subscribe(self, connection_id: uuid.UUID) -> trio.MemoryReceiveChannel[Command]:
        send, recv = trio.open_memory_channel[Command](math.inf)
        if self.closed.is_set():
            send.close()
        self._by_id[connection_id] = send
        return recv

    async def run(self, *, task_status: trio.TaskStatus[Pump] = trio.TASK_STATUS_IGNORED) -> None:
        """Route replies until the connection ends (started at once: the draft has no Hello)."""
        try:
            await self.pump.run(task_status=task_status)
        except ProtocolError as exc:
            self.error = exc
        finally:
            self._close()
            await trio.aclose_forcefully(self.stream)

    def _close(self) -> None:
        self.closed.set()
        for ch in [*self._by_id.values(), *self._reads.values()]:
            ch.close()

    async def _on_event(self, ev: object) -> None:
        if isinstance(ev, ReplyReceived):
            self._route(ev.command)
        elif isinstance(ev, ConnectionClosed):
            if ev.reason == "silence":
                log.info("pravega draft: no reply for %.0f s; closing", self.machine.silence_timeout)
            self._close()
            self.pump.stop()

    def _route(self, cmd: Command) -> None:
        if isinstance(cmd, AppendSetup | DataAppended):
            ch = self._by_id.get(cmd.connection_id)
            if ch is not None:
                ch.send_nowait(cmd)
                return
        elif isinstance(cmd, SegmentRead):
            ch = self._reads.pop((cmd.segment, cmd.offset), None)
            if ch is not None:
                ch.send_nowait(cmd)
                ch.close()
                return
        log.warning("pravega draft: unexpected reply ignored: %s", cmd.NAME)

    async def read(self, segment: str, offset: int, suggested_length: int, *, timeout: float = 30.0) -> SegmentRead:
        key = (segment, offset)
        if key in self._reads:
            raise RuntimeError(f"a read of {segment} at {offset} is already outstanding")
        send, recv = trio.open_memory_channel[Command](1)
        self._reads[key] = send
        reply: Command | None = None
        try:
            with trio.move_on_after(timeout):
                await self.send(ReadSegment(segment=segment, offset=offset, suggested_length=suggested_length))
                try:
                    reply = await recv.receive()
                except trio.EndOfChannel:
                    if isinstance(self.error, ProtocolError):
                        raise self.error from None
                    raise trio.BrokenResourceError("connection closed before the SegmentRead") from self.error
        finally:
            self._reads.pop(key, None)
        if reply is None:  # (the draft dialect has no Hello: this is the first answer a silent peer owes)
            peer = peer_name(self.pump.stream, "the segment store")
            raise PeerTimeout(f"no reply to ReadSegment from {peer} in {timeout:g} s", peer=peer, seconds=timeout)
        assert isinstance(reply, SegmentRead)
        return reply


@attrs.frozen(kw_only=True)
class DraftWriterConfig:
    """:class:`DraftWriter` settings: reconnect attempts (None: forever), the
    reconnect delays (first and largest), and the connect and ack time limits."""

    max_attempts: int | None = 10
    #: reconnect after the store broke the protocol; False gives up at once.
    retry_protocol_errors: bool = True
    backoff: tuple[float, float] = (0.05, 2.0)
    connect_timeout: float = 10.0
    ack_timeout: float = 30.0


class DraftWriter:
    """Writes events to a segment in the draft dialect; each byte stored once (§5)."""

    def __init__(
        self,
        host: str,
        port: int,
        segment: str,
        *,
        connection_id: uuid.UUID | None = None,
        config: DraftWriterConfig = DraftWriterConfig(),
        planner: Planner | None = None,
        connect: Callable[[], Awaitable[trio.abc.Stream]] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.session = DraftWriterSession(segment, connection_id or uuid.uuid4(), planner=planner)
        self.config = config
        self._connect = connect or (lambda: open_stream(host, port, timeout=config.connect_timeout))
        self._rng = rng or random.Random()
        self.stats = {"connections": 0, "reconnects": 0, "protocol_errors": 0}
        self.last_protocol_error: ProtocolError | None = None
        #: the client machines' transitions over every connection (coverage)
        self.transitions_seen: set[tuple[str, str, str]] = set()

    async def write(self, payloads: Sequence[bytes]) -> int:
        """Append ``payloads``; returns the ack level once all are durable."""
        for p in payloads:
            self.session.add(p)
        failures = 0
        delay = self.config.backoff[0]
        while self.session.pending:
            try:
                try:
                    await self._one_connection()
                except BaseExceptionGroup as group:
                    raise first_error(group) from group
                failures, delay = 0, self.config.backoff[0]
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, ProtocolError) as exc:
                failures += 1
                self.session.connection_lost()
                if isinstance(exc, ProtocolError) and exc.field != "(eof)":
                    self.stats["protocol_errors"] += 1
                    self.last_protocol_error = exc
                if isinstance(exc, PeerTimeout) and "AppendSetup" in str(exc) and not self.config.retry_protocol_errors:
                    # a peer that accepts but never answers SetupAppend is not a draft segment store
                    raise DraftWriteFailed(f"gave up: {exc}", self.session.acked) from exc
                if permanent_error(exc, protocol_errors=not self.config.retry_protocol_errors):
                    raise DraftWriteFailed(f"gave up: {exc} (retrying cannot fix it)", self.session.acked) from exc
                if self.config.max_attempts is not None and failures >= self.config.max_attempts:
                    raise DraftWriteFailed(f"gave up after {plural(failures, 'failed attempt')}: {exc}", self.session.acked) from exc
                await trio.sleep(delay * (0.5 + self._rng.random()))
                delay = min(delay * 2, self.config.backoff[1])
                self.stats["reconnects"] += 1
        return self.session.acked

    async def _one_connection(self) -> None:
        stream = await self._connect()
        self.stats["connections"] += 1
        conn = DraftConnection(stream)
        session = self.session
        try:
            await self._converse(conn, session)
        finally:
            self.transitions_seen |= conn.machine.transitions_seen

    async def _converse(self, conn: DraftConnection, session: DraftWriterSession) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)
            replies = conn.subscribe(session.connection_id)
            await conn.send(session.setup())

            async def next_reply(what: str = "ack", timeout: float = self.config.ack_timeout) -> Command:
                with trio.move_on_after(timeout):
                    try:
                        return await replies.receive()
                    except trio.EndOfChannel:
                        if isinstance(conn.error, ProtocolError):
                            raise conn.error from None
                        raise trio.BrokenResourceError("connection closed") from conn.error
                peer = peer_name(conn.pump.stream, "the segment store")
                hint = " (is it a segment store speaking the 2017 draft dialect?)" if what == "AppendSetup" else ""
                raise PeerTimeout(f"no {what} from {peer} in {timeout:g} s{hint}", peer=peer, seconds=timeout)

            # (the draft dialect has no Hello: AppendSetup is the first answer)
            reply = await next_reply("AppendSetup", self.config.connect_timeout)
            if not isinstance(reply, AppendSetup):
                raise trio.BrokenResourceError(f"expected AppendSetup, got {reply.NAME}")
            session.on_append_setup(reply)
            await conn.send(Blocks(session.take()))
            while session.pending:
                reply = await next_reply()
                if isinstance(reply, DataAppended):
                    session.on_data_appended(reply)
                await conn.send(Blocks(session.take()))
            nursery.cancel_scope.cancel()


class DraftReader:
    """Reads a segment from ``offset`` over one :class:`DraftConnection`."""

    def __init__(self, conn: DraftConnection, segment: str, *, offset: int = 0, read_size: int = 1024 * 1024) -> None:
        self.conn = conn
        self.segment = segment
        self.offset = offset
        self.read_size = read_size
        self.end_of_segment = False

    async def read(self, *, timeout: float = 30.0) -> SegmentRead:
        reply = await self.conn.read(self.segment, self.offset, self.read_size, timeout=timeout)
        self.offset += len(reply.data)
        self.end_of_segment = reply.end_of_segment
        return reply
