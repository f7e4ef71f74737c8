"""The trio TANK client (specs/tank/README.md §5, §6).

``async with TankClient.connect_tcp(host, port) as c:`` then ``await
c.create_topic(...)``, ``await c.produce(...)``, ``await c.consume(...)``.
Many requests may be outstanding on one connection; answers are matched by
request id.  The connection is opened lazily and again after a failure; a
request in flight when the connection fails raises :class:`ConnectionLost`
(its outcome is unknown: a produce may or may not have been stored --
:meth:`TankClient.discover_partitions` tells).  An idle connection is kept
open with Pings every ``ping_interval`` seconds (the broker closes idle
connections after 16 s).  Each connection is a :class:`~refwire.drivers.Pump`
running a :class:`~refwire.tank.connection.ClientConnection`: the pump reads and
delivers answers, sends the keepalive Pings on the machine's timer, and a
request is written from the task that makes it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import attrs
import trio

from ..drivers import RESET, WRITE_FAILED, WRITE_TIMEOUT, Pump, open_stream
from ..errors import ProtocolError
from ..transport import peer_name
from ..wire import Limits
from .bundles import Message, encode_bundle
from .connection import ClientConnection
from .errors import ConnectionLost, ConsumeError, TankError
from .events import ConnectionClosed, ConsumeResult, PartitionData
from .frames import (
    DEFAULT_LIMITS,
    ConsumePartition,
    ConsumeRequest,
    ConsumeTopic,
    CreateTopicRequest,
    DiscoverPartitionsRequest,
    DiscoverTopicsRequest,
    DiscoverTopologyRequest,
    Ping,
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
    ReloadConfRequest,
    Request,
    StatusRequest,
)
from .responses import (
    ERR_BOUNDARY,
    CreateTopicResponse,
    DiscoverPartitionsResponse,
    DiscoverTopicsResponse,
    DiscoverTopologyResponse,
    PartitionInfo,
    ProduceResponse,
    ProduceResult,
    ReloadConfResponse,
    StatusResponse,
)

__all__ = ["ClientConfig", "ConnectionLost", "ConsumeError", "TankClient", "TankError"]

Connector = Callable[[], Awaitable[trio.abc.Stream]]
T = TypeVar("T")


@attrs.frozen(kw_only=True)
class ClientConfig:
    """Client settings: ``limits``, the keepalive ``ping_interval`` (None: no
    Pings), the default ``fetch_size`` of a consume, the ``client_id`` sent with
    produce requests, ``request_timeout`` (seconds a request waits for its answer
    on top of a long poll's own wait; past it the connection is given up and the
    request raises :class:`~refwire.tank.errors.ConnectionLost` naming it; None:
    wait as long as the connection lives) and the read size."""

    limits: Limits = DEFAULT_LIMITS
    ping_interval: float | None = 5.0
    fetch_size: int = 128 * 1024 * 1024  #: tank-cli's default; the broker clamps to 64 MiB
    client_id: bytes = b"c++"
    request_timeout: float | None = 30.0
    recv_size: int = 65536


class _Pending:
    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class TankClient:
    """A TANK client over any stream factory (``connect`` returns a ``trio.abc.Stream``)."""

    def __init__(self, connect: Connector, *, config: ClientConfig = ClientConfig()) -> None:
        self._connect = connect
        self.config = config
        self._nursery: trio.Nursery | None = None
        self._nursery_cm: Any = None
        self._stream: trio.abc.Stream | None = None
        self._conn: ClientConnection | None = None
        self._pump: Pump | None = None
        self._pending: dict[int, _Pending] = {}
        self._connect_lock = trio.Lock()
        self._next_id = 1
        self._stats: dict[str, int] = {"connects": 0, "requests": 0, "connection_lost": 0, "protocol_errors": 0, "pings_sent": 0, "answers": 0}
        self._pings = 0  # keepalive Pings of the connections closed so far
        self._seen: set[tuple[str, str, str]] = set()
        self.last_error: BaseException | None = None

    @classmethod
    def connect_tcp(cls, host: str, port: int, *, config: ClientConfig = ClientConfig(), **kw: Any) -> TankClient:
        """A client that connects (lazily, on the first request) to ``host:port``;
        ``kw`` goes to :func:`refwire.drivers.open_stream`."""
        return cls(lambda: open_stream(host, port, **kw), config=config)

    async def __aenter__(self) -> TankClient:
        self._nursery_cm = trio.open_nursery()
        self._nursery = await self._nursery_cm.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._nursery_cm is not None
        try:
            with trio.CancelScope(shield=True):
                await self.aclose()  # the pump then sees its stream closed and ends
        finally:
            if self._nursery is not None:
                self._nursery.cancel_scope.cancel()
            self._nursery = None
            try:
                result: bool | None = await self._nursery_cm.__aexit__(exc_type, exc, tb)
            except BaseExceptionGroup as eg:
                # The body's own exception comes back wrapped: let it propagate as it was raised.
                if exc is not None and len(eg.exceptions) == 1 and eg.exceptions[0] is exc:
                    return False
                raise
        return result

    @property
    def stats(self) -> dict[str, int]:
        """connects, requests, connection_lost, protocol_errors, pings_sent (so far)."""
        self._stats["pings_sent"] = self._pings + (self._conn.pings_sent if self._conn is not None else 0)
        return self._stats

    @property
    def transitions_seen(self) -> set[tuple[str, str, str]]:
        """Transitions of every connection so far, the open one included."""
        return self._seen | (self._conn.transitions_seen if self._conn is not None else set())

    async def aclose(self) -> None:
        """Close the connection; requests still waiting for an answer raise
        :class:`~refwire.tank.errors.ConnectionLost`."""
        self._drop("client closed")
        if self._stream is not None:
            await trio.aclose_forcefully(self._stream)
            self._stream = None

    # -- connection --------------------------------------------------------
    async def _ensure(self) -> tuple[ClientConnection, Pump]:
        async with self._connect_lock:
            if self._conn is not None and self._pump is not None:
                return self._conn, self._pump
            if self._nursery is None:
                raise RuntimeError("use 'async with TankClient(...)'")
            stream = await self._connect()
            conn = ClientConnection(
                limits=self.config.limits,
                ping_interval=self.config.ping_interval,
                now=trio.current_time(),
                first_request_id=self._next_id,
            )
            pump = Pump(stream, conn, self._on_event, receive_size=self.config.recv_size)
            self._stream, self._conn, self._pump = stream, conn, pump
            self._stats["connects"] += 1
            self._nursery.start_soon(self._run, stream, conn, pump)
            return conn, pump

    def _drop(self, why: str, conn: ClientConnection | None = None) -> None:
        if conn is not None and conn is not self._conn:
            return
        if self._conn is not None:
            self._seen |= self._conn.transitions_seen
            self._pings += self._conn.pings_sent
            self._next_id = self._conn.new_request_id()
        self._conn = None
        self._pump = None
        for p in self._pending.values():
            p.error = ConnectionLost(why)
            p.done.set()
        self._pending.clear()

    async def _on_event(self, ev: Any) -> None:
        """An answer completes its request; Connected and ConnectionClosed need
        nothing here (the pump ends after the close, and :meth:`_run` fails what
        is still in flight)."""
        rid = getattr(ev, "request_id", None)
        if rid is None or isinstance(ev, ConnectionClosed):
            return
        p = self._pending.pop(rid, None)
        if p is not None:
            self._stats["answers"] += 1
            p.result = ev
            p.done.set()

    async def _run(self, stream: trio.abc.Stream, conn: ClientConnection, pump: Pump) -> None:
        why = "connection closed by the broker"
        try:
            ended = await pump.run()
            if ended == RESET:
                why = "connection lost: reset"
            elif ended in (WRITE_FAILED, WRITE_TIMEOUT):
                why = f"send failed ({ended})"
        except ProtocolError as exc:
            self._stats["protocol_errors"] += 1
            self.last_error = exc
            why = f"protocol error from the broker: {exc}"
        finally:
            self._stats["connection_lost"] += 1
            self._drop(why, conn)
            await trio.aclose_forcefully(stream)

    async def request(self, make: Callable[[int], Request]) -> Any:
        """Send ``make(request_id)`` and wait for its answer."""
        conn, pump = await self._ensure()
        req = make(conn.new_request_id())
        p = _Pending()
        if isinstance(req, Ping):
            raise TypeError("a Ping has no answer")
        rid = req.request_id
        self._pending[rid] = p
        try:
            # The machine directly, not pump.send: flush() below writes it from this
            # task, and a request only moves the keepalive deadline later (no kick).
            conn.send(req, now=trio.current_time())
        except ProtocolError as exc:
            self._pending.pop(rid, None)
            self._drop(f"send failed: {exc}", conn)
            raise ConnectionLost(f"send failed: {exc}") from exc
        await pump.flush()  # written from this task, as the request is made
        if pump.ended in (WRITE_FAILED, WRITE_TIMEOUT):
            self._pending.pop(rid, None)
            self._drop(f"send failed ({pump.ended})", conn)
            raise ConnectionLost(f"send failed ({pump.ended})")
        self._stats["requests"] += 1
        if self.config.request_timeout is None:
            await p.done.wait()
        else:
            # A long poll may legitimately take its whole maxWait.
            limit = self.config.request_timeout + getattr(req, "max_wait_ms", 0) / 1000.0
            with trio.move_on_after(limit):
                await p.done.wait()
            if not p.done.is_set():
                # No answer in time (a half-open connection, or not a broker): give the connection up.
                stream = self._stream
                what = f"no answer to {type(req).__name__} (request {rid}) from {peer_name(stream, 'the broker')} in {limit:g} s"
                self._drop(what, conn)
                if stream is not None:
                    await trio.aclose_forcefully(stream)
                raise ConnectionLost(what + (" (is it a TANK broker?)" if self._stats["answers"] == 0 else ""))
        if p.error is not None:
            raise p.error
        return p.result

    # -- API -----------------------------------------------------------------
    async def create_topic(self, topic: str, partitions: int = 1, config: bytes = b"") -> int:
        """0 created, 1 exists, 2 system, 4 bad config, 5 read-only, 10 invalid (§3)."""
        r: CreateTopicResponse = await self.request(lambda rid: CreateTopicRequest(rid, topic, partitions, config))
        return r.error

    async def produce(
        self, topic: str, partition: int, messages: Sequence[Message], *, compress: bool | None = None
    ) -> ProduceResult:
        """Append ``messages`` to one partition as one bundle (§4, §6); the broker
        numbers them.  ``compress=None`` lets :func:`~refwire.tank.bundles.encode_bundle`
        decide on Snappy.  The result's ``error`` is 0 when they were stored."""
        bundle = encode_bundle(messages, compress=compress)
        r = await self.produce_bundles({topic: {partition: bundle}})
        return r.results[0]

    async def produce_sparse(
        self, topic: str, partition: int, messages: Sequence[Message], *, compress: bool | None = None
    ) -> ProduceResult:
        """ProduceWithSeqnum (0x05) with a sparse bundle: the messages' ``seq`` are kept (§6)."""
        bundle = encode_bundle(messages, compress=compress, sparse=True)
        r = await self.produce_bundles({topic: {partition: bundle}}, base_seqs={(topic, partition): messages[0].seq or 0})
        return r.results[0]

    async def produce_bundles(
        self, bundles: dict[str, dict[int, bytes]], *, base_seqs: dict[tuple[str, int], int] | None = None
    ) -> ProduceResponse:
        """One Produce request carrying already encoded bundles:
        ``bundles[topic][partition] = bundle``.  With ``base_seqs`` it is a
        ProduceWithSeqnum (0x05) and each bundle's first sequence number is given."""
        topics = tuple(
            ProduceTopic(
                t,
                tuple(
                    ProducePartition(p, b, (base_seqs or {}).get((t, p)) if base_seqs is not None else None)
                    for p, b in parts.items()
                ),
            )
            for t, parts in bundles.items()
        )
        cid = self.config.client_id
        resp: ProduceResponse = await self.request(lambda rid: ProduceRequest(rid, topics, base_seqs is not None, cid))
        return resp

    async def consume_many(
        self, wanted: dict[str, dict[int, int]], *, max_wait: float = 0.0, min_bytes: int = 0, fetch_size: int | None = None
    ) -> ConsumeResult:
        """One Consume request: ``wanted[topic][partition] = seq`` (0 first available, U64_MAX tail)."""
        fs = fetch_size or self.config.fetch_size
        topics = tuple(
            ConsumeTopic(t, tuple(ConsumePartition(p, s, fs) for p, s in parts.items())) for t, parts in wanted.items()
        )
        wait_ms = max(0, round(max_wait * 1000))
        res: ConsumeResult = await self.request(lambda rid: ConsumeRequest(rid, topics, wait_ms, min_bytes, b""))
        return res

    async def consume(
        self,
        topic: str,
        partition: int,
        seq: int = 0,
        *,
        max_wait: float = 0.0,
        min_bytes: int = 0,
        fetch_size: int | None = None,
        clamp: bool = True,
    ) -> PartitionData:
        """Consume one partition; grows the fetch size when a bundle did not fit
        (§5) and, with ``clamp``, moves a sequence number that fails the
        boundary check into ``[firstAvail, hwmark + 1]`` as tank-cli does."""
        fs = fetch_size or self.config.fetch_size
        for _ in range(8):
            res = await self.consume_many({topic: {partition: seq}}, max_wait=max_wait, min_bytes=min_bytes, fetch_size=fs)
            if res.unknown_topics:
                raise ConsumeError(f"unknown topic {topic!r}", 0xFF)
            pd = res.partitions[0]
            if pd.error == ERR_BOUNDARY and clamp:
                first = pd.first_avail or 0
                seq = first if seq < first else pd.hwmark + 1
                continue
            if pd.error not in (0, 0xFE, ERR_BOUNDARY):
                raise ConsumeError(f"{topic}/{partition}: error {pd.error:#04x}", pd.error)
            ch = pd.chunk
            if ch is not None and ch.count == 0 and ch.partial and ch.min_fetch_size > fs:
                fs = min(ch.min_fetch_size, self.config.limits.max_frame_size)
                continue
            return pd
        return pd

    async def discover_partitions(self, topic: str, partitions: Sequence[int] = ()) -> tuple[PartitionInfo, ...]:
        """First available sequence number and high water mark of ``topic``'s
        partitions (all of them when ``partitions`` is empty)."""
        r: DiscoverPartitionsResponse = await self.request(lambda rid: DiscoverPartitionsRequest(rid, topic, tuple(partitions)))
        return r.partitions

    async def status(self) -> StatusResponse:
        """The broker's status: its numbers of topics and partitions (§3)."""
        r: StatusResponse = await self.request(StatusRequest)
        return r

    async def discover_topics(self) -> DiscoverTopicsResponse:
        """Every topic with its number of partitions."""
        r: DiscoverTopicsResponse = await self.request(DiscoverTopicsRequest)
        return r

    async def discover_topology(self) -> DiscoverTopologyResponse:
        """The cluster topology; a stand-alone broker answers that it is one."""
        r: DiscoverTopologyResponse = await self.request(DiscoverTopologyRequest)
        return r

    async def reload_conf(self, topic: str, partition: int) -> int:
        """Ask the broker to reload one partition's configuration; its error code (0: done)."""
        r: ReloadConfResponse = await self.request(lambda rid: ReloadConfRequest(rid, topic, partition))
        return r.error
