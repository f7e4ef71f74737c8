"""Pravega 2017 draft conformance cases (``refwire conform pravega-draft-2017``).

Server cases (``pd.S…``): refwire plays a draft client against the testee
segment store and judges its replies and how it closes.  The draft has no
CreateSegment, so the testee contract (specs/pravega-draft-2017/README.md §13)
asks for one empty segment per server case, named after the case id
(``pd.S2.1`` -> ``conform-pd-S2-1``, :func:`segment_of`), created before the run;
:func:`precreate` creates them on refwire's own store through the current
dialect (``python -m refwire.pravega.draft2017.conform HOST:PORT``).

Client cases (``pd.C…``): refwire plays the segment store (a memory store per
case, answering through the case's conversation), misbehaving where a case
says so; the client-role contract is §13 too.

Profiles: ``strict`` (the spec; refwire's store).  Ids are never reused or
renumbered.  The bytes a case sends depend only on the run seed and the case
id (:func:`refwire.conform.model.case_seed`).
"""

from __future__ import annotations

import random
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from ...conform.conversation import Conversation, MachineObserver, Token
from ...conform.model import CaseBook, Verdict, expect
from ...conform.runner import Catalogue
from ...errors import DraftWriteFailed, ProtocolError
from ..frames import HEADER, encode_event
from .connection import DEFAULT_LIMITS, ClientConnection, ServerConnection
from .events import BlockAppend, ConnectionClosed, KeepAliveReceived, ReplyReceived, RequestReceived
from .frames import (
    AppendSetup,
    BeginAppendBlock,
    DataAppended,
    EndAppendBlock,
    Event,
    KeepAlive,
    Part,
    PartialMessage,
    ReadSegment,
    SegmentRead,
    SetupAppend,
)
from .partial import split_message

__all__ = [
    "CATALOGUE",
    "ClientObserver",
    "ServerObserver",
    "client_for_simulation",
    "precreate",
    "segment_of",
    "serve_for_simulation",
    "server_segments",
]

SPEC = "specs/pravega-draft-2017/README.md"
PASS = Verdict.PASS
ALL = "strict"
CLOSED = "FIN RST"

PROFILES = {"strict": f"the behaviour {SPEC} specifies (refwire's segment store, draft listener)"}
FEATURES: dict[str, str] = {}

#: Event payload size of the small cases: every Event frame is 8 + 16 = 24 segment bytes (§6.1).
PAYLOAD = 16
EVENT = HEADER + PAYLOAD


def segment_of(case_id: str) -> str:
    """The case's own segment (§13): ``pd.S2.1`` -> ``conform-pd-S2-1``."""
    return "conform-" + case_id.replace(".", "-")


# --------------------------------------------------------------------------- observer


class ServerObserver(MachineObserver):
    """Tokens for what a draft segment store sends, decoded (and reassembled from
    partial messages, §5) by refwire's own client machine: ``setup L``,
    ``ack L``, ``read O n=N``, ``keepalive N``; ``invalid <field>`` at the first
    byte that does not decode.  It also counts the PartialMessage frames that
    carried the replies (:attr:`parts`) and keeps the SegmentReads and KeepAlive
    data for the cases to compare."""

    def __init__(self) -> None:
        super().__init__(ClientConnection(DEFAULT_LIMITS), eof="eof")
        self.reads: list[SegmentRead] = []
        self.keepalives: list[bytes] = []
        #: PartialMessage frames received (a header scan, independent of the machine)
        self.parts = 0
        self._scan = bytearray()
        self._skip = 0

    def feed(self, data: bytes) -> list[Token]:
        if not self.broken:
            self._count_parts(data)
        return super().feed(data)

    def _count_parts(self, data: bytes) -> None:
        """Walk the frame headers (§1) to count PartialMessage frames."""
        buf = self._scan
        buf += data
        while True:
            if self._skip:
                n = min(self._skip, len(buf))
                del buf[:n]
                self._skip -= n
                if self._skip:
                    return
            if len(buf) < HEADER:
                return
            code = int.from_bytes(buf[:4], "big", signed=True)
            length = int.from_bytes(buf[4:8], "big", signed=True)
            if length < 0:
                return
            if code == PartialMessage.TYPE:
                self.parts += 1
            del buf[:HEADER]
            self._skip = length

    def tokens(self, ev: Any) -> list[Token]:
        if isinstance(ev, ConnectionClosed):
            return [("closed", {"type": "closed", "reason": ev.reason})]
        if isinstance(ev, KeepAliveReceived):
            self.keepalives.append(ev.data)
            return [(f"keepalive {len(ev.data)}", {"type": "KeepAlive", "data": ev.data.hex()})]
        if not isinstance(ev, ReplyReceived):
            return []
        cmd = ev.command
        if isinstance(cmd, AppendSetup):
            lvl = cmd.connection_offset_ack_level
            return [(f"setup {lvl}", {"type": "AppendSetup", "segment": cmd.segment, "level": lvl})]
        if isinstance(cmd, DataAppended):
            return [(f"ack {cmd.ack_level}", {"type": "DataAppended", "level": cmd.ack_level})]
        if isinstance(cmd, SegmentRead):
            self.reads.append(cmd)
            info = {"type": "SegmentRead", "at_tail": cmd.at_tail, "end_of_segment": cmd.end_of_segment}
            return [(f"read {cmd.offset} n={len(cmd.data)}", info)]
        return [(cmd.NAME, {"type": cmd.NAME})]


