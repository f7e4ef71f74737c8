"""Fixtures for the conformance runner's tests: refwire's own Lumberjack server,
in-process, with a sink file its handler writes before the ack."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import trio

from refwire.drivers import parse_hostport
from refwire.lumberjack.server import LumberjackServer, ServerConfig


@asynccontextmanager
async def lumberjack_testee(
    config: ServerConfig | None = None, sink: Path | None = None, handler: Callable[..., Any] | None = None
) -> AsyncIterator[tuple[str, int]]:
    """refwire's server on 127.0.0.1:0; yields (host, port); stopped on exit."""

    async def write_sink(batch: Any, info: Any) -> None:
        if sink is not None:
            with sink.open("ab") as f:
                for ev in batch.events:
                    f.write(orjson.dumps(ev.fields()) + b"\n")

    server = LumberjackServer(handler or write_sink, config=config or ServerConfig())
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        try:
            yield parse_hostport(addresses[0])
        finally:
            nursery.cancel_scope.cancel()
