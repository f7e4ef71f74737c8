"""Seastar RPC trio client and server (specs/seastar-rpc/README.md §4-§6).

Real TCP on 127.0.0.1 port 0, each test bounded by ``trio.fail_after``; plus the
captured transcript C1-C12 (specs/seastar-rpc/README.md §8) replayed byte for byte against our
server over an in-memory stream with a virtual clock.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from streams import PassThrough

from refwire.seastar_rpc import LZ4Compressor, make_compressor
from refwire.seastar_rpc.client import (
    CallTimeout,
    ClientConfig,
    RemoteVerbError,
    RpcConnectionError,
    SeastarClient,
    UnknownVerbError,
)
from refwire.seastar_rpc.demo import demo_registry
from refwire.seastar_rpc.errors import StreamingNotSupported
from refwire.seastar_rpc.registry import VerbRegistry
from refwire.seastar_rpc.server import CallContext, SeastarServer, ServerConfig

i32 = struct.Struct("<i").pack
u32 = struct.Struct("<I").pack


@asynccontextmanager
async def running(
    config: ServerConfig | None = None, registry: VerbRegistry | None = None
) -> AsyncIterator[tuple[SeastarServer, int]]:
    server = SeastarServer(registry or demo_registry(), config=config or ServerConfig())
    async with trio.open_nursery() as nursery:
        addrs = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        port = int(addrs[0].rsplit(":", 1)[1])
        try:
            yield server, port
        finally:
            await server.shutdown(0.5)
            nursery.cancel_scope.cancel()


def client_for(port: int, **kw: object) -> SeastarClient:
    return SeastarClient.connect_tcp("127.0.0.1", port, config=ClientConfig(**kw))  # type: ignore[arg-type]


@asynccontextmanager
async def in_memory(registry: VerbRegistry | None = None) -> AsyncIterator[tuple[SeastarServer, SeastarClient]]:
    """A server and a client over memory streams: for the tests whose outcome
    turns on time, run on ``autojump_clock`` (real sockets would let the clock
    jump while the kernel moves bytes)."""
    server = SeastarServer(registry or demo_registry())
    async with trio.open_nursery() as nursery:
        server._tasks = nursery

        async def connect() -> trio.abc.Stream:
            a, b = trio.testing.memory_stream_pair()
            nursery.start_soon(server.handle_stream, b)
            return a

        async with SeastarClient(connect) as client:
            yield server, client
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("comp", [(), ("LZ4",), ("LZ4_FRAGMENTED",), ("LZ4_FRAGMENTED", "LZ4")])
async def test_calls_with_each_compressor(comp: tuple[str, ...]) -> None:
    with trio.fail_after(10):
        async with running() as (_server, port), client_for(port, compressors=comp) as client:
            assert client.compressor == (comp[0] if comp else None)
            assert await client.call(1, i32(2) + i32(3)) == i32(5)
            big = bytes(range(256)) * 800  # 200 KiB: several LZ4_FRAGMENTED chunks
            assert await client.call(2, big, timeout=5) == big
            assert await client.call(2, b"") == b""
            assert client.connection_id is not None and client.connection_id & 0xFFFF == 0


async def test_exceptions_and_unknown_verbs_keep_the_connection() -> None:
    with trio.fail_after(10):
        async with running() as (server, port), client_for(port) as client:
            with pytest.raises(RemoteVerbError) as info:
                await client.call(3)
            assert info.value.message == b"boom"
            with pytest.raises(UnknownVerbError) as uv:
                await client.call(999)
            assert uv.value.verb == 999
            assert await client.call(1, i32(1) + i32(1)) == i32(2)
            assert server.stats["unknown_verbs"] == 1


async def test_bad_arguments_get_no_reply_and_the_connection_stays(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(10):
        async with in_memory() as (server, client):
            with pytest.raises(CallTimeout):
                await client.call(1, b"\x01\x02", timeout=0.3)  # sum of a truncated int32: no reply (§1.9)
            assert await client.call(1, i32(4) + i32(4)) == i32(8)
            assert server.stats["bad_arguments"] == 1


async def test_timeouts_client_gives_up_server_drops_reply(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(10):
        async with in_memory() as (server, client):
            t0 = trio.current_time()
            with pytest.raises(CallTimeout):
                await client.call(5, i32(400), timeout=0.1)
            assert trio.current_time() - t0 == pytest.approx(0.1)  # virtual time: at its deadline, not the 0.4 s sleep's end
            assert await client.call(1, i32(1) + i32(2)) == i32(3)
            await trio.sleep(0.5)
            assert server.stats["dropped_expired"] == 1  # the late reply was never sent
            assert client.stats["stray"] == 0


async def test_replies_come_in_completion_order(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(10):
        async with in_memory() as (_server, client):
            order: list[str] = []

            async def slow() -> None:
                await client.call(5, i32(300))
                order.append("slow")

            async def fast() -> None:
                await trio.sleep(0.05)
                await client.call(1, i32(1) + i32(1))
                order.append("fast")

            async with trio.open_nursery() as n:
                n.start_soon(slow)
                n.start_soon(fast)
            assert order == ["fast", "slow"]


async def test_one_way_calls_use_msg_ids_and_get_no_reply() -> None:
    notes: list[int] = []
    with trio.fail_after(10):
        async with running(registry=demo_registry(notes)) as (_server, port), client_for(port) as client:
            mid = await client.call_one_way(4, i32(7))
            assert mid == 1
            assert await client.call(1, i32(1) + i32(1)) == i32(2)
            assert notes == [7]
            # An unknown verb sent one-way still gets UNKNOWN_VERB: a stray reply, never fatal.
            await client.call_one_way(12345)
            assert await client.call(2, b"x") == b"x"
            assert client.stats["stray"] == 1


async def _notes_reach(notes: list[int], n: int) -> None:
    with trio.move_on_after(3):
        while len(notes) < n:
            await trio.sleep(0.01)


async def test_a_one_way_call_just_before_close_reaches_the_server() -> None:
    """A one-way call returns once its bytes are written, and closing the client
    writes what is still queued first (the client used to close the socket with
    the frame still queued: nothing reached the wire)."""
    notes: list[int] = []
    with trio.fail_after(10):
        async with running(registry=demo_registry(notes)) as (_server, port):
            async with client_for(port) as client:
                await client.call_one_way(4, i32(41))
            await _notes_reach(notes, 1)
            assert notes == [41]
            async with client_for(port, compressors=("LZ4",)) as client:
                link = client._link
                assert link is not None
                link.conn.call(4, i32(42), now=trio.current_time(), one_way=True)  # queued, never flushed by us
            await _notes_reach(notes, 2)
            assert notes == [41, 42]


async def test_cli_send_one_way_really_sends() -> None:
    """``refwire send seastar-rpc ... --one-way`` printed "sent" with nothing sent."""
    from refwire.cli import build_parser

    notes: list[int] = []
    with trio.fail_after(10):
        async with running(registry=demo_registry(notes)) as (_server, port):
            args = build_parser().parse_args(
                ["send", "seastar-rpc", f"127.0.0.1:{port}", "note", "--int32", "7", "--one-way", "--repeat", "3"]
            )
            assert await args.func(args) == 0
            await _notes_reach(notes, 3)
            assert notes == [7, 7, 7]


async def test_memory_limit_user_exception() -> None:
    with trio.fail_after(10):
        async with running(ServerConfig(max_memory=1000)) as (server, port), client_for(port) as client:
            with pytest.raises(RemoteVerbError) as info:
                await client.call(2, b"z" * 5000)
            assert info.value.message == b"request size 5000 large than memory limit 1000"
            assert await client.call(2, b"ok") == b"ok"
            assert server.stats["oversized"] == 1


async def test_isolation_groups_limit_concurrency() -> None:
    active = {"now": 0, "max": 0}
    reg = VerbRegistry()

    async def work(ctx: CallContext, payload: bytes) -> bytes:
        active["now"] += 1
        active["max"] = max(active["max"], active["now"])
        await trio.sleep(0.05)
        active["now"] -= 1
        return ctx.group.encode()

    reg.register(1, work)
    cfg = ServerConfig(groups={b"batch": 1})
    with trio.fail_after(10):
        async with running(cfg, reg) as (_server, port):
            async with client_for(port, isolation=b"batch") as client:
                results: list[bytes] = []

                async def one() -> None:
                    results.append(await client.call(1))

                async with trio.open_nursery() as n:
                    for _ in range(4):
                        n.start_soon(one)
                assert results == [b"batch"] * 4 and active["max"] == 1
            async with client_for(port) as plain:
                assert await plain.call(1) == b"default"


async def test_unknown_cookie_rejected_without_reply_when_configured() -> None:
    with trio.fail_after(10):
        async with running(ServerConfig(unknown_cookie="reject")) as (server, port):
            with pytest.raises(RpcConnectionError, match="negotiation failed"):
                async with client_for(port, isolation=b"nope"):
                    pass
            assert server.stats["rejected"] == 1


async def test_streams_echo_and_close_with_parent() -> None:
    with trio.fail_after(10):
        async with running() as (server, port):
            async with client_for(port, compressors=("LZ4",)) as client:
                stream = await client.open_stream()
                assert stream.id != client.connection_id
                assert await client.call(6, i32(3) + stream.id_bytes()) == stream.id_bytes()
                for m in (b"a", b"bb", b"ccc"):
                    await stream.send(m)
                await stream.close()
                got = [m async for m in stream]
                assert got == [b"a", b"bb", b"ccc"]
                # A second stream, left open, dies with its parent.
                s2 = await client.open_stream()
                await client.call(6, s2.id_bytes())
                await s2.send(b"x")
                assert await s2.receive() == b"x"
                assert server.stats["stream_connections"] == 2
            with trio.fail_after(2):
                while server._streams:
                    await trio.sleep(0.01)


async def test_streaming_disabled_means_no_connection_id() -> None:
    with trio.fail_after(10):
        async with running(ServerConfig(streaming=False)) as (_server, port), client_for(port) as client:
            assert client.connection_id is None
            with pytest.raises(StreamingNotSupported, match="Streaming is not supported"):
                await client.open_stream()


# --------------------------------------------------------------------------- hostile peers


async def _raw(port: int, data: bytes, *, eof: bool = False) -> bytes:
    s = await trio.open_tcp_stream("127.0.0.1", port)
    async with s:
        await s.send_all(data)
        if eof:
            await s.send_eof()
        got = b""
        with trio.move_on_after(2):
            while chunk := await s.receive_some(65536):
                got += chunk
        return got


NEG_DEFAULT = bytes.fromhex("53535441525250430000000000")[:12]  # no features offered


@pytest.mark.parametrize(
    "name,data,eof",
    [
        ("bad-magic", b"SSTARRPX" + u32(0), False),
        ("truncated-negotiation", b"SSTARRPC" + u32(20) + b"\x01\x00", True),
        ("record-underflow", b"SSTARRPC" + u32(8) + u32(0) + u32(99), False),
        ("huge-negotiation-len", b"SSTARRPC" + u32(0xFFFFFFFF), False),
        ("unknown-stream-parent", b"SSTARRPC" + u32(16) + u32(3) + u32(8) + struct.pack("<Q", 0x99990000), False),
    ],
)
async def test_hostile_negotiation_closes_without_reply(name: str, data: bytes, eof: bool) -> None:
    with trio.fail_after(10):
        async with running() as (_server, port):
            assert await _raw(port, data, eof=eof) == b""
            async with client_for(port) as client:  # the server still serves others
                assert await client.call(2, b"alive") == b"alive"


async def test_hostile_frames_close_only_that_connection() -> None:
    lz4_offer = b"SSTARRPC" + u32(11) + u32(0) + u32(3) + b"LZ4"
    cases = [
        lz4_offer + bytes.fromhex("050000000000000000"),  # D8e: declared size 0
        lz4_offer + u32(8) + u32(0xFFFFFFF0) + b"\x10abc",  # bomb
        lz4_offer + u32(10) + u32(40) + b"\xff" * 6,  # garbage block
        NEG_DEFAULT + struct.pack("<QqI", 1, 1, 0xFFFFFFFF - 1) + b"x" * 100,  # over the frame limit: closed
    ]
    with trio.fail_after(15):
        async with running(ServerConfig(max_memory=1 << 20)) as (server, port):
            async with client_for(port) as bystander:
                for data in cases[:3]:
                    got = await _raw(port, data)
                    assert got.startswith(b"SSTARRPC")  # the negotiation reply, then only a close
                    reply_len = 12 + struct.unpack_from("<I", got, 8)[0]
                    assert got[reply_len:] == b""
                assert await bystander.call(2, b"still here") == b"still here"
                assert server.stats["protocol_errors"] == 3
                # A request claiming ~4 GiB is over the frame limit: closed, no answer (§6).
                got = await _raw(port, cases[3])
                assert b"large than memory limit" not in got and server.stats["protocol_errors"] == 4
                # One over the memory limit but not the frame limit: its data is skipped as it comes, and
                # Seastar's USER text comes back only once the whole body has been read (§3).
                size = 2 << 20
                s = await trio.open_tcp_stream("127.0.0.1", port)
                async with s:
                    await s.send_all(NEG_DEFAULT + struct.pack("<QqI", 1, 1, size) + b"x" * (size // 2))
                    early = b""
                    with trio.move_on_after(0.5):
                        while b"large than memory limit" not in early:
                            early += await s.receive_some(65536)
                    assert b"large than memory limit" not in early  # not before the body ended
                    await s.send_all(b"x" * (size // 2))
                    got = early
                    while b"large than memory limit" not in got:
                        got += await s.receive_some(65536)
                    assert b"request size 2097152 large than memory limit 1048576" in got


# --------------------------------------------------------------------------- captured transcript


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


C1 = h("53 53 54 41 52 52 50 43 1b 00 00 00 01 00 00 00 00 00 00 00 04 00 00 00 03 00 00 00 73 67 31 05 00 00 00 00 00 00 00")
C2 = h(
    "53 53 54 41 52 52 50 43 2b 00 00 00 01 00 00 00 00 00 00 00 02 00 00 00 08 00 00 00 00 00 05 00 00 00 00 00 04 00 00 00 03 00 00 00 73 67 31 05 00 00 00 00 00 00 00"
)
C3 = h("00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 08 00 00 00 02 00 00 00 03 00 00 00")
C4 = h("01 00 00 00 00 00 00 00 04 00 00 00 00 00 00 00 05 00 00 00")
C6Q = h("00 00 00 00 00 00 00 00 e7 03 00 00 00 00 00 00 04 00 00 00 00 00 00 00 00 00 00 00")
C6R = h("fc ff ff ff ff ff ff ff 10 00 00 00 ff ff ff ff 01 00 00 00 08 00 00 00 e7 03 00 00 00 00 00 00")
C9 = h(
    "53 53 54 41 52 52 50 43 23 00 00 00 03 00 00 00 08 00 00 00 00 00 05 00 00 00 00 00 04 00 00 00 03 00 00 00 73 67 31 05 00 00 00 00 00 00 00"
)
C10 = h(
    "53 53 54 41 52 52 50 43 23 00 00 00 02 00 00 00 08 00 00 00 00 00 06 00 00 00 00 00 04 00 00 00 03 00 00 00 73 67 31 05 00 00 00 00 00 00 00"
)
C11Q = h(
    "00 00 00 00 00 00 00 00 06 00 00 00 00 00 00 00 09 00 00 00 00 00 00 00 0c 00 00 00 03 00 00 00 00 00 06 00 00 00 00 00"
)
C11R = h("09 00 00 00 00 00 00 00 08 00 00 00 00 00 00 00 00 00 06 00 00 00 00 00")
C12 = h("05 00 00 00 01 00 00 00 61 06 00 00 00 02 00 00 00 62 62 07 00 00 00 03 00 00 00 63 63 63 ff ff ff ff")


async def _expect(stream: trio.abc.Stream, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = await stream.receive_some(n - len(got))
        assert chunk, f"closed after {got.hex()}"
        got += chunk
    return got


async def test_captured_transcript_byte_for_byte(autojump_clock: trio.testing.MockClock) -> None:
    """Captures C1-C12 (specs/seastar-rpc/README.md §8): a real Seastar client's bytes in, a real server's bytes out."""
    server = SeastarServer(demo_registry(), config=ServerConfig(groups={b"sg1": None}))
    server._counter = 4  # the capture's connection was the server's fifth (id 0x50000)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            server._tasks = nursery
            a, b = trio.testing.memory_stream_pair()
            nursery.start_soon(server.handle_stream, b)
            await a.send_all(C1)
            assert await _expect(a, len(C2)) == C2
            await a.send_all(C3)
            assert await _expect(a, len(C4)) == C4
            await a.send_all(C6Q)
            assert await _expect(a, len(C6R)) == C6R
            sa, sb = trio.testing.memory_stream_pair()
            nursery.start_soon(server.handle_stream, sb)
            await sa.send_all(C9)
            assert await _expect(sa, len(C10)) == C10
            await a.send_all(C11Q)
            assert await _expect(a, len(C11R)) == C11R
            await sa.send_all(C12)
            assert await _expect(sa, len(C12)) == C12  # echoed unchanged, EOS included
            assert await sa.receive_some(10) == b""  # closed after EOS went both ways
            await a.aclose()
            nursery.cancel_scope.cancel()


async def test_lz4_capture_z3_z4(autojump_clock: trio.testing.MockClock) -> None:
    """Z1-Z4: the negotiation choice and the compressed request/reply bytes."""
    z1 = h("53 53 54 41 52 52 50 43 1a 00 00 00 00 00 00 00 12 00 00 00 4c 5a 34 2c 4c 5a 34 5f 46 52 41 47 4d 45 4e 54 45 44")
    z2 = h("53 53 54 41 52 52 50 43 1b 00 00 00 00 00 00 00 03 00 00 00 4c 5a 34 02 00 00 00 08 00 00 00 00 00 07 00 00 00 00 00")
    z3 = h("19 00 00 00 1c 00 00 00 22 01 00 01 00 04 08 00 c0 08 00 00 00 02 00 00 00 03 00 00 00")
    z4 = h("12 00 00 00 10 00 00 00 22 01 00 01 00 80 04 00 00 00 05 00 00 00")
    server = SeastarServer(demo_registry())
    server._counter = 6
    assert make_compressor("LZ4").name == LZ4Compressor().name
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            a, b = trio.testing.memory_stream_pair()
            nursery.start_soon(server.handle_stream, b)
            await a.send_all(z1)
            assert await _expect(a, len(z2)) == z2
            await a.send_all(z3)
            assert await _expect(a, len(z4)) == z4
            await a.aclose()


class _FailingWrites(PassThrough):
    """A stream whose writes fail (BrokenResourceError) once ``fail`` is set."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        super().__init__(inner)
        self.fail = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.fail:
            await trio.lowlevel.checkpoint()
            raise trio.BrokenResourceError("write failed (test)")
        await self.inner.send_all(data)