# --------------------------------------------------------------------------- helpers

BOOK = CaseBook(SPEC, server_ignore=(), server_budget=6.0, client_budget=20.0)
server_case = BOOK.server


def obs(c: Conversation) -> ServerObserver:
    o = c.observer
    assert isinstance(o, ServerObserver)
    return o


def connection_id(c: Conversation) -> uuid.UUID:
    """The case's ConnectionId, from the case seed (§6.1)."""
    return uuid.UUID(int=c.rng.getrandbits(128))


def payloads(c: Conversation, n: int, size: int = PAYLOAD) -> list[bytes]:
    """``n`` event payloads from the case seed."""
    return [c.rng.randbytes(size) for _ in range(n)]


def events_of(items: list[bytes]) -> bytes:
    """The segment bytes of these payloads: their whole Event frames (§6.1)."""
    return b"".join(encode_event(p) for p in items)


def block(cid: uuid.UUID, offset: int, inner: bytes, n: int) -> bytes:
    """BeginAppendBlock(offset, W = len(inner)) + inner + EndAppendBlock(offset + n, n) (§6.3)."""
    begin = BeginAppendBlock(connection_id=cid, connection_offset=offset, length=len(inner)).encode()
    end = EndAppendBlock(connection_id=cid, connection_offset=offset + n, block_length=n).encode()
    return begin + inner + end


def raw_frame(code: int, payload: bytes, length: int | None = None) -> bytes:
    """A frame with any type code and (declared) length (§1), for hostile input."""
    n = len(payload) if length is None else length
    return code.to_bytes(4, "big", signed=True) + n.to_bytes(4, "big", signed=True) + payload


async def answered(c: Conversation, token: str, timeout: float = 3.0) -> bool:
    return await c.wait_for(lambda cv: token in cv.tokens, timeout, label=token)


async def setup(c: Conversation, cid: uuid.UUID, segment: str, *, split: str = "whole") -> bool:
    await c.send(SetupAppend(connection_id=cid, segment=segment).encode(), label=f"SetupAppend {segment}", split=split)
    return await c.wait_for(lambda cv: any(t.startswith("setup ") for t in cv.tokens), 3.0, label="AppendSetup")


async def read_back(c: Conversation, segment: str, want: bytes, *, label: str = "read-back identical") -> None:
    """ReadSegment from 0 for a little more than ``want`` (§7): the reply must carry exactly ``want``."""
    before = len(obs(c).reads)
    await c.send(ReadSegment(segment=segment, offset=0, suggested_length=len(want) + 64).encode(), label="ReadSegment 0")
    if await c.wait_for(lambda cv: len(obs(cv).reads) > before, 4.0, label="SegmentRead"):
        if obs(c).reads[before].data == want:
            c.note(label)


async def side_read(c: Conversation, segment: str, suggested: int) -> bytes | None:
    """Read ``segment`` from 0 over a second connection (``c.open_another``); None if no reply."""
    if c.open_another is None:
        raise RuntimeError("this runner cannot open a second connection to the testee")
    o = ServerObserver()
    stream: trio.abc.Stream | None = None
    with trio.move_on_at(min(trio.current_time() + 3.0 * c.time_scale, c.deadline)):
        stream = await c.open_another()
        await stream.send_all(ReadSegment(segment=segment, offset=0, suggested_length=suggested).encode())
        while not o.reads:
            data = await stream.receive_some(65536)
            if not data:
                break
            o.feed(bytes(data))
    if stream is not None:
        with trio.move_on_after(1.0) as scope:
            scope.shield = True
            await stream.aclose()
    return o.reads[0].data if o.reads else None


# --------------------------------------------------------------------------- S1 framing and KeepAlive


@server_case(
    "pd.S1.1",
    "keep-alive-echoed",
    "Every KeepAlive is echoed byte for byte",
    "§8, §4",
    "Send a KeepAlive carrying 13 seeded bytes, then an empty one. The store must echo each at once, data included, "
    "and keep the connection open.",
    [expect(PASS, ALL, ["keepalive 13", "keepalive 0"], "open", facts=["echoed byte for byte"])],
    vectors=["keep-alive-empty", "keep-alive-with-data", "keep-alive-echoed"],
)
async def s1_1(c: Conversation) -> None:
    data = c.rng.randbytes(13)
    await c.send(KeepAlive(data=data).encode(), label="KeepAlive (13 bytes)")
    await c.send(KeepAlive().encode(), label="KeepAlive (empty)")
    await c.wait_for(lambda cv: len(obs(cv).keepalives) >= 2, 3.0, label="two echoes")
    if obs(c).keepalives[:2] == [data, b""]:
        c.note("echoed byte for byte")
    await c.quiet(0.3)


