"""refwire's own broker and client as the testees of ``refwire conform tank --sim``."""

from __future__ import annotations

from typing import Any

import trio

from ....errors import ProtocolError
from ....tank.bundles import Message


async def serve_for_simulation(listener: Any, sink: str, run_id: str = "") -> None:
    """refwire's own broker on ``listener`` (the server cases run against it inside the simulator)."""
    from ....tank.server import TankBroker

    await TankBroker().serve([listener])


async def client_for_simulation(connect: Any, values: Any) -> int:
    """refwire's own TANK client as a client-case testee (the §12 contract): produce
    ``{events}`` messages to topic ``{slug}`` in bundles of 1, 1 and 6 messages in turn,
    consume them back from seq 1 with a 64-byte fetch size, exit 0 only when each came
    back once, in order.  A chunk from a 1-message bundle (36 bytes) holds the next bundle
    too, so tk.C1.2 cuts it; a 6-message bundle is larger than the fetch size alone, so
    tk.C1.3 cuts inside it and the client asks again, larger."""
    import itertools
    import random

    from ....tank.client import ClientConfig, TankClient

    n, topic = int(values["events"]), values["slug"]
    rng = random.Random(int(values["seed"]))
    sent = [bytes(rng.getrandbits(8) for _ in range(20)) + i.to_bytes(4, "big") for i in range(n)]
    client = TankClient(connect, config=ClientConfig(ping_interval=None, fetch_size=64))
    got: list[bytes] = []
    try:
        async with client:
            i, sizes = 0, itertools.cycle((1, 1, 6))
            while i < n:
                size = next(sizes)
                r = await client.produce(topic, 0, [Message(m, ts=1) for m in sent[i : i + size]], compress=False)
                if r.error:
                    return 1
                i += size
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
