"""The TANK conformance cases' shared helpers give the right verdict inputs
(refwire.conform.cases.tank._common; specs/tank/README.md).

* :class:`ServerObserver` turns what a broker sends (built here with refwire's
  own codecs) into the exact tokens the cases judge: the broker's Ping (§6),
  ``create R err=E`` (§3), ``produce R E,E`` (one error per requested partition,
  §3), ``consume R err=E msgs=N`` with the messages' sequence numbers (§3, §5)
  and ``unknown-topic`` (§7), and ``invalid <field>`` at the first byte that
  does not decode, after which nothing more is decoded; any split of the bytes
  gives the same tokens, and an EOF adds none (the close is judged apart).
* The request builders make the exact bytes of §3's Produce / ProduceWithSeqnum
  and Consume requests.
* :func:`create` raises :class:`TesteeState` only for *its own* topic's
  "already exists" (err 0x01, §3): a topic an earlier run left; :func:`answered`,
  :func:`first_ping`, :func:`contents` and :func:`seqs` read only the answer to
  the request they name.  The async helpers run against a scripted broker in
  virtual time (trio's MockClock), so their timeouts are exact and cost nothing.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import hypothesis.strategies as st
import pytest
import trio
import trio.testing
from hypothesis import given, settings

from refwire.conform import runner
from refwire.conform.cases.tank._common import (
    ServerObserver,
    answered,
    consume_request,
    contents,
    create,
    first_ping,
    messages,
    obs,
    produce_request,
    seqs,
    topic_of,
)
from refwire.conform.conversation import Conversation, MachineObserver
from refwire.tank.bundles import Message, encode_bundle, encode_entry
from refwire.tank.connection import ClientConnection, State
from refwire.tank.events import ConnectionClosed, IdleTimeout
from refwire.tank.frames import (
    REQUEST_IDS,
    ConsumePartition,
    ConsumeRequest,
    ConsumeTopic,
    CreateTopicRequest,
    DiscoverPartitionsRequest,
    FrameDecoder,
    Ping,
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
    decode_request,
)
from refwire.tank.responses import (
    ConsumePartitionResult,
    ConsumeResponse,
    ConsumeTopicResult,
    CreateTopicResponse,
    DiscoverPartitionsResponse,
    PartitionInfo,
    ProduceResponse,
    ProduceResult,
)

PING = Ping().encode()


def _bundle(*contents_: bytes, ts: int = 1) -> bytes:
    return encode_entry(encode_bundle([Message(c, ts=ts + i) for i, c in enumerate(contents_)], compress=False))


def _consume_answer(rid: int, topic: str, *parts: ConsumePartitionResult, unknown: tuple[str, ...] = ()) -> bytes:
    topics = [ConsumeTopicResult(topic, tuple(parts))] + [ConsumeTopicResult(u, (), unknown=True, partitions_count=1) for u in unknown]
    return ConsumeResponse(rid, tuple(topics)).encode()


# --------------------------------------------------------------------------- the observer, fed recorded bytes


def test_the_brokers_ping_is_a_ping_token_each_time() -> None:
    o = ServerObserver()
    assert o.feed(PING) == [("ping", {"type": "Ping"})]
    assert o.feed(PING + PING) == [("ping", {"type": "Ping"}), ("ping", {"type": "Ping"})]
    assert o.feed(PING[:3]) == [] and o.feed(PING[3:]) == [("ping", {"type": "Ping"})]


def test_a_fresh_observer_has_nothing_consumed_and_never_pings_of_its_own() -> None:
    o = ServerObserver()
    assert isinstance(o, MachineObserver) and isinstance(o.machine, ClientConnection)
    assert o.consumed == {} and not o.broken
    assert o.machine.next_deadline() is None  # no keepalive Ping: the observer only decodes
    assert o.machine.data_to_send() == b""


def test_request_returns_exactly_the_requests_bytes_once() -> None:
    o = ServerObserver()
    create_ = CreateTopicRequest(7, "t1", 1)
    consume = consume_request(8, "t1", 0)
    assert o.request(create_) == create_.encode()
    assert o.request(consume) == consume.encode()  # only the new request's bytes
    assert o.machine.pending == 2


def test_create_answers_carry_their_request_id_and_error() -> None:
    o = ServerObserver()
    o.request(CreateTopicRequest(7, "t1", 1))
    o.request(CreateTopicRequest(300, "t2", 1))
    got = o.feed(CreateTopicResponse(300, "t2", 0x01).encode() + CreateTopicResponse(7, "t1", 0).encode())
    assert got == [
        ("create 300 err=0x01", {"type": "CreateTopicResponse", "error": 1}),
        ("create 7 err=0x00", {"type": "CreateTopicResponse", "error": 0}),
    ]


def test_produce_answers_list_one_error_per_requested_partition() -> None:
    o = ServerObserver()
    two = ProduceRequest(5, (ProduceTopic("t", (ProducePartition(0, b"x"), ProducePartition(1, b"y"))),))
    o.request(two)
    o.request(produce_request(6, "t", b"z"))
    answer = ProduceResponse(5, (ProduceResult("t", 0, 0), ProduceResult("t", 1, 0x0A))).encode()
    answer += ProduceResponse(6, (ProduceResult("t", 0, 0xFB),)).encode()
    assert o.feed(answer) == [
        ("produce 5 0x00,0x0a", {"type": "ProduceResponse", "errors": [0, 10]}),
        ("produce 6 0xfb", {"type": "ProduceResponse", "errors": [0xFB]}),
    ]


def test_consume_answers_count_messages_and_keep_their_seqs() -> None:
    o = ServerObserver()
    req = ConsumeRequest(9, (ConsumeTopic("t", (ConsumePartition(0, 10, 4096), ConsumePartition(1, 0, 4096))),))
    o.request(req)
    p0 = ConsumePartitionResult(0, 0, base_seq=10, hwmark=12, chunk=_bundle(b"a", b"bb", b"ccc"))
    p1 = ConsumePartitionResult(1, 0x01, base_seq=0, hwmark=50, first_avail=40)
    got = o.feed(_consume_answer(9, "t", p0, p1, unknown=("gone",)))
    assert got == [
        ("consume 9 err=0x00 msgs=3", {"type": "ConsumeResult", "error": 0, "hwmark": 12, "seqs": [10, 11, 12], "first_avail": None}),
        ("consume 9 err=0x01 msgs=0", {"type": "ConsumeResult", "error": 1, "hwmark": 50, "seqs": [], "first_avail": 40}),
        ("consume 9 unknown-topic", {"type": "ConsumeResult", "unknown": "gone"}),
    ]
    kept = o.consumed[9]
    assert kept.request_id == 9 and [m.content for m in kept.partitions[0].messages] == [b"a", b"bb", b"ccc"]  # type: ignore[attr-defined]
    assert list(o.consumed) == [9]


def test_an_empty_consume_answer_is_zero_messages_and_a_tail_request_only_the_new_ones() -> None:
    o = ServerObserver()
    o.request(consume_request(1, "t", 0))
    o.request(consume_request(2, "t", 11))
    empty = _consume_answer(1, "t", ConsumePartitionResult(0, 0, base_seq=0, hwmark=0))
    # a chunk from seq 10 asked from 11: only message 11 is delivered (§5)
    tail = _consume_answer(2, "t", ConsumePartitionResult(0, 0, base_seq=10, hwmark=11, chunk=_bundle(b"old", b"new")))
    assert [t for t, _ in o.feed(empty + tail)] == ["consume 1 err=0x00 msgs=0", "consume 2 err=0x00 msgs=1"]
    assert [m.seq for m in o.consumed[2].partitions[0].messages] == [11]  # type: ignore[attr-defined]


def test_any_other_answer_is_named_by_its_type() -> None:
    o = ServerObserver()
    o.request(DiscoverPartitionsRequest(3, "t"))
    answer = DiscoverPartitionsResponse(3, "t", (PartitionInfo(0, 5),)).encode()
    assert o.feed(answer) == [("DiscoverPartitionsResponse", {"type": "DiscoverPartitionsResponse"})]
    assert o.tokens(IdleTimeout(1.0)) == [("IdleTimeout", {"type": "IdleTimeout"})]


def test_a_close_is_a_closed_token_with_its_reason_and_adds_nothing_at_eof() -> None:
    o = ServerObserver()
    assert o.tokens(ConnectionClosed(False, "connection reset")) == [("closed", {"type": "closed", "reason": "connection reset"})]
    o.request(CreateTopicRequest(1, "t", 1))
    assert o.feed(PING + CreateTopicResponse(1, "t", 0).encode()[:4]) == [("ping", {"type": "Ping"})]
    assert o.eof() == []  # the cut answer and the close are judged from the close, not from tokens
    assert o.machine.state is State.CLOSED  # its machine was told the stream ended (an EOF)
    o2 = ServerObserver()
    assert o2.feed(b"") == [("closed", {"type": "closed", "reason": ""})]


@pytest.mark.parametrize(
    ("data", "field", "offset"),
    [
        (b"\x04\x00\x00\x00\x00", "msgId", 5),  # ReplicaID, obsolete: the real broker closes (§3)
        (CreateTopicResponse(99, "t", 0).encode(), "requestId", 10),  # answers nothing that was asked
        (b"\x02" + ((256 << 20) - 4).to_bytes(4, "little"), "payloadLen", 6),  # one byte past 256 MiB
    ],
)
def test_the_first_byte_that_does_not_decode_is_invalid_and_ends_decoding(data: bytes, field: str, offset: int) -> None:
    o = ServerObserver()
    got = o.feed(PING + data)
    assert [t for t, _ in got] == ["ping", f"invalid {field}"]
    assert got[1][1]["type"] == "invalid" and got[1][1]["field"] == field and got[1][1]["offset"] == offset
    assert o.feed(PING) == [] and o.eof() == []


def test_a_frame_of_exactly_256_mib_is_still_awaited() -> None:
    o = ServerObserver()
    o.request(consume_request(1, "t", 0))
    assert o.feed(b"\x02" + ((256 << 20) - 5).to_bytes(4, "little")) == []
    assert not o.broken


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=400), max_size=12))
def test_any_split_gives_the_same_tokens(cuts: list[int]) -> None:
    def fresh() -> ServerObserver:
        o = ServerObserver()
        o.request(CreateTopicRequest(1, "t", 1))
        o.request(produce_request(2, "t", b"b"))
        o.request(consume_request(3, "t", 0))
        return o

    wire = (
        PING
        + CreateTopicResponse(1, "t", 0).encode()
        + ProduceResponse(2, (ProduceResult("t", 0, 0),)).encode()
        + _consume_answer(3, "t", ConsumePartitionResult(0, 0, base_seq=1, hwmark=2, chunk=_bundle(b"m1", b"m2")))
        + PING
    )
    whole = fresh().feed(wire)
    assert [t for t, _ in whole] == ["ping", "create 1 err=0x00", "produce 2 0x00", "consume 3 err=0x00 msgs=2", "ping"]
    o = fresh()
    got = []
    at = 0
    for c in [*sorted({c for c in cuts if c < len(wire)}), len(wire)]:
        got += o.feed(wire[at:c])  # never b"": that is the EOF
        at = c
    assert got == whole


# --------------------------------------------------------------------------- builders


def test_produce_request_is_one_partition_of_one_topic() -> None:
    req = produce_request(12, "tp", b"BUNDLE")
    assert req == ProduceRequest(12, (ProduceTopic("tp", (ProducePartition(0, b"BUNDLE", None),)),), with_seqnum=False)
    assert req.encode() == bytes.fromhex("011d000000" "0200" "0c000000" "03632b2b" "00" "00000000" "01" "027470" "01" "0000" "06") + b"BUNDLE"


def test_produce_request_with_a_base_seq_is_produce_with_seqnum() -> None:
    req = produce_request(12, "tp", b"B", base_seq=0)
    assert req.with_seqnum and req.topics[0].partitions[0].base_seq == 0
    assert req.encode() == bytes.fromhex("0520000000" "0200" "0c000000" "03632b2b" "00" "00000000" "01" "027470" "01" "0000" "01" "0000000000000000") + b"B"


def test_consume_request_defaults_and_options() -> None:
    req = consume_request(4, "tp", 7)
    assert req == ConsumeRequest(4, (ConsumeTopic("tp", (ConsumePartition(0, 7, 1 << 20),)),), max_wait_ms=0, min_bytes=0)
    assert req.encode() == bytes.fromhex(
        "0226000000" "0200" "04000000" "00" "0000000000000000" "00000000" "01" "027470" "01" "0000" "0700000000000000" "00001000"
    )
    long_poll = consume_request(4, "tp", 2**64 - 1, fetch=100, wait_ms=2500, min_bytes=9)
    assert long_poll == ConsumeRequest(4, (ConsumeTopic("tp", (ConsumePartition(0, 2**64 - 1, 100),)),), max_wait_ms=2500, min_bytes=9)


# --------------------------------------------------------------------------- conversation helpers (virtual time)


def _conversation(stream: trio.abc.Stream, observer: Any = None, *, run_id: str = "", seed: int = 1) -> Conversation:
    c = Conversation(stream, observer if observer is not None else ServerObserver(), rng=random.Random(seed))
    c.run_id = run_id
    return c


Reply = Callable[[Any], bytes]


async def _with_broker(
    reply: Reply | None, body: Callable[[Conversation], Awaitable[Any]], *, prepare: Callable[[Conversation], None] | None = None
) -> tuple[Conversation, list[Any], Any, float]:
    """Run ``body(conversation)`` against a scripted broker answering each request
    with ``reply(request)`` (None: never answering); -> (conversation, requests
    seen, body's result or the TesteeState it raised, virtual seconds taken)."""
    ours, theirs = trio.testing.memory_stream_pair()
    c = _conversation(ours, seed=5)  # a seed whose "seeded" split cuts a write in two
    if prepare is not None:
        prepare(c)
    seen: list[Any] = []

    async def broker() -> None:
        dec = FrameDecoder(REQUEST_IDS)
        while data := await theirs.receive_some():
            dec.feed(bytes(data))
            while (f := dec.next_frame()) is not None:
                req = decode_request(f[0], f[1], offset=f[2])
                seen.append(req)
                if reply is not None:
                    await theirs.send_all(reply(req))

    result: Any = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(c.reader)
        nursery.start_soon(broker)
        t0 = trio.current_time()
        try:
            result = await body(c)
        except runner.TesteeState as exc:
            result = exc
        took = trio.current_time() - t0
        nursery.cancel_scope.cancel()
    return c, seen, result, took


def _virtual(fn: Callable[[], Awaitable[Any]]) -> Any:
    return trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))