@server_case(
    "pd.S1.2",
    "unknown-type-closes",
    "An unknown type code closes the connection",
    "§3, §1.1, §9",
    "Send an empty KeepAlive (echoed), then a frame of type 8 (era A's ReadSegment, unknown here) followed by another "
    "KeepAlive. The store must close without answering anything after the bad frame.",
    [expect(PASS, ALL, ["keepalive 0"], CLOSED)],
    vectors=["unknown-code-8", "unknown-code-after-keep-alive"],
)
async def s1_2(c: Conversation) -> None:
    await c.send(KeepAlive().encode(), label="KeepAlive")
    await answered(c, "keepalive 0")
    await c.send(raw_frame(8, b"\x00\x03seg") + KeepAlive().encode(), label="type 8, then KeepAlive", split="whole")
    await c.wait_close(3.0)


@server_case(
    "pd.S1.3",
    "negative-length-closes",
    "A negative frame length closes the connection",
    "§1, §9",
    "After an echoed KeepAlive, send a KeepAlive header whose length is -1 (ffffffff) followed by an empty KeepAlive. "
    "The length is read signed: the store must close without echoing anything more.",
    [expect(PASS, ALL, ["keepalive 0"], CLOSED)],
    vectors=["negative-length"],
)
async def s1_3(c: Conversation) -> None:
    await c.send(KeepAlive().encode(), label="KeepAlive")
    await answered(c, "keepalive 0")
    await c.send(
        raw_frame(KeepAlive.TYPE, b"", -1) + KeepAlive().encode(), label="KeepAlive length -1, then KeepAlive", split="whole"
    )
    await c.wait_close(3.0)


@server_case(
    "pd.S1.4",
    "frame-over-limit-closes",
    "A frame over 0x00FFFFFF bytes is refused from its header",
    "§1, §11",
    "After an echoed KeepAlive, send a KeepAlive header announcing 0x00FFFFF8 payload bytes (a 16 MiB frame, one byte "
    "over the limit) and no payload. The store must close from the header alone, without waiting for the payload.",
    [expect(PASS, ALL, ["keepalive 0"], CLOSED)],
    vectors=["length-past-limit"],
)
async def s1_4(c: Conversation) -> None:
    await c.send(KeepAlive().encode(), label="KeepAlive")
    await answered(c, "keepalive 0")
    await c.send(raw_frame(KeepAlive.TYPE, b"", 0x00FFFFF8), label="KeepAlive header, length 0x00FFFFF8", split="whole")
    await c.wait_close(3.0)


# --------------------------------------------------------------------------- S2 appends, partial messages, reads


@server_case(
    "pd.S2.1",
    "append-block-and-read-back",
    "SetupAppend, one block of three Events, its DataAppended, and the bytes read back",
    "§6.2, §6.3, §6.5, §7",
    "SetupAppend a new ConnectionId on the case's segment (level 0), send one block of 3 Events (24 bytes each, whole "
    "frames; the write split at seeded offsets), expect DataAppended 72, then ReadSegment from 0: the reply carries the "
    "72 bytes of the Event frames.",
    [expect(PASS, ALL, ["setup 0", "ack 72", "read 0 n=72"], "open", facts=["read-back identical"])],
    vectors=["setup-new-connection-id", "block-two-events", "write-then-read-back", "append-setup-new"],
)
async def s2_1(c: Conversation) -> None:
    seg, cid = segment_of("pd.S2.1"), connection_id(c)
    if not await setup(c, cid, seg):
        return
    items = payloads(c, 3)
    data = events_of(items)
    await c.send(block(cid, 0, data, len(data)), label="block of 3 Events")
    if await answered(c, f"ack {len(data)}"):
        await read_back(c, seg, data)


