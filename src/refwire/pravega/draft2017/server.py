"""The segment store speaking the 2017 draft dialect (specs/pravega-draft-2017/README.md §5-§7).

It is the same :class:`~refwire.pravega.server.SegmentStoreServer` -- one store,
one durable log -- served on a listener of its own: ``DraftFrontend(store)``
handles draft connections.  A ConnectionId's ack level is kept in the segment
as the writer attribute of that id, appended atomically with the block's data,
so ``AppendSetup`` after a crash says exactly what is stored.

The draft has no error replies: what today's protocol answers with
NoSuchSegment or SegmentIsSealed closes a draft connection, with a log line.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from ...drivers import StreamServer
from ...errors import ProtocolError
from ..codec import NULL_VALUE
from ..server import SegmentStoreServer
from ..store import IllegalArgumentError, NoSuchSegmentError, SegmentSealedError, SegmentTruncatedError, StoreError
from .commands import AppendSetup, ReadSegment, SegmentRead, SetupAppend
from .connection import (
    DEFAULT_LIMITS,
    BlockAppend,
    ConnectionClosed,
    KeepAliveReceived,
    RequestReceived,
    ServerConnection,
    split_message,
)

__all__ = ["DraftConfig", "DraftFrontend"]

log = logging.getLogger("refwire.pravega.draft2017")
_CLOSE = -1  # the reply queue's "flush, then close" marker


@attrs.frozen(kw_only=True)
class DraftConfig:
    #: send replies larger than this as partial messages of this size (None = never split)
    split_replies_over: int | None = 256 * 1024
    tail_wait: float | None = 10.0
    max_queued_replies: int = 4096
    receive_size: int = 256 * 1024


class DraftFrontend:
    """Serves the draft dialect for ``store``."""

    def __init__(self, store: SegmentStoreServer, *, config: DraftConfig = DraftConfig()) -> None:
        self.server = store
        self.config = config
        self._stream_server = StreamServer(self.handle_stream, name="pravega-draft-2017")
        self.stats: dict[str, int] = {
            "connections": 0,
            "blocks": 0,
            "bytes": 0,
            "reads": 0,
            "protocol_errors": 0,
            "closed_by_store": 0,
        }
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
        await self._stream_server.shutdown(grace)

    def _level(self, segment: str, connection_id: Any) -> int:
        value = self.server.store.writer_attribute(segment, connection_id)
        return 0 if value == NULL_VALUE else value

    def _reply_bytes(self, data: bytes) -> bytes:
        limit = self.config.split_replies_over
        if limit is None or len(data) <= limit:
            return data
        return b"".join(split_message(data, list(range(limit, len(data), limit))))

    async def handle_stream(self, stream: trio.abc.Stream) -> None:
        self.stats["connections"] += 1
        conn = ServerConnection(DEFAULT_LIMITS)
        send_q, recv_q = trio.open_memory_channel[tuple[int, bytes]](self.config.max_queued_replies)
        lock = trio.Lock()
        store = self.server

        async def replier() -> None:
            async for lsn, data in recv_q:
                if lsn == _CLOSE:
                    nursery.cancel_scope.cancel()  # parked reads end with the connection
                    return
                await store.wait_durable(lsn)
                async with lock:
                    await stream.send_all(data)

        async def queue(data: bytes, lsn: int = 0) -> None:
            try:
                await send_q.send((lsn, data))
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                pass

        async def read(cmd: ReadSegment, *, parked: bool = False) -> None:
            deadline = math.inf if self.config.tail_wait is None else trio.current_time() + self.config.tail_wait
            while True:
                try:
                    result = store.store.read(cmd.segment, cmd.offset, cmd.suggested_length)
                except (NoSuchSegmentError, SegmentTruncatedError, IllegalArgumentError) as exc:
                    log.info("pravega draft: closing: read %s at %d: %s", cmd.segment, cmd.offset, exc)
                    self.stats["closed_by_store"] += 1
                    await queue(b"", _CLOSE)
                    return
                if result is not None:
                    reply = SegmentRead(
                        segment=cmd.segment,
                        offset=cmd.offset,
                        at_tail=result.at_tail,
                        end_of_segment=result.end_of_segment,
                        data=result.data,
                    )
                    await queue(self._reply_bytes(reply.encode()))
                    return
                ev = store._wakeups.setdefault(cmd.segment, trio.Event())
                with trio.move_on_at(deadline) as scope:
                    await ev.wait()
                if scope.cancelled_caught:
                    empty = SegmentRead(segment=cmd.segment, offset=cmd.offset, at_tail=True, end_of_segment=False, data=b"")
                    await queue(empty.encode())
                    return

        nursery: trio.Nursery
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(replier)
                try:
                    await self._read_loop(stream, conn, queue, nursery, read)
                finally:
                    await queue(b"", _CLOSE)
                    send_q.close()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as group:
            log.debug("pravega draft: connection lost: %s", group.exceptions[0])
        finally:
            self.transitions_seen |= conn.transitions_seen

    async def _read_loop(
        self, stream: trio.abc.Stream, conn: ServerConnection, queue: Any, nursery: trio.Nursery, read: Any
    ) -> None:
        store = self.server
        while True:
            try:
                data = await stream.receive_some(self.config.receive_size)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                conn.connection_lost()
                data = b""
            conn.receive_data(data)
            while True:
                try:
                    ev = conn.next_event()
                except ProtocolError as exc:
                    self.stats["protocol_errors"] += 1
                    log.info("pravega draft: closing connection: %s", exc)
                    return
                if isinstance(ev, BlockAppend):
                    lsn = self._append(ev)
                    if lsn is None:
                        return
                    store._dirty.set()
                    await queue(conn.block_stored(ev), lsn)
                elif isinstance(ev, RequestReceived):
                    cmd = ev.command
                    if isinstance(cmd, SetupAppend):
                        try:
                            level = self._level(cmd.segment, cmd.connection_id)
                        except NoSuchSegmentError:
                            log.info("pravega draft: closing: SetupAppend for missing segment %r", cmd.segment)
                            self.stats["closed_by_store"] += 1
                            return
                        reply = AppendSetup(
                            segment=cmd.segment, connection_id=cmd.connection_id, connection_offset_ack_level=level
                        )
                        await queue(conn.send(reply))
                    elif isinstance(cmd, ReadSegment):
                        self.stats["reads"] += 1
                        nursery.start_soon(read, cmd)
                elif isinstance(ev, KeepAliveReceived):
                    await queue(conn.data_to_send())
                elif isinstance(ev, ConnectionClosed):
                    return
                else:
                    break

    def _append(self, ev: BlockAppend) -> int | None:
        """Store a block with its new level; None if the store refused (close)."""
        st = self.server.store
        try:
            if self._level(ev.segment, ev.connection_id) != ev.previous_level:
                log.info("pravega draft: closing: ConnectionId %s was written elsewhere meanwhile", ev.connection_id)
                self.stats["closed_by_store"] += 1
                return None
            lsn, _length = st.append(
                ev.segment, ev.data, writer_id=ev.connection_id, event_number=ev.level, now=self.server._time_ms()
            )
        except (SegmentSealedError, NoSuchSegmentError, StoreError) as exc:
            log.info("pravega draft: closing: append to %s: %s", ev.segment, exc)
            self.stats["closed_by_store"] += 1
            return None
        self.stats["blocks"] += 1
        self.stats["bytes"] += len(ev.data)
        return lsn
