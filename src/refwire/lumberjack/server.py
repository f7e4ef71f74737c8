"""trio Lumberjack server: hands each batch to the application, acks only after it
accepted it (specs/lumberjack/README.md §3).

Two ways to consume batches:

* a handler ``async def handler(batch, info)`` -- the batch is acked when it
  returns (an exception closes that connection without acking);
* ``async with server.batches() as batches: async for batch, info in batches``
  -- the batch is acked once the consumer has taken it from the iterator.

Per connection: a reader task decodes and queues batches (up to
``pipeline_depth`` ahead, so the client's next window is read while the
application works), a worker hands them to the application in order and acks,
and a keepalive task sends ``A 0`` while a batch waits.  A protocol error logs
one line and closes that connection only.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import attrs
import trio

from ..drivers import StreamServer, listener_address
from ..errors import RemoteProtocolError
from ..wire import Limits
from .connection import NEED_DATA, Batch, ConnectionClosed, EmptyWindow, ServerConnection
from .frames import DEFAULT_LIMITS

__all__ = ["ConnectionInfo", "LumberjackServer", "ServerConfig", "serve_lumberjack"]

log = logging.getLogger("refwire.lumberjack")


@attrs.frozen(kw_only=True)
class ServerConfig:
    """Server settings; see :class:`~refwire.lumberjack.ServerConnection` for the
    protocol switches."""

    limits: Limits = DEFAULT_LIMITS
    validate_json: bool = True
    ack_mode: Literal["last-seq", "count"] = "last-seq"
    keepalive_interval: float | None = 5.0
    keepalive_version: Literal["connection", "v2"] = "connection"
    accept_mixed_versions: bool = False
    answer_empty_window: bool = True
    #: close a connection that sends nothing for this long while no batch is
    #: pending (Logstash ``client_inactivity_timeout`` is 60 s); None = never.
    idle_timeout: float | None = 60.0
    #: close a connection that stops sending in the middle of a batch (or of a
    #: frame) for this long (go-lumber allows 30 s for a whole batch); None = never.
    batch_timeout: float | None = 30.0
    handshake_timeout: float = 10.0
    #: batches decoded ahead of the application per connection.
    pipeline_depth: int = 2
    recv_size: int = 256 * 1024

    def machine(self) -> ServerConnection:
        return ServerConnection(
            limits=self.limits,
            validate_json=self.validate_json,
            ack_mode=self.ack_mode,
            keepalive_interval=self.keepalive_interval,
            keepalive_version=self.keepalive_version,
            accept_mixed_versions=self.accept_mixed_versions,
            answer_empty_window=self.answer_empty_window,
        )


@attrs.frozen
class ConnectionInfo:
    """Who sent a batch: the connection's number on this server and its peer."""

    id: int
    peer: str


Handler = Callable[[Batch, ConnectionInfo], Awaitable[None]]


def _peer_name(stream: trio.abc.Stream) -> str:
    inner: Any = getattr(stream, "transport_stream", stream)
    sock = getattr(inner, "socket", None)
    if sock is not None:
        try:
            host, port = sock.getpeername()[:2]
            return f"{host}:{port}"
        except OSError:
            return "?"
    return str(getattr(inner, "remote", "?"))


