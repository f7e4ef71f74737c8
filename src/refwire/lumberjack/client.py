"""trio Lumberjack client: windows, compression, acks, reconnect and resend
(specs/lumberjack/README.md §3).

``await client.send(events)`` returns when every event is acked.  Events go out
in windows of ``window_size``: ``W n`` and the ``n`` events (inside one ``C``
when compressing -- the only shape every real server accepts) in a single
write.  Acks may be partial; ``A 0`` keepalives re-arm the ack timeout.  On a
reset, EOF, ack timeout or protocol error the client closes the connection,
waits (exponential backoff with jitter), reconnects and resends every event
not yet acked, in a new window: at-least-once delivery, duplicates possible.
A partial ack received before the failure is kept (go-lumber's client loses it).

One :class:`~refwire.drivers.Pump` runs a connection's machine (reading acks,
running the ack timeout) for as long as the connection lives: in the client's
own nursery under ``async with LumberjackClient(...)``, otherwise inside each
``send`` call, for all of that call's windows (the connection itself stays open
between calls).  Each window is written from the sending task
(``pump.send`` + ``pump.flush``), which then waits for the window's last ack;
a failed attempt leaves the unacked tail in the machine
(``ClientConnection.unacked()``, also after ``send_failed``), which is what the
next connection resends.
"""

from __future__ import annotations

import random
import ssl
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any, Literal

import attrs
import trio

from ..drivers import RESET, WRITE_FAILED, WRITE_TIMEOUT, Pump, open_stream, permanent_error
from ..errors import RemoteProtocolError
from ..logs import plural
from ..transport import tls_reason
from ..wire import Limits
from .connection import ClientConnection, State
from .errors import AckWaitExpired, SendFailed, WindowNotAcked
from .events import AckReceived, AckTimeout, ConnectionClosed, KeepAlive, SendWindow
from .frames import DEFAULT_LIMITS, V2, EncodedWindow, encode_events

__all__ = ["ClientConfig", "LumberjackClient", "SendFailed"]

Connector = Callable[[], Awaitable[trio.abc.Stream]]


@attrs.frozen(kw_only=True)
class ClientConfig:
    """Client settings; see :class:`~refwire.lumberjack.connection.ClientConnection`
    for the protocol switches (``version``, ``compression_level``, ``sequence``,
    ``ack_timeout``, ``ack_interpretation``) and below for the driver's own."""

    version: int = V2
    window_size: int = 2048  #: events per window (Beats' bulk_max_size default)
    compression_level: int = 3  #: zlib level for the C frame; 0 sends plain frames
    sequence: Literal["window", "running"] = "window"
    first_seq: int = 1
    ack_timeout: float | None = 30.0
    #: seconds one write may take before the connection is given up (a server
    #: that stops reading); Beats' write deadline is 30 s.  None = no limit.
    write_timeout: float | None = 30.0
    ack_interpretation: Literal["seq", "count"] = "seq"
    limits: Limits = DEFAULT_LIMITS
    backoff_initial: float = 0.1
    backoff_max: float = 10.0
    #: give up after this many failed attempts at one window (None: never).
    max_attempts: int | None = None
    #: reconnect and resend after the server broke the protocol (Beats does);
    #: False gives up at once.  A host name that does not resolve or a TLS
    #: certificate that fails verification always gives up at once.
    retry_protocol_errors: bool = True
    recv_size: int = 65536


