"""refwire chaos with Pravega (current and draft) and TANK: frames are observed
with each protocol's own codec (specs/pravega/README.md §1, §4;
specs/tank/README.md §2, §3), so rules name commands and their fields, and a
fault between refwire's client and server has the effect the protocol says.

The runs are in virtual time (``autojump_clock``) over memory streams: a writer's
``ack_timeout`` and a TANK client's ``request_timeout`` then expire on the frames
the faults hit and never on a slow machine's late answer, so the decisions (and a
replay of them) are the same run after run.  The proxy's TCP path is tested in
test_chaos_lumberjack.py and test_chaos_tls.py."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from support.memory_listener import MemoryListener

from refwire.chaos import ChaosProxy, ScheduleError, open_chaos, rules_from
from refwire.chaos.adapter import FIELDS, observer_for
from refwire.chaos.proxy import UpstreamConnector
from refwire.pravega.client import EventWriter, PravegaConnection, WriterConfig, parse_events
from refwire.pravega.frames import CreateSegment, SegmentCreated
from refwire.pravega.server import SegmentStoreServer
from refwire.tank.errors import ConnectionLost

pytestmark = pytest.mark.timeout(60)


@asynccontextmanager
async def proxied(
    protocol: str,
    serve: Any,
    rules: Sequence[dict[str, Any]] = (),
    seed: int = 3,
    *,
    check: bool = False,
    replay: Any = None,
    capture: Any = None,
    record: bool = True,
) -> AsyncIterator[tuple[ChaosProxy, UpstreamConnector]]:
    """``serve`` (a server's ``serve(listeners)``) on a memory listener behind a proxy
    on another; yields the proxy and the connector a client reaches it with."""
    upstream, front = MemoryListener(), MemoryListener()
    async with trio.open_nursery() as nursery:
        await nursery.start(serve, [upstream])
        async with open_chaos(
            protocol,
            schedule=rules_from(rules, protocol, seed),
            record=io.StringIO() if record else None,
            check=check,
            replay=replay,
            capture=capture,
            listeners=[front],
            connect=upstream.connect,
        ) as proxy:
            yield proxy, front.connect
        nursery.cancel_scope.cancel()


async def create_segment(connect: UpstreamConnector, segment: str) -> bool:
    """:func:`refwire.pravega.client.create_segment` over ``connect``: True if it was created."""
    conn = PravegaConnection(await connect())
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        reply = await conn.request(CreateSegment(request_id=conn.new_request_id(), segment=segment))
        nursery.cancel_scope.cancel()
    return isinstance(reply, SegmentCreated)


def writer(connect: UpstreamConnector, segment: str, config: WriterConfig) -> EventWriter:
    """An :class:`EventWriter` of ``segment`` that connects with ``connect``."""
    return EventWriter("memory", 0, segment, config=config, connect=connect)


def test_pravega_and_tank_fields_come_from_their_codecs() -> None:
    assert FIELDS["pravega"]["DataAppended"] == {"type": (0, 4), "length": (4, 4), "writer_id": (8, 16), "event_number": (24, 8)}
    assert FIELDS["pravega"]["SetupAppend"]["request_id"] == (8, 8)
    assert FIELDS["tank"]["Produce"] == {"msg_id": (0, 1), "length": (1, 4), "request_id": (7, 4)}
    assert "BeginAppendBlock" in FIELDS["pravega-draft-2017"]
    with pytest.raises(ScheduleError, match="unknown field 'nope'"):
        rules_from([{"type": "pv:DataAppended", "where": {"nope": 1}, "action": "drop"}], "pravega", 1)


def test_an_observer_splits_any_way_the_same_and_passes_what_it_cannot_decode() -> None:
    from refwire.pravega.frames import DataAppended, Hello

    stream = (
        Hello().encode()
        + DataAppended(writer_id=uuid.UUID(int=1), event_number=5, previous_event_number=4, request_id=9).encode()
    )
    for cut in range(len(stream) + 1):
        o = observer_for("pravega", 1 << 24)
        got = o.feed(stream[:cut]) + o.feed(stream[cut:])
        assert [(f.type, f.data) for f in got] == [("Hello", stream[:16]), ("DataAppended", stream[16:])]
        assert got[1].fields["event_number"] == 5 and o.held() == 0
    o = observer_for("pravega", 1 << 24)
    garbage = b"\x00\x00\x00\x63" + b"\x00" * 12
    [bad] = o.feed(garbage)
    assert bad.type == "?" and bad.data == garbage and "unknown type" in bad.fields["error"]
    assert [f.type for f in o.feed(stream)] == ["?"]  # the rest of the direction is relayed as bytes


async def test_a_dropped_dataappended_makes_the_writer_resend_and_the_store_keeps_each_event_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = SegmentStoreServer()
    seg = "sc/st/0.#epoch.0"
    rules = [
        {"name": "drop-ack-3", "direction": "s2c", "type": "pv:DataAppended", "where": {"event_number": 3}, "action": "drop"}
    ]
    with trio.fail_after(30):
        async with proxied("pravega", server.serve, rules) as (proxy, connect):
            assert await create_segment(connect, seg)
            cfg = WriterConfig(ack_timeout=0.5, backoff=(0.01, 0.05))
            async with writer(connect, seg, cfg) as w:
                for i in range(6):
                    await w.write([b"event %d" % i])
            reconnects = w.stats["reconnects"]
    assert [a["rule"] for a in proxy.decisions] == ["drop-ack-3"]
    assert reconnects >= 1  # the ack never came: it set up again, and AppendSetup said 3 was stored
    events, _ = parse_events(bytes(server.store.segments[seg].data))
    assert [p for _, p in events] == [b"event %d" % i for i in range(6)]


async def test_a_duplicated_tank_produce_is_stored_twice(autojump_clock: trio.testing.MockClock) -> None:
    """The proxy duplicates the client's first Produce: TANK has no request dedup,
    so the broker stores the bundle twice (a fault the proxy put there, seen on consume)."""
    from refwire.tank.bundles import Message
    from refwire.tank.client import ClientConfig, TankClient
    from refwire.tank.server import TankBroker

    broker = TankBroker()
    rules = [
        {"name": "dup", "direction": "c2s", "type": "tk:Produce", "nth": 2, "action": "duplicate"}
    ]  # frame 2 of the direction (after CreateTopic)
    with trio.fail_after(30):
        async with proxied("tank", broker.serve, rules) as (proxy, connect):
            async with TankClient(connect, config=ClientConfig(ping_interval=None)) as c:
                assert await c.create_topic("t", 1) == 0
                assert (await c.produce("t", 0, [Message(b"once", 1)])).error == 0
                await trio.sleep(0.2)  # the broker answers the copy too; the client drops the stray reply
                got = await c.consume("t", 0, 0)
    assert [m.content for m in got.messages] == [b"once", b"once"]
    assert [(a["rule"], a["type"]) for a in proxy.decisions] == [("dup", "Produce")]


async def test_a_tank_request_id_rewritten_little_endian(autojump_clock: trio.testing.MockClock) -> None:
    """A rewrite encodes the value the protocol's way (TANK: little-endian): the
    broker answers request 7, which the client never sent, so it is not matched."""
    from refwire.tank.client import ClientConfig, TankClient
    from refwire.tank.server import TankBroker

    broker = TankBroker()
    rules = [
        {"name": "rid", "direction": "c2s", "type": "tk:CreateTopic", "field": "request_id", "value": 7, "action": "rewrite"}
    ]
    seen: list[int] = []
    with trio.fail_after(30):
        async with proxied("tank", broker.serve, rules) as (proxy, connect):
            original = proxy._apply

            def spy(rule: Any, frame: Any, writes: Any, end: Any) -> Any:
                out = original(rule, frame, writes, end)
                data = b"".join(w for w, _ in out[0])
                seen.append(int.from_bytes(data[5:9], "little"))  # CreateTopic: reqId first (§3)
                return out

            proxy._apply = spy  # type: ignore[method-assign]
            async with TankClient(connect, config=ClientConfig(ping_interval=None, request_timeout=0.5)) as c:
                with pytest.raises(
                    (trio.TooSlowError, ConnectionLost)
                ):  # refwire's client refuses a reply to a request it never sent
                    await c.create_topic("t", 1)
    assert seen == [7] and "t" in broker.storage.topics  # created, but answered under another id


async def _check_run(rules: Sequence[dict[str, Any]]) -> tuple[ChaosProxy, SegmentStoreServer]:
    server = SegmentStoreServer()
    seg = "sc/st/0.#epoch.0"
    with trio.fail_after(30):
        async with proxied("pravega", server.serve, rules, 5, check=True) as (proxy, connect):
            assert await create_segment(connect, seg)
            cfg = WriterConfig(ack_timeout=0.5, backoff=(0.01, 0.05), max_attempts=3)
            try:
                async with writer(connect, seg, cfg) as w:
                    for i in range(4):
                        await w.write([b"event %d" % i])
            except Exception:  # a rewritten ack fails the writer: what --check says is the point
                pass
    return proxy, server


async def test_check_reports_an_ack_the_proxy_raised_and_nothing_on_clean_traffic(autojump_clock: trio.testing.MockClock) -> None:
    clean, _ = await _check_run([])
    assert clean.checker is not None and clean.checker.finish() == []
    rules = [
        {
            "name": "ack-9",
            "direction": "s2c",
            "type": "pv:DataAppended",
            "where": {"event_number": 2},
            "field": "event_number",
            "value": 9,
            "action": "rewrite",
        }
    ]
    faulted, _ = await _check_run(rules)
    assert faulted.checker is not None
    found = [(v.check, v.detail) for v in faulted.checker.finish()]
    assert found and found[0][0] == "ack-above-sent" and "event 9 acked" in found[0][1] and "injected fault" in found[0][1]


async def test_capture_writes_what_was_sent_and_what_was_delivered(tmp_path: Any, autojump_clock: trio.testing.MockClock) -> None:
    """``--capture DIR``: DIR/sent holds each peer's bytes as sent, DIR/delivered as
    received after the faults; both are capture directories refwire decodes, and
    the dropped DataAppended is in the one and not the other."""
    from refwire.pipeline.capture import decode_capture

    server = SegmentStoreServer()
    seg = "sc/st/0.#epoch.0"
    rules = [
        {"name": "drop-ack-2", "direction": "s2c", "type": "pv:DataAppended", "where": {"event_number": 2}, "action": "drop"}
    ]
    with trio.fail_after(30):
        async with proxied("pravega", server.serve, rules, 2, capture=tmp_path / "cap", record=False) as (_, connect):
            assert await create_segment(connect, seg)
            async with writer(connect, seg, WriterConfig(ack_timeout=0.5, backoff=(0.01, 0.05))) as w:
                for i in range(3):
                    await w.write([b"e%d" % i])

    def acks(sub: str) -> list[int]:
        rows = decode_capture("pravega", tmp_path / "cap" / sub)
        return [json.loads(r["fields_json"])["event_number"] for r in rows if r["type"] == "DataAppended"]

    sent, delivered = acks("sent"), acks("delivered")
    assert 2 in sent and 2 not in delivered and len(sent) == len(delivered) + 1
    assert sorted((tmp_path / "cap" / "sent").glob("*.json")) and sorted((tmp_path / "cap" / "delivered").glob("*.json"))


async def _read_all(c: Any, topic: str) -> list[bytes]:
    """A consumer's read of partition 0 from its start to the high-water mark (§5)."""
    got: list[bytes] = []
    seq = 0
    while True:
        try:
            pd = await c.consume(topic, 0, seq)
        except ConnectionLost:
            continue  # a fault ended the connection: ask again for the same seq on a new one
        assert pd.chunk is not None
        got += [m.content for m in pd.chunk.messages]
        if pd.chunk.drained or not pd.chunk.messages:
            return got
        seq = pd.chunk.next_seq


async def _produce_then_read(
    broker: Any, rules: Sequence[dict[str, Any]] = (), *, replay: Any = None
) -> tuple[ChaosProxy, list[bytes]]:
    """Five produces, each retried on a new connection until acked (at-least-once),
    then a read of the partition from its start on another connection."""
    from refwire.tank.bundles import Message
    from refwire.tank.client import ClientConfig, TankClient

    cfg = ClientConfig(ping_interval=None, request_timeout=0.5)
    with trio.fail_after(30):
        async with proxied("tank", broker.serve, rules, 3, check=True, replay=replay) as (proxy, connect):
            async with TankClient(connect, config=cfg) as producer:
                assert await producer.create_topic("t", 1) == 0
                for i in range(5):
                    for _ in range(5):
                        try:
                            result = await producer.produce("t", 0, [Message(b"m%d" % i, i, key=b"k" if i % 2 else None)])
                        except ConnectionLost:
                            continue  # the client reconnects at the next request
                        assert result.error == 0
                        break
            async with TankClient(connect, config=cfg) as consumer:
                got = await _read_all(consumer, "t")
    return proxy, got


async def test_tank_check_is_clean_when_every_acked_message_is_read_back(autojump_clock: trio.testing.MockClock) -> None:
    from refwire.tank.server import TankBroker

    rules = [
        {"name": "split", "direction": "c2s", "type": "tk:Produce", "field": "request_id", "gap": 0.05, "action": "split"},
        {"name": "slow", "direction": "s2c", "type": "tk:Consume", "seconds": 0.05, "action": "delay"},
    ]
    proxy, got = await _produce_then_read(TankBroker(), rules)
    assert got == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert {a["rule"] for a in proxy.decisions} == {"split", "slow"}
    assert proxy.finish() == []


async def test_tank_check_names_an_acked_message_the_broker_never_served(autojump_clock: trio.testing.MockClock) -> None:
    """A broker that acknowledges the third produce without storing it (a planted
    bug): the consumer's read from seq 0 to the high-water mark lacks it."""
    from refwire.tank.server import TankBroker
    from refwire.tank.storage import MemoryLog, MemoryStorage

    class Forgetful(MemoryLog):
        appended = 0

        def append(self, entry: Any) -> None:
            Forgetful.appended += 1
            if Forgetful.appended != 3:
                super().append(entry)

    class Storage(MemoryStorage):
        def _new_log(self, topic: str, partition: int) -> MemoryLog:
            return Forgetful()

    proxy, got = await _produce_then_read(TankBroker(Storage()))
    assert got == [b"m0", b"m1", b"m3", b"m4"]
    [v] = proxy.finish()
    assert v.check == "acked-not-visible" and v.direction == "s2c"
    # s2c frames of the producer: Ping on accept, CreateTopic, then the three acks
    assert "t/0: a message acked to the producer (conn 1, frame 4)" in v.detail and "the broker never served it" in v.detail
    assert v.conn == 2 and v.frame == 1  # the consumer's connection, at the answer that reached the high-water mark


def test_tank_check_tells_a_hidden_message_from_a_broker_bug() -> None:
    """The broker's answer held the message, the client's did not: an injected fault (§5)."""
    from refwire.chaos.adapters.tank import TankChecker
    from refwire.chaos.observe import Observed
    from refwire.tank.bundles import Message, encode_bundle, encode_entry
    from refwire.tank.frames import ConsumePartition, ConsumeRequest, ConsumeTopic, ProducePartition, ProduceRequest, ProduceTopic
    from refwire.tank.responses import ConsumePartitionResult, ConsumeResponse, ConsumeTopicResult, ProduceResponse, ProduceResult

    def frame(name: str, data: bytes) -> Observed:
        return Observed(name, data)

    c = TankChecker()
    produce = ProduceRequest(1, (ProduceTopic("t", (ProducePartition(0, encode_bundle([Message(b"x")])),)),)).encode()
    ack = ProduceResponse(1, (ProduceResult("t", 0, 0),)).encode()
    for d, f in (("c2s", frame("Produce", produce)), ("s2c", frame("Produce", ack))):
        c.sent(0, d, 0, f)
        c.received(0, d, 0, f)
    ask = ConsumeRequest(2, (ConsumeTopic("t", (ConsumePartition(0, 0, 1 << 20),)),), 0, 0, b"").encode()
    whole = encode_entry(encode_bundle([Message(b"x")]))
    served = ConsumeResponse(2, (ConsumeTopicResult("t", (ConsumePartitionResult(0, 0, 1, 1, whole),)),)).encode()
    hidden = ConsumeResponse(2, (ConsumeTopicResult("t", (ConsumePartitionResult(0, 0, 1, 1, b""),)),)).encode()
    c.sent(1, "c2s", 0, frame("Consume", ask))
    c.received(1, "c2s", 0, frame("Consume", ask))
    c.sent(1, "s2c", 0, frame("Consume", served))
    assert c.violations == []
    c.received(1, "s2c", 0, frame("Consume", hidden))
    [v] = c.finish()
    assert v.check == "acked-not-visible" and "an injected fault hid it" in v.detail and "read from seq 0" in v.detail


async def test_tank_check_tells_a_rewritten_request_id_from_a_broker_bug(autojump_clock: trio.testing.MockClock) -> None:
    from refwire.tank.client import ClientConfig, TankClient
    from refwire.tank.server import TankBroker

    rules = [{"name": "rid", "direction": "c2s", "type": "tk:Consume", "field": "request_id", "value": 7, "action": "rewrite"}]
    with trio.fail_after(30):
        async with proxied("tank", TankBroker().serve, rules, check=True) as (proxy, connect):
            async with TankClient(connect, config=ClientConfig(ping_interval=None, request_timeout=0.5)) as c:
                assert await c.create_topic("t", 1) == 0
                with pytest.raises((trio.TooSlowError, ConnectionLost)):
                    await c.consume("t", 0, 0)
    [v] = proxy.finish()
    assert v.check == "reply-without-request" and "request 7" in v.detail and "changed the request" in v.detail


async def test_tank_faults_keep_every_acked_message_and_replay_takes_the_same_decisions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A dropped produce ack (the producer times out and resends), a reset after
    a produce and a corrupted consume length (the consumer asks again): every acked message is
    read back, --check finds nothing the faults did not excuse, and the record
    replayed against a fresh broker takes the same decisions at the same frames."""
    from refwire.chaos.proxy import replay_plan
    from refwire.tank.server import TankBroker

    rules = [
        {"name": "drop-ack", "direction": "s2c", "type": "tk:Produce", "nth": 3, "count": 1, "action": "drop"},
        # positions count every frame of a connection's direction from 1: the resending
        # connection's fourth is the produce of m3; the consumer's second, its first answer
        {"name": "rst", "direction": "c2s", "type": "tk:Produce", "nth": 4, "count": 1, "action": "reset"},
        {
            "name": "bad-len",
            "direction": "s2c",
            "type": "tk:Consume",
            "nth": 2,
            "count": 1,
            "field": "length",
            "action": "corrupt",
        },
    ]
    proxy, got = await _produce_then_read(TankBroker(), rules)
    assert set(got) == {b"m%d" % i for i in range(5)}  # resent ones may be there twice (TANK has no dedup)
    assert proxy.finish() == []
    first = [(d["conn"], d["dir"], d["frame"], d["rule"], d["action"]) for d in proxy.decisions]
    assert {r for _, _, _, r, _ in first} == {"drop-ack", "rst", "bad-len"}
    again, got2 = await _produce_then_read(TankBroker(), replay=replay_plan([json.dumps(d) for d in proxy.decisions]))
    assert [(d["conn"], d["dir"], d["frame"], d["rule"], d["action"]) for d in again.decisions] == first
    assert got2 == got