class LumberjackServer:
    """A Lumberjack v1/v2 server over any trio listener (TCP, TLS, simulator)."""

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        config: ServerConfig = ServerConfig(),
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.config = config
        self._handler = handler
        self._stream_server = StreamServer(
            self.handle_stream, ssl_context=ssl_context, handshake_timeout=config.handshake_timeout, name="lumberjack"
        )
        self._next_id = 0
        self._chan_send: trio.MemorySendChannel[tuple[Batch, ConnectionInfo]] | None = None
        self._consumer = trio.Event()  # set while a batches() consumer is open
        self.listeners: Sequence[trio.abc.Listener[Any]] = ()
        #: ``HOST:PORT`` of each TCP listener once :meth:`serve_tcp` started.
        self.addresses: list[str] = []
        #: counters: connections, batches, events, protocol_errors, app_errors
        self.stats: dict[str, int] = {"connections": 0, "batches": 0, "events": 0, "protocol_errors": 0, "app_errors": 0}
        #: per-connection machines' transitions, merged (coverage reports).
        self.transitions_seen: set[tuple[str, str, str]] = set()

    # -- serving -------------------------------------------------------------
    async def serve(
        self,
        listeners: Sequence[trio.abc.Listener[Any]],
        *,
        task_status: trio.TaskStatus[Sequence[trio.abc.Listener[Any]]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept on ``listeners`` until :meth:`shutdown`."""
        self.listeners = listeners
        await self._stream_server.serve(listeners, task_status=task_status)

    async def serve_tcp(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on ``host:port``; ``task_status.started`` gets the bound ``HOST:PORT`` list."""
        listeners = await trio.open_tcp_listeners(port, host=host)

        async def _serve(task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
            await self.serve(listeners, task_status=task_status)

        async with trio.open_nursery() as nursery:
            await nursery.start(_serve)
            self.addresses = [listener_address(lst) for lst in listeners]
            task_status.started(self.addresses)

    async def shutdown(self, grace: float = 5.0) -> None:
        """Stop accepting, let connections finish their pending batches for up
        to ``grace`` seconds, then close them."""
        await self._stream_server.shutdown(grace)

    @asynccontextmanager
    async def batches(self) -> AsyncIterator[trio.MemoryReceiveChannel[tuple[Batch, ConnectionInfo]]]:
        """Iterate ``(batch, info)``; a batch is acked once taken from here."""
        if self._handler is not None:
            raise RuntimeError("this server was given a handler; batches() is for handler-less servers")
        send, recv = trio.open_memory_channel[tuple[Batch, ConnectionInfo]](0)
        self._chan_send = send
        self._consumer.set()
        try:
            async with recv:
                yield recv
        finally:
            self._chan_send = None
            self._consumer = trio.Event()

    async def _deliver(self, batch: Batch, info: ConnectionInfo) -> None:
        if self._handler is not None:
            await self._handler(batch, info)
            return
        # Batches wait (unacked, with keepalives) until a consumer opens batches().
        while self._chan_send is None:
            await self._consumer.wait()
        await self._chan_send.send((batch, info))

    # -- one connection -------------------------------------------------------
    async def handle_stream(self, stream: trio.abc.Stream) -> None:
        """Serve one already-accepted connection until it ends.

        Timers: while a batch (or a frame) is incomplete, ``batch_timeout``
        seconds without a byte close the connection; while nothing is pending,
        ``idle_timeout`` seconds since the last byte received or the last ack
        sent close it; while a batch waits for the application neither runs.
        On shutdown an idle connection closes at once; a busy one finishes its
        pending batches first (within the server's grace period).
        """
        cfg = self.config
        conn = cfg.machine()
        self._next_id += 1
        info = ConnectionInfo(self._next_id, _peer_name(stream))
        self.stats["connections"] += 1
        lock = trio.StrictFIFOLock()
        wake = [trio.Event()]
        queue_send, queue_recv = trio.open_memory_channel[Batch](max(0, cfg.pipeline_depth - 1))
        closing = self._stream_server.closing
        inf = float("inf")
        last_rx = trio.current_time()
        last_activity = last_rx
        rx_scope: list[trio.CancelScope | None] = [None]

        def receive_deadline() -> float:
            if conn.mid_batch:
                return last_rx + cfg.batch_timeout if cfg.batch_timeout is not None else inf
            if conn.pending_batches:
                return inf
            if closing.is_set():
                return -inf
            return last_activity + cfg.idle_timeout if cfg.idle_timeout is not None else inf

        def rearm() -> None:
            scope = rx_scope[0]
            if scope is not None:
                scope.deadline = receive_deadline()

        async def send(data: bytes) -> None:
            async with lock:
                await stream.send_all(data)

        worker_done = trio.Event()

        async def worker() -> None:
            try:
                await _work()
            finally:
                worker_done.set()

        async def _work() -> None:
            nonlocal last_activity
            async with queue_recv:
                async for batch in queue_recv:
                    try:
                        await self._deliver(batch, info)
                    except Exception as exc:
                        self.stats["app_errors"] += 1
                        log.error("lumberjack: connection %d (%s): application refused a batch: %r; closing", info.id, info.peer, exc)
                        raise _Close() from exc
                    ack = conn.accept(batch, now=trio.current_time())
                    self.stats["batches"] += 1
                    self.stats["events"] += len(batch.events)
                    await send(ack)
                    last_activity = trio.current_time()
                    rearm()

        async def keepalive() -> None:
            while True:
                deadline = conn.next_deadline()
                if deadline is None:
                    await wake[0].wait()
                    wake[0] = trio.Event()
                    continue
                await trio.sleep_until(deadline)
                conn.handle_timer(trio.current_time())
                out = conn.data_to_send()
                if out:
                    await send(out)

        async def watch_shutdown() -> None:
            await closing.wait()
            rearm()

        async def reader() -> None:
            nonlocal last_rx, last_activity
            async with queue_send:
                while True:
                    with trio.CancelScope(deadline=receive_deadline()) as scope:
                        rx_scope[0] = scope
                        data = await stream.receive_some(cfg.recv_size)
                    rx_scope[0] = None
                    if scope.cancelled_caught:
                        now = trio.current_time()
                        if conn.mid_batch:
                            if cfg.batch_timeout is not None and now >= last_rx + cfg.batch_timeout:
                                log.warning(
                                    "lumberjack: connection %d (%s): no data for %ss inside a batch; closing",
                                    info.id, info.peer, cfg.batch_timeout,
                                )
                                return
                        elif not conn.pending_batches:
                            if closing.is_set():
                                return
                            if cfg.idle_timeout is not None and now >= last_activity + cfg.idle_timeout:
                                log.info("lumberjack: connection %d (%s): idle for %ss; closing", info.id, info.peer, cfg.idle_timeout)
                                return
                        continue
                    last_rx = last_activity = trio.current_time()
                    conn.receive_data(data, now=last_rx)
                    while True:
                        try:
                            event = conn.next_event()
                        except RemoteProtocolError as exc:
                            self.stats["protocol_errors"] += 1
                            log.warning("lumberjack: connection %d (%s): %s; closing", info.id, info.peer, exc)
                            return
                        if event is NEED_DATA:
                            break
                        if isinstance(event, Batch):
                            await queue_send.send(event)
                            wake[0].set()
                        elif isinstance(event, EmptyWindow):
                            out = conn.data_to_send()
                            if out:
                                await send(out)
                        elif isinstance(event, ConnectionClosed):
                            return

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker)
                side_scope = trio.CancelScope()

                async def side_tasks() -> None:
                    with side_scope:
                        async with trio.open_nursery() as side:
                            side.start_soon(keepalive)
                            side.start_soon(watch_shutdown)

                nursery.start_soon(side_tasks)
                try:
                    await reader()
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    conn.connection_lost()
                    log.info("lumberjack: connection %d (%s) lost: %s", info.id, info.peer, exc or type(exc).__name__)
                    nursery.cancel_scope.cancel()
                # The reader is done: the worker drains the queued batches (acking
                # them), then keepalives stop and the connection closes.
                await worker_done.wait()
                side_scope.cancel()
        except* _Close:
            pass
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as group:
            log.info("lumberjack: connection %d (%s) lost: %s", info.id, info.peer, group.exceptions[0])
        finally:
            self.transitions_seen |= conn.transitions_seen
            await trio.aclose_forcefully(stream)


class _Close(Exception):
    """Internal: close this connection (already logged)."""


async def serve_lumberjack(
    handler: Handler,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    config: ServerConfig = ServerConfig(),
    ssl_context: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[LumberjackServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Convenience: ``server = await nursery.start(serve_lumberjack, handler, host, port)``."""
    server = LumberjackServer(handler, config=config, ssl_context=ssl_context)

    async def _run(task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        await server.serve_tcp(host, port, task_status=task_status)

    async with trio.open_nursery() as nursery:
        await nursery.start(_run)
        task_status.started(server)