@server_case(
    "pd.S2.2",
    "requests-as-partial-messages",
    "Requests and Events cut into Begin/Middle/End parts are reassembled",
    "§5, §6.3",
    "Send SetupAppend as 3 parts (cut inside its header), a block whose BeginAppendBlock is 2 parts and whose 2 Events "
    "are cut into Begin/Middle/End parts (one part empty), and ReadSegment as 2 parts. The store must answer as if each "
    "had come whole: AppendSetup 0, DataAppended 48, the 48 bytes read back.",
    [expect(PASS, ALL, ["setup 0", "ack 48", "read 0 n=48"], "open", facts=["read-back identical"])],
    vectors=["setup-append-split-inside-header", "event-hello-three-parts", "read-segment-split", "requests-as-partial-messages"],
)
async def s2_2(c: Conversation) -> None:
    seg, cid = segment_of("pd.S2.2"), connection_id(c)
    setup_frame = SetupAppend(connection_id=cid, segment=seg).encode()
    await c.send(b"".join(split_message(setup_frame, [3, 11])), label="SetupAppend in 3 parts")
    if not await c.wait_for(lambda cv: any(t.startswith("setup ") for t in cv.tokens), 3.0, label="AppendSetup"):
        return
    items = payloads(c, 2)
    inner = b"".join(split_message(Event(data=items[0]).encode(), [5, 5, 17])) + b"".join(
        split_message(Event(data=items[1]).encode(), [c.rng.randrange(1, EVENT)])
    )
    n = 2 * EVENT
    begin = BeginAppendBlock(connection_id=cid, connection_offset=0, length=len(inner)).encode()
    end = EndAppendBlock(connection_id=cid, connection_offset=n, block_length=n).encode()
    await c.send(b"".join(split_message(begin, [10])) + inner + end, label="block: Begin in 2 parts, Events in parts")
    if await answered(c, f"ack {n}"):
        before = len(obs(c).reads)
        read = ReadSegment(segment=seg, offset=0, suggested_length=n + 64).encode()
        await c.send(b"".join(split_message(read, [9])), label="ReadSegment in 2 parts")
        if await c.wait_for(lambda cv: len(obs(cv).reads) > before, 4.0, label="SegmentRead"):
            if obs(c).reads[before].data == events_of(items):
                c.note("read-back identical")


@server_case(
    "pd.S2.3",
    "event-straddles-end",
    "An Event whose parts straddle EndAppendBlock counts whole and is stored once",
    "§6.3, §6.4, §5",
    "In one block send a whole Event and the Begin part of a second Event (its first 10 bytes), then EndAppendBlock with "
    "block_length 48 (both Events), then a KeepAlive with 5 bytes (allowed while the partial message is pending) and "
    "the End part. The store must echo the KeepAlive, then acknowledge 48 only once the End part is in, and read "
    "back both Events once.",
    [expect(PASS, ALL, ["setup 0", "keepalive 5", "ack 48", "read 0 n=48"], "open", facts=["read-back identical"])],
    vectors=[
        "event-hello-split-around-end",
        "split-around-end-stored-once",
        "block-length-does-not-add-up-with-trailing-partial",
    ],
)
async def s2_3(c: Conversation) -> None:
    seg, cid = segment_of("pd.S2.3"), connection_id(c)
    if not await setup(c, cid, seg):
        return
    items = payloads(c, 2)
    begin_part, end_part = split_message(Event(data=items[1]).encode(), [10])
    inner = Event(data=items[0]).encode() + begin_part
    n = 2 * EVENT
    await c.send(block(cid, 0, inner, n), label="block: Event, Begin part of an Event, End (N = 48)")
    await c.send(KeepAlive(data=c.rng.randbytes(5)).encode(), label="KeepAlive (5 bytes) before the trailing part")
    await answered(c, "keepalive 5")
    await c.quiet(0.3)
    await c.send(end_part, label="the End part after EndAppendBlock")
    if await answered(c, f"ack {n}"):
        await read_back(c, seg, events_of(items))


@server_case(
    "pd.S2.4",
    "keep-alive-padding-in-block",
    "A KeepAlive inside a block is padding: it counts in W, not in N, and is echoed",
    "§6.3, §8",
    "Send a block holding an Event, a KeepAlive with 4 bytes of data, and another Event: Begin's length W counts the "
    "KeepAlive frame (12 bytes), block_length N = 48 does not. The store must echo the KeepAlive, acknowledge 48 and "
    "read back the two Events only.",
    [expect(PASS, ALL, ["setup 0", "keepalive 4", "ack 48", "read 0 n=48"], "open", facts=["read-back identical"])],
    vectors=["keep-alive-padding-inside-block"],
)
async def s2_4(c: Conversation) -> None:
    seg, cid = segment_of("pd.S2.4"), connection_id(c)
    if not await setup(c, cid, seg):
        return
    items = payloads(c, 2)
    inner = Event(data=items[0]).encode() + KeepAlive(data=c.rng.randbytes(4)).encode() + Event(data=items[1]).encode()
    await c.send(block(cid, 0, inner, 2 * EVENT), label="block: Event, KeepAlive padding, Event")
    if await answered(c, f"ack {2 * EVENT}"):
        await read_back(c, seg, events_of(items))


#: S2.5: 17 Events of 64 KiB: a SegmentRead over the 1 MiB ``reply_part_size``.
BIG_EVENTS, BIG_PAYLOAD = 17, 64 * 1024
BIG = BIG_EVENTS * (HEADER + BIG_PAYLOAD)


