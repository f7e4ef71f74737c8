"""Deliberately broken draft-dialect segment stores, one wrong behaviour each,
for the kill matrix (``test_draft_conform.py``): refwire's own
:class:`DraftFrontend` with its connection machine or its front end
subclassed, or its input rewritten.

A case that no broken store makes FAIL would pass a store that gets its
requirement (``specs/pravega-draft-2017/README.md``) wrong."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from refwire.conform.cases.pravega_draft import server_segments
from refwire.pravega.draft2017.connection import DEFAULT_LIMITS, ServerConnection, State
from refwire.pravega.draft2017.events import BlockAppend, KeepAliveReceived
from refwire.pravega.draft2017.frames import DataAppended, EndAppendBlock, KeepAlive, PartialMessage
from refwire.pravega.draft2017.partial import error
from refwire.pravega.draft2017.server import DraftConfig, DraftFrontend
from refwire.pravega.frames import HEADER, Command, encode_event
from refwire.pravega.server import SegmentStoreServer


@attrs.frozen
class Broken:
    name: str
    wrong: str
    aimed_at: tuple[str, ...]
    machine: type[ServerConnection] | None = None
    front: type[DraftFrontend] | None = None
    config: DraftConfig | None = None
    rewrite: Callable[[bytes], bytes] | None = None


# --------------------------------------------------------------------------- machines


class EchoesEmpty(ServerConnection):
    def _echo(self, msg: KeepAlive) -> None:
        self._queue(self._reply(KeepAlive()), 0)  # its data dropped (wrong: echoed byte for byte, §8)
        self._events.append(KeepAliveReceived(msg.data))


class AcksBeginOffset(ServerConnection):
    def block_stored(self, append: BlockAppend, *, now: float, after: int = 0) -> None:
        # the level before the block (wrong: O + N, §6.5)
        self.send(DataAppended(connection_id=append.connection_id, ack_level=append.previous_level), now=now, after=after)


class NoPartialRequests(ServerConnection):
    def _on_frame(self, cmd: Command, offset: int, size: int) -> None:
        if isinstance(cmd, PartialMessage):  # (wrong: requests may come as partial messages, §5)
            raise error("partial messages are not supported", "PartialMessage", "type", offset)
        super()._on_frame(cmd, offset, size)


class RefusesStraddling(ServerConnection):
    def _on_end(self, cmd: EndAppendBlock, offset: int) -> None:
        if self._partial.active:  # (wrong: the block's End may come before its last Event's End part, §6.4)
            raise error("EndAppendBlock inside a partial message", "EndAppendBlock", "type", offset)
        super()._on_end(cmd, offset)


class PaddingCounted(ServerConnection):
    def _on_message(self, cmd: Command, offset: int, *, whole: bool, data_at: int = 0) -> None:
        if isinstance(cmd, KeepAlive) and self.state is State.IN_BLOCK and self._block is not None:
            self._block.data += encode_event(cmd.data)  # padding stored as an Event (wrong: it counts in W only, §6.3)
        super()._on_message(cmd, offset, whole=whole, data_at=data_at)


class BadReplyParts(ServerConnection):
    def _reply(self, cmd: Command) -> bytes:
        out = super()._reply(cmd)
        if out[:4] == b"\xff\xff\xff\xfe":  # the first part marked Middle (wrong: Begin, §5 rule 1)
            out = out[:HEADER] + b"\x01" + out[HEADER + 1 :]
        return out


class AcceptsAnyOffset(ServerConnection):
    def _on_begin(self, cmd: Any, offset: int, *, whole: bool, data_at: int) -> None:
        session = self._sessions.get(cmd.connection_id)
        if session is not None:
            session.offset = cmd.connection_offset  # (wrong: a Begin below the running offset is refused, §6.3 rule 1)
        super()._on_begin(cmd, offset, whole=whole, data_at=data_at)


class IgnoresWireLength(ServerConnection):
    def _check_length(self, code: int, n: int, offset: int) -> None:
        block, self._block = self._block, None  # the block's W not checked (wrong: §6.3 rule 3)
        try:
            super()._check_length(code, n, offset)
        finally:
            self._block = block

    def _on_end(self, cmd: EndAppendBlock, offset: int) -> None:
        if self._block is not None:
            self._block.wire_length = self._block.wire_seen
        super()._on_end(cmd, offset)


class LenientParts(ServerConnection):
    def _start_part(self, cmd: PartialMessage, offset: int, *, in_block: bool) -> None:
        if cmd.part != 0 and not self._partial.active:
            self._partial.begin(offset, in_block=in_block)  # a Middle starts one (wrong: §5 rule 2)
            return
        super()._start_part(cmd, offset, in_block=in_block)


# --------------------------------------------------------------------------- front ends


class ForgetsLevel(DraftFrontend):
    def _level(self, segment: str, connection_id: Any) -> int:
        self.server.store.get(segment)
        return 0  # (wrong: the stored level, §6.2)


class NoCompareAndSet(DraftFrontend):
    def _append(self, ev: BlockAppend) -> int:
        # stores whatever the machine lets through (wrong: the level must equal the Begin offset, §6.5)
        return super()._append(attrs.evolve(ev, previous_level=self._level(ev.segment, ev.connection_id)))


# --------------------------------------------------------------------------- input rewrites


def _frames(data: bytes, fix: Callable[[int, int, bytes], bytes | None]) -> bytes:
    """Walk whole frames (the cases send them in one write); ``fix(code, length, frame)``
    returns the frame to keep (None: dropped).  A negative length is passed as is."""
    out, pos = bytearray(), 0
    while pos + HEADER <= len(data):
        code = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        n = int.from_bytes(data[pos + 4 : pos + 8], "big", signed=True)
        size = HEADER + max(n, 0)
        if n >= 0 and pos + size > len(data):
            break
        kept = fix(code, n, data[pos : pos + size])
        if kept is not None:
            out += kept
        pos += size
    return bytes(out + data[pos:])


def _drop_unknown_types(data: bytes) -> bytes:
    known = {-2, 0, 1, 2, 3, 4, 5, 6, 7, 100}
    return _frames(data, lambda code, n, frame: frame if code in known else None)


def _negative_length_is_zero(data: bytes) -> bytes:
    return _frames(data, lambda code, n, frame: frame[:4] + b"\x00" * 4 if n < 0 else frame)


BROKEN: tuple[Broken, ...] = (
    Broken("echoes-empty", "echoes a KeepAlive without its data", ("pd.S1.1",), machine=EchoesEmpty),
    Broken("skips-unknown-types", "skips a frame of unknown type instead of closing", ("pd.S1.2",), rewrite=_drop_unknown_types),
    Broken("negative-length-is-zero", "reads a negative length as 0", ("pd.S1.3",), rewrite=_negative_length_is_zero),
    Broken(
        "frame-limit-32mib",
        "allows frames up to 32 MiB",
        ("pd.S1.4",),
        config=DraftConfig(limits=attrs.evolve(DEFAULT_LIMITS, max_frame_size=32 << 20)),
    ),
    Broken(
        "acks-begin-offset",
        "acknowledges a block with its Begin offset, not O + N",
        ("pd.S2.1", "pd.S2.3", "pd.S2.4", "pd.S2.5", "pd.S3.1"),
        machine=AcksBeginOffset,
    ),
    Broken(
        "no-partial-requests", "closes on any PartialMessage from a client", ("pd.S2.2", "pd.S2.3"), machine=NoPartialRequests
    ),
    Broken(
        "refuses-straddling",
        "closes on an EndAppendBlock while an Event's parts are pending",
        ("pd.S2.3",),
        machine=RefusesStraddling,
    ),
    Broken("padding-counted", "counts a KeepAlive inside a block as an Event", ("pd.S2.4",), machine=PaddingCounted),
    Broken("bad-reply-parts", "marks a split reply's first part Middle", ("pd.S2.5",), machine=BadReplyParts),
    Broken("forgets-level", "answers every SetupAppend with level 0", ("pd.S3.1",), front=ForgetsLevel),
    Broken(
        "accepts-any-offset",
        "stores a block whatever its Begin offset (a resend is stored twice)",
        ("pd.S3.2",),
        machine=AcceptsAnyOffset,
        front=NoCompareAndSet,
    ),
    Broken("ignores-wire-length", "does not check the Begin's wire length", ("pd.S3.3",), machine=IgnoresWireLength),
    Broken("lenient-parts", "takes a Middle part without a Begin as a Begin", ("pd.S4.1",), machine=LenientParts),
)


class _Rewriting(trio.abc.Stream):
    """A stream whose received bytes pass through ``rewrite`` (frames must arrive whole)."""

    def __init__(self, inner: trio.abc.Stream, rewrite: Callable[[bytes], bytes]) -> None:
        self.inner, self.rewrite = inner, rewrite

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = await self.inner.receive_some(max_bytes)
        return self.rewrite(bytes(data)) if data else bytes(data)

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def draft_store(broken: Broken | None = None, run_ids: Sequence[str] = ()) -> AsyncIterator[tuple[str, int]]:
    """refwire's draft store (``None``) or a broken one on 127.0.0.1:0, holding the
    case segments (§13) of each of ``run_ids``; yields (host, port); stopped on exit.
    Stores with a swapped machine run side by side (it is the front end's own
    ``connection_class``)."""
    server = SegmentStoreServer()
    for run_id in run_ids:
        for name in server_segments(run_id):
            server.store.create(name)
    front_cls = broken.front if broken is not None and broken.front is not None else DraftFrontend
    config = broken.config if broken is not None and broken.config is not None else DraftConfig()
    front = front_cls(server, config=config)
    if broken is not None and broken.rewrite is not None:
        handle, rewrite = front.handle_stream, broken.rewrite

        async def rewriting(stream: trio.abc.Stream) -> None:
            await handle(_Rewriting(stream, rewrite))

        front._stream_server._handler = rewriting
    if broken is not None and broken.machine is not None:
        front.connection_class = broken.machine
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(server.sync_forever)
        await nursery.start(front.serve, listeners)
        try:
            yield "127.0.0.1", listeners[0].socket.getsockname()[1]
        finally:
            with trio.move_on_after(5):
                await front.shutdown(0.2)
            nursery.cancel_scope.cancel()
