"""The Pravega conformance cases' shared expectation helpers
(``refwire.conform.cases.pravega._common``) give the facts the judge compares.

* :class:`ServerObserver` turns what a segment store sends into tokens: ``Hello``,
  ``KeepAlive``, ``<Reply> <requestId>`` (``<Reply>`` alone when the reply carries no
  request id, ``DataAppended <eventNumber>``, ``ConditionalCheckFailed <eventNumber>``),
  and one ``invalid <field>`` token at the first byte that does not decode, after which
  nothing is decoded (specs/pravega/README.md §1.2, §4, §7).  It accepts any server Hello
  (judging the versions is the cases' job, §7.1), allows a whole frame of
  ``0x00FFFFFF + 8`` bytes as the client side does (§1.1), and counts a frame cut by the
  end of the stream as no token (the end is a reset for a client).  Any split of the
  bytes gives the same tokens.
* The builders: each case's own segment name and writer id from the case seed (§4, §5.1),
  Event frames (§6), the seeded payloads.
* The async helpers (Hello, CreateSegment, SetupAppend, ReadSegment, the acks and their
  chain, §5.4, §6, §7.1), driven against a scripted testee over in-memory streams in
  virtual time (trio's MockClock with autojump): what they send, byte for byte; what they
  conclude from the replies; how long they wait; what they write to the wire log.
"""

from __future__ import annotations

import itertools
import random
import struct
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any, cast

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refwire.conform import runner
from refwire.conform.cases.pravega import _common as pv
from refwire.conform.conversation import Conversation
from refwire.pravega.frames import (
    CLIENT_LIMITS,
    NULL_VALUE,
    AppendSetup,
    ConditionalCheckFailed,
    CreateSegment,
    DataAppended,
    Hello,
    KeepAlive,
    NoSuchSegment,
    ReadSegment,
    SegmentAlreadyExists,
    SegmentCreated,
    SegmentRead,
    SetupAppend,
    WrongHost,
)
from refwire.pravega.writer import WriterSession

pytestmark = pytest.mark.timeout(60)

W = uuid.UUID(int=0x1234)
SEG = "scope/stream/0.#epoch.0"


def header(code: int, length: int) -> bytes:
    return struct.pack(">ii", code, length)


def acks(*chain: tuple[int, int], writer: uuid.UUID = W) -> bytes:
    """DataAppended frames for ``(previous, event)`` pairs."""
    return b"".join(
        DataAppended(writer_id=writer, event_number=n, previous_event_number=p, request_id=1).encode() for p, n in chain
    )


# --------------------------------------------------------------------------- the observer

#: one of each kind of thing a store sends, and the token and frame each one gives
STREAM: list[tuple[bytes, str, dict[str, Any]]] = [
    (Hello(high_version=17, low_version=5).encode(), "Hello", {"type": "Hello", "high": 17, "low": 5}),
    (KeepAlive().encode(), "KeepAlive", {"type": "KeepAlive"}),
    (
        AppendSetup(request_id=3, segment="s", writer_id=W, last_event_number=NULL_VALUE).encode(),
        "AppendSetup 3",
        {"type": "AppendSetup"},
    ),
    (
        DataAppended(writer_id=W, event_number=2, previous_event_number=NULL_VALUE, request_id=3).encode(),
        "DataAppended 2",
        {"type": "DataAppended"},
    ),
    (ConditionalCheckFailed(writer_id=W, event_number=7, request_id=4).encode(), "ConditionalCheckFailed 7", {"type": "ConditionalCheckFailed"}),
    (
        SegmentRead(segment="s", offset=0, at_tail=True, end_of_segment=False, data=b"abc", request_id=9).encode(),
        "SegmentRead 9",
        {"type": "SegmentRead"},
    ),
    (
        SegmentRead(segment="s", offset=3, at_tail=False, end_of_segment=True, data=b"", request_id=-1).encode(),
        "SegmentRead",
        {"type": "SegmentRead"},
    ),
    (SegmentCreated(request_id=0, segment="s").encode(), "SegmentCreated 0", {"type": "SegmentCreated"}),
    (NoSuchSegment(request_id=-2, segment="s").encode(), "NoSuchSegment -2", {"type": "NoSuchSegment"}),
    (WrongHost(request_id=1, segment="s").encode(), "WrongHost 1", {"type": "WrongHost"}),
]
WIRE = b"".join(frame for frame, _, _ in STREAM)


