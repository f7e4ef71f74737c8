"""The segment store on trio (specs/pravega/README.md §5-§8).

One task reads each connection and feeds the Sans-IO
:class:`~.connection.ServerConnection`; requests go to the pure
:class:`~.processor.RequestProcessor`; replies leave in order through one
queue per connection, each once the log holds its operation durably (a group
commit task syncs the log).  Reads at the tail wait in their own task until
data arrives, the segment is sealed, or ``tail_wait`` passes (then an empty
``SegmentRead(atTail=true)``, below the Rust client's 30 s request timeout).
"""

from __future__ import annotations

import logging
import math
import os
import ssl
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from ..drivers import StreamServer, listener_address
from ..errors import ProtocolError
from ..wire import Limits
from .codec import DEFAULT_LIMITS, Command
from .commands import ReadSegment, SegmentRead
from .connection import Append, ConnectionClosed, HelloReceived, KeepAliveReceived, RequestReceived, ServerConnection
from .processor import RequestProcessor, TokenVerifier
from .storage import FileLog, Log, MemoryLog
from .store import NoSuchSegmentError, SegmentExistsError, SegmentStore

__all__ = ["SegmentStoreServer", "ServerConfig", "StoreAdmin", "memory_server"]

log = logging.getLogger("refwire.pravega.server")


@attrs.frozen(kw_only=True)
class ServerConfig:
    limits: Limits = DEFAULT_LIMITS
    #: answer a read parked at the tail with an empty atTail SegmentRead after
    #: this many seconds (None = wait forever, as Java does)
    tail_wait: float | None = 10.0
    verifier: TokenVerifier | None = None
    read_only: bool = False
    stack_traces: bool = False
    #: largest number of replies queued on one connection before reading pauses
    max_queued_replies: int = 4096
    #: reads parked at the tail per connection; beyond it the oldest is answered empty at once (spec §11)
    max_parked_reads: int = 1000
    handshake_timeout: float = 10.0
    receive_size: int = 256 * 1024


