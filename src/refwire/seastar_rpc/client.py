"""trio Seastar RPC client (specs/seastar-rpc/README.md §2-§5, §7).

    async with SeastarClient.connect_tcp("127.0.0.1", 7000) as client:
        reply = await client.call(1, payload, timeout=1.0)
        await client.call_one_way(4, payload)
        stream = await client.open_stream()         # a child connection (STREAM_PARENT)
        await client.call(6, stream.id_bytes())     # the sink travels as its u64 id
        await stream.send(b"..."); await stream.close(); async for msg in stream: ...

A call completes exactly once: with the reply data, or by raising
:class:`~refwire.seastar_rpc.errors.RemoteVerbError` (USER), :class:`~refwire.seastar_rpc.errors.UnknownVerbError`,
:class:`UnknownExceptionError`, :class:`CallTimeout` (the client gave up at its
deadline; a late reply is ignored) or :class:`RpcConnectionError`.  A one-way
call returns once its bytes are written; closing the client writes what is
still queued, then closes its streams and the connection.

Every connection (the RPC one, and one per stream) is a
:class:`~refwire.seastar_rpc.connection.ClientConnection` run by
:class:`refwire.drivers.Pump`: the machine's call timeouts are the pump's timer.
"""

from __future__ import annotations

import logging
import math
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any

import attrs
import trio

from ..drivers import EOF, STOPPED, Pump, open_stream
from ..errors import RemoteProtocolError
from ..transport import peer_name
from ..wire import Limits
from .connection import (
    NEGOTIATION_TIMED_OUT,
    CallFailed,
    CallTimedOut,
    ClientConnection,
    ConnectionClosed,
    Negotiated,
    Reply,
    State,
    StrayReply,
)
from .errors import (
    CallTimeout,
    RemoteVerbError,
    RpcConnectionError,
    RpcError,
    StreamClosedError,
    StreamingNotSupported,
    UnknownExceptionError,
    UnknownVerbError,
)
from .frames import DEFAULT_LIMITS, StreamEnd, StreamMessage, UnknownException, UnknownVerb, UserError

__all__ = [
    "CallTimeout",
    "ClientConfig",
    "NoReply",
    "ClientStream",
    "RemoteVerbError",
    "RpcConnectionError",
    "RpcError",
    "SeastarClient",
    "StreamClosedError",
    "StreamingNotSupported",
    "UnknownExceptionError",
    "UnknownVerbError",
]

log = logging.getLogger("refwire.seastar_rpc")
_U64 = struct.Struct("<Q")


@attrs.frozen(kw_only=True)
class ClientConfig:
    """Client settings: the features offered in the negotiation (``compressors``
    in preference order, ``timeout``, ``handler_duration``, an ``isolation``
    cookie), the connect and negotiation time limits, and the read size."""

    limits: Limits = DEFAULT_LIMITS
    compressors: Sequence[str] = ()
    timeout: bool = True
    handler_duration: bool = True
    isolation: bytes | None = None
    connect_timeout: float = 10.0
    #: the machine gives up waiting for the server's negotiation reply after this.
    negotiation_timeout: float = 10.0
    recv_size: int = 256 * 1024
    #: a write that takes longer ends the connection (calls in flight fail).
    write_timeout: float | None = 30.0
    #: a call made without a timeout of its own waits at most this long for its
    #: reply (client side only: nothing goes on the wire), then raises
    #: :class:`NoReply`; None: as long as the connection lives.
    reply_timeout: float | None = 30.0


class NoReply(CallTimeout):
    """A call made without a timeout got no reply within
    :attr:`ClientConfig.reply_timeout`; the message names the verb, the server
    and the bound (the call is forgotten: a late reply is ignored)."""

    def __init__(self, msg_id: int, verb: int, peer: str, seconds: float) -> None:
        super().__init__(msg_id)
        self.args = (f"no reply to verb {verb} (call {msg_id}) from {peer} in {seconds:g} s",)


class _Call:
    __slots__ = ("done", "result")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.result: Any = None


