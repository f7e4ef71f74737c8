"""A deterministic, fault-injecting in-memory TCP network for trio.

:class:`SimNet` hands out :class:`SimStream` pairs (trio
``HalfCloseableStream`` implementations) through :class:`SimListener` (a trio
``Listener``), so protocol drivers written against trio's stream ABCs run over
it unchanged.  Every decision (latency, read sizes, faults) comes from a
:class:`~refwire.sim.rand.SimRandom` child stream per connection direction, and
time is trio's clock (run under ``MockClock(autojump_threshold=0)`` for virtual
time), so a run is a pure function of its seed.

Model, per connection direction ("pipe"):

* FIFO of chunks, one per write; chunk ``i`` becomes readable at
  ``ready_at = max(previous ready_at, now + latency, frozen_until)``.
* ``receive_some`` waits until the first chunk is ready, then returns up to
  ``max_bytes`` of the ready bytes (coalescing several writes like TCP), possibly
  fewer: a partial read, a 1-byte trickle, or a cut at a write boundary +-1.
* ``send_eof`` / ``aclose`` queue a FIN: the peer reads ``b""`` once all bytes
  before it were delivered.  Sending to a peer that closed its end raises
  ``BrokenResourceError``.
* A reset (RST) discards all buffered bytes, and every later operation on
  either end (including one parked in a wait) raises ``BrokenResourceError``.
* A blackholed (half-open) connection silently drops later writes in both
  directions and never delivers a FIN: only a reset, a local close or a
  cancellation ends a wait on it.
* With ``send_buffer`` set, at most that many unread bytes can be in flight per
  direction and ``send_all`` blocks (delivering what fits) until the reader
  drains them; by default buffers are unbounded.

Each pipe's randomness is ``rng.child("net", conn_id, "a>b")`` (``"a"`` is the
connecting side, ``"b"`` the accepting side), connect-time decisions use
``rng.child("net", "connect", address)``, so adding a connection does not perturb
the others.

When :data:`PCAP` holds a :class:`~refwire.pcap.PcapWriter` as a net is made
(``refwire sim --pcap FILE``), every connection is also a TCP conversation of
that pcapng file, at virtual time: its handshake when it is made, one segment
per read (the bytes as delivered), a FIN when the reader sees the end, an RST
when it is reset.  A listener address ``host:port`` maps to a stable
10.x.y.z address (:func:`~refwire.pcap.synthetic_ipv4` of the host) and that
port; the clients are ``client``'s address, port 32768 + the conversation's
number in the file.  The writer only watches: it draws no randomness and yields to no task.
"""

from __future__ import annotations

import collections
import contextvars
import errno
import math
import operator
from types import TracebackType

import trio
import trio.lowlevel

from ..pcap import PcapWriter, TcpConversation
from .faults import Faults
from .rand import SimRandom
from .trace import Trace

#: When set (a list), :meth:`SimNet.connect` adds each client end it opens to it: a
#: scripted peer's judge asks afterwards whether a fault blackholed one of them.
OPENED: contextvars.ContextVar[list[SimStream] | None] = contextvars.ContextVar("sim_opened", default=None)

#: When set as a :class:`SimNet` is made, the net writes its connections to this pcapng writer.
PCAP: contextvars.ContextVar[PcapWriter | None] = contextvars.ContextVar("sim_pcap", default=None)

__all__ = ["DEFAULT_RECEIVE_SIZE", "PCAP", "SimListener", "SimNet", "SimStream"]

#: ``receive_some()`` without ``max_bytes`` returns at most this many bytes.
DEFAULT_RECEIVE_SIZE = 65536

_NEVER = -math.inf


class _ConflictDetector:
    """Raise ``trio.BusyResourceError`` if two tasks use one resource at once."""

    __slots__ = ("_held", "_message")

    def __init__(self, message: str) -> None:
        self._message = message
        self._held = False

    def __enter__(self) -> None:
        if self._held:
            raise trio.BusyResourceError(self._message)
        self._held = True

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._held = False


class _Chunk:
    """The bytes of one write, readable from ``ready_at`` on."""

    __slots__ = ("boundary", "data", "ready_at")

    def __init__(self, data: bytes, ready_at: float, boundary: bool) -> None:
        self.data = data
        self.ready_at = ready_at
        # True if the end of this chunk is the end of a send_all call.
        self.boundary = boundary


