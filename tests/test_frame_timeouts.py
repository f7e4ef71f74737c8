"""Every server closes a connection stuck inside a frame (``frame_timeout``):
a peer that begins a frame and then trickles one byte at a time -- never idle
long enough for an idle or batch timer -- is closed once the frame has been
incomplete for ``frame_timeout`` seconds, while a connection idling *between*
frames stays open.  (Pravega's own case is in test_pravega_server_limits.py.)

The servers listen on memory streams and every test runs on ``autojump_clock``
(virtual time): whether a timer fired, and when, does not depend on how busy
the machine is."""

from __future__ import annotations

import functools
import itertools
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from support.memory_listener import MemoryListener

from refwire.seastar_rpc.frames import Request

pytestmark = pytest.mark.timeout(30)

TIMEOUT = 0.6
TRICKLE = 0.15  # well under every idle timer, so only the frame timer can close


@asynccontextmanager
async def serving(
    start: Callable[[trio.Nursery, list[MemoryListener]], Awaitable[Any]],
) -> AsyncIterator[Callable[[], Awaitable[trio.abc.Stream]]]:
    """The server on a memory listener for the block: its connector."""
    async with trio.open_nursery() as nursery:
        listener = MemoryListener()
        await start(nursery, [listener])
        try:
            yield listener.connect
        finally:
            nursery.cancel_scope.cancel()


async def lumberjack(nursery: trio.Nursery, listeners: list[MemoryListener]) -> None:
    from refwire.lumberjack.server import LumberjackServer, ServerConfig

    async def handler(batch: Any) -> None:
        pass

    await nursery.start(LumberjackServer(handler, config=ServerConfig(frame_timeout=TIMEOUT)).serve, listeners)


async def tank(nursery: trio.Nursery, listeners: list[MemoryListener]) -> None:
    from refwire.tank.server import TankBroker
    from refwire.tank.service import BrokerConfig

    await nursery.start(TankBroker(config=BrokerConfig(frame_timeout=TIMEOUT)).serve, listeners)


# Each server with ``frame_timeout=TIMEOUT`` unless the keywords (its config's fields) say otherwise.


async def seastar(nursery: trio.Nursery, listeners: list[MemoryListener], **config: Any) -> None:
    from refwire.seastar_rpc.demo import demo_registry
    from refwire.seastar_rpc.server import SeastarServer, ServerConfig

    # negotiation_timeout=None: only the timer under test may close
    cfg = ServerConfig(**{"frame_timeout": TIMEOUT, "negotiation_timeout": None, **config})
    await nursery.start(SeastarServer(demo_registry(), config=cfg).serve, listeners)


async def draft(nursery: trio.Nursery, listeners: list[MemoryListener], **config: Any) -> None:
    from refwire.pravega.draft2017.server import DraftConfig, DraftFrontend
    from refwire.pravega.server import SegmentStoreServer

    cfg = DraftConfig(**{"frame_timeout": TIMEOUT, **config})
    await nursery.start(DraftFrontend(SegmentStoreServer(), config=cfg).serve, listeners)


async def pravega(nursery: trio.Nursery, listeners: list[MemoryListener], **config: Any) -> None:
    from refwire.pravega.server import SegmentStoreServer, ServerConfig

    await nursery.start(SegmentStoreServer(config=ServerConfig(**{"frame_timeout": TIMEOUT, **config})).serve, listeners)


#: protocol -> (server, bytes of whole frames a good peer sends first, the start of a frame never finished)
CASES: dict[str, tuple[Any, bytes, bytes]] = {
    "lumberjack": (lumberjack, b"", b"2W" + struct.pack(">I", 1) + b"2J" + struct.pack(">II", 1, 1000)),
    "tank": (tank, b"", bytes([0x01]) + struct.pack("<I", 1000)),  # a Produce of 1000 bytes
    "seastar-rpc": (seastar, b"", b"SSTARRPC" + struct.pack("<I", 1000)),  # a negotiation frame of 1000 bytes
    "pravega-draft-2017": (draft, struct.pack(">ii", 100, 0), struct.pack(">ii", 1, 1000)),  # KeepAlive; SetupAppend
    "pravega": (pravega, struct.pack(">ii", 100, 0), struct.pack(">ii", 20, 1000)),  # KeepAlive; CreateSegment
}


async def _closed(stream: trio.abc.Stream) -> bool:
    """Drain what the server sends; True once it closed (EOF or reset)."""
    try:
        while True:
            with trio.move_on_after(0.01):
                if not await stream.receive_some(65536):
                    return True
                continue
            return False
    except trio.BrokenResourceError:
        return True