class _Link:
    """One connection (RPC or stream): its machine and the pump that runs it."""

    def __init__(
        self, conn: ClientConnection, stream: trio.abc.Stream, on_event: Callable[[object], None], config: ClientConfig
    ) -> None:
        self.conn = conn
        self.stream = stream
        self._handler = on_event
        self.pump = Pump(stream, conn, self._on_event, receive_size=config.recv_size, write_timeout=config.write_timeout)
        self.negotiated = trio.Event()
        self.closed = trio.Event()
        self.error: object = None
        self.close_reported = False
        self.close_reason = ""

    @property
    def broken(self) -> bool:
        """A write failed or the connection was reset: nothing more reaches the peer."""
        return self.pump.broken

    async def _on_event(self, ev: object) -> None:
        if isinstance(ev, Negotiated):
            self.negotiated.set()
        elif isinstance(ev, ConnectionClosed):
            self.close_reported = True
            self.close_reason = ev.reason
            self.negotiated.set()  # (a negotiation timeout, or the server closed first)
        self._handler(ev)

    async def run(self) -> None:
        try:
            try:
                ended = await self.pump.run()
            except RemoteProtocolError as exc:
                log.warning("seastar-rpc client: %s; closing", exc)
                self.error = exc
            else:
                if ended not in (EOF, STOPPED):
                    self.error = ended
        finally:
            self.closed.set()
            self.negotiated.set()
            if not self.close_reported:
                self.close_reported = True
                self._handler(ConnectionClosed(False, str(self.error or "closed"), self.conn.pending))
            await trio.aclose_forcefully(self.stream)


