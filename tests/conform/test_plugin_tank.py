"""The ``tank_broker`` fixture the pytest plugin gives: refwire's broker for a
user's own tests, stopped at teardown."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from refwire.tank.bundles import Message
from refwire.tank.client import TankClient

pytestmark = pytest.mark.timeout(30)


def test_tank_broker_fixture_takes_a_produce(tank_broker: Any) -> None:
    async def main() -> int:
        async with TankClient.connect_tcp(tank_broker.host, tank_broker.port) as client:
            assert await client.create_topic("events", 1) == 0
            await client.produce("events", 0, [Message(b"hello", 1)])
            pd = await client.consume("events", 0, 0)
            return len(pd.messages)

    assert trio.run(main) == 1
    assert tank_broker.server.storage.topics["events"][0].last_assigned == 1
