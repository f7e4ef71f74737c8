"""Stream wrappers the trio tests share: a pass-through ``trio.abc.Stream``
whose subclasses override ``send_all`` to cut or fail writes."""

from __future__ import annotations

import trio


class PassThrough(trio.abc.Stream):
    """Every call goes to ``inner``; subclasses change what they need."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()
