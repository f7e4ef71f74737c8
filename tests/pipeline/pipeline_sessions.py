"""Record real sessions between refwire's own client and server of each protocol
through the recording tap (``refwire.tap.open_tap``), over loopback.

Every server listens on 127.0.0.1 port 0 and is stopped before the function
returns; every session is bounded by ``trio.fail_after``.  Each function
returns what the application saw, so a test can check the session worked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from refwire.tap import Tap, open_tap

LOCAL = "127.0.0.1"


@asynccontextmanager
async def _tapped(serve: Callable[..., Awaitable[Any]], stop: Callable[[], Awaitable[None]], out: Path) -> AsyncIterator[tuple[Tap, str, int]]:
    """A server on port 0 and a tap in front of it: yields (tap, tap host, tap port)."""
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host=LOCAL)
        await nursery.start(serve, listeners)
        port = listeners[0].socket.getsockname()[1]
        try:
            async with open_tap((LOCAL, 0), (LOCAL, port), out) as tap:
                host, tport = tap.addresses[0].rsplit(":", 1)
                yield tap, host, int(tport)
        finally:
            with trio.fail_after(5):
                await stop()
            nursery.cancel_scope.cancel()


async def record_pravega(out: Path, *, events: int = 40) -> dict[str, Any]:
    """One connection: Hello, CreateSegment, a writer (Java-style append blocks),
    then reads of the segment in small pieces and a segment-info request."""
    from refwire.pravega.client import EventWriter, PravegaConnection, SegmentReader, WriterConfig, segment_info
    from refwire.pravega.server import SegmentStoreServer

    seg = "scope/stream/0.#epoch.0"
    server = SegmentStoreServer()
    payloads = [f"event-{i:04d}".encode() * (1 + i % 5) for i in range(events)]
    with trio.fail_after(20):
        async with _tapped(server.serve, lambda: server.shutdown(grace=1.0), out) as (tap, host, port):
            from refwire.pravega.client import create_segment

            assert await create_segment(host, port, seg) is True
            async with EventWriter(host, port, seg, config=WriterConfig(style="java")) as writer:
                await writer.write(payloads[: events // 2])
                await writer.write(payloads[events // 2 :])
            conn = await PravegaConnection.connect(host, port)
            async with trio.open_nursery() as nursery:
                await nursery.start(conn.run)
                got = [p async for _o, p in SegmentReader(conn, seg, read_size=200).events(until_tail=True)]
                info = await segment_info(conn, seg)
                await conn.aclose()
                nursery.cancel_scope.cancel()
            await tap.wait_finished(3)
    return {"read": got, "written": payloads, "write_offset": info.write_offset}


async def record_pravega_draft(out: Path, *, events: int = 40) -> dict[str, Any]:
    """Two connections of the 2017 draft dialect: a writer (append blocks of
    Events), then a reader in pieces small enough that replies come in
    PartialMessage parts (specs/pravega-draft-2017/README.md §5)."""
    import uuid

    from refwire.pravega.draft2017.client import DraftConnection, DraftReader, DraftWriter
    from refwire.pravega.draft2017.server import DraftConfig, DraftFrontend
    from refwire.pravega.server import SegmentStoreServer

    seg = "draft/stream/0.#epoch.0"
    store = SegmentStoreServer()
    store.store.create(seg)
    front = DraftFrontend(store, config=DraftConfig(reply_part_size=64))
    payloads = [f"draft-{i:04d}".encode() * (1 + i % 5) for i in range(events)]

    async def serve(listeners: Any, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as n:
            await n.start(store.sync_forever)
            await n.start(front.serve, listeners)
            task_status.started()

    with trio.fail_after(20):
        async with _tapped(serve, lambda: front.shutdown(grace=1.0), out) as (tap, host, port):
            level = await DraftWriter(host, port, seg, connection_id=uuid.uuid4()).write(payloads)
            conn = DraftConnection(await trio.open_tcp_stream(host, port))
            data = b""
            async with trio.open_nursery() as nursery:
                await nursery.start(conn.run)
                reader = DraftReader(conn, seg, read_size=150)
                while True:
                    r = await reader.read(timeout=5)
                    data += r.data
                    if r.at_tail or r.end_of_segment:
                        break
                nursery.cancel_scope.cancel()
            await conn.stream.aclose()
            await tap.wait_finished(2)
    return {"level": level, "read": data, "stored": bytes(store.store.segments[seg].data)}


async def record_tank(out: Path, *, messages: int = 30) -> dict[str, Any]:
    """One connection: CreateTopic, produces (plain and Snappy), consumes from 0 in
    small fetches (several responses per partition), a sparse produce, Status."""
    from refwire.tank.bundles import Message
    from refwire.tank.client import ClientConfig, TankClient
    from refwire.tank.server import TankBroker

    broker = TankBroker()
    got: list[bytes] = []
    with trio.fail_after(20):
        async with _tapped(broker.serve, lambda: broker.shutdown(1.0), out) as (tap, host, port):
            async with TankClient.connect_tcp(host, port, config=ClientConfig(ping_interval=None)) as c:
                assert await c.create_topic("events", 2) == 0
                for i in range(0, messages, 5):
                    r = await c.produce("events", i % 2, [Message(f"m{j}".encode() * 3, 1000 + j) for j in range(i, i + 5)], compress=i % 10 == 5)
                    assert r.error == 0
                for part in (0, 1):
                    seq = 0
                    while True:
                        pd = await c.consume("events", part, seq, fetch_size=60)
                        assert pd.chunk is not None
                        if not pd.chunk.messages:
                            break
                        got += [m.content for m in pd.chunk.messages]
                        seq = pd.chunk.next_seq
                await c.status()
            await tap.wait_finished(1)
    return {"consumed": got}


async def record_seastar(out: Path, *, calls: int = 12, compressors: tuple[str, ...] = ("LZ4",)) -> dict[str, Any]:
    """One RPC connection (LZ4 envelopes by default): echo and sum calls, a throwing
    verb, an unknown verb, and one-way notes."""
    import struct

    from refwire.seastar_rpc.client import ClientConfig, RemoteVerbError, SeastarClient, UnknownVerbError
    from refwire.seastar_rpc.demo import DEMO_VERBS, demo_registry
    from refwire.seastar_rpc.server import SeastarServer, ServerConfig

    notes: list[int] = []
    server = SeastarServer(demo_registry(notes), config=ServerConfig(streaming=False))
    replies: list[bytes] = []
    with trio.fail_after(20):
        async with _tapped(server.serve, lambda: server.shutdown(1.0), out) as (tap, host, port):
            async with SeastarClient.connect_tcp(host, port, config=ClientConfig(compressors=compressors)) as c:
                for i in range(calls):
                    replies.append(await c.call(DEMO_VERBS["echo"], f"echo {i} ".encode() * (1 + i), timeout=5))
                replies.append(await c.call(DEMO_VERBS["sum"], struct.pack("<ii", 20, 22), timeout=5))
                try:
                    await c.call(DEMO_VERBS["boom"], b"", timeout=5)
                except RemoteVerbError:
                    replies.append(b"boom")
                try:
                    await c.call(99, b"x", timeout=5)
                except UnknownVerbError:
                    replies.append(b"unknown")
                for i in range(3):
                    await c.call_one_way(DEMO_VERBS["note"], struct.pack("<i", i))
                replies.append(await c.call(DEMO_VERBS["echo"], b"last", timeout=5))  # after the notes: they were read
            await tap.wait_finished(1)
    return {"replies": replies, "notes": notes}