@asynccontextmanager
async def _client_with_failing_writes() -> AsyncIterator[tuple[SeastarClient, _FailingWrites]]:
    server = SeastarServer(demo_registry())
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            server._tasks = nursery
            a, b = trio.testing.memory_stream_pair()
            nursery.start_soon(server.handle_stream, b)
            wrapped = _FailingWrites(a)

            async def connect() -> trio.abc.Stream:
                return wrapped

            async with SeastarClient(connect) as client:
                yield client, wrapped
            nursery.cancel_scope.cancel()


async def test_a_failed_write_fails_the_calls_in_flight_and_later_ones_cleanly() -> None:
    """send_failed: the call whose bytes could not be written completes with a
    connection error, and so does every later call (never a machine error)."""
    async with _client_with_failing_writes() as (client, wrapped):
        assert await client.call(2, b"ok") == b"ok"
        wrapped.fail = True
        with pytest.raises(RpcConnectionError, match="write failed"):
            await client.call(2, b"lost", timeout=5)
        with pytest.raises(RpcConnectionError):
            await client.call(2, b"later")
        with pytest.raises(RpcConnectionError):
            await client.call_one_way(4, i32(1))


async def test_a_one_way_call_whose_write_fails_raises() -> None:
    async with _client_with_failing_writes() as (client, wrapped):
        wrapped.fail = True
        with pytest.raises(RpcConnectionError, match="not sent"):
            await client.call_one_way(4, i32(1))


