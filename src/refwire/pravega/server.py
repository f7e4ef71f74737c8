"""The segment store on trio (specs/pravega/README.md §5-§8).

A :class:`~refwire.drivers.Pump` runs each connection's Sans-IO
:class:`~refwire.pravega.connection.ServerConnection`; requests go to the pure
:class:`~refwire.pravega.service.SegmentStoreService`; replies leave in arrival order, each
once the log holds its operation durably (a group commit task syncs the log):
a reply that must wait keeps its place in the machine's reply order and a
replier task fills it.  Reads at the tail wait in their own task until
data arrives, the segment is sealed, or ``tail_wait`` passes (then an empty
``SegmentRead(atTail=true)``, below the Rust client's 30 s request timeout).
"""

from __future__ import annotations

import logging
import math
import os
import ssl
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from ..admission import ServerBudget
from ..drivers import DEFAULT_MAX_CONNECTIONS, Pump, StreamServer, listener_address
from ..errors import RemoteProtocolError
from ..logs import limited, plural
from ..reference import RunningServer
from ..transport import peer_name
from ..wire import Limits
from .budget import parked_cost, shares
from .connection import ServerConnection
from .disk import FileLog
from .errors import NoSuchSegmentError, SegmentExistsError
from .events import Append, HelloReceived, KeepAliveReceived, ReplySlot, RequestReceived, ServerEvent
from .frames import DEFAULT_LIMITS, Command, ReadSegment, SegmentRead
from .service import SegmentStoreService, TokenVerifier
from .storage import Log, MemoryLog
from .store import SegmentStore

__all__ = ["ReplyRoom", "SegmentStoreServer", "ServerConfig", "StoreAdmin", "memory_server", "serve_reference"]

log = logging.getLogger("refwire.pravega.server")


@attrs.frozen(kw_only=True)
class ServerConfig:
    """Segment store settings: ``limits``, tail reads, the delegation-token
    ``verifier``, ``read_only``, whether error replies carry ``stack_traces``,
    and per-connection bounds."""

    #: ``max_connection_memory`` is the per-connection budget (spec §11, :mod:`.budget`)
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
    #: seconds a frame may stay incomplete once begun (None: never); between frames a
    #: connection may stay idle for ever, as with the real server (spec §11)
    frame_timeout: float | None = 30.0
    #: seconds without a byte received before a connection is closed (None: never, the default, as
    #: with the real server; it counts from the last byte, so a client waiting on a parked read idles too)
    idle_timeout: float | None = None
    #: connections served at once; one past it is closed at once (None: no limit)
    max_connections: int | None = DEFAULT_MAX_CONNECTIONS
    receive_size: int = 256 * 1024