@server_case(
    "pd.S2.5",
    "large-reply-reassembled",
    "A SegmentRead over 1 MiB, split by the store into partial messages, reassembles",
    "§5, §7",
    f"Append one block of {BIG_EVENTS} Events of 64 KiB ({BIG} bytes), then ReadSegment from 0 for 2 MiB. The reply is "
    "longer than refwire's reply_part_size (1 MiB): refwire's store sends it as Begin/End parts. Whatever the split, "
    "it must reassemble into one SegmentRead carrying every byte.",
    [expect(PASS, ALL, ["setup 0", f"ack {BIG}", f"read 0 n={BIG}"], "open", facts=["read-back identical"])],
    vectors=["read-reply-split-into-partial-messages", "segment-read-split-16"],
    budget=10.0,
)
async def s2_5(c: Conversation) -> None:
    seg, cid = segment_of("pd.S2.5"), connection_id(c)
    if not await setup(c, cid, seg):
        return
    data = events_of(payloads(c, BIG_EVENTS, BIG_PAYLOAD))
    await c.send(block(cid, 0, data, len(data)), label=f"block of {BIG_EVENTS} Events of 64 KiB", split="whole")
    if await answered(c, f"ack {BIG}", 6.0):
        before = len(obs(c).reads)
        await c.send(ReadSegment(segment=seg, offset=0, suggested_length=2 << 20).encode(), label="ReadSegment 0, 2 MiB")
        if await c.wait_for(lambda cv: len(obs(cv).reads) > before, 6.0, label="SegmentRead"):
            if obs(c).reads[before].data == data:
                c.note("read-back identical")
            c.note(f"the reply came in {obs(c).parts} parts")


# --------------------------------------------------------------------------- S3 connection offsets


@server_case(
    "pd.S3.1",
    "reconnect-resumes-at-level",
    "After a reconnect, AppendSetup gives the stored level and a resend from it is stored once",
    "§6.1, §6.2, §6.6, §6.7",
    "On a first connection: SetupAppend, a block of 2 Events (ack 48), a block of 2 more (ack 96), then the Begin and "
    "one Event of a third block, and FIN (the block never ends). On the case's connection, SetupAppend the same "
    "ConnectionId: the level must be 96 (the unfinished block stored nothing); send the 2 last Events from 96 (ack "
    "144) and read back: the 6 Events, each once, in order.",
    [
        expect(
            PASS,
            ALL,
            ["setup 96", "ack 144", "read 0 n=144"],
            "open",
            facts=["the first connection was acked to 96", "read-back identical"],
        )
    ],
    vectors=["reconnect-retransmits-above-level", "setup-existing-level", "reconnect-before-trailing-partial"],
    budget=10.0,
)
async def s3_1(c: Conversation) -> None:
    seg, cid = segment_of("pd.S3.1"), connection_id(c)
    items = payloads(c, 6)
    frames = [Event(data=p).encode() for p in items]
    if c.open_another is None:
        raise RuntimeError("this runner cannot open a second connection to the testee")
    first = ServerObserver()
    stream: trio.abc.Stream | None = None
    with trio.move_on_at(min(trio.current_time() + 4.0 * c.time_scale, c.deadline)):
        stream = await c.open_another()
        c.action("first connection opened")

        async def exchange(data: bytes, token: str) -> bool:
            assert stream is not None
            await stream.send_all(data)
            while True:
                got = await stream.receive_some(65536)
                if not got:
                    return False
                for t, _ in first.feed(bytes(got)):
                    c.action(f"first connection: {t}")
                    if t == token:
                        return True

        if (
            await exchange(SetupAppend(connection_id=cid, segment=seg).encode(), "setup 0")
            and await exchange(block(cid, 0, frames[0] + frames[1], 48), "ack 48")
            and await exchange(block(cid, 48, frames[2] + frames[3], 48), "ack 96")
        ):
            c.note("the first connection was acked to 96")
            unfinished = BeginAppendBlock(connection_id=cid, connection_offset=96, length=48).encode() + frames[4]
            await stream.send_all(unfinished)
            c.action("first connection: Begin at 96 and one Event sent, then FIN")
    if stream is not None:
        with trio.move_on_after(1.0) as scope:
            scope.shield = True
            await stream.aclose()
    await c.sleep(0.2)
    if not await setup(c, cid, seg):
        return
    if "setup 96" not in c.tokens:
        return
    await c.send(block(cid, 96, frames[4] + frames[5], 48), label="block from 96: the 2 last Events")
    if await answered(c, "ack 144"):
        await read_back(c, seg, b"".join(frames))


@server_case(
    "pd.S3.2",
    "resend-below-level-refused",
    "A block whose Begin offset goes backwards is refused and nothing of it is stored",
    "§6.3, §6.6, §9",
    "SetupAppend, a block of 2 Events (ack 48), then the same block again from offset 0 (a resend of stored bytes). "
    "The store must close the connection without acknowledging it; a read on another connection finds the 48 bytes once.",
    [expect(PASS, ALL, ["setup 0", "ack 48"], CLOSED, facts=["stored once (48 bytes)"])],
    vectors=["begin-offset-below-stored-level", "begin-offset-lies"],
)
async def s3_2(c: Conversation) -> None:
    seg, cid = segment_of("pd.S3.2"), connection_id(c)
    if not await setup(c, cid, seg):
        return
    data = events_of(payloads(c, 2))
    one = block(cid, 0, data, len(data))
    await c.send(one, label="block of 2 Events from 0")
    if not await answered(c, "ack 48"):
        return
    await c.send(one, label="the same block again, from 0")
    await c.wait_close(3.0)
    got = await side_read(c, seg, 4096)
    if got == data:
        c.note("stored once (48 bytes)")
    else:
        c.note(f"stored {None if got is None else len(got)} bytes")