def _actions(c: Conversation) -> list[str]:
    return [e["text"] for e in c.log if e["kind"] == "action"]


def test_topic_of_carries_the_case_id_and_the_run_id() -> None:
    async def main() -> tuple[str, str]:
        ours, _ = trio.testing.memory_stream_pair()
        return topic_of(_conversation(ours, run_id="0a1b2c3d"), "tk.S2.1"), topic_of(_conversation(ours), "tk.S10.12")

    assert _virtual(main) == ("conform-tk-S2-1-0a1b2c3d", "conform-tk-S10-12")


def test_obs_is_the_conversations_tank_observer() -> None:
    async def main() -> None:
        ours, _ = trio.testing.memory_stream_pair()
        o = ServerObserver()
        assert obs(_conversation(ours, o)) is o
        with pytest.raises(AssertionError):
            obs(_conversation(ours, object()))

    _virtual(main)


def test_messages_come_from_the_case_seed() -> None:
    async def main() -> tuple[list[Message], list[Message], list[Message]]:
        ours, _ = trio.testing.memory_stream_pair()
        return messages(_conversation(ours, seed=5), 3), messages(_conversation(ours, seed=5), 2, size=4), messages(_conversation(ours, seed=6), 3)

    a, b, other = _virtual(main)
    rng = random.Random(5)
    assert a == [Message(bytes(rng.getrandbits(8) for _ in range(24)), ts=1_700_000_000_000 + i) for i in range(3)]
    assert [len(m.content) for m in b] == [4, 4] and [m.ts for m in b] == [1_700_000_000_000, 1_700_000_000_001]
    assert b[0].content == a[0].content[:4] and a != other and all(m.key is None and m.seq is None for m in a)


