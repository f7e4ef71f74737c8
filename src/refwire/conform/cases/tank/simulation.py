"""refwire's own broker and client as the testees of ``refwire conform tank --sim``."""

from __future__ import annotations

from typing import Any

import trio

from ....errors import ProtocolError
from ....tank.bundles import Message


async def serve_for_simulation(listener: Any, sink: str) -> None:
    """refwire's own broker on ``listener`` (the server cases run against it inside the simulator)."""
    from ....tank.server import TankBroker

    await TankBroker().serve([listener])


async def client_for_simulation(connect: Any, values: Any) -> int:
    """refwire's own TANK client as a client-case testee (the §12 contract): produce
    ``{events}`` messages to topic ``{slug}``, consume them back from seq 1 with a
    64-byte fetch size (so partial chunks and retries happen), exit 0 only when each
    came back once, in order."""
    import random

    from ....tank.client import ClientConfig, TankClient

    n, topic = int(values["events"]), values["slug"]
    rng = random.Random(int(values["seed"]))
    sent = [bytes(rng.getrandbits(8) for _ in range(20)) + i.to_bytes(4, "big") for i in range(n)]
    client = TankClient(connect, config=ClientConfig(ping_interval=None, fetch_size=64))
    got: list[bytes] = []
    try:
        async with client:
            for i in range(0, n, 4):
                r = await client.produce(topic, 0, [Message(m, ts=1) for m in sent[i : i + 4]], compress=False)
                if r.error:
                    return 1
            seq = 1
            for _ in range(4 * n + 8):
                if len(got) >= n:
                    break
                pd = await client.consume(topic, 0, seq)
                for m in pd.messages:
                    got.append(m.content)  # type: ignore[attr-defined]
                if pd.chunk is not None:
                    seq = pd.chunk.next_seq
    except (ProtocolError, OSError, trio.BrokenResourceError, trio.ClosedResourceError):
        return 1
    return 0 if got == sent else 1
