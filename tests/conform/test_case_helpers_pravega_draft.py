"""The Pravega 2017 draft conformance cases' shared expectation helpers
(``refwire.conform.cases.pravega_draft._common``) give the facts the judge compares.

* :class:`ServerObserver` turns what a draft segment store sends into tokens:
  ``setup <level>``, ``ack <level>``, ``read <offset> n=<bytes>``, ``keepalive <bytes>``,
  reassembled from PartialMessage parts (specs/pravega-draft-2017/README.md §5, the
  vectors of §12), and one ``invalid <field>`` token at the first byte that does not
  decode (§1, §1.1), including a frame cut by the end of the stream (§6.7).  It counts
  the PartialMessage frames that carried the replies by a walk of the frame headers
  (§1), only while the stream decodes.  Any split of the bytes gives the same tokens
  and count.
* The builders: each case's segment name (§13), connection id and payloads from the
  case seed (§6.1), whole Event frames (§6.1), append blocks (§6.3, checked against
  the vectors), raw frames with any code and declared length (§1).
* The async helpers (SetupAppend §6.2, ReadSegment read-backs §7, a read over a second
  connection), driven against a scripted store over in-memory streams in virtual time
  (trio's MockClock with autojump): the bytes they send, the facts they note, how long
  they wait.
"""

from __future__ import annotations

import itertools
import json
import random
import struct
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streams import PassThrough

from refwire.conform.cases.pravega_draft import _common as pd
from refwire.conform.conversation import Conversation
from refwire.pravega.draft2017.events import ReplyReceived
from refwire.pravega.draft2017.frames import (
    AppendSetup,
    DataAppended,
    Event,
    KeepAlive,
    PartialMessage,
    ReadSegment,
    SegmentRead,
    SetupAppend,
)

pytestmark = pytest.mark.timeout(60)

VECTORS = Path(__file__).resolve().parents[2] / "specs" / "pravega-draft-2017" / "vectors"
CID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def _vectors(name: str) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in json.loads((VECTORS / name).read_text())["vectors"]}


FRAMES = _vectors("frames.json")
PARTIALS = _vectors("partials.json")


def hx(name: str, table: dict[str, dict[str, Any]] = FRAMES) -> bytes:
    return bytes.fromhex(table[name]["hex"])


# --------------------------------------------------------------------------- the observer

#: every reply a draft store sends, whole (§12 frames.json), and its token
WHOLE: list[tuple[str, str, dict[str, Any]]] = [
    ("append-setup-level-26", "setup 26", {"type": "AppendSetup", "segment": "seg", "level": 26}),
    ("append-setup-new", "setup 0", {"type": "AppendSetup", "segment": "seg", "level": 0}),
    ("data-appended-10", "ack 10", {"type": "DataAppended", "level": 10}),
    ("data-appended-past-2-32", "ack 4294967296", {"type": "DataAppended", "level": 1 << 32}),
    ("segment-read-hi", "read 0 n=2", {"type": "SegmentRead", "at_tail": True, "end_of_segment": False}),
    ("segment-read-end-of-segment-empty", "read 13 n=0", {"type": "SegmentRead", "at_tail": False, "end_of_segment": True}),
    ("keep-alive-with-data", "keepalive 4", {"type": "KeepAlive", "data": "70696e67"}),
    ("keep-alive-empty", "keepalive 0", {"type": "KeepAlive", "data": ""}),
]

#: the same, cut into PartialMessage parts (§12 partials.json): vector, token, parts
SPLIT: list[tuple[str, str, int]] = [
    ("append-setup-split", "setup 26", 2),
    ("data-appended-split", "ack 10", 3),
    ("segment-read-split-16", "read 0 n=26", 4),
    ("segment-read-split-empty-end", "read 0 n=2", 3),
    ("keep-alive-with-data-split", "keepalive 4", 2),
    ("keep-alive-byte-by-byte", "keepalive 0", 8),
]


