"""The ``pravega_store`` fixture the pytest plugin gives: refwire's segment store
and a controller pointing at it, for a user's own tests, stopped at teardown."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from refwire.pravega.client import EventWriter, create_segment, parse_events
from refwire.pravega.controller import segment_name

pytestmark = pytest.mark.timeout(30)


def test_pravega_store_fixture_takes_events(pravega_store: Any) -> None:
    seg = segment_name("sc", "st", 0, 0)

    async def main() -> None:
        assert await create_segment(pravega_store.host, pravega_store.port, seg)
        async with EventWriter(pravega_store.host, pravega_store.port, seg) as w:
            await w.write([b"one", b"two"])

    trio.run(main)
    evs, _ = parse_events(bytes(pravega_store.server.store.segments[seg].data))
    assert [p for _, p in evs] == [b"one", b"two"]
    assert pravega_store.controller.startswith("tcp://127.0.0.1:")


def test_pravega_store_controller_answers_grpc(pravega_store: Any) -> None:
    """The controller speaks HTTP/2 on its port (a real client's first step)."""
    host, port = pravega_store.controller.removeprefix("tcp://").split(":")

    async def main() -> bytes:
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000"))
            with trio.fail_after(5):
                return bytes(await stream.receive_some(9))

    head = trio.run(main)
    assert head[3] == 0x04  # the server's SETTINGS frame
