"""Pravega v17 conformance cases (``refwire conform pravega``).

Server cases (``pv.S…``): refwire plays a client against the testee segment
store and judges its replies and how it closes.  Every case works on segments
of its own, named after the case id and a seeded suffix
(``conform/pv-S2-1-5f3a09c1/0.#epoch.0``), so cases never meet on a shared
store; a store that keeps its segments across runs needs a new ``--seed``.

Client cases (``pv.C…``): refwire plays the segment store *and* a controller
(:class:`~refwire.pravega.controller.PravegaController`, whose every
``getURI`` points at the case's store), so a real client that finds segments
through a controller reaches the case's misbehaving store.  The testee
contract is ``specs/pravega/README.md`` §14.

Profiles are the behaviours the spec documents: ``strict`` (the spec;
refwire's store and client), ``java-server`` (the Java segment store, §8,
§10.3), ``rust-client`` (``pravega-client-rust``, the PyPI ``pravega``
package, §5.2, §10.2) and ``java-client`` (§5.2, §10.2).

Ids are never reused or renumbered.  The bytes a case sends depend only on
the run seed and the case id (:func:`refwire.conform.model.case_seed`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from ..conform.conversation import Conversation, MachineObserver, Token
from ..conform.model import CaseBook, Verdict, expect
from ..conform.runner import Catalogue
from ..errors import ProtocolError
from .connection import ClientConnection, ServerConnection
from .events import Append, ConnectionClosed, HelloReceived, KeepAliveReceived, ReplyReceived, RequestReceived
from .frames import (
    CLIENT_LIMITS,
    NULL_VALUE,
    AppendBlockEnd,
    AppendSetup,
    Command,
    ConditionalAppend,
    CreateSegment,
    CreateTableSegment,
    DataAppended,
    GetStreamSegmentInfo,
    Hello,
    KeepAlive,
    ReadSegment,
    ReadTable,
    SealSegment,
    SegmentRead,
    SetupAppend,
    StreamSegmentInfo,
    TableEntry,
    TableKey,
    TableRead,
    UpdateTableEntries,
    encode_event,
    request_id_of,
)
from .writer import WriterSession

__all__ = ["CATALOGUE", "ClientObserver", "ServerObserver", "segment_of"]

SPEC = "specs/pravega/README.md"
PASS, INFO, FAIL = Verdict.PASS, Verdict.INFO, Verdict.FAIL
SERVERS = "strict java-server"
CLIENTS = "strict rust-client java-client"
CLOSED = "FIN RST"
#: A KeepAlive echo may come whenever the store likes; a case that counts them says so.
SERVER_IGNORE: tuple[str, ...] = ()

PROFILES = {
    "strict": f"the behaviour {SPEC} specifies (refwire's segment store and client)",
    "java-server": "the Java segment store (Pravega master, wire v17) as the spec records it (§1.1, §5, §8, §10.3)",
    "rust-client": "pravega-client-rust (PyPI pravega==0.3.8, wire v15) as the spec records it (§5.2, §7.1, §10.2)",
    "java-client": "Pravega's Java client (wire v17) as the spec records it (§5.2, §7, §10.2)",
}

FEATURES = {
    "tables": "table segments (CreateTableSegment, UpdateTableEntries, ReadTable; §9)",
    "conditional": "conditional appends (ConditionalAppend; §5.4)",
}

#: The Java server's frame limit: header + payload (§1.1).
SERVER_MAX_FRAME = 0x00FFFFFF
HEADER = 8


def segment_of(c: Any, case_id: str, n: int = 0) -> str:
    """The case's own segment ``n``: a stream named after the case id plus a
    seeded suffix (a run against a store that keeps segments needs a new seed)."""
    key = f"_seg{n}"
    got = getattr(c, key, None)
    if got is None:
        got = f"conform/{case_id.replace('.', '-')}-{c.rng.getrandbits(32):08x}/{n}.#epoch.0"
        setattr(c, key, got)
    return str(got)


def writer_of(c: Conversation) -> uuid.UUID:
    """A writer id drawn from the case seed."""
    return uuid.UUID(int=c.rng.getrandbits(128), version=4)


def _token(cmd: Command) -> str:
    if isinstance(cmd, DataAppended):
        return f"DataAppended {cmd.event_number}"
    if cmd.NAME == "ConditionalCheckFailed":
        return f"ConditionalCheckFailed {getattr(cmd, 'event_number', '?')}"
    rid = request_id_of(cmd)
    return cmd.NAME if rid == -1 else f"{cmd.NAME} {rid}"


# --------------------------------------------------------------------------- observer


class ServerObserver(MachineObserver):
    """Tokens for what a segment store sends, decoded by refwire's client
    machine: ``Hello``, ``KeepAlive``, ``<Reply> <requestId>`` (``DataAppended
    <eventNumber>``); ``invalid <field>`` at the first byte that does not
    decode.  The decoded replies are kept in :attr:`replies` for the case."""

    def __init__(self) -> None:
        super().__init__(ClientConnection(CLIENT_LIMITS, version=(NULL_VALUE_HIGH, 0)), eof="lost")
        self.replies: list[Command] = []
        self.hellos: list[HelloReceived] = []

    def tokens(self, ev: Any) -> list[Token]:
        if isinstance(ev, HelloReceived):
            self.hellos.append(ev)
            return [("Hello", {"type": "Hello", "high": ev.high_version, "low": ev.low_version})]
        if isinstance(ev, KeepAliveReceived):
            return [("KeepAlive", {"type": "KeepAlive"})]
        if isinstance(ev, ReplyReceived):
            self.replies.append(ev.command)
            return [(_token(ev.command), {"type": ev.command.NAME})]
        if isinstance(ev, ConnectionClosed):
            return [("closed", {"type": "closed", "reason": ev.reason})]
        return []


#: The observer accepts any server Hello (judging versions is the cases' job).
NULL_VALUE_HIGH = 2**31 - 1


# --------------------------------------------------------------------------- helpers

BOOK = CaseBook(SPEC, server_ignore=SERVER_IGNORE, server_budget=6.0, client_budget=40.0)
server_case = BOOK.server


def obs(c: Conversation) -> ServerObserver:
    o = c.observer
    assert isinstance(o, ServerObserver)
    return o


def replies(c: Conversation, kind: type[Any]) -> list[Any]:
    return [r for r in obs(c).replies if isinstance(r, kind)]


async def has(c: Conversation, prefix: str, timeout: float = 3.0) -> bool:
    return await c.wait_for(lambda cv: any(t.startswith(prefix) for t in cv.tokens), timeout, label=prefix)


def answer(c: Conversation, rid: int) -> Command | None:
    """The reply to request ``rid`` (acks aside), if it came."""
    for r in obs(c).replies:
        if not isinstance(r, DataAppended) and request_id_of(r) == rid:
            return r
    return None


async def answered(c: Conversation, rid: int, timeout: float = 3.0) -> Command | None:
    await c.wait_for(lambda cv: answer(cv, rid) is not None, timeout, label=f"request {rid} answered")
    return answer(c, rid)


async def hello(c: Conversation) -> bool:
    await c.send(Hello(high_version=17, low_version=5).encode(), label="Hello(17, 5)", split="whole")
    return await has(c, "Hello", 3.0)


async def create(c: Conversation, rid: int, segment: str) -> bool:
    await c.send(CreateSegment(request_id=rid, segment=segment).encode(), label=f"CreateSegment {segment}")
    return await answered(c, rid) is not None


async def setup(c: Conversation, rid: int, w: WriterSession) -> AppendSetup | None:
    await c.send(w.setup(rid).encode(), label=f"SetupAppend {w.segment}")
    r = await answered(c, rid)
    if isinstance(r, AppendSetup) and r.writer_id == w.writer_id and r.segment == w.segment:
        w.on_append_setup(r)
        return r
    return None


def events_for(c: Conversation, n: int, *, low: int = 1, high: int = 120) -> list[bytes]:
    """``n`` event payloads of seeded sizes and contents."""
    return [bytes(c.rng.getrandbits(8) for _ in range(c.rng.randint(low, high))) for _ in range(n)]


async def acked(c: Conversation, number: int, timeout: float = 3.0) -> bool:
    return await c.wait_for(
        lambda cv: any(r.event_number >= number for r in replies(cv, DataAppended)), timeout, label=f"ack of {number}"
    )


def ack_chain_ok(c: Conversation, last: int) -> bool:
    """The acks chain exactly (§5.4): each ``previousEventNumber`` is the
    ``eventNumber`` before it, the first is ``Long.MIN_VALUE``, the last is ``last``."""
    acks = replies(c, DataAppended)
    prev = NULL_VALUE
    for a in acks:
        if a.previous_event_number != prev or not a.event_number > prev:
            return False
        prev = a.event_number
    return prev == last


async def read_all(c: Conversation, rid: int, segment: str, offset: int = 0, length: int = 1 << 20) -> bytes | None:
    """One ReadSegment; the data of its SegmentRead (None: no SegmentRead)."""
    await c.send(
        ReadSegment(segment=segment, offset=offset, suggested_length=length, request_id=rid).encode(),
        label=f"ReadSegment @{offset}",
    )
    r = await answered(c, rid)
    return bytes(r.data) if isinstance(r, SegmentRead) else None


def frames_of(payloads: Sequence[bytes]) -> bytes:
    return b"".join(encode_event(p) for p in payloads)


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


async def _write_all(c: Conversation, w: WriterSession, last: int) -> None:
    data = w.take()
    if data:
        await c.send(data, label=f"appends up to event {last}")
    await acked(c, last)
    for a in replies(c, DataAppended):
        try:
            w.on_data_appended(a)
        except ProtocolError:
            pass


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
        from .client import parse_events

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


# --------------------------------------------------------------------------- S3 reads


@server_case(
    "pv.S3.1",
    "tail-read-parks-and-wakes",
    "A read at the tail parks, and an append wakes it with the request's offset",
    "§6 (6)",
    "Create the case's segment and read at offset 0 (its tail): no answer for 0.5 s. Then append one event on the same "
    "connection. The read is answered with that event's bytes at offset 0, atTail; refwire sends the DataAppended first, "
    "the Java server in either order.",
    [
        expect(
            PASS,
            SERVERS,
            ["Hello", "SegmentCreated 1", "AppendSetup 3", "DataAppended 1", "SegmentRead 2"],
            "open",
            facts=["woken at offset 0 with the event"],
        ),
        expect(
            PASS,
            "java-server",
            ["Hello", "SegmentCreated 1", "AppendSetup 3", "SegmentRead 2", "DataAppended 1"],
            "open",
            facts=["woken at offset 0 with the event"],
        ),
    ],
)
async def s3_1(c: Conversation) -> None:
    seg = segment_of(c, "pv.S3.1")
    await hello(c)
    await create(c, 1, seg)
    await c.send(
        ReadSegment(segment=seg, offset=0, suggested_length=4096, request_id=2).encode(), label="ReadSegment @0 (the tail)"
    )
    await c.quiet(0.5)
    w = WriterSession(seg, writer_of(c), style="rust")
    await setup(c, 3, w)
    w.add(b"wake up")
    await _write_all(c, w, 1)
    await has(c, "SegmentRead 2", 2.0)
    for r in replies(c, SegmentRead):
        if r.request_id == 2 and r.offset == 0 and bytes(r.data) == encode_event(b"wake up"):
            c.note("woken at offset 0 with the event")


@server_case(
    "pv.S3.2",
    "read-missing-segment",
    "A read of a missing segment is answered NoSuchSegment; the connection stays",
    "§6 (3), §8",
    "ReadSegment on a segment that does not exist: NoSuchSegment 1; a second read of it gets NoSuchSegment 2.",
    [expect(PASS, SERVERS, ["Hello", "NoSuchSegment 1", "NoSuchSegment 2"], "open")],
)
async def s3_2(c: Conversation) -> None:
    seg = segment_of(c, "pv.S3.2")
    await hello(c)
    for rid in (1, 2):
        await c.send(
            ReadSegment(segment=seg, offset=0, suggested_length=100, request_id=rid).encode(), label="ReadSegment (missing)"
        )
        await has(c, f"NoSuchSegment {rid}")
    await c.quiet(0.3)


@server_case(
    "pv.S3.3",
    "sealed-end-of-segment",
    "A read at the end of a sealed segment answers endOfSegment at once",
    "§6 (4, 5)",
    "Create, append one event, SealSegment, then read from 0 (the event, endOfSegment) and at the length (empty, "
    "endOfSegment, not atTail), each answered at once.",
    [
        expect(
            PASS,
            SERVERS,
            ["Hello", "SegmentCreated 1", "AppendSetup 2", "DataAppended 1", "SegmentSealed 3", "SegmentRead 4", "SegmentRead 5"],
            "open",
            facts=["end of segment reported"],
        )
    ],
)
async def s3_3(c: Conversation) -> None:
    seg = segment_of(c, "pv.S3.3")
    await hello(c)
    await create(c, 1, seg)
    w = WriterSession(seg, writer_of(c), style="rust")
    await setup(c, 2, w)
    w.add(b"last words")
    await _write_all(c, w, 1)
    await c.send(SealSegment(request_id=3, segment=seg).encode(), label="SealSegment")
    await has(c, "SegmentSealed 3")
    await read_all(c, 4, seg, 0)
    length = len(encode_event(b"last words"))
    await read_all(c, 5, seg, length)
    rs = {r.request_id: r for r in replies(c, SegmentRead)}
    end = rs.get(5)
    if end is not None and end.end_of_segment and not end.at_tail and not end.data and end.offset == length:
        c.note("end of segment reported")


@server_case(
    "pv.S3.4",
    "table-segment",
    "Table segment: create, update, read; a conditional update on an existing key is refused",
    "§9",
    "CreateTableSegment; UpdateTableEntries one key unconditionally; ReadTable it back (the same value, version as "
    'returned); then an update of that key with version -1 ("must not exist") is answered TableKeyBadVersion, connection kept.',
    [
        expect(
            PASS,
            SERVERS,
            ["Hello", "SegmentCreated 1", "TableEntriesUpdated 2", "TableRead 3", "TableKeyBadVersion 4"],
            "open",
            facts=["value and version read back"],
        )
    ],
    features=["tables"],
)
async def s3_4(c: Conversation) -> None:
    seg = segment_of(c, "pv.S3.4").replace("/0.#", "_kvtable/0.#")
    await hello(c)
    await c.send(CreateTableSegment(request_id=1, segment=seg).encode(), label="CreateTableSegment")
    await has(c, "SegmentCreated 1")
    key, value = b"key-" + bytes(c.rng.getrandbits(8) for _ in range(4)), b"value"
    await c.send(
        UpdateTableEntries(
            request_id=2, segment=seg, delegation_token="", table_entries=(TableEntry(TableKey(key, NULL_VALUE), value),)
        ).encode(),
        label="UpdateTableEntries (unconditional)",
    )
    await has(c, "TableEntriesUpdated 2")
    await c.send(
        ReadTable(request_id=3, segment=seg, delegation_token="", keys=(TableKey(key, NULL_VALUE),)).encode(), label="ReadTable"
    )
    await has(c, "TableRead 3")
    versions = [v for r in obs(c).replies if r.NAME == "TableEntriesUpdated" for v in getattr(r, "updated_versions", ())]
    for r in replies(c, TableRead):
        if [(e.key.data, e.value, e.key.key_version) for e in r.entries] == [(key, value, versions[0] if versions else None)]:
            c.note("value and version read back")
    await c.send(
        UpdateTableEntries(
            request_id=4, segment=seg, delegation_token="", table_entries=(TableEntry(TableKey(key, -1), b"other"),)
        ).encode(),
        label="UpdateTableEntries (version -1: must not exist)",
    )
    await has(c, "TableKeyBadVersion 4")
    await c.quiet(0.3)


# --------------------------------------------------------------------------- client cases
#
# refwire plays the segment store (a SegmentStoreService per case over its own
# SegmentStore, answering through the case's conversations) and, outside the
# simulator, a controller pointing at it.  The testee contract is
# specs/pravega/README.md §14: write {events} events to the stream
# conform/{slug} (one segment, conform/{slug}/0.#epoch.0, which the store
# already has), then read them back from the start, and exit 0 only when each
# event written came back exactly once, in order.


def stream_segment(slug: str) -> str:
    """The one segment of the case's stream ``conform/{slug}`` (§14)."""
    return f"conform/{slug}/0.#epoch.0"


