"""The bounds of specs/pravega/README.md §11 that the server and reader add to
Java's behaviour: parked reads per connection, SetupAppends per connection,
the largest stored event a reader accepts, and the logged block-end quirk."""

from __future__ import annotations

import logging
import uuid

import pytest
import trio
import trio.testing
from support.memory_listener import MemoryListener
from support.pravega_trio import SEG, RawClient, running, setup_writer

from refwire.errors import ProtocolError, RemoteLimitExceeded
from refwire.pravega.client import parse_events
from refwire.pravega.connection import ServerConnection
from refwire.pravega.frames import (
    NULL_VALUE,
    AppendBlock,
    AppendBlockEnd,
    AppendSetup,
    ReadSegment,
    SegmentRead,
    SetupAppend,
    encode_event,
)
from refwire.pravega.server import SegmentStoreServer, ServerConfig
from refwire.sansio import NEED_DATA


async def test_too_many_parked_reads_answer_the_oldest_empty_at_once() -> None:
    server = SegmentStoreServer(config=ServerConfig(max_parked_reads=3, tail_wait=None))
    server.store.create(SEG)
    async with running(server) as (host, port):
        raw = await RawClient.connect(host, port)
        with trio.fail_after(10):
            for rid in range(1, 5):  # four reads at the tail of an empty segment
                await raw.send(ReadSegment(segment=SEG, offset=0, suggested_length=100, request_id=rid).encode())
            reply = await raw.reply()
        assert isinstance(reply, SegmentRead)
        assert (reply.request_id, reply.at_tail, reply.data) == (1, True, b"")  # the oldest, answered empty
        with trio.move_on_after(0.3):
            assert await raw.reply() is None, "only the oldest may be answered"
        await raw.aclose()


def test_setup_appends_per_connection_are_bounded() -> None:
    conn = ServerConnection()
    data = b"".join(
        SetupAppend(request_id=i, writer_id=uuid.UUID(int=i + 1), segment=SEG).encode() for i in range(conn.max_writers + 1)
    )
    conn.receive_data(data, now=0.0)
    for _ in range(conn.max_writers):
        conn.next_event()
    with pytest.raises(RemoteLimitExceeded) as info:
        conn.next_event()
    assert conn.max_writers == 2000 and info.value.field == "writer_id"


def test_a_reader_refuses_an_event_header_above_the_event_limit() -> None:
    good = encode_event(b"ok")
    huge = (0).to_bytes(4, "big") + (8 * 1024 * 1024 + 1).to_bytes(4, "big")
    assert parse_events(good)[0] == [(0, b"ok")]
    with pytest.raises(ProtocolError) as info:
        parse_events(good + huge)
    assert (info.value.field, info.value.offset) == ("length", len(good) + 4)