class SegmentStoreServer:
    """A Pravega segment store.

    ``log`` selects durability: None keeps everything in memory; a
    :class:`~refwire.pravega.disk.FileLog` (see :meth:`open_dir`) survives restarts; a
    :class:`~refwire.pravega.storage.MemoryLog` is what the simulator crashes.
    """

    #: The machine each connection runs (a subclass changes the store's wire
    #: behaviour: the conformance tests' deliberately broken stores).
    connection_class: type[ServerConnection] = ServerConnection

    def __init__(
        self,
        *,
        config: ServerConfig = ServerConfig(),
        log: Log | None = None,
        ssl_context: ssl.SSLContext | None = None,
        now: Any = None,
    ) -> None:
        #: the server's memory budget (``limits.max_server_memory``), shared by its connections,
        #: the draft's listener's included
        self.budget = ServerBudget(config.limits)
        self.config = config = attrs.evolve(config, limits=self.budget.limits)
        self.log = log
        self._wakeups: dict[str, trio.Event] = {}
        self.store = SegmentStore(log, on_visible=self._wake)
        self.service = SegmentStoreService(
            self.store, verifier=config.verifier, read_only=config.read_only, stack_traces=config.stack_traces
        )
        self._server = StreamServer(
            self.handle_stream,
            ssl_context=ssl_context,
            handshake_timeout=config.handshake_timeout,
            name="pravega",
            max_connections=config.max_connections,
        )
        self._durable = trio.Event()  # replaced after every sync
        self._dirty = trio.Event()
        self._sync_in_thread = isinstance(log, FileLog)
        self.addresses: list[str] = []
        self.stats: dict[str, int] = {"connections": 0, "appends": 0, "events": 0, "reads": 0, "protocol_errors": 0, "syncs": 0}
        self.transitions_seen: set[tuple[str, str, str]] = set()
        self._now = now  # a callable giving ms since the epoch; default the wall clock

    @classmethod
    def open_dir(cls, path: str | os.PathLike[str], *, repair: bool = False, **kwargs: Any) -> SegmentStoreServer:
        """A store whose log lives in ``path/segments.log`` (created if missing).

        A torn tail is cut (and logged); damage with intact records after it
        raises :class:`~refwire.errors.CorruptLog` unless ``repair`` moves it
        aside (specs/pravega/README.md §13)."""
        return cls(log=FileLog(Path(path) / "segments.log", repair=repair), **kwargs)

    def _time_ms(self) -> int:
        if self._now is not None:
            return int(self._now())
        import time

        return int(time.time() * 1000)

    @property
    def admin(self) -> StoreAdmin:
        """This store as the controller's :class:`~refwire.pravega.controller.SegmentAdmin`."""
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
        """Stop accepting, give open connections ``grace`` seconds, then close them."""
        await self._server.shutdown(grace)

    @property
    def closing(self) -> trio.Event:
        return self._server.closing

    async def handle_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one connection (any trio stream: TCP, TLS, the simulator's)."""
        self.stats["connections"] += 1
        handler = _StoreConnection(self, stream)
        try:
            await handler.run()
        finally:
            self.transitions_seen |= handler.conn.transitions_seen

    def _segment_length(self, segment: str) -> int:
        seg = self.store.segments.get(segment)
        return -1 if seg is None else seg.length


class ReplyRoom:
    """Waits until the replies a connection owes are within its reply share.

    ``queued()``: bytes the machine holds and has not handed to the pump (replies waiting
    behind one that waits for durability).  :meth:`wait` only waits on events, so it may be
    cancelled anywhere (a parked read's timeout or eviction); the writing is done by
    :meth:`keeper`, a task of the connection that ends with it.
    """

    def __init__(self, pump: Pump, cap: int, queued: Callable[[], int]) -> None:
        self.pump = pump
        self.cap = cap
        self._queued = queued
        self._wanted = trio.Event()
        self._room = trio.Event()

    def owed(self) -> int:
        """Bytes owed to the client now (moving the machine's bytes to the pump first)."""
        self.pump.kick()
        return self.pump.unwritten + self._queued()

    def over(self) -> bool:
        return not self.pump.broken and self.owed() > self.cap

    async def wait(self) -> None:
        """Return once what is owed is within the share (or the connection is broken)."""
        while self.over():
            room = self._room
            self._wanted.set()
            await room.wait()

    async def keeper(self) -> None:
        """Write what is owed whenever someone waits for room, then wake the waiters."""
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            before = self.owed()
            await self.pump.flush()
            if self.over() and self.owed() >= before:
                await trio.sleep(0.01)  # the head reply waits for durability: look again soon
            room, self._room = self._room, trio.Event()
            room.set()


#: a reply that waits for durability: (log position, its place in the reply order, what fills it)
_Waiting = tuple[int, ReplySlot, Append | Command]


class _StoreConnection:
    """One segment-store connection: the :class:`~refwire.drivers.Pump` runs the
    machine; requests go to the service as they arrive; replies that must wait
    for durability keep their place in the machine's reply order
    (:meth:`ServerConnection.reserve`) and are filled, in order, by the replier
    task once the log holds them."""

    def __init__(self, server: SegmentStoreServer, stream: trio.abc.Stream) -> None:
        self.server = server
        cfg = server.config
        self.conn = server.connection_class(cfg.limits, frame_timeout=cfg.frame_timeout)
        if cfg.idle_timeout is not None:
            self.conn.set_idle_timeout(cfg.idle_timeout, now=trio.current_time())
        share = shares(cfg.limits)
        self.pump = Pump(
            stream,
            self.conn,
            self.on_event,
            receive_size=cfg.receive_size,
            write_timeout=None,
            max_unwritten=share.replies,
            # what the machine holds, replies waiting for durability, parked reads (§11)
            admission=server.budget.admission(lambda: self.conn.holds or self._waiting > 0 or bool(self._live)),
        )
        #: spec §11: replies owed past the reply share stop reading and answering
        self.room = ReplyRoom(self.pump, share.replies, lambda: self.conn.queued_bytes)
        self._parked_room = share.parked
        self._waiting_tx, self._waiting_rx = trio.open_memory_channel[_Waiting](cfg.max_queued_replies)
        self._waiting = 0  #: replies queued for the replier and not yet filled
        self._closing = False
        self._ignored = 0
        #: reads parked at the tail (evictable), oldest first, with their cost (spec §11)
        self._parked: OrderedDict[trio.CancelScope, int] = OrderedDict()
        #: the cost of every parked read not yet answered (parked, or woken and waiting for room)
        self._live: dict[trio.CancelScope, int] = {}
        self._parked_bytes = 0
        self._nursery: trio.Nursery | None = None
        #: ``-vv``: one debug line per append batch and per request (decided once: the hot path pays one test)
        self._debug = log.isEnabledFor(logging.DEBUG)
        self._peer = peer_name(stream, "a client")

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            self.pump.release()

    async def _run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self.replier)
            nursery.start_soon(self.room.keeper)
            try:
                ended = await self.pump.run()
                if self._broken:
                    log.debug("pravega: connection lost (%s)", ended)
            except RemoteProtocolError as exc:
                # Real Pravega closes without a reply (§8); what was queued before still goes out.
                self.server.stats["protocol_errors"] += 1
                if "max_connection_memory" in str(exc):  # the operator's budget (spec §11): worth a warning
                    limited(log, "connection-memory", "pravega: closing connection: %s", exc)
                else:
                    limited(log, "protocol-error", "pravega: closing connection: %s", exc, level=logging.INFO)
            finally:
                self._closing = True
                self._waiting_tx.close()  # the replier fills what is queued, then ends the parked reads

    @property
    def _broken(self) -> bool:
        return self.pump.broken

    async def replier(self) -> None:
        """Fill the waiting replies in arrival order, each once its operation is durable."""
        server, conn = self.server, self.conn
        async for lsn, slot, item in self._waiting_rx:
            await server.wait_durable(lsn)
            now = trio.current_time()
            if isinstance(item, Append):
                conn.append_stored(item, server._segment_length(item.segment), now=now, slot=slot)
            else:
                conn.send(item, now=now, slot=slot)
            self._waiting -= 1
            await self.pump.flush()
            if self._broken:
                break
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()  # parked reads end with the connection

    async def _wait_for(self, lsn: int, item: Append | Command) -> None:
        """Reply with ``item`` once ``lsn`` is durable, after every reply before it."""
        slot = self.conn.reserve(now=trio.current_time())
        self._waiting += 1
        await self._waiting_tx.send((lsn, slot, item))

    def _durable(self, lsn: int) -> bool:
        """``lsn`` is durable and nothing waits before it: reply at once."""
        lg = self.server.log
        return not self._waiting and (lsn == 0 or lg is None or lg.durable >= lsn)

    async def on_event(self, ev: ServerEvent) -> None:
        if self._closing:
            return  # the connection is closing: nothing after the last reply is served
        await self._on_event(ev)
        if not self._closing:
            await self.room.wait()  # spec §11: nothing more is read while the replies owed exceed their share

    async def _on_event(self, ev: ServerEvent) -> None:
        server, conn = self.server, self.conn
        service = server.service
        if isinstance(ev, Append):
            if conn.ignored_block_end_bytes != self._ignored:
                log.warning(
                    "pravega: writer %s: %d bytes of AppendBlockEnd data ignored (the block had no remainder; Java's quirk, spec §5.3)",
                    ev.writer_id,
                    conn.ignored_block_end_bytes - self._ignored,
                )
                self._ignored = conn.ignored_block_end_bytes
            server.stats["appends"] += 1
            server.stats["events"] += ev.event_count
            out = service.append(ev, now=server._time_ms())
            if self._debug:
                log.debug(
                    "pravega: %s: append to %r: %s from writer %s: %s",
                    self._peer,
                    ev.segment,
                    plural(ev.event_count, "event"),
                    ev.writer_id,
                    out.kind,
                )
            now = trio.current_time()
            if out.kind == "ok":
                server._dirty.set()
                if self._durable(out.lsn):
                    conn.append_stored(ev, server._segment_length(ev.segment), now=now)
                    await self.pump.flush()  # the ack leaves from this task: no hand-off to the writer
                else:
                    await self._wait_for(out.lsn, ev)
            elif out.kind == "conditional":
                conn.append_conditional_failed(ev, now=now)
            elif out.kind == "failed":
                assert out.reply is not None
                conn.append_failed(ev, out.reply, now=now)
            else:
                if out.reply is not None:
                    conn.send(out.reply, now=now)
                self._close()
        elif isinstance(ev, RequestReceived):
            cmd: Command = ev.command
            if isinstance(cmd, ReadSegment):
                server.stats["reads"] += 1
            out2 = service.process(cmd, now=server._time_ms())
            if self._debug:
                reply = "parked at the tail" if out2.park else (out2.reply.NAME if out2.reply is not None else "no reply")
                log.debug("pravega: %s: %s (request %s): %s", self._peer, cmd.NAME, getattr(cmd, "request_id", "-"), reply)
            if out2.park:
                assert isinstance(cmd, ReadSegment)
                self._park(cmd)
                return
            if out2.lsn:
                server._dirty.set()
            if out2.reply is not None:
                if self._durable(out2.lsn):
                    conn.send(out2.reply, now=trio.current_time())
                else:
                    await self._wait_for(out2.lsn, out2.reply)
            if out2.close:
                self._close()
        elif isinstance(ev, HelloReceived | KeepAliveReceived):
            if conn.must_close:  # an incompatible Hello: our Hello goes out, then the connection closes
                self._close()
        # ConnectionClosed: the pump ends after it

    def _close(self) -> None:
        """Close once the replies queued so far are out: the machine decodes nothing more."""
        self._closing = True
        self.conn.close(now=trio.current_time())
        self.pump.stop()

    # -- reads parked at the tail (§6) ----------------------------------------------
    def _park(self, cmd: ReadSegment) -> None:
        """Park a read at the tail, in arrival order: beyond ``max_parked_reads``, or past the
        parked share of the budget (spec §11), the oldest is answered empty now; a read that
        still finds no room (reads woken and waiting to reply hold it) is answered empty itself."""
        cfg = self.server.config
        cost = parked_cost(cmd.segment, cmd.delegation_token)
        room = self._parked_room
        while self._parked and (len(self._parked) >= cfg.max_parked_reads or self._parked_bytes + cost > room):
            scope, _ = self._parked.popitem(last=False)
            scope.cancel()  # its task replies empty (a reply no larger than what it held)
            self._parked_bytes -= self._live.pop(scope, 0)
        if self._parked_bytes + cost > room:
            self._reply_woken(self._empty(cmd))
            return
        deadline = math.inf if cfg.tail_wait is None else trio.current_time() + cfg.tail_wait
        scope = trio.CancelScope(deadline=deadline)
        self._parked[scope] = cost
        self._live[scope] = cost
        self._parked_bytes += cost
        assert self._nursery is not None
        self._nursery.start_soon(self._parked_read, cmd, scope)

    async def _parked_read(self, cmd: ReadSegment, scope: trio.CancelScope) -> None:
        try:
            await self._wait_for_data(cmd, scope)
        finally:
            self._parked.pop(scope, None)
            self._parked_bytes -= self._live.pop(scope, 0)

    @staticmethod
    def _empty(cmd: ReadSegment) -> SegmentRead:
        return SegmentRead(
            segment=cmd.segment, offset=cmd.offset, at_tail=True, end_of_segment=False, data=b"", request_id=cmd.request_id
        )

    async def _wait_for_data(self, cmd: ReadSegment, scope: trio.CancelScope) -> None:
        server = self.server
        with scope:
            while True:
                ev = server._wakeups.setdefault(cmd.segment, trio.Event())
                await ev.wait()
                await self.room.wait()  # spec §11: the data is read once the client takes what it is owed
                out = server.service.process(cmd, now=server._time_ms(), was_parked=True)
                if out.park:
                    continue
                if out.reply is not None:
                    self._reply_woken(out.reply)
                return
        # tail_wait passed, or the read was the oldest of too many
        self._parked.pop(scope, None)
        self._reply_woken(self._empty(cmd))

    def _reply_woken(self, reply: Command) -> None:
        """A woken read goes out after the reply to the command that woke it (spec §6)."""
        if self._closing or self._broken:
            return  # the connection is over: the reply is dropped
        self.conn.send(reply, now=trio.current_time())
        self.pump.kick()


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