def _create_reply(err: int, rid: int | None = None) -> Reply:
    return lambda req: CreateTopicResponse(req.request_id if rid is None else rid, req.topic, err).encode()


def test_create_sends_one_create_topic_whole_and_returns_when_it_is_created() -> None:
    c, seen, result, took = _virtual(lambda: _with_broker(_create_reply(0), lambda c: create(c, 4, "conform-x")))
    assert result is None and took == 0
    assert seen == [CreateTopicRequest(4, "conform-x", 1)]
    assert c.tokens == ["create 4 err=0x00"]
    tx = [e for e in c.log if e["kind"] == "tx"]
    assert [e["hex"] for e in tx] == [CreateTopicRequest(4, "conform-x", 1).encode().hex()]
    assert _actions(c)[:2] == ["send CreateTopic conform-x (22 bytes)", "wait up to 3s for create 4 "]


def test_create_of_a_topic_that_exists_is_the_testees_state_not_its_behaviour() -> None:
    c, _, result, _ = _virtual(lambda: _with_broker(_create_reply(0x01), lambda c: create(c, 4, "conform-x")))
    assert isinstance(result, runner.TesteeState)
    assert str(result) == (
        "topic conform-x already exists on the broker (CreateTopic err 0x01): it was left by an earlier run "
        "with this run id; run again with a fresh --run-id (the default), or reset the broker first"
    )
    assert c.tokens == ["create 4 err=0x01"]


