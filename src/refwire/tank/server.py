"""The trio TANK broker, :class:`TankBroker` (specs/tank/README.md §6).

A thin driver: each connection is a :class:`~refwire.drivers.Pump` running a
:class:`~refwire.tank.connection.BrokerConnection` (reader, idle timer and
writer; the greeting Ping is flushed at once); every request goes to the shared
Sans-IO :class:`~refwire.tank.service.BrokerService`, whose answers may be addressed
to other connections (a produce wakes long polls) and go out through that
connection's ``pump.send``.  One timer task answers long polls whose
``maxWait`` ran out.  A malformed request closes its connection only -- as the
real broker does, without an error frame -- and nothing of it is stored.

Replies are bounded by the connection's memory budget (§6, limits): while more
than a sixteenth of ``max_connection_memory`` (at most the pump's 16 MiB) waits
to be written, the request just answered waits for it to be written before the
next is read -- a client that sends requests but reads no answers holds no more.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from ..admission import ServerBudget
from ..drivers import DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_UNWRITTEN, Pump, StreamServer
from ..errors import ProtocolError
from ..logs import limited
from ..reference import RunningServer
from ..sansio import to_remote
from .connection import BrokerConnection
from .events import ConnectionClosed, IdleTimeout
from .frames import Request
from .service import BrokerConfig, BrokerService, Outbox
from .storage import MemoryStorage, Storage

__all__ = ["BrokerConfig", "TankBroker", "serve_reference"]

log = logging.getLogger("refwire.tank")


_DEFAULT_CONFIG = BrokerConfig()


@attrs.define
class _Conn:
    id: int
    machine: BrokerConnection
    pump: Pump


class TankBroker:
    """Serve TANK on any listeners (TCP or the simulator's).

    ``await nursery.start(broker.serve, listeners)``; ``await broker.shutdown()``.
    ``storage`` defaults to memory; pass a :class:`~refwire.tank.disk.DirectoryStorage`
    for a log that survives a restart.
    """

    def __init__(
        self,
        storage: Storage | None = None,
        config: BrokerConfig = _DEFAULT_CONFIG,
        *,
        recv_size: int = 65536,
        max_connections: int | None = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self.storage = storage if storage is not None else MemoryStorage()
        #: the server's memory budget (``limits.max_server_memory``), shared by its connections
        self.budget = ServerBudget(config.limits)
        self.config = config = attrs.evolve(config, limits=self.budget.limits)
        self.service = BrokerService(self.storage, config)
        self._server = StreamServer(self._handle, name="tank", max_connections=max_connections)
        #: bytes of answers one connection may have queued before its next request waits (§6, limits)
        self.max_unwritten = min(DEFAULT_MAX_UNWRITTEN, config.limits.max_connection_memory // 16)
        self.service.queued = self._queued
        self._conns: dict[int, _Conn] = {}
        self._ids = itertools.count(1)
        self._timer_changed = trio.Event()
        self._recv_size = recv_size
        self.stats: dict[str, int] = {"connections": 0, "protocol_errors": 0, "idle_closed": 0, "requests": 0}
        self.transitions_seen: set[tuple[str, str, str]] = set()
        self.last_error: BaseException | None = None

    @property
    def open_connections(self) -> int:
        """How many client connections are open now."""
        return len(self._conns)

    async def serve(
        self, listeners: Sequence[trio.abc.Listener[Any]], *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Accept on ``listeners`` until :meth:`shutdown` (start it with ``nursery.start``)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._timer_loop)
            async with trio.open_nursery() as inner:  # returns when the server has shut down
                await inner.start(self._server.serve, listeners)
                task_status.started()
            nursery.cancel_scope.cancel()

    async def shutdown(self, grace: float = 1.0) -> None:
        """Stop accepting, give open connections ``grace`` seconds to finish, then close them."""
        await self._server.shutdown(grace)

    def _queued(self, cid: int) -> int:
        c = self._conns.get(cid)
        return 0 if c is None else c.pump.unwritten

    # -- dispatch -----------------------------------------------------------
    def _dispatch(self, outbox: Outbox) -> None:
        for cid, resp in outbox:
            c = self._conns.get(cid)
            if c is None:
                continue
            c.machine.long_polls = self.service.waits_of(cid)
            c.pump.send(resp)
        self._timer_changed.set()

    async def _timer_loop(self) -> None:
        while True:
            self._timer_changed = trio.Event()
            deadline = self.service.next_deadline()
            with trio.move_on_at(deadline if deadline is not None else math.inf):
                await self._timer_changed.wait()
                continue
            self._dispatch(self.service.handle_timer(now=trio.current_time()))

    # -- one connection -------------------------------------------------------
    async def _handle(self, stream: trio.abc.Stream) -> None:
        cid = next(self._ids)
        machine = BrokerConnection(
            limits=self.config.limits, idle_timeout=self.config.idle_timeout, frame_timeout=self.config.frame_timeout, now=trio.current_time()
        )

        async def on_event(ev: Request | ConnectionClosed | IdleTimeout) -> None:
            if isinstance(ev, ConnectionClosed):
                return  # the pump ends after it
            if isinstance(ev, IdleTimeout):
                self.stats["idle_closed"] += 1
                pump.stop()
                return
            self.stats["requests"] += 1
            if log.isEnabledFor(logging.DEBUG):
                log.debug("tank: connection %d: %s (request %s)", cid, type(ev).__name__, getattr(ev, "request_id", "-"))
            try:
                out = self.service.handle(cid, ev, now=trio.current_time())
            except ProtocolError as exc:  # a malformed bundle: the peer's fault
                raise to_remote(exc) from exc
            self._dispatch(out)
            machine.long_polls = self.service.waits_of(cid)
            pump.kick()
            if pump.unwritten > self.max_unwritten:  # the client is not reading: read on once it has
                await pump.flush()

        def holding() -> bool:
            # a request begun or not yet handled, or a long poll parked (its answer may come at
            # any time: the connection keeps its charge while it waits)
            return machine.holds_input or machine.long_polls > 0  # (the driver keeps long_polls current)

        pump = Pump(
            stream,
            machine,
            on_event,
            receive_size=self._recv_size,
            max_unwritten=self.max_unwritten,
            admission=self.budget.admission(holding),
        )
        self._conns[cid] = _Conn(cid, machine, pump)
        self.stats["connections"] += 1
        pump.kick()  # the greeting Ping the machine queued
        try:
            await pump.run()
        except ProtocolError as exc:
            # The real broker drops the connection without an error frame (§6).
            self.stats["protocol_errors"] += 1
            self.last_error = exc
            limited(log, "protocol-error", "tank: closing connection %d: %s", cid, exc)
        finally:
            del self._conns[cid]
            self.service.drop_connection(cid)
            pump.release()
            self.transitions_seen |= machine.transitions_seen
            self._timer_changed.set()


async def serve_reference(nursery: trio.Nursery, config: BrokerConfig | None, workdir: Path) -> RunningServer:
    """refwire's TANK broker (specs/tank/README.md §6) on 127.0.0.1 (a free port), in memory, started in
    ``nursery`` (the pytest fixture ``tank_broker``; :mod:`refwire.reference`): ``.server`` is the
    :class:`TankBroker` (``.server.storage.topics`` holds what was produced)."""
    broker = TankBroker() if config is None else TankBroker(config=config)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    await nursery.start(broker.serve, listeners)
    running = RunningServer("127.0.0.1", listeners[0].socket.getsockname()[1], Path(""))
    running.server = broker
    return running
