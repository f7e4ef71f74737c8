"""What one hostile connection can make a server hold, measured (tracemalloc):
Pravega reads parked at the tail (specs/pravega/README.md §6), TANK produce
requests and long polls (specs/tank/README.md §6).  Each is bounded by a
configured limit; these tests show the bound holds and what it costs."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest
import trio
from support.pravega_trio import SEG, RawClient, running

from refwire.pravega.frames import CreateSegment, Hello, ReadSegment, SegmentRead, encode_command
from refwire.pravega.server import SegmentStoreServer, ServerConfig
from refwire.tank.frames import DEFAULT_MAX_REQUEST, PRODUCE, ConsumePartition, ConsumeRequest, ConsumeTopic, broker_limits
from refwire.tank.server import TankBroker
from refwire.tank.service import BrokerConfig

pytestmark = pytest.mark.timeout(90)


@contextmanager
def traced() -> Iterator[Callable[[], tuple[int, int]]]:
    """``measure()`` gives (bytes held now, peak) since the block began, after a GC."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]

    def measure() -> tuple[int, int]:
        gc.collect()
        now, peak = tracemalloc.get_traced_memory()
        return now - base, peak - base

    try:
        yield measure
    finally:
        tracemalloc.stop()


# --------------------------------------------------------------------------- Pravega


async def test_pravega_parked_reads_are_capped_per_connection_and_cost_a_few_kib_each() -> None:
    """1,500 reads at the tail of an empty segment on one connection: 1,000
    (``max_parked_reads``) stay parked, each of the 500 past the cap answers the
    oldest at once with an empty read (§6); what the store holds is about the
    cap times a few KiB, not one per read ever sent."""
    cap, sent = 1000, 1500
    server = SegmentStoreServer(config=ServerConfig(tail_wait=None, max_parked_reads=cap))
    with trio.fail_after(60):
        async with running(server) as (host, port):
            c = await RawClient.connect(host, port)
            await c.send(encode_command(Hello(high_version=17, low_version=5)))
            await c.send(encode_command(CreateSegment(request_id=1, segment=SEG)))
            assert type(await c.reply()).__name__ == "Hello"
            assert type(await c.reply()).__name__ == "SegmentCreated"
            with traced() as measure:
                reads = b"".join(
                    encode_command(ReadSegment(segment=SEG, offset=0, suggested_length=1 << 20, request_id=10 + i))
                    for i in range(sent)
                )
                await c.send(reads)
                answered = []
                with trio.fail_after(10):  # no cap: nothing is answered
                    for _ in range(sent - cap):
                        r = await c.reply()
                        assert isinstance(r, SegmentRead) and r.at_tail and r.data == b""
                        answered.append(r.request_id)
                with trio.move_on_after(0.5):
                    extra = await c.reply()
                    pytest.fail(f"a read past those over the cap was answered: {extra!r}")
                held, _ = measure()
            await c.stream.aclose()
    assert sorted(answered) == list(range(10, 10 + sent - cap))  # the oldest (their replies leave as their tasks run)
    per_read = held / cap
    print(f"{cap} parked reads: {held / 1024:.0f} KiB held, {per_read:.0f} B each")
    assert per_read < 8 * 1024, f"{per_read:.0f} B per parked read"


# --------------------------------------------------------------------------- TANK


@asynccontextmanager
async def tank(config: BrokerConfig | None = None) -> AsyncIterator[tuple[TankBroker, str, int]]:
    broker = TankBroker(config=config or BrokerConfig())
    broker.storage.create_topic("t", 1)
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(broker.serve, listeners)
        try:
            yield broker, "127.0.0.1", listeners[0].socket.getsockname()[1]
        finally:
            with trio.fail_after(10):
                await broker.shutdown(grace=0.5)
            nursery.cancel_scope.cancel()


async def _closed(stream: trio.SocketStream) -> bool:
    """Whether the broker closed the connection (its Ping on accept is skipped)."""
    try:
        while await stream.receive_some(65536):
            pass
    except trio.BrokenResourceError:
        pass
    return True


@pytest.mark.parametrize("over", [0, 1])
async def test_tank_a_request_over_max_request_size_is_refused_from_its_header(over: int) -> None:
    """The broker reads requests up to ``--max-request-size`` (64 MiB and one
    request head by default, §6): a header one byte past it closes the connection
    with no byte of the body sent; one exactly at it keeps being read."""
    limit = 1 << 20
    async with tank(BrokerConfig(limits=broker_limits(limit))) as (_, host, port):
        s = await trio.open_tcp_stream(host, port)
        await s.send_all(bytes([PRODUCE]) + (limit - 5 + over).to_bytes(4, "little"))
        if over:
            with trio.fail_after(5):
                assert await _closed(s)
        else:
            with trio.move_on_after(0.5) as waited:
                await _closed(s)
            assert waited.cancelled_caught  # still open: the body may come
        await s.aclose()
    assert broker_limits().max_frame_size == DEFAULT_MAX_REQUEST == (64 << 20) + (64 << 10)