def test_the_observer_tokens_each_reply_and_keeps_reads_and_keepalive_data() -> None:
    o = pd.ServerObserver()
    got = o.feed(b"".join(hx(name) for name, _, _ in WHOLE))
    assert got == [(token, frame) for _, token, frame in WHOLE]
    assert [(r.offset, r.data) for r in o.reads] == [(0, b"hi"), (13, b"")]
    assert o.keepalives == [b"ping", b""]
    assert o.parts == 0 and not o.broken
    assert o.eof() == []


def test_replies_in_partial_messages_are_reassembled_and_their_parts_counted() -> None:
    o = pd.ServerObserver()
    wire = b"".join(hx(name, PARTIALS) for name, _, _ in SPLIT)
    assert [t for t, _ in o.feed(wire)] == [token for _, token, _ in SPLIT]
    assert o.parts == sum(n for _, _, n in SPLIT)
    assert [len(r.data) for r in o.reads] == [26, 2]
    assert o.keepalives == [b"ping", b""]


#: whole replies, partial ones, a zero-length frame between them
MIXED = hx("keep-alive-empty") + hx("data-appended-split", PARTIALS) + hx("segment-read-hi") + hx("append-setup-split", PARTIALS)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(min_value=0, max_value=len(MIXED)), max_size=12))
def test_any_split_gives_the_same_tokens_and_part_count(cuts: list[int]) -> None:
    o = pd.ServerObserver()
    got: list[str] = []
    edges = [0, *sorted(cuts), len(MIXED)]
    for a, b in itertools.pairwise(edges):
        if b > a:
            got += [t for t, _ in o.feed(MIXED[a:b])]
    assert got == ["keepalive 0", "ack 10", "read 0 n=2", "setup 26"]
    assert o.parts == 5


def test_parts_are_counted_one_byte_at_a_time() -> None:
    o = pd.ServerObserver()
    for i in range(len(MIXED)):
        o.feed(MIXED[i : i + 1])
    assert o.parts == 5 and len(o.reads) == 1


def test_a_request_is_invalid_at_its_type_and_nothing_after_it_is_decoded_or_counted() -> None:
    o = pd.ServerObserver()
    first = hx("data-appended-10")
    got = o.feed(first + SetupAppend(connection_id=CID, segment="s").encode())
    assert got == [
        ("ack 10", {"type": "DataAppended", "level": 10}),
        (
            "invalid type",
            {
                "type": "invalid",
                "frame": "SetupAppend",
                "field": "type",
                "offset": len(first),
                "reason": "SetupAppend is not sent in this direction",
            },
        ),
    ]
    assert o.broken and o.parts == 0
    assert o.feed(hx("append-setup-split", PARTIALS)) == [] and o.parts == 0  # the bytes after it are not walked
    assert o.eof() == []


def test_a_negative_length_is_invalid_and_its_frame_no_part() -> None:
    o = pd.ServerObserver()
    got = o.feed(pd.raw_frame(PartialMessage.TYPE, b"", -1))
    assert got == [
        (
            "invalid length",
            {"type": "invalid", "frame": "PartialMessage", "field": "length", "offset": 4, "reason": "negative frame length -1"},
        )
    ]
    assert o.parts == 0


def test_parts_after_a_frame_of_8_mib_or_more_are_counted() -> None:
    """The header walk reads the whole 4-byte length (§1): a KeepAlive of 0x800000 bytes is skipped, not misread."""
    o = pd.ServerObserver()
    got = o.feed(KeepAlive(data=bytes(0x800000)).encode() + hx("data-appended-split", PARTIALS))
    assert [t for t, _ in got] == ["keepalive 8388608", "ack 10"]
    assert o.parts == 3


def test_a_partial_message_frame_is_counted_once_its_header_is_in() -> None:
    """The count is a walk of the headers: a PartialMessage header counts when its 8 bytes
    are in, before the machine reads the frame (an empty one lacks its part byte)."""
    o = pd.ServerObserver()
    assert [t for t, _ in o.feed(pd.raw_frame(PartialMessage.TYPE, b""))] == ["invalid part"]
    assert o.parts == 1
    o = pd.ServerObserver()
    begin = hx("data-appended-split", PARTIALS)[:21]  # the Begin of three parts
    assert begin[:4] == b"\xff\xff\xff\xfe" and begin[20] == 0x33
    assert o.feed(begin[:8]) == [] and o.parts == 1
    assert o.feed(begin[8:]) == [] and o.parts == 1