async def serve_reference(nursery: trio.Nursery, config: ServerConfig | None, workdir: Path) -> RunningServer:
    """refwire's Pravega segment store and a controller pointing at it, on 127.0.0.1 (free ports), in
    memory, started in ``nursery`` (the pytest fixture ``pravega_store``; :mod:`refwire.reference`):
    ``.address`` is the store, ``.controller`` the controller's ``tcp://HOST:PORT`` (what a real client
    such as the PyPI ``pravega`` package is given); ``.server`` is the :class:`SegmentStoreServer`
    (``.server.store.segments`` holds what was written)."""
    from .controller import PravegaController

    store = SegmentStoreServer() if config is None else SegmentStoreServer(config=config)
    store_l = await trio.open_tcp_listeners(0, host="127.0.0.1")
    await nursery.start(store.serve, store_l)
    port = store_l[0].socket.getsockname()[1]
    ctl = PravegaController(store.admin, ("127.0.0.1", port))
    ctl_l = await trio.open_tcp_listeners(0, host="127.0.0.1")
    await nursery.start(ctl.serve, ctl_l)
    running = RunningServer("127.0.0.1", port, Path(""))
    running.server = store
    running.controller = f"tcp://127.0.0.1:{ctl_l[0].socket.getsockname()[1]}"
    return running