async def test_ignored_block_end_data_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    server = SegmentStoreServer()
    server.store.create(SEG)
    w = uuid.UUID(int=99)
    async with running(server) as (host, port):
        raw = await RawClient.connect(host, port)
        with trio.fail_after(10), caplog.at_level(logging.WARNING, logger="refwire.pravega.server"):
            setup = await setup_writer(raw, w)
            assert setup == AppendSetup(request_id=1, segment=SEG, writer_id=w, last_event_number=NULL_VALUE)
            ev = encode_event(b"x")
            # A block with no remainder after sizeOfWholeEvents: Java drops the end's data (spec §5.3).
            await raw.send(
                AppendBlock(writer_id=w, data=ev).encode()
                + AppendBlockEnd(
                    writer_id=w, size_of_whole_events=len(ev), data=b"dropped", num_events=1, last_event_number=1, request_id=1
                ).encode()
            )
            await raw.reply()
        await raw.aclose()
    assert bytes(server.store.segments[SEG].data) == ev
    assert any("7 bytes of AppendBlockEnd data ignored" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- frame timeout (spec §11)


def _hello() -> bytes:
    from refwire.pravega.frames import Hello, encode_command

    return encode_command(Hello(high_version=17, low_version=5))


def test_a_frame_begun_and_not_finished_fails_at_the_frame_timeout() -> None:
    conn = ServerConnection(frame_timeout=30.0)
    conn.receive_data(_hello(), now=0.0)
    assert conn.next_event() is not None and conn.next_event() is NEED_DATA
    assert conn.next_deadline() is None  # idle between frames: no deadline (the real server has none)
    conn.receive_data(_hello()[:6], now=100.0)  # 6 bytes of a header
    assert conn.next_event() is NEED_DATA and conn.next_deadline() == 130.0
    conn.receive_data(_hello()[6:9], now=120.0)  # the same frame trickling: the deadline does not move
    assert conn.next_event() is NEED_DATA and conn.next_deadline() == 130.0
    conn.handle_timer(now=129.9)
    assert conn.next_event() is NEED_DATA
    conn.handle_timer(now=130.0)
    with pytest.raises(RemoteLimitExceeded, match=r"still incomplete \(9 bytes of it received\): the limit frame_timeout=30s") as info:
        conn.next_event()
    assert (info.value.field, info.value.offset, info.value.frame) == ("(timeout)", len(_hello()), "Hello")
    assert conn.must_close and conn.next_deadline() is None


def test_a_new_frame_restarts_the_clock_and_none_turns_it_off() -> None:
    conn = ServerConnection(frame_timeout=10.0)
    conn.receive_data(_hello()[:5], now=0.0)
    assert conn.next_event() is NEED_DATA and conn.next_deadline() == 10.0
    conn.receive_data(_hello()[5:] + _hello()[:3], now=8.0)  # the first completes, a second begins
    assert conn.next_event() is not None and conn.next_event() is NEED_DATA
    assert conn.next_deadline() == 18.0
    off = ServerConnection(frame_timeout=None)
    off.receive_data(_hello()[:5], now=0.0)
    assert off.next_event() is NEED_DATA and off.next_deadline() is None


async def test_the_store_closes_a_connection_stuck_inside_a_frame(autojump_clock: trio.testing.MockClock) -> None:
    """Over memory streams in virtual time: the frame timeout fires at its time
    however busy the machine, and the idle connection is watched for as long."""
    server = SegmentStoreServer(config=ServerConfig(frame_timeout=0.3))
    listener = MemoryListener()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve, [listener])
            idle = await listener.connect()  # never sends: stays open
            stuck = await listener.connect()
            await stuck.send_all(_hello()[:6])
            t0 = trio.current_time()
            assert await stuck.receive_some(100) == b""  # closed by the store
            assert 0.2 < trio.current_time() - t0 < 3
            with trio.move_on_after(0.5):
                assert await idle.receive_some(100) != b"", "an idle connection must stay open"
            await idle.send_all(_hello())
            assert await idle.receive_some(100)  # still served: the Hello reply
            assert server.stats["protocol_errors"] == 1
            await idle.aclose()
            await stuck.aclose()
            await server.shutdown(grace=1.0)
            nursery.cancel_scope.cancel()


async def test_a_client_that_asks_but_never_reads_cannot_grow_the_store() -> None:
    """300 reads of 2 MiB each, none of the replies read: the store stops
    reading once Pump.max_unwritten (16 MiB) is owed, instead of queueing 600 MB."""
    import gc
    import socket
    import tracemalloc

    from refwire.pravega.client import EventWriter, create_segment
    from refwire.pravega.frames import Hello, ReadSegment, encode_command

    server = SegmentStoreServer()
    with trio.fail_after(30):
        async with running(server) as (host, port):
            await create_segment(host, port, SEG)
            async with EventWriter(host, port, SEG) as writer:
                await writer.write([b"x" * 1_000_000 for _ in range(3)])
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                hostile = await trio.open_tcp_stream(host, port)
                hostile.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                await hostile.send_all(encode_command(Hello(high_version=17, low_version=5)))
                with trio.move_on_after(3):  # the store stops reading: our writes block
                    for i in range(300):
                        read = ReadSegment(segment=SEG, offset=0, suggested_length=2_000_000, delegation_token="", request_id=i + 1)
                        await hostile.send_all(encode_command(read))
                await trio.sleep(1.0)  # the store answers what it read
                gc.collect()
                held = tracemalloc.get_traced_memory()[0] - base
            finally:
                tracemalloc.stop()
            assert held < 40 << 20, f"the store holds {held >> 20} MiB for a client that does not read"
            await hostile.aclose()


