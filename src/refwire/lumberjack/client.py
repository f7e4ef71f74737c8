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

Each window is written from the sending task, then a
:class:`~refwire.drivers.Pump` runs the connection's machine (reading acks,
running the ack timeout) until the window's last ack; a failed attempt leaves
the unacked tail in the machine (``ClientConnection.unacked()``, also after
``send_failed``), which is what the next connection resends.
"""

from __future__ import annotations

import random
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import attrs
import trio

from ..drivers import RESET, WRITE_FAILED, WRITE_TIMEOUT, Pump, open_stream
from ..errors import RefwireError, RemoteProtocolError
from ..wire import Limits
from .connection import ClientConnection, encode_event
from .events import AckReceived, AckTimeout, ConnectionClosed, KeepAlive, SendWindow
from .frames import DEFAULT_LIMITS, V2

__all__ = ["ClientConfig", "LumberjackClient", "SendFailed"]

Connector = Callable[[], Awaitable[trio.abc.Stream]]


class SendFailed(RefwireError):
    """``send`` gave up (``max_attempts`` reached).

    ``acked`` counts the events of that ``send`` call that were acked;
    ``unacked`` holds the rest, in order (re-queue them for at-least-once).
    """

    def __init__(self, message: str, *, acked: int, unacked: list[Any]) -> None:
        super().__init__(message)
        self.acked = acked
        self.unacked = unacked


@attrs.frozen(kw_only=True)
class ClientConfig:
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
        self._stream: trio.abc.Stream | None = None
        self._conn: ClientConnection | None = None
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
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._drop()

    async def _drop(self) -> None:
        if self._conn is not None:
            self.transitions_seen |= self._conn.transitions_seen
        stream, self._stream, self._conn = self._stream, None, None
        if stream is not None:
            await trio.aclose_forcefully(stream)

    async def _ensure(self) -> tuple[trio.abc.Stream, ClientConnection]:
        if self._stream is None or self._conn is None:
            cfg = self.config
            self._stream = await self._connect()
            self.stats["connects"] += 1
            self._conn = ClientConnection(
                version=cfg.version,
                compression_level=cfg.compression_level,
                limits=cfg.limits,
                sequence=cfg.sequence,
                first_seq=self._next_seq,
                ack_timeout=cfg.ack_timeout,
                ack_interpretation=cfg.ack_interpretation,
            )
        return self._stream, self._conn

    async def send(self, events: Sequence[Any]) -> None:
        """Send ``events``; return when every one of them is acked."""
        cfg = self.config
        encoded = [encode_event(e, cfg.version) for e in events]
        async with self._lock:
            acked_before = self.stats["events_acked"]
            for i in range(0, len(events), cfg.window_size):
                try:
                    await self._send_window(list(events[i : i + cfg.window_size]), encoded[i : i + cfg.window_size])
                except SendFailed as exc:
                    # Everything after the failing window was never sent either.
                    raise SendFailed(
                        str(exc),
                        acked=self.stats["events_acked"] - acked_before,
                        unacked=exc.unacked + list(events[i + cfg.window_size :]),
                    ) from exc.__cause__

    async def _send_window(self, events: list[Any], encoded: list[Any]) -> None:
        cfg = self.config
        attempts = 0
        backoff = cfg.backoff_initial
        first = True
        while events:
            conn: ClientConnection | None = None
            sent = False
            try:
                stream, conn = await self._ensure()
                if not first:
                    self.stats["resent_events"] += len(events)
                first = False
                window = _Window(events, self.stats, self._on_acked)
                pump = Pump(stream, conn, window.on_event, receive_size=cfg.recv_size, write_timeout=cfg.write_timeout)
                window.pump = pump
                conn.send(SendWindow(events, encoded), now=trio.current_time())
                sent = True
                self.stats["windows"] += 1
                await pump.flush()  # the window goes out from this task, before the pump reads
                ended = await pump.run()  # until the window's last ack, or the attempt failed
                if not window.complete:
                    raise window.failure or _Retry(f"the connection ended ({ended})")
                self._next_seq = conn.next_seq
                return
            except (_Retry, OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, RemoteProtocolError) as exc:
                self.last_error = exc
                if isinstance(exc, RemoteProtocolError):
                    self.stats["protocol_errors"] += 1
                if conn is not None:
                    self._next_seq = conn.next_seq
                if conn is not None and sent:
                    # The machine keeps what the server did not ack (a partial ack counts).
                    unacked = conn.unacked()
                    events, encoded = unacked, encoded[len(encoded) - len(unacked) :]
                await self._drop()
                if not events:
                    return
                attempts += 1
                self.stats["failures"] += 1
                if cfg.max_attempts is not None and attempts >= cfg.max_attempts:
                    raise SendFailed(
                        f"gave up after {attempts} attempts: {exc!r}", acked=self.stats["events_acked"], unacked=events
                    ) from exc
                delay = min(backoff, cfg.backoff_max)
                await trio.sleep(delay * (0.5 + self._rng.random() / 2))
                backoff = min(backoff * 2, cfg.backoff_max)
                self.stats["reconnects"] += 1
            except BaseException:
                # Cancelled mid-write or mid-wait: the wire state is unknown; drop it.
                await self._drop()
                raise


class _Window:
    """``on_event`` of one window's pump: counts acks and keepalives, reports
    newly acked events, and stops the pump at the window's last ack, an ack
    timeout or the connection's end (:attr:`failure` says which failure)."""

    def __init__(self, events: list[Any], stats: dict[str, int], on_acked: Callable[[list[Any]], None] | None) -> None:
        self.events = events
        self.stats = stats
        self.on_acked = on_acked
        self.pump: Pump | None = None
        self.complete = False
        self.failure: BaseException | None = None

    async def on_event(self, ev: object) -> None:
        pump = self.pump
        assert pump is not None
        if isinstance(ev, AckReceived):
            if ev.newly:
                self.stats["events_acked"] += ev.newly
                if self.on_acked is not None:
                    self.on_acked(self.events[ev.total - ev.newly : ev.total])
            if ev.complete:
                self.complete = True
                pump.stop()
        elif isinstance(ev, KeepAlive):
            self.stats["keepalives"] += 1
        elif isinstance(ev, AckTimeout):
            self._failed(pump, _Retry(f"no ack for {ev.waited:.1f}s"))
        elif isinstance(ev, ConnectionClosed):
            if pump.ended == WRITE_TIMEOUT:
                self._failed(pump, trio.TooSlowError(f"a write took longer than {pump.write_timeout}s"))
            elif pump.ended in (WRITE_FAILED, RESET):
                self._failed(pump, trio.BrokenResourceError(f"the connection broke ({pump.ended})"))
            else:
                self._failed(pump, _Retry("server closed the connection"))

    def _failed(self, pump: Pump, exc: BaseException) -> None:
        if self.failure is None and not self.complete:
            self.failure = exc
        pump.stop()


class _Retry(Exception):
    """Internal: this attempt failed; reconnect and resend what is unacked."""