class LumberjackClient:
    """A Lumberjack writer over any stream factory.

    Use :meth:`connect_tcp` for TCP/TLS, or pass ``connect`` (an async callable
    returning a ``trio.abc.Stream``) to run over anything, the simulator included.
    ``on_acked(events)`` is called with each run of newly acked events, in order.
    ``rng`` drives the backoff jitter (inject a seeded one for reproducible runs).
    """

    def __init__(
        self,
        connect: Connector,
        *,
        config: ClientConfig = ClientConfig(),
        on_acked: Callable[[list[Any]], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not 1 <= config.window_size <= config.limits.max_window:
            raise ValueError(f"window_size must be 1..{config.limits.max_window}")
        self.config = config
        self._connect = connect
        self._on_acked = on_acked
        self._rng = rng or random.Random()
        self._link: _Link | None = None
        #: the nursery of ``async with`` (pumps live there); None without it
        self._nursery: trio.Nursery | None = None
        self._stack: AsyncExitStack | None = None
        self._next_seq = config.first_seq
        self._lock = trio.Lock()
        #: counters: windows, events_acked, connects, reconnects, resent_events, keepalives, failures, protocol_errors
        self.stats: dict[str, int] = {
            "windows": 0,
            "events_acked": 0,
            "connects": 0,
            "reconnects": 0,
            "resent_events": 0,
            "keepalives": 0,
            "failures": 0,
            "protocol_errors": 0,
        }
        self.transitions_seen: set[tuple[str, str, str]] = set()
        self.last_error: BaseException | None = None

    @classmethod
    def connect_tcp(
        cls,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        connect_timeout: float = 10.0,
        **kwargs: Any,
    ) -> LumberjackClient:
        """A client that connects (lazily, on the first send) to ``host:port``."""

        async def connect() -> trio.abc.Stream:
            return await open_stream(
                host, port, ssl_context=ssl_context, server_hostname=server_hostname, timeout=connect_timeout
            )

        return cls(connect, **kwargs)

    async def __aenter__(self) -> LumberjackClient:
        """Own a nursery for the connection's pump: it then lives as long as the
        connection, across ``send`` calls (without ``async with``, each ``send``
        runs it for the duration of the call)."""
        if self._nursery is not None:
            raise RuntimeError("LumberjackClient is already entered")
        stack = AsyncExitStack()
        self._nursery = await stack.enter_async_context(trio.open_nursery())
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        try:
            await self.aclose()
        finally:
            self._nursery = None
            if stack is not None:
                # The pump was stopped and its stream closed: this only waits for
                # its task to end.  The body's exception is not handed to the
                # nursery, so it propagates as itself, not in an exception group.
                await stack.aclose()

    async def aclose(self) -> None:
        """Close the connection (the next :meth:`send` opens a new one)."""
        await self._drop()

    async def _drop(self) -> None:
        """End the connection: stop its pump (it ends without blocking once the
        stream is closed) and close the stream.  Never blocks under cancellation."""
        link, self._link = self._link, None
        if link is None:
            return
        link.dropped = True
        self.transitions_seen |= link.conn.transitions_seen
        if link.pump is not None:
            link.pump.stop()
        await trio.aclose_forcefully(link.stream)

    async def _ensure(self, nursery: trio.Nursery) -> _Link:
        """The connection (made if there is none) with its pump running in ``nursery``."""
        if self._link is None:
            cfg = self.config
            stream = await self._connect()
            self.stats["connects"] += 1
            conn = ClientConnection(
                version=cfg.version,
                compression_level=cfg.compression_level,
                limits=cfg.limits,
                sequence=cfg.sequence,
                first_seq=self._next_seq,
                ack_timeout=cfg.ack_timeout,
                ack_interpretation=cfg.ack_interpretation,
            )
            self._link = _Link(stream, conn, cfg, self.stats, self._on_acked)
        link = self._link
        if link.pump is None and link.failure is None:  # a failed one is dropped by the caller
            link.start(nursery)
        return link

    async def send(self, events: Sequence[Any]) -> None:
        """Send ``events``; return when every one of them is acked."""
        cfg = self.config
        # Every window is encoded before the first is sent: an event that cannot
        # be encoded fails the call with nothing sent.
        size = cfg.window_size
        encoded = [encode_events(cfg.version, events[i : i + size]) for i in range(0, len(events), size)]
        async with self._lock:
            if self._nursery is not None:
                await self._send_windows(events, encoded, self._nursery)
                return
            # No nursery of our own: the pump runs for this call (all its windows),
            # then stops; the connection stays open for the next call.
            failure: Exception | None = None
            async with trio.open_nursery() as nursery:
                try:
                    await self._send_windows(events, encoded, nursery)
                except Exception as exc:
                    failure = exc  # raised below as itself, not in an exception group
                finally:
                    if self._link is not None:
                        self._link.park()
            if failure is not None:
                raise failure

    async def _send_windows(self, events: Sequence[Any], encoded: list[EncodedWindow], nursery: trio.Nursery) -> None:
        cfg = self.config
        acked_before = self.stats["events_acked"]
        for k, i in enumerate(range(0, len(events), cfg.window_size)):
            try:
                await self._send_window(list(events[i : i + cfg.window_size]), encoded[k], nursery)
            except SendFailed as exc:
                # Everything after the failing window was never sent either.
                raise SendFailed(
                    str(exc),
                    acked=self.stats["events_acked"] - acked_before,
                    unacked=exc.unacked + list(events[i + cfg.window_size :]),
                ) from exc.__cause__

    async def _send_window(self, events: list[Any], encoded: EncodedWindow, nursery: trio.Nursery) -> None:
        cfg = self.config
        attempts = 0
        backoff = cfg.backoff_initial
        first = True
        while events:
            conn: ClientConnection | None = None
            sent = False
            try:
                link = await self._ensure(nursery)
                conn = link.conn
                if not first:
                    self.stats["resent_events"] += len(events)
                first = False
                link.check_usable()  # the connection may have ended since the last window
                pump = link.pump
                assert pump is not None
                link.begin(events)
                pump.send(SendWindow(events, encoded))
                sent = True
                self.stats["windows"] += 1
                await pump.flush()  # the window goes out from this task
                await link.wait()  # until the window's last ack, or the connection failed
                self._next_seq = conn.next_seq
                return
            except (
                WindowNotAcked,
                OSError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
                trio.TooSlowError,
                RemoteProtocolError,
            ) as exc:
                self.last_error = exc
                if isinstance(exc, RemoteProtocolError):
                    self.stats["protocol_errors"] += 1
                if conn is not None:
                    self._next_seq = conn.next_seq
                if conn is not None and sent:
                    # The machine keeps what the server did not ack (a partial ack counts).
                    events, encoded = conn.unacked(), conn.unacked_encoded()
                await self._drop()
                if not events:
                    return
                attempts += 1
                self.stats["failures"] += 1
                if permanent_error(exc, protocol_errors=not cfg.retry_protocol_errors):
                    raise SendFailed(
                        f"gave up: {_plain(exc)} (retrying cannot fix it)", acked=self.stats["events_acked"], unacked=events
                    ) from exc
                if cfg.max_attempts is not None and attempts >= cfg.max_attempts:
                    raise SendFailed(
                        f"gave up after {plural(attempts, 'attempt')}: {_plain(exc)}", acked=self.stats["events_acked"], unacked=events
                    ) from exc
                delay = min(backoff, cfg.backoff_max)
                await trio.sleep(delay * (0.5 + self._rng.random() / 2))
                backoff = min(backoff * 2, cfg.backoff_max)
                self.stats["reconnects"] += 1
            except BaseException:
                # Cancelled mid-write or mid-wait: the wire state is unknown; drop it.
                await self._drop()
                raise


def _plain(exc: BaseException) -> str:
    """An error in words for a person (its text, or its class when it has none)."""
    text = str(exc)
    if isinstance(exc, trio.TooSlowError):
        return text or "timed out"  # (a PeerTimeout says what it waited for)
    if not text and (reason := tls_reason(exc)):
        return f"TLS error: {reason}"
    return text or type(exc).__name__


class _Link:
    """One connection: its stream, its machine, and the :class:`~refwire.drivers.Pump`
    that runs them while a nursery is there for it (the client's, or one ``send``
    call's).  ``on_event`` counts acks and keepalives, reports newly acked events
    of the outstanding window, and wakes the sender at the window's last ack or
    when the connection fails (:attr:`failure` says how; it stays set: a
    connection that failed is not used again)."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        conn: ClientConnection,
        config: ClientConfig,
        stats: dict[str, int],
        on_acked: Callable[[list[Any]], None] | None,
    ) -> None:
        self.stream = stream
        self.conn = conn
        self.config = config
        self.stats = stats
        self.on_acked = on_acked
        #: the running pump (None between two ``send`` calls without a nursery of the client's)
        self.pump: Pump | None = None
        self.events: list[Any] = []  # the outstanding window's events
        self.complete = False
        self.failure: BaseException | None = None
        #: the client let go of this connection: its late events count for nothing
        self.dropped = False
        self._parked: Pump | None = None
        self._wake = trio.Event()

    # -- for the sender ------------------------------------------------------
    def start(self, nursery: trio.Nursery) -> None:
        cfg = self.config
        pump = Pump(self.stream, self.conn, self.on_event, receive_size=cfg.recv_size, write_timeout=cfg.write_timeout)
        self.pump = pump
        nursery.start_soon(self._run, pump)

    def park(self) -> None:
        """Stop the pump but keep the connection (the next ``send`` starts another)."""
        pump = self.pump
        if pump is not None:
            self._parked = pump
            pump.stop()

    def check_usable(self) -> None:
        """Raise if the connection ended while no window was outstanding."""
        if self.failure is not None:
            raise self.failure
        if self.conn.state is not State.IDLE:
            raise WindowNotAcked(f"the connection ended ({self.conn.state.value})")

    def begin(self, events: list[Any]) -> None:
        self.events = events
        self.complete = False

    async def wait(self) -> None:
        """Until the outstanding window's last ack; raises if the connection failed first."""
        while not self.complete:
            if self.failure is not None:
                raise self.failure
            self._wake = trio.Event()
            await self._wake.wait()

    # -- the pump's side -------------------------------------------------------
    async def _run(self, pump: Pump) -> None:
        try:
            ended = await pump.run()
        except Exception as exc:
            # A protocol error from the machine, or on_acked raised: the sender gets it.
            self.failure = exc
        else:
            if self.failure is None and pump is not self._parked:
                self.failure = WindowNotAcked(f"the connection ended ({ended})")
        finally:
            if self.pump is pump:
                self.pump = None
            self._wake.set()

    async def on_event(self, ev: object) -> None:
        if self.dropped:
            return
        if isinstance(ev, AckReceived):
            if ev.newly:
                self.stats["events_acked"] += ev.newly
                if self.on_acked is not None:
                    self.on_acked(self.events[ev.total - ev.newly : ev.total])
            if ev.complete:
                self.complete = True
                self._wake.set()
        elif isinstance(ev, KeepAlive):
            self.stats["keepalives"] += 1
        elif isinstance(ev, AckTimeout):
            self._failed(AckWaitExpired(ev.waited))
        elif isinstance(ev, ConnectionClosed):
            pump = self.pump
            ended = pump.ended if pump is not None else None
            if ended == WRITE_TIMEOUT:
                self._failed(trio.TooSlowError(f"a write took longer than {self.config.write_timeout}s"))
            elif ended in (WRITE_FAILED, RESET):
                self._failed(trio.BrokenResourceError(f"the connection broke ({ended})"))
            else:
                self._failed(WindowNotAcked("server closed the connection"))

    def _failed(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        if self.pump is not None:
            self.pump.stop()
        self._wake.set()