def test_a_frame_cut_by_the_end_of_the_stream_is_invalid_at_eof() -> None:
    """§6.7: input that ends inside a frame (or inside a partial message) is an error."""
    o = pd.ServerObserver()
    assert o.feed(hx("data-appended-10") + hx("keep-alive-with-data")[:5]) == [("ack 10", {"type": "DataAppended", "level": 10})]
    assert o.eof() == [
        (
            "invalid (eof)",
            {
                "type": "invalid",
                "frame": None,
                "field": "(eof)",
                "offset": 32,
                "reason": "connection closed inside a frame (5 bytes of it received)",
            },
        )
    ]
    o = pd.ServerObserver()
    begin = PartialMessage(part=0, data=hx("keep-alive-with-data")[:5]).encode()
    assert o.feed(begin) == [] and o.parts == 1
    assert [t for t, _ in o.eof()] == ["invalid (eof)"]


def test_the_end_of_input_given_to_feed_is_a_closed_token() -> None:
    assert pd.ServerObserver().feed(b"") == [("closed", {"type": "closed", "reason": ""})]


def test_tokens_of_any_other_reply_name_it_and_other_events_give_none() -> None:
    o = pd.ServerObserver()
    assert o.tokens(ReplyReceived(SetupAppend(connection_id=CID, segment="s"))) == [("SetupAppend", {"type": "SetupAppend"})]
    assert o.tokens(object()) == []


# --------------------------------------------------------------------------- builders


def test_segment_of() -> None:
    assert pd.segment_of("pd.S2.1", "0a1b2c3d") == "conform-pd-S2-1-0a1b2c3d"
    assert pd.segment_of("pd.S2.1") == "conform-pd-S2-1"
    assert pd.segment_of("pd.S10.12", "") == "conform-pd-S10-12"


def _conv(seed: int) -> Conversation:
    return cast(Conversation, type("C", (), {"rng": random.Random(seed)})())


def test_connection_id_and_payloads_come_from_the_case_seed() -> None:
    c = _conv(5)
    assert pd.connection_id(c) == uuid.UUID(int=random.Random(5).getrandbits(128))
    r = random.Random(9)
    want = [r.randbytes(16) for _ in range(3)]
    assert pd.payloads(_conv(9), 3) == want and all(len(p) == pd.PAYLOAD == 16 for p in want)
    r = random.Random(9)
    assert pd.payloads(_conv(9), 2, 5) == [r.randbytes(5), r.randbytes(5)]
    assert pd.payloads(_conv(9), 0) == []


def test_events_of_is_the_whole_event_frames() -> None:
    assert pd.events_of([b"hi", b"hello", b""]) == hx("event-hi") + hx("event-hello") + hx("event-empty")
    assert pd.EVENT == len(pd.events_of([bytes(pd.PAYLOAD)])) == 24


def test_block_is_begin_inner_end_as_the_vectors_say() -> None:
    """§6.3: BeginAppendBlock(offset, W = wire bytes inside) + inner + EndAppendBlock(offset + n, n)."""
    inner = hx("event-hi")
    assert pd.block(CID, 0, inner, 10) == hx("begin-append-block-hi") + inner + hx("end-append-block-hi")
    assert pd.block(CID, 13, b"", 0) == hx("begin-append-block-empty") + hx("end-append-block-empty")
    got = pd.block(CID, 100, b"xyz", 7)
    assert got[:8] == struct.pack(">ii", 3, 28) and got[24:36] == struct.pack(">qi", 100, 3)
    assert got[36:39] == b"xyz" and got[-12:] == struct.pack(">qi", 107, 7)


def test_raw_frame_writes_any_code_and_declared_length() -> None:
    assert pd.raw_frame(-2, b"ab") == bytes.fromhex("fffffffe000000026162")
    assert pd.raw_frame(100, b"", -1) == bytes.fromhex("00000064ffffffff")
    assert pd.raw_frame(8, b"\x00\x03seg", 0x00FFFFF8) == bytes.fromhex("0000000800fffff8") + b"\x00\x03seg"


