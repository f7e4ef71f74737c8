"""The segment store speaking the 2017 draft dialect (specs/pravega-draft-2017/README.md §5-§9).

It is the same :class:`~refwire.pravega.server.SegmentStoreServer` -- one store,
one durable log -- served on a listener of its own: ``DraftFrontend(store)``
handles draft connections.

* **Ack levels** (§6.1): a ConnectionId's level in a segment is kept as the
  segment attribute :func:`level_attribute` ``(connection_id)`` -- a UUID derived
  from the ConnectionId (version 5, so it never equals a random version-4 writer
  id of today's dialect, whose writer attributes hold event numbers).  It is
  written by the same log record as the block's data, so it is persisted
  atomically with it, and the store only appends a block when the level still
  equals the block's Begin offset (compare-and-set, §6.5).
* **Replies** (§6.5, §7): in the order of the requests that caused them, each
  once what it reports is durable; a server reply longer than
  ``reply_part_size`` goes out as partial messages (§5 "Sending").  Reads at
  the tail park (at most ``max_parked_reads`` per connection; beyond, the
  oldest is answered empty at once) until data arrives, the segment is sealed
  or ``tail_wait`` passes.
* **Flow control** (§6.5): the connection is not read while more than
  ``pause_above`` bytes of completed blocks await durability; reading resumes
  below ``resume_below``.
* The draft has **no error replies** (§9, D15): what today's protocol answers
  with NoSuchSegment or SegmentIsSealed closes a draft connection, with a
  :class:`LocalProtocolError` naming the field (kept in :attr:`DraftFrontend.errors`).
"""

from __future__ import annotations

import logging
import math
import uuid
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Any, Final

import attrs
import trio

from ...admission import ServerBudget
from ...drivers import DEFAULT_MAX_CONNECTIONS, PROTOCOL_ERROR, RESET, WRITE_FAILED, WRITE_TIMEOUT, Pump, StreamServer
from ...errors import LocalProtocolError, ProtocolError
from ...logs import limited
from ...wire import Limits, encode_mutf8
from ..budget import parked_cost, shares
from ..errors import IllegalArgumentError, NoSuchSegmentError, SegmentSealedError, SegmentTruncatedError, StoreError
from ..frames import HEADER, NULL_VALUE, Command
from ..server import ReplyRoom, SegmentStoreServer
from .connection import DEFAULT_LIMITS, REPLY_PART_SIZE, ServerConnection
from .events import BlockAppend, KeepAliveReceived, RequestReceived
from .frames import PROTOCOL, AppendSetup, ReadSegment, SegmentRead, SetupAppend

__all__ = ["LEVEL_NAMESPACE", "DraftConfig", "DraftFrontend", "level_attribute"]

log = logging.getLogger("refwire.pravega.draft2017")

#: The namespace of :func:`level_attribute` (a fixed, arbitrary UUID).
LEVEL_NAMESPACE: Final = uuid.UUID("5d1c6f0e-7a1b-4c55-9a2e-2017d4af7001")


def level_attribute(connection_id: uuid.UUID) -> uuid.UUID:
    """The segment attribute holding ``connection_id``'s ack level (§6.1)."""
    return uuid.uuid5(LEVEL_NAMESPACE, connection_id.hex)


@attrs.frozen(kw_only=True)
class DraftConfig:
    """:class:`DraftFrontend` settings (specs/pravega-draft-2017/README.md §5-§7)."""

    #: ``max_connection_memory`` is the per-connection budget (§11, :mod:`refwire.pravega.budget`)
    limits: Limits = DEFAULT_LIMITS
    #: connections served at once; one past it is closed at once (None: no limit)
    max_connections: int | None = DEFAULT_MAX_CONNECTIONS
    #: replies longer than this go out as partial messages of this many data bytes (§5)
    reply_part_size: int = REPLY_PART_SIZE
    tail_wait: float | None = 10.0  #: §7: a parked read is answered empty after this long (None = never)
    max_parked_reads: int = 1000  #: §7, per connection
    pause_above: int = 128 * 1024  #: §6.5: stop reading above this many unacked block bytes
    resume_below: int = 64 * 1024  #: §6.5: resume below this many
    max_queued_replies: int = 4096
    receive_size: int = 256 * 1024
    max_errors_kept: int = 100
    #: a frame begun and still incomplete after this many seconds fails the connection
    #: (a peer trickling bytes cannot hold it for ever; between frames idling is as before); None = never
    frame_timeout: float | None = 30.0
    #: seconds without a byte received before a connection is closed (None: never, the default, as
    #: with the real server; it counts from the last byte, so a client waiting on a parked read idles too)
    idle_timeout: float | None = None


