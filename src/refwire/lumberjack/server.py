"""trio Lumberjack server: hands each batch to the application, acks only after it
accepted it (specs/lumberjack/README.md §3).

Two ways to consume batches:

* a handler ``async def handler(batch, info)`` -- the batch is acked when it
  returns (an exception closes that connection without acking);
* ``async with server.batches() as batches: async for batch, info in batches``
  -- the batch is acked once the consumer has taken it from the iterator.

Per connection: a :class:`~refwire.drivers.Pump` reads and decodes (up to
``pipeline_depth`` batches ahead, so the client's next window is read while the
application works), writes, and runs the machine's timers (``A 0`` keepalives
while a batch waits, the idle and batch timeouts); a worker hands the batches
to the application in order and acks each.  A protocol error logs one line and
closes that connection only.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import attrs
import trio

from ..admission import ServerBudget
from ..drivers import DEFAULT_MAX_CONNECTIONS, RESET, WRITE_FAILED, WRITE_TIMEOUT, Pump, StreamServer, listener_address
from ..errors import RemoteProtocolError
from ..logs import limited
from ..reference import RunningServer
from ..wire import Limits
from .connection import ServerConnection
from .events import Batch, BatchTimeout, ConnectionClosed, IdleAtShutdown, IdleTimeout
from .frames import DEFAULT_LIMITS

__all__ = ["ConnectionInfo", "LumberjackServer", "ServerConfig", "serve_lumberjack", "serve_reference"]

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
    #: a frame begun and still incomplete after this many seconds fails the connection
    #: (a peer trickling bytes cannot hold it for ever; between frames idling is as before); None = never
    frame_timeout: float | None = 30.0
    handshake_timeout: float = 10.0
    #: connections served at once; one past it is closed at once (None: no limit)
    max_connections: int | None = DEFAULT_MAX_CONNECTIONS
    #: batches decoded ahead of the application per connection.
    pipeline_depth: int = 2
    recv_size: int = 256 * 1024

    def machine(self, *, now: float) -> ServerConnection:
        """The connection's machine, started at ``now`` (its timers count from it)."""
        return ServerConnection(
            limits=self.limits,
            validate_json=self.validate_json,
            ack_mode=self.ack_mode,
            keepalive_interval=self.keepalive_interval,
            keepalive_version=self.keepalive_version,
            accept_mixed_versions=self.accept_mixed_versions,
            answer_empty_window=self.answer_empty_window,
            idle_timeout=self.idle_timeout,
            batch_timeout=self.batch_timeout,
            pipeline_depth=self.pipeline_depth,
            now=now,
            frame_timeout=self.frame_timeout,
        )


@attrs.frozen
class ConnectionInfo:
    """Who sent a batch: the connection's number on this server and its peer."""

    id: int
    peer: str
    #: The connection's stream (for :meth:`tls_peer`); not part of equality.
    stream: trio.abc.Stream | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def ip_address(self) -> str:
        """The peer's IP address (Logstash's ``[@metadata][ip_address]``), or ``?``."""
        host = self.peer.rsplit(":", 1)[0] if ":" in self.peer else self.peer
        return host.strip("[]")

    def tls_peer(self) -> dict[str, str] | None:
        """What Logstash's beats input puts in ``[@metadata][tls_peer]``
        (``specs/lumberjack/README.md`` §6.1): None without TLS; ``status``
        ``verified`` (with ``protocol``, ``cipher_suite`` and the client
        certificate's ``subject`` in RFC 2253 order) when the client presented
        a certificate the server verified, else ``unverified``."""
        stream = self.stream
        if not isinstance(stream, trio.SSLStream):
            return None
        try:
            cert = stream.getpeercert()
            version, cipher = stream.version(), stream.cipher()
        except (ValueError, AttributeError, trio.NeedHandshakeError):
            return {"status": "unverified"}
        if not cert:
            return {"status": "unverified"}
        return {
            "status": "verified",
            "protocol": str(version or ""),
            "cipher_suite": cipher[0] if cipher else "",
            "subject": _rfc2253(cert.get("subject", ())),
        }


#: Attribute names as RFC 2253 writes them (Python's ``getpeercert`` spells them out).
_RDN_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _rfc2253(subject: Any) -> str:
    """A certificate subject as ``CN=...,OU=...,O=...,C=...`` (most specific first, as Java prints it)."""
    parts = []
    for rdn in reversed(subject):
        parts.append("+".join(f"{_RDN_NAMES.get(k, k)}={_rfc2253_escape(str(v))}" for k, v in rdn))
    return ",".join(parts)