class SeastarClient:
    """A Seastar RPC client over one connection (plus one per stream)."""

    def __init__(self, connect: Callable[[], Awaitable[trio.abc.Stream]], *, config: ClientConfig = ClientConfig()) -> None:
        self._connect = connect
        self.config = config
        self._link: _Link | None = None
        self._calls: dict[int, _Call] = {}
        self._nursery: trio.Nursery | None = None
        self._cm: AbstractAsyncContextManager[SeastarClient] | None = None
        self._streams: list[ClientStream] = []
        self.stats: dict[str, int] = {
            "calls": 0,
            "replies": 0,
            "exceptions": 0,
            "timeouts": 0,
            "stray": 0,
            "unknown_stray": 0,
            "connection_errors": 0,
        }
        self.transitions_seen: set[tuple[str, str, str]] = set()

    @classmethod
    def connect_tcp(cls, host: str, port: int, *, config: ClientConfig = ClientConfig()) -> SeastarClient:
        """A client of the server at ``host:port``; it connects and negotiates on
        entering ``async with``."""

        async def connect() -> trio.abc.Stream:
            return await open_stream(host, port, timeout=config.connect_timeout)

        return cls(connect, config=config)

    def _machine(self, stream_parent: int | None = None) -> ClientConnection:
        c = self.config
        return ClientConnection(
            limits=c.limits,
            compressors=c.compressors,
            timeout=c.timeout,
            handler_duration=c.handler_duration,
            isolation=c.isolation,
            stream_parent=stream_parent,
            negotiation_timeout=c.negotiation_timeout,
        )

    # -- lifecycle ----------------------------------------------------------------------
    @asynccontextmanager
    async def _running(self) -> AsyncIterator[SeastarClient]:
        # Errors are raised outside the nursery, so callers see them unwrapped.
        failure: Exception | None = None
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                self._link = await self._open_link(self._machine(), self._on_event)
            except Exception as exc:
                failure = exc
                nursery.cancel_scope.cancel()
            if failure is None:
                try:
                    yield self
                except Exception as exc:
                    failure = exc
                finally:
                    await self.aclose()
                    nursery.cancel_scope.cancel()
        for link in [self._link, *(st._link for st in self._streams)]:
            if link is not None:
                self.transitions_seen |= link.conn.transitions_seen
        if failure is not None:
            raise failure

    async def __aenter__(self) -> SeastarClient:
        self._cm = self._running()
        return await self._cm.__aenter__()

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> bool | None:
        assert self._cm is not None
        return await self._cm.__aexit__(et, e, tb)

    async def aclose(self) -> None:
        """Write what is still queued (one-way calls), then close the connection and
        every stream opened from it."""
        for s in self._streams:
            s._abort()
        link = self._link
        try:
            if link is not None:
                await link.pump.flush()
        finally:  # cancelled or not, the connection closes
            if link is not None:
                await trio.aclose_forcefully(link.stream)
            self._fail_all(RpcConnectionError("the client was closed"))

    async def _open_link(self, conn: ClientConnection, on_event: Callable[[object], None]) -> _Link:
        assert self._nursery is not None
        try:
            stream = await self._connect()
        except OSError as exc:
            raise RpcConnectionError(f"cannot connect: {exc}") from exc
        link = _Link(conn, stream, on_event, self.config)
        conn.initiate(now=trio.current_time())
        await link.pump.flush()
        if link.broken:
            await trio.aclose_forcefully(stream)
            raise RpcConnectionError(f"connection failed during negotiation: {link.pump.ended}")
        self._nursery.start_soon(link.run)
        await link.negotiated.wait()  # the reply, or the connection's end (the machine times it out)
        if conn.reply is None:
            peer = peer_name(stream, "the server")
            await trio.aclose_forcefully(stream)
            self.transitions_seen |= conn.transitions_seen  # no link keeps this machine: its coverage now
            why = link.error
            if why is None and link.close_reason == NEGOTIATION_TIMED_OUT:
                raise RpcConnectionError(
                    f"no negotiation reply from {peer} in {self.config.negotiation_timeout:g} s "
                    "(is it a Seastar RPC server?)"
                )
            raise RpcConnectionError(f"negotiation failed: {why or 'the server closed the connection without a reply'}")
        return link

    @property
    def connection_id(self) -> int | None:
        """The CONNECTION_ID the server assigned (streaming servers only), else None."""
        return None if self._link is None else self._link.conn.connection_id

    @property
    def compressor(self) -> str | None:
        """The compressor negotiated (``"LZ4"``, ``"LZ4_FRAGMENTED"``), or None."""
        return None if self._link is None else self._link.conn.compressor

    @property
    def closed(self) -> bool:
        """Whether the connection is closed (or was never opened)."""
        return self._link is None or self._link.closed.is_set()

    # -- events ---------------------------------------------------------------------------
    def _on_event(self, ev: object) -> None:
        if isinstance(ev, (Reply, CallTimedOut)):
            self._finish(ev.msg_id, ev)
        elif isinstance(ev, CallFailed):
            self._finish(ev.msg_id, ev)
        elif isinstance(ev, StrayReply):
            self.stats["stray"] += 1
            if not ev.known:
                self.stats["unknown_stray"] += 1
        elif isinstance(ev, ConnectionClosed):
            self._fail_all(RpcConnectionError(f"connection closed ({ev.reason})"))
            for s in self._streams:
                s._abort()

    def _finish(self, msg_id: int, result: object) -> None:
        call = self._calls.pop(msg_id, None)
        if call is not None:
            call.result = result
            call.done.set()

    def _fail_all(self, exc: RpcError) -> None:
        calls, self._calls = self._calls, {}
        for call in calls.values():
            call.result = exc
            call.done.set()

    # -- calls -------------------------------------------------------------------------------
    def _live_link(self) -> _Link:
        link = self._link
        # The machine may be closed before its pump has ended (a failed write).
        if link is None or link.closed.is_set() or link.conn.state in (State.CLOSED, State.ERROR):
            raise RpcConnectionError("the connection is closed" + (f": {link.error}" if link and link.error else ""))
        return link

    async def call(self, verb: int, payload: bytes = b"", *, timeout: float | None = None) -> bytes:
        """Call ``verb`` and return the reply data (see the module doc for the errors)."""
        link = self._live_link()
        msg_id = link.conn.call(verb, payload, now=trio.current_time(), timeout=timeout)
        self.stats["calls"] += 1
        call = _Call()
        self._calls[msg_id] = call
        link.pump.kick()  # the writer sends it, the timer watches its deadline
        bound = self.config.reply_timeout if timeout is None else None  # (a call's own timeout is the machine's)
        try:
            with trio.move_on_after(math.inf if bound is None else bound):
                await call.done.wait()
            if not call.done.is_set():
                assert bound is not None
                self.stats["timeouts"] += 1
                raise NoReply(msg_id, verb, peer_name(link.stream, "the server"), bound)
        finally:
            if not call.done.is_set():  # the caller was cancelled: forget the call
                self._calls.pop(msg_id, None)
                link.conn.cancel(msg_id)
        return self._outcome(msg_id, call.result)

    def _outcome(self, msg_id: int, r: object) -> bytes:
        if isinstance(r, Reply):
            self.stats["replies"] += 1
            return r.payload
        if isinstance(r, CallFailed):
            self.stats["exceptions"] += 1
            err = r.error
            if isinstance(err, UserError):
                raise RemoteVerbError(err.message)
            if isinstance(err, UnknownVerb):
                raise UnknownVerbError(err.verb)
            assert isinstance(err, UnknownException)
            raise UnknownExceptionError(err.type)
        if isinstance(r, CallTimedOut):
            self.stats["timeouts"] += 1
            raise CallTimeout(msg_id)
        assert isinstance(r, RpcError)
        self.stats["connection_errors"] += 1
        raise r

    async def call_one_way(self, verb: int, payload: bytes = b"", *, timeout: float | None = None) -> int:
        """Send a one-way call (no reply is expected); returns its msg id once its
        bytes are written (:class:`RpcConnectionError` if they cannot be)."""
        link = self._live_link()
        msg_id = link.conn.call(verb, payload, now=trio.current_time(), timeout=timeout, one_way=True)
        await link.pump.flush()
        if link.broken:
            raise RpcConnectionError(f"one-way call {msg_id} not sent: {link.pump.ended}")
        return msg_id

    # -- streams --------------------------------------------------------------------------------
    async def open_stream(self) -> ClientStream:
        """Open a stream connection under this one (§5)."""
        parent = self.connection_id
        if parent is None:
            raise StreamingNotSupported("Streaming is not supported by the server (no CONNECTION_ID)")
        self._live_link()
        s = ClientStream(self)
        link = await self._open_link(self._machine(stream_parent=parent), s._on_event)
        s._link = link
        if link.conn.connection_id is None:
            await trio.aclose_forcefully(link.stream)
            raise StreamingNotSupported("the server sent no CONNECTION_ID for the stream connection")
        s.id = link.conn.connection_id
        self._streams.append(s)
        return s


