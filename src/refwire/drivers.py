"""trio plumbing shared by every protocol's client and server.

* :func:`pump` / :class:`Pump` -- the one loop that runs a Sans-IO machine
  (:mod:`refwire.sansio`'s contract) over a ``trio.abc.Stream``: a reader, a
  timer and a writer.
* The connections and servers it runs on (:class:`StreamServer`, :func:`open_stream`,
  :func:`parse_hostport`, the TLS context helpers) live in :mod:`refwire.transport`
  and are importable from here too.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio

from .admission import Admission
from .errors import RemoteProtocolError
from .sansio import NEED_DATA, Machine
from .transport import DEFAULT_MAX_CONNECTIONS as DEFAULT_MAX_CONNECTIONS
from .transport import StreamServer as StreamServer
from .transport import TlsFileError as TlsFileError
from .transport import client_ssl_context as client_ssl_context
from .transport import first_error as first_error
from .transport import listener_address as listener_address
from .transport import open_stream as open_stream
from .transport import parse_hostport as parse_hostport
from .transport import permanent_error as permanent_error
from .transport import server_ssl_context as server_ssl_context

__all__ = ["Pump", "pump"]

log = logging.getLogger("refwire")


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

    A server's pump may be given an ``admission`` (:mod:`refwire.admission`):
    then bytes that arrive while the connection holds nothing wait for the
    connection's charge from the server's pool before the machine sees them --
    nothing more is read meanwhile, and no timer of the machine fires -- and the
    charge goes back once the connection holds nothing again (checked after every
    delivery, write and :meth:`kick`, and by :meth:`release`, which the server
    calls when it is done with the connection).
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
        admission: Admission | None = None,
    ) -> None:
        self.stream = stream
        self.admission = admission
        #: the connection holds its charge from the server's pool
        self.admitted = False
        #: set while the reader waits for the charge (the timer waits with it)
        self._paused: trio.Event | None = None
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
        if self.admitted:
            self._release_if_idle()

    def release(self) -> None:
        """Give the connection's charge back to the server's pool, whatever it holds:
        the server is done with the connection."""
        if self.admitted:
            self.admitted = False
            assert self.admission is not None
            self.admission.pool.release(self.admission.charge)

    def _release_if_idle(self) -> None:
        """Give the charge back once the connection holds nothing."""
        admission = self.admission
        assert admission is not None
        if self.unwritten or self._delivering or self._out or admission.holding():
            return
        self.admitted = False
        admission.pool.release(admission.charge)

    async def _admit(self) -> None:
        """Wait for the connection's charge (the caller holds bytes the machine has
        not seen; the timer waits until the reader has fed them)."""
        admission = self.admission
        assert admission is not None
        self._paused = trio.Event()
        await admission.pool.acquire(admission.charge)
        self.admitted = True

    def _resume(self) -> None:
        paused, self._paused = self._paused, None
        if paused is not None:
            paused.set()

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
        admission = self.admission
        try:
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
                    if data and admission is not None and not self.admitted:
                        await self._admit()  # the server's budget: wait for this connection's charge
                self._rx_scope = None
                if scope.cancelled_caught:
                    break
                machine.receive_data(data, now=trio.current_time())
                self._resume()
                if not data:
                    if self.ended is None:
                        self.ended = EOF
                    break
                await self._deliver()
        finally:
            self._resume()
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
            if self.admitted:
                self._release_if_idle()

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
            if self._paused is not None:  # the reader holds bytes the machine has not seen
                await self._paused.wait()
                continue
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
