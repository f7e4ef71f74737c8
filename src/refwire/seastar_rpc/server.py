"""trio Seastar RPC server: a verb registry, isolation groups, memory admission and
streams (specs/seastar-rpc/README.md §4-§5; research/seastar.md §2.3, §3.3-§3.5, §5-§7).

* Handlers are ``async def handler(ctx: CallContext, payload: bytes) -> bytes | None``.
  Returning sends the reply (``None`` = empty data); raising
  :class:`BadArguments` sends **nothing** and keeps the connection (Seastar's
  behaviour when deserialization fails, §1.9); any other exception is a USER
  exception carrying ``str(exc)`` (Seastar 25.05 sends ``what()``).  One-way verbs
  never reply.  An unknown verb gets UNKNOWN_VERB, even if the caller meant it
  as one-way.
* The isolation cookie (feature 4) selects a :class:`HandlerGroup` with its own
  concurrency limit for the whole connection; the cookie is echoed.
* Memory: a request whose estimate ``basic_request_size + len * bloat_factor``
  exceeds ``max_memory`` is answered with Seastar's USER text and its data is
  skipped unread; otherwise the reader waits for that much memory, until the
  request's propagated deadline (then the request is dropped, no reply).
* Replies go out in completion order; a reply past the request's propagated
  deadline is not sent.
* Streams: a connection negotiating STREAM_PARENT is registered under its parent
  (which must be a live RPC connection of this server) and is aborted when the
  parent closes.  Handlers reach it with :meth:`CallContext.stream`.
"""

from __future__ import annotations

import logging
import math
import struct
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Literal

import attrs
import trio

from ..drivers import StreamServer, listener_address
from ..errors import RemoteProtocolError
from ..wire import Limits
from .compression import COMPRESSOR_NAMES
from .connection import (
    NEED_DATA,
    CallReceived,
    ConnectionClosed,
    NegotiationRequested,
    OversizedCall,
    ServerConnection,
    State,
)
from .frames import DEFAULT_LIMITS, UNMEASURED, StreamEnd, StreamMessage, UserError

__all__ = [
    "BadArguments",
    "CallContext",
    "HandlerGroup",
    "SeastarServer",
    "ServerConfig",
    "ServerStream",
    "StreamClosed",
    "VerbRegistry",
    "demo_registry",
]

log = logging.getLogger("refwire.seastar_rpc")

SHARD: Final = 0
NO_SHARD: Final = 0xFFFF


class BadArguments(Exception):
    """Raised by a handler whose arguments do not deserialize: no reply is sent."""


class StreamClosed(Exception):
    """The stream ended (parent closed, connection lost, or already at end-of-stream)."""


Handler = Callable[["CallContext", bytes], Awaitable[bytes | None]]


@attrs.frozen
class _Verb:
    handler: Handler
    one_way: bool
    name: str


class VerbRegistry:
    """Verb number -> async handler."""

    def __init__(self) -> None:
        self._verbs: dict[int, _Verb] = {}

    def register(self, verb: int, handler: Handler, *, one_way: bool = False, name: str = "") -> None:
        if not 0 <= verb < 2**64:
            raise ValueError("a verb is a u64")
        self._verbs[verb] = _Verb(handler, one_way, name or getattr(handler, "__name__", str(verb)))

    def unregister(self, verb: int) -> None:
        self._verbs.pop(verb, None)

    def get(self, verb: int) -> _Verb | None:
        return self._verbs.get(verb)

    def names(self) -> dict[int, str]:
        return {k: v.name for k, v in sorted(self._verbs.items())}


class HandlerGroup:
    """A scheduling group chosen by an isolation cookie: handlers of all its
    connections share ``concurrency`` slots (``None`` = unlimited)."""

    def __init__(self, name: str, concurrency: int | None = None) -> None:
        self.name = name
        self.limiter = trio.CapacityLimiter(concurrency) if concurrency else None
        self.calls = 0


