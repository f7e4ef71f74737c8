"""trio Seastar RPC server: dispatch through a verb registry, isolation groups, memory
admission and streams (specs/seastar-rpc/README.md §2-§7).

* Handlers (registered in a :class:`~refwire.seastar_rpc.registry.VerbRegistry`) are
  ``async def handler(ctx: CallContext, payload: bytes) -> bytes | None``.
  Returning sends the reply (``None`` = empty data); raising
  :class:`~refwire.seastar_rpc.errors.BadArguments` sends **nothing** and keeps the connection (Seastar's
  behaviour when deserialization fails, §3); any other exception is a USER
  exception carrying ``str(exc)`` (Seastar 25.05 sends ``what()``).  One-way verbs
  never reply.  An unknown verb gets UNKNOWN_VERB, even if the caller meant it
  as one-way.
* The isolation cookie (feature 4) selects a :class:`HandlerGroup` with its own
  concurrency limit for the whole connection; the cookie is echoed.
* Memory: a request whose estimate ``basic_request_size + len * bloat_factor``
  exceeds ``max_memory`` is answered with Seastar's USER text and its data is
  skipped unread; otherwise the reader waits for that much memory, until the
  request's propagated deadline (then the request is dropped, no reply).
* The per-connection budget, ``Limits.max_connection_memory`` (§6), holds
  everything one connection and its streams can make the server keep, as caps
  inside it: its frames (:func:`~refwire.seastar_rpc.machine.memory_caps`), the
  data of its requests in flight (a second admission, per connection, of
  ``budget // REQUEST_SHARE``: larger requests get the USER exception too), the
  replies waiting to be written (the pump's ``max_unwritten``, as much), and its
  streams (at most ``MAX_STREAMS``, each with a queue of ``budget // STREAM_SHARE``).
* Replies go out in completion order; a reply past the request's propagated
  deadline is not sent.
* Streams: a connection negotiating STREAM_PARENT is registered under its parent
  (which must be a live RPC connection of this server) and is aborted when the
  parent closes.  Handlers reach it with :meth:`CallContext.stream`.

Every accepted connection is a :class:`~refwire.seastar_rpc.connection.ServerConnection`
run by :class:`refwire.drivers.Pump`; the application's side of it is a
``_Session`` (negotiation, then calls or stream messages).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Literal

import attrs
import trio

from ..admission import ServerBudget
from ..drivers import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_UNWRITTEN,
    RESET,
    WRITE_FAILED,
    WRITE_TIMEOUT,
    Pump,
    StreamServer,
    listener_address,
)
from ..errors import RemoteProtocolError
from ..logs import limited
from ..wire import Limits
from .compression import COMPRESSOR_NAMES
from .connection import (
    NEGOTIATION_TIMED_OUT,
    CallReceived,
    ConnectionClosed,
    NegotiationRequested,
    OversizedCall,
    Respond,
    RespondError,
    ServerConnection,
    State,
)
from .errors import DEPRECATED, BadArguments, StreamClosedError
from .events import oversized_message
from .frames import DEFAULT_LIMITS, UNMEASURED, StreamEnd, StreamMessage, UnknownVerb, UserError
from .machine import MAX_STREAMS, REQUEST_SHARE, STREAM_SHARE
from .registry import Verb, VerbRegistry

__all__ = ["BadArguments", "CallContext", "HandlerGroup", "SeastarServer", "ServerConfig", "ServerStream", "StreamClosedError"]

log = logging.getLogger("refwire.seastar_rpc")

SHARD: Final = 0
NO_SHARD: Final = 0xFFFF


class HandlerGroup:
    """A scheduling group chosen by an isolation cookie: handlers of all its
    connections share ``concurrency`` slots (``None`` = unlimited)."""

    def __init__(self, name: str, concurrency: int | None = None) -> None:
        self.name = name
        self.limiter = trio.CapacityLimiter(concurrency) if concurrency else None
        self.calls = 0


@attrs.frozen(kw_only=True)
class ServerConfig:
    """Server settings: the compressors accepted, streaming, the memory
    admission of requests (``max_memory``, ``basic_request_size``,
    ``bloat_factor``: specs/seastar-rpc/README.md §3, §6), the isolation groups and
    their concurrency, and the time limits."""

    limits: Limits = DEFAULT_LIMITS
    #: connections served at once; one past it is closed at once (None: no limit)
    max_connections: int | None = DEFAULT_MAX_CONNECTIONS
    #: compressors accepted (the client's order decides which).
    compressors: Sequence[str] = COMPRESSOR_NAMES
    multi_algo: bool = True
    #: with streaming, every connection gets a CONNECTION_ID and may parent streams.
    streaming: bool = True
    max_memory: int = 16 * 1024 * 1024
    basic_request_size: int = 0
    bloat_factor: int = 1
    #: isolation cookie -> concurrency of its group (None = unlimited).
    groups: Mapping[bytes, int | None] = attrs.field(factory=dict)
    default_concurrency: int | None = None
    #: an unknown cookie: run in the default group, or close without a reply
    #: (what Seastar does when ``isolate_connection`` throws).
    unknown_cookie: Literal["default", "reject"] = "default"
    #: Seastar waits forever for a negotiation frame; refwire closes after this (the machine's timer).
    negotiation_timeout: float | None = 30.0
    #: a frame begun and still incomplete after this many seconds fails the connection
    #: (a peer trickling bytes cannot hold it for ever; between frames idling is as before); None = never
    frame_timeout: float | None = 30.0
    #: seconds without a byte received before a connection is closed (None: never, the default, as
    #: with Seastar, which has no idle timeout; a client waiting on a long call idles too)
    idle_timeout: float | None = None
    #: stream messages queued per stream before the reader stops reading (§5).
    stream_queue: int = 50
    #: ... and bytes: a message that would pass this waits until the application
    #: has taken enough (one message is always let in, so a large one is not stuck);
    #: without it 50 messages of the 64 MiB frame limit could make one stream hold 3.2 GiB
    stream_queue_bytes: int = 16 * 1024 * 1024
    recv_size: int = 256 * 1024
    #: a write that takes longer ends the connection (its unwritten replies are lost).
    write_timeout: float | None = 30.0


@attrs.frozen
class CallContext:
    """What a handler knows about its call."""

    server: SeastarServer
    connection_id: int
    verb: int
    msg_id: int
    deadline: float | None
    group: str
    cookie: bytes | None

    def stream(self, stream_id: int) -> ServerStream:
        """The stream connection ``stream_id`` (a sink/source argument) of this
        caller's connection; :class:`~refwire.seastar_rpc.errors.BadArguments` (so: no reply) if unknown."""
        s = self.server._streams.get(stream_id)
        if s is None or s.parent_id != self.connection_id:
            raise BadArguments(f"unknown stream {stream_id:#x} for connection {self.connection_id:#x}")
        return s


