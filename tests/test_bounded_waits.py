"""Every wait for a peer is bounded by default and says what it waited for.

In-process, each client of the five dialects talks to a peer that never
answers (one end of a memory stream nobody writes to) under trio's MockClock
with autojump: the bound passes in clock time, at once, and the error names
what did not come, from whom, and the bound.  Then each command is run once
against a silent listener (a socket that accepts and never writes) with a
small ``--timeout``-style option: one plain line, exit status 1.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
import trio
import trio.testing
from support.commands import REFWIRE
from support.socket_peers import socket_peer

from refwire.transport import PeerTimeout, first_error

pytestmark = pytest.mark.timeout(120)


def _silent_pair() -> tuple[trio.abc.Stream, trio.abc.Stream]:
    """(client end, peer end): the peer end is never written to."""
    client, peer = trio.testing.memory_stream_pair()
    return client, peer


# --------------------------------------------------------------------------- in-process, MockClock


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def _run(fn: object, clock: trio.testing.MockClock) -> None:
    trio.run(fn, clock=clock)  # type: ignore[arg-type]


def test_pravega_hello_is_bounded(mock_clock: trio.testing.MockClock) -> None:
    from refwire.pravega.client import PravegaConnection

    async def main() -> None:
        client, _peer = _silent_pair()
        conn = PravegaConnection(client)
        err: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(conn.run)
        except BaseException as exc:  # (in the nursery's group)
            err = first_error(exc)
        assert isinstance(err, PeerTimeout), err
        assert trio.current_time() == pytest.approx(10.0)
        assert "no Pravega Hello from" in str(err) and "in 10 s (is it a segment store?)" in str(err)

    _run(main, mock_clock)


def test_pravega_writer_gives_up_on_a_peer_that_never_says_hello(mock_clock: trio.testing.MockClock) -> None:
    from refwire.pravega.client import EventWriter, WriteFailed, WriterConfig

    peers: list[trio.abc.Stream] = []

    async def connect() -> trio.abc.Stream:
        client, peer = _silent_pair()
        peers.append(peer)
        return client

    async def main() -> None:
        writer = EventWriter("h", 1, "s/t/0", connect=connect, config=WriterConfig(connect_timeout=3, retry_protocol_errors=False))
        with pytest.raises(WriteFailed) as info:
            await writer.write([b"x"])
        assert "no Pravega Hello from" in str(info.value) and "in 3 s" in str(info.value)
        assert trio.current_time() == pytest.approx(3.0) and len(peers) == 1  # given up at once, not retried

    _run(main, mock_clock)


def test_pravega_request_after_hello_is_bounded(mock_clock: trio.testing.MockClock) -> None:
    """A store that says Hello and then nothing: each reply is bounded (30 s by default)."""
    from refwire.pravega.client import PravegaConnection, SegmentReader
    from refwire.pravega.commands import encode_command
    from refwire.pravega.frames import Hello

    async def main() -> None:
        client, peer = _silent_pair()
        await peer.send_all(encode_command(Hello()))
        conn = PravegaConnection(client)
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)
            start = trio.current_time()
            with pytest.raises(PeerTimeout) as info:
                await SegmentReader(conn, "s/t/0").read()
            assert trio.current_time() - start == pytest.approx(30.0)
            assert "no reply to ReadSegment from" in str(info.value) and "in 30 s" in str(info.value)
            nursery.cancel_scope.cancel()

    _run(main, mock_clock)


def test_pravega_draft_reads_and_setup_are_bounded(mock_clock: trio.testing.MockClock) -> None:
    from refwire.pravega.draft2017.client import DraftConnection, DraftWriter, DraftWriterConfig
    from refwire.pravega.draft2017.errors import DraftWriteFailed

    async def connect() -> trio.abc.Stream:
        return _silent_pair()[0]

    async def main() -> None:
        conn = DraftConnection(_silent_pair()[0])
        async with trio.open_nursery() as nursery:
            await nursery.start(conn.run)
            with pytest.raises(PeerTimeout, match=r"no reply to ReadSegment from .* in 30 s"):
                await conn.read("s/t/0", 0, 100)
            nursery.cancel_scope.cancel()
        writer = DraftWriter("h", 1, "s/t/0", connect=connect, config=DraftWriterConfig(connect_timeout=2, retry_protocol_errors=False))
        start = trio.current_time()
        with pytest.raises(DraftWriteFailed, match=r"no AppendSetup from .* in 2 s \(is it a segment store"):
            await writer.write([b"x"])
        assert trio.current_time() - start == pytest.approx(2.0)

    _run(main, mock_clock)


def test_tank_requests_are_bounded_by_default(mock_clock: trio.testing.MockClock) -> None:
    from refwire.tank.client import ClientConfig, ConnectionLost, TankClient

    async def connect() -> trio.abc.Stream:
        return _silent_pair()[0]

    async def main() -> None:
        async with TankClient(connect, config=ClientConfig(ping_interval=None)) as client:
            with pytest.raises(ConnectionLost, match=r"no answer to StatusRequest \(request 1\) from .* in 30 s \(is it a TANK broker\?\)"):
                await client.status()
        assert trio.current_time() == pytest.approx(30.0)

    _run(main, mock_clock)


def test_seastar_negotiation_and_replies_are_bounded(mock_clock: trio.testing.MockClock) -> None:
    from refwire.seastar_rpc.client import NoReply, RpcConnectionError, SeastarClient
    from refwire.seastar_rpc.demo import DEMO_VERBS, demo_registry
    from refwire.seastar_rpc.server import SeastarServer

    async def silent() -> trio.abc.Stream:
        return _silent_pair()[0]

    async def main() -> None:
        with pytest.raises(RpcConnectionError, match=r"no negotiation reply from .* in 10 s \(is it a Seastar RPC server\?\)"):
            async with SeastarClient(silent):
                pass
        assert trio.current_time() == pytest.approx(10.0)
        server = SeastarServer(demo_registry())
        async with trio.open_nursery() as nursery:

            async def served() -> trio.abc.Stream:
                client, peer = trio.testing.memory_stream_pair()
                nursery.start_soon(server.handle_stream, peer)
                return client

            async with SeastarClient(served) as client:
                start = trio.current_time()
                # the demo's sleep verb sleeps 60 s: the client gives up at its 30 s default
                with pytest.raises(NoReply, match=r"no reply to verb 5 \(call \d+\) from .* in 30 s"):
                    await client.call(DEMO_VERBS["sleep"], (60_000).to_bytes(4, "little"))
                assert trio.current_time() - start == pytest.approx(30.0)
            nursery.cancel_scope.cancel()

    _run(main, mock_clock)


def test_lumberjack_acks_are_bounded(mock_clock: trio.testing.MockClock) -> None:
    from refwire.lumberjack.client import ClientConfig, LumberjackClient, SendFailed

    async def connect() -> trio.abc.Stream:
        return _silent_pair()[0]

    async def main() -> None:
        client = LumberjackClient(connect, config=ClientConfig(max_attempts=1))
        with pytest.raises(SendFailed, match=r"no ack"):
            await client.send([{"a": 1}])
        assert trio.current_time() == pytest.approx(30.0)

    _run(main, mock_clock)


# --------------------------------------------------------------------------- commands, silent listener


@pytest.fixture(scope="module")
def silent_listener() -> Iterator[str]:
    """A socket that accepts connections and never writes a byte."""
    with socket_peer(lambda conn: None) as address:
        yield address


def test_every_client_command_gives_up_on_a_silent_listener(silent_listener: str) -> None:
    """One run of each client command (at once, in parallel) against a peer that
    accepts and never answers: one plain line saying what did not come."""
    peer = silent_listener
    cases = {
        "send pravega": (["send", "pravega", peer, "--segment", "s/t/0", "--count", "1", "--timeout", "0.5"],
                         f"no Pravega Hello from {peer} in 0.5 s (is it a segment store?)"),
        "send pravega --create": (["send", "pravega", peer, "--segment", "s/t/0", "--count", "1", "--create", "--timeout", "0.5"],
                                  f"no Pravega Hello from {peer} in 0.5 s"),
        "read pravega": (["read", "pravega", peer, "--segment", "s/t/0", "--timeout", "0.5"], f"no Pravega Hello from {peer} in 0.5 s"),
        "read pravega --follow": (["read", "pravega", peer, "--segment", "s/t/0", "--follow", "--timeout", "0.5"],
                                  f"no Pravega Hello from {peer} in 0.5 s"),
        "send pravega draft": (["send", "pravega", peer, "--segment", "s/t/0", "--count", "1", "--dialect", "draft-2017", "--timeout", "0.5"],
                               f"no AppendSetup from {peer} in 0.5 s"),
        "read pravega draft": (["read", "pravega", peer, "--segment", "s/t/0", "--dialect", "draft-2017", "--timeout", "0.5"],
                               f"no reply to ReadSegment from {peer} in 0.5 s"),
        "send tank": (["send", "tank", peer, "status", "--timeout", "0.5"], f"no answer to StatusRequest (request 1) from {peer} in 0.5 s"),
        "read tank": (["read", "tank", peer, "t", "--timeout", "0.5"], f"no answer to ConsumeRequest (request 1) from {peer} in 0.5 s"),
        "send seastar-rpc": (["send", "seastar-rpc", peer, "echo", "--connect-timeout", "0.5"],
                             f"no negotiation reply from {peer} in 0.5 s (is it a Seastar RPC server?)"),
        "send lumberjack": (["send", "lumberjack", peer, "--count", "1", "--ack-timeout", "0.5", "--max-attempts", "1"],
                            "gave up after 1 attempt: no ack for 0.5s"),
    }
    procs = {
        name: subprocess.Popen([*REFWIRE, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, (argv, _) in cases.items()
    }
    failures = []
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=90)
        expected = cases[name][1]
        if proc.returncode != 1 or expected not in err or "Traceback" in err + out:
            failures.append(f"{name}: exit {proc.returncode}, expected {expected!r} in:\n{err}")
    assert not failures, "\n".join(failures)