async def test_a_held_append_block_costs_its_own_size_and_no_more() -> None:
    """A hostile writer sends an AppendBlock of 4 MiB and never its AppendBlockEnd
    (§5.3: the store holds one block per connection until its end comes): the
    store holds about the block, once, per connection -- three such connections
    about three blocks -- measured with tracemalloc, and nothing is stored."""
    import gc
    import tracemalloc

    from refwire.pravega.frames import AppendBlock, CreateSegment, Hello, SetupAppend, encode_command

    server = SegmentStoreServer()
    block = 4 << 20
    with trio.fail_after(30):
        async with running(server) as (host, port):
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                streams = []
                for k in range(3):
                    wid = uuid.UUID(int=k + 1)
                    s = await trio.open_tcp_stream(host, port)
                    head = encode_command(Hello(high_version=17, low_version=5))
                    head += encode_command(CreateSegment(request_id=1, segment=f"{SEG}-{k}"))
                    head += encode_command(SetupAppend(request_id=2, writer_id=wid, segment=f"{SEG}-{k}"))
                    await s.send_all(head)
                    await trio.sleep(0.2)
                    await s.send_all(encode_command(AppendBlock(writer_id=wid, data=b"e" * block)))
                    streams.append(s)
                await trio.sleep(1.0)
                gc.collect()
                held = tracemalloc.get_traced_memory()[0] - base
            finally:
                tracemalloc.stop()
            for s in streams:
                await s.aclose()
    print(f"three held 4 MiB blocks: {held / (1 << 20):.1f} MiB")
    assert held < 3 * 2.5 * block, f"{held >> 20} MiB held for three 4 MiB blocks"
    assert all(server.store.segments[f"{SEG}-{k}"].length == 0 for k in range(3))


# --------------------------------------------------------------------------- the connection's memory budget (§11)


def _budget_machine(budget: int, *, fast: bool) -> ServerConnection:
    """A server machine with ``max_connection_memory=budget``, a writer set up on SEG."""
    import attrs

    from refwire.pravega.frames import DEFAULT_LIMITS, Hello

    conn = ServerConnection(attrs.evolve(DEFAULT_LIMITS, max_connection_memory=budget), fast=fast)
    conn.receive_data(Hello(high_version=17, low_version=5).encode() + SetupAppend(request_id=1, writer_id=_BW, segment=SEG).encode(), now=0)
    while conn.next_event() is not NEED_DATA:
        pass
    conn.send(AppendSetup(request_id=1, segment=SEG, writer_id=_BW, last_event_number=NULL_VALUE), now=0)
    conn.data_to_send()
    return conn