@server_case(
    "pd.S3.3",
    "block-wire-length-overrun",
    "A frame that would end past the Begin's wire length closes the connection",
    "§6.3, §9",
    "SetupAppend, then a block whose BeginAppendBlock says W = 47 while its 2 Events take 48 wire bytes. The store "
    "must close (error on Begin's length) and acknowledge nothing.",
    [expect(PASS, ALL, ["setup 0"], CLOSED)],
    vectors=["wire-length-overrun", "wire-length-short"],
)
async def s3_3(c: Conversation) -> None:
    seg, cid = segment_of("pd.S3.3"), connection_id(c)
    if not await setup(c, cid, seg):
        return
    data = events_of(payloads(c, 2))
    begin = BeginAppendBlock(connection_id=cid, connection_offset=0, length=len(data) - 1).encode()
    end = EndAppendBlock(connection_id=cid, connection_offset=len(data), block_length=len(data)).encode()
    await c.send(begin + data + end, label="block: W = 47, 48 wire bytes inside")
    await c.wait_close(3.0)


# --------------------------------------------------------------------------- S4 partial-message sequence


@server_case(
    "pd.S4.1",
    "middle-part-without-begin",
    "A Middle part without a Begin closes the connection",
    "§5 rule 2, §9",
    "After an echoed KeepAlive, send a PartialMessage Middle part carrying a whole KeepAlive frame, then an empty End. "
    "There is no partial message in progress: the store must close without echoing.",
    [expect(PASS, ALL, ["keepalive 0"], CLOSED)],
    vectors=["partial-message-middle-without-begin"],
)
async def s4_1(c: Conversation) -> None:
    await c.send(KeepAlive().encode(), label="KeepAlive")
    await answered(c, "keepalive 0")
    middle = PartialMessage(part=int(Part.MIDDLE), data=KeepAlive().encode()).encode()
    end = PartialMessage(part=int(Part.END), data=b"").encode()
    await c.send(middle + end, label="Middle part (a KeepAlive), End part", split="whole")
    await c.wait_close(3.0)


# --------------------------------------------------------------------------- client cases
#
# refwire plays the segment store: a memory store per case, answering through
# the case's conversation with its own server machine (ClientObserver), which
# checks every offset and length of the client's blocks (§6.3).  The testee
# contract is §13: append {events} events to segment {slug} (it exists, empty),
# read it back from 0, exit 0 only when it read each event once, in order.


class ClientObserver(MachineObserver):
    """Tokens for what a draft client sends, decoded by refwire's server machine:
    ``setup``, ``block O..L`` (a complete append block, §6.3), ``read O``,
    ``keepalive N``; ``invalid <field>`` at the first byte or block that breaks
    the spec (e.g. a Begin offset below the level).  The machine's events wait
    in :attr:`inbox` for the case's store to answer; the case replies through
    the same machine (:attr:`machine`)."""

    def __init__(self) -> None:
        super().__init__(ServerConnection(DEFAULT_LIMITS))
        self.inbox: list[Any] = []

    def tokens(self, ev: Any) -> list[Token]:
        if isinstance(ev, RequestReceived):
            self.inbox.append(ev.command)
            cmd = ev.command
            if isinstance(cmd, SetupAppend):
                return [("setup", {"type": "SetupAppend", "segment": cmd.segment})]
            if isinstance(cmd, ReadSegment):
                return [(f"read {cmd.offset}", {"type": "ReadSegment", "offset": cmd.offset})]
            return [(cmd.NAME, {"type": cmd.NAME})]
        if isinstance(ev, BlockAppend):
            self.inbox.append(ev)
            return [(f"block {ev.previous_level}..{ev.level}", {"type": "block", "bytes": len(ev.data)})]
        if isinstance(ev, KeepAliveReceived):
            return [(f"keepalive {len(ev.data)}", {"type": "KeepAlive"})]
        return []


def _parse_events(data: bytes) -> list[bytes] | None:
    """The payloads of the Event frames stored (§6.1); None if the bytes are not whole Events."""
    from ..client import parse_events

    try:
        found, used = parse_events(data)
    except ProtocolError:
        return None
    return [payload for _offset, payload in found] if used == len(data) else None