class ClientObserver(MachineObserver):
    """Tokens for what a client sends, decoded by refwire's segment-store machine:
    ``Hello``, ``KeepAlive``, requests by name (``SetupAppend``, ``ReadSegment``…),
    ``append <eventNumber>`` for each reassembled append; ``invalid <field>`` at
    the first byte that does not decode.  The decoded events wait in
    :attr:`events` for the case's store to answer; :attr:`machine` encodes the
    answers."""

    def __init__(self) -> None:
        super().__init__(ServerConnection(frame_timeout=None))
        self.events: list[Any] = []

    def tokens(self, ev: Any) -> list[Token] | None:
        if isinstance(ev, ConnectionClosed):
            return None
        self.events.append(ev)
        if isinstance(ev, HelloReceived):
            return [("Hello", {"type": "Hello", "high": ev.high_version, "low": ev.low_version})]
        if isinstance(ev, KeepAliveReceived):
            return [("KeepAlive", {"type": "KeepAlive"})]
        if isinstance(ev, Append):
            return [(f"append {ev.event_number}", {"type": "Append", "events": ev.event_count})]
        if isinstance(ev, RequestReceived):
            return [(ev.command.NAME, {"type": ev.command.NAME})]
        return []


@attrs.define
class StoreContext:
    """A client case's segment store: the store the controller administers and
    the case's connections answer from, and the reads parked at its tail."""

    server: Any
    parked: list[tuple[Conversation, ReadSegment]] = attrs.field(factory=list)
    #: (segment, event numbers) of each stored append, in order
    stored: list[tuple[str, int, int]] = attrs.field(factory=list)