@pytest.mark.parametrize("protocol", sorted(CASES))
async def test_a_trickled_frame_is_closed_at_the_frame_timeout(protocol: str, autojump_clock: trio.testing.MockClock) -> None:
    start, good, partial = CASES[protocol]
    async with serving(start) as connect:
        idler = await connect()
        if good:
            await idler.send_all(good)
        stream = await connect()
        await stream.send_all(good + partial)
        t0 = trio.current_time()
        closed_at = None
        with trio.move_on_after(TIMEOUT + 3.0):
            while True:
                await trio.sleep(TRICKLE)
                if await _closed(stream):
                    closed_at = trio.current_time() - t0
                    break
                try:
                    await stream.send_all(b"x")
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    closed_at = trio.current_time() - t0
                    break
        assert closed_at is not None, "the trickling connection was never closed"
        assert TIMEOUT * 0.9 <= closed_at <= TIMEOUT + 1.0, closed_at
        assert not await _closed(idler), "a connection idle between frames must stay open"
        await stream.aclose()
        await idler.aclose()


@pytest.mark.parametrize("protocol", ["pravega", "pravega-draft-2017"])
async def test_frames_that_complete_in_time_are_not_closed(protocol: str, autojump_clock: trio.testing.MockClock) -> None:
    """Bytes arriving slowly but each frame finished within the timeout: the timer
    restarts at every frame boundary (KeepAlives, one byte at a time)."""
    start, good, _ = CASES[protocol]
    async with serving(start) as connect:
        stream = await connect()
        deadline = trio.current_time() + 2.5 * TIMEOUT
        while trio.current_time() < deadline:
            for b in good:  # 8 bytes in 8 x 0.06 s = 0.48 s < TIMEOUT per frame
                await stream.send_all(bytes([b]))
                await trio.sleep(0.06)
        assert not await _closed(stream)
        await stream.aclose()


# --------------------------------------------------------------------------- --idle-timeout (off by default)

IDLE = 0.6


def _idle_servers(protocol: str, idle: float | None) -> Callable[[trio.Nursery, list[MemoryListener]], Awaitable[Any]]:
    """The server of ``protocol`` with ``idle_timeout=idle`` and no frame timeout."""
    start = {"pravega": pravega, "pravega-draft-2017": draft, "seastar-rpc": seastar}[protocol]
    return functools.partial(start, idle_timeout=idle, frame_timeout=None)


#: a whole frame each server reads and answers or ignores (Seastar: its negotiation, then echo calls)
IDLE_FRAMES = {
    "pravega": struct.pack(">ii", 100, 0),  # KeepAlive
    "pravega-draft-2017": struct.pack(">ii", 100, 0),
    "seastar-rpc": b"SSTARRPC" + struct.pack("<I", 0),  # a negotiation with no features
}


@pytest.mark.parametrize("protocol", sorted(IDLE_FRAMES))
async def test_idle_timeout_closes_a_silent_connection_and_frames_keep_one_open(
    protocol: str, autojump_clock: trio.testing.MockClock
) -> None:
    """With ``idle_timeout`` a connection that sends nothing is closed about then,
    counted from the accept; one that sends a frame every half of it stays open;
    without it (the default, as the real servers) a silent one stays open."""
    frame = IDLE_FRAMES[protocol]
    async with serving(_idle_servers(protocol, IDLE)) as connect:
        silent = await connect()
        busy = await connect()
        t0 = trio.current_time()
        await busy.send_all(frame)
        closed_at: float | None = None
        with trio.move_on_after(IDLE + 3.0):
            for i in itertools.count(1):
                await trio.sleep(IDLE / 2.5)
                await busy.send_all(frame if protocol != "seastar-rpc" else Request(2, i, b"x").encode(with_timeout=False))
                if await _closed(silent):
                    closed_at = trio.current_time() - t0
                    break
        assert closed_at is not None, "the silent connection was never closed"
        assert IDLE * 0.9 <= closed_at <= IDLE + 1.0, closed_at
        assert not await _closed(busy), "a connection that keeps sending must stay open"
        await silent.aclose()
        await busy.aclose()
    async with serving(_idle_servers(protocol, None)) as connect:
        silent = await connect()
        await trio.sleep(IDLE + 0.5)
        assert not await _closed(silent), "without idle_timeout an idle connection stays open"
        await silent.aclose()