class _Pipe:
    """One direction of a connection: a FIFO of chunks plus its state flags."""

    __slots__ = (
        "buffered",
        "chunks",
        "conn",
        "eof_at",
        "fin_sent",
        "frozen_until",
        "head_offset",
        "label",
        "last_ready_at",
        "lot",
        "reader_closed",
        "rng",
    )

    def __init__(self, conn: _Connection, label: str, rng: SimRandom) -> None:
        self.conn = conn
        self.label = label
        self.rng = rng
        self.chunks: collections.deque[_Chunk] = collections.deque()
        self.head_offset = 0  # bytes of chunks[0] already consumed
        self.buffered = 0  # unread bytes in chunks
        self.last_ready_at = _NEVER
        self.frozen_until = _NEVER
        self.fin_sent = False  # the writer called send_eof() or aclose()
        self.eof_at: float | None = None  # when the FIN becomes visible; None: no FIN queued
        self.reader_closed = False  # the reading end was closed
        # Parked here: the reader waiting for data, writers waiting for room.
        self.lot = trio.lowlevel.ParkingLot()

    def discard(self) -> None:
        """Drop every buffered byte (reset, or the reader went away)."""
        self.chunks.clear()
        self.head_offset = 0
        self.buffered = 0

    def wake(self) -> None:
        """Wake every task parked on this pipe so it re-examines the state."""
        self.lot.unpark_all()


class _Connection:
    """Both directions of one simulated TCP connection, and its two ends."""

    def __init__(self, net: SimNet, conn_id: str, address: str) -> None:
        self.net = net
        self.conn_id = conn_id
        self.address = address
        self.ab = _Pipe(self, "a>b", net.rng.child("net", conn_id, "a>b"))
        self.ba = _Pipe(self, "b>a", net.rng.child("net", conn_id, "b>a"))
        self.is_reset = False
        self.blackholed = False
        self.closed_ends = 0
        client_name = f"client/{conn_id}"
        self.client = SimStream(self, "a", tx=self.ab, rx=self.ba, local=client_name, remote=address)
        self.server = SimStream(self, "b", tx=self.ba, rx=self.ab, local=address, remote=client_name)
        #: this connection in the net's pcap file (None: no pcap)
        self.wire: TcpConversation | None = None
        if net.pcap is not None:
            host, _, port = address.rpartition(":")
            server = (host, int(port)) if host and port.isdigit() else (address, 1)
            self.wire = net.pcap.connection(("client", 0), server, net._now())  # (port 0: the writer picks one)