def store_of(s: Any) -> StoreContext:
    """The case's store (made on first use, with the stream's segment in it)."""
    ctx = getattr(s, "pravega_store", None)
    if ctx is None:
        from .server import SegmentStoreServer

        # No log: what it stores is durable at once; trio's clock (virtual in the simulator) for determinism.
        ctx = StoreContext(SegmentStoreServer(now=lambda: trio.current_time() * 1000))
        ctx.server.store.create(stream_segment(s.case.slug))
        s.pravega_store = ctx
    assert isinstance(ctx, StoreContext)
    return ctx


async def client_services(s: Any, host: str, port: int) -> dict[str, str]:
    """A controller for the case (in the session's nursery) whose every
    ``getURI`` names the case's store at ``host:port``; the ``{controller}``
    placeholder is its URI (§14)."""
    from .controller import PravegaController

    ctx = store_of(s)
    listeners = await trio.open_tcp_listeners(0, host=host)
    ctl = PravegaController(ctx.server.admin, (host, port))
    await s.nursery.start(ctl.serve, listeners)
    s.action(f"controller on {host}:{listeners[0].socket.getsockname()[1]} (getURI -> {host}:{port})")
    return {"controller": f"tcp://{host}:{listeners[0].socket.getsockname()[1]}"}


#: What a case's store does with one decoded client event instead of the
#: usual: return True when it handled it (answered, or chose not to).
Hook = Callable[[Any, Conversation, ClientObserver, Any], "bool"]