def test_the_observer_names_replies_by_request_id_and_acks_by_event_number() -> None:
    o = pv.ServerObserver()
    assert o.feed(WIRE) == [(token, frame) for _, token, frame in STREAM]
    assert [r.NAME for r in o.replies] == [
        "AppendSetup",
        "DataAppended",
        "ConditionalCheckFailed",
        "SegmentRead",
        "SegmentRead",
        "SegmentCreated",
        "NoSuchSegment",
        "WrongHost",
    ]
    assert cast(SegmentRead, o.replies[3]).data == b"abc"
    assert [(h.high_version, h.low_version) for h in o.hellos] == [(17, 5)]
    assert o.eof() == [] and not o.broken


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(min_value=0, max_value=len(WIRE)), max_size=12))
def test_any_split_gives_the_same_tokens(cuts: list[int]) -> None:
    o = pv.ServerObserver()
    got: list[tuple[str, dict[str, Any]]] = []
    edges = [0, *sorted(cuts), len(WIRE)]
    for a, b in itertools.pairwise(edges):
        if b > a:
            got += o.feed(WIRE[a:b])
    assert got == [(token, frame) for _, token, frame in STREAM]
    assert len(o.replies) == 8 and len(o.hellos) == 1


def test_the_first_undecodable_byte_is_one_invalid_token_and_nothing_after_it() -> None:
    o = pv.ServerObserver()
    good = Hello(high_version=17, low_version=5).encode() + SegmentCreated(request_id=1, segment="s").encode()
    got = o.feed(good + header(99, 0) + SegmentCreated(request_id=2, segment="s").encode())
    assert [t for t, _ in got] == ["Hello", "SegmentCreated 1", "invalid type"]
    assert got[-1][1] == {
        "type": "invalid",
        "frame": None,
        "field": "type",
        "offset": len(good),
        "reason": "unknown wire command: type 99",
    }
    assert o.broken
    assert o.feed(SegmentCreated(request_id=3, segment="s").encode()) == [] and o.eof() == []
    assert len(o.replies) == 1


def test_a_request_from_the_store_is_invalid_at_its_type() -> None:
    o = pv.ServerObserver()
    got = o.feed(SetupAppend(request_id=1, writer_id=W, segment="s").encode())
    assert got == [
        (
            "invalid type",
            {"type": "invalid", "frame": "SetupAppend", "field": "type", "offset": 0, "reason": "SetupAppend is a request, not a reply"},
        )
    ]


@pytest.mark.parametrize(("high", "low"), [(0, 0), (17, 5), (2**31 - 1, 2**31 - 1), (2**31 - 1, -(2**31))])
def test_any_server_hello_is_taken_the_cases_judge_versions(high: int, low: int) -> None:
    o = pv.ServerObserver()
    assert o.feed(Hello(high_version=high, low_version=low).encode()) == [("Hello", {"type": "Hello", "high": high, "low": low})]
    assert o.hellos[0].high_version == high and o.hellos[0].low_version == low


def test_a_hello_below_every_version_does_not_decode() -> None:
    o = pv.ServerObserver()
    (token,) = o.feed(Hello(high_version=-1, low_version=-1).encode())
    assert token == (
        "invalid low_version",
        {
            "type": "invalid",
            "frame": "Hello",
            "field": "low_version",
            "offset": 12,
            "reason": "server speaks versions -1..-1, we speak 0..2147483647",
        },
    )


def test_a_frame_cut_by_the_end_of_the_stream_is_no_token() -> None:
    """The end of the store's stream is a lost connection for the client: what was
    cut off is not reported as a decode error."""
    o = pv.ServerObserver()
    frame = SegmentCreated(request_id=5, segment="s").encode()
    assert o.feed(Hello().encode() + frame[:-1]) == [("Hello", {"type": "Hello", "high": 17, "low": 5})]
    assert o.eof() == []
    o2 = pv.ServerObserver()
    assert o2.feed(frame[:5]) == [] and o2.eof() == []


def test_the_end_of_input_given_to_feed_is_a_closed_token() -> None:
    assert pv.ServerObserver().feed(b"") == [("closed", {"type": "closed", "reason": ""})]


def test_a_whole_frame_of_the_client_limit_is_waited_for_one_byte_more_is_invalid() -> None:
    """§1.1: header + payload up to 0x00FFFFFF + 8 bytes for a client (the header alone decides)."""
    payload = CLIENT_LIMITS.max_frame_size - 8
    assert pv.ServerObserver().feed(header(SegmentRead.TYPE, payload)) == []
    (token,) = pv.ServerObserver().feed(header(SegmentRead.TYPE, payload + 1))
    assert token[0] == "invalid length"


