"""The Lumberjack trio drivers: LumberjackServer and LumberjackClient end to end.

Transports: trio.testing memory streams, the simulator's SimStream with partial
reads / one-byte trickles / cuts at write boundaries, and real TCP on
127.0.0.1 (plain and TLS with trustme certificates).  Server behaviour (keepalive,
idle and batch timeouts, graceful shutdown, protocol errors) is checked with a
raw client that reads the bytes the server writes; client behaviour (partial
acks, resend of the unacked tail, keepalives, ack timeouts, bad acks, wrap of
running sequence numbers, go-lumber count acks, cancellation) with small
scripted fake servers on the simulator (specs/lumberjack/README.md §3, §6, §7).

Every network wait is bounded by ``trio.fail_after``; every server started is
shut down by the test.  Tests that depend on timing run on pytest-trio's
``autojump_clock`` (virtual time) over memory streams or the simulator, never
over real sockets (the clock would jump while the kernel moves bytes).
"""

from __future__ import annotations

import json
import logging
import math
import random
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
import trustme
from support.memory_listener import MemoryListener

from refwire.drivers import client_ssl_context, open_stream, parse_hostport, server_ssl_context
from refwire.lumberjack import V1, V2, Batch
from refwire.lumberjack.client import ClientConfig, LumberjackClient, SendFailed
from refwire.lumberjack.errors import AckWaitExpired
from refwire.lumberjack.server import ConnectionInfo, LumberjackServer, ServerConfig
from refwire.sim.faults import Faults
from refwire.sim.net import SimNet
from refwire.sim.rand import SimRandom
from refwire.sim.trace import Trace

LOCAL = "127.0.0.1"
WAIT = 20.0  # bound of every single network wait (seconds; virtual under autojump_clock)
TRICKLE = Faults(partial_read=1.0, trickle=0.5, boundary_split=0.3)

# --------------------------------------------------------------------------- raw frames (independent of refwire's codec)


def w_frame(count: int, version: int = V2) -> bytes:
    return struct.pack(">BBI", version, ord("W"), count)


def j_frame(seq: int, doc: dict[str, Any]) -> bytes:
    payload = json.dumps(doc).encode()
    return struct.pack(">BBII", V2, ord("J"), seq, len(payload)) + payload


def d_frame(seq: int, pairs: dict[str, str]) -> bytes:
    out = [struct.pack(">BBII", V1, ord("D"), seq, len(pairs))]
    for k, v in pairs.items():
        kb, vb = k.encode(), v.encode()
        out += [struct.pack(">I", len(kb)), kb, struct.pack(">I", len(vb)), vb]
    return b"".join(out)


def c_frame(inner: bytes, version: int = V2) -> bytes:
    z = zlib.compress(inner)
    return struct.pack(">BBI", version, ord("C"), len(z)) + z


def a_frame(seq: int, version: int = V2) -> bytes:
    return struct.pack(">BBI", version, ord("A"), seq)


def parse_data_frames(data: bytes) -> list[tuple[int, Any]]:
    """(seq, document) of every J/D frame in ``data`` (a C payload), nested C included."""
    out: list[tuple[int, Any]] = []
    pos = 0
    while pos < len(data):
        typ = chr(data[pos + 1])
        if typ == "J":
            seq, n = struct.unpack_from(">II", data, pos + 2)
            out.append((seq, json.loads(data[pos + 10 : pos + 10 + n])))
            pos += 10 + n
        elif typ == "D":
            seq, npairs = struct.unpack_from(">II", data, pos + 2)
            pos += 10
            doc = {}
            for _ in range(npairs):
                (kl,) = struct.unpack_from(">I", data, pos)
                k = data[pos + 4 : pos + 4 + kl].decode()
                pos += 4 + kl
                (vl,) = struct.unpack_from(">I", data, pos)
                doc[k] = data[pos + 4 : pos + 4 + vl].decode()
                pos += 4 + vl
            out.append((seq, doc))
        elif typ == "C":
            (n,) = struct.unpack_from(">I", data, pos + 2)
            out += parse_data_frames(zlib.decompress(data[pos + 6 : pos + 6 + n]))
            pos += 6 + n
        else:
            raise AssertionError(f"unexpected frame type {typ!r} from the client")
    return out


@dataclass
class RawWindow:
    version: int
    seqs: list[int]
    docs: list[Any]


class RawPeer:
    """Either end of a connection, speaking raw bytes: reads acks or whole windows."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buf = bytearray()
        self.windows: list[RawWindow] = []

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def _fill(self, n: int) -> bool:
        while len(self.buf) < n:
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                return False
            self.buf += chunk
        return True

    async def exactly(self, n: int) -> bytes:
        if not await self._fill(n):
            raise EOFError(f"EOF after {len(self.buf)} of {n} bytes")
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def read_ack(self) -> tuple[int, int]:
        """(version byte, seq) of the next frame, which must be an A."""
        ver, typ, seq = struct.unpack(">BBI", await self.exactly(6))
        assert typ == ord("A"), f"expected an A frame, got type {typ:#x}"
        return ver, seq

    async def at_eof(self) -> bool:
        """True if the peer closed (or reset) without sending anything more."""
        try:
            return not await self._fill(len(self.buf) + 1)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return True

    async def read_window(self) -> RawWindow:
        ver, typ, count = struct.unpack(">BBI", await self.exactly(6))
        assert typ == ord("W"), f"expected a W frame, got type {typ:#x}"
        events: list[tuple[int, Any]] = []
        while len(events) < count:
            fver, ftyp = await self.exactly(2)
            assert fver == ver
            if ftyp == ord("C"):
                (n,) = struct.unpack(">I", await self.exactly(4))
                events += parse_data_frames(zlib.decompress(await self.exactly(n)))
            elif ftyp == ord("J"):
                seq, n = struct.unpack(">II", await self.exactly(8))
                events.append((seq, json.loads(await self.exactly(n))))
            elif ftyp == ord("D"):
                head = bytes([fver, ftyp]) + await self.exactly(8)
                _, npairs = struct.unpack(">II", head[2:])
                body = b""
                for _ in range(npairs):
                    (kl,) = struct.unpack(">I", kb := await self.exactly(4))
                    body += kb + await self.exactly(kl)
                    (vl,) = struct.unpack(">I", vb := await self.exactly(4))
                    body += vb + await self.exactly(vl)
                events += parse_data_frames(head + body)
            else:
                raise AssertionError(f"unexpected frame type {ftyp:#x} from the client")
        assert len(events) == count, f"W {count} followed by {len(events)} events"
        win = RawWindow(ver, [s for s, _ in events], [d for _, d in events])
        self.windows.append(win)
        return win

    async def ack(self, seq: int, version: int = V2) -> None:
        await self.stream.send_all(a_frame(seq, version))

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


# --------------------------------------------------------------------------- servers on three transports


@dataclass
class Endpoint:
    connect: Callable[[], Awaitable[trio.abc.Stream]]
    host: str = ""
    port: int = 0
    net: SimNet | None = None


SIM_ADDRESS = "lj-server:5044"


@asynccontextmanager
async def running(
    server: LumberjackServer, transport: str, *, grace: float = 1.0, faults: Faults = TRICKLE, seed: int = 7
) -> AsyncIterator[Endpoint]:
    """Serve ``server`` on ``transport`` ("memory", "sim" or "tcp"); shut it down on exit."""
    async with trio.open_nursery() as nursery:
        if transport == "tcp":
            addresses = await nursery.start(server.serve_tcp, LOCAL, 0)
            host, port = parse_hostport(addresses[0])

            async def connect_tcp() -> trio.abc.Stream:
                return await open_stream(host, port, timeout=5.0)

            ep = Endpoint(connect_tcp, host, port)
        elif transport == "sim":
            net = SimNet(SimRandom(seed), faults, Trace(max_lines=1000))
            await nursery.start(server.serve, [net.listen(SIM_ADDRESS)])

            async def connect_sim() -> trio.abc.Stream:
                return await net.connect(SIM_ADDRESS)

            ep = Endpoint(connect_sim, net=net)
        else:
            assert transport == "memory"
            listener = MemoryListener()
            await nursery.start(server.serve, [listener])
            ep = Endpoint(listener.connect)
        try:
            yield ep
        finally:
            with trio.fail_after(grace + WAIT):
                await server.shutdown(grace)


class Collector:
    """A handler recording every batch (optionally working ``delay`` seconds on each)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.batches: list[tuple[int, Batch]] = []
        self.started = trio.Event()

    async def __call__(self, batch: Batch, info: ConnectionInfo) -> None:
        self.started.set()
        if self.delay:
            await trio.sleep(self.delay)
        self.batches.append((info.id, batch))

    @property
    def docs(self) -> list[Any]:
        return [ev.fields() for _, b in self.batches for ev in b.events]

    @property
    def seqs(self) -> list[int]:
        return [ev.seq for _, b in self.batches for ev in b.events]


