"""Deliberately broken Pravega segment stores, one wrong behaviour each, for the
kill matrix (``test_pravega_conform.py``): refwire's own
:class:`~refwire.pravega.server.SegmentStoreServer` with its connection
machine, its service or its limits replaced.

A case that no broken store makes FAIL would pass a store that gets its
requirement (``specs/pravega/README.md``) wrong."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from refwire.pravega.connection import ServerConnection
from refwire.pravega.events import Append
from refwire.pravega.frames import (
    COMMANDS,
    DEFAULT_LIMITS,
    NULL_VALUE,
    AppendBlock,
    AppendBlockEnd,
    AppendSetup,
    Command,
    DataAppended,
    Hello,
    NoSuchSegment,
    ReadSegment,
    SegmentRead,
    TableEntry,
    TableKey,
    UpdateTableEntries,
)
from refwire.pravega.server import SegmentStoreServer, ServerConfig
from refwire.pravega.service import AppendOutcome, Outcome, SegmentStoreService


@attrs.frozen
class Broken:
    name: str
    wrong: str
    aimed_at: tuple[str, ...]
    machine: type[ServerConnection] | None = None
    service: type[SegmentStoreService] | None = None
    config: ServerConfig | None = None


# --------------------------------------------------------------------------- machines


class NoHelloAnswer(ServerConnection):
    def _queue(self, data: bytes, slot: Any) -> None:
        if data[:4] == (-127).to_bytes(4, "big", signed=True):
            return  # its Hello never leaves (wrong: every Hello is answered)
        super()._queue(data, slot)


class AcceptsAnyHello(ServerConnection):
    def _on_command(self, cmd: Command, offset: int) -> None:
        if isinstance(cmd, Hello):
            cmd = Hello(high_version=17, low_version=5)  # judged as if compatible (wrong: incompatible ones close)
        super()._on_command(cmd, offset)


class NoKeepAliveEcho(ServerConnection):
    def _queue(self, data: bytes, slot: Any) -> None:
        if data[:4] == (100).to_bytes(4, "big"):
            return  # KeepAlive swallowed (wrong: echoed)
        super()._queue(data, slot)


class SkipsUnknownTypes(ServerConnection):
    """Drops whole frames of types it does not know (wrong: the connection closes)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self._hold = bytearray()

    def receive_data(self, data: Any, *, now: float) -> None:
        if not data:
            super().receive_data(data, now=now)
            return
        self._hold += data
        out = bytearray()
        while len(self._hold) >= 8:
            code = int.from_bytes(self._hold[:4], "big", signed=True)
            n = int.from_bytes(self._hold[4:8], "big")
            if code in COMMANDS or n > 1 << 20:
                out += self._hold
                self._hold.clear()
                break
            if len(self._hold) < 8 + n:
                break
            del self._hold[: 8 + n]
        super().receive_data(bytes(out), now=now)


class AllowsBackwards(ServerConnection):
    def _on_block_end(self, end: AppendBlockEnd, offset: int) -> None:
        s = self._sessions.get(end.writer_id)
        if s is not None:
            s.last_event_number = min(s.last_event_number, end.last_event_number)  # wrong: backwards closes
            st = self._writers.get((s.segment, end.writer_id))
            if st is not None:
                st.last_stored = min(st.last_stored, end.last_event_number)
        super()._on_block_end(end, offset)


class IgnoresOrphanAppends(ServerConnection):
    def _on_block_end(self, end: AppendBlockEnd, offset: int) -> None:
        if end.writer_id not in self._sessions:
            return  # dropped quietly (wrong: an append before SetupAppend closes the connection)
        super()._on_block_end(end, offset)


class DropsPartialEvents(ServerConnection):
    def _reassemble(self, block: AppendBlock, size: int, end: AppendBlockEnd, end_offset: int) -> bytes:
        return bytes(block.data[:size]) + bytes(end.data)  # the PartialEvent's bytes lost (wrong)


