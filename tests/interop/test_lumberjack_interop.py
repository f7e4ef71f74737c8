"""refwire's Lumberjack server and client against real third-party peers
(their quirks: specs/lumberjack/README.md §7).

* pylogbeat 2.1.0 (PyPI client)            -> refwire server, plain and TLS
* timbersnake 0.1.0 client (PyPI)          -> refwire server
* lumberjack-client 1.0.3 (npm client)     -> refwire server, plain and TLS
* refwire client -> timbersnake 0.1.0 server (the only installable server), v2 and v1

Peers run as subprocesses (tests/interop/peers/*); each peer's quirks are
recorded next to the test that meets them and in the peer script's docstring.
A missing peer fails the test when ``CI`` is set and skips it otherwise.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from refwire.lumberjack import V1, V2, JsonFrame
from refwire.lumberjack.client import ClientConfig, LumberjackClient

pytestmark = pytest.mark.interop

N = 1000
PEER_TIMEOUT = 30.0  # per subprocess; the peers' own socket timeouts are shorter


def assert_ok(run: Any) -> dict[str, Any]:
    summary = run.summary
    assert run.returncode == 0 and summary.get("ok") is True, run.describe()
    return summary


def assert_no_server_errors(srv: Any) -> None:
    stats = srv.server.stats
    assert stats["protocol_errors"] == 0 and stats["app_errors"] == 0, stats


# --------------------------------------------------------------------------- pylogbeat -> refwire server


@pytest.mark.parametrize("transport", ["tcp", "tls"])
async def test_pylogbeat_to_refwire_server(
    transport: str, pylogbeat_send: Any, refwire_server: Any, run_peer: Any, tls: Any
) -> None:
    # pylogbeat quirks met here (specs/lumberjack/README.md §7): one send() = '2W n' + one '2C'
    # of '2J' (always zlib 6); sequence numbers RUN across windows on one
    # connection (1..100, 101..200, ...) and send() blocks until an ack EQUALS
    # the last one -- so this only passes because refwire acks with the batch's
    # last sequence number (a count ack, as go-lumber sends, hangs it on window 2).
    # TLS: it verifies the chain against ca_certs but forces check_hostname off.
    peer = pylogbeat_send.command()  # first: skip/fail before any server starts
    ctx = tls.server_context if transport == "tls" else None
    async with refwire_server(ssl_context=ctx) as srv:
        cmd = [*peer, srv.host, str(srv.port), str(N), "--batch", "100", "--timeout", "15"]
        if transport == "tls":
            cmd += ["--tls-ca", str(tls.ca_pem)]
        summary = assert_ok(await run_peer(cmd, timeout=PEER_TIMEOUT))
        assert summary["windows_acked"] == 10 and summary["last_seq"] == N
        got = srv.received
        assert [e["n"] for e in got.events()] == list(range(N))
        assert got.events()[7] == {"n": 7, "message": "pylogbeat event 7", "peer": "pylogbeat"}
        assert got.seqs() == [list(range(w * 100 + 1, w * 100 + 101)) for w in range(10)]
        assert len(got.connections()) == 1  # all ten windows on one connection
        assert all(isinstance(ev, JsonFrame) for _, b in got.batches for ev in b.events)
        assert_no_server_errors(srv)


# --------------------------------------------------------------------------- timbersnake client -> refwire server


async def test_timbersnake_client_to_refwire_server(timbersnake_send: Any, refwire_server: Any, run_peer: Any) -> None:
    # timbersnake client quirks (specs/lumberjack/README.md §7): every send() is a new connection
    # carrying C( '2W 3', '2J' seq 0, seq 1, ... ) -- W hard-coded to 3 and put
    # INSIDE the C, sequence numbers from 0 -- and it takes the first ack of any
    # value as success.  Only send()s of exactly 3 events are delivered whole by
    # a real server, so the driver sends 334 x 3 = 1002 events.  refwire accepts
    # W inside C (Logstash does; go-lumber closes) and acks '2A 2' (last seq).
    peer = timbersnake_send.command()
    count = 1002
    async with refwire_server() as srv:
        cmd = [*peer, srv.host, str(srv.port), str(count), "--timeout", "15"]
        summary = assert_ok(await run_peer(cmd, timeout=PEER_TIMEOUT))
        assert summary["sends"] == count // 3
        got = srv.received
        assert [e["n"] for e in got.events()] == list(range(count))
        assert got.events()[4] == {"n": 4, "message": "timbersnake event 4", "peer": "timbersnake"}
        assert got.seqs() == [[0, 1, 2]] * (count // 3)
        assert len(got.connections()) == count // 3  # one connection per send()
        assert_no_server_errors(srv)


# --------------------------------------------------------------------------- npm lumberjack-client -> refwire server


@pytest.mark.parametrize("mode", ["one-window", "per-event"])
@pytest.mark.parametrize("transport", ["tcp", "tls"])
async def test_lumberjack_client_to_refwire_server(
    transport: str, mode: str, lumberjack_client_send: Any, refwire_server: Any, run_peer: Any, tls: Any
) -> None:
    # lumberjack-client quirks (specs/lumberjack/README.md §7): it never reads acks and never
    # resends (the driver taps its socket and exits 0 only after the final ack of
    # every window); the window size cannot be chosen -- events logged while the
    # connection is being set up go out as ONE window ("one-window": W 1000),
    # after that every log() call is its own window, written back-to-back
    # without waiting for acks ("per-event": 1000 pipelined W 1 windows).
    # Sequence numbers are 1..n per window, so refwire's ack == window size.
    peer = lumberjack_client_send.command()
    ctx = tls.server_context if transport == "tls" else None
    async with refwire_server(ssl_context=ctx) as srv:
        cmd = [*peer, srv.host, str(srv.port), str(N), "--mode", mode, "--timeout", "15"]
        if transport == "tls":
            cmd += ["--tls-ca", str(tls.ca_pem)]
        summary = assert_ok(await run_peer(cmd, timeout=PEER_TIMEOUT, env=lumberjack_client_send.env))
        got = srv.received
        if mode == "one-window":
            assert summary["acks"] == 1
            assert got.seqs() == [list(range(1, N + 1))]
        else:
            assert summary["acks"] == N
            assert got.seqs() == [[1]] * N
        assert [e["n"] for e in got.events()] == list(range(N))
        assert got.events()[9] == {"n": 9, "message": "lumberjack-client event 9", "peer": "lumberjack-client"}
        assert len(got.connections()) == 1
        assert_no_server_errors(srv)


# --------------------------------------------------------------------------- refwire client -> timbersnake server


CLIENT_CASES = {
    # v2 must be compressed: timbersnake's plain-J path calls json.parse (does
    # not exist) and drops the connection.  It acks each C with the seq of the
    # last J in it (= 100 for a window of 100 numbered 1..100).
    "v2-compressed": (V2, 3, False),
    "v2-compressed-tls": (V2, 6, True),
    # v1 must be plain D frames: inside a C its D parser advances by the key
    # length instead of the value length and the batch is never acked.  Plain D
    # frames are acked one by one (A 1, A 2, ... A 100): refwire's client takes
    # them as partial acks of the window.
    "v1-plain": (V1, 0, False),
}


@pytest.mark.parametrize("case", list(CLIENT_CASES))
async def test_refwire_client_to_timbersnake_server(case: str, timbersnake_server: Any, tls: Any) -> None:
    version, level, use_tls = CLIENT_CASES[case]
    # Strings only, so the v1 D pairs carry exactly these values.
    events: list[dict[str, str]] = [{"n": str(i), "message": f"refwire event {i}"} for i in range(N)]
    async with timbersnake_server(1 if version == V1 else 2, tls if use_tls else None) as ts:
        config = ClientConfig(version=version, window_size=100, compression_level=level, ack_timeout=10.0, max_attempts=1)
        client = LumberjackClient.connect_tcp(
            "127.0.0.1", ts.port, ssl_context=tls.client_context if use_tls else None, config=config
        )
        async with client:
            with trio.fail_after(PEER_TIMEOUT):
                await client.send(events)  # returns once every window is fully acked
        assert client.stats["events_acked"] == N and client.stats["windows"] == 10, client.stats
        assert client.stats["failures"] == 0 and client.stats["reconnects"] == 0, client.stats
        await ts.wait_until(lambda: len(ts.events) >= N, 10, f"{N} events")
        final = await ts.stop()
        assert ts.errors == [] and final["errors"] == 0, ts.errors
        assert final["count"] == N and final["connections"] == 1, final
        assert [ev for _, ev in ts.events] == events
        assert [seq for seq, _ in ts.events] == list(range(1, 101)) * 10  # 1..n per window
