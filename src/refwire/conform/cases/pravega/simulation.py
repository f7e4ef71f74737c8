"""refwire's own segment store and client as the testees of
``refwire conform pravega --sim``.
"""

from __future__ import annotations

import uuid
from typing import Any

import trio

from ....errors import ProtocolError
from .client import stream_segment


async def serve_for_simulation(listener: Any, sink: str, run_id: str = "") -> None:
    """refwire's own segment store on ``listener`` (the server cases run against it inside the simulator)."""
    from ....pravega.server import memory_server

    await memory_server(now=lambda: trio.current_time() * 1000).serve([listener])  # the simulator's clock


async def client_for_simulation(connect: Any, values: Any) -> int:
    """refwire's own Pravega client as a client-case testee (the §14 contract,
    without a controller): write ``{events}`` events to ``conform/{slug}/0.#epoch.0``
    with an :class:`~refwire.pravega.client.EventWriter`, read the segment back
    from 0 with a :class:`~refwire.pravega.client.SegmentReader`, exit 0 only
    when each came back once, in order."""
    import random

    from ....pravega.client import EventWriter, PravegaConnection, SegmentReader, WriterConfig
    from ....pravega.errors import RequestFailed, WriteFailed

    n, segment = int(values["events"]), stream_segment(values["slug"])
    rng = random.Random(int(values["seed"]))
    sent = [bytes(rng.getrandbits(8) for _ in range(16)) + i.to_bytes(4, "big") for i in range(n)]
    failures = (
        WriteFailed,
        RequestFailed,
        ProtocolError,
        OSError,
        trio.BrokenResourceError,
        trio.ClosedResourceError,
        trio.TooSlowError,
    )
    cfg = WriterConfig(max_attempts=4, backoff=(0.05, 0.2), connect_timeout=5.0, ack_timeout=5.0)
    try:
        async with EventWriter(
            "", 0, segment, writer_id=uuid.UUID(int=rng.getrandbits(128), version=4), config=cfg, connect=connect, rng=rng
        ) as w:
            for i in range(0, n, 4):
                await w.write(sent[i : i + 4])
        conn = PravegaConnection(await connect())
        got: list[bytes] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)
            reader = SegmentReader(conn, segment)
            with trio.move_on_after(10):
                async for _, payload in reader.events(until_tail=True):
                    got.append(payload)
                    if len(got) >= n:
                        break
            await conn.aclose()
            nursery.cancel_scope.cancel()
    except failures:
        return 1
    except ExceptionGroup as group:  # from the writer's and the reader's nurseries
        if group.subgroup(failures) is None:
            raise
        return 1
    return 0 if got == sent else 1