class SimStream(trio.abc.HalfCloseableStream):
    """One end of a simulated TCP connection (created by :class:`SimNet`).

    Attributes:
        conn_id: the connection's id (``"c1"``, ``"c2"``, ... in creation order).
        side: ``"a"`` for the connecting end, ``"b"`` for the accepted end.
        local: this end's name (the listener address for the accepted end,
            ``"client/<conn_id>"`` for the connecting end).
        remote: the peer's name.
        address: the listener address the connection was made to.
    """

    def __init__(self, conn: _Connection, side: str, *, tx: _Pipe, rx: _Pipe, local: str, remote: str) -> None:
        """Internal: use :meth:`SimNet.connect` and :meth:`SimListener.accept`."""
        self._conn = conn
        self._net = conn.net
        self._tx = tx
        self._rx = rx
        self._closed = False
        self._send_conflict = _ConflictDetector("another task is using this SimStream's send side")
        self._receive_conflict = _ConflictDetector("another task is already receiving on this SimStream")
        self.conn_id = conn.conn_id
        self.side = side
        self.local = local
        self.remote = remote
        self.address = conn.address

    def __repr__(self) -> str:
        """Show the connection id, the side and the state."""
        state = "closed" if self._closed else "reset" if self._conn.is_reset else "open"
        return f"<SimStream {self.conn_id}:{self.side} {self.local}->{self.remote} {state}>"

    # -- state inspection ----------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` was called on this end."""
        return self._closed

    @property
    def is_reset(self) -> bool:
        """True once the connection was reset (by a fault, :meth:`reset` or ``reset_all``)."""
        return self._conn.is_reset

    @property
    def blackholed(self) -> bool:
        """True once the connection went half-open."""
        return self._conn.blackholed

    # -- internal checks -----------------------------------------------------

    def _check_send(self) -> bool:
        """Raise if sending is impossible; return False if writes are to be dropped."""
        if self._closed:
            raise trio.ClosedResourceError("this SimStream was closed")
        if self._tx.fin_sent:
            raise trio.ClosedResourceError("send_eof() was called on this SimStream")
        if self._conn.is_reset:
            raise trio.BrokenResourceError(f"connection {self.conn_id} was reset")
        if self._conn.blackholed:
            return False
        if self._tx.reader_closed:
            raise trio.BrokenResourceError(f"peer of connection {self.conn_id} closed its end")
        return True

    def _check_receive(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("this SimStream was closed")
        if self._conn.is_reset:
            raise trio.BrokenResourceError(f"connection {self.conn_id} was reset")

    # -- trio.abc.SendStream -------------------------------------------------

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Queue ``data`` for delivery to the peer, subject to the fault knobs.

        Returns once every byte is in the (possibly bounded) send buffer.  If
        cancelled part-way (a torn write, or while waiting for buffer room) a
        prefix of ``data`` may already be on the wire, as trio's contract allows.
        """
        with self._send_conflict:
            await trio.lowlevel.checkpoint()
            if not self._check_send() or not data:
                if data:
                    self._net._record(self._conn, self._tx.label, "drop", len(data))
                return
            payload = bytes(data)
            net = self._net
            pipe = self._tx
            rng = pipe.rng
            faults = net.faults
            # Fixed draw order, every draw always taken: see SimRandom.
            # (rng.random() < p is SimRandom.chance, without its call: this runs per write.)
            reset = rng.random() < faults.reset_prob
            blackhole = rng.random() < faults.blackhole_prob
            stall = rng.random() < faults.stall_prob
            torn = rng.random() < faults.torn_write_prob
            if reset:
                net._reset(self._conn, f"{self.side}:send-fault")
                raise trio.BrokenResourceError(f"connection {self.conn_id} was reset (fault)")
            if blackhole:
                net._blackhole(self._conn)
                net._record(self._conn, pipe.label, "drop", len(payload))
                return
            now = trio.current_time()
            if stall:
                until = now + rng.expo(faults.stall_mean, 10.0 * faults.stall_mean)
                pipe.frozen_until = max(pipe.frozen_until, until)
                net._count("stalls")
                net._record(self._conn, pipe.label, "stall", pipe.frozen_until)
            view = memoryview(payload)
            tear_at = rng.int_between(1, len(payload) - 1) if torn and len(payload) >= 2 else 0
            while view:
                size = tear_at or len(view)
                capacity = net.send_buffer
                if capacity is not None:
                    while pipe.buffered >= capacity:
                        await pipe.lot.park()
                        if not self._check_send():
                            net._record(self._conn, pipe.label, "drop", len(view))
                            return
                    size = min(size, capacity - pipe.buffered)
                net._write(pipe, bytes(view[:size]), boundary=size == len(view))
                view = view[size:]
                if tear_at:
                    tear_at = 0
                    net._count("torn_writes")
                    await trio.sleep(net._latency(rng))
                    if not self._check_send():
                        net._record(self._conn, pipe.label, "drop", len(view))
                        return

    async def wait_send_all_might_not_block(self) -> None:
        """Wait until the send buffer has room (returns at once if unbounded)."""
        with self._send_conflict:
            await trio.lowlevel.checkpoint()
            if self._closed:
                raise trio.ClosedResourceError("this SimStream was closed")
            pipe = self._tx
            while True:
                capacity = self._net.send_buffer
                conn = self._conn
                if (
                    capacity is None
                    or pipe.buffered < capacity
                    or conn.is_reset
                    or conn.blackholed
                    or pipe.reader_closed
                    or pipe.fin_sent
                ):
                    return
                await pipe.lot.park()
                if self._closed:
                    raise trio.ClosedResourceError("this SimStream was closed")

    async def send_eof(self) -> None:
        """Half-close: the peer reads ``b""`` after the bytes already sent."""
        with self._send_conflict:
            await trio.lowlevel.checkpoint()
            if self._closed:
                raise trio.ClosedResourceError("this SimStream was closed")
            if self._tx.fin_sent:
                return
            if self._conn.is_reset:
                raise trio.BrokenResourceError(f"connection {self.conn_id} was reset")
            self._net._send_fin(self._tx)

    # -- trio.abc.ReceiveStream ----------------------------------------------

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Return between 1 and ``max_bytes`` bytes, or ``b""`` at end of stream."""
        if max_bytes is None:
            limit = DEFAULT_RECEIVE_SIZE
        else:
            limit = operator.index(max_bytes)
            if limit < 1:
                raise ValueError("max_bytes must be >= 1")
        with self._receive_conflict:
            await trio.lowlevel.checkpoint()
            self._check_receive()
            net = self._net
            pipe = self._rx
            if pipe.rng.random() < net.faults.reset_prob:  # SimRandom.chance, inlined
                net._reset(self._conn, f"{self.side}:receive-fault")
                raise trio.BrokenResourceError(f"connection {self.conn_id} was reset (fault)")
            while True:
                now = trio.current_time()
                if pipe.chunks:
                    deadline = pipe.chunks[0].ready_at
                    if deadline <= now:
                        return net._deliver(pipe, limit, now)
                elif pipe.eof_at is not None:
                    deadline = pipe.eof_at
                    if deadline <= now:
                        net._record(self._conn, pipe.label, "eof", 0)
                        if self._conn.wire is not None:
                            self._conn.wire.fin(_DIRECTION[pipe.label], now)
                        return b""
                else:
                    deadline = math.inf
                if deadline == math.inf:  # the same wait without a cancel scope that never fires
                    await pipe.lot.park()
                else:
                    with trio.move_on_at(deadline):
                        await pipe.lot.park()
                self._check_receive()

    # -- closing -------------------------------------------------------------

    def reset(self) -> None:
        """Inject an RST from this end: both ends break, buffered bytes are lost."""
        self._net._reset(self._conn, f"{self.side}:reset")

    async def aclose(self) -> None:
        """Close this end (a FIN to the peer); idempotent, and closes even if cancelled."""
        self._net._close_end(self)
        await trio.lowlevel.checkpoint()


class SimListener(trio.abc.Listener[SimStream]):
    """Accepts connections made with :meth:`SimNet.connect` to :attr:`address`."""

    def __init__(self, net: SimNet, address: str) -> None:
        """Internal: use :meth:`SimNet.listen`."""
        self._net = net
        self.address = address
        self._backlog: collections.deque[SimStream] = collections.deque()
        self._lot = trio.lowlevel.ParkingLot()
        self._closed = False

    def __repr__(self) -> str:
        """Show address and state."""
        return f"<SimListener {self.address} {'closed' if self._closed else 'open'}>"

    @property
    def closed(self) -> bool:
        """True once the listener was closed (new connects are refused)."""
        return self._closed

    async def accept(self) -> SimStream:
        """Return the server end of the next incoming connection."""
        await trio.lowlevel.checkpoint()
        while True:
            if self._closed:
                raise trio.ClosedResourceError("this SimListener was closed")
            if self._backlog:
                stream = self._backlog.popleft()
                self._net._record(stream._conn, "b", "accept", 0)
                return stream
            await self._lot.park()

    async def aclose(self) -> None:
        """Stop listening; pending unaccepted connections are reset."""
        self._net._close_listener(self)
        await trio.lowlevel.checkpoint()


class SimNet:
    """The simulated network: listeners by address, connections, faults, trace.

    Args:
        rng: root random stream; the net uses ``rng.child("net", ...)`` streams.
        faults: fault knobs; the :attr:`faults` attribute may be replaced at
            any time and applies to existing connections from their next
            operation on.
        trace: event log receiving every send, delivery, EOF, reset, etc.
        send_buffer: if set, the maximum number of unread bytes in flight per
            direction (``send_all`` blocks when it is full); ``None`` (default)
            means unbounded.

    Attributes:
        stats: counters (``connections``, ``refused``, ``resets``,
            ``bytes_sent``, ``bytes_delivered``, ``partial_reads``, ``trickles``,
            ``boundary_splits``, ``stalls``, ``torn_writes``, ``blackholes``);
            every increment is mirrored to ``trace.probe("net.<name>")``.
    """

    def __init__(self, rng: SimRandom, faults: Faults, trace: Trace, *, send_buffer: int | None = None) -> None:
        """Create an empty network."""
        if send_buffer is not None and send_buffer < 1:
            raise ValueError("send_buffer must be >= 1 or None")
        self.rng = rng
        self.faults = faults
        self.trace = trace
        self.send_buffer = send_buffer
        self.stats: collections.Counter[str] = collections.Counter()
        self._listeners: dict[str, SimListener] = {}
        self._open: dict[str, _Connection] = {}
        self._connect_rngs: dict[str, SimRandom] = {}
        self._next_id = 0
        #: the pcapng file the connections go to (:data:`PCAP` when the net was made)
        self.pcap: PcapWriter | None = PCAP.get()

    # -- public API ----------------------------------------------------------

    def heal(self) -> None:
        """Switch every fault off except latency (``faults = faults.healed()``)."""
        self.faults = self.faults.healed()
        self._record_net("heal")

    def listen(self, address: str) -> SimListener:
        """Start listening on ``address``; ``OSError(EADDRINUSE)`` if already taken."""
        if address in self._listeners:
            raise OSError(errno.EADDRINUSE, f"address already in use: {address!r}")
        listener = SimListener(self, address)
        self._listeners[address] = listener
        self._record_net("listen", address)
        return listener

    def is_listening(self, address: str) -> bool:
        """True if a listener is open on ``address``."""
        return address in self._listeners

    async def connect(self, address: str) -> SimStream:
        """Open a connection to ``address`` and return the client end.

        Waits one latency draw (a checkpoint even when zero), then raises
        ``ConnectionRefusedError`` if nobody listens or the refuse fault fires.
        The connection is queued for ``accept()``; the caller may send at once.
        """
        rng = self._connect_rngs.get(address)
        if rng is None:
            rng = self._connect_rngs[address] = self.rng.child("net", "connect", address)
        refuse = rng.chance(self.faults.connect_refuse_prob)
        await trio.sleep(self._latency(rng))
        listener = self._listeners.get(address)
        if listener is None or refuse:
            self._count("refused")
            self._record_net("refuse", address, "fault" if listener is not None else "nolistener")
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"connection refused: {address!r}")
        self._next_id += 1
        conn = _Connection(self, f"c{self._next_id}", address)
        self._open[conn.conn_id] = conn
        self._count("connections")
        self._record(conn, "a", "connect", address)
        listener._backlog.append(conn.server)
        listener._lot.unpark_all()
        opened = OPENED.get()
        if opened is not None:
            opened.append(conn.client)
        return conn.client

    def reset_all(self, address: str | None = None) -> int:
        """Reset every open connection (to ``address`` only, if given); return how many."""
        victims = [c for c in self._open.values() if address is None or c.address == address]
        for conn in victims:
            self._reset(conn, "reset_all")
        return len(victims)

    def close_listener(self, address: str) -> bool:
        """Close the listener on ``address`` (synchronously); False if there was none."""
        listener = self._listeners.get(address)
        if listener is None:
            return False
        self._close_listener(listener)
        return True

    def open_connections(self, address: str | None = None) -> list[str]:
        """Ids of connections that are neither reset nor closed at both ends."""
        return [c.conn_id for c in self._open.values() if address is None or c.address == address]

    # -- internals used by SimStream / SimListener ---------------------------

    def _count(self, name: str, n: int = 1) -> None:
        self.stats[name] += n
        self.trace.probe(f"net.{name}", n)

    @staticmethod
    def _now() -> float:
        """Trio's current time, or 0.0 when called outside a trio run (e.g. set-up code)."""
        try:
            return trio.current_time()
        except RuntimeError:
            return 0.0

    def _record(self, conn: _Connection, where: str, action: str, *fields: object) -> None:
        self.trace.record(self._now(), conn.conn_id, where, action, *fields)

    def _record_net(self, action: str, *fields: object) -> None:
        self.trace.record(self._now(), "net", action, *fields)

    def _latency(self, rng: SimRandom) -> float:
        faults = self.faults
        return faults.latency_min + rng.expo(faults.latency_mean, 10.0 * faults.latency_mean)

    def _write(self, pipe: _Pipe, data: bytes, *, boundary: bool) -> None:
        now = trio.current_time()
        ready_at = max(pipe.last_ready_at, now + self._latency(pipe.rng), pipe.frozen_until)
        pipe.last_ready_at = ready_at
        pipe.chunks.append(_Chunk(data, ready_at, boundary))
        pipe.buffered += len(data)
        self._count("bytes_sent", len(data))
        self.trace.record(now, pipe.conn.conn_id, pipe.label, "send", len(data), ready_at)
        pipe.wake()

    def _deliver(self, pipe: _Pipe, max_bytes: int, now: float) -> bytes:
        """Take the next read's bytes from the ready prefix of ``pipe``."""
        rng = pipe.rng
        faults = self.faults
        # SimRandom.chance, inlined (this runs per read)
        trickle = rng.random() < faults.trickle
        split = rng.random() < faults.boundary_split
        partial = rng.random() < faults.partial_read
        available = 0
        boundaries: list[int] = []
        offset = pipe.head_offset
        for chunk in pipe.chunks:
            if chunk.ready_at > now:
                break
            available += len(chunk.data) - offset
            offset = 0
            if chunk.boundary:
                boundaries.append(available)
            if available > max_bytes:
                break
        n = full = min(available, max_bytes)
        if trickle:
            n = 1
            self._count("trickles")
        elif split and boundaries:
            cut = rng.pick(boundaries) + rng.int_between(-1, 1)
            n = max(1, min(cut, full))
            self._count("boundary_splits")
        elif partial and full > 1:
            n = rng.int_between(1, full)
            if n < full:
                self._count("partial_reads")
        out = bytearray()
        while len(out) < n:
            chunk = pipe.chunks[0]
            start = pipe.head_offset
            take = min(n - len(out), len(chunk.data) - start)
            out += chunk.data[start : start + take]
            if start + take == len(chunk.data):
                pipe.chunks.popleft()
                pipe.head_offset = 0
            else:
                pipe.head_offset = start + take
        pipe.buffered -= n
        self._count("bytes_delivered", n)
        self.trace.record(now, pipe.conn.conn_id, pipe.label, "recv", n)
        if pipe.conn.wire is not None:
            pipe.conn.wire.send(_DIRECTION[pipe.label], out, now)
        pipe.wake()  # writers waiting for buffer room
        return bytes(out)

    def _send_fin(self, pipe: _Pipe) -> None:
        """Mark ``pipe``'s writer as finished and queue the FIN if it can arrive."""
        pipe.fin_sent = True
        conn = pipe.conn
        if conn.is_reset or conn.blackholed or pipe.reader_closed:
            return
        now = trio.current_time()
        eof_at = max(pipe.last_ready_at, now + self._latency(pipe.rng), pipe.frozen_until)
        pipe.last_ready_at = eof_at
        pipe.eof_at = eof_at
        self.trace.record(now, conn.conn_id, pipe.label, "fin", 0, eof_at)
        pipe.wake()

    def _close_end(self, stream: SimStream) -> None:
        if stream._closed:
            return
        stream._closed = True
        conn = stream._conn
        if not stream._tx.fin_sent:
            self._send_fin(stream._tx)
        rx = stream._rx
        rx.reader_closed = True
        if rx.buffered:
            self._record(conn, rx.label, "discard", rx.buffered)
            rx.discard()
        self._record(conn, stream.side, "close", 0)
        rx.wake()
        stream._tx.wake()
        conn.closed_ends += 1
        if conn.closed_ends == 2:
            self._open.pop(conn.conn_id, None)

    def _reset(self, conn: _Connection, cause: str) -> None:
        if conn.is_reset or conn.closed_ends == 2:
            return
        conn.is_reset = True
        lost = conn.ab.buffered + conn.ba.buffered
        for pipe in (conn.ab, conn.ba):
            pipe.discard()
            pipe.eof_at = None
        self._count("resets")
        self._record(conn, cause, "rst", lost)
        if conn.wire is not None:  # from the side that reset ("a": the client), else from the server
            conn.wire.reset("c2s" if cause.startswith("a:") else "s2c", self._now())
        conn.ab.wake()
        conn.ba.wake()
        self._open.pop(conn.conn_id, None)

    def _blackhole(self, conn: _Connection) -> None:
        if conn.blackholed:
            return
        conn.blackholed = True
        now = trio.current_time()
        for pipe in (conn.ab, conn.ba):
            if pipe.eof_at is not None and pipe.eof_at > now:
                pipe.eof_at = None  # the FIN never arrives
        self._count("blackholes")
        self._record(conn, "-", "blackhole", 0)

    def _close_listener(self, listener: SimListener) -> None:
        if listener._closed:
            return
        listener._closed = True
        if self._listeners.get(listener.address) is listener:
            del self._listeners[listener.address]
        self._record_net("unlisten", listener.address, len(listener._backlog))
        while listener._backlog:
            self._reset(listener._backlog.popleft()._conn, "unlisten")
        listener._lot.unpark_all()


#: A pipe's label as a direction of the pcap's conversation ("a" connects: the client).
_DIRECTION = {"a>b": "c2s", "b>a": "s2c"}
