"""Pravega server cases S1 (handshake and framing) and S2 (appends): refwire plays
a client against the testee segment store, on segments of the case's own
(:func:`~._common.segment_of`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import trio

from ....pravega.frames import (
    AppendBlockEnd,
    AppendSetup,
    ConditionalAppend,
    CreateSegment,
    DataAppended,
    GetStreamSegmentInfo,
    Hello,
    KeepAlive,
    SetupAppend,
    StreamSegmentInfo,
    encode_event,
)
from ....pravega.writer import WriterSession
from ...conversation import Conversation
from ...model import expect
from ._common import (
    CLOSED,
    HEADER,
    PASS,
    SERVER_MAX_FRAME,
    SERVERS,
    ServerObserver,
    _write_all,
    ack_chain_ok,
    acked,
    create,
    events_for,
    frames_of,
    has,
    hello,
    obs,
    read_all,
    replies,
    segment_of,
    server_book,
    setup,
    writer_of,
)

BOOK = server_book()
server_case = BOOK.server


# --------------------------------------------------------------------------- S1 handshake and framing


@server_case(
    "pv.S1.1",
    "hello-compatible",
    "A compatible Hello is answered with the server's Hello",
    "§7.1",
    "Send Hello(17, 5). The store answers one Hello whose version range overlaps 5..17, and keeps the connection.",
    [expect(PASS, SERVERS, ["Hello"], "open", facts=["versions overlap 5..17"])],
    vectors=["commands.json"],
)
async def s1_1(c: Conversation) -> None:
    await hello(c)
    await c.quiet(0.5)
    for h in obs(c).hellos:
        if h.low_version <= 17 and h.high_version >= 5:
            c.note("versions overlap 5..17")


@server_case(
    "pv.S1.2",
    "hello-too-new",
    "A Hello from a client too new is answered, then the connection closes",
    "§7.1, §8",
    "Send Hello(high 40, low 30): no overlap with a v17 store. It answers its own Hello, then closes.",
    [expect(PASS, SERVERS, ["Hello"], CLOSED)],
)
async def s1_2(c: Conversation) -> None:
    await c.send(Hello(high_version=40, low_version=30).encode(), label="Hello(40, 30)", split="whole")
    await c.wait_close(3.0)


@server_case(
    "pv.S1.3",
    "hello-too-old",
    "A Hello from a client too old is answered, then the connection closes",
    "§7.1, §8",
    "Send Hello(high 4, low 2): below the oldest compatible version 5. The store answers its Hello, then closes.",
    [expect(PASS, SERVERS, ["Hello"], CLOSED)],
)
async def s1_3(c: Conversation) -> None:
    await c.send(Hello(high_version=4, low_version=2).encode(), label="Hello(4, 2)", split="whole")
    await c.wait_close(3.0)


@server_case(
    "pv.S1.4",
    "keepalive-echo",
    "Each KeepAlive is echoed",
    "§7.2",
    "After the Hello exchange send two KeepAlives. Two KeepAlives come back; the connection stays open.",
    [expect(PASS, SERVERS, ["Hello", "KeepAlive", "KeepAlive"], "open")],
)
async def s1_4(c: Conversation) -> None:
    await hello(c)
    for _ in range(2):
        await c.send(KeepAlive().encode(), label="KeepAlive", split="whole")
    await c.wait_for(lambda cv: cv.tokens.count("KeepAlive") >= 2, 2.0, label="two echoes")
    await c.quiet(0.5)


@server_case(
    "pv.S1.5",
    "frame-over-limit-from-header",
    "A frame one byte over the limit is refused from its header alone",
    "§1.1",
    "After the Hello exchange send only the 8-byte header of a CreateSegment whose length is 0x00FFFFF8 (header + "
    "payload one byte over 0x00FFFFFF) and no payload. The store closes without a reply, without waiting for the payload.",
    [expect(PASS, SERVERS, ["Hello"], CLOSED)],
    vectors=["errors.json"],
)
async def s1_5(c: Conversation) -> None:
    await hello(c)
    await c.send(
        (20).to_bytes(4, "big") + (SERVER_MAX_FRAME - HEADER + 1).to_bytes(4, "big"),
        label="header: length 0x00FFFFF8",
        split="whole",
    )
    await c.wait_close(2.0)


@server_case(
    "pv.S1.6",
    "frame-at-limit-waits",
    "A frame exactly at the limit is accepted: the store waits for its payload",
    "§1.1",
    "After the Hello exchange send the header of a CreateSegment whose length is 0x00FFFFF7 (exactly the limit) and "
    "64 KiB of its payload. The store must keep reading (no reply, connection open for 1.5 s).",
    [expect(PASS, SERVERS, ["Hello"], "open")],
)
async def s1_6(c: Conversation) -> None:
    await hello(c)
    await c.send(
        (20).to_bytes(4, "big") + (SERVER_MAX_FRAME - HEADER).to_bytes(4, "big"), label="header: length 0x00FFFFF7", split="whole"
    )
    await c.send(bytes(64 * 1024), label="64 KiB of the payload", split="whole")
    await c.quiet(1.5)


@server_case(
    "pv.S1.7",
    "unknown-and-retired-type",
    "An unknown or retired command type closes the connection without a reply",
    "§3, §1.2, §8",
    "After the Hello exchange send a frame of the retired type 13 (4 payload bytes). The store closes, no reply.",
    [expect(PASS, SERVERS, ["Hello"], CLOSED)],
)
async def s1_7(c: Conversation) -> None:
    await hello(c)
    await c.send((13).to_bytes(4, "big") + (4).to_bytes(4, "big") + b"\0\0\0\0", label="frame of retired type 13", split="whole")
    await c.wait_close(3.0)


@server_case(
    "pv.S1.8",
    "no-hello-needed",
    "The store does not require a Hello before other commands",
    "§7.1",
    "Without a Hello, send CreateSegment for the case's segment. It is answered SegmentCreated; no Hello comes unprompted.",
    [expect(PASS, SERVERS, ["SegmentCreated 1"], "open")],
)
async def s1_8(c: Conversation) -> None:
    await create(c, 1, segment_of(c, "pv.S1.8"))
    await c.quiet(0.3)


# --------------------------------------------------------------------------- S2 appends


@server_case(
    "pv.S2.1",
    "java-blocks-partial-events",
    "Java streamed blocks with PartialEvent splits and Padding are reassembled",
    "§5.2, §5.3, §5.4",
    "Create the case's segment, SetupAppend, then write 9 events of seeded sizes the way the Java client does: "
    "blocks of 100, 37 and 260 bytes (events split into PartialEvent + AppendBlockEnd data, a block closed with Padding), "
    "split at seeded offsets. The acks must chain to event 9 (one per block end); reading the segment back gives exactly "
    "the 9 Event frames.",
    [
        expect(
            PASS,
            SERVERS,
            ["Hello", "SegmentCreated 1", "AppendSetup 2", "DataAppended *", "...", "DataAppended 9", "SegmentRead 3"],
            "open",
            facts=["acks chain to event 9", "read back byte-identical"],
        )
    ],
    vectors=["appends.json"],
)
async def s2_1(c: Conversation) -> None:
    seg = segment_of(c, "pv.S2.1")
    await hello(c)
    await create(c, 1, seg)
    w = WriterSession(seg, writer_of(c), style="java")
    w.java_block_sizes = [100, 37, 260]
    await setup(c, 2, w)
    payloads = events_for(c, 9)
    for p in payloads:
        w.add(p)
    await _write_all(c, w, 9)
    if ack_chain_ok(c, 9):
        c.note("acks chain to event 9")
    if await read_all(c, 3, seg) == frames_of(payloads):
        c.note("read back byte-identical")


@server_case(
    "pv.S2.2",
    "rust-bare-block-ends",
    "Rust-style bare AppendBlockEnds, stop-and-wait, each acked",
    "§5.2, §5.3, §5.4",
    "SetupAppend on the case's new segment; then 5 times: one AppendBlockEnd (no AppendBlock) holding one Event, "
    "a fresh requestId, waiting for its DataAppended. Acks 1..5, each previousEventNumber the one before (the first "
    "Long.MIN_VALUE); the segment holds the 5 events.",
    [
        expect(
            PASS,
            SERVERS,
            [
                "Hello",
                "SegmentCreated 1",
                "AppendSetup 2",
                "DataAppended 1",
                "DataAppended 2",
                "DataAppended 3",
                "DataAppended 4",
                "DataAppended 5",
                "SegmentRead 3",
            ],
            "open",
            facts=["acks chain to event 5", "read back byte-identical"],
        )
    ],
    vectors=["appends.json"],
)
async def s2_2(c: Conversation) -> None:
    seg = segment_of(c, "pv.S2.2")
    await hello(c)
    await create(c, 1, seg)
    w = WriterSession(seg, writer_of(c), style="rust")
    await setup(c, 2, w)
    payloads = events_for(c, 5)
    for i, p in enumerate(payloads, start=1):
        w.add(p)
        w.request_id = 100 + i
        await _write_all(c, w, i)
    if ack_chain_ok(c, 5):
        c.note("acks chain to event 5")
    if await read_all(c, 3, seg) == frames_of(payloads):
        c.note("read back byte-identical")


def _block_end(wid: uuid.UUID, number: int, data: bytes, rid: int, count: int = 1) -> bytes:
    return AppendBlockEnd(
        writer_id=wid, size_of_whole_events=len(data), data=data, num_events=count, last_event_number=number, request_id=rid
    ).encode()


@server_case(
    "pv.S2.3",
    "event-number-backwards",
    "An event number going backwards closes the connection",
    "§5.3 (rule 5.3), §8",
    "SetupAppend, append event 3 (acked), then an AppendBlockEnd with lastEventNumber 2. The store closes without a reply.",
    [expect(PASS, SERVERS, ["Hello", "SegmentCreated 1", "AppendSetup 2", "DataAppended 3"], CLOSED)],
    vectors=["errors.json"],
)
async def s2_3(c: Conversation) -> None:
    seg = segment_of(c, "pv.S2.3")
    await hello(c)
    await create(c, 1, seg)
    wid = writer_of(c)
    await c.send(SetupAppend(request_id=2, writer_id=wid, segment=seg).encode(), label="SetupAppend")
    await has(c, "AppendSetup 2")
    await c.send(_block_end(wid, 3, encode_event(b"three"), 10, 3), label="AppendBlockEnd last=3")
    await acked(c, 3)
    await c.send(_block_end(wid, 2, encode_event(b"two"), 11), label="AppendBlockEnd last=2 (backwards)")
    await c.wait_close(3.0)


@server_case(
    "pv.S2.4",
    "event-number-equal-stored-again",
    "An append repeating the last event number is stored again, unacked",
    "§5.5",
    "SetupAppend, append event 3 (acked), then the same event again with lastEventNumber 3. The store keeps the "
    "connection, stores the data a second time and sends no DataAppended for it; GetStreamSegmentInfo shows twice the length.",
    [
        expect(
            PASS,
            SERVERS,
            ["Hello", "SegmentCreated 1", "AppendSetup 2", "DataAppended 3", "StreamSegmentInfo 4"],
            "open",
            facts=["stored twice"],
        )
    ],
    vectors=["appends.json"],
)
async def s2_4(c: Conversation) -> None:
    seg = segment_of(c, "pv.S2.4")
    await hello(c)
    await create(c, 1, seg)
    wid = writer_of(c)
    ev = encode_event(b"the same event")
    await c.send(SetupAppend(request_id=2, writer_id=wid, segment=seg).encode(), label="SetupAppend")
    await has(c, "AppendSetup 2")
    await c.send(_block_end(wid, 3, ev, 10, 3), label="AppendBlockEnd last=3")
    await acked(c, 3)
    await c.send(_block_end(wid, 3, ev, 11), label="AppendBlockEnd last=3 again")
    await c.quiet(0.5)
    await c.send(GetStreamSegmentInfo(request_id=4, segment_name=seg).encode(), label="GetStreamSegmentInfo")
    await has(c, "StreamSegmentInfo 4")
    for info in replies(c, StreamSegmentInfo):
        if info.write_offset == 2 * len(ev):
            c.note("stored twice")


async def _side_writes(c: Conversation, seg: str, w: WriterSession, acked_n: int, more: int) -> None:
    """On a second connection: create ``seg``, set ``w`` up, write events
    1..acked_n and wait for their acks, then write ``more`` events and drop the
    connection at once (whether the store kept them is its to say on reconnect)."""
    if c.open_another is None:
        raise RuntimeError("this runner cannot open a second connection to the testee")
    side = ServerObserver()
    stream = await c.open_another()

    async def until(pred: Callable[[], bool]) -> None:
        with trio.move_on_after(3.0 * c.time_scale):
            while not pred():
                data = await stream.receive_some(65536)
                if not data:
                    return
                side.feed(bytes(data))

    try:
        await stream.send_all(Hello().encode() + CreateSegment(request_id=1, segment=seg).encode() + w.setup(2).encode())
        await until(lambda: any(isinstance(r, AppendSetup) for r in side.replies))
        for r in side.replies:
            if isinstance(r, AppendSetup):
                w.on_append_setup(r)
        for i in range(acked_n):
            w.add(bytes(c.rng.getrandbits(8) for _ in range(40)) + bytes([i]))
        await stream.send_all(w.take())
        await until(lambda: any(isinstance(r, DataAppended) and r.event_number >= acked_n for r in side.replies))
        for r in side.replies:
            if isinstance(r, DataAppended):
                w.on_data_appended(r)
        c.note(f"first connection: events 1..{acked_n} acked" if w.last_acked == acked_n else "first connection: acks missing")
        for i in range(more):
            w.add(bytes(c.rng.getrandbits(8) for _ in range(40)) + bytes([acked_n + i]))
        await stream.send_all(w.take())
    finally:
        await stream.aclose()
    w.connection_lost()


@server_case(
    "pv.S2.5",
    "reconnect-dedup",
    "Reconnect: AppendSetup.lastEventNumber says what is stored; resending the rest stores each event once",
    "§5.4, §5.6",
    "On a second connection write events 1..4 (acked) and 5..6, then drop it. On this connection SetupAppend for the same "
    "writer: AppendSetup.lastEventNumber must be 4, 5 or 6 (what the store kept). Resend only the events above it, add 7..8, "
    "and read the segment back: events 1..8 exactly once, in order (exactly-once on read-back).",
    [
        expect(
            PASS,
            SERVERS,
            ["Hello", "AppendSetup 2", "...", "DataAppended 8", "SegmentRead 3"],
            "open",
            facts=["first connection: events 1..4 acked", "lastEventNumber within 4..6", "events 1..8 exactly once, in order"],
        )
    ],
    vectors=["appends.json"],
)
async def s2_5(c: Conversation) -> None:
    seg = segment_of(c, "pv.S2.5")
    w = WriterSession(seg, writer_of(c), style="rust")
    await _side_writes(c, seg, w, 4, 2)
    await hello(c)
    got = await setup(c, 2, w)
    if got is not None and 4 <= got.last_event_number <= 6:
        c.note("lastEventNumber within 4..6")
    for i in range(2):
        w.add(bytes(c.rng.getrandbits(8) for _ in range(40)) + bytes([6 + i]))
    await _write_all(c, w, 8)
    data = await read_all(c, 3, seg)
    if data is not None:
        from ....pravega.client import parse_events

        evs, used = parse_events(data)
        tags = [p[-1] for _, p in evs]
        if used == len(data) and tags == list(range(8)):
            c.note("events 1..8 exactly once, in order")
        else:
            c.note(f"read back: event tags {tags}")


@server_case(
    "pv.S2.6",
    "conditional-append",
    "A conditional append at the wrong offset fails and keeps the connection; at the right one it is stored",
    "§5.4, §8",
    "SetupAppend, then ConditionalAppend event 1 expecting offset 7 (the segment is empty): ConditionalCheckFailed 1, "
    "connection kept. Then the same event number expecting offset 0: DataAppended 1.",
    [expect(PASS, SERVERS, ["Hello", "SegmentCreated 1", "AppendSetup 2", "ConditionalCheckFailed 1", "DataAppended 1"], "open")],
    features=["conditional"],
)
async def s2_6(c: Conversation) -> None:
    seg = segment_of(c, "pv.S2.6")
    await hello(c)
    await create(c, 1, seg)
    wid = writer_of(c)
    await c.send(SetupAppend(request_id=2, writer_id=wid, segment=seg).encode(), label="SetupAppend")
    await has(c, "AppendSetup 2")
    await c.send(
        ConditionalAppend(writer_id=wid, event_number=1, expected_offset=7, event=b"cond", request_id=10).encode(),
        label="ConditionalAppend @7",
    )
    await has(c, "ConditionalCheckFailed")
    await c.send(
        ConditionalAppend(writer_id=wid, event_number=1, expected_offset=0, event=b"cond", request_id=11).encode(),
        label="ConditionalAppend @0",
    )
    await acked(c, 1)


@server_case(
    "pv.S2.7",
    "append-without-setup",
    "An append from a writer never set up closes the connection without a reply",
    "§5.3 (rule 5.1), §5.4, §8",
    "After the Hello exchange send an AppendBlockEnd for a writer that sent no SetupAppend. The store closes, no reply.",
    [expect(PASS, SERVERS, ["Hello"], CLOSED)],
)
async def s2_7(c: Conversation) -> None:
    await hello(c)
    await c.send(_block_end(writer_of(c), 1, encode_event(b"orphan"), 5), label="AppendBlockEnd without SetupAppend")
    await c.wait_close(3.0)


@server_case(
    "pv.S2.8",
    "setup-missing-segment-keeps-connection",
    "SetupAppend on a missing segment is answered NoSuchSegment; the connection stays",
    "§5.4, §8",
    "SetupAppend on a segment that does not exist: NoSuchSegment 1. Then a KeepAlive is still echoed.",
    [expect(PASS, SERVERS, ["Hello", "NoSuchSegment 1", "KeepAlive"], "open")],
)
async def s2_8(c: Conversation) -> None:
    await hello(c)
    await c.send(
        SetupAppend(request_id=1, writer_id=writer_of(c), segment=segment_of(c, "pv.S2.8")).encode(),
        label="SetupAppend (missing)",
    )
    await has(c, "NoSuchSegment 1")
    await c.send(KeepAlive().encode(), label="KeepAlive", split="whole")
    await has(c, "KeepAlive", 2.0)
    await c.quiet(0.3)
