"""Deliberately broken TANK brokers, one wrong behaviour each, for the kill
matrix (``test_tank_conform.py``): refwire's own :class:`TankBroker` with its
service or its connection machine subclassed, or its input rewritten.

A case that no broken broker makes FAIL would pass a broker that gets its
requirement (``specs/tank/README.md``) wrong."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import attrs
import trio

import refwire.tank.server as server_mod
from refwire.errors import LocalProtocolError
from refwire.tank.bundles import decode_bundle, encode_entry
from refwire.tank.connection import BrokerConnection
from refwire.tank.frames import Ping
from refwire.tank.responses import ConsumePartitionResult, ConsumeResponse, ConsumeTopicResult
from refwire.tank.server import TankBroker
from refwire.tank.service import BrokerService
from refwire.tank.storage import Entry


@attrs.frozen
class Broken:
    name: str
    wrong: str
    aimed_at: tuple[str, ...]
    service: type[BrokerService] | None = None
    machine: type[BrokerConnection] | None = None
    rewrite: Callable[[bytes], bytes] | None = None


# --------------------------------------------------------------------------- machines


class NoGreeting(BrokerConnection):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._queued.clear()  # no Ping on accept


class AnswersPings(BrokerConnection):
    def _pump(self) -> None:
        while not self._events:
            got = self._decoder.next_frame()
            if got is None:
                return
            msg_id, payload, off = got
            from refwire.tank.frames import decode_request

            req = decode_request(msg_id, payload, offset=off, limits=self.limits)
            if isinstance(req, Ping):
                self._queued.append(Ping().encode())  # a Ping answered (wrong: never answered)
                continue
            self._transition("request")
            self._events.append(req)


class SkipsUnknownFrames(BrokerConnection):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._decoder.accept = frozenset(range(256))

    def _pump(self) -> None:
        while not self._events:
            got = self._decoder.next_frame()
            if got is None:
                return
            msg_id, payload, off = got
            try:
                from refwire.tank.frames import decode_request

                req = decode_request(msg_id, payload, offset=off, limits=self.limits)
            except LocalProtocolError:
                continue  # skipped (wrong: the connection must close)
            if isinstance(req, Ping):
                continue
            self._transition("request")
            self._events.append(req)


# --------------------------------------------------------------------------- services


class SkipsASeq(BrokerService):
    def _produce(self, conn: int, req: Any) -> Any:
        out = super()._produce(conn, req)
        for t in req.topics:  # renumber what was just stored: one sequence number skipped
            for p in t.partitions:
                lg = self._log(t.name, p.partition)
                if lg is not None and lg.entries and not lg.entries[-1].sparse:
                    e = lg.entries[-1]
                    lg.entries[-1] = Entry(e.first + 1, e.last + 1, e.sparse, e.data)
                    lg._lasts[-1] = e.last + 1  # type: ignore[attr-defined]
        return out


class RefusesSnappy(BrokerService):
    def _produce(self, conn: int, req: Any) -> Any:
        for t in req.topics:
            for p in t.partitions:
                if p.bundle and p.bundle[0] & 0x03 == 1:
                    raise LocalProtocolError("Snappy refused", protocol="tank", field="codec")
        return super()._produce(conn, req)


class SparseRenumbered(BrokerService):
    def _produce(self, conn: int, req: Any) -> Any:
        out = super()._produce(conn, req)
        for t in req.topics:
            for p in t.partitions:
                lg = self._log(t.name, p.partition)
                if lg is not None and lg.entries and lg.entries[-1].sparse:
                    e = lg.entries[-1]
                    prev = lg.entries[-2].last if len(lg.entries) > 1 else 0
                    n = decode_bundle(e.data[1:])[0].count if e.data[0] < 0x80 else 1
                    lg.entries[-1] = Entry(prev + 1, prev + n, False, encode_entry(_unsparse(e.data)))
                    lg._lasts[-1] = prev + n  # type: ignore[attr-defined]
        return out


def _unsparse(entry: bytes) -> bytes:
    """The bundle of ``entry`` re-encoded without its sparse flag (its seqs lost)."""
    from refwire.tank.bundles import encode_bundle
    from refwire.wire import decode_uvarint

    n, q = decode_uvarint(entry, 0, len(entry), field="bundleLen")
    _, msgs = decode_bundle(entry[q : q + n])
    return encode_bundle([attrs.evolve(m, seq=None) for m in msgs], compress=False)


class NoBoundaryError(BrokerService):
    def _consume(self, conn: int, req: Any, now: float) -> Any:
        out = super()._consume(conn, req, now)
        fixed = []
        for c, resp in out:
            if isinstance(resp, ConsumeResponse):
                topics = tuple(
                    attrs.evolve(
                        t,
                        partitions=tuple(
                            ConsumePartitionResult(p.partition, 0, 0, p.hwmark) if p.error == 0x01 else p for p in t.partitions
                        ),
                    )
                    for t in resp.topics
                )
                resp = attrs.evolve(resp, topics=topics)
            fixed.append((c, resp))
        return fixed


class EndIsABoundary(BrokerService):
    def _consume(self, conn: int, req: Any, now: float) -> Any:
        out = super()._consume(conn, req, now)
        fixed = []
        for c, resp in out:
            if isinstance(resp, ConsumeResponse):
                topics = tuple(
                    attrs.evolve(
                        t,
                        partitions=tuple(
                            ConsumePartitionResult(p.partition, 0x01, 0, p.hwmark, b"", 1) if p.error == 0 and not p.chunk else p
                            for p in t.partitions
                        ),
                    )
                    for t in resp.topics
                )
                resp = attrs.evolve(resp, topics=topics)
            fixed.append((c, resp))
        return fixed


class NoLongPoll(BrokerService):
    def _consume(self, conn: int, req: Any, now: float) -> Any:
        return super()._consume(conn, attrs.evolve(req, max_wait_ms=0), now)


class StrictFetchSize(BrokerService):
    def _consume(self, conn: int, req: Any, now: float) -> Any:
        out = super()._consume(conn, req, now)
        asked = {(t.name, p.partition): p.fetch_size for t in req.topics for p in t.partitions}
        fixed = []
        for c, resp in out:
            if isinstance(resp, ConsumeResponse):
                topics = tuple(
                    ConsumeTopicResult(
                        t.name,
                        tuple(
                            attrs.evolve(p, chunk=p.chunk[: asked.get((t.name, p.partition), len(p.chunk))]) for p in t.partitions
                        ),
                        t.unknown,
                        t.partitions_count,
                    )
                    for t in resp.topics
                )
                resp = attrs.evolve(resp, topics=topics)
            fixed.append((c, resp))
        return fixed


class NotAtomic(BrokerService):
    def _produce(self, conn: int, req: Any) -> Any:
        """Stores every bundle that decodes and answers an error for the others (wrong: all or nothing)."""
        from refwire.tank.responses import ProduceResponse, ProduceResult

        results = []
        for t in req.topics:
            for p in t.partitions:
                one = attrs.evolve(req, topics=(attrs.evolve(t, partitions=(p,)),))
                try:
                    super()._produce(conn, one)
                    results.append(ProduceResult(t.name, p.partition, 0))
                except LocalProtocolError:
                    results.append(ProduceResult(t.name, p.partition, 0x0A))
        return [(conn, ProduceResponse(req.request_id, tuple(results)))]


class AutoCreatesTopics(BrokerService):
    def _produce(self, conn: int, req: Any) -> Any:
        for t in req.topics:
            if t.name not in self.storage.topics:
                self.storage.create_topic(t.name, 1)
        return super()._produce(conn, req)

    def _consume(self, conn: int, req: Any, now: float) -> Any:
        for t in req.topics:
            if t.name not in self.storage.topics:
                self.storage.create_topic(t.name, 1)
        return super()._consume(conn, req, now)


def _rewrite_produces(fix: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
    """A rewrite of one whole frame: a produce's body (0x01) passes through ``fix``, its length follows."""

    def rewrite(frame: bytes) -> bytes:
        if frame[0] != 0x01:
            return frame
        body = fix(frame[5:])
        return frame[:1] + len(body).to_bytes(4, "little") + body

    return rewrite