def test_parse_events_gives_the_payloads_of_whole_events_only() -> None:
    assert pd._parse_events(pd.events_of([b"a", b"", b"bcd"])) == [b"a", b"", b"bcd"]
    assert pd._parse_events(b"") == []
    assert pd._parse_events(pd.events_of([b"a", b"bcd"])[:-1]) is None  # the last is cut
    assert pd._parse_events(pd.raw_frame(3, b"abc")) is None  # not an Event
    assert pd._parse_events(pd.raw_frame(0, b"", -4)) is None


# --------------------------------------------------------------------------- a scripted store


class ScriptedStore:
    """The store's end of an in-memory connection: keeps what refwire sent and sends
    scripted bytes at scripted (virtual) times after the start (b"": close)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.got = bytearray()
        self.eof = False
        #: refwire's end of this connection, when it is a second one
        self.ours: Tracked | None = None

    async def play(self, script: Sequence[tuple[float, bytes]]) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read)
            start = trio.current_time()
            for at, data in script:
                await trio.sleep_until(start + at)
                if data:
                    await self.stream.send_all(data)
                else:
                    await self.stream.aclose()
                    return

    async def _read(self) -> None:
        try:
            while data := await self.stream.receive_some(65536):
                self.got += data
            self.eof = True
        except trio.ClosedResourceError:
            pass


class Tracked(PassThrough):
    """A stream that says whether refwire closed it."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        super().__init__(inner)
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True
        await self.inner.aclose()


@asynccontextmanager
async def talk(
    script: Sequence[tuple[float, bytes]] = (),
    *,
    seed: int = 1,
    another: Sequence[tuple[float, bytes]] | None = None,
    time_scale: float = 1.0,
    budget: float = float("inf"),
) -> AsyncIterator[tuple[Conversation, ScriptedStore, list[ScriptedStore]]]:
    """A conversation with a scripted store; ``another``: what the store says on
    each further connection the conversation opens."""
    ours, theirs = trio.testing.memory_stream_pair()
    c = Conversation(ours, pd.ServerObserver(), rng=random.Random(seed), time_scale=time_scale, deadline=trio.current_time() + budget)
    store = ScriptedStore(theirs)
    others: list[ScriptedStore] = []
    async with trio.open_nursery() as nursery:
        if another is not None:
            script2 = another

            async def open_another() -> trio.abc.Stream:
                mine, its = trio.testing.memory_stream_pair()
                other = ScriptedStore(its)
                other.ours = Tracked(mine)
                others.append(other)
                nursery.start_soon(other.play, script2)
                return other.ours

            c.open_another = open_another
        nursery.start_soon(c.reader)
        nursery.start_soon(store.play, script)
        yield c, store, others
        nursery.cancel_scope.cancel()


def actions(c: Conversation) -> list[str]:
    return [e["text"] for e in c.log if e["kind"] == "action"]


def sent(c: Conversation) -> list[bytes]:
    return [bytes.fromhex(e["hex"]) for e in c.log if e["kind"] == "tx"]


def read(data: bytes, offset: int = 0) -> bytes:
    return SegmentRead(segment="s", offset=offset, at_tail=True, end_of_segment=False, data=data).encode()


async def test_obs(autojump_clock: trio.testing.MockClock) -> None:
    async with talk() as (c, _, _):
        assert pd.obs(c) is c.observer
    with pytest.raises(AssertionError):
        pd.obs(cast(Conversation, type("C", (), {"observer": object()})()))


async def test_answered_waits_three_seconds_for_that_exact_token(autojump_clock: trio.testing.MockClock) -> None:
    async with talk([(2.9, hx("data-appended-10"))]) as (c, _, _):
        assert await pd.answered(c, "ack 10")
        assert c.now() == pytest.approx(2.9)
        assert actions(c) == ["wait up to 3s for ack 10"]
    async with talk([(3.1, hx("data-appended-10"))]) as (c, _, _):
        assert not await pd.answered(c, "ack 10")
        assert c.now() == pytest.approx(3.0)
    async with talk([(0.5, hx("data-appended-10"))]) as (c, _, _):
        assert not await pd.answered(c, "ack 1", 1.0)  # the token, not a prefix of it
        assert c.now() == pytest.approx(1.0)