async def test_server_closes_a_connection_that_never_negotiates(autojump_clock: trio.testing.MockClock) -> None:
    server = SeastarServer(demo_registry(), config=ServerConfig(negotiation_timeout=30.0))
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            server._tasks = nursery
            a, b = trio.testing.memory_stream_pair()
            nursery.start_soon(server.handle_stream, b)
            t0 = trio.current_time()
            await a.send_all(b"SSTARRPC")  # never the rest
            assert await a.receive_some(100) == b""  # closed without a reply ...
            assert trio.current_time() - t0 == pytest.approx(30.0)  # ... at the machine's deadline
            assert ("negotiating", "timeout", "closed") in server.transitions_seen
            nursery.cancel_scope.cancel()


async def test_client_gives_up_on_a_silent_server(autojump_clock: trio.testing.MockClock) -> None:
    a, b = trio.testing.memory_stream_pair()

    async def connect() -> trio.abc.Stream:
        return a

    with trio.fail_after(100):
        t0 = trio.current_time()
        with pytest.raises(RpcConnectionError, match=r"no negotiation reply from the server in 5 s \(is it a Seastar RPC server\?\)"):
            async with SeastarClient(connect, config=ClientConfig(negotiation_timeout=5.0)):
                pass
        assert trio.current_time() - t0 == pytest.approx(5.0)
        assert (await b.receive_some(100)).startswith(b"SSTARRPC")  # the offer went out


