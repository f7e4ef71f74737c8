"""A loopback TCP tap that writes a capture directory (``refwire record``; ``refwire chaos --capture``).

Any client connects to the tap, the tap connects to the upstream server (any
implementation) and copies bytes both ways unchanged, writing each direction
of each connection to ``<conn>.c2s`` / ``<conn>.s2c`` and, when the connection
ends, ``<conn>.json`` with the endpoints and a time index (when each chunk
began; the format ``refwire decode`` and ``refwire analyze`` read).  EOF is
forwarded as a half-close, so request/response protocols that close their
sending side still work; a reset on one side closes both.

Shared by the tools (one level below them): it imports no tool and no
protocol package, only trio and :mod:`refwire.drivers`.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, BinaryIO

import attrs
import trio

from .drivers import listener_address

__all__ = ["CaptureFiles", "Tap", "open_tap"]

log = logging.getLogger("refwire.record")


class CaptureFiles:
    """One connection's capture files in ``out`` (the capture-directory format
    :mod:`refwire.pipeline.capture` reads): ``NAME.c2s`` and ``NAME.s2c`` written
    as the bytes come, each chunk's offset and time in the time index, and
    ``NAME.json`` (``meta``, the time index, what :meth:`close` adds) at the end."""

    def __init__(self, out: Path, name: str, meta: dict[str, Any]) -> None:
        self.out, self.name, self.meta = out, name, dict(meta, conn=name)
        self.times: dict[str, list[list[float]]] = {"c2s": [], "s2c": []}
        self._offsets = {"c2s": 0, "s2c": 0}
        self._files: dict[str, BinaryIO] = {d: open(out / f"{name}.{d}", "wb") for d in ("c2s", "s2c")}

    def write(self, direction: str, data: bytes) -> None:
        if not data:
            return
        self.times[direction].append([self._offsets[direction], time.time()])
        self._files[direction].write(data)
        self._offsets[direction] += len(data)

    def close(self, **extra: Any) -> None:
        for f in self._files.values():
            f.close()
        self.meta.update(extra, times=self.times)
        (self.out / f"{self.name}.json").write_text(json.dumps(self.meta))


@attrs.define
class Tap:
    """A running tap: where it listens and what it recorded so far."""

    out: Path
    upstream: tuple[str, int]
    addresses: list[str] = attrs.Factory(list)
    finished: int = 0  #: connections fully recorded (their .json written)
    started: int = 0
    _ids: itertools.count[int] = attrs.Factory(lambda: itertools.count(1))
    _changed: trio.Event = attrs.Factory(trio.Event)

    async def wait_finished(self, n: int) -> None:
        """Wait until ``n`` connections have been recorded completely."""
        while self.finished < n:
            await self._changed.wait()

    def _bump(self) -> None:
        self.finished += 1
        self._changed.set()
        self._changed = trio.Event()

    async def handle(self, client: trio.SocketStream) -> None:
        conn_no = next(self._ids)
        self.started += 1
        name = f"conn{conn_no:05d}"
        peer = _peer(client)
        meta: dict[str, Any] = {"conn": name, "client": peer, "server": f"{self.upstream[0]}:{self.upstream[1]}", "started": time.time()}
        times: dict[str, list[list[float]]] = {"c2s": [], "s2c": []}
        try:
            upstream = await trio.open_tcp_stream(*self.upstream)
        except OSError as exc:
            meta["error"] = f"cannot connect upstream: {exc}"
            log.warning(
                "record: %s from %s: cannot connect to the upstream %s:%s (%s); closed the client's connection",
                name,
                peer,
                *self.upstream,
                exc,
            )
            await client.aclose()
            self._finish(name, meta, times)
            return
        files = CaptureFiles(self.out, name, meta)
        try:
            async with client, upstream, trio.open_nursery() as nursery:
                nursery.start_soon(_pump, client, upstream, functools.partial(files.write, "c2s"), nursery.cancel_scope)
                nursery.start_soon(_pump, upstream, client, functools.partial(files.write, "s2c"), nursery.cancel_scope)
        finally:
            files.close(ended=time.time())
        self._bump()

    def _finish(self, name: str, meta: dict[str, Any], times: dict[str, list[list[float]]]) -> None:
        meta["times"] = times
        (self.out / f"{name}.json").write_text(json.dumps(meta))
        self._bump()


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
        return f"{host}:{port}"
    except OSError:
        return "?"


async def _pump(src: trio.SocketStream, dst: trio.SocketStream, record: Callable[[bytes], None], both: trio.CancelScope) -> None:
    try:
        while True:
            chunk = await src.receive_some(256 * 1024)
            if not chunk:
                break
            record(chunk)
            await dst.send_all(chunk)
        await dst.send_eof()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        both.cancel()  # a reset on either side ends the connection both ways


@asynccontextmanager
async def open_tap(
    listen: tuple[str, int], upstream: tuple[str, int], out: str | Path, *, listeners: Sequence[trio.SocketListener] | None = None
) -> AsyncIterator[Tap]:
    """Run a tap for the duration of the ``async with`` block (listening on 127.0.0.1
    port 0 is the usual choice in tests).  Leaving the block stops it and closes
    every proxied connection."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    tap = Tap(d, upstream)
    lst = list(listeners) if listeners is not None else await trio.open_tcp_listeners(listen[1], host=listen[0])
    tap.addresses = [listener_address(x) for x in lst]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, tap.handle, lst)
        try:
            yield tap
        finally:
            nursery.cancel_scope.cancel()