def make_events(n: int, version: int = V2, tag: str = "ev") -> list[dict[str, Any]]:
    if version == V1:
        return [{"line": f"{tag} {i}", "n": str(i)} for i in range(n)]
    return [{"message": f"{tag} {i}", "n": i, "tag": tag} for i in range(n)]


def as_received(events: list[dict[str, Any]], version: int) -> list[dict[str, Any]]:
    """What the server's ``fields()`` gives for the events a client sent."""
    if version == V1:
        return [{k: str(v) for k, v in e.items()} for e in events]
    return events


def flat(runs: list[list[Any]]) -> list[Any]:
    return [x for run in runs for x in run]


# --------------------------------------------------------------------------- server + client: delivery matrix

TRANSPORTS = ["memory", "sim", "tcp"]
N_EVENTS = 150


@pytest.mark.parametrize("window", [1, 7, 100])
@pytest.mark.parametrize("compression", [0, 3], ids=["plain", "zlib"])
@pytest.mark.parametrize("version", [V1, V2], ids=["v1", "v2"])
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_handler_mode_delivers_everything_in_order(transport: str, version: int, compression: int, window: int) -> None:
    handler = Collector()
    server = LumberjackServer(handler)
    events = make_events(N_EVENTS, version)
    acked: list[list[Any]] = []
    async with running(server, transport) as ep:
        config = ClientConfig(version=version, window_size=window, compression_level=compression, ack_timeout=10.0)
        async with LumberjackClient(ep.connect, config=config, on_acked=acked.append) as client:
            with trio.fail_after(WAIT):
                await client.send(events)
    assert handler.docs == as_received(events, version)
    assert flat(acked) == events
    expected_windows = math.ceil(N_EVENTS / window)
    assert [len(b) for _, b in handler.batches] == [min(window, N_EVENTS - i * window) for i in range(expected_windows)]
    # window numbering: every window's events are 1..n (Beats)
    assert all([ev.seq for ev in b.events] == list(range(1, len(b) + 1)) for _, b in handler.batches)
    assert all(b.version == version for _, b in handler.batches)
    assert client.stats["events_acked"] == N_EVENTS
    assert client.stats["windows"] == expected_windows
    assert client.stats["reconnects"] == 0 and client.stats["connects"] == 1
    assert server.stats["events"] == N_EVENTS and server.stats["batches"] == expected_windows
    assert server.stats["protocol_errors"] == 0 and server.stats["app_errors"] == 0
    if transport == "sim":
        assert ep.net is not None
        assert ep.net.stats["trickles"] > 0 and ep.net.stats["partial_reads"] > 0


@pytest.mark.parametrize("version", [V1, V2], ids=["v1", "v2"])
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_iterator_mode_delivers_everything_in_order(transport: str, version: int) -> None:
    server = LumberjackServer(config=ServerConfig(keepalive_interval=None))
    events = make_events(N_EVENTS, version)
    acked: list[list[Any]] = []
    got: list[Any] = []
    async with running(server, transport) as ep:
        config = ClientConfig(version=version, window_size=7, ack_timeout=10.0)
        client = LumberjackClient(ep.connect, config=config, on_acked=acked.append)

        async def produce() -> None:
            async with client:
                await client.send(events)

        with trio.fail_after(WAIT):
            async with server.batches() as batches, trio.open_nursery() as nursery:
                nursery.start_soon(produce)
                async for batch, info in batches:
                    assert info.id == 1
                    got.extend(ev.fields() for ev in batch.events)
                    if len(got) >= N_EVENTS:
                        break
    assert got == as_received(events, version)
    assert flat(acked) == events
    assert server.stats["events"] == N_EVENTS


async def test_iterator_mode_acks_only_after_the_consumer_took_the_batch(autojump_clock: trio.testing.MockClock) -> None:
    server = LumberjackServer(config=ServerConfig(keepalive_interval=1.0))
    async with running(server, "memory") as ep, server.batches() as batches:
        raw = RawPeer(await ep.connect())
        await raw.send(w_frame(2) + j_frame(1, {"a": 1}) + j_frame(2, {"a": 2}))
        # Nobody takes the batch for 30 s: only keepalives (A 0) may arrive, never the ack.
        seen: list[tuple[int, int]] = []
        with trio.move_on_after(30):
            while True:
                seen.append(await raw.read_ack())
        assert seen, "expected keepalives while the batch waits for the consumer"
        assert all(seq == 0 for _, seq in seen), seen
        with trio.fail_after(WAIT):
            batch, _ = await batches.receive()
        assert [ev.fields() for ev in batch.events] == [{"a": 1}, {"a": 2}]
        with trio.fail_after(WAIT):
            while (ack := await raw.read_ack()) == (V2, 0):
                pass
        assert ack == (V2, 2)
        await raw.aclose()


