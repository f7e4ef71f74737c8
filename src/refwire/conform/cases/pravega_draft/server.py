"""Pravega 2017 draft server cases (``pd.S…``): refwire plays a draft client against
the testee segment store; each case works on its own empty segment, created
before the run (§13, :func:`~.segments.server_segments`).
"""

from __future__ import annotations

import trio

from ....pravega.draft2017.frames import (
    BeginAppendBlock,
    EndAppendBlock,
    Event,
    KeepAlive,
    Part,
    PartialMessage,
    ReadSegment,
    SetupAppend,
)
from ....pravega.draft2017.partial import split_message
from ....pravega.frames import HEADER
from ...conversation import Conversation
from ...model import CaseBook, expect
from ._common import (
    ALL,
    CLOSED,
    EVENT,
    PASS,
    SPEC,
    ServerObserver,
    answered,
    block,
    connection_id,
    events_of,
    obs,
    payloads,
    raw_frame,
    read_back,
    segment_of,
    setup,
    side_read,
)

BOOK = CaseBook(SPEC, server_ignore=(), server_budget=6.0)
server_case = BOOK.server


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
    seg, cid = segment_of("pd.S2.1", c.run_id), connection_id(c)
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
    seg, cid = segment_of("pd.S2.2", c.run_id), connection_id(c)
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
    seg, cid = segment_of("pd.S2.3", c.run_id), connection_id(c)
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
    seg, cid = segment_of("pd.S2.4", c.run_id), connection_id(c)
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
    seg, cid = segment_of("pd.S2.5", c.run_id), connection_id(c)
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
    seg, cid = segment_of("pd.S3.1", c.run_id), connection_id(c)
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
    seg, cid = segment_of("pd.S3.2", c.run_id), connection_id(c)
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
    seg, cid = segment_of("pd.S3.3", c.run_id), connection_id(c)
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