@attrs.frozen(kw_only=True)
class ServerConfig:
    limits: Limits = DEFAULT_LIMITS
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
    #: Seastar waits forever for a negotiation frame; refwire closes after this.
    negotiation_timeout: float | None = 30.0
    #: stream messages queued per stream before the reader stops reading (§5.2).
    stream_queue: int = 50
    recv_size: int = 256 * 1024


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
        caller's connection; :class:`BadArguments` (so: no reply) if unknown."""
        s = self.server._streams.get(stream_id)
        if s is None or s.parent_id != self.connection_id:
            raise BadArguments(f"unknown stream {stream_id:#x} for connection {self.connection_id:#x}")
        return s


class ServerStream:
    """The server end of one stream connection: a source (``receive``) and a sink (``send``)."""

    def __init__(self, server: SeastarServer, conn: ServerConnection, stream: trio.abc.Stream, stream_id: int, parent_id: int) -> None:
        self.id = stream_id
        self.parent_id = parent_id
        self._server = server
        self._conn = conn
        self._stream = stream
        self._send_lock = trio.StrictFIFOLock()
        self._in_send, self._in_recv = trio.open_memory_channel[bytes | None](server.config.stream_queue)
        self.aborted = False
        self.done = trio.Event()
        self._scope: trio.CancelScope | None = None

    async def receive(self) -> bytes | None:
        """The next message, ``None`` at end-of-stream; :class:`StreamClosed` after abort."""
        try:
            return await self._in_recv.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StreamClosed(f"stream {self.id:#x} is closed") from None

    def __aiter__(self) -> ServerStream:
        return self

    async def __anext__(self) -> bytes:
        msg = await self.receive()
        if msg is None:
            raise StopAsyncIteration
        return msg

    async def send(self, payload: bytes) -> None:
        await self._write(lambda: self._conn.send_stream(payload))

    async def close(self) -> None:
        """Send end-of-stream (once); the connection closes when both sides did."""
        if not self._conn.local_eos and not self.aborted and self._conn.state is State.STREAMING:
            await self._write(self._conn.send_stream_end)
        self._maybe_done()

    async def _write(self, make: Callable[[], bytes]) -> None:
        if self.aborted:
            raise StreamClosed(f"stream {self.id:#x} was aborted")
        async with self._send_lock:
            if self._conn.state is not State.STREAMING:
                self.abort()
                raise StreamClosed(f"stream {self.id:#x}: the connection is {self._conn.state.value}")
            try:
                await self._stream.send_all(make())
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self.abort()
                raise StreamClosed(f"stream {self.id:#x}: {exc}") from None

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
        self.config = config
        self._stream_server = StreamServer(self.handle_stream, name="seastar-rpc")
        self._counter = 0
        self._rpc: dict[int, list[ServerStream]] = {}  # live RPC connection id -> its streams
        self._streams: dict[int, ServerStream] = {}
        self.memory = _Memory(config.max_memory)
        self.default_group = HandlerGroup("default", config.default_concurrency)
        self.groups = {cookie: HandlerGroup(cookie.decode("latin-1"), n) for cookie, n in config.groups.items()}
        self.addresses: list[str] = []
        self.stats: dict[str, int] = {k: 0 for k in (
            "connections", "stream_connections", "rejected", "calls", "replies", "exceptions", "unknown_verbs",
            "oversized", "dropped_expired", "bad_arguments", "protocol_errors", "one_way")}
        #: called just before a reply is sent: (connection id, call, now) -- simulation invariants.
        self.on_reply: Callable[[int, CallReceived | OversizedCall, float], None] | None = None
        self.transitions_seen: set[tuple[str, str, str]] = set()
        self._tasks: trio.Nursery | None = None
        if config.bloat_factor < 1:
            raise ValueError("bloat_factor must be at least 1")

    # -- serving ---------------------------------------------------------------------
    async def serve(self, listeners: Sequence[trio.abc.Listener[Any]], *,
                    task_status: trio.TaskStatus[Sequence[trio.abc.Listener[Any]]] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as tasks:
            self._tasks = tasks
            await self._stream_server.serve(listeners, task_status=task_status)
            tasks.cancel_scope.cancel()

    def spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` in the background while the server serves (e.g. a stream pump)."""
        if self._tasks is None:
            raise RuntimeError("the server is not serving")
        self._tasks.start_soon(fn)

    async def serve_tcp(self, host: str = "127.0.0.1", port: int = 0, *,
                        task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(port, host=host)

        async def _serve(task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
            await self.serve(listeners, task_status=task_status)

        async with trio.open_nursery() as nursery:
            await nursery.start(_serve)
            self.addresses = [listener_address(lst) for lst in listeners]
            task_status.started(self.addresses)

    async def shutdown(self, grace: float = 5.0) -> None:
        await self._stream_server.shutdown(grace)

    def _admit_len(self) -> int:
        cfg = self.config
        return max(0, (cfg.max_memory - cfg.basic_request_size) // cfg.bloat_factor)

    # -- one connection ----------------------------------------------------------------
    async def handle_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one accepted connection until it ends."""
        cfg = self.config
        self._counter += 1  # every accepted connection, streams included (research §6)
        conn_id = (self._counter << 16) | (SHARD if cfg.streaming else NO_SHARD)
        conn = ServerConnection(limits=cfg.limits, compressors=cfg.compressors, multi_algo=cfg.multi_algo,
                                admit_len=self._admit_len())
        try:
            offer = await self._negotiate(conn, stream)
            if offer is None:
                return
            parent = offer.features.stream_parent
            if parent is not None:
                await self._serve_stream(conn, stream, conn_id, parent)
            else:
                await self._serve_rpc(conn, stream, conn_id, offer)
        except RemoteProtocolError as exc:
            self.stats["protocol_errors"] += 1
            log.warning("seastar-rpc: connection %#x: %s; closing", conn_id, exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            log.info("seastar-rpc: connection %#x lost: %s", conn_id, exc or type(exc).__name__)
        finally:
            self.transitions_seen |= conn.transitions_seen
            await trio.aclose_forcefully(stream)

    async def _pump(self, conn: ServerConnection, stream: trio.abc.Stream) -> bool:
        """Read once into ``conn``; False at EOF or reset."""
        try:
            data = await stream.receive_some(self.config.recv_size)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            conn.connection_lost()
            return False
        conn.receive_data(data, now=trio.current_time())
        return bool(data)

    async def _negotiate(self, conn: ServerConnection, stream: trio.abc.Stream) -> NegotiationRequested | None:
        timeout = self.config.negotiation_timeout
        with trio.move_on_after(math.inf if timeout is None else timeout):
            while True:
                ev = conn.next_event()
                if isinstance(ev, NegotiationRequested):
                    return ev
                if isinstance(ev, ConnectionClosed):
                    return None
                if ev is NEED_DATA and not await self._pump(conn, stream):
                    ev = conn.next_event()  # EOF: a clean close, or an error raised here
                    if isinstance(ev, NegotiationRequested):
                        return ev
                    return None
        log.info("seastar-rpc: no negotiation frame within %ss; closing", timeout)
        return None

    def _group_for(self, cookie: bytes | None) -> HandlerGroup | None:
        if cookie is None:
            return self.default_group
        group = self.groups.get(cookie)
        if group is None and self.config.unknown_cookie == "reject":
            return None
        return group or self.default_group

    async def _serve_rpc(self, conn: ServerConnection, stream: trio.abc.Stream, conn_id: int, offer: NegotiationRequested) -> None:
        cookie = offer.features.isolation
        group = self._group_for(cookie)
        if group is None:
            conn.reject("unknown isolation cookie")
            self.stats["rejected"] += 1
            log.info("seastar-rpc: connection %#x: unknown isolation cookie %r; closing without a reply", conn_id, cookie)
            return
        await stream.send_all(conn.accept(connection_id=conn_id if self.config.streaming else None))
        self.stats["connections"] += 1
        self._rpc[conn_id] = []
        lock = trio.StrictFIFOLock()

        async def send(data: bytes) -> None:
            if data:
                async with lock:
                    await stream.send_all(data)

        try:
            async with trio.open_nursery() as nursery:
                while True:
                    ev = self._next(conn, conn_id)
                    if ev is NEED_DATA:
                        if not await self._pump(conn, stream):
                            continue
                    elif isinstance(ev, CallReceived):
                        await self._dispatch(ev, conn, conn_id, group, cookie, send, nursery)
                    elif isinstance(ev, OversizedCall):
                        self.stats["oversized"] += 1
                        estimate = self.config.basic_request_size + ev.length * self.config.bloat_factor
                        await self._reply(conn_id, ev, send, conn.respond_oversized(
                            ev, estimate=estimate, max_memory=self.config.max_memory, now=trio.current_time()))
                    elif ev is None or isinstance(ev, ConnectionClosed):
                        break
                # EOF: Seastar stops reading; handlers still running may still reply.
        finally:
            for s in self._rpc.pop(conn_id, []):
                s.abort()  # a parent's close aborts its streams (§5.2)

    def _next(self, conn: ServerConnection, conn_id: int) -> object:
        """The machine's next event; ``None`` after a protocol error (logged, counted)."""
        try:
            return conn.next_event()
        except RemoteProtocolError as exc:
            self.stats["protocol_errors"] += 1
            log.warning("seastar-rpc: connection %#x: %s; closing", conn_id, exc)
            return None

    async def _reply(self, conn_id: int, call: CallReceived | OversizedCall, send: Callable[[bytes], Awaitable[None]], data: bytes) -> None:
        if not data:
            self.stats["dropped_expired"] += 1
            return
        if self.on_reply is not None:
            self.on_reply(conn_id, call, trio.current_time())
        try:
            await send(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _dispatch(self, call: CallReceived, conn: ServerConnection, conn_id: int, group: HandlerGroup,
                        cookie: bytes | None, send: Callable[[bytes], Awaitable[None]], nursery: trio.Nursery) -> None:
        self.stats["calls"] += 1
        verb = self.registry.get(call.verb)
        if verb is None:
            self.stats["unknown_verbs"] += 1
            await self._reply(conn_id, call, send, conn.respond_unknown_verb(call, now=trio.current_time()))
            return
        cfg = self.config
        need = cfg.basic_request_size + len(call.payload) * cfg.bloat_factor
        if not await self.memory.acquire(need, call.deadline):
            self.stats["dropped_expired"] += 1  # still waiting for memory at its deadline: dropped, no reply (§3.3)
            return
        ctx = CallContext(self, conn_id, call.verb, call.msg_id, call.deadline, group.name, cookie)
        nursery.start_soon(self._run_handler, verb, ctx, call, conn, conn_id, group, send, need)

    async def _run_handler(self, verb: _Verb, ctx: CallContext, call: CallReceived, conn: ServerConnection, conn_id: int,
                           group: HandlerGroup, send: Callable[[bytes], Awaitable[None]], need: int) -> None:
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
                    await self._reply(conn_id, call, send, conn.respond_error(
                        call, UserError(str(exc).encode()), now=now, handler_duration=_micros(now - start)))
                    return
                if verb.one_way:
                    self.stats["one_way"] += 1
                    return
                now = trio.current_time()
                self.stats["replies"] += 1
                await self._reply(conn_id, call, send, conn.respond(
                    call, result or b"", now=now, handler_duration=_micros(now - start)))
            finally:
                if group.limiter is not None:
                    group.limiter.release_on_behalf_of(ctx)
        finally:
            self.memory.release(need)

    async def _serve_stream(self, conn: ServerConnection, stream: trio.abc.Stream, conn_id: int, parent_id: int) -> None:
        if not self.config.streaming:
            conn.reject("streaming is not configured for the server")
        elif parent_id not in self._rpc:
            conn.reject(f"Unknown parent connection {parent_id:#x}")
        if conn.state is State.CLOSED:
            self.stats["rejected"] += 1
            log.info("seastar-rpc: stream connection %#x refused (parent %#x); closing without a reply", conn_id, parent_id)
            return
        s = ServerStream(self, conn, stream, conn_id, parent_id)
        self._rpc[parent_id].append(s)
        self._streams[conn_id] = s
        self.stats["stream_connections"] += 1
        try:
            await stream.send_all(conn.accept(connection_id=conn_id))
            with trio.CancelScope() as scope:
                s._scope = scope
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._stream_reader, conn, stream, s)
                    await s.done.wait()
                    nursery.cancel_scope.cancel()
        finally:
            s.abort()
            self._streams.pop(conn_id, None)
            siblings = self._rpc.get(parent_id)
            if siblings is not None and s in siblings:
                siblings.remove(s)

    async def _stream_reader(self, conn: ServerConnection, stream: trio.abc.Stream, s: ServerStream) -> None:
        while True:
            ev = self._next(conn, s.id)
            if ev is NEED_DATA:
                if not await self._pump(conn, stream):
                    continue
            elif isinstance(ev, (StreamMessage, StreamEnd)):
                try:
                    await s._in_send.send(ev.payload if isinstance(ev, StreamMessage) else None)
                except trio.ClosedResourceError:
                    return
                if isinstance(ev, StreamEnd):
                    s._in_send.close()
                    s._maybe_done()
            elif ev is None or isinstance(ev, ConnectionClosed):
                s.abort()
                return


def _micros(seconds: float) -> int:
    us = int(seconds * 1_000_000)
    return us if 0 <= us < UNMEASURED else UNMEASURED


# --------------------------------------------------------------------------- demo verbs


_I32: Final = struct.Struct("<i")
_U64: Final = struct.Struct("<Q")

#: The demo verbs ``refwire serve seastar-rpc`` registers; their numbers follow the
#: captures of research §9.2 (1 = sum, 3 = throws "boom", 4 = one-way, 5 = sleep,
#: 6 = stream echo), so a Seastar client running that script sees the same replies.
DEMO_VERBS: Final = {"sum": 1, "echo": 2, "boom": 3, "note": 4, "sleep": 5, "stream_echo": 6, "conn_id": 7}


def demo_registry(notes: list[int] | None = None) -> VerbRegistry:
    """Built-in demo verbs (int32 = 4 bytes LE, as the rpc_demo serializer)."""
    reg = VerbRegistry()
    kept = notes if notes is not None else []

    def ints(payload: bytes, n: int) -> tuple[int, ...]:
        if len(payload) < 4 * n:
            raise BadArguments(f"expected {n} int32, got {len(payload)} bytes")
        return struct.unpack_from(f"<{n}i", payload)

    async def sum_(ctx: CallContext, payload: bytes) -> bytes:
        a, b = ints(payload, 2)
        return _I32.pack(((a + b + 2**31) % 2**32) - 2**31)

    async def echo(ctx: CallContext, payload: bytes) -> bytes:
        return payload

    async def boom(ctx: CallContext, payload: bytes) -> bytes:
        raise RuntimeError("boom")

    async def note(ctx: CallContext, payload: bytes) -> None:
        kept.append(ints(payload, 1)[0])

    async def sleep(ctx: CallContext, payload: bytes) -> bytes:
        (ms,) = ints(payload, 1)
        await trio.sleep(max(0, ms) / 1000)
        return payload[:4]

    async def stream_echo(ctx: CallContext, payload: bytes) -> bytes:
        if len(payload) < 8:
            raise BadArguments("expected a u64 sink id")
        sid = _U64.unpack_from(payload, len(payload) - 8)[0]
        s = ctx.stream(sid)

        async def pump() -> None:
            try:
                async for msg in s:
                    await s.send(msg)
                await s.close()
            except StreamClosed:
                pass

        ctx.server.spawn(pump)
        return _U64.pack(sid)

    async def conn_id(ctx: CallContext, payload: bytes) -> bytes:
        return _U64.pack(ctx.connection_id)

    reg.register(1, sum_, name="sum")
    reg.register(2, echo, name="echo")
    reg.register(3, boom, name="boom")
    reg.register(4, note, one_way=True, name="note")
    reg.register(5, sleep, name="sleep")
    reg.register(6, stream_echo, name="stream_echo")
    reg.register(7, conn_id, name="conn_id")
    return reg