def test_the_demo_one_way_data_matches_the_registry() -> None:
    from refwire.seastar_rpc.demo import DEMO_ONE_WAY, DEMO_VERBS

    reg = demo_registry()
    assert DEMO_ONE_WAY == {v for v in DEMO_VERBS.values() if (verb := reg.get(v)) is not None and verb.one_way} == {4}


async def test_a_stream_nobody_reads_holds_at_most_stream_queue_bytes() -> None:
    """A client streams 40 messages of 1 MiB to a stream whose handler does not
    read yet: the server holds at most ``stream_queue_bytes`` of them (then it stops
    reading, so TCP pushes back on the client), and once the handler reads, every
    message arrives, in order.  Without the byte bound 50 messages of the frame
    limit could make one stream hold 3.2 GiB."""
    held: list[Any] = []

    async def park(ctx: CallContext, payload: bytes) -> bytes:
        held.append(ctx.stream(struct.unpack_from("<Q", payload, 0)[0]))
        return b""

    registry = demo_registry()
    registry.register(60, park, name="park")
    limit = 4 << 20
    msgs = [bytes([i]) * (1 << 20) for i in range(40)]
    with trio.fail_after(30):
        async with running(ServerConfig(stream_queue_bytes=limit), registry) as (_server, port):
            async with client_for(port) as client:
                stream = await client.open_stream()
                await client.call(60, stream.id_bytes())
                (s,) = held

                async def send_all() -> None:
                    for m in msgs:
                        await stream.send(m)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(send_all)
                    await trio.sleep(1.0)  # the client writes as fast as the server lets it
                    assert 0 < s.queued_bytes <= limit, s.queued_bytes
                    got = [await s.receive() for _ in msgs]
                assert got == msgs