async def test_setup_sends_setup_append_whole_and_waits_for_an_append_setup(autojump_clock: trio.testing.MockClock) -> None:
    want = SetupAppend(connection_id=CID, segment="seg").encode()
    async with talk([(2.9, hx("data-appended-10") + hx("append-setup-level-26"))], seed=4) as (c, store, _):
        assert await pd.setup(c, CID, "seg")
        assert sent(c) == [want] and bytes(store.got) == want
        assert c.rng.random() == random.Random(4).random()  # whole: no seeded split drawn
        assert actions(c) == [f"send SetupAppend seg ({len(want)} bytes)", "wait up to 3s for AppendSetup"]
    async with talk([(3.1, hx("append-setup-level-26"))]) as (c, _, _):
        assert not await pd.setup(c, CID, "seg", split="bytes")
        assert sent(c) == [want[i : i + 1] for i in range(len(want))]
        assert c.now() == pytest.approx(3.0)
    async with talk([(0.5, hx("data-appended-10"))]) as (c, _, _):
        assert not await pd.setup(c, CID, "seg")


async def test_read_back_notes_the_fact_when_the_new_read_carries_exactly_the_bytes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    want = pd.events_of([b"abc", b"de"])
    async with talk([(3.9, read(want))]) as (c, store, _):
        await pd.read_back(c, "seg", want)
        assert c.facts == ["read-back identical"]
        assert bytes(store.got) == ReadSegment(segment="seg", offset=0, suggested_length=len(want) + 64).encode()
        assert actions(c)[0].startswith("send ReadSegment 0 (") and actions(c)[1] == "wait up to 4s for SegmentRead"
    async with talk([(0.5, read(want))]) as (c, _, _):
        await pd.read_back(c, "seg", want, label="second read identical")
        assert c.facts == ["second read identical"]
    async with talk([(4.1, read(want))]) as (c, _, _):
        await pd.read_back(c, "seg", want)
        assert c.facts == [] and c.now() == pytest.approx(4.0, abs=0.02)
    async with talk([(0.5, read(want[:-1]))]) as (c, _, _):
        await pd.read_back(c, "seg", want)
        assert c.facts == []
    # a read that came before is not the answer: the new one is compared
    async with talk([(0.5, read(b"other"))]) as (c, _, _):
        pd.obs(c).feed(read(want))
        await pd.read_back(c, "seg", want)
        assert c.facts == []
    async with talk([(0.5, read(want))]) as (c, _, _):
        pd.obs(c).feed(read(b"other"))
        await pd.read_back(c, "seg", want)
        assert c.facts == ["read-back identical"]


async def test_side_read_reads_over_a_second_connection_and_closes_it(autojump_clock: trio.testing.MockClock) -> None:
    stored = pd.events_of([b"x" * 40])
    # the reply in two pieces: the helper reads until it has it
    reply = read(stored)
    async with talk(another=[(1.0, reply[:20]), (2.0, reply[20:])]) as (c, store, others):
        got = await pd.side_read(c, "seg", 4096)
        assert got == stored and c.now() == pytest.approx(2.0)
        (other,) = others
        await trio.sleep(0.1)
        assert bytes(other.got) == ReadSegment(segment="seg", offset=0, suggested_length=4096).encode()
        assert other.eof and other.ours is not None and other.ours.closed and bytes(store.got) == b""
        assert c.tokens == [] and pd.obs(c).reads == []  # the main conversation saw none of it
    async with talk(another=[(2.9, read(b"q", 5))]) as (c, _, _):
        assert await pd.side_read(c, "seg", 1) == b"q"


async def test_side_read_gives_none_without_a_reply(autojump_clock: trio.testing.MockClock) -> None:
    async with talk(another=[(3.1, read(b"late"))]) as (c, _, others):
        assert await pd.side_read(c, "seg", 10) is None
        assert c.now() == pytest.approx(3.0)
        await trio.sleep(0.1)
        assert others[0].eof
    async with talk(another=[(1.0, b"")]) as (c, _, others):  # the store closes the second connection
        assert await pd.side_read(c, "seg", 10) is None
        assert c.now() == pytest.approx(1.0)
        assert others[0].ours is not None and others[0].ours.closed  # and refwire closes its end
    async with talk(another=[(0.5, hx("data-appended-10")), (1.0, read(b"ok"))]) as (c, _, _):
        assert await pd.side_read(c, "seg", 10) == b"ok"


