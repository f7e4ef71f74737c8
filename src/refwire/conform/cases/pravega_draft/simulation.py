"""refwire's own draft store and client as the testees of
``refwire conform pravega-draft-2017 --sim``.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from ....errors import ProtocolError
from ....pravega.draft2017.errors import DraftWriteFailed
from ._common import _parse_events, events_of
from .segments import server_segments


async def serve_for_simulation(listener: Any, sink: str, run_id: str = "") -> None:
    """refwire's own store on ``listener``, draft dialect, with the case segments
    of run ``run_id`` created (§13): the server cases run against it inside the simulator."""
    from ....pravega.draft2017.server import DraftFrontend
    from ....pravega.server import SegmentStoreServer

    server = SegmentStoreServer()
    for name in server_segments(run_id):
        server.store.create(name)
    front = DraftFrontend(server)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.sync_forever)
        await front.serve([listener])


async def client_for_simulation(connect: Callable[[], Awaitable[trio.abc.Stream]], values: Mapping[str, str]) -> int:
    """refwire's own draft client as a client-case testee (the §13 contract):
    append ``{events}`` distinct events to segment ``{slug}`` with a
    :class:`~refwire.pravega.draft2017.client.DraftWriter` (4 events per write),
    read the segment back from 0 with a
    :class:`~refwire.pravega.draft2017.client.DraftReader`, exit 0 only when it
    holds each event once, in order."""
    from ....pravega.draft2017.client import DraftConnection, DraftReader, DraftWriter, DraftWriterConfig

    n, segment = int(values["events"]), values["slug"]
    rng = random.Random(int(values["seed"]))
    sent = [rng.randbytes(20) + i.to_bytes(4, "big") for i in range(n)]
    writer = DraftWriter(
        "",
        0,
        segment,
        connection_id=uuid.UUID(int=rng.getrandbits(128)),
        connect=connect,
        config=DraftWriterConfig(max_attempts=5, ack_timeout=10.0),
        rng=rng,
    )
    want = events_of(sent)
    try:
        for i in range(0, n, 4):
            await writer.write(sent[i : i + 4])
        conn = DraftConnection(await connect())
        got = b""
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)
            reader = DraftReader(conn, segment, read_size=100)
            while len(got) < len(want):
                r = await reader.read(timeout=10.0)
                got += r.data
                if not r.data:
                    break
            nursery.cancel_scope.cancel()
    except (DraftWriteFailed, ProtocolError, OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
        return 1
    return 0 if _parse_events(got) == sent else 1
