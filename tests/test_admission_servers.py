"""The server-wide memory budget on every server (``--server-memory``, :mod:`refwire.admission`),
in virtual time over in-memory streams (tests/test_admission.py has the pool and Lumberjack).

For TANK, Pravega, the 2017 draft and Seastar RPC, with a server budget of exactly one
connection's charge: a connection that has sent part of a frame holds it; a second one's
request waits unanswered (its reads paused: its machine has not seen the bytes), however
long, and is answered once the first gives its charge back at its own frame timeout (30 s;
TANK's idle timeout, 16 s, comes first: the real broker's ``idle_connection_ttl``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import pytest
import trio
import trio.testing

from refwire.wire import Limits

MiB = 1 << 20
BUDGET = {"max_connection_memory": 16 * MiB, "max_server_memory": 24 * MiB}

Handler = Callable[[trio.abc.Stream], Awaitable[None]]


def _tank() -> tuple[Handler, object, bytes, bytes]:
    from refwire.tank.frames import StatusRequest
    from refwire.tank.server import BrokerConfig, TankBroker

    config = BrokerConfig()
    broker = TankBroker(config=attrs.evolve(config, limits=attrs.evolve(config.limits, **BUDGET), frame_timeout=30.0))
    partial = b"\x0a" + (1000).to_bytes(4, "little") + b"\x01\x00\x00\x00"  # a Status request claiming 1000 bytes
    return broker._handle, broker.budget, partial, StatusRequest(1).encode()


def _pravega() -> tuple[Handler, object, bytes, bytes]:
    from refwire.pravega.frames import Hello
    from refwire.pravega.server import SegmentStoreServer, ServerConfig

    limits = attrs.evolve(ServerConfig().limits, **BUDGET)
    server = SegmentStoreServer(config=ServerConfig(limits=limits, frame_timeout=30.0))
    partial = Hello().encode()[:4] + (1000).to_bytes(4, "big") + b"\x00" * 8
    return server.handle_stream, server.budget, partial, Hello().encode()


def _draft() -> tuple[Handler, object, bytes, bytes]:
    from refwire.pravega.draft2017.frames import KeepAlive
    from refwire.pravega.draft2017.server import DraftConfig, DraftFrontend
    from refwire.pravega.server import SegmentStoreServer, ServerConfig

    store = SegmentStoreServer(config=ServerConfig(limits=attrs.evolve(ServerConfig().limits, **BUDGET)))
    front = DraftFrontend(store, config=DraftConfig(limits=attrs.evolve(DraftConfig().limits, **BUDGET), frame_timeout=30.0))
    partial = KeepAlive().encode()[:4] + (1000).to_bytes(4, "big") + b"\x00" * 8
    return front.handle_stream, front.budget, partial, KeepAlive().encode()


def _seastar() -> tuple[Handler, object, bytes, bytes]:
    from refwire.seastar_rpc.demo import demo_registry
    from refwire.seastar_rpc.negotiation import MAGIC, Negotiation
    from refwire.seastar_rpc.server import SeastarServer, ServerConfig

    limits = attrs.evolve(ServerConfig().limits, **BUDGET)
    server = SeastarServer(demo_registry(), config=ServerConfig(limits=limits, frame_timeout=30.0, negotiation_timeout=30.0))
    partial = MAGIC + (1000).to_bytes(4, "little") + b"\x00" * 8
    return server.handle_stream, server.budget, partial, Negotiation().encode()


SERVERS = {"tank": _tank, "pravega": _pravega, "pravega-draft-2017": _draft, "seastar-rpc": _seastar}


async def _read(stream: trio.abc.Stream, seconds: float) -> bytes:
    got = b""
    with trio.move_on_after(seconds):
        while data := await stream.receive_some(65536):
            got += data
    return got


@pytest.mark.parametrize("name", sorted(SERVERS))
async def test_a_request_waits_while_another_connection_holds_the_budget(
    name: str, autojump_clock: trio.testing.MockClock
) -> None:
    handle, budget, partial, request = SERVERS[name]()
    pool = budget.pool  # type: ignore[attr-defined]
    assert pool.capacity == 24 * MiB and budget.charge == 24 * MiB  # type: ignore[attr-defined]
    async with trio.open_nursery() as nursery:
        holder, holder_server = trio.testing.memory_stream_pair()
        nursery.start_soon(handle, holder_server)
        await holder.send_all(partial)
        await trio.testing.wait_all_tasks_blocked()
        assert pool.in_use == 24 * MiB, name

        waiter, waiter_server = trio.testing.memory_stream_pair()
        nursery.start_soon(handle, waiter_server)
        greeting = await _read(waiter, 1)  # (TANK greets with a Ping at once; the others say nothing)
        await waiter.send_all(request)
        before = await _read(waiter, 15)  # less than the holder's timeouts
        assert before == b"" and pool.waiting == 1, (name, greeting, before)
        after = await _read(waiter, 20)  # the holder's frame timeout (30 s) has passed (TANK's idle timeout, 16 s)
        assert after, name  # answered: the holder gave its charge back when it was closed
        assert pool.waiting == 0
        nursery.cancel_scope.cancel()
    assert pool.longest_wait >= 15


def test_every_server_has_a_budget() -> None:
    """(``Limits`` carries it to each: a new server on the shared limits gets it too.)"""
    assert Limits().max_server_memory == 0  # the default: half of physical memory, at least 8 charges
    assert set(SERVERS) == {"tank", "pravega", "pravega-draft-2017", "seastar-rpc"}


@pytest.mark.parametrize("protocol", ["lumberjack", "tank", "pravega", "seastar-rpc"])
def test_every_serve_command_takes_server_memory(protocol: str) -> None:
    from refwire.cli import build_parser

    args = build_parser().parse_args(["serve", protocol, "--server-memory", str(48 * MiB)])
    assert args.server_memory == 48 * MiB
    assert build_parser().parse_args(["serve", protocol]).server_memory == 0