async def _answer(s: Any, c: Conversation, o: ClientObserver, ev: Any, ctx: StoreContext) -> None:
    """Answer one client event the way refwire's segment store does."""
    server = ctx.server
    service, m, now = server.service, o.machine, c.now()
    if isinstance(ev, Append):
        out = service.append(ev, now=server._time_ms())
        if out.kind == "ok":
            ctx.stored.append((ev.segment, ev.event_number, ev.event_count))
            m.append_stored(ev, server._segment_length(ev.segment), now=now)
            await _wake(s, ctx, ev.segment)
        elif out.kind == "conditional":
            m.append_conditional_failed(ev, now=now)
        elif out.kind == "failed":
            m.append_failed(ev, out.reply, now=now)
        else:
            if out.reply is not None:
                m.send(out.reply, now=now)
            m.close(now=now)
    elif isinstance(ev, RequestReceived):
        res = service.process(ev.command, now=server._time_ms())
        if res.park:
            assert isinstance(ev.command, ReadSegment)
            ctx.parked.append((c, ev.command))
            return
        if res.reply is not None:
            m.send(res.reply, now=now)
        if res.close:
            m.close(now=now)


async def _wake(s: Any, ctx: StoreContext, segment: str) -> None:
    """Answer the reads parked on ``segment`` (after the reply that woke them, §6)."""
    keep = []
    for c, cmd in ctx.parked:
        if cmd.segment != segment or c.closed_by_testee is not None:
            keep.append((c, cmd))
            continue
        o = c.observer
        assert isinstance(o, ClientObserver)
        res = ctx.server.service.process(cmd, now=ctx.server._time_ms(), was_parked=True)
        if res.park:
            keep.append((c, cmd))
        elif res.reply is not None:
            o.machine.send(res.reply, now=c.now())
            if c is not s.current:
                await _flush(c, o)
    ctx.parked = keep


