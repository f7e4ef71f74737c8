"""TANK broker and client over real TCP on 127.0.0.1 (specs/tank/README.md §6):
produce/consume, long polls woken by produces, hostile connections closed
without harming others or stored data, idle close vs keepalive, a directory
log surviving a restart, and the CLI."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from support.memory_listener import MemoryListener

from refwire.tank import BrokerConfig, Message
from refwire.tank.client import ClientConfig, TankClient
from refwire.tank.disk import DirectoryStorage
from refwire.tank.errors import ConnectionLost
from refwire.tank.server import TankBroker

PING = b"\x03\x00\x00\x00\x00"


@pytest.fixture
async def broker_port(request: pytest.FixtureRequest) -> AsyncIterator[tuple[TankBroker, int]]:
    cfg = getattr(request, "param", BrokerConfig())
    broker = TankBroker(config=cfg)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with trio.open_nursery() as n:
        await n.start(broker.serve, listeners)
        yield broker, listeners[0].socket.getsockname()[1]
        await broker.shutdown(0.5)


@pytest.fixture
async def broker_mem(request: pytest.FixtureRequest) -> AsyncIterator[tuple[TankBroker, MemoryListener]]:
    """A broker on a memory listener: for the tests whose outcome turns on time (with ``autojump_clock``)."""
    cfg = getattr(request, "param", BrokerConfig())
    broker = TankBroker(config=cfg)
    listener = MemoryListener()
    async with trio.open_nursery() as n:
        await n.start(broker.serve, [listener])
        yield broker, listener
        await broker.shutdown(0.5)


async def test_produce_consume_long_poll(
    broker_mem: tuple[TankBroker, MemoryListener], autojump_clock: trio.testing.MockClock
) -> None:
    _broker, listener = broker_mem
    with trio.fail_after(10):
        async with TankClient(listener.connect) as c:
            assert await c.create_topic("events", 2) == 0
            big = [Message(b"m%03d-" % i + b"x" * 70, 1000 + i // 5) for i in range(600)]
            assert (await c.produce("events", 0, big)).error == 0  # > 512 messages: Snappy
            assert (await c.produce("events", 1, [Message(b"k", 1, b"key")], compress=False)).error == 0
            got: list[Any] = []
            seq = 0
            while len(got) < 600:
                pd = await c.consume("events", 0, seq, fetch_size=100)  # grows past the one large bundle
                assert pd.chunk is not None
                got += pd.chunk.messages
                seq = pd.chunk.next_seq
            assert [m.content for m in got] == [m.content for m in big] and got[-1].seq == 600

            async def later() -> None:
                await trio.sleep(0.3)
                await c.produce("events", 0, [Message(b"late", 5)])

            async with trio.open_nursery() as n:
                n.start_soon(later)
                t0 = trio.current_time()
                pd = await c.consume("events", 0, 601, max_wait=5)
                assert trio.current_time() - t0 == pytest.approx(0.3)  # woken by the produce, long before max_wait
            assert [m.content for m in pd.messages] == [b"late"]  # type: ignore[attr-defined]
            t0 = trio.current_time()
            pd = await c.consume("events", 0, 2**64 - 1, max_wait=0.4)
            assert pd.chunk is not None and pd.chunk.drained and trio.current_time() - t0 >= 0.3
            infos = await c.discover_partitions("events")
            assert [(i.first_avail, i.hwmark) for i in infos] == [(1, 601), (1, 1)]


async def _raw(port: int, data: bytes) -> bytes:
    s = await trio.open_tcp_stream("127.0.0.1", port)
    got = b""
    async with s:
        await s.send_all(data)
        with trio.move_on_after(3):
            while chunk := await s.receive_some(4096):
                got += chunk
    return got


@pytest.mark.parametrize(
    "payload",
    [
        b"\x42\x00\x00\x00\x00",  # unknown id
        b"\x04\x02\x00\x00\x00\x01\x00",  # obsolete ReplicaID
        b"\x01\xff\xff\xff\x7f",  # length past the limit
        # count-0 bundle (crashes the real broker)
        b"\x01\x17\x00\x00\x00" + bytes.fromhex("0200 01000000 00 00 00000000 01 06657665 6e7473 01 0000 02 0000"),
        # Snappy garbage
        b"\x01\x1b\x00\x00\x00" + bytes.fromhex("0200 01000000 00 00 00000000 01 06657665 6e7473 01 0000 06 05 10 00 676172"),
    ],
    ids=["unknown-id", "replica-id", "huge-length", "count-0", "snappy-garbage"],
)
async def test_hostile_connection_is_closed_others_unharmed(broker_port: tuple[TankBroker, int], payload: bytes) -> None:
    broker, port = broker_port
    with trio.fail_after(10):
        async with TankClient.connect_tcp("127.0.0.1", port) as c:
            await c.create_topic("events", 1)
            await c.produce("events", 0, [Message(b"before", 1)])
            got = await _raw(port, payload)
            assert got == PING  # greeted, then closed without an error frame (as the real broker)
            assert broker.stats["protocol_errors"] == 1
            await c.produce("events", 0, [Message(b"after", 2)])
            pd = await c.consume("events", 0, 0)
            assert [m.content for m in pd.messages] == [b"before", b"after"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("broker_mem", [BrokerConfig(idle_timeout=0.5)], indirect=True)
async def test_idle_close_and_keepalive(
    broker_mem: tuple[TankBroker, MemoryListener], autojump_clock: trio.testing.MockClock
) -> None:
    _broker, listener = broker_mem
    with trio.fail_after(10):
        t0 = trio.current_time()
        s = await listener.connect()
        got = b""
        async with s:
            with trio.move_on_after(3):
                while chunk := await s.receive_some(4096):
                    got += chunk
        assert got == PING
        assert trio.current_time() - t0 == pytest.approx(0.5)  # closed by the broker at its idle timeout, not by our 3 s cap
        async with TankClient(listener.connect, config=ClientConfig(ping_interval=0.2)) as c:
            await c.create_topic("t", 1)
            await trio.sleep(1.2)
            assert await c.create_topic("t", 1) == 1
            assert c.stats["connects"] == 1 and c.stats["pings_sent"] >= 3


async def test_directory_log_survives_restart(tmp_path: Path) -> None:
    with trio.fail_after(10):
        for round_ in range(2):
            storage = DirectoryStorage(tmp_path)
            broker = TankBroker(storage)
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            port = listeners[0].socket.getsockname()[1]
            async with trio.open_nursery() as n:
                await n.start(broker.serve, listeners)
                async with TankClient.connect_tcp("127.0.0.1", port) as c:
                    if round_ == 0:
                        await c.create_topic("logs", 1)
                        await c.produce("logs", 0, [Message(b"a", 1), Message(b"b", 1)])
                        await c.produce_sparse("logs", 0, [Message(b"c", 2, seq=10), Message(b"d", 2, seq=15)])
                    else:
                        await c.produce("logs", 0, [Message(b"e", 3)], compress=True)
                        pd = await c.consume("logs", 0, 0)
                        got = [(m.seq, m.content) for m in pd.messages]  # type: ignore[attr-defined]
                        assert got == [(1, b"a"), (2, b"b"), (10, b"c"), (15, b"d"), (16, b"e")]
                await broker.shutdown(0.2)
            storage.close()
            if round_ == 0:
                with open(tmp_path / "logs" / "0" / "data.log", "ab") as f:
                    f.write(b"\x20\x04")  # a torn entry: cut off on the next open
    assert DirectoryStorage(tmp_path).topics["logs"][0].last_assigned == 16


def test_cli_serve_send_consume(tmp_path: Path) -> None:
    exe = str(Path(sys.executable).parent / "refwire")
    serve = subprocess.Popen(
        [exe, "serve", "tank", "--listen", "127.0.0.1:0", "--topic", "ev:2"], stderr=subprocess.PIPE, text=True
    )
    try:
        assert serve.stderr is not None
        line = serve.stderr.readline()
        assert line.startswith("listening on "), line
        addr = line.split()[-1]

        def run(*a: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([exe, "send", "tank", addr, *a], capture_output=True, text=True, timeout=30)

        assert run("produce", "--keys", "ev", "a=1", "b=2").returncode == 0
        assert run("produce", "--partition", "1", "--sparse-base", "10", "--step", "2", "ev", "x", "y").returncode == 0
        out = run("consume", "ev").stdout.splitlines()
        assert [(d["seq"], d["key"], d["content"]) for d in map(__import__("json").loads, out)] == [(1, "a", "1"), (2, "b", "2")]
        out = run("consume", "ev", "--partition", "1", "--from", "11").stdout
        assert '"seq": 12' in out and '"seq": 10' not in out
        bad = run("consume", "nope")
        assert bad.returncode == 1 and "unknown topic" in bad.stderr and "Traceback" not in bad.stderr
    finally:
        serve.terminate()
        try:
            serve.wait(10)
        except subprocess.TimeoutExpired:
            serve.kill()


class _FailingWrites(trio.abc.Stream):
    """Gives ``incoming`` then waits forever; every write after the first ``ok_writes`` fails."""

    def __init__(self, incoming: bytes, ok_writes: int) -> None:
        self.incoming = incoming
        self.ok_writes = ok_writes
        self.written: list[bytes] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()
        if len(self.written) >= self.ok_writes:
            raise trio.BrokenResourceError("write failed (test)")
        self.written.append(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self.incoming:
            data, self.incoming = self.incoming, b""
            await trio.sleep(0.01)  # after the greeting has been written
            return data
        await trio.sleep_forever()
        raise AssertionError

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def test_client_write_failure_fails_the_request() -> None:
    stream = _FailingWrites(PING, ok_writes=0)

    async def connect() -> trio.abc.Stream:
        return stream

    with trio.fail_after(5):
        async with TankClient(connect) as c:
            with pytest.raises(ConnectionLost, match="send failed"):
                await c.status()
            await trio.testing.wait_all_tasks_blocked()
            assert c.stats["connection_lost"] == 1 and c.stats["requests"] == 0
            assert ("connecting", "reset", "closed") in c.transitions_seen or ("open", "reset", "closed") in c.transitions_seen


async def test_broker_write_failure_keeps_stored_data() -> None:
    from refwire.tank import CreateTopicRequest, ProducePartition, ProduceRequest, ProduceTopic, encode_bundle

    bundle = encode_bundle([Message(b"kept", 1)])
    incoming = (
        CreateTopicRequest(1, "t", 1).encode() + ProduceRequest(2, (ProduceTopic("t", (ProducePartition(0, bundle),)),)).encode()
    )
    stream = _FailingWrites(incoming, ok_writes=1)  # the greeting Ping goes out; the answers do not
    broker = TankBroker()
    with trio.fail_after(5):
        await broker._handle(stream)
    assert stream.written == [PING]
    assert broker.stats["requests"] == 2 and broker.open_connections == 0
    assert broker.storage.topics["t"][0].last_assigned == 1  # stored, though the answer was lost
    assert ("open", "reset", "closed") in broker.transitions_seen


async def test_each_request_is_a_debug_line(broker_port: tuple[TankBroker, int], caplog: pytest.LogCaptureFixture) -> None:
    """``refwire -vv serve tank``: a debug line per request, naming the connection and the request id."""
    caplog.set_level(logging.DEBUG, logger="refwire.tank")
    _, port = broker_port
    with trio.fail_after(20):
        async with TankClient.connect_tcp("127.0.0.1", port) as c:
            await c.create_topic("debug-lines")
    lines = [r.getMessage() for r in caplog.records if r.name == "refwire.tank" and r.levelno == logging.DEBUG]
    assert any(re.fullmatch(r"tank: connection \d+: CreateTopicRequest \(request \d+\)", line) for line in lines), lines
