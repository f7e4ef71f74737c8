"""A refwire Lumberjack client sending a fixed set of events through a chaos proxy."""

from __future__ import annotations

from refwire.lumberjack.client import ClientConfig, LumberjackClient

#: The events every chaos test sends: 30 small documents numbered by ``i``.
EVENTS = [{"message": f"event {i}", "i": i} for i in range(30)]


async def send_all(host: str, port: int, *, ack_timeout: float = 0.5) -> LumberjackClient:
    """Send :data:`EVENTS` to ``host:port`` with quick retries; the client, closed, for its stats."""
    config = ClientConfig(window_size=10, ack_timeout=ack_timeout, backoff_initial=0.01, backoff_max=0.05, max_attempts=20)
    client = LumberjackClient.connect_tcp(host, port, config=config)
    async with client:
        await client.send(EVENTS)
    return client