def test_tokens_of_an_event_the_observer_does_not_know_are_none() -> None:
    assert pv.ServerObserver().tokens(object()) == []


# --------------------------------------------------------------------------- builders


def test_a_case_segment_is_named_after_the_case_the_run_and_the_seed() -> None:
    c = SimpleNamespace(rng=random.Random(7), run_id="0a1b2c3d")
    want = f"conform/pv-S2-1-0a1b2c3d-{random.Random(7).getrandbits(32):08x}/0.#epoch.0"
    assert pv.segment_of(c, "pv.S2.1") == want
    state = c.rng.getstate()
    assert pv.segment_of(c, "pv.S2.1") == want  # the same segment, and no draw from the seed
    assert c.rng.getstate() == state
    r = random.Random(7)
    r.getrandbits(32)
    assert pv.segment_of(c, "pv.S2.1", 1) == f"conform/pv-S2-1-0a1b2c3d-{r.getrandbits(32):08x}/1.#epoch.0"
    assert pv.segment_of(c, "pv.S2.1", 0) == want


@pytest.mark.parametrize("has_run_id", [True, False])
def test_without_a_run_id_the_segment_has_no_mark(has_run_id: bool) -> None:
    c = SimpleNamespace(rng=random.Random(3), run_id="") if has_run_id else SimpleNamespace(rng=random.Random(3))
    assert pv.segment_of(c, "pv.S4.10", 2) == f"conform/pv-S4-10-{random.Random(3).getrandbits(32):08x}/2.#epoch.0"


def test_the_writer_id_comes_from_the_case_seed() -> None:
    c = cast(Conversation, SimpleNamespace(rng=random.Random(11)))
    want = uuid.UUID(int=random.Random(11).getrandbits(128), version=4)
    got = pv.writer_of(c)
    assert got == want and got.version == 4
    assert pv.writer_of(c) != want


def test_frames_of_is_the_event_frames_in_order() -> None:
    assert pv.frames_of([b"ab", b"", b"xyz"]) == header(0, 2) + b"ab" + header(0, 0) + header(0, 3) + b"xyz"
    assert pv.frames_of([]) == b""


def test_event_payloads_are_drawn_from_the_case_seed() -> None:
    def drawn(seed: int, n: int, low: int, high: int) -> list[bytes]:
        r = random.Random(seed)
        out = []
        for _ in range(n):
            size = r.randint(low, high)
            out.append(bytes(r.getrandbits(8) for _ in range(size)))
        return out

    c = cast(Conversation, SimpleNamespace(rng=random.Random(4)))
    assert pv.events_for(c, 5) == drawn(4, 5, 1, 120)
    c = cast(Conversation, SimpleNamespace(rng=random.Random(4)))
    assert pv.events_for(c, 3, low=7, high=9) == drawn(4, 3, 7, 9)
    c = cast(Conversation, SimpleNamespace(rng=random.Random(4)))
    sizes = {len(p) for p in pv.events_for(c, 400)}
    assert min(sizes) == 1 and max(sizes) == 120


def test_the_server_book() -> None:
    book = pv.server_book()
    assert book.spec == "specs/pravega/README.md"
    assert book.server_ignore == () and book.server_budget == 6.0 and book.cases == []


# --------------------------------------------------------------------------- a scripted testee