class AcksWithoutChain(ServerConnection):
    def append_stored(self, append: Append, segment_length: int, *, now: float, slot: Any = None) -> None:
        state = self._writers.get((append.segment, append.writer_id))
        if state is None:
            self._queue(b"", slot)
            return
        state.in_flight -= 1
        state.last_acked = append.event_number
        ack = DataAppended(
            writer_id=append.writer_id,
            event_number=append.event_number,
            previous_event_number=append.event_number - 1,  # wrong: the previous ack's number (MIN first)
            request_id=append.request_id,
            current_segment_write_offset=segment_length,
        )
        self._queue(ack.encode(), slot)


class RequiresHello(ServerConnection):
    def _on_command(self, cmd: Command, offset: int) -> None:
        if self.peer_version is None and not isinstance(cmd, Hello):
            from refwire.errors import LocalProtocolError

            raise LocalProtocolError("Hello first", protocol="pravega", field="type", offset=offset)  # wrong: not required
        super()._on_command(cmd, offset)


# --------------------------------------------------------------------------- services


class DedupsEqual(SegmentStoreService):
    def append(self, a: Append, *, now: int = 0) -> AppendOutcome:
        if a.event_number == a.previous_stored:
            return AppendOutcome("ok", lsn=0, length=0)  # dropped (wrong: Java stores it again)
        return super().append(a, now=now)


class SetupSaysNothing(SegmentStoreService):
    def process(self, cmd: Command, *, now: int = 0, was_parked: bool = False) -> Outcome:
        out = super().process(cmd, now=now, was_parked=was_parked)
        if isinstance(out.reply, AppendSetup):
            return attrs.evolve(out, reply=attrs.evolve(out.reply, last_event_number=NULL_VALUE))  # wrong: the attribute
        return out


class IgnoresConditions(SegmentStoreService):
    def append(self, a: Append, *, now: int = 0) -> AppendOutcome:
        return super().append(attrs.evolve(a, expected_offset=None), now=now)  # wrong: offsets unchecked


class ClosesOnNoSuchSegment(SegmentStoreService):
    def process(self, cmd: Command, *, now: int = 0, was_parked: bool = False) -> Outcome:
        out = super().process(cmd, now=now, was_parked=was_parked)
        if isinstance(out.reply, NoSuchSegment):
            return attrs.evolve(out, close=True)  # wrong: the connection is kept
        return out


class NeverParks(SegmentStoreService):
    def process(self, cmd: Command, *, now: int = 0, was_parked: bool = False) -> Outcome:
        out = super().process(cmd, now=now, was_parked=was_parked)
        if out.park and isinstance(cmd, ReadSegment):  # wrong: a read at the tail waits
            return Outcome(
                SegmentRead(
                    segment=cmd.segment,
                    offset=cmd.offset,
                    at_tail=True,
                    end_of_segment=False,
                    data=b"",
                    request_id=cmd.request_id,
                )
            )
        return out


class SealedNotEnd(SegmentStoreService):
    def process(self, cmd: Command, *, now: int = 0, was_parked: bool = False) -> Outcome:
        out = super().process(cmd, now=now, was_parked=was_parked)
        if isinstance(out.reply, SegmentRead) and out.reply.end_of_segment:
            return attrs.evolve(out, reply=attrs.evolve(out.reply, at_tail=True, end_of_segment=False))  # wrong
        return out


class TableVersionsIgnored(SegmentStoreService):
    def process(self, cmd: Command, *, now: int = 0, was_parked: bool = False) -> Outcome:
        if isinstance(cmd, UpdateTableEntries):
            entries = tuple(TableEntry(TableKey(e.key.data, NULL_VALUE), e.value) for e in cmd.table_entries)
            cmd = attrs.evolve(cmd, table_entries=entries)  # wrong: conditions dropped
        return super().process(cmd, now=now, was_parked=was_parked)