def _rfc2253_escape(value: str) -> str:
    out = "".join("\\" + ch if ch in ',+"\\<>;' else ch for ch in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


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
        #: the server's memory budget (``limits.max_server_memory``), shared by its connections
        self.budget = ServerBudget(config.limits)
        self.config = config = attrs.evolve(config, limits=self.budget.limits)
        self._handler = handler
        self._stream_server = StreamServer(
            self.handle_stream,
            ssl_context=ssl_context,
            handshake_timeout=config.handshake_timeout,
            name="lumberjack",
            max_connections=config.max_connections,
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

        The machine (:meth:`ServerConfig.machine`) runs the timers: while a
        batch (or a frame) is incomplete, ``batch_timeout`` seconds without a
        byte close the connection; while nothing is pending, ``idle_timeout``
        seconds since the last byte received or the last ack sent close it;
        while a batch waits for the application neither runs (keepalives do).
        On shutdown an idle connection closes at once; a busy one finishes its
        pending batches first (within the server's grace period).

        A :class:`~refwire.drivers.Pump` reads, writes and runs the timers; a
        worker hands the batches to the application in order and acks each
        (``Accept``); the reader keeps decoding up to ``pipeline_depth`` batches
        ahead of it.
        """
        cfg = self.config
        conn = cfg.machine(now=trio.current_time())
        self._next_id += 1
        info = ConnectionInfo(self._next_id, _peer_name(stream), stream)
        self.stats["connections"] += 1
        queue_send, queue_recv = trio.open_memory_channel[Batch](max(0, cfg.pipeline_depth - 1))
        closing = self._stream_server.closing
        worker_done = trio.Event()
        logged_lost = False

        def lost(why: str) -> None:
            nonlocal logged_lost
            if not logged_lost:
                logged_lost = True
                log.info("lumberjack: connection %d (%s) lost: %s", info.id, info.peer, why)

        async def worker() -> None:
            try:
                async with queue_recv:
                    async for batch in queue_recv:
                        try:
                            await self._deliver(batch, info)
                        except Exception as exc:
                            self.stats["app_errors"] += 1
                            log.error("lumberjack: connection %d (%s): application refused a batch: %r; closing", info.id, info.peer, exc)
                            raise _Close() from exc
                        armed = conn.next_deadline()
                        conn.accept(batch, now=trio.current_time())  # = send(Accept(batch))
                        self.stats["batches"] += 1
                        self.stats["events"] += len(batch)
                        await pump.flush()  # the ack goes out from this task
                        due = conn.next_deadline()
                        if due is not None and (armed is None or due < armed):
                            pump.kick()  # an earlier deadline (idle, shutdown): wake the timer
                        if conn.lost:  # the ack (or a keepalive) could not be written
                            lost(pump.ended if pump.ended in (WRITE_FAILED, WRITE_TIMEOUT, RESET) else "write failed")
                            raise _Close()
            finally:
                worker_done.set()

        finishing = False

        async def finish() -> None:
            """Read no more; let the worker ack the queued batches (keepalives go on)."""
            nonlocal finishing
            finishing = True
            pump.stop()
            queue_send.close()
            await worker_done.wait()

        async def on_event(event: object) -> None:
            if isinstance(event, Batch):
                if not finishing:  # one decoded as a timer closed the connection stays unacked
                    await queue_send.send(event)
            elif isinstance(event, ConnectionClosed):
                if event.clean:
                    await finish()
                else:  # a reset or a failed write: unacked batches stay unacked
                    lost(event.reason)
                    raise _Close()
            elif isinstance(event, BatchTimeout):
                log.warning(
                    "lumberjack: connection %d (%s): no data for %ss inside a batch; closing",
                    info.id, info.peer, cfg.batch_timeout,
                )
                await finish()
            elif isinstance(event, IdleTimeout):
                log.info("lumberjack: connection %d (%s): idle for %ss; closing", info.id, info.peer, cfg.idle_timeout)
                await finish()
            elif isinstance(event, IdleAtShutdown):
                await finish()
            # EmptyWindow: its A 0 is queued (behind the acks of pending batches); it goes out with them.

        pump = Pump(
            stream,
            conn,
            on_event,
            receive_size=cfg.recv_size,
            write_timeout=None,
            # it holds a partial frame or batch, events not yet taken, or batches awaiting their ack (§4)
            admission=self.budget.admission(lambda: conn.mid_batch or conn.pending_batches > 0 or conn.holds_input),
        )

        async def watch_shutdown() -> None:
            await closing.wait()
            conn.close_when_idle(now=trio.current_time())
            pump.kick()

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(worker)
                nursery.start_soon(watch_shutdown)
                try:
                    await pump.run()
                except RemoteProtocolError as exc:
                    self.stats["protocol_errors"] += 1
                    limited(log, "protocol-error", "lumberjack: connection %d (%s): %s; closing", info.id, info.peer, exc)
                # The reader is done: the worker drains the queued batches (acking
                # them), then the connection closes.
                queue_send.close()
                await worker_done.wait()
                nursery.cancel_scope.cancel()
        except* _Close:
            pass
        finally:
            pump.release()
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


async def serve_reference(nursery: trio.Nursery, config: ServerConfig | None, workdir: Path) -> RunningServer:
    """refwire's Lumberjack server on 127.0.0.1 (a free port), started in ``nursery`` (the pytest
    fixture ``lumberjack_server``; :mod:`refwire.reference`): every event lands in ``.events`` and, as a
    JSON line, in ``.sink`` (``workdir/events.jsonl``) before its batch is acked (§3.7)."""
    import json

    from ..drivers import parse_hostport

    sink = workdir / "events.jsonl"
    sink.touch()
    box: list[RunningServer] = []

    async def handler(batch: Batch, info: ConnectionInfo) -> None:
        events = [ev.fields() for ev in batch.events]
        with sink.open("a", encoding="utf-8") as f:
            f.writelines(json.dumps(ev) + "\n" for ev in events)
        box[0].batches.append(events)
        box[0].events.extend(events)

    server = LumberjackServer(handler, config=config or ServerConfig())
    addresses = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
    running = RunningServer(*parse_hostport(addresses[0]), sink)
    running.server = server
    box.append(running)

    def close() -> None:
        for listener in server.listeners:  # a cancelled server leaves them open
            if isinstance(listener, trio.SocketListener):
                listener.socket.close()

    running.on_close = close
    return running
