"""Pravega 2017 draft client cases (``pd.C…``): refwire plays the segment store,
misbehaving where a case says so; the testee contract is §13.
"""

from __future__ import annotations

import uuid
from typing import Any

from ....pravega.draft2017.connection import DEFAULT_LIMITS, ServerConnection
from ....pravega.draft2017.events import BlockAppend, KeepAliveReceived, RequestReceived
from ....pravega.draft2017.frames import AppendSetup, DataAppended, KeepAlive, ReadSegment, SegmentRead, SetupAppend
from ...conversation import MachineObserver, Token
from ...model import CaseBook, expect
from ._common import ALL, PASS, SPEC, _parse_events

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


BOOK = CaseBook(SPEC, client_budget=20.0)
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
