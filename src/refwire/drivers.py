"""trio plumbing shared by every protocol's client and server (DESIGN.md §1, "trio drivers").

* :class:`StreamServer` -- accepts on any ``trio.abc.Listener`` (TCP, TLS, or the
  simulator's), runs one handler per connection in a separate handler nursery,
  and shuts down gracefully: stop accepting, let connections finish for a grace
  period, then cancel them (the pattern hypercorn uses; trio has no built-in).
* :func:`open_stream` -- TCP (``TCP_NODELAY`` is trio's default) with optional
  TLS and a connect/handshake timeout.
* :func:`parse_hostport`, TLS context helpers.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

__all__ = [
    "StreamServer",
    "client_ssl_context",
    "open_stream",
    "parse_hostport",
    "server_ssl_context",
]

log = logging.getLogger("refwire")


def parse_hostport(text: str, *, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too; ``:PORT`` or ``PORT`` alone use ``default_host``)."""
    text = text.strip()
    host, sep, port_s = text.rpartition(":")
    if not sep:
        host, port_s = "", text
    host = host.strip("[]") or default_host
    try:
        port = int(port_s)
    except ValueError:
        raise ValueError(f"bad address {text!r}: the port must be a number (HOST:PORT)") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"bad address {text!r}: port {port} is out of range 0..65535")
    return host, port


def server_ssl_context(
    certfile: str, keyfile: str | None = None, *, client_ca: str | None = None
) -> ssl.SSLContext:
    """A TLS server context; with ``client_ca``, client certificates are required
    and verified against it."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certfile, keyfile)
    if client_ca:
        ctx.load_verify_locations(client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_ssl_context(
    ca: str | None = None,
    *,
    certfile: str | None = None,
    keyfile: str | None = None,
    verify: bool = True,
) -> ssl.SSLContext:
    """A TLS client context trusting ``ca`` (or the system store); optionally
    presenting a client certificate."""
    ctx = ssl.create_default_context(cafile=ca)
    if certfile:
        ctx.load_cert_chain(certfile, keyfile)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def open_stream(
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    timeout: float = 10.0,
) -> trio.abc.Stream:
    """Connect over TCP, then TLS if a context is given, within ``timeout`` seconds."""
    with trio.fail_after(timeout):
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
        if ssl_context is not None:
            tls = trio.SSLStream(stream, ssl_context, server_hostname=server_hostname or host, https_compatible=False)
            try:
                await tls.do_handshake()
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
            stream = tls
    return stream


class StreamServer:
    """Serve ``handler(stream)`` for every connection accepted on ``listeners``.

    ``await nursery.start(server.serve, listeners)`` returns once accepting;
    ``await server.shutdown(grace)`` stops accepting, waits up to ``grace``
    seconds for open connections to finish (handlers can watch
    :attr:`closing`), then cancels them.
    """

    def __init__(
        self,
        handler: Callable[[trio.abc.Stream], Awaitable[None]],
        *,
        ssl_context: ssl.SSLContext | None = None,
        handshake_timeout: float = 10.0,
        name: str = "refwire",
    ) -> None:
        self._handler = handler
        self._ssl_context = ssl_context
        self._handshake_timeout = handshake_timeout
        self.name = name
        #: set when shutdown begins; handlers finish their current work and close.
        self.closing = trio.Event()
        self._accept_scope: trio.CancelScope | None = None
        self._handler_nursery: trio.Nursery | None = None
        self._done = trio.Event()
        self._grace = 5.0
        self.open_connections = 0
        self.total_connections = 0

    async def serve(
        self,
        listeners: Sequence[trio.abc.Listener[Any]],
        *,
        task_status: trio.TaskStatus[Sequence[trio.abc.Listener[Any]]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            async with trio.open_nursery() as handler_nursery:
                self._handler_nursery = handler_nursery
                with trio.CancelScope() as accept_scope:
                    self._accept_scope = accept_scope
                    async with trio.open_nursery() as accept_nursery:
                        for listener in listeners:
                            accept_nursery.start_soon(self._accept_loop, listener, handler_nursery)
                        task_status.started(listeners)
                for listener in listeners:
                    await trio.aclose_forcefully(listener)
                handler_nursery.cancel_scope.deadline = trio.current_time() + self._grace
        finally:
            self._done.set()

    async def _accept_loop(self, listener: trio.abc.Listener[Any], handler_nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                # EMFILE and friends: log and retry, as trio.serve_listeners does.
                log.error("%s: accept failed: %s; retrying", self.name, exc)
                await trio.sleep(0.1)
                continue
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return
            handler_nursery.start_soon(self._run_handler, stream)

    async def _run_handler(self, stream: trio.abc.Stream) -> None:
        self.open_connections += 1
        self.total_connections += 1
        try:
            if self._ssl_context is not None:
                tls = trio.SSLStream(stream, self._ssl_context, server_side=True, https_compatible=False)
                try:
                    with trio.fail_after(self._handshake_timeout):
                        await tls.do_handshake()
                except (trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
                    log.warning("%s: TLS handshake failed: %s", self.name, exc or type(exc).__name__)
                    return
                stream = tls
            await self._handler(stream)
        finally:
            self.open_connections -= 1
            await trio.aclose_forcefully(stream)

    async def shutdown(self, grace: float = 5.0) -> None:
        """Stop accepting; give open connections ``grace`` seconds; then cancel them."""
        self._grace = grace
        self.closing.set()
        if self._accept_scope is not None:
            self._accept_scope.cancel()
        await self._done.wait()


def listener_address(listener: trio.abc.Listener[Any]) -> str:
    """``HOST:PORT`` a TCP listener is bound to (``?`` for other listeners)."""
    sock = getattr(listener, "socket", None)
    if sock is None:
        return "?"
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def first_error(exc: BaseException) -> BaseException:
    """The first leaf of a (nested) exception group, or ``exc`` itself.

    trio nurseries wrap their children's errors in groups; a driver that
    handles "the connection broke" wants the error itself.
    """
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