class ServerStream:
    """The server end of one stream connection: a source (``receive``) and a sink (``send``)."""

    def __init__(self, server: SeastarServer, conn: ServerConnection, pump: Pump, stream_id: int, parent_id: int) -> None:
        self.id = stream_id
        self.parent_id = parent_id
        self._server = server
        self._conn = conn
        self._pump = pump
        self._send_lock = trio.StrictFIFOLock()
        self._in_send, self._in_recv = trio.open_memory_channel[bytes | None](server.config.stream_queue)
        #: bytes of the messages queued for the application (``stream_queue_bytes``)
        self.queued_bytes = 0
        self._taken = trio.Event()
        self.aborted = False
        self.done = trio.Event()
        self._scope: trio.CancelScope | None = None

    async def receive(self) -> bytes | None:
        """The next message, ``None`` at end-of-stream; :class:`~refwire.seastar_rpc.errors.StreamClosedError` after abort."""
        try:
            msg = await self._in_recv.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StreamClosedError(f"stream {self.id:#x} is closed") from None
        if msg is not None:
            self.queued_bytes -= len(msg)
            self._taken.set()
            self._taken = trio.Event()
        return msg

    async def _queue(self, msg: bytes | None) -> None:
        """Hand a message to the application: past ``stream_queue_bytes`` queued
        (and ``stream_queue`` messages, the channel's size) the reader waits."""
        if msg is not None:
            limit = self._server.stream_queue_bytes
            while self.queued_bytes and self.queued_bytes + len(msg) > limit:
                await self._taken.wait()
            self.queued_bytes += len(msg)
        await self._in_send.send(msg)

    def __aiter__(self) -> ServerStream:
        return self

    async def __anext__(self) -> bytes:
        msg = await self.receive()
        if msg is None:
            raise StopAsyncIteration
        return msg

    async def send(self, payload: bytes) -> None:
        """Send one message; returns once it is written."""
        await self._write(StreamMessage(bytes(payload)))

    async def close(self) -> None:
        """Send end-of-stream (once); the connection closes when both sides did."""
        if not self._conn.local_eos and not self.aborted and self._conn.state is State.STREAMING:
            await self._write(StreamEnd())
        self._maybe_done()

    async def _write(self, event: StreamMessage | StreamEnd) -> None:
        if self.aborted:
            raise StreamClosedError(f"stream {self.id:#x} was aborted")
        async with self._send_lock:
            if self._conn.state is not State.STREAMING:
                self.abort()
                raise StreamClosedError(f"stream {self.id:#x}: the connection is {self._conn.state.value}")
            self._conn.send(event, now=trio.current_time())
            if not await self._pump.flush():
                self.abort()
                raise StreamClosedError(f"stream {self.id:#x}: {self._pump.ended}")

    def _maybe_done(self) -> None:
        if self._conn.stream_done:
            self.done.set()

    def abort(self) -> None:
        """Close the stream connection now (its parent went away)."""
        self.aborted = True
        self._in_send.close()
        if self._scope is not None:
            self._scope.cancel()
        self.done.set()


