"""A trio Listener over memory streams: servers that take listeners, served in
virtual time (``autojump_clock``), where a real socket would let the clock jump
while the kernel moves bytes."""

from __future__ import annotations

import math

import trio
import trio.testing


class MemoryListener(trio.abc.Listener[trio.abc.Stream]):
    """Hands out the server ends of ``memory_stream_pair()``s; :meth:`connect` is a client's connector."""

    def __init__(self) -> None:
        self._send, self._recv = trio.open_memory_channel[trio.abc.Stream](math.inf)
        self.closed = False

    async def connect(self) -> trio.abc.Stream:
        await trio.lowlevel.checkpoint()
        if self.closed:
            raise ConnectionRefusedError("memory listener closed")
        client, server = trio.testing.memory_stream_pair()
        self._send.send_nowait(server)
        return client

    async def accept(self) -> trio.abc.Stream:
        try:
            return await self._recv.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise trio.ClosedResourceError("memory listener closed") from None

    async def aclose(self) -> None:
        self.closed = True
        self._recv.close()
        await trio.lowlevel.checkpoint()