BROKEN: tuple[Broken, ...] = (
    Broken("no-hello-answer", "never answers a Hello", ("pv.S1.1", "pv.S1.2", "pv.S1.3"), machine=NoHelloAnswer),
    Broken("accepts-any-hello", "keeps a client whose versions do not overlap", ("pv.S1.2", "pv.S1.3"), machine=AcceptsAnyHello),
    Broken("no-keepalive-echo", "swallows KeepAlives", ("pv.S1.4", "pv.S2.8"), machine=NoKeepAliveEcho),
    Broken(
        "limit-not-from-header",
        "no frame limit: waits for the payload a 16 MiB header announces",
        ("pv.S1.5",),
        config=ServerConfig(limits=attrs.evolve(DEFAULT_LIMITS, max_frame_size=64 << 20, max_buffered=64 << 20)),
    ),
    Broken(
        "limit-off-by-one",
        "refuses a frame of exactly 0x00FFFFFF bytes",
        ("pv.S1.6",),
        config=ServerConfig(limits=attrs.evolve(DEFAULT_LIMITS, max_frame_size=0x00FFFFFE)),
    ),
    Broken("skips-unknown-types", "drops frames of unknown or retired types", ("pv.S1.7",), machine=SkipsUnknownTypes),
    Broken("requires-hello", "closes a connection whose first command is not Hello", ("pv.S1.8",), machine=RequiresHello),
    Broken("drops-partial-events", "loses a PartialEvent's bytes when reassembling", ("pv.S2.1",), machine=DropsPartialEvents),
    Broken(
        "acks-without-chain",
        "DataAppended.previousEventNumber is eventNumber - 1",
        ("pv.S2.1", "pv.S2.2"),
        machine=AcksWithoutChain,
    ),
    Broken("allows-backwards", "stores event numbers that go backwards", ("pv.S2.3",), machine=AllowsBackwards),
    Broken(
        "ignores-orphan-appends",
        "drops an append from a writer never set up, connection kept",
        ("pv.S2.7",),
        machine=IgnoresOrphanAppends,
    ),
    Broken("dedups-equal", "drops an append repeating the last event number", ("pv.S2.4",), service=DedupsEqual),
    Broken("setup-says-nothing", "AppendSetup always says Long.MIN_VALUE", ("pv.S2.5",), service=SetupSaysNothing),
    Broken("ignores-conditions", "stores a conditional append at any offset", ("pv.S2.6",), service=IgnoresConditions),
    Broken(
        "closes-on-no-such-segment",
        "closes the connection after NoSuchSegment",
        ("pv.S2.8", "pv.S3.2"),
        service=ClosesOnNoSuchSegment,
    ),
    Broken("never-parks", "answers a read at the tail at once, empty", ("pv.S3.1",), service=NeverParks),
    Broken("sealed-not-end", "reports a sealed segment's end as an open tail", ("pv.S3.3",), service=SealedNotEnd),
    Broken("table-versions-ignored", "updates table keys unconditionally", ("pv.S3.4",), service=TableVersionsIgnored),
)


@asynccontextmanager
async def store(broken: Broken | None) -> AsyncIterator[tuple[str, int]]:
    """refwire's segment store (broken as ``broken`` says) on 127.0.0.1, stopped on the way out;
    several may run at once (the broken machine is the store's own ``connection_class``)."""
    server = SegmentStoreServer(config=broken.config if broken and broken.config else ServerConfig())
    if broken and broken.machine:
        server.connection_class = broken.machine
    if broken and broken.service:
        server.service.__class__ = broken.service
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(server.serve, listeners)
        try:
            yield "127.0.0.1", listeners[0].socket.getsockname()[1]
        finally:
            with trio.move_on_after(3):
                await server.shutdown(grace=0.5)
            nursery.cancel_scope.cancel()


__all__ = ["BROKEN", "Broken", "store", "uuid"]