class _Closing(Exception):
    """Close the connection after what is owed so far (§1.1)."""

    def __init__(self, error: LocalProtocolError) -> None:
        super().__init__(str(error))
        self.error = error


@attrs.define(eq=False)
class _Parked:
    cmd: ReadSegment
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    done: bool = False
    cost: int = 0  #: what it holds (§11), counted in ``_Conn.parked_bytes`` until it is answered


class _Conn:
    """The per-connection state of :meth:`DraftFrontend.handle_stream`."""

    def __init__(self, front: DraftFrontend, stream: trio.abc.Stream) -> None:
        cfg = front.config
        self.front = front
        self.stream = stream
        self.machine = front.connection_class(cfg.limits, reply_part_size=cfg.reply_part_size, frame_timeout=cfg.frame_timeout)
        if cfg.idle_timeout is not None:
            self.machine.set_idle_timeout(cfg.idle_timeout, now=trio.current_time())
        share = shares(cfg.limits)
        self.pump = Pump(
            stream,
            self.machine,
            self.on_event,
            receive_size=cfg.receive_size,
            write_timeout=None,
            max_unwritten=share.replies,
            # what the machine holds and the parked reads (§11); blocks the store took are the store's
            admission=front.budget.admission(lambda: self.machine.holds or bool(self.parked)),
        )
        #: §11: replies owed past the reply share stop reading and answering
        self.room = ReplyRoom(self.pump, share.replies, lambda: self.machine.queued_bytes)
        self.parked_room = share.parked
        self.parked_bytes = 0
        self.unacked = 0  #: bytes of completed blocks not yet durable and acked
        self.released: deque[tuple[int, int]] = deque()  #: (log position, block bytes) awaiting their DataAppended
        self.resume = trio.Event()
        self.held = trio.Event()  #: set when a reply waits for durability
        self.parked: OrderedDict[int, _Parked] = OrderedDict()
        self.next_read = 0
        self.closing = False
        self.nursery: trio.Nursery | None = None

    async def on_event(self, ev: object) -> None:
        if self.closing:
            return
        try:
            await self.front._on_event(self, ev)
        except _Closing as closing:
            self.close(closing.error)
        if not self.closing:
            await self.room.wait()  # §11: nothing more is read while the replies owed exceed their share

    def unpark(self, p: _Parked) -> None:
        """``p`` is answered (or being answered): its cost leaves the parked share."""
        self.parked_bytes -= p.cost
        p.cost = 0

    def close(self, error: LocalProtocolError) -> None:
        """Stop reading; the replies owed so far still go out (§1.1)."""
        self.front.errors.append(error)
        limited(log, "protocol-error", "pravega draft: closing connection: %s", error, level=logging.INFO)
        self.closing = True
        self.pump.stop()

    async def reply(self, cmd: Command, after: int = 0) -> None:
        """Send a reply: it leaves after the replies before it, once ``after`` is durable."""
        self.machine.send(cmd, now=trio.current_time(), after=after)
        await self.sent()

    async def sent(self) -> None:
        """Wake the writer (the pump's, or the replier once the reply is durable)."""
        if self.machine.held_until() is not None:
            self.held.set()  # the replier writes it, once durable
            return
        self.acked(None)  # every DataAppended so far is on its way
        self.pump.kick()

    async def replier(self) -> None:
        """Releases held replies as the log becomes durable (§6.5), flow control with them."""
        store = self.front.server
        machine = self.machine
        while True:
            lsn = machine.held_until()
            if lsn is None:
                self.held = trio.Event()
                await self.held.wait()
                continue
            await store.wait_durable(lsn)
            machine.durable(lsn, now=trio.current_time(), limit=1)
            await self.pump.flush()
            if self.pump.ended in (RESET, WRITE_FAILED, WRITE_TIMEOUT):  # the replies are lost
                self.released.clear()
                self.unacked = 0
                self.resume.set()  # a reader paused by flow control ends too
                return
            self.acked(lsn)

    def acked(self, lsn: int | None) -> None:
        """The DataAppended of the blocks stored up to ``lsn`` (None: all) are written."""
        while self.released and (lsn is None or self.released[0][0] <= lsn):
            self.unacked -= self.released.popleft()[1]
        if self.unacked < self.front.config.resume_below:
            self.resume.set()

    async def drain(self) -> None:
        """After the pump: the held replies, each once durable, then the end."""
        store = self.front.server
        machine = self.machine
        while True:
            data = machine.data_to_send()
            if data:
                await self.stream.send_all(data)
            lsn = machine.held_until()
            if lsn is None:
                return
            await store.wait_durable(lsn)
            machine.durable(lsn, now=trio.current_time(), limit=1)