def _six_to_five(body: bytes) -> bytes:
    """A 6-byte bundleLen varint (tk.S4.1's padding) read as its 5-byte form (a broker that accepts them)."""
    return body.replace(b"\x80\x80\x80\x00", b"\x80\x80\x00", 1) if b"\x80\x80\x80\x00" in body else body


def _fifth_byte_truncated(body: bytes) -> bytes:
    """The bits above bit 31 of a 5-byte bundleLen varint dropped, as the real broker does (tk.S4.4)."""
    from refwire.conform.cases.tank.server import overflowing_varint

    for n in range(1, 1 << 10):  # the case's bundle is a few dozen bytes long
        wide = overflowing_varint(n)
        if wide in body:
            return body.replace(wide, wide[:4] + bytes([wide[4] & 0x0F]), 1)
    return body


class StoresUnchecked(BrokerService):
    """Parses only a bundle's header, as the real broker does, and stores whatever follows (wrong: a message
    running past its bundle must be refused)."""

    def __init__(self, storage: Any, config: Any) -> None:
        super().__init__(storage, attrs.evolve(config, validate_bundles=False))


BROKEN: tuple[Broken, ...] = (
    Broken("no-greeting-ping", "does not send a Ping on accept", ("tk.S1.1",), machine=NoGreeting),
    Broken("answers-pings", "answers a client's Ping with a Ping", ("tk.S1.2",), machine=AnswersPings),
    Broken(
        "skips-unknown-frames", "skips a frame of unknown message id instead of closing", ("tk.S1.4",), machine=SkipsUnknownFrames
    ),
    Broken("skips-a-seq", "numbers a bundle from last + 2", ("tk.S2.1", "tk.S2.2"), service=SkipsASeq),
    Broken("refuses-snappy", "closes on a Snappy bundle", ("tk.S2.3",), service=RefusesSnappy),
    Broken("sparse-renumbered", "stores a sparse bundle as a plain one, losing its seqs", ("tk.S2.4",), service=SparseRenumbered),
    Broken(
        "no-boundary-error", "answers a consume past the end with an empty chunk, not 0x01", ("tk.S3.1",), service=NoBoundaryError
    ),
    Broken(
        "end-is-a-boundary", "answers a consume at last + 1 with the boundary error 0x01", ("tk.S3.2",), service=EndIsABoundary
    ),
    Broken("no-long-poll", "answers every consume at once (maxWait ignored)", ("tk.S3.3", "tk.S3.4"), service=NoLongPoll),
    Broken("strict-fetch-size", "cuts the first bundle at fetchSize", ("tk.S3.5",), service=StrictFetchSize),
    Broken("accepts-6-byte-varints", "reads a 6-byte varint", ("tk.S4.1",), rewrite=_rewrite_produces(_six_to_five)),
    Broken(
        "truncates-varints",
        "keeps the low 32 bits of a 5-byte varint above 2^32 - 1 (as the real broker does)",
        ("tk.S4.4",),
        rewrite=_rewrite_produces(_fifth_byte_truncated),
    ),
    Broken(
        "not-atomic",
        "stores the valid bundles of a produce and answers an error for the bad one",
        ("tk.S4.2",),
        service=NotAtomic,
    ),
    Broken("auto-creates-topics", "creates a topic on first use", ("tk.S4.3",), service=AutoCreatesTopics),
    Broken(
        "stores-unchecked-bundles",
        "checks a bundle's header only and stores a message cut short (as the real broker does)",
        ("tk.S4.2", "tk.S4.5"),
        service=StoresUnchecked,
    ),
)