async def _flush(c: Conversation, o: ClientObserver) -> bool:
    data = o.machine.data_to_send()
    if not data:
        return True
    return await c.send(data, label="replies", split="whole")


async def serve_store(s: Any, hook: Hook | None = None) -> None:
    """The case's segment store: accept the client's connections one after
    another (and side by side), answer every event as refwire's store does
    unless ``hook`` takes it, until the client exits or the budget ends; then
    note what the store holds."""
    ctx = store_of(s)
    s.current = None

    async def one(c: Conversation) -> None:
        o = c.observer
        assert isinstance(o, ClientObserver)
        served = 0

        def ready(cv: Conversation) -> bool:
            return len(o.events) > served or cv.closed_by_testee is not None or bool(s.exited.is_set())

        while c.closed_by_testee is None and not s.exited.is_set():
            await c.wait_for(ready, 1.0)
            while served < len(o.events) and c.closed_by_runner is None:
                ev = o.events[served]
                served += 1
                s.current = c
                if hook is None or not hook(s, c, o, ev):
                    await _answer(s, c, o, ev, ctx)
                s.current = None
                if not await _flush(c, o):
                    return
                if o.machine.must_close:
                    await c.close("FIN")
                    return
            if c.closed_by_runner is not None:
                return

    async with trio.open_nursery() as nursery:
        while not s.exited.is_set():
            c = await s.accept(30.0)
            if c is None:
                break
            nursery.start_soon(one, c)
        nursery.cancel_scope.cancel()
    _note_stored(s, ctx)