async def test_handler_exception_closes_the_connection_without_ack(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    async def handler(batch: Batch, info: ConnectionInfo) -> None:
        raise RuntimeError("disk full")

    server = LumberjackServer(handler, config=ServerConfig(keepalive_interval=None))
    async with running(server, "memory") as ep:
        raw = RawPeer(await ep.connect())
        await raw.send(w_frame(1) + j_frame(1, {"a": 1}))
        with trio.fail_after(WAIT):
            assert await raw.at_eof()
        assert raw.buf == b""  # no ack
    assert server.stats["app_errors"] == 1 and server.stats["batches"] == 0
    assert any("disk full" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


# --------------------------------------------------------------------------- TLS


@dataclass
class TlsFiles:
    ca: Path
    server: Path
    client: Path


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    d = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    ca.issue_cert(LOCAL, "localhost").private_key_and_cert_chain_pem.write_to_path(str(d / "server.pem"))
    ca.issue_cert("beat-1.example").private_key_and_cert_chain_pem.write_to_path(str(d / "client.pem"))
    return TlsFiles(d / "ca.pem", d / "server.pem", d / "client.pem")


@asynccontextmanager
async def tls_server(handler: Collector, tls_files: TlsFiles, *, client_ca: bool) -> AsyncIterator[tuple[LumberjackServer, int]]:
    ctx = server_ssl_context(str(tls_files.server), client_ca=str(tls_files.ca) if client_ca else None)
    server = LumberjackServer(handler, ssl_context=ctx)
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(server.serve_tcp, LOCAL, 0)
        try:
            yield server, parse_hostport(addresses[0])[1]
        finally:
            with trio.fail_after(WAIT):
                await server.shutdown(1.0)


@pytest.mark.parametrize("version", [V1, V2], ids=["v1", "v2"])
async def test_tls(tls_files: TlsFiles, version: int) -> None:
    handler = Collector()
    events = make_events(60, version)
    async with tls_server(handler, tls_files, client_ca=False) as (_server, port):
        ctx = client_ssl_context(str(tls_files.ca))
        config = ClientConfig(version=version, window_size=25, ack_timeout=10.0, max_attempts=2)
        async with LumberjackClient.connect_tcp(LOCAL, port, ssl_context=ctx, config=config) as client:
            with trio.fail_after(WAIT):
                await client.send(events)
    assert handler.docs == as_received(events, version)
    assert client.stats["events_acked"] == 60


async def test_tls_client_certificate_required(tls_files: TlsFiles, caplog: pytest.LogCaptureFixture) -> None:
    handler = Collector()
    events = make_events(10)
    async with tls_server(handler, tls_files, client_ca=True) as (_server, port):
        # Without a client certificate: refused (the server aborts the handshake).
        no_cert = client_ssl_context(str(tls_files.ca))
        config = ClientConfig(window_size=5, ack_timeout=5.0, max_attempts=1)
        async with LumberjackClient.connect_tcp(LOCAL, port, ssl_context=no_cert, config=config) as client:
            with trio.fail_after(WAIT), pytest.raises(SendFailed) as info:
                await client.send(events)
        assert info.value.unacked == events  # the failing window and the one after it
        assert handler.batches == []
        # With one signed by the CA: delivered.
        with_cert = client_ssl_context(str(tls_files.ca), certfile=str(tls_files.client))
        async with LumberjackClient.connect_tcp(LOCAL, port, ssl_context=with_cert, config=config) as client:
            with trio.fail_after(WAIT):
                await client.send(events)
        assert handler.docs == events
    assert any("TLS handshake failed" in r.getMessage() for r in caplog.records)


async def test_tls_client_rejects_untrusted_server(tls_files: TlsFiles) -> None:
    handler = Collector()
    async with tls_server(handler, tls_files, client_ca=False) as (_server, port):
        other_ca = trustme.CA()
        ctx = ssl_ctx_trusting(other_ca)
        config = ClientConfig(ack_timeout=5.0, max_attempts=1)
        async with LumberjackClient.connect_tcp(LOCAL, port, ssl_context=ctx, config=config) as client:
            with trio.fail_after(WAIT), pytest.raises(SendFailed):
                await client.send(make_events(3))
    assert handler.batches == []


def ssl_ctx_trusting(ca: trustme.CA) -> Any:
    import ssl

    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


# --------------------------------------------------------------------------- many connections


async def test_many_concurrent_connections() -> None:
    handler = Collector()
    server = LumberjackServer(handler)
    n_clients, per_client = 20, 40
    clients: list[LumberjackClient] = []
    async with running(server, "tcp") as ep:

        async def one(i: int) -> None:
            config = ClientConfig(version=V2 if i % 2 else V1, window_size=7, compression_level=i % 4, ack_timeout=10.0)
            client = LumberjackClient(ep.connect, config=config)
            clients.append(client)
            async with client:
                await client.send(make_events(per_client, config.version, tag=f"c{i}"))

        with trio.fail_after(WAIT):
            async with trio.open_nursery() as nursery:
                for i in range(n_clients):
                    nursery.start_soon(one, i)
    assert server.stats["connections"] == n_clients
    assert server.stats["events"] == n_clients * per_client
    by_conn: dict[int, list[Any]] = {}
    for conn_id, batch in handler.batches:
        by_conn.setdefault(conn_id, []).extend(ev.fields() for ev in batch.events)
    assert len(by_conn) == n_clients
    expected = {
        f"c{i}": as_received(make_events(per_client, V2 if i % 2 else V1, tag=f"c{i}"), V2 if i % 2 else V1)
        for i in range(n_clients)
    }
    for docs in by_conn.values():
        tag = docs[0].get("tag") or docs[0]["line"].split()[0]
        assert docs == expected.pop(tag)
    assert expected == {}
    assert all(c.stats["reconnects"] == 0 for c in clients)


# --------------------------------------------------------------------------- protocol errors


async def test_protocol_error_closes_only_that_connection(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="refwire")
    handler = Collector()
    server = LumberjackServer(handler)
    async with running(server, "tcp") as ep:
        config = ClientConfig(window_size=5, ack_timeout=10.0)
        async with LumberjackClient(ep.connect, config=config) as good:
            with trio.fail_after(WAIT):
                await good.send(make_events(10, tag="before"))
            bad = RawPeer(await ep.connect())
            prefix = w_frame(1) + j_frame(1, {"bad": "conn"})
            await bad.send(prefix)
            with trio.fail_after(WAIT):
                assert await bad.read_ack() == (V2, 1)
            caplog.clear()
            await bad.send(b"2X\x00\x00\x00\x01")
            with trio.fail_after(WAIT):
                assert await bad.at_eof()
            await bad.aclose()
            # the other connection goes on as if nothing happened
            with trio.fail_after(WAIT):
                await good.send(make_events(10, tag="after"))
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "field type" in warnings[0] and f"offset {len(prefix) + 1}" in warnings[0], warnings[0]
    assert server.stats["protocol_errors"] == 1
    assert good.stats["connects"] == 1 and good.stats["reconnects"] == 0
    assert handler.docs == [*make_events(10, tag="before"), {"bad": "conn"}, *make_events(10, tag="after")]


async def test_protocol_error_inside_compressed_frame_names_it(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    handler = Collector()
    server = LumberjackServer(handler)
    async with running(server, "sim") as ep:
        raw = RawPeer(await ep.connect())
        # W 2, then a C whose second J carries a non-object JSON payload.
        bad_j = struct.pack(">BBII", V2, ord("J"), 2, 3) + b"[1]"
        await raw.send(w_frame(2) + c_frame(j_frame(1, {"a": 1}) + bad_j))
        with trio.fail_after(WAIT):
            assert await raw.at_eof()
        assert raw.buf == b""
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "C>J" in warnings[0] and "field json" in warnings[0] and "offset 6" in warnings[0], warnings
    assert handler.batches == []


# --------------------------------------------------------------------------- keepalive


async def slow_batch_frames(
    *, version: int, keepalive_version: str, delay: float = 7.0, interval: float = 2.0
) -> list[tuple[float, tuple[int, int]]]:
    config = ServerConfig(keepalive_interval=interval, keepalive_version=keepalive_version)  # type: ignore[arg-type]
    server = LumberjackServer(Collector(delay=delay), config=config)
    frames: list[tuple[float, tuple[int, int]]] = []
    async with running(server, "memory") as ep:
        raw = RawPeer(await ep.connect())
        if version == V2:
            batch = w_frame(3) + c_frame(b"".join(j_frame(i, {"i": i}) for i in (1, 2, 3)))
        else:
            batch = w_frame(3, V1) + c_frame(b"".join(d_frame(i, {"i": str(i)}) for i in (1, 2, 3)), V1)
        t0 = trio.current_time()
        await raw.send(batch)
        with trio.fail_after(delay + WAIT):
            while True:
                ack = await raw.read_ack()
                frames.append((round(trio.current_time() - t0, 3), ack))
                if ack[1] != 0:
                    break
        await raw.aclose()
    return frames


async def test_keepalive_before_slow_ack_v2(autojump_clock: trio.testing.MockClock) -> None:
    frames = await slow_batch_frames(version=V2, keepalive_version="connection")
    assert frames == [(2.0, (V2, 0)), (4.0, (V2, 0)), (6.0, (V2, 0)), (7.0, (V2, 3))]


async def test_keepalive_on_v1_uses_the_connection_version(autojump_clock: trio.testing.MockClock) -> None:
    frames = await slow_batch_frames(version=V1, keepalive_version="connection")
    assert frames == [(2.0, (V1, 0)), (4.0, (V1, 0)), (6.0, (V1, 0)), (7.0, (V1, 3))]


async def test_keepalive_version_v2_on_a_v1_connection(autojump_clock: trio.testing.MockClock) -> None:
    # Logstash's behaviour: '2A 0' keepalives even on a v1 connection; the real ack stays '1A'.
    frames = await slow_batch_frames(version=V1, keepalive_version="v2")
    assert frames == [(2.0, (V2, 0)), (4.0, (V2, 0)), (6.0, (V2, 0)), (7.0, (V1, 3))]


async def test_a0_for_a_pipelined_w0_does_not_overtake_a_held_batch(autojump_clock: trio.testing.MockClock) -> None:
    # The handler holds the first batch for 3 s while the client has already sent W 0:
    # the A 0 answering it must follow A 1, not overtake it (acks leave in window order).
    handler = Collector(delay=3.0)
    server = LumberjackServer(handler, config=ServerConfig(keepalive_interval=None))
    async with running(server, "memory") as ep:
        raw = RawPeer(await ep.connect())
        await raw.send(w_frame(1) + j_frame(1, {"a": 1}))
        with trio.fail_after(WAIT):
            await handler.started.wait()
        await raw.send(w_frame(0))
        with trio.fail_after(3.0 + WAIT):
            acks = [await raw.read_ack(), await raw.read_ack()]
        assert acks == [(V2, 1), (V2, 0)]
        assert trio.current_time() == pytest.approx(3.0)
        await raw.aclose()


async def test_no_keepalive_when_disabled(autojump_clock: trio.testing.MockClock) -> None:
    config = ServerConfig(keepalive_interval=None)
    server = LumberjackServer(Collector(delay=20.0), config=config)
    async with running(server, "memory") as ep:
        raw = RawPeer(await ep.connect())
        await raw.send(w_frame(1) + j_frame(1, {"a": 1}))
        with trio.fail_after(30):
            assert await raw.read_ack() == (V2, 1)
        assert trio.current_time() == pytest.approx(20.0)
        await raw.aclose()


@pytest.mark.parametrize("version", [V1, V2], ids=["v1", "v2"])
async def test_client_survives_slow_server_thanks_to_keepalives(autojump_clock: trio.testing.MockClock, version: int) -> None:
    # handler 25 s > client ack_timeout 10 s: the keepalives every 3 s keep it waiting;
    # on v1 with keepalive_version="v2" the client accepts '2A 0' (Logstash) too.
    config = ServerConfig(keepalive_interval=3.0, keepalive_version="v2")
    handler = Collector(delay=25.0)
    server = LumberjackServer(handler, config=config)
    async with running(server, "sim", faults=Faults.none()) as ep:
        cfg = ClientConfig(version=version, window_size=10, ack_timeout=10.0)
        async with LumberjackClient(ep.connect, config=cfg) as client:
            with trio.fail_after(60):
                await client.send(make_events(20, version))
    assert client.stats["connects"] == 1 and client.stats["reconnects"] == 0
    assert client.stats["keepalives"] >= 2 * 8
    assert handler.docs == as_received(make_events(20, version), version)


# --------------------------------------------------------------------------- idle and batch timeouts


async def test_idle_timeout_closes_an_idle_connection(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    server = LumberjackServer(Collector(), config=ServerConfig(idle_timeout=10.0, batch_timeout=None))
    async with running(server, "memory") as ep:
        raw = RawPeer(await ep.connect())
        t0 = trio.current_time()
        with trio.fail_after(WAIT):
            assert await raw.at_eof()
        assert trio.current_time() - t0 == pytest.approx(10.0, abs=0.1)
        await raw.aclose()


async def test_idle_timeout_counts_from_the_last_batch(autojump_clock: trio.testing.MockClock) -> None:
    server = LumberjackServer(Collector(), config=ServerConfig(idle_timeout=10.0, batch_timeout=None))
    async with running(server, "memory") as ep:
        raw = RawPeer(await ep.connect())
        for i in range(3):  # a batch every 8 s keeps the connection open
            await trio.sleep(8.0)
            await raw.send(w_frame(1) + j_frame(1, {"i": i}))
            with trio.fail_after(WAIT):
                assert await raw.read_ack() == (V2, 1)
        t_last = trio.current_time()
        with trio.fail_after(WAIT):
            assert await raw.at_eof()
        assert trio.current_time() - t_last == pytest.approx(10.0, abs=0.1)
        await raw.aclose()


@pytest.mark.parametrize("stall", ["between-frames", "inside-a-frame"])
async def test_batch_timeout_closes_a_connection_stalled_mid_batch(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture, stall: str
) -> None:
    handler = Collector()
    server = LumberjackServer(handler, config=ServerConfig(idle_timeout=None, batch_timeout=5.0))
    async with running(server, "memory") as ep:
        raw = RawPeer(await ep.connect())
        data = w_frame(3) + j_frame(1, {"a": 1})
        if stall == "inside-a-frame":
            data += j_frame(2, {"a": 2})[:7]
        await raw.send(data)
        t0 = trio.current_time()
        with trio.fail_after(WAIT):
            assert await raw.at_eof()
        assert trio.current_time() - t0 == pytest.approx(5.0, abs=0.1)
        assert raw.buf == b""
        await raw.aclose()
    assert handler.batches == []
    assert any("inside a batch" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


async def test_timeouts_do_not_close_a_connection_waiting_for_a_slow_handler(autojump_clock: trio.testing.MockClock) -> None:
    handler = Collector(delay=20.0)
    config = ServerConfig(idle_timeout=3.0, batch_timeout=3.0, keepalive_interval=None)
    server = LumberjackServer(handler, config=config)
    async with running(server, "memory") as ep:
        raw = RawPeer(await ep.connect())
        await raw.send(w_frame(2) + j_frame(1, {"a": 1}) + j_frame(2, {"a": 2}))
        with trio.fail_after(30):
            assert await raw.read_ack() == (V2, 2)
        assert trio.current_time() == pytest.approx(20.0)
        # and the connection is still usable
        await raw.send(w_frame(1) + j_frame(1, {"a": 3}))
        with trio.fail_after(30):
            assert await raw.read_ack() == (V2, 1)
        await raw.aclose()
    assert len(handler.batches) == 2


async def test_idle_timeout_restarts_after_a_slow_ack(autojump_clock: trio.testing.MockClock) -> None:
    # ServerConfig.idle_timeout: "close a connection that sends nothing for this long while no batch is pending".
    handler = Collector(delay=20.0)
    config = ServerConfig(idle_timeout=3.0, batch_timeout=3.0, keepalive_interval=None)
    server = LumberjackServer(handler, config=config)
    async with running(server, "memory") as ep:
        raw = RawPeer(await ep.connect())
        await raw.send(w_frame(1) + j_frame(1, {"a": 1}))
        with trio.fail_after(30):
            assert await raw.read_ack() == (V2, 1)
        t_ack = trio.current_time()
        with trio.fail_after(WAIT):
            assert await raw.at_eof()
        idle = trio.current_time() - t_ack
        await raw.aclose()
    assert idle == pytest.approx(3.0, abs=0.1)


# --------------------------------------------------------------------------- graceful shutdown


async def test_shutdown_lets_an_in_progress_batch_finish(autojump_clock: trio.testing.MockClock) -> None:
    handler = Collector(delay=3.0)
    server = LumberjackServer(handler, config=ServerConfig(keepalive_interval=None))
    events = make_events(4)
    net = SimNet(SimRandom(1), Faults.none(), Trace())
    listener = net.listen(SIM_ADDRESS)
    acked: list[list[Any]] = []
    shutdown_took: list[float] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, [listener])

        async def connect() -> trio.abc.Stream:
            return await net.connect(SIM_ADDRESS)

        client = LumberjackClient(connect, config=ClientConfig(ack_timeout=10.0, max_attempts=1), on_acked=acked.append)

        async def produce() -> None:
            async with client:
                await client.send(events)

        nursery.start_soon(produce)
        with trio.fail_after(WAIT):
            await handler.started.wait()

        async def stop() -> None:
            t0 = trio.current_time()
            await server.shutdown(grace=10.0)
            shutdown_took.append(trio.current_time() - t0)

        nursery.start_soon(stop)
        await trio.sleep(0.1)
        assert not net.is_listening(SIM_ADDRESS)
        with pytest.raises(ConnectionRefusedError):
            await net.connect(SIM_ADDRESS)
    assert flat(acked) == events
    assert handler.docs == events
    # the client closed after its ack; shutdown did not need the whole grace
    assert shutdown_took[0] < 10.0


async def test_shutdown_cancels_connections_after_grace(autojump_clock: trio.testing.MockClock) -> None:
    async def forever(batch: Batch, info: ConnectionInfo) -> None:
        await trio.sleep_forever()

    server = LumberjackServer(forever, config=ServerConfig(keepalive_interval=None))
    async with trio.open_nursery() as nursery:
        listener = MemoryListener()
        await nursery.start(server.serve, [listener])
        raw = RawPeer(await listener.connect())
        await raw.send(w_frame(1) + j_frame(1, {"a": 1}))
        await trio.sleep(1.0)
        t0 = trio.current_time()
        with trio.fail_after(WAIT):
            await server.shutdown(grace=5.0)
        assert trio.current_time() - t0 == pytest.approx(5.0, abs=0.1)
        with trio.fail_after(WAIT):
            assert await raw.at_eof()
        assert raw.buf == b""  # never acked
        with pytest.raises(ConnectionRefusedError):
            await listener.connect()
        await raw.aclose()


async def test_shutdown_over_tcp_refuses_new_connections() -> None:
    handler = Collector()
    server = LumberjackServer(handler)
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(server.serve_tcp, LOCAL, 0)
        host, port = parse_hostport(addresses[0])
        async with LumberjackClient.connect_tcp(host, port, config=ClientConfig(ack_timeout=5.0)) as client:
            with trio.fail_after(WAIT):
                await client.send(make_events(5))
        with trio.fail_after(WAIT):
            await server.shutdown(grace=2.0)
        with trio.fail_after(WAIT), pytest.raises(OSError):
            await trio.open_tcp_stream(host, port)
    assert handler.docs == make_events(5)


async def test_shutdown_closes_idle_connections_promptly(autojump_clock: trio.testing.MockClock) -> None:
    server = LumberjackServer(Collector(), config=ServerConfig(idle_timeout=None))
    async with trio.open_nursery() as nursery:
        listener = MemoryListener()
        await nursery.start(server.serve, [listener])
        raw = RawPeer(await listener.connect())
        await raw.send(w_frame(1) + j_frame(1, {"a": 1}))
        with trio.fail_after(WAIT):
            assert await raw.read_ack() == (V2, 1)
        t0 = trio.current_time()
        with trio.fail_after(60):
            await server.shutdown(grace=30.0)
        took = trio.current_time() - t0
        with trio.fail_after(WAIT):
            assert await raw.at_eof()
        await raw.aclose()
    assert took < 1.0, f"shutdown of a server with one idle connection took {took:.1f}s"


# --------------------------------------------------------------------------- client against scripted fake servers

FAKE_ADDRESS = "fake-lj:5044"
Script = Callable[[RawPeer], Awaitable[None]]


@dataclass
class FakeServer:
    net: SimNet
    peers: list[RawPeer] = field(default_factory=list)

    async def connect(self) -> trio.abc.Stream:
        return await self.net.connect(FAKE_ADDRESS)

    def windows(self) -> list[list[RawWindow]]:
        return [p.windows for p in self.peers]


@asynccontextmanager
async def fake_server(*scripts: Script) -> AsyncIterator[FakeServer]:
    """Connection k runs ``scripts[k]`` (the last one for every later connection)."""
    net = SimNet(SimRandom(3), Faults.none(), Trace(max_lines=200))
    listener = net.listen(FAKE_ADDRESS)
    fake = FakeServer(net)

    async def run(script: Script, peer: RawPeer) -> None:
        try:
            await script(peer)
        except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await peer.aclose()

    async def accept_loop(nursery: trio.Nursery) -> None:
        while True:
            peer = RawPeer(await listener.accept())
            script = scripts[min(len(fake.peers), len(scripts) - 1)]
            fake.peers.append(peer)
            nursery.start_soon(run, script, peer)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(accept_loop, nursery)
        yield fake
        nursery.cancel_scope.cancel()


async def ack_last_seq(peer: RawPeer) -> None:
    while True:
        w = await peer.read_window()
        await peer.ack(w.seqs[-1], w.version)


async def ack_count(peer: RawPeer) -> None:
    while True:
        w = await peer.read_window()
        await peer.ack(len(w.seqs), w.version)


async def close_at_once(peer: RawPeer) -> None:
    return


async def read_and_stay_silent(peer: RawPeer) -> None:
    await peer.read_window()
    while not await peer.at_eof():
        pass


def fake_client(fake: FakeServer, acked: list[list[Any]] | None = None, **config: Any) -> LumberjackClient:
    config.setdefault("ack_timeout", 10.0)
    config.setdefault("backoff_initial", 0.1)
    return LumberjackClient(
        fake.connect, config=ClientConfig(**config), on_acked=None if acked is None else acked.append, rng=random.Random(0)
    )


@pytest.mark.parametrize("version", [V1, V2], ids=["v1", "v2"])
async def test_client_partial_ack_then_close_resends_only_the_tail(autojump_clock: trio.testing.MockClock, version: int) -> None:
    async def partial_then_close(peer: RawPeer) -> None:
        w = await peer.read_window()
        await peer.ack(w.seqs[1], w.version)  # 2 of 5

    events = make_events(5, version)
    acked: list[list[Any]] = []
    async with fake_server(partial_then_close, ack_last_seq) as fake:
        async with fake_client(fake, acked, version=version, window_size=5) as client:
            with trio.fail_after(WAIT):
                await client.send(events)
    first, second = fake.windows()
    assert [w.docs for w in first] == [events]
    assert [w.docs for w in second] == [events[2:]]
    assert [w.seqs for w in second] == [[1, 2, 3]]
    assert acked == [events[:2], events[2:]]
    assert client.stats["reconnects"] == 1 and client.stats["resent_events"] == 3
    assert client.stats["events_acked"] == 5


async def test_client_partial_acks_then_full_on_one_connection(autojump_clock: trio.testing.MockClock) -> None:
    async def trickle_acks(peer: RawPeer) -> None:
        w = await peer.read_window()
        for s in w.seqs:
            await trio.sleep(1.0)
            await peer.ack(s)
        await ack_last_seq(peer)

    events = make_events(4)
    acked: list[list[Any]] = []
    async with fake_server(trickle_acks) as fake:
        async with fake_client(fake, acked, window_size=4) as client:
            with trio.fail_after(WAIT):
                await client.send(events)
                await client.send(events)
    assert acked == [[e] for e in events] + [events]
    assert client.stats["connects"] == 1


async def test_client_keepalives_rearm_the_ack_timeout(autojump_clock: trio.testing.MockClock) -> None:
    async def keepalive_then_ack(peer: RawPeer) -> None:
        w = await peer.read_window()
        for _ in range(8):  # 32 s of keepalives, ack_timeout is 10 s
            await trio.sleep(4.0)
            await peer.ack(0)
        await peer.ack(w.seqs[-1])
        await ack_last_seq(peer)

    events = make_events(10)
    acked: list[list[Any]] = []
    async with fake_server(keepalive_then_ack) as fake:
        async with fake_client(fake, acked, window_size=10, ack_timeout=10.0) as client:
            t0 = trio.current_time()
            with trio.fail_after(60):
                await client.send(events)
            assert trio.current_time() - t0 == pytest.approx(32.0, abs=0.5)
    assert acked == [events]
    assert client.stats["keepalives"] == 8
    assert client.stats["connects"] == 1 and client.stats["reconnects"] == 0


async def test_client_no_ack_times_out_and_reconnects(autojump_clock: trio.testing.MockClock) -> None:
    events = make_events(6)
    acked: list[list[Any]] = []
    async with fake_server(read_and_stay_silent, ack_last_seq) as fake:
        async with fake_client(fake, acked, window_size=6, ack_timeout=5.0) as client:
            t0 = trio.current_time()
            with trio.fail_after(WAIT):
                await client.send(events)
            assert 5.0 <= trio.current_time() - t0 < 6.0
    assert [p.windows[0].docs for p in fake.peers] == [events, events]
    assert acked == [events]
    assert client.stats["reconnects"] == 1 and client.stats["protocol_errors"] == 0
    assert isinstance(client.last_error, AckWaitExpired) and client.last_error.waited >= 5.0
    assert "no ack" in str(client.last_error)


@pytest.mark.parametrize(
    "bad_ack",
    [
        pytest.param(lambda w: a_frame(len(w.seqs), V1), id="wrong-version"),
        pytest.param(lambda w: a_frame(len(w.seqs) + 1), id="beyond-window"),
        pytest.param(lambda w: struct.pack(">BBI", V2, ord("W"), 1), id="wrong-type"),
        pytest.param(lambda w: b"3A\x00\x00\x00\x01", id="bad-version-byte"),
    ],
)
async def test_client_bad_ack_is_a_protocol_error_and_reconnects(
    autojump_clock: trio.testing.MockClock, bad_ack: Callable[[RawWindow], bytes]
) -> None:
    async def send_bad_ack(peer: RawPeer) -> None:
        w = await peer.read_window()
        await peer.send(bad_ack(w))
        while not await peer.at_eof():
            pass

    events = make_events(5)
    acked: list[list[Any]] = []
    async with fake_server(send_bad_ack, ack_last_seq) as fake:
        async with fake_client(fake, acked, window_size=5) as client:
            with trio.fail_after(WAIT):
                await client.send(events)
    assert client.stats["protocol_errors"] == 1 and client.stats["reconnects"] == 1
    assert [p.windows[0].docs for p in fake.peers] == [events, events]
    assert acked == [events]


async def test_client_ack_going_backwards_is_a_protocol_error(autojump_clock: trio.testing.MockClock) -> None:
    async def backwards(peer: RawPeer) -> None:
        await peer.read_window()
        await peer.ack(3)
        await peer.ack(2)
        while not await peer.at_eof():
            pass

    events = make_events(5)
    acked: list[list[Any]] = []
    async with fake_server(backwards, ack_last_seq) as fake:
        async with fake_client(fake, acked, window_size=5) as client:
            with trio.fail_after(WAIT):
                await client.send(events)
    assert client.stats["protocol_errors"] == 1
    assert acked == [events[:3], events[3:]]
    assert fake.peers[1].windows[0].docs == events[3:]


async def test_client_gives_up_after_max_attempts(autojump_clock: trio.testing.MockClock) -> None:
    events = make_events(4)
    async with fake_server(close_at_once) as fake:
        async with fake_client(fake, window_size=10, max_attempts=3) as client:
            with trio.fail_after(WAIT), pytest.raises(SendFailed) as info:
                await client.send(events)
    assert info.value.unacked == events
    assert info.value.acked == 0
    assert len(fake.peers) == 3
    assert client.stats["connects"] == 3 and client.stats["failures"] == 3 and client.stats["events_acked"] == 0


async def test_client_gives_up_after_max_attempts_keeps_partial_progress(autojump_clock: trio.testing.MockClock) -> None:
    async def ack_two_then_close(peer: RawPeer) -> None:
        w = await peer.read_window()
        await peer.ack(w.seqs[1])

    events = make_events(5)
    acked: list[list[Any]] = []
    async with fake_server(ack_two_then_close, close_at_once) as fake:
        async with fake_client(fake, acked, window_size=5, max_attempts=2) as client:
            with trio.fail_after(WAIT), pytest.raises(SendFailed) as info:
                await client.send(events)
    assert acked == [events[:2]]
    assert info.value.unacked == events[2:]
    assert info.value.acked == 2


async def test_client_send_failed_unacked_covers_later_windows(autojump_clock: trio.testing.MockClock) -> None:
    async def ack_one_window_then_close(peer: RawPeer) -> None:
        w = await peer.read_window()
        await peer.ack(w.seqs[-1])

    events = make_events(6)
    acked: list[list[Any]] = []
    async with fake_server(ack_one_window_then_close, close_at_once) as fake:
        async with fake_client(fake, acked, window_size=2, max_attempts=2) as client:
            with trio.fail_after(WAIT), pytest.raises(SendFailed) as info:
                await client.send(events)
    assert acked == [events[:2]]
    assert info.value.unacked == events[2:]


async def test_client_running_sequence_wraps_past_2_32_skipping_0() -> None:
    handler = Collector()
    server = LumberjackServer(handler)
    events = make_events(8)
    acked: list[list[Any]] = []
    async with running(server, "memory") as ep:
        config = ClientConfig(window_size=3, sequence="running", first_seq=2**32 - 2, ack_timeout=10.0)
        async with LumberjackClient(ep.connect, config=config, on_acked=acked.append) as client:
            with trio.fail_after(WAIT):
                await client.send(events)
    assert handler.seqs == [2**32 - 2, 2**32 - 1, 1, 2, 3, 4, 5, 6]
    assert [b.last_seq for _, b in handler.batches] == [1, 4, 6]
    assert acked == [events[0:3], events[3:6], events[6:8]]
    assert client.stats["reconnects"] == 0 and client.stats["protocol_errors"] == 0


async def test_client_running_sequence_partial_ack_across_the_wrap(autojump_clock: trio.testing.MockClock) -> None:
    async def partial_then_close(peer: RawPeer) -> None:
        await peer.read_window()
        await peer.ack(2**32 - 1)  # 2 of 4
        await peer.ack(1)  # 3 of 4

    events = make_events(4)
    acked: list[list[Any]] = []
    async with fake_server(partial_then_close, ack_last_seq) as fake:
        async with fake_client(fake, acked, window_size=4, sequence="running", first_seq=2**32 - 2) as client:
            with trio.fail_after(WAIT):
                await client.send(events)
                await client.send(events[:1])
    first, second = fake.windows()
    assert [w.seqs for w in first] == [[2**32 - 2, 2**32 - 1, 1, 2]]
    assert second[0].docs == events[3:]
    assert 0 not in second[0].seqs + second[1].seqs
    assert acked == [events[:2], events[2:3], events[3:], events[:1]]


async def test_client_count_acks_against_go_lumber_style_server() -> None:
    handler = Collector()
    server = LumberjackServer(handler, config=ServerConfig(ack_mode="count"))
    events = make_events(25)
    acked: list[list[Any]] = []
    async with running(server, "sim") as ep:
        config = ClientConfig(window_size=10, sequence="running", first_seq=1000, ack_interpretation="count", ack_timeout=10.0)
        async with LumberjackClient(ep.connect, config=config, on_acked=acked.append) as client:
            with trio.fail_after(WAIT):
                await client.send(events)
    assert handler.seqs == list(range(1000, 1025))
    assert acked == [events[0:10], events[10:20], events[20:25]]
    assert client.stats["reconnects"] == 0


async def test_client_partial_count_acks(autojump_clock: trio.testing.MockClock) -> None:
    async def count_acks(peer: RawPeer) -> None:
        w = await peer.read_window()
        await peer.ack(2)
        await peer.ack(0)  # keepalive
        await peer.ack(len(w.seqs))
        await ack_count(peer)

    events = make_events(5)
    acked: list[list[Any]] = []
    async with fake_server(count_acks) as fake:
        async with fake_client(
            fake, acked, window_size=5, sequence="running", first_seq=100, ack_interpretation="count"
        ) as client:
            with trio.fail_after(WAIT):
                await client.send(events)
                await client.send(events)
    assert [w.seqs for w in fake.peers[0].windows] == [[100, 101, 102, 103, 104], [105, 106, 107, 108, 109]]
    assert acked == [events[:2], events[2:], events]
    assert client.stats["keepalives"] == 1 and client.stats["reconnects"] == 0


async def test_client_cancelled_mid_window_stays_usable(autojump_clock: trio.testing.MockClock) -> None:
    events = make_events(6)
    acked: list[list[Any]] = []
    async with fake_server(read_and_stay_silent, ack_last_seq) as fake:
        async with fake_client(fake, acked, window_size=10, ack_timeout=30.0) as client:
            with trio.move_on_after(3.0) as scope:
                await client.send(events[:3])
            assert scope.cancelled_caught
            with trio.fail_after(WAIT):
                await client.send(events[3:])
            assert trio.current_time() < 5.0  # a fresh connection at once, no ack timeout
    assert [[w.docs for w in p.windows] for p in fake.peers] == [[events[:3]], [events[3:]]]
    assert acked == [events[3:]]
    assert client.stats["connects"] == 2


async def test_client_reconnects_after_server_closed_idle_connection(autojump_clock: trio.testing.MockClock) -> None:
    # The server closes the connection between windows (e.g. its idle timeout):
    # the next send notices, reconnects and resends the whole window.
    async def one_window_then_close(peer: RawPeer) -> None:
        w = await peer.read_window()
        await peer.ack(w.seqs[-1])

    events = make_events(3)
    acked: list[list[Any]] = []
    async with fake_server(one_window_then_close, ack_last_seq) as fake:
        async with fake_client(fake, acked, window_size=3) as client:
            with trio.fail_after(WAIT):
                await client.send(events)
                await trio.sleep(1.0)
                await client.send(events)
    assert acked == [events, events]
    assert fake.peers[1].windows[0].docs == events


async def test_concurrent_sends_on_one_client_are_serialized() -> None:
    handler = Collector()
    server = LumberjackServer(handler)
    a, b = make_events(30, tag="a"), make_events(30, tag="b")
    async with running(server, "memory") as ep:
        async with LumberjackClient(ep.connect, config=ClientConfig(window_size=4, ack_timeout=10.0)) as client:
            with trio.fail_after(WAIT):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(client.send, a)
                    nursery.start_soon(client.send, b)
    docs = handler.docs
    assert sorted(docs, key=lambda d: (d["tag"], d["n"])) == a + b
    # each send's windows are not interleaved with the other's
    tags = "".join(d["tag"] for d in docs)
    assert tags in ("a" * 30 + "b" * 30, "b" * 30 + "a" * 30)
    assert client.stats["connects"] == 1


# --------------------------------------------------------------------------- more server edge cases (raw client)


async def test_server_pipelined_windows_are_acked_in_order(autojump_clock: trio.testing.MockClock) -> None:
    handler = Collector(delay=1.0)
    server = LumberjackServer(handler, config=ServerConfig(keepalive_interval=None))
    async with running(server, "memory") as ep:
        raw = RawPeer(await ep.connect())
        one = w_frame(2) + j_frame(1, {"w": 1}) + j_frame(2, {"w": 1})
        two = w_frame(3) + c_frame(j_frame(1, {"w": 2}) + j_frame(2, {"w": 2}) + j_frame(3, {"w": 2}))
        three = w_frame(1) + j_frame(7, {"w": 3})
        await raw.send(one + two + three)
        with trio.fail_after(WAIT):
            assert [await raw.read_ack() for _ in range(3)] == [(V2, 2), (V2, 3), (V2, 7)]
        await raw.aclose()
    assert [d["w"] for d in handler.docs] == [1, 1, 2, 2, 2, 3]


@pytest.mark.parametrize("answer", [True, False])
async def test_server_empty_window(autojump_clock: trio.testing.MockClock, answer: bool) -> None:
    handler = Collector()
    server = LumberjackServer(handler, config=ServerConfig(answer_empty_window=answer))
    async with running(server, "memory") as ep:
        raw = RawPeer(await ep.connect())
        await raw.send(w_frame(0) + w_frame(1) + j_frame(1, {"a": 1}))
        with trio.fail_after(WAIT):
            acks = [await raw.read_ack() for _ in range(2 if answer else 1)]
        assert acks == ([(V2, 0), (V2, 1)] if answer else [(V2, 1)])
        await raw.aclose()
    assert handler.docs == [{"a": 1}]


async def test_server_window_over_the_limit_closes(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    server = LumberjackServer(Collector())
    async with running(server, "memory") as ep:
        raw = RawPeer(await ep.connect())
        await raw.send(w_frame(20_000))
        with trio.fail_after(WAIT):
            assert await raw.at_eof()
        await raw.aclose()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "max_window=10000" in warnings[0] and "field count" in warnings[0] and "offset 2" in warnings[0]


async def test_server_acks_batches_decoded_before_a_protocol_error(autojump_clock: trio.testing.MockClock) -> None:
    handler = Collector()
    server = LumberjackServer(handler)
    async with running(server, "memory") as ep:
        raw = RawPeer(await ep.connect())
        await raw.send(w_frame(1) + j_frame(1, {"a": 1}) + b"2X\x00\x00\x00\x00")
        with trio.fail_after(WAIT):
            assert await raw.read_ack() == (V2, 1)
            assert await raw.at_eof()
        await raw.aclose()
    assert handler.docs == [{"a": 1}]
    assert server.stats["protocol_errors"] == 1


async def test_server_acks_a_client_that_half_closed(autojump_clock: trio.testing.MockClock) -> None:
    handler = Collector(delay=2.0)
    server = LumberjackServer(handler, config=ServerConfig(keepalive_interval=None))
    async with running(server, "sim", faults=Faults.none()) as ep:
        stream = await ep.connect()
        raw = RawPeer(stream)
        await raw.send(w_frame(2) + j_frame(1, {"a": 1}) + j_frame(2, {"a": 2}))
        assert isinstance(stream, trio.abc.HalfCloseableStream)
        await stream.send_eof()
        with trio.fail_after(WAIT):
            assert await raw.read_ack() == (V2, 2)
            assert await raw.at_eof()
        await raw.aclose()
    assert handler.docs == [{"a": 1}, {"a": 2}]
    assert server.stats["protocol_errors"] == 0


async def test_server_large_event() -> None:
    handler = Collector()
    server = LumberjackServer(handler)
    big = {"message": "x" * (1 << 20), "n": 0}
    async with running(server, "memory") as ep:
        async with LumberjackClient(ep.connect, config=ClientConfig(ack_timeout=10.0)) as client:
            with trio.fail_after(WAIT):
                await client.send([big, {"n": 1}])
    assert handler.docs == [big, {"n": 1}]


async def test_batches_refused_when_a_handler_is_set() -> None:
    server = LumberjackServer(Collector())
    with pytest.raises(RuntimeError):
        async with server.batches():
            pass


# --------------------------------------------------------------------------- TLS over the simulator (virtual time)


def sim_tls_contexts(tls_files: TlsFiles, *, client_cert: bool = False) -> tuple[Any, Any]:
    server_ctx = server_ssl_context(str(tls_files.server), client_ca=str(tls_files.ca) if client_cert else None)
    client_ctx = client_ssl_context(str(tls_files.ca), certfile=str(tls_files.client) if client_cert else None)
    return server_ctx, client_ctx


async def test_tls_over_trickling_simulator(autojump_clock: trio.testing.MockClock, tls_files: TlsFiles) -> None:
    server_ctx, client_ctx = sim_tls_contexts(tls_files, client_cert=True)
    handler = Collector()
    server = LumberjackServer(handler, ssl_context=server_ctx)
    events = make_events(40)
    async with running(server, "sim") as ep:

        async def connect() -> trio.abc.Stream:
            tls = trio.SSLStream(await ep.connect(), client_ctx, server_hostname="localhost")
            await tls.do_handshake()
            return tls

        async with LumberjackClient(connect, config=ClientConfig(window_size=9, ack_timeout=10.0)) as client:
            with trio.fail_after(WAIT):
                await client.send(events)
    assert handler.docs == events
    assert client.stats["reconnects"] == 0


async def test_tls_handshake_timeout(
    autojump_clock: trio.testing.MockClock, tls_files: TlsFiles, caplog: pytest.LogCaptureFixture
) -> None:
    server_ctx, _ = sim_tls_contexts(tls_files)
    server = LumberjackServer(Collector(), ssl_context=server_ctx, config=ServerConfig(handshake_timeout=4.0))
    async with running(server, "sim", faults=Faults.none()) as ep:
        raw = RawPeer(await ep.connect())  # connects, never says hello
        t0 = trio.current_time()
        with trio.fail_after(WAIT):
            assert await raw.at_eof()
        assert trio.current_time() - t0 == pytest.approx(4.0, abs=0.1)
        await raw.aclose()
    assert any("TLS handshake failed" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


async def test_client_write_stall_times_out_and_reconnects(autojump_clock: trio.testing.MockClock) -> None:
    # Beats/go-lumber bound the write of a window by `timeout` (30 s) too (specs/lumberjack/README.md §3.9).
    net = SimNet(SimRandom(5), Faults.none(), Trace(max_lines=100), send_buffer=4096)
    listener = net.listen(FAKE_ADDRESS)
    events = [{"n": i, "pad": "x" * 100} for i in range(200)]  # ~25 kB per window, plain frames
    served: list[RawWindow] = []

    async def server(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        stalled = await listener.accept()  # accepted, never read
        peer = RawPeer(await listener.accept())
        w = await peer.read_window()
        served.append(w)
        await peer.ack(w.seqs[-1])
        await trio.sleep_forever()
        del stalled

    async with trio.open_nursery() as nursery:
        await nursery.start(server)

        async def connect() -> trio.abc.Stream:
            return await net.connect(FAKE_ADDRESS)

        config = ClientConfig(window_size=200, compression_level=0, ack_timeout=5.0, backoff_initial=0.1)
        async with LumberjackClient(connect, config=config, rng=random.Random(0)) as client:
            with trio.fail_after(60):
                await client.send(events)
        nursery.cancel_scope.cancel()
    assert served[0].docs == events
    assert client.stats["reconnects"] == 1


# --------------------------------------------------------------------------- client: one pump per connection


@pytest.fixture
def pumps_run(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every Pump the client runs (one per connection, not one per window)."""
    import refwire.lumberjack.client as client_module
    from refwire.drivers import Pump

    runs: list[object] = []

    class CountingPump(Pump):
        async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> str:
            runs.append(self)
            return await super().run(task_status=task_status)

    monkeypatch.setattr(client_module, "Pump", CountingPump)
    return runs


async def test_client_runs_one_pump_for_all_the_windows_of_a_send(
    autojump_clock: trio.testing.MockClock, pumps_run: list[object]
) -> None:
    events = make_events(20)
    acked: list[list[Any]] = []
    async with fake_server(ack_last_seq) as fake:
        client = fake_client(fake, acked, window_size=2)
        with trio.fail_after(WAIT):
            await client.send(events)  # without `async with`: the pump lives for this call
            await client.send(events[:4])  # the same connection, another pump
        await client.aclose()
    assert flat(acked) == events + events[:4]
    assert client.stats["windows"] == 12 and client.stats["connects"] == 1
    assert len(pumps_run) == 2


async def test_client_under_async_with_runs_one_pump_per_connection(
    autojump_clock: trio.testing.MockClock, pumps_run: list[object]
) -> None:
    async def ack_two_windows_then_close(peer: RawPeer) -> None:
        for _ in range(2):
            w = await peer.read_window()
            await peer.ack(w.seqs[-1], w.version)

    events = make_events(8)
    acked: list[list[Any]] = []
    async with fake_server(ack_two_windows_then_close, ack_last_seq) as fake:
        async with fake_client(fake, acked, window_size=2) as client:
            with trio.fail_after(WAIT):
                await client.send(events[:4])
                await trio.sleep(1.0)  # the server closes the idle connection meanwhile
                await client.send(events[4:])
    assert flat(acked) == events
    assert client.stats["connects"] == 2 and client.stats["reconnects"] == 1
    assert len(pumps_run) == 2  # one per connection, across both sends


async def test_client_exceptions_leave_async_with_as_themselves(autojump_clock: trio.testing.MockClock) -> None:
    class Boom(Exception):
        pass

    def on_acked(events: list[Any]) -> None:
        raise Boom

    async with fake_server(close_at_once) as fake:
        with pytest.raises(SendFailed):
            async with fake_client(fake, window_size=2, max_attempts=1) as client:
                await client.send(make_events(3))
    async with fake_server(ack_last_seq) as fake:
        client = LumberjackClient(fake.connect, config=ClientConfig(window_size=2), on_acked=on_acked)
        with pytest.raises(Boom):
            await client.send(make_events(3))
        await client.aclose()
        with pytest.raises(Boom):
            async with client:
                await client.send(make_events(3))