async def serve_client(
    s: Any,
    *,
    part_size: int | None = None,
    reset_before_first_ack: bool = False,
    keepalives: bool = False,
    late: float = 0.0,
) -> None:
    """The case's segment store: accept the client's connections one after the
    other and answer (§6-§8) from a memory store holding the empty segment
    ``{slug}``: ``part_size`` splits every reply longer than it into partial
    messages (§5); ``reset_before_first_ack`` stores the first block, then resets
    the connection before its DataAppended (§6.6); ``keepalives`` sends a
    KeepAlive with data before every reply and ``late`` delays every
    DataAppended.  Then it notes what was stored and how the client ended."""
    segment = s.case.slug
    stored = bytearray()
    levels: dict[uuid.UUID, int] = {}
    reset_done = False
    while not s.exited.is_set():
        c = await s.accept(30.0)
        if c is None:
            break
        o = c.observer
        assert isinstance(o, ClientObserver)
        if part_size is not None:
            o.machine.reply_part_size = part_size
        served = 0
        cut = False
        while c.closed_by_testee is None and not s.exited.is_set() and not cut:
            await c.wait_for(
                lambda cv, o=o, served=served: (
                    len(o.inbox) > served or o.broken or cv.closed_by_testee is not None or s.exited.is_set()
                ),
                1.0,
            )
            if o.broken:
                break
            while served < len(o.inbox) and not cut:
                ev = o.inbox[served]
                served += 1
                reply: Any = None
                if isinstance(ev, SetupAppend):
                    if ev.segment != segment:
                        cut = True
                        break
                    reply = AppendSetup(
                        segment=segment,
                        connection_id=ev.connection_id,
                        connection_offset_ack_level=levels.get(ev.connection_id, 0),
                    )
                elif isinstance(ev, ReadSegment):
                    if ev.segment != segment or not 0 <= ev.offset <= len(stored):
                        cut = True  # §7: the draft has no error reply
                        break
                    size = min(2 << 20, max(8, ev.suggested_length))
                    chunk = bytes(stored[ev.offset : ev.offset + size])
                    reply = SegmentRead(
                        segment=segment,
                        offset=ev.offset,
                        at_tail=ev.offset + len(chunk) == len(stored),
                        end_of_segment=False,
                        data=chunk,
                    )
                elif isinstance(ev, BlockAppend):
                    if levels.get(ev.connection_id, 0) != ev.previous_level:  # §6.5 compare-and-set
                        cut = True
                        break
                    stored += ev.data
                    levels[ev.connection_id] = ev.level
                    if reset_before_first_ack and not reset_done:
                        reset_done = True
                        c.action("stored the block; reset before its DataAppended")
                        cut = True
                        await c.close("RST")
                        break
                    if late:
                        await c.sleep(late)
                    reply = DataAppended(connection_id=ev.connection_id, ack_level=ev.level)
                if reply is not None:
                    if keepalives:
                        o.machine.send(KeepAlive(data=c.rng.randbytes(3)), now=0.0)
                    o.machine.send(reply, now=0.0)
                out = o.machine.data_to_send()
                if out and not await c.send(out, label=type(reply).__name__ if reply is not None else "echo", split="whole"):
                    cut = True
            out = o.machine.data_to_send()  # KeepAlive echoes
            if out and not cut:
                await c.send(out, label="KeepAlive echo", split="whole")
        if c.closed_by_testee is None and c.closed_by_runner is None:
            await c.close("FIN")
    got = _parse_events(bytes(stored))
    if got is None:
        s.note(f"stored {len(stored)} bytes that are not whole Events")
        return
    s.note(f"stored {len(got)} events")
    if len(set(got)) == len(got):
        s.note("each stored once")


EXIT_OK = "exit 0"
client_case = BOOK.client


@client_case(
    "pd.C1.1",
    "append-and-read-back",
    "Append, then read everything back",
    "§6.2, §6.3, §6.5, §7, §13",
    "Serve normally: the client sets up its ConnectionId, appends its events in blocks and reads the segment back. "
    "It must exit 0, and the store must hold each event once.",
    [
        expect(
            PASS, ALL, ["connect", "setup", "...", "block 0..*", "..."], facts=[EXIT_OK, "stored 12 events", "each stored once"]
        )
    ],
    events=12,
    vectors=["write-then-read-back"],
)
async def c1_1(s: Any) -> None:
    await serve_client(s)


@client_case(
    "pd.C1.2",
    "replies-in-partial-messages",
    "Every reply cut into partial messages",
    "§5, §13",
    "Send every reply longer than 7 bytes as Begin/Middle…/End parts of 7 data bytes (AppendSetup, DataAppended and "
    "SegmentRead alike). The client must reassemble them and complete.",
    [expect(PASS, ALL, ["connect", "setup", "..."], facts=[EXIT_OK, "stored 10 events", "each stored once"])],
    events=10,
    vectors=["append-setup-split", "data-appended-split", "segment-read-split-16"],
)
async def c1_2(s: Any) -> None:
    await serve_client(s, part_size=7)


