"""The trio TANK broker (research/tank.md §7; specs/tank/README.md §5).

A thin driver: each connection has a reader task feeding a
:class:`~refwire.tank.connection.BrokerConnection` and a writer task draining a
queue of frames; every request goes to the shared Sans-IO
:class:`~refwire.tank.core.BrokerCore`, whose answers may be addressed to other
connections (a produce wakes long polls).  One timer task answers long polls
whose ``maxWait`` ran out.  A malformed request closes its connection only --
as the real broker does -- and nothing of it is stored.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from ..drivers import StreamServer
from ..errors import ProtocolError
from .connection import NEED_DATA, BrokerConnection, ConnectionClosed
from .core import BrokerConfig, BrokerCore, Outbox
from .storage import Storage

__all__ = ["BrokerConfig", "TankBroker"]

log = logging.getLogger("refwire.tank")


_DEFAULT_CONFIG = BrokerConfig()


@attrs.define
class _Conn:
    id: int
    machine: BrokerConnection
    send: trio.MemorySendChannel[bytes]
    stream: trio.abc.Stream


class TankBroker:
    """Serve TANK on any listeners (TCP or the simulator's).

    ``await nursery.start(broker.serve, listeners)``; ``await broker.shutdown()``.
    ``storage`` defaults to memory; pass a :class:`~refwire.tank.storage.DirectoryStorage`
    for a log that survives a restart.
    """

    def __init__(self, storage: Storage | None = None, config: BrokerConfig = _DEFAULT_CONFIG, *, recv_size: int = 65536) -> None:
        self.storage = storage if storage is not None else Storage()
        self.config = config
        self.core = BrokerCore(self.storage, config)
        self._server = StreamServer(self._handle, name="tank")
        self._conns: dict[int, _Conn] = {}
        self._ids = itertools.count(1)
        self._timer_changed = trio.Event()
        self._recv_size = recv_size
        self.stats: dict[str, int] = {"connections": 0, "protocol_errors": 0, "idle_closed": 0, "requests": 0}
        self.transitions_seen: set[tuple[str, str, str]] = set()
        self.last_error: BaseException | None = None

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    async def serve(self, listeners: Sequence[trio.abc.Listener[Any]], *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._timer_loop)
            async with trio.open_nursery() as inner:  # returns when the server has shut down
                await inner.start(self._server.serve, listeners)
                task_status.started()
            nursery.cancel_scope.cancel()

    async def shutdown(self, grace: float = 1.0) -> None:
        await self._server.shutdown(grace)

    # -- dispatch -----------------------------------------------------------
    def _dispatch(self, outbox: Outbox) -> None:
        for cid, resp in outbox:
            c = self._conns.get(cid)
            if c is None:
                continue
            c.machine.long_polls = self.core.waits_of(cid)
            try:
                c.send.send_nowait(c.machine.send(resp, trio.current_time()))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        self._timer_changed.set()

    async def _timer_loop(self) -> None:
        while True:
            self._timer_changed = trio.Event()
            deadline = self.core.next_deadline()
            with trio.move_on_at(deadline if deadline is not None else math.inf):
                await self._timer_changed.wait()
                continue
            self._dispatch(self.core.handle_timer(trio.current_time()))

    # -- one connection -------------------------------------------------------
    async def _handle(self, stream: trio.abc.Stream) -> None:
        cid = next(self._ids)
        machine = BrokerConnection(limits=self.config.limits, idle_timeout=self.config.idle_timeout, now=trio.current_time())
        send, recv = trio.open_memory_channel[bytes](math.inf)
        conn = _Conn(cid, machine, send, stream)
        self._conns[cid] = conn
        self.stats["connections"] += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer, stream, recv, nursery.cancel_scope)
                send.send_nowait(machine.data_to_send())
                await self._reader(conn)
                await send.aclose()  # let the writer flush what is queued, then stop
        finally:
            del self._conns[cid]
            self.core.drop_connection(cid)
            self.transitions_seen |= machine.transitions_seen
            self._timer_changed.set()

    async def _writer(self, stream: trio.abc.Stream, recv: trio.MemoryReceiveChannel[bytes], scope: trio.CancelScope) -> None:
        try:
            async for data in recv:
                parts = [data]
                while True:  # batch what is queued into one write
                    try:
                        parts.append(recv.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                await stream.send_all(b"".join(parts))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            scope.cancel()

    async def _reader(self, conn: _Conn) -> None:
        m = conn.machine
        while True:
            now = trio.current_time()
            deadline = m.next_deadline()
            if deadline is None and m.idle_timeout is not None:
                deadline = now + m.idle_timeout  # a long poll is outstanding: look again later
            data = None
            with trio.move_on_at(deadline if deadline is not None else math.inf):
                try:
                    data = await conn.stream.receive_some(self._recv_size)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    m.connection_lost()
                    return
            if data is None:
                m.long_polls = self.core.waits_of(conn.id)
                if m.handle_timer(trio.current_time()) is not None:
                    self.stats["idle_closed"] += 1
                    return
                continue
            m.receive_data(data, trio.current_time())
            try:
                while True:
                    ev = m.next_event()
                    if ev is NEED_DATA:
                        break
                    if isinstance(ev, ConnectionClosed):
                        return
                    self.stats["requests"] += 1
                    self._dispatch(self.core.handle(conn.id, ev, trio.current_time()))  # type: ignore[arg-type]
                    m.long_polls = self.core.waits_of(conn.id)
            except ProtocolError as exc:
                # The real broker drops the connection without an error frame (§7.1).
                self.stats["protocol_errors"] += 1
                self.last_error = exc
                log.warning("tank: closing connection %d: %s", conn.id, exc)
                return