class ScriptedStore:
    """The testee's end of an in-memory connection: keeps what refwire sent and
    sends scripted bytes at scripted (virtual) times after the start."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.got = bytearray()

    async def play(self, script: Sequence[tuple[float, bytes]]) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read)
            start = trio.current_time()
            for at, data in script:
                await trio.sleep_until(start + at)
                await self.stream.send_all(data)

    async def _read(self) -> None:
        while data := await self.stream.receive_some(65536):
            self.got += data


@asynccontextmanager
async def talk(script: Sequence[tuple[float, bytes]] = (), *, seed: int = 1) -> AsyncIterator[tuple[Conversation, ScriptedStore]]:
    ours, theirs = trio.testing.memory_stream_pair()
    c = Conversation(ours, pv.ServerObserver(), rng=random.Random(seed))
    t = ScriptedStore(theirs)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(c.reader)
        nursery.start_soon(t.play, script)
        yield c, t
        nursery.cancel_scope.cancel()


def actions(c: Conversation) -> list[str]:
    return [e["text"] for e in c.log if e["kind"] == "action"]


def sent(c: Conversation) -> list[bytes]:
    return [bytes.fromhex(e["hex"]) for e in c.log if e["kind"] == "tx"]


async def test_obs_and_replies(autojump_clock: trio.testing.MockClock) -> None:
    async with talk() as (c, _):
        o = pv.obs(c)
        assert o is c.observer
        o.feed(acks((NULL_VALUE, 1)) + SegmentCreated(request_id=4, segment="s").encode() + acks((1, 2)))
        assert [r.event_number for r in pv.replies(c, DataAppended)] == [1, 2]
        assert [r.request_id for r in pv.replies(c, SegmentCreated)] == [4]
        assert pv.replies(c, SegmentRead) == []
    other = cast(Conversation, SimpleNamespace(observer=object()))
    with pytest.raises(AssertionError):
        pv.obs(other)


async def test_answer_is_the_first_reply_to_the_request_acks_aside(autojump_clock: trio.testing.MockClock) -> None:
    async with talk() as (c, _):
        o = pv.obs(c)
        o.feed(
            DataAppended(writer_id=W, event_number=1, previous_event_number=NULL_VALUE, request_id=6).encode()
            + SegmentCreated(request_id=5, segment="a").encode()
            + NoSuchSegment(request_id=6, segment="b").encode()
            + SegmentCreated(request_id=6, segment="c").encode()
        )
        first = pv.answer(c, 6)
        assert isinstance(first, NoSuchSegment) and first.segment == "b"
        assert cast(SegmentCreated, pv.answer(c, 5)).segment == "a"
        assert pv.answer(c, 7) is None


async def test_ack_chain(autojump_clock: trio.testing.MockClock) -> None:
    cases: list[tuple[bytes, int, bool]] = [
        (b"", NULL_VALUE, True),
        (b"", 0, False),
        (acks((NULL_VALUE, 2), (2, 5)), 5, True),
        (acks((NULL_VALUE, 2), (2, 5)), 2, False),  # the last ack must be ``last``
        (acks((NULL_VALUE, 2), (2, 5)), 6, False),
        (acks((0, 2), (2, 5)), 5, False),  # the first must follow Long.MIN_VALUE
        (acks((NULL_VALUE, 2), (3, 5)), 5, False),  # a gap
        (acks((NULL_VALUE, 2), (2, 2)), 2, False),  # not increasing
        (acks((NULL_VALUE, 2), (2, 1)), 1, False),
        (acks((NULL_VALUE, 1)), 1, True),
    ]
    for wire, last, ok in cases:
        async with talk() as (c, _):
            pv.obs(c).feed(wire)
            assert pv.ack_chain_ok(c, last) is ok, (wire.hex(), last)


async def test_has_waits_three_seconds_for_a_token_with_that_prefix(autojump_clock: trio.testing.MockClock) -> None:
    created = SegmentCreated(request_id=1, segment="s").encode()
    async with talk([(2.9, created)]) as (c, _):
        assert await pv.has(c, "SegmentCr")
        assert c.now() == pytest.approx(2.9)
    async with talk([(3.1, created)]) as (c, _):
        assert not await pv.has(c, "SegmentCr")
        assert c.now() == pytest.approx(3.0)
        assert actions(c) == ["wait up to 3s for SegmentCr"]
    async with talk([(0.5, created)]) as (c, _):
        assert not await pv.has(c, "Created", 2.0)  # a prefix, not a part
        assert c.now() == pytest.approx(2.0)


async def test_hello_sends_hello_17_5_whole_and_waits_for_the_store_s(autojump_clock: trio.testing.MockClock) -> None:
    async with talk([(2.9, Hello(high_version=9, low_version=2).encode())], seed=3) as (c, t):
        assert await pv.hello(c)
        assert sent(c) == [Hello(high_version=17, low_version=5).encode()]
        assert bytes(t.got) == Hello(high_version=17, low_version=5).encode()
        assert c.rng.random() == random.Random(3).random()  # whole: no seeded split drawn
        assert actions(c) == ["send Hello(17, 5) (16 bytes)", "wait up to 3s for Hello"]
    async with talk([(3.1, Hello().encode())]) as (c, _):
        assert not await pv.hello(c)
        assert c.now() == pytest.approx(3.0)


async def test_create_succeeds_on_any_answer_and_a_segment_already_there_is_testee_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    want = CreateSegment(request_id=4, segment=SEG).encode()
    async with talk([(2.5, SegmentCreated(request_id=4, segment=SEG).encode())]) as (c, t):
        assert await pv.create(c, 4, SEG)
        assert bytes(t.got) == want
        assert actions(c)[0].startswith(f"send CreateSegment {SEG} ({len(want)} bytes")
        assert actions(c)[-1] == "wait up to 3s for request 4 answered"
    async with talk([(0.1, WrongHost(request_id=4, segment=SEG).encode())]) as (c, _):
        assert await pv.create(c, 4, SEG)  # an answer, whatever it says: the case judges it
    async with talk([(0.1, SegmentCreated(request_id=5, segment=SEG).encode())]) as (c, _):
        assert not await pv.create(c, 4, SEG)
        assert c.now() == pytest.approx(3.0, abs=0.02)
    async with talk([(0.1, SegmentAlreadyExists(request_id=4, segment=SEG).encode())]) as (c, _):
        with pytest.raises(runner.TesteeState) as err:
            await pv.create(c, 4, SEG)
        assert str(err.value) == (
            f"segment {SEG} already exists on the store: an earlier run with this run id made it; run again with a "
            "fresh --run-id (the default), or reset the store first"
        )


def _session(events: int = 0) -> WriterSession:
    w = WriterSession(SEG, W)
    for i in range(events):
        w.add(bytes([i]))
    return w


def _setup_reply(rid: int, last: int, *, writer: uuid.UUID = W, segment: str = SEG) -> bytes:
    return AppendSetup(request_id=rid, segment=segment, writer_id=writer, last_event_number=last).encode()


async def test_setup_sends_the_writer_s_setup_append_and_feeds_it_the_append_setup(
    autojump_clock: trio.testing.MockClock,
) -> None:
    w = _session()
    async with talk([(1.0, _setup_reply(2, NULL_VALUE))]) as (c, t):
        r = await pv.setup(c, 2, w)
        assert isinstance(r, AppendSetup) and r.last_event_number == NULL_VALUE
        assert bytes(t.got) == SetupAppend(request_id=2, writer_id=W, segment=SEG).encode()
        assert w.ready and c.facts == []
        assert actions(c)[-1] == "wait up to 3s for request 2 answered"
        assert actions(c)[0].startswith(f"send SetupAppend {SEG} (")
    # after two events written, the store may say both are stored
    w = _session(2)
    async with talk([(1.0, _setup_reply(2, 2))]) as (c, _):
        r = await pv.setup(c, 2, w)
        assert r is not None and r.last_event_number == 2
        assert w.ready and w.unacked == 0 and w.last_acked == 2
    w = _session(2)
    async with talk([(1.0, _setup_reply(2, 1))]) as (c, _):
        assert await pv.setup(c, 2, w) is not None
        assert w.unacked == 1


@pytest.mark.parametrize(
    "reply",
    [
        _setup_reply(2, NULL_VALUE, writer=uuid.UUID(int=99)),
        _setup_reply(2, NULL_VALUE, segment="other"),
        _setup_reply(3, NULL_VALUE),
        NoSuchSegment(request_id=2, segment=SEG).encode(),
        b"",
    ],
)
async def test_setup_gives_none_for_another_writer_segment_request_or_reply(
    reply: bytes, autojump_clock: trio.testing.MockClock
) -> None:
    w = _session()
    async with talk([(0.5, reply)]) as (c, _):
        assert await pv.setup(c, 2, w) is None
        assert not w.ready and c.facts == []


async def test_setup_of_a_new_writer_the_store_already_has_events_of_is_testee_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    for last in (1, 7):
        w = _session()
        async with talk([(0.5, _setup_reply(2, last))]) as (c, _):
            with pytest.raises(runner.TesteeState) as err:
                await pv.setup(c, 2, w)
            assert str(err.value) == (
                f"the store says event {last} of this case's new writer is already stored on {SEG}: an earlier "
                "run with this run id wrote it; run again with a fresh --run-id (the default), or reset the store"
            )
            assert not w.ready


async def test_setup_saying_more_is_stored_than_was_written_is_a_fact(autojump_clock: trio.testing.MockClock) -> None:
    for written, last in ((1, 2), (2, 3), (2, 9)):
        w = _session(written)
        async with talk([(0.5, _setup_reply(2, last))]) as (c, _):
            assert await pv.setup(c, 2, w) is None
            assert c.facts == [f"AppendSetup says event {last} is stored, but only {written} were written"]
            assert not w.ready and w.unacked == written


async def test_acked_waits_for_an_ack_at_or_past_the_number(autojump_clock: trio.testing.MockClock) -> None:
    async with talk([(1.0, acks((NULL_VALUE, 3)))]) as (c, _):
        assert await pv.acked(c, 3)
        assert actions(c) == ["wait up to 3s for ack of 3"]
    async with talk([(1.0, acks((NULL_VALUE, 3)))]) as (c, _):
        assert await pv.acked(c, 2)
    async with talk([(1.0, acks((NULL_VALUE, 3)))]) as (c, _):
        assert not await pv.acked(c, 4)
        assert c.now() == pytest.approx(3.0)
    async with talk([(3.1, acks((NULL_VALUE, 3)))]) as (c, _):
        assert not await pv.acked(c, 3)
    async with talk([(2.9, SegmentCreated(request_id=3, segment="s").encode())]) as (c, _):
        assert not await pv.acked(c, 0)  # only acks count


async def test_answered_waits_for_the_reply_to_the_request(autojump_clock: trio.testing.MockClock) -> None:
    reply = SegmentCreated(request_id=8, segment="s").encode()
    async with talk([(2.9, reply)]) as (c, _):
        r = await pv.answered(c, 8)
        assert isinstance(r, SegmentCreated) and r.request_id == 8
        assert c.now() == pytest.approx(2.9)  # at once
    async with talk([(3.1, reply)]) as (c, _):
        assert await pv.answered(c, 8) is None
        assert c.now() == pytest.approx(3.0)


async def test_read_all_reads_once_and_gives_the_data_of_its_segment_read(autojump_clock: trio.testing.MockClock) -> None:
    read = SegmentRead(segment=SEG, offset=0, at_tail=True, end_of_segment=False, data=b"\x00stored", request_id=6)
    async with talk([(1.0, read.encode())]) as (c, t):
        got = await pv.read_all(c, 6, SEG)
        assert got == b"\x00stored" and type(got) is bytes
        assert bytes(t.got) == ReadSegment(segment=SEG, offset=0, suggested_length=1 << 20, request_id=6).encode()
        assert actions(c)[0].startswith("send ReadSegment @0 (") and actions(c)[-1] == "wait up to 3s for request 6 answered"
    async with talk([(1.0, read.encode())]) as (c, t):
        await pv.read_all(c, 6, SEG, 40, 17)
        assert bytes(t.got) == ReadSegment(segment=SEG, offset=40, suggested_length=17, request_id=6).encode()
        assert actions(c)[0].startswith("send ReadSegment @40 (")
    async with talk([(1.0, NoSuchSegment(request_id=6, segment=SEG).encode())]) as (c, _):
        assert await pv.read_all(c, 6, SEG) is None
    async with talk() as (c, _):
        assert await pv.read_all(c, 6, SEG) is None


async def test_write_all_sends_the_pending_appends_and_feeds_the_acks_to_the_writer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    w = _session(3)
    w.on_append_setup(AppendSetup(request_id=1, segment=SEG, writer_id=W, last_event_number=NULL_VALUE))
    appends = _session(3)
    appends.on_append_setup(AppendSetup(request_id=1, segment=SEG, writer_id=W, last_event_number=NULL_VALUE))
    wire = appends.take()
    # a bad ack first (its chain is broken: the writer refuses it), then the good one
    script = [(0.5, acks((5, 2)) + acks((NULL_VALUE, 3)))]
    async with talk(script) as (c, t):
        await pv._write_all(c, w, 3)
        assert bytes(t.got) == wire
        assert w.unacked == 0 and w.last_acked == 3
        assert actions(c)[0].startswith("send appends up to event 3 (")
        assert actions(c)[-1] == "wait up to 3s for ack of 3"


async def test_write_all_sends_nothing_when_the_writer_has_nothing(autojump_clock: trio.testing.MockClock) -> None:
    w = _session(2)  # not set up: take() is empty
    async with talk() as (c, t):
        await pv._write_all(c, w, 2)
        assert bytes(t.got) == b"" and sent(c) == []
        assert actions(c) == ["wait up to 3s for ack of 2"]
        assert c.now() == pytest.approx(3.0)