@client_case(
    "pd.C1.3",
    "reset-between-append-and-ack",
    "The connection is reset after a block is stored, before its DataAppended",
    "§6.1, §6.6, §13",
    "Store the client's first block, then reset the connection without acknowledging it. The client must reconnect, "
    "SetupAppend again, take the returned level as stored and resend only what lies above it (a resend below the "
    "level is refused: §6.3). Each event must be stored once and read back once.",
    [
        expect(
            PASS,
            ALL,
            ["connect", "setup", "block 0..*", "closed by refwire (RST)", "connect", "setup", "..."],
            facts=[EXIT_OK, "stored 12 events", "each stored once"],
        )
    ],
    events=12,
    vectors=["reconnect-after-ack-retransmits-nothing", "reconnect-retransmits-above-level"],
)
async def c1_3(s: Any) -> None:
    await serve_client(s, reset_before_first_ack=True)


@client_case(
    "pd.C1.4",
    "late-acks-and-keep-alives",
    "KeepAlives before every reply, acks late",
    "§6.5, §8, §13",
    "Send a KeepAlive with 3 bytes of data before every reply and each DataAppended 0.5 s late. The client must take "
    "the KeepAlives as keepalives (not echo or refuse them) and complete.",
    [expect(PASS, ALL, ["connect", "setup", "..."], facts=[EXIT_OK, "stored 8 events", "each stored once"])],
    events=8,
    vectors=["keep-alive-with-data"],
)
async def c1_4(s: Any) -> None:
    await serve_client(s, keepalives=True, late=0.5)


# --------------------------------------------------------------------------- catalogue


def server_segments() -> list[str]:
    """The segments a server testee must hold, empty, before a run (§13)."""
    return [segment_of(c.id) for c in BOOK.cases if c.role == "server"]


async def precreate(host: str, port: int) -> int:
    """§13's pre-create step for refwire's store: create every case segment through
    the **current** dialect's CreateSegment at ``host:port`` (the store's
    ``--listen``, not its draft listener).  Returns how many were new."""
    from ..client import create_segment

    made = 0
    for name in server_segments():
        made += bool(await create_segment(host, port, name))
    return made


async def serve_for_simulation(listener: Any, sink: str) -> None:
    """refwire's own store on ``listener``, draft dialect, with the case segments
    created (§13): the server cases run against it inside the simulator."""
    from ..server import SegmentStoreServer
    from .server import DraftFrontend

    server = SegmentStoreServer()
    for name in server_segments():
        server.store.create(name)
    front = DraftFrontend(server)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.sync_forever)
        await front.serve([listener])


async def client_for_simulation(connect: Callable[[], Awaitable[trio.abc.Stream]], values: Mapping[str, str]) -> int:
    """refwire's own draft client as a client-case testee (the §13 contract):
    append ``{events}`` distinct events to segment ``{slug}`` with a
    :class:`~refwire.pravega.draft2017.client.DraftWriter` (4 events per write),
    read the segment back from 0 with a
    :class:`~refwire.pravega.draft2017.client.DraftReader`, exit 0 only when it
    holds each event once, in order."""
    from .client import DraftConnection, DraftReader, DraftWriter, DraftWriterConfig

    n, segment = int(values["events"]), values["slug"]
    rng = random.Random(int(values["seed"]))
    sent = [rng.randbytes(20) + i.to_bytes(4, "big") for i in range(n)]
    writer = DraftWriter(
        "",
        0,
        segment,
        connection_id=uuid.UUID(int=rng.getrandbits(128)),
        connect=connect,
        config=DraftWriterConfig(max_attempts=5, ack_timeout=10.0),
        rng=rng,
    )
    want = events_of(sent)
    try:
        for i in range(0, n, 4):
            await writer.write(sent[i : i + 4])
        conn = DraftConnection(await connect())
        got = b""
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)
            reader = DraftReader(conn, segment, read_size=100)
            while len(got) < len(want):
                r = await reader.read(timeout=10.0)
                got += r.data
                if not r.data:
                    break
            nursery.cancel_scope.cancel()
    except (DraftWriteFailed, ProtocolError, OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
        return 1
    return 0 if _parse_events(got) == sent else 1


CATALOGUE = Catalogue(
    protocol="pravega-draft-2017",
    prefix="pd",
    cases=tuple(BOOK.cases),
    profiles=PROFILES,
    features=FEATURES,
    server_observer=ServerObserver,
    client_observer=ClientObserver,
    spec=SPEC,
    sim_server=serve_for_simulation,
    sim_client=client_for_simulation,
)


def main(argv: list[str] | None = None) -> int:
    """``python -m refwire.pravega.draft2017.conform HOST:PORT``: the §13 pre-create
    step against refwire's store (its current-dialect ``--listen`` address);
    ``--list`` prints the segment names instead."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--list"]:
        print("\n".join(server_segments()))
        return 0
    if len(args) != 1 or ":" not in args[0]:
        print("usage: python -m refwire.pravega.draft2017.conform HOST:PORT | --list", file=sys.stderr)
        return 2
    host, _, port = args[0].rpartition(":")
    made = trio.run(precreate, host, int(port))
    print(f"{made} of {len(server_segments())} case segments created")
    return 0


if __name__ == "__main__":
    sys.exit(main())