class ClientStream:
    """The client end of a stream: ``send``/``close`` (sink) and ``receive`` (source)."""

    def __init__(self, client: SeastarClient) -> None:
        self._client = client
        self._link: _Link | None = None
        self.id = 0
        self._send, self._recv = trio.open_memory_channel[bytes | None](math.inf)
        self.aborted = False

    def id_bytes(self) -> bytes:
        """The stream as a sink/source argument: its u64 connection id (§5)."""
        return _U64.pack(self.id)

    def _on_event(self, ev: object) -> None:
        try:
            if isinstance(ev, StreamMessage):
                self._send.send_nowait(ev.payload)
            elif isinstance(ev, StreamEnd):
                self._send.send_nowait(None)
                self._send.close()
                self._maybe_close()
        except trio.ClosedResourceError:
            pass
        if isinstance(ev, ConnectionClosed):
            self._abort()

    async def send(self, payload: bytes) -> None:
        """Send one message; returns once it is written."""
        link = self._usable()
        link.conn.send_stream(payload, now=trio.current_time())
        await link.pump.flush()
        if link.broken:
            self._abort()
            raise StreamClosedError(f"stream {self.id:#x}: {link.pump.ended}")

    async def close(self) -> None:
        """Send end-of-stream; the connection closes once the server's arrives too."""
        link = self._usable()
        if not link.conn.local_eos:
            link.conn.send_stream_end(now=trio.current_time())
            await link.pump.flush()
            if link.broken:
                self._abort()
        self._maybe_close()

    async def receive(self) -> bytes | None:
        """The next message, ``None`` at end-of-stream; :class:`StreamClosedError` after it or on abort."""
        try:
            return await self._recv.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StreamClosedError(f"stream {self.id:#x} is closed") from None

    def __aiter__(self) -> ClientStream:
        return self

    async def __anext__(self) -> bytes:
        msg = await self.receive()
        if msg is None:
            raise StopAsyncIteration
        return msg

    def _usable(self) -> _Link:
        if self.aborted or self._link is None or self._link.conn.state is not State.STREAMING:
            self._abort()
            raise StreamClosedError(f"stream {self.id:#x} is closed")
        return self._link

    def _maybe_close(self) -> None:
        if self._link is not None and self._link.conn.stream_done:
            self._close_socket()

    def _close_socket(self) -> None:
        # Closing the socket ends the reader task, which reports the close.
        if self._link is not None and self._client._nursery is not None:
            self._client._nursery.start_soon(trio.aclose_forcefully, self._link.stream)

    def _abort(self) -> None:
        if self.aborted:
            return
        self.aborted = True
        self._send.close()
        self._close_socket()

    @property
    def closed(self) -> bool:
        return self.aborted or (self._link is not None and self._link.closed.is_set())