def _note_stored(s: Any, ctx: StoreContext) -> None:
    from .client import parse_events

    seg = ctx.server.store.segments.get(stream_segment(s.case.slug))
    if seg is None:
        return
    evs, _ = parse_events(bytes(seg.data))
    payloads = [p for _, p in evs]
    s.note(f"stored {len(payloads)} events")
    if len(set(payloads)) == len(payloads):
        s.note("each stored once")


EXIT_OK = "exit 0"
client_case = BOOK.client


@client_case(
    "pv.C1.1",
    "write-and-read-back",
    "Write events and read them back",
    "§5, §6, §14",
    "Serve normally (with a controller for clients that use one). The client writes its events and reads them back; "
    "it must exit 0 and the store must hold each event once.",
    [expect(PASS, CLIENTS, ["...", "append *", "..."], facts=[EXIT_OK, "stored 20 events", "each stored once"])],
    events=20,
)
async def c1_1(s: Any) -> None:
    await serve_store(s)


def _wrong_host_once(s: Any, c: Conversation, o: ClientObserver, ev: Any) -> bool:
    """The first SetupAppend is answered WrongHost (§8)."""
    from .frames import WrongHost

    if isinstance(ev, RequestReceived) and isinstance(ev.command, SetupAppend) and not getattr(s, "_wrong_host_sent", False):
        s._wrong_host_sent = True
        cmd = ev.command
        o.machine.send(WrongHost(request_id=cmd.request_id, segment=cmd.segment, correct_host=""), now=c.now())
        s.note("WrongHost sent")
        return True
    return False


