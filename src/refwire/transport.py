"""Connections and servers, shared by every protocol's client and server.

* :class:`StreamServer` -- accepts on any ``trio.abc.Listener`` (TCP, TLS, or the
  simulator's), runs one handler per connection in a separate handler nursery,
  and shuts down gracefully: stop accepting, let connections finish for a grace
  period, then cancel them (the pattern hypercorn uses; trio has no built-in).
* :func:`open_stream` -- TCP (``TCP_NODELAY`` is trio's default) with optional
  TLS and a connect/handshake timeout.
* :func:`parse_hostport`, TLS context helpers, and how a driver tells a
  permanent error from a transient one.

The loop that runs a machine over one of these streams is :mod:`refwire.drivers`.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final

import trio

from .errors import RefwireError, RemoteProtocolError
from .logs import limited

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "PeerTimeout",
    "StreamServer",
    "TlsFileError",
    "TlsHandshakeError",
    "client_ssl_context",
    "first_error",
    "listener_address",
    "open_stream",
    "parse_hostport",
    "peer_name",
    "permanent_error",
    "server_ssl_context",
    "stdin_lines",
    "tls_reason",
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
    _load_cert_chain(ctx, certfile, keyfile)
    if client_ca:
        _load_ca(ctx, client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class TlsFileError(OSError):
    """A certificate, key or CA file that cannot be used; the message names the file and why."""


def _readable(path: str, what: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise TlsFileError(f"the {what} {path!r} cannot be read: {exc.strerror or exc}") from None


def _load_cert_chain(ctx: ssl.SSLContext, certfile: str, keyfile: str | None) -> None:
    """``load_cert_chain`` with errors that say which file is wrong and how
    (OpenSSL's own is ``[SSL] PEM lib``)."""
    _readable(certfile, "certificate file")
    if keyfile:
        _readable(keyfile, "key file")
    try:
        ctx.load_cert_chain(certfile, keyfile)
    except ssl.SSLError as exc:
        text = Path(certfile).read_bytes()
        key_text = Path(keyfile).read_bytes() if keyfile else text
        if b"CERTIFICATE-----" not in text:
            why = f"the certificate file {certfile!r} holds no PEM certificate"
        elif b"PRIVATE KEY-----" not in key_text:
            where = f"the key file {keyfile!r} holds" if keyfile else f"{certfile!r} holds"
            why = f"{where} no private key" + ("" if keyfile else " (give it with the key option)")
        elif "KEY_VALUES_MISMATCH" in str(exc) or "key values mismatch" in str(exc):
            why = f"the private key does not belong to the certificate in {certfile!r}"
        else:
            why = f"cannot use the certificate {certfile!r}" + (f" with the key {keyfile!r}" if keyfile else "") + f": {exc.reason or exc}"
        raise TlsFileError(why) from None


def _load_ca(ctx: ssl.SSLContext, cafile: str) -> None:
    _readable(cafile, "CA file")
    try:
        ctx.load_verify_locations(cafile)
    except ssl.SSLError as exc:
        raise TlsFileError(f"the CA file {cafile!r} holds no usable PEM certificate ({exc.reason or exc})") from None


def client_ssl_context(
    ca: str | None = None,
    *,
    certfile: str | None = None,
    keyfile: str | None = None,
    verify: bool = True,
) -> ssl.SSLContext:
    """A TLS client context trusting ``ca`` (or the system store); optionally
    presenting a client certificate."""
    ctx = ssl.create_default_context()
    if ca:
        _load_ca(ctx, ca)
    if certfile:
        _load_cert_chain(ctx, certfile, keyfile)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def permanent_error(exc: BaseException, *, protocol_errors: bool = False) -> bool:
    """Whether retrying cannot fix ``exc`` (its causes included): the host name
    does not resolve, or the peer's TLS certificate fails verification -- and,
    with ``protocol_errors``, the peer broke the protocol (not a plain EOF).
    Clients give up at once on these instead of spending their attempts."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, socket.gaierror | ssl.SSLCertVerificationError):
            return True
        if protocol_errors and isinstance(e, RemoteProtocolError) and e.field != "(eof)":
            return True
        e = e.__cause__ or e.__context__
    return False


def _first_cause(exc: BaseException) -> str:
    """The first OS-level reason inside trio's "all attempts failed" error."""
    group = exc.__cause__
    if isinstance(group, BaseExceptionGroup):
        for e in group.exceptions:
            if isinstance(e, OSError) and e.errno is not None:
                return os.strerror(e.errno).lower()
    return str(exc)


class PeerTimeout(RefwireError, trio.TooSlowError):
    """A peer did not answer in time: the message says what was awaited, from
    whom and for how long (``no Pravega Hello from 127.0.0.1:6000 in 10 s (is it
    a segment store?)``).  A :class:`trio.TooSlowError` too, so code that
    catches that keeps working."""

    def __init__(self, message: str, *, peer: str = "", seconds: float | None = None) -> None:
        super().__init__(message)
        self.peer = peer  #: ``HOST:PORT`` of the peer (empty if unknown)
        self.seconds = seconds  #: the bound that passed


class TlsHandshakeError(OSError):
    """A TLS handshake failed; the message names the peer and OpenSSL's reason
    (``CERTIFICATE_VERIFY_FAILED``, ``WRONG_VERSION_NUMBER`` ...), which trio's
    ``BrokenResourceError`` alone does not say.  The ``ssl.SSLError`` is its
    ``__cause__`` (so :func:`permanent_error` still sees a failed verification)."""


def tls_reason(exc: BaseException) -> str | None:
    """OpenSSL's reason for a failed TLS handshake, found in ``exc`` or its causes
    (trio wraps the ``ssl.SSLError`` in a ``BrokenResourceError`` with no text):
    ``CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate``,
    ``WRONG_VERSION_NUMBER``, ...; None when no ``ssl.SSLError`` is in the chain."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, ssl.SSLCertVerificationError):
            why = e.verify_message or ""
            return f"{e.reason or 'CERTIFICATE_VERIFY_FAILED'}" + (f": {why}" if why else "")
        if isinstance(e, ssl.SSLError):
            return str(e.reason or e.strerror or e)
        e = e.__cause__ or e.__context__
    return None


def peer_name(stream: trio.abc.Stream | None, unknown: str = "?") -> str:
    """``HOST:PORT`` of the peer of a TCP (or TLS-over-TCP) stream, or ``unknown``
    (a stream of another kind, or a socket already closed)."""
    while isinstance(stream, trio.SSLStream):
        stream = stream.transport_stream
    sock = getattr(stream, "socket", None)
    try:
        host, port = sock.getpeername()[:2] if sock is not None else ("?", 0)
    except (OSError, ValueError, TypeError):
        return unknown
    if host == "?":
        return unknown
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


async def open_stream(
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    server_hostname: str | None = None,
    timeout: float = 10.0,
) -> trio.abc.Stream:
    """Connect over TCP, then TLS if a context is given, within ``timeout`` seconds
    in all.  Past it, :class:`PeerTimeout` says which step did not finish; a
    failed handshake is a :class:`TlsHandshakeError` with OpenSSL's reason."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    deadline = trio.current_time() + timeout
    stream: trio.abc.Stream | None = None
    with trio.move_on_at(deadline):
        try:
            stream = await trio.open_tcp_stream(host, port)
        except socket.gaierror as exc:  # name the host: the resolver's words alone do not
            raise OSError(f"cannot resolve {host!r}: {exc.strerror or exc}") from exc
        except OSError as exc:
            if exc.strerror or not str(exc):
                raise
            raise OSError(f"cannot connect to {where}: {_first_cause(exc)}") from exc
    if stream is None:
        raise PeerTimeout(f"cannot connect to {where}: no answer in {timeout:g} s", peer=where, seconds=timeout)
    if ssl_context is None:
        return stream
    tls = trio.SSLStream(stream, ssl_context, server_hostname=server_hostname or host, https_compatible=False)
    done = False
    try:
        with trio.move_on_at(deadline):
            try:
                await tls.do_handshake()
            except (trio.BrokenResourceError, ssl.SSLError) as exc:
                reason = tls_reason(exc) or "the server closed the connection"
                raise TlsHandshakeError(f"TLS handshake with {where} failed: {reason}") from exc
            done = True
    finally:
        if not done:
            await trio.aclose_forcefully(stream)
    if not done:
        raise PeerTimeout(
            f"no TLS handshake from {where} in {timeout:g} s (is it a TLS server?)", peer=where, seconds=timeout
        )
    return tls


#: Connections a refwire server serves at once unless told otherwise (``--max-connections``).
DEFAULT_MAX_CONNECTIONS: Final = 1024


class StreamServer:
    """Serve ``handler(stream)`` for every connection accepted on ``listeners``.

    ``await nursery.start(server.serve, listeners)`` returns once accepting;
    ``await server.shutdown(grace)`` stops accepting, waits up to ``grace``
    seconds for open connections to finish (handlers can watch
    :attr:`closing`), then cancels them.

    At most ``max_connections`` are served at once (None: no limit); one past
    it is accepted and closed at once, so a flood of idle connections cannot
    take every file descriptor and the server's memory.  Refusals are logged
    at most once per ``log_interval`` seconds, with their count.
    """

    def __init__(
        self,
        handler: Callable[[trio.abc.Stream], Awaitable[None]],
        *,
        ssl_context: ssl.SSLContext | None = None,
        handshake_timeout: float = 10.0,
        name: str = "refwire",
        max_connections: int | None = DEFAULT_MAX_CONNECTIONS,
        log_interval: float = 10.0,
    ) -> None:
        if max_connections is not None and max_connections < 1:
            raise ValueError("max_connections must be at least 1 (or None for no limit)")
        self.max_connections = max_connections
        self.log_interval = log_interval
        #: connections closed at once because ``max_connections`` were open
        self.refused_connections = 0
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
                limited(log, f"accept-failed:{id(self)}", "%s: accept failed: %s; retrying", self.name, exc, level=logging.ERROR)
                await trio.sleep(0.1)
                continue
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return
            if self.max_connections is not None and self.open_connections >= self.max_connections:
                self._refuse()
                await trio.aclose_forcefully(stream)
                continue
            self.open_connections += 1  # counted here, so a burst of accepts sees the limit
            handler_nursery.start_soon(self._run_handler, stream)

    def _refuse(self) -> None:
        self.refused_connections += 1
        limited(
            log,
            f"refused:{id(self)}",
            "%s: connection refused: %d open, the limit max_connections=%d",
            self.name,
            self.open_connections,
            self.max_connections,
            interval=self.log_interval,
        )

    async def _run_handler(self, stream: trio.abc.Stream) -> None:
        self.total_connections += 1
        peer = peer_name(stream)
        log.debug("%s: connection from %s accepted (%d open)", self.name, peer, self.open_connections)
        why = "finished"  # (the handler returned: the peer closed, or the protocol ended it)
        try:
            if self._ssl_context is not None:
                tls = trio.SSLStream(stream, self._ssl_context, server_side=True, https_compatible=False)
                try:
                    with trio.fail_after(self._handshake_timeout):
                        await tls.do_handshake()
                except (trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
                    if isinstance(exc, trio.TooSlowError):
                        why = f"TLS handshake failed: none within {self._handshake_timeout:g} s"
                    else:
                        why = f"TLS handshake failed: {tls_reason(exc) or _words(exc)}"
                    limited(log, f"tls:{id(self)}", "%s: connection from %s: %s", self.name, peer, why)
                    return
                stream = tls
            await self._handler(stream)
        except BaseException as exc:
            why = "cancelled (shutting down)" if isinstance(exc, trio.Cancelled) else _words(exc)
            raise
        finally:
            self.open_connections -= 1
            await trio.aclose_forcefully(stream)
            log.debug("%s: connection from %s closed: %s", self.name, peer, why)

    async def shutdown(self, grace: float = 5.0) -> None:
        """Stop accepting; give open connections ``grace`` seconds; then cancel them."""
        self._grace = grace
        self.closing.set()
        if self._accept_scope is not None:
            self._accept_scope.cancel()
        await self._done.wait()


def _words(exc: BaseException) -> str:
    """An exception in a few words for a log line (its text, else its class)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def stdin_lines() -> AsyncIterator[bytes]:
    """The standard input's lines (bytes, without their ``\\n``), as they come.

    Read by a worker thread that a cancellation (Ctrl-C) abandons, with
    ``os.read`` on the descriptor rather than through ``sys.stdin``: a thread
    left blocked inside ``sys.stdin``'s buffer holds its lock, and the
    interpreter's exit then aborts ("could not acquire lock ... at interpreter
    shutdown").  A ``sys.stdin`` without a descriptor (a test's ``StringIO``)
    is read as it is."""
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):  # (io.UnsupportedOperation is both)
        for text in sys.stdin:
            yield (text.encode() if isinstance(text, str) else bytes(text)).rstrip(b"\n")
        return
    carry = b""
    while True:
        chunk = await trio.to_thread.run_sync(os.read, fd, 65536, abandon_on_cancel=True)
        if not chunk:
            break
        *lines, carry = (carry + chunk).split(b"\n")
        for line in lines:
            yield line
    if carry:
        yield carry


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