async def test_side_read_waits_three_scaled_seconds_within_the_case_budget(autojump_clock: trio.testing.MockClock) -> None:
    async with talk(another=[(5.0, read(b"slow"))], time_scale=2.0) as (c, _, _):
        assert await pd.side_read(c, "seg", 10) == b"slow"
    async with talk(another=[(6.1, read(b"slow"))], time_scale=2.0) as (c, _, _):
        assert await pd.side_read(c, "seg", 10) is None
        assert c.now() == pytest.approx(6.0)
    async with talk(another=[(2.0, read(b"in time"))], budget=1.0) as (c, _, others):
        assert await pd.side_read(c, "seg", 10) is None
        assert c.now() == pytest.approx(1.0)
        await trio.sleep(0.1)
        assert others[0].eof


class CancellingStream(trio.abc.Stream):
    """A second connection whose reply arrives just as ``scope`` (the case's budget) is cancelled."""

    def __init__(self, reply: bytes, scope: trio.CancelScope) -> None:
        self.reply, self.scope = reply, scope
        self.sent = bytearray()
        self.closed = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()
        self.sent += data

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        self.scope.cancel()
        return self.reply

    async def aclose(self) -> None:
        self.closed = True
        await trio.lowlevel.checkpoint()


async def test_side_read_returns_its_answer_when_the_case_is_cancelled_as_it_arrives(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The second connection is closed shielded: the helper still returns what it read."""
    async with talk() as (c, _, _):
        answers: list[bytes | None] = []
        with trio.CancelScope() as scope:
            stream = CancellingStream(read(b"just in time"), scope)

            async def open_another() -> trio.abc.Stream:
                return stream

            c.open_another = open_another
            answers.append(await pd.side_read(c, "seg", 10))
        assert answers == [b"just in time"] and stream.closed
        assert bytes(stream.sent) == ReadSegment(segment="seg", offset=0, suggested_length=10).encode()


async def test_side_read_gives_none_when_the_second_connection_does_not_open_in_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with talk() as (c, _, _):

        async def never() -> trio.abc.Stream:
            await trio.sleep_forever()
            raise AssertionError("unreachable")

        c.open_another = never
        assert await pd.side_read(c, "seg", 10) is None
        assert c.now() == pytest.approx(3.0)


class StuckClose(trio.abc.Stream):
    """A second connection that answers at once and whose close never completes (a peer that stopped reading)."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        return self.reply

    async def aclose(self) -> None:
        await trio.sleep_forever()


async def test_side_read_gives_up_on_a_close_that_hangs_after_one_second(autojump_clock: trio.testing.MockClock) -> None:
    async with talk() as (c, _, _):

        async def open_another() -> trio.abc.Stream:
            return StuckClose(read(b"data"))

        c.open_another = open_another
        assert await pd.side_read(c, "seg", 10) == b"data"
        assert c.now() == pytest.approx(1.0)


async def test_side_read_needs_a_runner_that_opens_another_connection(autojump_clock: trio.testing.MockClock) -> None:
    async with talk() as (c, _, _):
        with pytest.raises(RuntimeError, match=r"^this runner cannot open a second connection to the testee$"):
            await pd.side_read(c, "seg", 10)


def test_event_and_keepalive_frames_used_here_are_the_codec_s() -> None:
    """The vectors this file reads are the codec's own bytes (a guard on the test data)."""
    assert hx("event-hi") == Event(data=b"hi").encode()
    assert hx("keep-alive-with-data") == KeepAlive(data=b"ping").encode()
    assert hx("append-setup-level-26") == AppendSetup(segment="seg", connection_id=CID, connection_offset_ack_level=26).encode()
    assert hx("data-appended-10") == DataAppended(connection_id=CID, ack_level=10).encode()