class SegmentStoreServer:
    """A Pravega segment store.

    ``log`` selects durability: None keeps everything in memory; a
    :class:`~.storage.FileLog` (see :meth:`open_dir`) survives restarts; a
    :class:`~.storage.MemoryLog` is what the simulator crashes.
    """

    def __init__(
        self,
        *,
        config: ServerConfig = ServerConfig(),
        log: Log | None = None,
        ssl_context: ssl.SSLContext | None = None,
        now: Any = None,
    ) -> None:
        self.config = config
        self.log = log
        self._wakeups: dict[str, trio.Event] = {}
        self.store = SegmentStore(log, on_visible=self._wake)
        self.processor = RequestProcessor(
            self.store, verifier=config.verifier, read_only=config.read_only, stack_traces=config.stack_traces
        )
        self._server = StreamServer(
            self.handle_stream, ssl_context=ssl_context, handshake_timeout=config.handshake_timeout, name="pravega"
        )
        self._durable = trio.Event()  # replaced after every sync
        self._dirty = trio.Event()
        self._sync_in_thread = isinstance(log, FileLog)
        self.addresses: list[str] = []
        self.stats: dict[str, int] = {"connections": 0, "appends": 0, "events": 0, "reads": 0, "protocol_errors": 0, "syncs": 0}
        self.transitions_seen: set[tuple[str, str, str]] = set()
        self._now = now  # a callable giving ms since the epoch; default the wall clock

    @classmethod
    def open_dir(cls, path: str | os.PathLike[str], **kwargs: Any) -> SegmentStoreServer:
        """A store whose log lives in ``path/segments.log`` (created if missing)."""
        return cls(log=FileLog(Path(path) / "segments.log"), **kwargs)

    def _time_ms(self) -> int:
        if self._now is not None:
            return int(self._now())
        import time

        return int(time.time() * 1000)

    @property
    def admin(self) -> StoreAdmin:
        """This store as the controller's :class:`~.controller.SegmentAdmin`."""
        return StoreAdmin(self)

    def _wake(self, segment: str) -> None:
        ev = self._wakeups.pop(segment, None)
        if ev is not None:
            ev.set()

    # -- durability ------------------------------------------------------------
    async def _syncer(self) -> None:
        """Group commit: sync whatever was written, then publish it."""
        if self.log is None:
            return
        lg = self.log
        while True:
            await self._dirty.wait()
            self._dirty = trio.Event()
            if lg.written > lg.durable:
                if self._sync_in_thread:
                    lsn = await trio.to_thread.run_sync(lg.sync)
                else:
                    lsn = lg.sync()
                self.stats["syncs"] += 1
                self.store.mark_durable(lsn)
            done, self._durable = self._durable, trio.Event()
            done.set()

    async def sync_forever(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run only the group commit (for a store served by other frontends, e.g. the draft dialect's)."""
        task_status.started()
        await self._syncer()
        await trio.sleep_forever()

    async def wait_durable(self, lsn: int) -> None:
        if self.log is None:
            return
        while self.log.durable < lsn:
            ev = self._durable
            self._dirty.set()
            await ev.wait()

    # -- serving -----------------------------------------------------------------
    async def serve(
        self,
        listeners: Sequence[trio.abc.Listener[Any]],
        *,
        task_status: trio.TaskStatus[Sequence[trio.abc.Listener[Any]]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept on ``listeners`` until :meth:`shutdown`."""
        self.addresses = [listener_address(lst) for lst in listeners]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._syncer)
            await self._server.serve(listeners, task_status=task_status)
            nursery.cancel_scope.cancel()

    async def shutdown(self, grace: float = 5.0) -> None:
        await self._server.shutdown(grace)

    @property
    def closing(self) -> trio.Event:
        return self._server.closing

    async def handle_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one connection (any trio stream: TCP, TLS, the simulator's)."""
        self.stats["connections"] += 1
        conn = ServerConnection(self.config.limits)
        send_q, recv_q = trio.open_memory_channel[tuple[int, Any]](self.config.max_queued_replies)
        send_lock = trio.Lock()
        closed = False

        async def send(data: bytes) -> None:
            if data and not closed:
                async with send_lock:
                    await stream.send_all(data)

        async def replier() -> None:
            """Replies in arrival order, each once its operation is durable."""
            nonlocal closed
            async for lsn, item in recv_q:
                await self.wait_durable(lsn)
                if isinstance(item, Append):
                    await send(conn.append_stored(item, self._segment_length(item.segment)))
                elif item == "close":
                    closed = True
                    nursery.cancel_scope.cancel()  # parked reads end with the connection
                    return
                else:
                    await send(item)

        async def reply_in_order(data: bytes) -> None:
            """A woken read goes out after the reply to the command that woke it (spec §6)."""
            try:
                await send_q.send((0, data))
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                pass

        parked: deque[trio.CancelScope] = deque()

        def park(cmd: ReadSegment) -> None:
            """Park a read at the tail (§6), in arrival order: beyond the cap the oldest is answered empty now."""
            deadline = math.inf if self.config.tail_wait is None else trio.current_time() + self.config.tail_wait
            scope = trio.CancelScope(deadline=deadline)
            parked.append(scope)
            if len(parked) > self.config.max_parked_reads:
                parked.popleft().cancel()
            nursery.start_soon(parked_read, cmd, scope)

        async def parked_read(cmd: ReadSegment, scope: trio.CancelScope) -> None:
            try:
                await wait_for_data(cmd, scope)
            finally:
                if scope in parked:
                    parked.remove(scope)

        async def wait_for_data(cmd: ReadSegment, scope: trio.CancelScope) -> None:
            with scope:
                while True:
                    ev = self._wakeups.setdefault(cmd.segment, trio.Event())
                    await ev.wait()
                    out = self.processor.process(cmd, now=self._time_ms(), was_parked=True)
                    if out.park:
                        continue
                    if out.reply is not None:
                        await reply_in_order(out.reply.encode())
                    return
            # tail_wait passed, or the read was the oldest of too many
            empty = SegmentRead(
                segment=cmd.segment, offset=cmd.offset, at_tail=True, end_of_segment=False, data=b"", request_id=cmd.request_id
            )
            await reply_in_order(empty.encode())

        nursery: trio.Nursery
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(replier)
                try:
                    await self._read_loop(stream, conn, send_q, nursery, park)
                finally:
                    await send_q.send((0, "close"))
                    send_q.close()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as group:
            log.debug("pravega: connection lost: %s", group.exceptions[0])
        finally:
            self.transitions_seen |= conn.transitions_seen

    def _segment_length(self, segment: str) -> int:
        seg = self.store.segments.get(segment)
        return -1 if seg is None else seg.length

    async def _read_loop(
        self,
        stream: trio.abc.Stream,
        conn: ServerConnection,
        send_q: trio.MemorySendChannel[tuple[int, Any]],
        nursery: trio.Nursery,
        park: Any,
    ) -> None:
        proc = self.processor
        ignored = 0
        while True:
            try:
                data = await stream.receive_some(self.config.receive_size)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                conn.connection_lost()
                data = b""
            conn.receive_data(data)
            while True:
                try:
                    ev = conn.next_event()
                except ProtocolError as exc:
                    # Real Pravega closes without a reply (§8); what was queued before still goes out.
                    self.stats["protocol_errors"] += 1
                    log.info("pravega: closing connection: %s", exc)
                    return
                if isinstance(ev, Append):
                    if conn.ignored_block_end_bytes != ignored:
                        log.warning(
                            "pravega: writer %s: %d bytes of AppendBlockEnd data ignored (the block had no remainder; Java's quirk, spec §5.3)",
                            ev.writer_id,
                            conn.ignored_block_end_bytes - ignored,
                        )
                        ignored = conn.ignored_block_end_bytes
                    self.stats["appends"] += 1
                    self.stats["events"] += ev.event_count
                    out = proc.append(ev, now=self._time_ms())
                    if out.kind == "ok":
                        self._dirty.set()
                        await send_q.send((out.lsn, ev))
                    elif out.kind == "conditional":
                        await send_q.send((0, conn.append_conditional_failed(ev)))
                    elif out.kind == "failed":
                        assert out.reply is not None
                        await send_q.send((0, conn.append_failed(ev, out.reply)))
                    else:
                        if out.reply is not None:
                            await send_q.send((0, conn.send(out.reply)))
                        return
                elif isinstance(ev, RequestReceived):
                    cmd: Command = ev.command
                    if isinstance(cmd, ReadSegment):
                        self.stats["reads"] += 1
                    out2 = proc.process(cmd, now=self._time_ms())
                    if out2.park:
                        assert isinstance(cmd, ReadSegment)
                        park(cmd)
                        continue
                    if out2.lsn:
                        self._dirty.set()
                    if out2.reply is not None:
                        await send_q.send((out2.lsn, conn.send(out2.reply)))
                    if out2.close:
                        return
                elif isinstance(ev, HelloReceived | KeepAliveReceived):
                    await send_q.send((0, conn.data_to_send()))
                    if conn.must_close:
                        return
                elif isinstance(ev, ConnectionClosed):
                    return
                else:  # NEED_DATA
                    break


class StoreAdmin:
    """The segment store as the controller sees it (``SegmentAdmin``)."""

    def __init__(self, server: SegmentStoreServer) -> None:
        self._server = server

    def create_segment(self, name: str) -> bool:
        try:
            self._server.store.create(name, now=self._server._time_ms())
        except SegmentExistsError:
            return False
        self._server._dirty.set()
        return True

    def seal_segment(self, name: str) -> bool:
        try:
            self._server.store.seal(name, now=self._server._time_ms())
        except NoSuchSegmentError:
            return False
        self._server._dirty.set()
        return True

    def delete_segment(self, name: str) -> bool:
        try:
            self._server.store.delete(name, now=self._server._time_ms())
        except NoSuchSegmentError:
            return False
        self._server._dirty.set()
        return True

    def segment_info(self, name: str) -> tuple[int, int, bool] | None:
        seg = self._server.store.segments.get(name)
        return None if seg is None else (seg.start_offset, seg.visible, seg.sealed_visible)


def memory_server(**kwargs: Any) -> SegmentStoreServer:
    """A store with a :class:`MemoryLog` (durability modelled, for tests and the simulator)."""
    return SegmentStoreServer(log=MemoryLog(), **kwargs)