_BW = uuid.UUID(int=77)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
def test_a_16_mib_budget_takes_a_frame_at_its_eighth_and_refuses_one_byte_more(fast: bool) -> None:
    """§11: a frame may take an eighth of ``max_connection_memory``: an AppendBlock frame of
    exactly 2 MiB is held, one of 2 MiB + 1 is refused at its length field (before its body
    arrives), the error naming the limit and the share; both paths alike."""
    budget, share = 16 << 20, 2 << 20
    conn = _budget_machine(budget, fast=fast)
    assert conn.limits.max_frame_size == share
    at_line = AppendBlock(writer_id=_BW, data=encode_event(b"e" * (share - 24 - 8))).encode()
    assert len(at_line) == share
    conn.receive_data(at_line, now=0)
    assert conn.next_event() is NEED_DATA and conn.state.value == "in-block"

    conn = _budget_machine(budget, fast=fast)
    start = conn._decoder.offset
    past = AppendBlock(writer_id=_BW, data=encode_event(b"e" * (share - 24 - 7))).encode()
    conn.receive_data(past[:8], now=0)  # the header alone: refused before the payload
    with pytest.raises(ProtocolError) as info:
        conn.next_event()
    assert isinstance(info.value, RemoteLimitExceeded)
    assert "AppendBlock frame of 2097153 bytes exceeds the 2097152 bytes the limit max_connection_memory=16777216 allows a frame" in str(info.value)
    assert info.value.field == "length" and info.value.offset == start + 4


def test_the_default_budget_leaves_the_protocols_frame_limit_in_force() -> None:
    """At 256 MiB the eighth (32 MiB) is above the 16 MiB frame: limits and errors are as before."""
    conn = _budget_machine(256 << 20, fast=False)
    assert conn.limits.max_frame_size == 0x00FFFFFF
    assert conn._decoder.frame_limit == "max_frame_size"


def test_queued_bytes_counts_replies_waiting_behind_a_reserved_slot() -> None:
    """§11: what the connection owes includes replies queued behind one waiting for durability."""
    conn = _budget_machine(16 << 20, fast=False)
    assert conn.queued_bytes == 0
    slot = conn.reserve(now=0)
    read = SegmentRead(segment=SEG, offset=0, at_tail=False, end_of_segment=False, data=b"d" * 1000, request_id=5)
    conn.send(read, now=0)
    assert conn.queued_bytes == len(read.encode())
    assert conn.data_to_send() == b""
    conn.send(AppendSetup(request_id=9, segment=SEG, writer_id=_BW, last_event_number=NULL_VALUE), now=0, slot=slot)
    assert conn.queued_bytes > len(read.encode())
    conn.data_to_send()
    assert conn.queued_bytes == 0


async def test_a_16_mib_budget_answers_parked_reads_past_the_eighth_empty_at_once() -> None:
    """§11: parked reads may take an eighth of the budget (2 MiB at 16 MiB), each costing its
    strings and about 4 KiB: reads with 60,000-character tokens park about 16 at a time, each
    one past answers the oldest empty at once."""
    import attrs

    from refwire.pravega.budget import parked_cost
    from refwire.pravega.frames import DEFAULT_LIMITS, CreateSegment, Hello

    limits = attrs.evolve(DEFAULT_LIMITS, max_connection_memory=16 << 20)
    server = SegmentStoreServer(config=ServerConfig(limits=limits, tail_wait=None))
    token = "t" * 60_000
    fits = (2 << 20) // parked_cost(SEG, token)
    sent = fits + 5
    with trio.fail_after(30):
        async with running(server) as (host, port):
            c = await RawClient.connect(host, port)
            await c.send(Hello(high_version=17, low_version=5).encode() + CreateSegment(request_id=1, segment=SEG).encode())
            assert type(await c.reply()).__name__ == "Hello"
            assert type(await c.reply()).__name__ == "SegmentCreated"
            reads = [ReadSegment(segment=SEG, offset=0, suggested_length=100, delegation_token=token, request_id=10 + i) for i in range(sent)]
            await c.send(b"".join(r.encode() for r in reads))
            answered = []
            for _ in range(sent - fits):
                r = await c.reply()
                assert isinstance(r, SegmentRead) and r.at_tail and r.data == b""
                answered.append(r.request_id)
            with trio.move_on_after(0.5):
                extra = await c.reply()
                pytest.fail(f"a read within the parked share was answered: {extra!r}")
            await c.aclose()
    assert sorted(answered) == list(range(10, 10 + sent - fits))