class DraftFrontend:
    """Serves the draft dialect for ``store``."""

    #: The machine each connection runs (a subclass changes the store's wire
    #: behaviour: the conformance tests' deliberately broken stores).
    connection_class: type[ServerConnection] = ServerConnection

    def __init__(self, store: SegmentStoreServer, *, config: DraftConfig = DraftConfig()) -> None:
        self.server = store
        #: the store's memory budget, shared with its other listeners (its pool, this dialect's charge)
        self.budget = ServerBudget(attrs.evolve(config.limits, max_server_memory=store.budget.pool.capacity), store.budget.pool)
        self.config = config = attrs.evolve(config, limits=self.budget.limits)
        self._stream_server = StreamServer(
            self.handle_stream, name="pravega-draft-2017", max_connections=config.max_connections
        )
        self.stats: dict[str, int] = {
            "connections": 0,
            "blocks": 0,
            "bytes": 0,
            "reads": 0,
            "parked_reads": 0,
            "evicted_reads": 0,
            "pauses": 0,
            "protocol_errors": 0,
            "closed_by_store": 0,
        }
        #: why connections were closed (protocol errors and refused requests), newest last
        self.errors: deque[ProtocolError] = deque(maxlen=config.max_errors_kept)
        self.transitions_seen: set[tuple[str, str, str]] = set()

    async def serve(
        self,
        listeners: Sequence[trio.abc.Listener[Any]],
        *,
        task_status: trio.TaskStatus[Sequence[trio.abc.Listener[Any]]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept draft connections on ``listeners`` (the store itself must be serving too, for durability)."""
        await self._stream_server.serve(listeners, task_status=task_status)

    async def shutdown(self, grace: float = 5.0) -> None:
        """Stop accepting, give open connections ``grace`` seconds, then close them."""
        await self._stream_server.shutdown(grace)

    def _level(self, segment: str, connection_id: uuid.UUID) -> int:
        value = self.server.store.writer_attribute(segment, level_attribute(connection_id))
        return 0 if value == NULL_VALUE else value

    # -- errors ----------------------------------------------------------------------
    def _refuse(self, reason: str, frame: str, field: str, offset: int | None) -> _Closing:
        self.stats["closed_by_store"] += 1
        return _Closing(LocalProtocolError(reason, protocol=PROTOCOL, frame=frame, field=field, offset=offset))

    def _read_error(self, cmd: ReadSegment, at: int | None, exc: StoreError) -> _Closing:
        seg_at = None if at is None else at + HEADER
        if isinstance(exc, NoSuchSegmentError):
            return self._refuse(f"ReadSegment: no such segment {cmd.segment!r}", "ReadSegment", "segment", seg_at)
        off_at = None if seg_at is None else seg_at + 2 + len(encode_mutf8(cmd.segment))
        return self._refuse(f"ReadSegment.offset {cmd.offset}: {exc}", "ReadSegment", "offset", off_at)

    # -- connection ---------------------------------------------------------------------
    async def handle_stream(self, stream: trio.abc.Stream) -> None:
        self.stats["connections"] += 1
        c = _Conn(self, stream)
        try:
            async with trio.open_nursery() as nursery:  # the replier and parked reads
                c.nursery = nursery
                nursery.start_soon(c.replier)
                nursery.start_soon(c.room.keeper)
                try:
                    ended = await c.pump.run()
                except ProtocolError as exc:
                    self.stats["protocol_errors"] += 1
                    self.errors.append(exc)
                    if "max_connection_memory" in str(exc):  # the operator's budget (§11): worth a warning
                        limited(log, "connection-memory", "pravega draft: closing connection: %s", exc)
                    else:
                        limited(log, "protocol-error", "pravega draft: closing connection: %s", exc, level=logging.INFO)
                    ended = PROTOCOL_ERROR
                c.closing = True
                nursery.cancel_scope.cancel()  # parked reads end with the connection
            if ended not in (RESET, WRITE_FAILED, WRITE_TIMEOUT):
                await c.drain()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as group:
            log.debug("pravega draft: connection lost: %s", group.exceptions[0])
        finally:
            c.pump.release()
            self.transitions_seen |= c.machine.transitions_seen

    async def _on_event(self, c: _Conn, ev: object) -> None:
        conn = c.machine
        cfg = self.config
        if isinstance(ev, BlockAppend):
            lsn = self._append(ev)
            self.server._dirty.set()
            c.unacked += len(ev.data)
            c.released.append((lsn, len(ev.data)))
            conn.block_stored(ev, now=trio.current_time(), after=lsn)
            await c.sent()
            if c.unacked > cfg.pause_above:  # §6.5 flow control: nothing is read meanwhile
                self.stats["pauses"] += 1
                while c.unacked >= cfg.resume_below and c.pump.ended is None:
                    c.resume = trio.Event()
                    await c.resume.wait()
        elif isinstance(ev, RequestReceived):
            await self._request(c, ev.command, ev.offset)
        elif isinstance(ev, KeepAliveReceived):
            await c.sent()  # the machine queued the echo in reply order
        # ConnectionClosed: the pump ends

    async def _request(self, c: _Conn, cmd: Command, at: int | None) -> None:
        st = self.server.store
        if isinstance(cmd, SetupAppend):
            try:
                level = self._level(cmd.segment, cmd.connection_id)
            except NoSuchSegmentError:
                raise self._refuse(
                    f"SetupAppend: no such segment {cmd.segment!r}", "SetupAppend", "segment", None if at is None else at + 24
                ) from None
            reply = AppendSetup(segment=cmd.segment, connection_id=cmd.connection_id, connection_offset_ack_level=level)
            # The level may include blocks not yet durable: answer once they are.
            await c.reply(reply, st.written_lsn)
        elif isinstance(cmd, ReadSegment):
            self.stats["reads"] += 1
            try:
                result = st.read(cmd.segment, cmd.offset, cmd.suggested_length)
            except (NoSuchSegmentError, SegmentTruncatedError, IllegalArgumentError) as exc:
                raise self._read_error(cmd, at, exc) from None
            if result is not None:
                await c.reply(self._segment_read(cmd, result.data, result.at_tail, result.end_of_segment))
                return
            await self._park(c, cmd, at)

    def _segment_read(self, cmd: ReadSegment, data: bytes, at_tail: bool, eos: bool) -> SegmentRead:
        return SegmentRead(segment=cmd.segment, offset=cmd.offset, at_tail=at_tail, end_of_segment=eos, data=data)

    async def _park(self, c: _Conn, cmd: ReadSegment, at: int | None) -> None:
        """§7: a read at the tail of an unsealed segment waits; beyond ``max_parked_reads``,
        or past the parked share of the budget (§11), the oldest is answered empty at once; a
        read that still finds no room (reads woken and waiting to reply hold it) is answered
        empty itself."""
        self.stats["parked_reads"] += 1
        cost = parked_cost(cmd.segment)
        while c.parked and (len(c.parked) >= self.config.max_parked_reads or c.parked_bytes + cost > c.parked_room):
            _key, oldest = c.parked.popitem(last=False)
            oldest.done = True
            oldest.scope.cancel()
            c.unpark(oldest)
            self.stats["evicted_reads"] += 1
            await c.reply(self._segment_read(oldest.cmd, b"", True, False))
        if c.parked_bytes + cost > c.parked_room:
            self.stats["evicted_reads"] += 1
            await c.reply(self._segment_read(cmd, b"", True, False))
            return
        p = _Parked(cmd, cost=cost)
        c.parked_bytes += cost
        key = c.next_read
        c.next_read += 1
        c.parked[key] = p
        assert c.nursery is not None
        c.nursery.start_soon(self._parked_read, c, key, p, at)

    async def _parked_read(self, c: _Conn, key: int, p: _Parked, at: int | None) -> None:
        try:
            await self._wait_parked(c, key, p, at)
        finally:
            c.unpark(p)

    async def _wait_parked(self, c: _Conn, key: int, p: _Parked, at: int | None) -> None:
        store = self.server
        cmd = p.cmd
        wait = self.config.tail_wait
        deadline = math.inf if wait is None else trio.current_time() + wait
        reply: SegmentRead | None = None
        with p.scope:
            while reply is None:
                ev = store._wakeups.setdefault(cmd.segment, trio.Event())
                with trio.move_on_at(deadline) as timer:
                    await ev.wait()
                if p.done:
                    return
                if timer.cancelled_caught:
                    reply = self._segment_read(cmd, b"", True, False)
                    break
                with trio.move_on_at(deadline) as timer:
                    await c.room.wait()  # §11: the data is read once the client takes what it is owed
                if p.done:
                    return
                if timer.cancelled_caught:
                    reply = self._segment_read(cmd, b"", True, False)
                    break
                try:
                    result = store.store.read(cmd.segment, cmd.offset, cmd.suggested_length)
                except (NoSuchSegmentError, SegmentTruncatedError, IllegalArgumentError) as exc:
                    c.parked.pop(key, None)
                    p.done = True
                    if not c.closing:
                        c.close(self._read_error(cmd, at, exc).error)
                    return
                if result is not None:
                    reply = self._segment_read(cmd, result.data, result.at_tail, result.end_of_segment)
        if p.done or reply is None:
            return
        p.done = True
        c.parked.pop(key, None)
        if not c.closing:
            await c.reply(reply)

    def _append(self, ev: BlockAppend) -> int:
        """Store a block with its new level, compare-and-set on the old one (§6.5)."""
        st = self.server.store
        try:
            seg = st.get(ev.segment)
            if seg.sealed:
                raise SegmentSealedError(ev.segment)
            level = self._level(ev.segment, ev.connection_id)
            if level != ev.previous_level:
                raise self._refuse(
                    f"ConnectionId {ev.connection_id} is at level {level} in {ev.segment!r}, the block starts at "
                    f"{ev.previous_level} (written by another connection meanwhile)",
                    "EndAppendBlock",
                    "connection_offset",
                    None,
                )
            if not ev.data:  # an empty block: nothing to write, the level is unchanged (§6.3)
                return st.written_lsn
            lsn, _length = st.append(
                ev.segment,
                ev.data,
                writer_id=level_attribute(ev.connection_id),
                event_number=ev.level,
                now=self.server._time_ms(),
            )
        except (SegmentSealedError, NoSuchSegmentError, StoreError) as exc:
            raise self._refuse(f"append to {ev.segment!r} refused: {exc}", "EndAppendBlock", "(store)", None) from None
        self.stats["blocks"] += 1
        self.stats["bytes"] += len(ev.data)
        return lsn