async def test_tank_a_produce_trickled_towards_the_limit_costs_what_was_sent() -> None:
    """Three connections each announce a produce of the whole limit and send 8 MiB
    of it: the broker holds about what it received (receive buffers grow with the
    bytes, not with the announced length), and nothing is stored."""
    part = 8 << 20
    async with tank() as (broker, host, port):
        with traced() as measure:
            streams = []
            for _ in range(3):
                s = await trio.open_tcp_stream(host, port)
                await s.send_all(bytes([PRODUCE]) + (DEFAULT_MAX_REQUEST - 5).to_bytes(4, "little"))
                await s.send_all(b"\x00" * part)
                streams.append(s)
            await trio.sleep(0.5)
            held, peak = measure()
        for s in streams:
            await s.aclose()
        stored = len(broker.storage.topics["t"][0].entries)
    print(
        f"three produces of 8 MiB announced as {DEFAULT_MAX_REQUEST >> 20} MiB: {held / (1 << 20):.1f} MiB held, peak {peak / (1 << 20):.1f}"
    )
    assert held < 3 * 2 * part, f"{held >> 20} MiB held for 3 x 8 MiB received"
    assert stored == 0


async def test_tank_a_whole_produce_costs_a_small_multiple_of_its_size() -> None:
    """One 16 MiB produce, stored: the peak while it is read, decoded, validated
    and stored stays under four times its size (measured: 3.1 -- the receive
    buffer, the frame's payload, the bundle and the stored entry, one of which is
    the data kept), never a copy per message."""
    from refwire.tank.bundles import Message, encode_bundle
    from refwire.tank.frames import ProducePartition, ProduceRequest, ProduceTopic

    size = 16 << 20
    bundle = encode_bundle([Message(b"x" * (1 << 20)) for _ in range(size >> 20)], compress=False)
    request = ProduceRequest(7, (ProduceTopic("t", (ProducePartition(0, bundle),)),)).encode()
    del bundle
    async with tank() as (broker, host, port):
        s = await trio.open_tcp_stream(host, port)
        with traced() as measure:
            await s.send_all(request)
            got = b""
            with trio.fail_after(20):
                while b"\x01\x05\x00\x00\x00\x07\x00\x00\x00\x00" not in got:  # Produce reply: reqId 7, err 0 (§3)
                    got += await s.receive_some(65536)
            _, peak = measure()
        await s.aclose()
    print(f"a {size >> 20} MiB produce: peak {peak / (1 << 20):.1f} MiB")
    assert peak < 4 * size, f"peak {peak >> 20} MiB for a {size >> 20} MiB produce"
    assert broker.service.stats["produced_messages"] == size >> 20


async def test_tank_long_polls_are_capped_per_connection_and_cost_a_few_kib_each() -> None:
    """1,200 long polls on one connection with ``max_long_polls`` 1,000: 200 of
    them are answered at once (the oldest, as their timeout would), and what the
    broker holds for the 1,000 parked is a few KiB each."""
    from refwire.tank.responses import ConsumeResponse, decode_response

    cap, sent = 1000, 1200
    async with tank(BrokerConfig(max_long_polls=cap, idle_timeout=None)) as (_, host, port):
        s = await trio.open_tcp_stream(host, port)
        with traced() as measure:
            polls = b"".join(
                ConsumeRequest(i + 1, (ConsumeTopic("t", (ConsumePartition(0, 2**64 - 1, 4096),)),), 60_000, 1, b"").encode()
                for i in range(sent)
            )
            await s.send_all(polls)
            buf = b""
            answered: list[int] = []
            with trio.fail_after(20):
                while len(answered) < sent - cap:
                    buf += await s.receive_some(65536)
                    while len(buf) >= 5 and len(buf) >= 5 + int.from_bytes(buf[1:5], "little"):
                        n = 5 + int.from_bytes(buf[1:5], "little")
                        if buf[0] == 0x02:
                            r = decode_response(buf[0], buf[5:n])
                            assert isinstance(r, ConsumeResponse)
                            answered.append(r.request_id)
                        buf = buf[n:]
            with trio.move_on_after(0.5):
                more = await s.receive_some(65536)
                pytest.fail(f"more than the polls over the cap were answered: {more[:20]!r}")
            held, _ = measure()
        await s.aclose()
    assert answered == list(range(1, sent - cap + 1))
    per_poll = held / cap
    print(f"{cap} parked long polls: {held / 1024:.0f} KiB held, {per_poll:.0f} B each")
    assert per_poll < 8 * 1024, f"{per_poll:.0f} B per parked long poll"