class _Rewriting(trio.abc.Stream):
    """A stream whose received frames pass through ``rewrite``, each whole (bytes are held until a frame is)."""

    def __init__(self, inner: trio.abc.Stream, rewrite: Callable[[bytes], bytes]) -> None:
        self.inner, self.rewrite = inner, rewrite
        self.held = bytearray()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while True:
            data = await self.inner.receive_some(max_bytes)
            if not data:  # the end: what is held goes as it is, then the end
                out, self.held = bytes(self.held), bytearray()
                return out
            self.held += data
            out = bytearray()
            while len(self.held) >= 5 and len(self.held) >= 5 + (n := int.from_bytes(self.held[1:5], "little")):
                out += self.rewrite(bytes(self.held[: 5 + n]))
                del self.held[: 5 + n]
            if out:
                return bytes(out)

    async def aclose(self) -> None:
        await self.inner.aclose()


@contextmanager
def _machine(cls: type[BrokerConnection] | None) -> Any:
    if cls is None:
        yield
        return
    saved = server_mod.BrokerConnection
    server_mod.BrokerConnection = cls  # type: ignore[misc]
    try:
        yield
    finally:
        server_mod.BrokerConnection = saved  # type: ignore[misc]


@asynccontextmanager
async def broker(broken: Broken | None) -> AsyncIterator[tuple[str, int]]:
    """refwire's broker (``None``) or a broken one on 127.0.0.1:0; yields (host, port); stopped on exit.
    Brokers with a swapped machine must not run at the same time as another broker."""
    b = TankBroker()
    if broken is not None and broken.service is not None:
        b.service = broken.service(b.storage, b.config)
    if broken is not None and broken.rewrite is not None:
        handle, rewrite = b._handle, broken.rewrite

        async def rewriting(stream: trio.abc.Stream) -> None:
            await handle(_Rewriting(stream, rewrite))

        b._server._handler = rewriting  # type: ignore[method-assign]
    with _machine(broken.machine if broken is not None else None):
        async with trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            await nursery.start(b.serve, listeners)
            try:
                yield "127.0.0.1", listeners[0].socket.getsockname()[1]
            finally:
                with trio.move_on_after(5):
                    await b.shutdown(0.2)
                nursery.cancel_scope.cancel()
