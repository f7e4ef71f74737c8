"""trio plumbing shared by every protocol's client and server.

* :func:`pump` / :class:`Pump` -- the one loop that runs a Sans-IO machine
  (:mod:`refwire.sansio`'s contract) over a ``trio.abc.Stream``: a reader, a
  timer and a writer.
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
import math
import os
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final

import trio

from .errors import RemoteProtocolError
from .logs import limited
from .sansio import NEED_DATA, Machine

__all__ = [
    "Pump",
    "StreamServer",
    "client_ssl_context",
    "open_stream",
    "parse_hostport",
    "pump",
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
        try:
            stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
        except socket.gaierror as exc:  # name the host: the resolver's words alone do not
            raise OSError(f"cannot resolve {host!r}: {exc.strerror or exc}") from exc
        except OSError as exc:
            if exc.strerror or not str(exc):
                raise
            raise OSError(f"cannot connect to {host}:{port}: {_first_cause(exc)}") from exc
        if ssl_context is not None:
            tls = trio.SSLStream(stream, ssl_context, server_hostname=server_hostname or host, https_compatible=False)
            try:
                await tls.do_handshake()
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
            stream = tls
    return stream


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
        try:
            if self._ssl_context is not None:
                tls = trio.SSLStream(stream, self._ssl_context, server_side=True, https_compatible=False)
                try:
                    with trio.fail_after(self._handshake_timeout):
                        await tls.do_handshake()
                except (trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
                    limited(log, f"tls:{id(self)}", "%s: TLS handshake failed: %s", self.name, exc or type(exc).__name__)
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


# --------------------------------------------------------------------------- the pump

#: Why a pump ended (:attr:`Pump.ended`).
EOF: Final = "eof"  # the peer closed its side and every event was delivered
RESET: Final = "reset"  # receive failed: the machine was told connection_lost
WRITE_FAILED: Final = "write-failed"  # send_all failed: the machine was told send_failed
WRITE_TIMEOUT: Final = "write-timeout"  # send_all took longer than write_timeout: send_failed
STOPPED: Final = "stopped"  # Pump.stop() (the driver's decision)
READ_TIMEOUT: Final = "read-timeout"  # Pump.run_until's give_up_at passed: the stream was closed
PROTOCOL_ERROR: Final = "protocol-error"  # next_event raised; run() re-raises it

_TRANSPORT_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)

#: Bytes a pump may owe its peer before it stops reading (``Pump.max_unwritten``).
DEFAULT_MAX_UNWRITTEN: Final = 16 * 1024 * 1024

EventHandler = Callable[[Any], Awaitable[None]]

#: :meth:`Pump.run_until` writes to a socket's descriptor without yielding first
#: (POSIX: ``os.write`` works on sockets there).
_INLINE_WRITES: Final = os.name == "posix"


class Pump:
    """Run ``machine`` over ``stream`` (:func:`pump` is the short form).

    Three tasks share the machine, and all of them keep running while
    ``on_event`` awaits, so bytes the machine owes on its own (keepalives, timer
    replies) still flow while the application holds an event:

    * the **reader**: ``receive_some`` -> ``receive_data(now=...)`` ->
      ``next_event()`` until ``NEED_DATA``, each event awaited through
      ``on_event`` before the next read (backpressure: nothing more is read while
      the application is busy);
    * the **timer**: sleeps until ``next_deadline()`` and calls ``handle_timer``;
      events a timer queues are delivered at once when the reader is idle (or by
      the reader, after the event it is delivering);
    * the **writer**: writes what ``data_to_send()`` gave after every input,
      event, timer and :meth:`send`, each write within ``write_timeout`` seconds;
      a failed or late write calls ``send_failed``.

    ``on_event`` may call :meth:`send` (or the machine's verb helpers followed by
    :meth:`kick`), :meth:`stop`, or raise: an exception from it ends the pump and
    is re-raised by :meth:`run`.  A :class:`~refwire.errors.RemoteProtocolError`
    from the machine is re-raised after what the machine queued (an error reply)
    has been flushed.  Transport failures are not raised: the machine is told
    (``connection_lost`` / ``send_failed``), its closing event is delivered, and
    :attr:`ended` says why the pump ended.

    The hot path takes no lock and wakes no task it does not need: bytes are
    pulled from the machine synchronously (the writer is woken only when there
    are some), and the timer's sleep is moved, not interrupted, when a deadline
    changes.

    Memory is bounded on the way out too: while more than ``max_unwritten``
    bytes wait to be written (a peer that sends requests but does not read the
    replies), the reader reads nothing more until the writer is below it again.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        machine: Machine,
        on_event: EventHandler,
        *,
        receive_size: int = 65536,
        write_timeout: float | None = 30.0,
        max_unwritten: int | None = DEFAULT_MAX_UNWRITTEN,
    ) -> None:
        self.stream = stream
        self.max_unwritten = max_unwritten
        #: bytes queued or being written, not yet accepted by the transport
        self.unwritten = 0
        self._drained: trio.Event | None = None
        self.machine = machine
        self.on_event = on_event
        self.receive_size = receive_size
        self.write_timeout = write_timeout
        #: why the pump ended (``None`` while it runs); see the constants above.
        self.ended: str | None = None
        self._out: list[bytes] = []
        self._write_wanted = trio.Event()
        self._writing = False
        self._written: trio.Event | None = None
        self._delivering = False
        self._delivered: trio.Event | None = None
        self._stopping = False
        self._rx_scope: trio.CancelScope | None = None
        self._timer_scope: trio.CancelScope | None = None
        self._armed: float | None = None
        self._nursery: trio.Nursery | None = None
        self._failure: BaseException | None = None
        self._broken = False
        #: run_until's bound, while a bounded call runs; the watchdog's wake-up and scope
        self._give_up_at: float | None = None
        self._watch_armed = math.inf
        self._watch_scope: trio.CancelScope | None = None
        self._watching = False

    # -- for the driver and on_event ----------------------------------------
    @property
    def broken(self) -> bool:
        """The transport failed (a reset or a failed write): nothing more is written."""
        return self._broken

    def send(self, event: Any) -> None:
        """``machine.send(event, now=...)``, then wake the writer and the timer."""
        self.machine.send(event, now=trio.current_time())
        self.kick()

    def kick(self) -> None:
        """The machine may have new bytes or a new deadline (after a direct call on it)."""
        data = self.machine.data_to_send()
        if data:
            self._out.append(data)
            self.unwritten += len(data)
            self._write_wanted.set()
        self._rearm()

    async def flush(self) -> bool:
        """Write what the machine owes now; returns once it is written (True) or the
        connection is known broken (False)."""
        self.kick()
        while self._writing:
            await self._wait_written()
        await self._write_out()
        return not self._broken

    def stop(self) -> None:
        """End the pump: stop reading (an ``on_event`` in progress finishes), flush
        what the machine owes, and return ``"stopped"`` from :meth:`run`."""
        if self.ended is None:
            self.ended = STOPPED
        self._stop_reading()

    def _stop_reading(self) -> None:
        self._stopping = True
        if self._rx_scope is not None:
            self._rx_scope.cancel()
        if self._watch_scope is not None:
            self._watch_scope.cancel()

    # -- running ---------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[Pump] = trio.TASK_STATUS_IGNORED) -> str:
        """Pump until EOF, reset, a failed write, :meth:`stop`, or an error; returns
        :attr:`ended`.  ``task_status.started`` gets the pump itself."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._guarded, self._writer)
            nursery.start_soon(self._guarded, self._timer)
            self.kick()
            task_status.started(self)
            await self._guarded(self._reader)
            if self._failure is None or isinstance(self._failure, RemoteProtocolError):
                await self._final_flush()
            nursery.cancel_scope.cancel()
        if self._failure is not None:
            raise self._failure
        assert self.ended is not None
        return self.ended

    async def run_until(self, done: Callable[[], object], *, give_up_at: float | None = None) -> bool:
        """Drive the machine from the calling task, without the reader, timer and
        writer tasks of :meth:`run`: write what the machine owes, then read,
        deliver events through ``on_event`` and run due timers, until ``done()``
        (returns True) or the connection ends (:attr:`ended` says how; returns
        ``done()``).

        For a driver that waits for one answer at a time, such as a
        stop-and-wait writer: its round trip is one task reading its own answer,
        with no hand-off between tasks, and over a socket the bytes are first
        offered to the kernel without yielding (a read, which yields, follows).
        Nothing is read between two calls: bytes wait in the kernel.  A
        :class:`~refwire.errors.RemoteProtocolError` from the machine is raised
        after what the machine queued for the peer has been written.  Never call
        it while :meth:`run` is running, nor from two tasks at once.

        ``give_up_at`` (a trio clock time) bounds the call: if it passes before
        ``done()``, the connection is given up -- the stream is closed, which
        fails the read or write in progress, :attr:`ended` is
        :data:`READ_TIMEOUT`, the machine is told ``connection_lost`` -- and the
        call returns ``done()``.  The bound is kept by one watchdog task per
        pump (a trio system task that sleeps until the earliest bound it was
        given) rather than by a cancel scope per call: in a stop-and-wait round
        trip a cancel scope costs about as much as the round trip's own Python
        work.  The watchdog ends with :meth:`stop`.
        """
        if give_up_at is not None and self.ended is None:
            self._give_up_at = give_up_at
            if give_up_at < self._watch_armed:
                self._arm_watchdog(give_up_at)
        try:
            machine = self.machine
            stream = self.stream
            receive_some = stream.receive_some
            next_event = machine.next_event
            on_event = self.on_event
            size = self.receive_size
            sock = stream.socket if _INLINE_WRITES and type(stream) is trio.SocketStream else None
            out = self._out
            while True:
                # what the machine owes (and what kick() queued): over a socket offered to the
                # kernel first, without yielding (no writer task to wake, no timer to move:
                # run() is not running)
                owed = machine.data_to_send()
                if owed:
                    out.append(owed)
                    self.unwritten += len(owed)
                if out and not self._broken:
                    if sock is not None and len(out) == 1:
                        head = out[0]
                        try:
                            sent = os.write(sock.fileno(), head)
                        except OSError:
                            sent = 0  # would block, or failed: send_all says which
                        if sent:
                            self.unwritten -= sent
                            if sent == len(head):
                                out.clear()
                            else:
                                out[0] = head[sent:]
                    if out:
                        await self._write_out()
                if done():
                    return True
                if self.ended is not None:
                    return bool(done())
                deadline = machine.next_deadline()
                timer_due = False
                if deadline is None:
                    try:
                        data: bytes | bytearray | None = await receive_some(size)
                    except _TRANSPORT_ERRORS:
                        data = None
                else:
                    data = None
                    with trio.CancelScope(deadline=deadline):
                        try:
                            data = await receive_some(size)
                        except _TRANSPORT_ERRORS:
                            data = None
                            deadline = None
                    timer_due = data is None and deadline is not None  # the machine's deadline came first
                if self.ended == READ_TIMEOUT:  # given up meanwhile: whatever the read gave, the connection is lost
                    data = None
                    timer_due = False
                if timer_due:
                    machine.handle_timer(now=trio.current_time())
                elif data is None:
                    if self.ended is None:
                        self.ended = RESET
                    self._broken = True
                    machine.connection_lost(now=trio.current_time())
                else:
                    machine.receive_data(data, now=trio.current_time())
                    if not data:
                        self.ended = EOF
                # every queued event through on_event (one task: no other deliverer to
                # wait for); a protocol error ends the pump after what the machine
                # queued (an error reply) is written
                try:
                    while (event := next_event()) is not NEED_DATA:
                        await on_event(event)
                except RemoteProtocolError:
                    self.ended = PROTOCOL_ERROR
                    self.kick()
                    await self._write_out()
                    raise
        finally:
            self._give_up_at = None

    def _arm_watchdog(self, at: float) -> None:
        """Make the watchdog wake by ``at`` (starting it the first time)."""
        self._watch_armed = at
        scope = self._watch_scope
        if scope is not None:
            scope.deadline = at
        elif not self._watching:
            self._watching = True
            trio.lowlevel.spawn_system_task(self._watchdog, name=f"refwire pump watchdog {id(self):x}")
        # (else it is starting: it reads _watch_armed when it first sleeps)

    async def _watchdog(self) -> None:
        """Give the connection up once a :meth:`run_until` in progress is past its
        ``give_up_at``; otherwise sleep until the next bound (never while no call
        is bounded).  Ends with the pump (:meth:`stop`, or when it has ended)."""
        try:
            while self.ended is None and not self._stopping:
                with trio.CancelScope(deadline=self._watch_armed) as scope:
                    self._watch_scope = scope
                    await trio.sleep_forever()
                self._watch_scope = None
                at = self._give_up_at
                if at is not None and trio.current_time() >= at and self.ended is None and not self._stopping:
                    self.ended = READ_TIMEOUT
                    await trio.aclose_forcefully(self.stream)  # fails the receive or send in progress
                    return
                self._watch_armed = math.inf if at is None else at
        except Exception:  # (a system task must not raise: it would crash the whole run)
            log.exception("refwire: pump watchdog failed")
        finally:
            self._watch_scope = None
            self._watch_armed = math.inf
            self._watching = False

    async def _guarded(self, job: Callable[[], Awaitable[None]]) -> None:
        try:
            await job()
        except RemoteProtocolError as exc:
            self._fail(exc, PROTOCOL_ERROR)
            self._stop_reading()
        except Exception as exc:
            self._fail(exc, self.ended or "error")
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()

    def _fail(self, exc: BaseException, why: str) -> None:
        if self._failure is None:
            self._failure = exc
            if self.ended is None or self.ended == STOPPED:
                self.ended = why

    async def _reader(self) -> None:
        machine = self.machine
        receive_some = self.stream.receive_some
        size = self.receive_size
        limit = self.max_unwritten
        while not self._stopping:
            with trio.CancelScope() as scope:
                self._rx_scope = scope
                if limit is not None and self.unwritten > limit:
                    await self._wait_drained()  # backpressure: the peer is not reading what we owe it
                try:
                    data = await receive_some(size)
                except _TRANSPORT_ERRORS:
                    if self.ended is None:
                        self.ended = RESET
                    self._broken = True
                    machine.connection_lost(now=trio.current_time())
                    break
            self._rx_scope = None
            if scope.cancelled_caught:
                break
            machine.receive_data(data, now=trio.current_time())
            if not data:
                if self.ended is None:
                    self.ended = EOF
                break
            await self._deliver()
        await self._deliver()

    async def _deliver(self) -> None:
        """Hand every queued event to ``on_event``, one deliverer at a time (the
        reader, or the timer while the reader waits for bytes)."""
        while self._delivering:
            if self._delivered is None:
                self._delivered = trio.Event()
            await self._delivered.wait()
        self._delivering = True
        machine = self.machine
        on_event = self.on_event
        try:
            while True:
                event = machine.next_event()
                if event is NEED_DATA:
                    break
                await on_event(event)
                self.kick()
        finally:
            self._delivering = False
            if self._delivered is not None:
                self._delivered.set()
                self._delivered = None
            self.kick()

    async def _writer(self) -> None:
        while True:
            await self._write_wanted.wait()
            self._write_wanted = trio.Event()
            await self._write_out()

    async def _wait_written(self) -> None:
        if self._written is None:
            self._written = trio.Event()
        await self._written.wait()

    async def _write_out(self) -> None:
        """Write the queued bytes (the caller made sure no other write runs)."""
        if self._writing:
            return
        self._writing = True
        try:
            while self._out and not self._broken:
                data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
                self._out.clear()
                try:
                    if self.write_timeout is None:
                        await self.stream.send_all(data)
                    else:
                        with trio.fail_after(self.write_timeout):
                            await self.stream.send_all(data)
                    self.unwritten -= len(data)
                    self._wake_reader()
                except (trio.TooSlowError, *_TRANSPORT_ERRORS) as exc:
                    self._broken = True
                    self._out.clear()
                    self.unwritten = 0
                    if self.ended is None or self.ended == STOPPED:
                        self.ended = WRITE_TIMEOUT if isinstance(exc, trio.TooSlowError) else WRITE_FAILED
                    self.machine.send_failed(now=trio.current_time())
                    self._stop_reading()
        finally:
            self._writing = False
            if self._written is not None:
                self._written.set()
                self._written = None
            self._wake_reader()

    def _wake_reader(self) -> None:
        """The reader waits for the unwritten bytes to drop to the limit: wake it once they have (or the write failed)."""
        if self._drained is not None and (self._broken or self.max_unwritten is None or self.unwritten <= self.max_unwritten):
            self._drained.set()
            self._drained = None

    async def _wait_drained(self) -> None:
        if self._drained is None:
            self._drained = trio.Event()
        await self._drained.wait()

    def _rearm(self) -> None:
        """Move the timer's wake-up to the machine's deadline, without waking it
        unless the deadline came earlier (a sleeping scope's deadline can move)."""
        scope = self._timer_scope
        if scope is None:
            return
        deadline = self.machine.next_deadline()
        if deadline is not None and (self._armed is None or deadline < self._armed):
            self._armed = deadline
            scope.deadline = deadline

    async def _timer(self) -> None:
        machine = self.machine
        inf = float("inf")
        while True:
            deadline = machine.next_deadline()
            self._armed = deadline
            with trio.CancelScope(deadline=inf if deadline is None else deadline) as scope:
                self._timer_scope = scope
                await trio.sleep_forever()
            self._timer_scope = None
            now = trio.current_time()
            deadline = machine.next_deadline()
            if deadline is None or now < deadline:
                continue
            machine.handle_timer(now=now)
            self.kick()
            if not self._delivering:
                await self._deliver()

    async def _final_flush(self) -> None:
        self.kick()
        with trio.move_on_after(self.write_timeout if self.write_timeout is not None else float("inf")):
            while self._writing:
                await self._wait_written()
            await self._write_out()


async def pump(
    stream: trio.abc.Stream,
    machine: Machine,
    on_event: EventHandler,
    *,
    receive_size: int = 65536,
    write_timeout: float | None = 30.0,
    task_status: trio.TaskStatus[Pump] = trio.TASK_STATUS_IGNORED,
) -> str:
    """Run ``machine`` over ``stream`` until the connection ends (see :class:`Pump`);
    ``await nursery.start(pump, ...)`` gives the :class:`Pump` for :meth:`Pump.send`."""
    return await Pump(
        stream, machine, on_event, receive_size=receive_size, write_timeout=write_timeout
    ).run(task_status=task_status)