def test_create_with_any_other_error_is_left_to_the_case() -> None:
    _, _, result, took = _virtual(lambda: _with_broker(_create_reply(0x02), lambda c: create(c, 4, "conform-x")))
    assert result is None and took == 0


def test_create_unanswered_waits_three_seconds_twice_then_returns() -> None:
    c, seen, result, took = _virtual(lambda: _with_broker(None, lambda c: create(c, 4, "conform-x")))
    assert result is None and took == 6.0 and len(seen) == 1 and c.tokens == []
    assert _actions(c)[1:] == ["wait up to 3s for create 4 ", "wait up to 3s for create answered"]


def test_create_reads_only_its_own_request_ids_answer() -> None:
    def prepare(c: Conversation) -> None:
        obs(c).request(CreateTopicRequest(12, "other", 1))  # an earlier request, answered "exists"

    c, _, result, took = _virtual(lambda: _with_broker(_create_reply(0x01, rid=12), lambda c: create(c, 1, "mine"), prepare=prepare))
    assert c.tokens == ["create 12 err=0x01"]
    assert result is None and took == 6.0  # request 1 was never answered; 12's error is not this topic's


def test_answered_waits_for_a_token_with_the_prefix() -> None:
    async def body(c: Conversation) -> tuple[bool, bool, bool]:
        await c.send(obs(c).request(CreateTopicRequest(3, "t", 1)), split="whole")
        return await answered(c, "create 3 "), await answered(c, "create 30"), await answered(c, "produce 3 ", timeout=1.5)

    c, _, result, took = _virtual(lambda: _with_broker(_create_reply(0), body))
    assert result == (True, False, False) and took == 4.5
    assert _actions(c) == ["wait up to 3s for create 3 ", "wait up to 3s for create 30", "wait up to 1.5s for produce 3 "]