class _Memory:
    """The admission budget: requests wait for their estimate, FIFO-ish."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.available = total
        self._changed = trio.Event()

    async def acquire(self, n: int, deadline: float | None) -> bool:
        if self.available >= n:  # the common case: no wait, so no cancel scope
            self.available -= n
            return True
        with trio.move_on_at(math.inf if deadline is None else deadline):
            while self.available < n:
                await self._changed.wait()
            self.available -= n
            return True
        return False

    def release(self, n: int) -> None:
        self.available += n
        self._changed.set()
        self._changed = trio.Event()


class SeastarServer:
    """A Seastar RPC server over any trio listener (TCP or the simulator's)."""

    def __init__(self, registry: VerbRegistry, *, config: ServerConfig = ServerConfig()) -> None:
        self.registry = registry
        #: the server's memory budget (``limits.max_server_memory``), shared by its connections;
        #: ``max_memory`` stays the per-request admission it is in Seastar (§6)
        self.budget = ServerBudget(config.limits)
        self.config = config = attrs.evolve(config, limits=self.budget.limits)
        self._stream_server = StreamServer(self.handle_stream, name="seastar-rpc", max_connections=config.max_connections)
        self._counter = 0
        self._rpc: dict[int, list[ServerStream]] = {}  # live RPC connection id -> its streams
        self._streams: dict[int, ServerStream] = {}
        self.memory = _Memory(config.max_memory)
        budget = config.limits.max_connection_memory
        #: what one connection's requests in flight may hold, and its unwritten replies (§6)
        self.connection_share = budget // REQUEST_SHARE
        #: bytes queued per stream: ``stream_queue_bytes``, or less under the budget (§6)
        self.stream_queue_bytes = min(config.stream_queue_bytes, budget // STREAM_SHARE)
        self.default_group = HandlerGroup("default", config.default_concurrency)
        self.groups = {cookie: HandlerGroup(cookie.decode("latin-1"), n) for cookie, n in config.groups.items()}
        self.addresses: list[str] = []
        self.stats: dict[str, int] = {
            k: 0
            for k in (
                "connections",
                "stream_connections",
                "rejected",
                "calls",
                "replies",
                "exceptions",
                "unknown_verbs",
                "oversized",
                "dropped_expired",
                "bad_arguments",
                "protocol_errors",
                "one_way",
            )
        }
        #: called just before a reply is sent: (connection id, call, now) -- simulation invariants.
        self.on_reply: Callable[[int, CallReceived | OversizedCall, float], None] | None = None
        self.transitions_seen: set[tuple[str, str, str]] = set()
        self._tasks: trio.Nursery | None = None
        if config.bloat_factor < 1:
            raise ValueError("bloat_factor must be at least 1")

    # -- serving ---------------------------------------------------------------------
    async def serve(
        self,
        listeners: Sequence[trio.abc.Listener[Any]],
        *,
        task_status: trio.TaskStatus[Sequence[trio.abc.Listener[Any]]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept on ``listeners`` until :meth:`shutdown` (start it with ``nursery.start``)."""
        async with trio.open_nursery() as tasks:
            self._tasks = tasks
            await self._stream_server.serve(listeners, task_status=task_status)
            tasks.cancel_scope.cancel()

    def spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` in the background while the server serves (e.g. a stream pump)."""
        if self._tasks is None:
            raise RuntimeError("the server is not serving")
        self._tasks.start_soon(fn)

    async def serve_tcp(
        self, host: str = "127.0.0.1", port: int = 0, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on ``host:port`` (0: any free port); ``task_status.started`` gets the bound ``HOST:PORT`` list."""
        listeners = await trio.open_tcp_listeners(port, host=host)

        async def _serve(task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
            await self.serve(listeners, task_status=task_status)

        async with trio.open_nursery() as nursery:
            await nursery.start(_serve)
            self.addresses = [listener_address(lst) for lst in listeners]
            task_status.started(self.addresses)

    async def shutdown(self, grace: float = 5.0) -> None:
        """Stop accepting, give open connections ``grace`` seconds, then close them."""
        await self._stream_server.shutdown(grace)

    def _admit_len(self) -> int:
        """The most data a request may carry to be admitted: ``max_memory``'s
        (Seastar's admission), or the connection's share of its budget (§6)."""
        cfg = self.config
        return max(0, (min(cfg.max_memory, self.connection_share) - cfg.basic_request_size) // cfg.bloat_factor)

    def _budget_binds(self) -> bool:
        """Whether the connection's budget, not ``max_memory``, refuses a request's size."""
        return self.connection_share < self.config.max_memory

    # -- one connection ----------------------------------------------------------------
    async def handle_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one accepted connection until it ends."""
        cfg = self.config
        self._counter += 1  # every accepted connection, streams included (§5)
        conn_id = (self._counter << 16) | (SHARD if cfg.streaming else NO_SHARD)
        timeout = cfg.negotiation_timeout
        conn = ServerConnection(
            limits=cfg.limits,
            compressors=cfg.compressors,
            multi_algo=cfg.multi_algo,
            admit_len=self._admit_len(),
            negotiation_deadline=None if timeout is None else trio.current_time() + timeout,
            frame_timeout=cfg.frame_timeout,
        )
        if cfg.idle_timeout is not None:
            conn.set_idle_timeout(cfg.idle_timeout, now=trio.current_time())
        try:
            await _Session(self, conn, stream, conn_id).run()
        finally:
            self.transitions_seen |= conn.transitions_seen
            await trio.aclose_forcefully(stream)

    def _group_for(self, cookie: bytes | None) -> HandlerGroup | None:
        if cookie is None:
            return self.default_group
        group = self.groups.get(cookie)
        if group is None and self.config.unknown_cookie == "reject":
            return None
        return group or self.default_group

    async def _dispatch(self, call: CallReceived, session: _Session) -> None:
        self.stats["calls"] += 1
        verb = self.registry.get(call.verb)
        if verb is None:
            self.stats["unknown_verbs"] += 1
            await session.reply(call, trio.current_time(), RespondError(call, UnknownVerb(call.verb)))
            return
        cfg = self.config
        need = cfg.basic_request_size + len(call.payload) * cfg.bloat_factor
        # the connection's share first (§6), then the server's admission (§3): a
        # connection waiting for its own requests to finish holds none of the server's
        if not await session.memory.acquire(need, call.deadline):
            self.stats["dropped_expired"] += 1  # still waiting for memory at its deadline: dropped, no reply (§3)
            return
        if not await self.memory.acquire(need, call.deadline):
            session.memory.release(need)
            self.stats["dropped_expired"] += 1
            return
        group = session.group
        assert group is not None and session.handlers is not None
        ctx = CallContext(self, session.conn_id, call.verb, call.msg_id, call.deadline, group.name, session.cookie)
        session.handlers.start_soon(self._run_handler, verb, ctx, call, session, group, need)

    async def _run_handler(
        self, verb: Verb, ctx: CallContext, call: CallReceived, session: _Session, group: HandlerGroup, need: int
    ) -> None:
        try:
            if group.limiter is not None:
                await group.limiter.acquire_on_behalf_of(ctx)
            group.calls += 1
            try:
                start = trio.current_time()
                try:
                    result = await verb.handler(ctx, call.payload)
                except BadArguments as exc:
                    self.stats["bad_arguments"] += 1
                    log.info("seastar-rpc: verb %d msg %d: bad arguments (%s); no reply", call.verb, call.msg_id, exc)
                    return
                except Exception as exc:
                    if verb.one_way:
                        log.info("seastar-rpc: one-way verb %d failed: %r", call.verb, exc)
                        return
                    self.stats["exceptions"] += 1
                    now = trio.current_time()
                    await session.reply(call, now, RespondError(call, UserError(str(exc).encode()), _micros(now - start)))
                    return
                if verb.one_way:
                    self.stats["one_way"] += 1
                    return
                now = trio.current_time()
                self.stats["replies"] += 1
                await session.reply(call, now, Respond(call, result or b"", _micros(now - start)))
            finally:
                if group.limiter is not None:
                    group.limiter.release_on_behalf_of(ctx)
        finally:
            self.memory.release(need)
            session.memory.release(need)


class _Session:
    """The application's side of one accepted connection: negotiation (accept or
    reject), then calls (RPC) or messages (stream); the pump does the I/O."""

    def __init__(self, server: SeastarServer, conn: ServerConnection, stream: trio.abc.Stream, conn_id: int) -> None:
        self.server = server
        self.conn = conn
        self.conn_id = conn_id
        cfg = server.config
        # replies waiting to be written count against the budget too (§6): past them the pump reads no more
        unwritten = min(DEFAULT_MAX_UNWRITTEN, server.connection_share)
        self.pump = Pump(
            stream,
            conn,
            self.on_event,
            receive_size=cfg.recv_size,
            write_timeout=cfg.write_timeout,
            max_unwritten=unwritten,
            admission=server.budget.admission(self._holding),
        )
        #: the data of this connection's requests in flight (its share of the budget, §6)
        self.memory = _Memory(server.connection_share)
        self.group: HandlerGroup | None = None
        self.cookie: bytes | None = None
        self.rpc = False  # registered as a parent in server._rpc
        self.stream: ServerStream | None = None
        self.handlers: trio.Nursery | None = None
        self._scope = trio.CancelScope()  # around the pump: a stream's abort cancels it

    def _holding(self) -> bool:
        """A frame begun or not yet handled, a request in flight, a stream message not yet taken (§6)."""
        stream = self.stream
        return (
            self.conn.holds_input
            or self.memory.available < self.memory.total
            or (stream is not None and stream.queued_bytes > 0)
        )

    async def run(self) -> None:
        server = self.server
        try:
            async with trio.open_nursery() as handlers:
                self.handlers = handlers
                with self._scope:
                    try:
                        ended = await self.pump.run()
                    except RemoteProtocolError as exc:
                        server.stats["protocol_errors"] += 1
                        limited(log, "protocol-error", "seastar-rpc: connection %#x: %s; closing", self.conn_id, exc)
                    else:
                        if ended in (RESET, WRITE_FAILED, WRITE_TIMEOUT):
                            log.info("seastar-rpc: connection %#x lost: %s", self.conn_id, ended)
                if self.stream is not None:
                    self.stream.abort()
                # EOF: Seastar stops reading; handlers still running finish (their replies are dropped).
        finally:
            self.pump.release()
            if self.rpc:
                for child in server._rpc.pop(self.conn_id, []):
                    child.abort()  # a parent's close aborts its streams (§5)
            s = self.stream
            if s is not None:
                s.abort()
                server._streams.pop(self.conn_id, None)
                siblings = server._rpc.get(s.parent_id)
                if siblings is not None and s in siblings:
                    siblings.remove(s)

    async def on_event(self, ev: object) -> None:
        if isinstance(ev, CallReceived):
            await self.server._dispatch(ev, self)
        elif isinstance(ev, StreamMessage | StreamEnd):
            await self._stream_event(ev)
        elif isinstance(ev, OversizedCall):
            server = self.server
            cfg = server.config
            server.stats["oversized"] += 1
            estimate = cfg.basic_request_size + ev.length * cfg.bloat_factor
            if estimate > cfg.max_memory or not server._budget_binds():
                text = oversized_message(estimate, cfg.max_memory)
            else:
                budget = cfg.limits.max_connection_memory
                share = server.connection_share
                text = oversized_message(estimate, share) + f" (the limit max_connection_memory={budget} allows a connection's requests)".encode()
                limited(
                    log,
                    "connection-memory",
                    "seastar-rpc: connection %#x: a request of %d bytes exceeds the %d bytes the limit max_connection_memory=%d "
                    "allows a connection's requests in flight; answered with an exception, its data skipped",
                    self.conn_id,
                    ev.length,
                    share,
                    budget,
                )
            await self.reply(ev, trio.current_time(), RespondError(ev, UserError(text)))
        elif isinstance(ev, NegotiationRequested):
            parent = ev.features.stream_parent
            if parent is not None:
                await self._start_stream(parent)
            else:
                await self._start_rpc(ev)
        elif isinstance(ev, ConnectionClosed):
            if ev.reason == NEGOTIATION_TIMED_OUT:
                log.info(
                    "seastar-rpc: connection %#x: no negotiation frame within %ss; closing",
                    self.conn_id,
                    self.server.config.negotiation_timeout,
                )
            if self.stream is not None:
                self.stream.abort()
            self.pump.stop()  # after a reject or a negotiation timeout: read no more

    async def reply(self, call: CallReceived | OversizedCall, now: float, event: Respond | RespondError) -> None:
        """Send ``event`` unless the machine would drop it (deadline passed, connection
        gone: counted as dropped).  The pump's writer sends it with the replies queued
        beside it (one write for many, as Seastar batches its output); a reply is never
        lost to a close, which flushes first."""
        server = self.server
        if not self.conn.reply_wanted(call, now=now):
            server.stats["dropped_expired"] += 1
            return
        if server.on_reply is not None:
            server.on_reply(self.conn_id, call, now)
        self.conn.send(event, now=now)
        self.pump.kick()

    @property
    def _broken(self) -> bool:
        return self.conn.write_failed or self.pump.ended == RESET

    async def _start_rpc(self, offer: NegotiationRequested) -> None:
        server = self.server
        cookie = offer.features.isolation
        group = server._group_for(cookie)
        now = trio.current_time()
        if group is None:
            self.conn.reject("unknown isolation cookie", now=now)
            server.stats["rejected"] += 1
            log.info("seastar-rpc: connection %#x: unknown isolation cookie %r; closing without a reply", self.conn_id, cookie)
            return
        self.conn.accept(connection_id=self.conn_id if server.config.streaming else None, now=now)
        # Known as a parent before the client can read its CONNECTION_ID: a stream
        # child it opens at once must find it (§5), however the tasks are scheduled.
        server._rpc[self.conn_id] = []
        self.rpc = True  # from here run()'s end unregisters it and aborts its streams
        await self.pump.flush()
        if self._broken:
            return  # the pump ends: the connection was never served
        server.stats["connections"] += 1
        self.group = group
        self.cookie = cookie

    async def _start_stream(self, parent_id: int) -> None:
        server = self.server
        conn = self.conn
        now = trio.current_time()
        if not server.config.streaming:
            conn.reject("streaming is not configured for the server", now=now)
        elif parent_id not in server._rpc:
            conn.reject(f"Unknown parent connection {parent_id:#x}", now=now)
        elif len(server._rpc[parent_id]) >= MAX_STREAMS:
            # its streams count against the parent's budget (§6): a fifth would pass it
            budget = server.config.limits.max_connection_memory
            log.warning(
                "seastar-rpc: stream connection %#x refused: connection %#x has %d streams, all the limit "
                "max_connection_memory=%d allows (each may hold %d bytes queued); closing without a reply",
                self.conn_id,
                parent_id,
                MAX_STREAMS,
                budget,
                server.stream_queue_bytes,
            )
            conn.reject("max_connection_memory: too many streams", now=now)
        if conn.state is State.CLOSED:
            server.stats["rejected"] += 1
            log.info("seastar-rpc: stream connection %#x refused (parent %#x); closing without a reply", self.conn_id, parent_id)
            return
        s = ServerStream(server, conn, self.pump, self.conn_id, parent_id)
        s._scope = self._scope
        self.stream = s
        server._rpc[parent_id].append(s)
        server._streams[self.conn_id] = s
        server.stats["stream_connections"] += 1
        conn.accept(connection_id=self.conn_id, now=now)
        await self.pump.flush()
        assert self.handlers is not None
        self.handlers.start_soon(self._stop_when_done, s)

    async def _stop_when_done(self, s: ServerStream) -> None:
        await s.done.wait()
        self.pump.stop()  # end-of-stream went both ways, or the stream was aborted

    async def _stream_event(self, ev: StreamMessage | StreamEnd) -> None:
        s = self.stream
        assert s is not None
        try:
            await s._queue(ev.payload if isinstance(ev, StreamMessage) else None)
        except trio.ClosedResourceError:
            self.pump.stop()
            return
        if isinstance(ev, StreamEnd):
            s._in_send.close()
            s._maybe_done()


def _micros(seconds: float) -> int:
    us = int(seconds * 1_000_000)
    return us if 0 <= us < UNMEASURED else UNMEASURED


def __getattr__(name: str) -> Any:
    """``StreamClosed``, the old name of :class:`~refwire.seastar_rpc.errors.StreamClosedError`
    (deprecated: it warns, PEP 562)."""
    current = DEPRECATED.get(name)
    if current is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import warnings

    warnings.warn(f"{__name__}.{name} is deprecated; use refwire.seastar_rpc.errors.{current} (the same class)",
                  DeprecationWarning, stacklevel=2)
    return globals()[current]