@client_case(
    "pv.C1.2",
    "wrong-host-once",
    "A WrongHost answer to the first SetupAppend",
    "§8, §14",
    "Answer the client's first SetupAppend with WrongHost (the segment moved). The client must set up again (after "
    "asking the controller, if it uses one) and complete: exit 0, each event stored once.",
    [
        expect(
            PASS,
            CLIENTS,
            ["...", "SetupAppend", "...", "SetupAppend", "...", "append *", "..."],
            facts=["WrongHost sent", EXIT_OK, "each stored once"],
        )
    ],
    events=10,
)
async def c1_2(s: Any) -> None:
    await serve_store(s, _wrong_host_once)


def _reset_before_first_ack(s: Any, c: Conversation, o: ClientObserver, ev: Any) -> bool:
    """The first append is stored, then the connection is reset before its DataAppended."""
    if isinstance(ev, Append) and not getattr(s, "_reset_sent", False):
        s._reset_sent = True
        ctx = store_of(s)
        out = ctx.server.service.append(ev, now=ctx.server._time_ms())
        if out.kind == "ok":
            ctx.stored.append((ev.segment, ev.event_number, ev.event_count))
            s.note(f"stored events up to {ev.event_number}, then reset before the ack")
        s.pending_reset = c
        return True
    return False


@client_case(
    "pv.C1.3",
    "reset-between-append-and-ack",
    "The connection is reset after an append is stored, before its ack",
    "§5.4, §5.6, §14",
    "Store the client's first append, then reset the connection before its DataAppended. The client must reconnect, "
    "SetupAppend again, take AppendSetup.lastEventNumber as acknowledged and resend only the events the store lacks: "
    "exit 0, each event stored exactly once.",
    [
        expect(
            PASS,
            CLIENTS,
            ["...", "append *", "...", "SetupAppend", "..."],
            facts=["stored events up to *", EXIT_OK, "stored 12 events", "each stored once"],
        )
    ],
    events=12,
)
async def c1_3(s: Any) -> None:
    s.pending_reset = None

    def hook(s: Any, c: Conversation, o: ClientObserver, ev: Any) -> bool:
        return _reset_before_first_ack(s, c, o, ev)

    async def resetter() -> None:
        while not s.exited.is_set():
            c = s.pending_reset
            if c is not None:
                s.pending_reset = None
                await c.close("RST")
            await trio.sleep(0.01)

    async with trio.open_nursery() as n:
        n.start_soon(resetter)
        await serve_store(s, hook)
        n.cancel_scope.cancel()


def _sealed_on_append(s: Any, c: Conversation, o: ClientObserver, ev: Any) -> bool:
    """The segment is sealed when the first append arrives: every append is refused SegmentIsSealed (§8)."""
    if isinstance(ev, Append):
        ctx = store_of(s)
        if not getattr(s, "_sealed", False):
            s._sealed = True
            ctx.server.store.seal(ev.segment)
            s.note("segment sealed at the first append")
        return False
    return False


@client_case(
    "pv.C1.4",
    "sealed-at-first-append",
    "The segment is sealed under the writer",
    "§5.4, §8, §14",
    "Seal the segment when the first append arrives (the store answers SegmentIsSealed; the stream has no successor). "
    "The client cannot write its events and must not claim it did: any exit status but 0 (or still running at the "
    "budget's end).",
    [expect(PASS, CLIENTS, ["...", "append *", "..."], facts=["segment sealed at the first append", "exit [!0]*"])],
    events=5,
    budget=25.0,
)
async def c1_4(s: Any) -> None:
    await serve_store(s, _sealed_on_append)