def test_contents_and_seqs_are_those_of_the_answer_to_that_request() -> None:
    async def main() -> tuple[list[bytes], list[int | None], list[bytes], list[int | None]]:
        ours, _ = trio.testing.memory_stream_pair()
        c = _conversation(ours)
        o = obs(c)
        o.request(ConsumeRequest(2, (ConsumeTopic("t", (ConsumePartition(0, 5, 4096), ConsumePartition(1, 0, 4096))),)))
        p0 = ConsumePartitionResult(0, 0, base_seq=5, hwmark=6, chunk=_bundle(b"x", b"yy"))
        p1 = ConsumePartitionResult(1, 0, base_seq=0, hwmark=0, chunk=_bundle(b"z"))
        o.feed(_consume_answer(2, "t", p0, p1))
        return contents(c, 2), seqs(c, 2), contents(c, 3), seqs(c, 3)

    assert _virtual(main) == ([b"x", b"yy", b"z"], [5, 6, 0], [], [])


def test_first_ping_waits_two_seconds_for_the_brokers_ping() -> None:
    # no Ping at all: two seconds, then the case goes on
    c, _, _, took = _virtual(lambda: _with_broker(None, first_ping))
    assert took == 2.0 and _actions(c) == ["wait up to 2s for the broker's Ping"]

    async def pinged() -> tuple[list[str], float]:
        ours, theirs = trio.testing.memory_stream_pair()
        c = _conversation(ours)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.reader)

            async def broker() -> None:
                await trio.sleep(0.5)
                await theirs.send_all(PING)

            nursery.start_soon(broker)
            t0 = trio.current_time()
            await first_ping(c)
            took = trio.current_time() - t0
            nursery.cancel_scope.cancel()
        return c.tokens, took

    assert _virtual(pinged) == (["ping"], 0.5)
