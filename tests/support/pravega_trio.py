"""A Pravega segment store on trio over loopback, and a raw client speaking frames
to it (specs/pravega/README.md §5-§8): for tests of hostile inputs and limits."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from refwire.pravega.frames import AppendSetup, CommandDecoder, Hello, SetupAppend
from refwire.pravega.server import SegmentStoreServer

#: Where the servers listen (port 0: any free port).
LOCAL = "127.0.0.1"
#: The segment and the writer id the helpers here default to.
SEG = "sc/st/0.#epoch.0"
W = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


@asynccontextmanager
async def running(server: SegmentStoreServer) -> AsyncIterator[tuple[str, int]]:
    """Serve ``server`` on a free loopback port for the block: its (host, port); shut down after."""
    listeners = await trio.open_tcp_listeners(0, host=LOCAL)
    host, port = listeners[0].socket.getsockname()[:2]
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, listeners)
        try:
            yield str(host), int(port)
        finally:
            with trio.fail_after(10):
                await server.shutdown(grace=1.0)
            nursery.cancel_scope.cancel()


class RawClient:
    """A raw socket speaking frames, for hostile inputs."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.dec = CommandDecoder()

    @classmethod
    async def connect(cls, host: str, port: int) -> RawClient:
        """Open a TCP connection to ``host:port``."""
        return cls(await trio.open_tcp_stream(host, port))

    async def send(self, data: bytes) -> None:
        """Send ``data`` as is."""
        await self.stream.send_all(data)

    async def reply(self) -> Any:
        """The next command the server sends; None once it closes."""
        while True:
            cmd = self.dec.next_command()
            if cmd is not None:
                return cmd
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.dec.feed(data)

    async def closed_by_server(self) -> bool:
        """True when the server closed; any replies before the close are skipped."""
        try:
            while True:
                data = await self.stream.receive_some(65536)
                if not data:
                    return True
        except trio.BrokenResourceError:
            return True

    async def aclose(self) -> None:
        """Close the socket at once."""
        await trio.aclose_forcefully(self.stream)


async def setup_writer(raw: RawClient, writer: uuid.UUID = W, segment: str = SEG) -> AppendSetup:
    """Send Hello and a SetupAppend for ``writer`` on ``segment``; the AppendSetup the server answers."""
    await raw.send(Hello().encode() + SetupAppend(request_id=1, writer_id=writer, segment=segment).encode())
    hello = await raw.reply()
    assert isinstance(hello, Hello)
    setup = await raw.reply()
    assert isinstance(setup, AppendSetup), setup
    return setup
