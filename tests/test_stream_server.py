"""The shared server loop (``refwire.drivers.StreamServer``): at most
``max_connections`` served at once, one past it closed at once and counted,
refusals logged at most once per interval."""

from __future__ import annotations

import logging

import pytest
import trio

from refwire.drivers import DEFAULT_MAX_CONNECTIONS, StreamServer

pytestmark = pytest.mark.timeout(30)


async def test_connections_past_the_limit_are_closed_at_once(caplog: pytest.LogCaptureFixture) -> None:
    served: list[trio.abc.Stream] = []

    async def handler(stream: trio.abc.Stream) -> None:
        served.append(stream)
        await stream.send_all(b"hello")
        while await stream.receive_some(100):  # until the client closes
            pass

    server = StreamServer(handler, name="test", max_connections=3, log_interval=60)
    with trio.fail_after(10), caplog.at_level(logging.WARNING):
        async with trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            await nursery.start(server.serve, listeners)
            port = listeners[0].socket.getsockname()[1]
            clients = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(3)]
            for c in clients:  # at the line: all three served
                assert await c.receive_some(5) == b"hello"
            over = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(2)]
            for c in over:  # one past it: closed without a byte
                assert await c.receive_some(5) == b""
            assert server.refused_connections == 2 and server.open_connections == 3
            refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
            assert refusals == ["test: connection refused: 3 open, the limit max_connections=3"]  # then quiet
            # a slot freed is a slot served
            await clients[0].aclose()
            with trio.fail_after(5):
                while server.open_connections > 2:
                    await trio.sleep(0.01)
            another = await trio.open_tcp_stream("127.0.0.1", port)
            assert await another.receive_some(5) == b"hello"
            await server.shutdown(grace=1.0)
            for c in [*clients[1:], *over, another]:
                await c.aclose()


def test_the_limit_is_checked() -> None:
    async def handler(stream: trio.abc.Stream) -> None: ...

    assert StreamServer(handler).max_connections == DEFAULT_MAX_CONNECTIONS == 1024
    assert StreamServer(handler, max_connections=None).max_connections is None
    with pytest.raises(ValueError, match="max_connections must be at least 1"):
        StreamServer(handler, max_connections=0)
