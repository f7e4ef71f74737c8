"""One direction of one relayed connection (:class:`Link`), its reader, and how
the proxy resets a connection (an RST, not a FIN)."""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Callable
from typing import Any

import attrs
import trio

from .toxics import ToxicState

__all__ = ["OTHER", "WAKE", "Link", "Wake", "read_chunks", "reset_stream"]


class Wake:
    """Put in a direction's chunk queue when its observer can decode bytes it holds
    without new ones (a Seastar request that waited for the server's negotiation
    reply, specs/seastar-rpc/README.md §2)."""


WAKE = Wake()
#: The other direction.
OTHER = {"c2s": "s2c", "s2c": "c2s"}


@attrs.define(eq=False)
class Link:
    """One direction of one live connection."""

    conn: int
    direction: str
    src: trio.abc.Stream
    dst: trio.abc.Stream
    peer: str
    #: trio time the last bytes were received (latency counts from it)
    arrived: float = 0.0
    frames: int = 0
    #: frames seen inside envelopes so far (a rule's position counts them apart)
    inner_frames: int = 0
    toxics: dict[int, ToxicState] = attrs.field(factory=dict)
    #: this direction's observer (as sent) and how to make it decode what it holds
    observer: Any = None
    wake: Callable[[], None] | None = None
    #: a frame a ``reorder`` holds until the next one has been passed on
    held: list[tuple[bytes, float]] = attrs.field(factory=list)


async def read_chunks(src: trio.abc.Stream, out: trio.MemorySendChannel[tuple[float, bytes | Wake | None]]) -> None:
    """Each chunk of ``src`` with the trio time it arrived; ``b""`` at its end, None if it broke."""
    async with out:
        while True:
            try:
                data: bytes | None = bytes(await src.receive_some(65536))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ssl.SSLError):
                data = None
            await out.send((trio.current_time(), data))
            if not data:
                return


async def reset_stream(stream: trio.abc.Stream) -> None:
    """Close with an RST (SO_LINGER 0); a TLS stream's TCP connection is reset under it."""
    tcp = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    sock = getattr(tcp, "socket", None)
    try:
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    await trio.aclose_forcefully(tcp)
    await trio.aclose_forcefully(stream)