def _old_hello(s: Any, c: Conversation, o: ClientObserver, ev: Any) -> bool:
    """Every Hello is answered Hello(4, 2): a store too old for any v5+ client (§7.1)."""
    if isinstance(ev, HelloReceived):
        o.machine.data_to_send()  # the machine's own Hello(17, 5) is dropped
        o.machine.send(Hello(high_version=4, low_version=2), now=c.now())
        s.note("Hello(4, 2) sent")
        return True
    return False


@client_case(
    "pv.C1.5",
    "incompatible-store-hello",
    "A store whose Hello has no version in common",
    "§7.1, §14",
    "Answer the client's Hello with Hello(4, 2). The Rust client and refwire's refuse such a store: nothing may be "
    "appended and the client must not exit 0. (The Java client only logs it: INFO under java-client.)",
    [
        expect(
            PASS, "strict rust-client", ["connect", "Hello", "..."], facts=["Hello(4, 2) sent", "stored 0 events", "exit [!0]*"]
        ),
        expect(
            INFO, "java-client", ["Hello", "..."], facts=["Hello(4, 2) sent"], note="the Java client only logs a version mismatch"
        ),
    ],
    events=5,
    budget=20.0,
)
async def c1_5(s: Any) -> None:
    await serve_store(s, _old_hello)


# --------------------------------------------------------------------------- catalogue


async def serve_for_simulation(listener: Any, sink: str) -> None:
    """refwire's own segment store on ``listener`` (the server cases run against it inside the simulator)."""
    from .server import memory_server

    await memory_server(now=lambda: trio.current_time() * 1000).serve([listener])  # the simulator's clock


async def client_for_simulation(connect: Any, values: Any) -> int:
    """refwire's own Pravega client as a client-case testee (the §14 contract,
    without a controller): write ``{events}`` events to ``conform/{slug}/0.#epoch.0``
    with an :class:`~refwire.pravega.client.EventWriter`, read the segment back
    from 0 with a :class:`~refwire.pravega.client.SegmentReader`, exit 0 only
    when each came back once, in order."""
    import random

    from ..errors import RequestFailed, WriteFailed
    from .client import EventWriter, PravegaConnection, SegmentReader, WriterConfig

    n, segment = int(values["events"]), stream_segment(values["slug"])
    rng = random.Random(int(values["seed"]))
    sent = [bytes(rng.getrandbits(8) for _ in range(16)) + i.to_bytes(4, "big") for i in range(n)]
    failures = (
        WriteFailed,
        RequestFailed,
        ProtocolError,
        OSError,
        trio.BrokenResourceError,
        trio.ClosedResourceError,
        trio.TooSlowError,
    )
    cfg = WriterConfig(max_attempts=4, backoff=(0.05, 0.2), connect_timeout=5.0, ack_timeout=5.0)
    try:
        async with EventWriter(
            "", 0, segment, writer_id=uuid.UUID(int=rng.getrandbits(128), version=4), config=cfg, connect=connect, rng=rng
        ) as w:
            for i in range(0, n, 4):
                await w.write(sent[i : i + 4])
        conn = PravegaConnection(await connect())
        got: list[bytes] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)
            reader = SegmentReader(conn, segment)
            with trio.move_on_after(10):
                async for _, payload in reader.events(until_tail=True):
                    got.append(payload)
                    if len(got) >= n:
                        break
            await conn.aclose()
            nursery.cancel_scope.cancel()
    except failures:
        return 1
    except ExceptionGroup as group:  # from the writer's and the reader's nurseries
        if group.subgroup(failures) is None:
            raise
        return 1
    return 0 if got == sent else 1


CATALOGUE = Catalogue(
    protocol="pravega",
    prefix="pv",
    cases=tuple(BOOK.cases),
    profiles=PROFILES,
    features=FEATURES,
    server_observer=ServerObserver,
    client_observer=ClientObserver,
    spec=SPEC,
    sim_server=serve_for_simulation,
    sim_client=client_for_simulation,
    client_services=client_services,
)
