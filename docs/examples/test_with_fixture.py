"""The ``lumberjack_server`` fixture of refwire's pytest plugin (``pip install
refwire`` enables it): refwire's server, started for one test and stopped after.

Run it with ``pytest test_with_fixture.py``; run as a script, it runs pytest on
itself.
"""

import sys

import pytest
import trio

from refwire.lumberjack.client import LumberjackClient
from refwire.lumberjack.server import ServerConfig


def ship(lines, host, port):
    """The code under test: ships lines to a Lumberjack server."""

    async def main():
        async with LumberjackClient.connect_tcp(host, port) as client:
            await client.send([{"message": line} for line in lines])

    trio.run(main)


@pytest.fixture
def lumberjack_server_config():
    """Optional: how the fixture's server behaves (go-lumber's count acks here)."""
    return ServerConfig(ack_mode="count")


def test_ship(lumberjack_server):
    ship(["hello", "world"], lumberjack_server.host, lumberjack_server.port)
    assert [event["message"] for event in lumberjack_server.events] == ["hello", "world"]
    assert len(lumberjack_server.batches) == 1
    # .sink is a JSON-lines file of the same events, each written before its batch was acked
    assert len(lumberjack_server.sink.read_text().splitlines()) == 2


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
