"""A loopback TCP tap that writes a capture directory (``refwire record``; ``refwire chaos --capture``).

Any client connects to the tap, the tap connects to the upstream server (any
implementation) and copies bytes both ways unchanged, writing each direction
of each connection to ``<conn>.c2s`` / ``<conn>.s2c`` and, when the connection
ends, ``<conn>.json`` with the endpoints and a time index (when each chunk
began; the format ``refwire decode`` and ``refwire analyze`` read).  EOF is
forwarded as a half-close, so request/response protocols that close their
sending side still work; a reset on one side closes both.  With a
:class:`~refwire.pcap.PcapWriter` (``refwire record --pcap FILE``) each
connection is also one TCP conversation of the pcapng file: the client's and
the upstream's real addresses, a segment per chunk each side sent, a FIN per
half-close, an RST when a side reset.

Shared by the tools (one level below them): it imports no tool and no
protocol package, only trio, :mod:`refwire.drivers` and :mod:`refwire.pcap`.
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
from .pcap import PcapWriter, TcpConversation

__all__ = ["CaptureFiles", "Tap", "open_tap", "socket_address"]

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
    #: ``--pcap FILE``: every connection also written as a TCP conversation (None: no pcap)
    pcap: PcapWriter | None = None
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
        wire = None
        if self.pcap is not None:
            wire = self.pcap.connection(socket_address(client, "peer"), socket_address(upstream, "peer"), time.time())
        try:
            async with client, upstream, trio.open_nursery() as nursery:
                for d, src, dst in (("c2s", client, upstream), ("s2c", upstream, client)):
                    record: Callable[[bytes], None] = functools.partial(files.write, d)
                    if wire is not None:
                        record = functools.partial(_both, record, functools.partial(_wire_send, wire, d))
                    nursery.start_soon(_pump, src, dst, record, nursery.cancel_scope, wire, d)
        finally:
            files.close(ended=time.time())
            if wire is not None:
                wire.close(time.time())  # the tap closed both sides (a no-op after a reset or both FINs)
        self._bump()

    def _finish(self, name: str, meta: dict[str, Any], times: dict[str, list[list[float]]]) -> None:
        meta["times"] = times
        (self.out / f"{name}.json").write_text(json.dumps(meta))
        self._bump()


def socket_address(stream: trio.abc.Stream, which: str) -> tuple[str, int] | None:
    """The stream's ``"peer"`` (or ``"local"``) address as (host, port); None for a
    stream without a socket (a memory stream) or a socket that cannot say."""
    if not isinstance(stream, trio.SocketStream):
        return None
    try:
        name = stream.socket.getpeername() if which == "peer" else stream.socket.getsockname()
        return str(name[0]), int(name[1])
    except (OSError, IndexError, TypeError, ValueError, AttributeError):
        return None


def _both(first: Callable[[bytes], None], second: Callable[[bytes], None], data: bytes) -> None:
    first(data)
    second(data)


def _wire_send(wire: TcpConversation, direction: str, data: bytes) -> None:
    wire.send(direction, data, time.time())


def _peer(stream: trio.SocketStream) -> str:
    address = socket_address(stream, "peer")
    return "?" if address is None else f"{address[0]}:{address[1]}"


async def _pump(
    src: trio.SocketStream,
    dst: trio.SocketStream,
    record: Callable[[bytes], None],
    both: trio.CancelScope,
    wire: TcpConversation | None = None,
    direction: str = "c2s",
) -> None:
    """Copy ``src`` to ``dst`` (recording each chunk) and its end as a half-close;
    ``wire`` (a pcap conversation) also gets the FIN, or the RST when a side reset."""
    sending = False  # (a failed send: the other side reset)
    try:
        while True:
            chunk = await src.receive_some(256 * 1024)
            if not chunk:
                break
            record(chunk)
            sending = True
            await dst.send_all(chunk)
            sending = False
        if wire is not None:
            wire.fin(direction, time.time())
        sending = True
        await dst.send_eof()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        if wire is not None:
            wire.reset(("s2c" if direction == "c2s" else "c2s") if sending else direction, time.time())
        both.cancel()  # a reset on either side ends the connection both ways


@asynccontextmanager
async def open_tap(
    listen: tuple[str, int],
    upstream: tuple[str, int],
    out: str | Path,
    *,
    listeners: Sequence[trio.SocketListener] | None = None,
    pcap: PcapWriter | None = None,
) -> AsyncIterator[Tap]:
    """Run a tap for the duration of the ``async with`` block (listening on 127.0.0.1
    port 0 is the usual choice in tests).  Leaving the block stops it and closes
    every proxied connection.  ``pcap``: also write every connection to it (the
    caller opens and closes it)."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    tap = Tap(d, upstream, pcap=pcap)
    lst = list(listeners) if listeners is not None else await trio.open_tcp_listeners(listen[1], host=listen[0])
    tap.addresses = [listener_address(x) for x in lst]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, tap.handle, lst)
        try:
            yield tap
        finally:
            nursery.cancel_scope.cancel()
