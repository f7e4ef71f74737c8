"""refwire's own server and client as the testees of ``refwire conform lumberjack --sim``."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
import trio


async def serve_for_simulation(listener: Any, sink: str, run_id: str = "", *, ack_delay: float = 0.0, config: Any = None) -> None:
    """refwire's own server on ``listener``, writing each event to ``sink``
    before the ack (the server cases run against it inside the simulator;
    ``run_id`` is not needed: the server holds nothing before a run);
    ``ack_delay``: the application then holds each batch that many seconds
    (``--sim --holds-batches``); ``config``: a ``ServerConfig`` other than the default."""
    from ....lumberjack.server import LumberjackServer, ServerConfig

    async def write(batch: Any, info: Any) -> None:
        with Path(sink).open("ab") as f:
            for ev in batch.events:
                f.write(orjson.dumps(ev.fields()) + b"\n")
        if ack_delay > 0:
            await trio.sleep(ack_delay)

    await LumberjackServer(write, config=config or ServerConfig()).serve([listener])


def holding_server_for_simulation(hold: float) -> Callable[[Any, str, str], Awaitable[None]]:
    """:func:`serve_for_simulation` whose application holds each batch ``hold`` seconds."""
    return functools.partial(serve_for_simulation, ack_delay=hold)


async def client_for_simulation(connect: Callable[[], Awaitable[trio.abc.Stream]], values: Mapping[str, str]) -> int:
    """refwire's own client as a client-case testee (the §9 contract) for
    ``--client --sim``: v2, windows of 3, at most 5 attempts per window, the
    backoff jitter seeded from ``{seed}``; 0 once every one of ``{events}``
    events is acked, 1 when it gave up."""
    import random

    from ....lumberjack.client import ClientConfig, LumberjackClient, SendFailed

    n = int(values["events"])
    cfg = ClientConfig(window_size=3, ack_timeout=30.0, max_attempts=5, backoff_initial=0.05, backoff_max=0.5)
    client = LumberjackClient(connect, config=cfg, rng=random.Random(int(values["seed"])))
    try:
        async with client:
            await client.send([{"message": f"conform event {i}", "n": i} for i in range(n)])
    except SendFailed:
        return 1
    return 0
