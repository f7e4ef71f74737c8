"""Sessions with the real peers, recorded as ``refwire record --pcap`` records them, for
the dissector tests (test_peer_dissector.py).

A real server's session is recorded inside its conformance fixture (conftest.py), after
the conformance run and while the server is still up, so no peer is started a second
time: :func:`record_server_session` puts refwire's tap in front of it and talks through
the tap with refwire's own client, then files the pcapng (or why there is none) in
:data:`CAPTURES`.  A real client's session (test_peer_dissector.py) runs the
client through the tap to refwire's own server.  Each talk is a short ordinary session
of the protocol: every kind of frame the pair exchanges, a few of each.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import trio
from support.tshark import TSHARK, record_session

#: peer -> the pcapng of its session, or why there is none (a message for the test to fail with).
CAPTURES: dict[str, Path | str] = {}
#: Seconds a recorded session may take (each takes well under one).
SESSION_TIMEOUT = 60.0
#: peer (as tests/peers/conftest.py names its server runs) -> protocol
SERVER_PROTOCOL = {"go-lumber": "lumberjack", "logstash": "lumberjack", "tank": "tank", "seastar": "seastar-rpc"}
#: The topic the TANK sessions use (the conformance cases use names of their own).
TANK_TOPIC = "dissector-session"


async def lumberjack_talk(host: str, port: int) -> None:
    """Two connections of refwire's client, 7 events in windows of 3 (3, 3, 1): plain J
    frames, then one zlib C frame per window (specs/lumberjack/README.md §3)."""
    from refwire.lumberjack.client import ClientConfig, LumberjackClient

    for level in (0, 3):
        config = ClientConfig(window_size=3, compression_level=level, ack_timeout=10.0, max_attempts=1)
        async with LumberjackClient.connect_tcp(host, port, config=config) as client:
            await client.send([{"message": f"session line {i}", "level": level, "n": i} for i in range(7)])


async def tank_talk(host: str, port: int) -> None:
    """One connection of refwire's client: CreateTopic, a plain and a Snappy Produce,
    Consume, DiscoverPartitions, DiscoverTopics, Status (specs/tank/README.md §3-§6)."""
    from refwire.tank.bundles import Message
    from refwire.tank.client import TankClient

    async with TankClient.connect_tcp(host, port, timeout=10.0) as client:
        assert await client.create_topic(TANK_TOPIC, 1) in (0, 1)
        plain = await client.produce(TANK_TOPIC, 0, [Message(f"event {i}".encode(), 1_700_000_000_000 + i) for i in range(3)], compress=False)
        snappy = await client.produce(TANK_TOPIC, 0, [Message(b"snappy " * 40, 1_700_000_000_100, b"key")] * 20, compress=True)
        assert plain.error == 0 and snappy.error == 0, (plain, snappy)
        await client.consume(TANK_TOPIC, 0, 1)
        await client.discover_partitions(TANK_TOPIC)
        await client.discover_topics()
        await client.status()


async def seastar_talk(host: str, port: int) -> None:
    """Three connections of refwire's client (no compressor, LZ4, LZ4_FRAGMENTED offered),
    each: echo, a raising verb, three echoes at once (up to 100 KiB), sleep_ms and an
    unknown verb (the conformance verbs, specs/seastar-rpc/README.md §2-§4, §11)."""
    from refwire.seastar_rpc.client import ClientConfig, SeastarClient

    for compressors in ((), ("LZ4",), ("LZ4_FRAGMENTED",)):
        async with SeastarClient.connect_tcp(host, port, config=ClientConfig(compressors=compressors)) as client:
            assert await client.call(100, b"hello seastar", timeout=10) == b"hello seastar"
            with _raises():
                await client.call(102, b"boom", timeout=10)
            async def echo(size: int) -> None:
                payload = bytes(range(256)) * size
                assert await client.call(100, payload, timeout=10) == payload

            async with trio.open_nursery() as nursery:
                for i in range(3):
                    nursery.start_soon(echo, i * 200 + 1)
            assert await client.call(101, (20).to_bytes(4, "little"), timeout=10) == (20).to_bytes(4, "little")
            with _raises():
                await client.call(999, b"", timeout=10)


class _raises:
    """Expect the block to raise (the exception a verb's reply carries)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: Any) -> bool:
        assert et is not None and issubclass(et, Exception), "the call did not raise"
        return True


TALKS: dict[str, Callable[[str, int], Awaitable[None]]] = {"lumberjack": lumberjack_talk, "tank": tank_talk, "seastar-rpc": seastar_talk}


def record_server_session(peer: str, tmp: Path, address: str) -> None:
    """refwire's client -> tap -> the real server at ``address`` (``HOST:PORT``): the pcapng
    ``tmp/<peer>-session.pcapng`` into :data:`CAPTURES` (or why not).  Never raises: a failed
    session fails the dissector test, not the conformance fixture calling this."""
    if TSHARK is None:
        CAPTURES[peer] = "tshark is not installed"
        return
    host, port = address.rsplit(":", 1)
    pcap = tmp / f"{peer}-session.pcapng"
    try:
        CAPTURES[peer] = record_session(pcap, TALKS[SERVER_PROTOCOL[peer]], upstream=(host, int(port)), timeout=SESSION_TIMEOUT)
    except Exception as exc:  # (an ExceptionGroup from the tap's nursery too)
        CAPTURES[peer] = f"the session with the real {peer} server failed: {exc!r}"


def run_clients(*argvs: Sequence[str]) -> Callable[[str, int], Awaitable[None]]:
    """A talk that runs each ``argv`` (``{host}``/``{port}`` filled in) in turn, each to exit 0."""

    async def talk(host: str, port: int) -> None:
        for argv in argvs:
            cmd = [a.format(host=host, port=port) for a in argv]
            done = await trio.run_process(cmd, capture_stdout=True, capture_stderr=True, check=False)
            tail = (done.stdout + done.stderr).decode(errors="replace")[-600:]
            assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{tail}"

    return talk


async def tank_topic(host: str, port: int) -> None:
    """Create the session's topic (tank-client produces to an existing topic)."""
    from refwire.tank.client import TankClient

    async with TankClient.connect_tcp(host, port, timeout=10.0) as client:
        assert await client.create_topic(TANK_TOPIC, 1) == 0


def reference_then(protocol: str, setup: Callable[[str, int], Awaitable[None]]) -> Callable[[Any, Path], Awaitable[tuple[str, int]]]:
    """refwire's own server of ``protocol`` (an upstream of :func:`record_session`), ``setup`` run against it first."""
    from refwire.protocols import descriptor

    async def serve(nursery: trio.Nursery, work: Path) -> tuple[str, int]:
        running = await descriptor(protocol).load("reference_server")(nursery, None, work)
        await setup(running.host, running.port)
        return running.host, running.port

    return serve


class PravegaSession:
    """The real Pravega client (PyPI ``pravega``, Rust core) -> tap -> refwire's segment store:
    refwire's controller gives the client the tap's address as the store's (as ``refwire
    serve pravega --advertise``), so its segment traffic, not its controller calls, is recorded."""

    def __init__(self, script: Path, slug: str = "dissector", events: int = 5, seed: int = 7) -> None:
        self.script, self.slug, self.events, self.seed = script, slug, events, seed
        self.store: Any = None

    async def serve(self, nursery: trio.Nursery, work: Path) -> tuple[str, int]:
        from refwire.pravega.server import SegmentStoreServer

        self.store = SegmentStoreServer()
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(self.store.serve, listeners)
        return "127.0.0.1", int(listeners[0].socket.getsockname()[1])

    async def talk(self, host: str, port: int) -> None:
        from refwire.pravega.controller import PravegaController

        async with trio.open_nursery() as nursery:
            controller = PravegaController(self.store.admin, (host, port))
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            await nursery.start(controller.serve, listeners)
            uri = f"tcp://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
            await run_clients([sys.executable, str(self.script), uri, self.slug, str(self.events), str(self.seed)])(host, port)
            nursery.cancel_scope.cancel()
