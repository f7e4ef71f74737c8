"""refwire's own Lumberjack client and server through the fault proxy: the
faults land on the frames the rules name, every acknowledged event is
delivered (at-least-once holds), and the decisions are the seed's.

A test whose client times out on a dropped or rewritten ack runs in virtual time
(``autojump_clock``) over memory streams (:func:`through_memory_proxy`): its
``ack_timeout`` then expires on the frames the faults hit and never on a slow
machine's late ack, so its decisions are the same run after run.  The TCP path
(the proxy's default transport, the CLI) keeps tests of its own."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from support.lumberjack_chaos import EVENTS, send_all
from support.memory_listener import MemoryListener

from refwire.chaos import ChaosProxy, ScheduleError, open_chaos, parse_schedule, rules_from
from refwire.chaos.proxy import UpstreamConnector
from refwire.lumberjack.client import ClientConfig, LumberjackClient
from refwire.lumberjack.server import LumberjackServer, ServerConfig

pytestmark = pytest.mark.timeout(60)


@asynccontextmanager
async def through_proxy(rules: Sequence[dict[str, Any]], seed: int = 7) -> AsyncIterator[tuple[ChaosProxy, list[Any], str, int]]:
    got: list[Any] = []

    async def handler(batch: Any, info: Any) -> None:
        got.extend(ev.fields()["i"] for ev in batch.events)

    server = LumberjackServer(handler)
    async with trio.open_nursery() as nursery:
        [address] = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        host, port = address.rsplit(":", 1)
        record = io.StringIO()
        async with open_chaos(
            "lumberjack", upstream=(host, int(port)), schedule=rules_from(rules, "lumberjack", seed), record=record
        ) as proxy:
            phost, pport = proxy.addresses[0].rsplit(":", 1)
            yield proxy, got, phost, int(pport)
        await server.shutdown(grace=0.5)
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def through_memory_proxy(
    rules: Sequence[dict[str, Any]] = (), seed: int = 7, *, replay: Any = None
) -> AsyncIterator[tuple[ChaosProxy, list[Any], UpstreamConnector]]:
    """:func:`through_proxy` over memory streams (for ``autojump_clock``): yields the
    proxy, the delivered ``i``s and the connector a client reaches the proxy with."""
    got: list[Any] = []

    async def handler(batch: Any, info: Any) -> None:
        got.extend(ev.fields()["i"] for ev in batch.events)

    server = LumberjackServer(handler)
    upstream, front = MemoryListener(), MemoryListener()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, [upstream])
        async with open_chaos(
            "lumberjack",
            schedule=rules_from(rules, "lumberjack", seed),
            record=io.StringIO(),
            replay=replay,
            listeners=[front],
            connect=upstream.connect,
        ) as proxy:
            yield proxy, got, front.connect
        await server.shutdown(grace=0.5)
        nursery.cancel_scope.cancel()


async def send_through(connect: UpstreamConnector, *, ack_timeout: float = 0.5) -> LumberjackClient:
    """:func:`support.lumberjack_chaos.send_all` through ``connect``: :data:`EVENTS`
    with quick retries; the client, closed, for its stats."""
    config = ClientConfig(window_size=10, ack_timeout=ack_timeout, backoff_initial=0.01, backoff_max=0.05, max_attempts=20)
    client = LumberjackClient(connect, config=config)
    async with client:
        await client.send(EVENTS)
    return client


async def test_no_rules_is_a_transparent_relay() -> None:
    with trio.fail_after(20):
        async with through_proxy([]) as (proxy, got, host, port):  # the proxy's default transport: TCP
            client = await send_all(host, port, ack_timeout=10.0)  # (real time: no ack is meant to time out)
    assert got == list(range(30)) and client.stats["reconnects"] == 0
    assert proxy.stats["frames"] >= 6 and proxy.decisions == []  # W + C per window, A per window


async def test_a_dropped_ack_is_resent_and_every_event_delivered(autojump_clock: trio.testing.MockClock) -> None:
    rules = [{"name": "drop-first-ack", "direction": "s2c", "type": "lj:A", "nth": 1, "connection": 1, "action": "drop"}]
    with trio.fail_after(20):
        async with through_memory_proxy(rules) as (proxy, got, connect):
            client = await send_through(connect)
    assert set(got) == set(range(30)) and len(got) > 30  # the unacked window came twice: at-least-once
    assert client.stats["reconnects"] >= 1
    (d,) = proxy.decisions
    assert (d["conn"], d["dir"], d["frame"], d["type"], d["action"], d["size_after"]) == (1, "s2c", 0, "A", "drop", 0)
    assert d["fields"]["seq"] == 10


async def test_logstash_style_keepalive_rewrite_and_a_reset(autojump_clock: trio.testing.MockClock) -> None:
    rules = [
        # the first ack becomes Logstash's keepalive (A 0): the client keeps waiting, then times out and resends
        {
            "name": "ack-to-keepalive",
            "direction": "s2c",
            "type": "A",
            "nth": 1,
            "connection": 1,
            "action": "rewrite",
            "field": "seq",
            "value": 0,
        },
        # the second connection is reset after its third client frame
        {"name": "reset", "direction": "c2s", "nth": 3, "connection": 2, "action": "reset"},
    ]
    with trio.fail_after(20):
        async with through_memory_proxy(rules) as (proxy, got, connect):
            client = await send_through(connect)
    assert set(got) == set(range(30))
    actions = [(d["rule"], d["conn"], d["frame"]) for d in proxy.decisions]
    assert actions == [("ack-to-keepalive", 1, 0), ("reset", 2, 2)]
    rewrite = proxy.decisions[0]
    assert rewrite["before"][-8:] != "00000000" and rewrite["after"][-8:] == "00000000"
    assert client.stats["keepalives"] >= 1


async def test_split_at_a_field_and_a_corrupted_length_once(autojump_clock: trio.testing.MockClock) -> None:
    rules = [
        {"name": "split-window", "direction": "c2s", "type": "W", "field": "count", "action": "split", "gap": 0.05},
        {"name": "bad-length", "direction": "c2s", "type": "C", "count": 1, "action": "corrupt", "field": "length"},
    ]
    with trio.fail_after(20):
        async with through_memory_proxy(rules) as (proxy, got, connect):
            await send_through(connect)
    assert set(got) == set(range(30))
    kinds = {d["rule"] for d in proxy.decisions}
    assert kinds == {"split-window", "bad-length"}
    assert sum(d["rule"] == "bad-length" for d in proxy.decisions) == 1  # count = 1


async def _dropped_acks(seed: int) -> list[tuple[int, int, float]]:
    rules = [{"name": "coin", "direction": "s2c", "type": "A", "probability": 0.4, "burst": 1, "action": "drop"}]
    async with through_memory_proxy(rules, seed=seed) as (proxy, got, connect):
        await send_through(connect, ack_timeout=0.3)
    assert set(got) == set(range(30))
    return [(d["conn"], d["frame"], d["draw"]) for d in proxy.decisions]


async def test_the_seed_decides_every_draw(autojump_clock: trio.testing.MockClock) -> None:
    with trio.fail_after(40):
        a = await _dropped_acks(2)
        b = await _dropped_acks(2)
        c = await _dropped_acks(5)
    assert a and c and a == b and a != c and all(draw < 0.4 for _, _, draw in a + c)


async def test_upstream_down_closes_the_client_and_logs_one_line(caplog: pytest.LogCaptureFixture) -> None:
    with trio.fail_after(10), caplog.at_level(logging.WARNING):
        record = io.StringIO()
        async with open_chaos("lumberjack", upstream=("127.0.0.1", 1), record=record) as proxy:
            host, port = proxy.addresses[0].rsplit(":", 1)
            s = await trio.open_tcp_stream(host, int(port))
            assert await s.receive_some(10) == b""
            await s.aclose()
    lines = [r.getMessage() for r in caplog.records if r.name == "refwire.chaos"]
    assert len(lines) == 1 and "the upstream 127.0.0.1:1 is down" in lines[0]
    assert any(json.loads(line)["event"] == "upstream-down" for line in record.getvalue().splitlines())


async def test_bytes_that_do_not_decode_pass_through_untouched() -> None:
    async def echo(stream: trio.SocketStream) -> None:
        while data := await stream.receive_some(1000):
            await stream.send_all(data)

    rules = [{"name": "drop-acks", "type": "A", "action": "drop"}]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            [lst] = await trio.open_tcp_listeners(0, host="127.0.0.1")
            nursery.start_soon(trio.serve_listeners, echo, [lst])
            port = lst.socket.getsockname()[1]
            async with open_chaos("lumberjack", upstream=("127.0.0.1", port), schedule=rules_from(rules, "lumberjack")) as proxy:
                host, pport = proxy.addresses[0].rsplit(":", 1)
                s = await trio.open_tcp_stream(host, int(pport))
                await s.send_all(b"GET / HTTP/1.1\r\n\r\n")
                got = b""
                while len(got) < 18:
                    got += await s.receive_some(100)
                assert got == b"GET / HTTP/1.1\r\n\r\n"
                await s.aclose()
            nursery.cancel_scope.cancel()
    assert proxy.decisions == []


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"type": "lj:Z", "action": "drop"}, "unknown frame type 'lj:Z' for lumberjack (known: A, W, J, D, C, ?)"),
        ({"type": "A", "action": "rewrite", "field": "sqe", "value": 1}, "unknown field 'sqe' for frame type 'A'"),
        ({"type": "A", "action": "explode"}, "unknown action 'explode'"),
        ({"type": "A", "action": "drop", "direction": "up"}, "unknown direction 'up'"),
        ({"type": "A", "action": "drop", "probability": 2}, "probability 2.0 is not between 0 and 1"),
        ({"type": "A", "action": "drop", "nht": 1}, "unknown key(s) nht"),
        ({"type": "A", "action": "rewrite", "field": "seq"}, "action 'rewrite' needs a value"),
    ],
)
def test_a_bad_schedule_is_refused_naming_what_is_wrong(rule: dict[str, Any], message: str) -> None:
    with pytest.raises(ScheduleError) as info:
        parse_schedule({"rule": [{"name": "r", **rule}]}, "lumberjack")
    assert message in str(info.value) and "rule 1 (r)" in str(info.value)


def test_cli_refuses_a_bad_schedule_in_one_line(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from refwire.cli import main

    bad = tmp_path / "s.toml"
    bad.write_text('[[rule]]\nname = "x"\ntype = "lj:A"\naction = "drop"\nfield = "sqe"\n')
    assert main(["chaos", "lumberjack", "--upstream", "127.0.0.1:1", "--schedule", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "refwire: schedule: rule 1 (x): unknown field 'sqe' for frame type 'A' of lumberjack" in err and "Traceback" not in err


def test_cli_runs_the_proxy_with_a_toml_schedule(tmp_path: Any) -> None:
    import signal
    import subprocess
    import sys
    import time

    schedule = tmp_path / "s.toml"
    schedule.write_text('seed = 5\n[[rule]]\nname = "drop-acks"\ndirection = "s2c"\ntype = "A"\naction = "drop"\n')
    record = tmp_path / "record.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "refwire.cli",
            "chaos",
            "lumberjack",
            "--upstream",
            "127.0.0.1:9",
            "--schedule",
            str(schedule),
            "--record",
            str(record),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "chaos lumberjack: listening on 127.0.0.1:" in line and "1 rule, seed 5" in line
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "0 connections, 0 frames, 0 actions" in rest  # stopped by Ctrl-C, cleanly
    assert json.loads(record.read_text().splitlines()[0])["seed"] == 5


async def test_replay_applies_the_recorded_decisions_frame_by_frame(autojump_clock: trio.testing.MockClock) -> None:
    """A run with a coin-flip rule, recorded; the record applied again to fresh
    traffic (no schedule, no draws) takes the same decisions at the same frames."""
    from refwire.chaos.proxy import replay_plan

    rules = [{"name": "coin", "direction": "s2c", "type": "A", "probability": 0.5, "burst": 1, "action": "drop"}]
    with trio.fail_after(30):
        async with through_memory_proxy(rules, seed=2) as (proxy, got, connect):
            await send_through(connect, ack_timeout=0.3)
        first = [(d["conn"], d["dir"], d["frame"], d["rule"], d["action"]) for d in proxy.decisions]
        assert first and set(got) == set(range(30))
        plan = replay_plan([json.dumps(d) for d in proxy.decisions])

        async with through_memory_proxy(replay=plan) as (again, got2, connect):  # no schedule: no draws
            await send_through(connect, ack_timeout=0.3)
    assert [(d["conn"], d["dir"], d["frame"], d["rule"], d["action"]) for d in again.decisions] == first
    assert set(got2) == set(range(30))


async def test_check_tells_a_servers_bug_from_an_injected_fault(autojump_clock: trio.testing.MockClock) -> None:
    """--check: a clean run and a dropped ack (the client recovers) break no
    invariant; an ack rewritten to a seq never received is reported as injected;
    a server that acks last seq + 1 is reported at the frames it sent."""
    from conform.broken_servers import BROKEN

    @asynccontextmanager
    async def broken_server(config: ServerConfig | None) -> AsyncIterator[UpstreamConnector]:
        """conform's ``broken_server`` (refwire's server, or one with a broken machine) on a memory listener."""

        async def handler(batch: Any, info: Any) -> None:
            pass  # conform's sink: none here

        server, listener = LumberjackServer(handler, config=config or ServerConfig()), MemoryListener()
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve, [listener])
            yield listener.connect
            nursery.cancel_scope.cancel()

    async def run(rules: Sequence[dict[str, Any]], upstream: UpstreamConnector) -> list[Any]:
        front = MemoryListener()
        async with open_chaos(
            "lumberjack", schedule=rules_from(rules, "lumberjack"), check=True, listeners=[front], connect=upstream
        ) as proxy:
            config = ClientConfig(window_size=10, ack_timeout=0.3, backoff_initial=0.01, backoff_max=0.05, max_attempts=3)
            try:
                async with LumberjackClient(front.connect, config=config) as client:
                    await client.send(EVENTS)
            except Exception:
                pass  # a broken server's acks make the client give up: the check is the point here
        return proxy.finish()

    off_by_one = next(b for b in BROKEN if b.name == "ack-off-by-one")
    assert off_by_one.raw is None and not off_by_one.late_delivery and off_by_one.config is not None  # a machine, no more
    with trio.fail_after(40):
        async with broken_server(None) as good:
            assert await run([], good) == []
            assert (
                await run([{"name": "drop", "direction": "s2c", "type": "A", "nth": 1, "connection": 1, "action": "drop"}], good)
                == []
            )
            bogus = await run(
                [
                    {
                        "name": "lie",
                        "direction": "s2c",
                        "type": "A",
                        "nth": 1,
                        "connection": 1,
                        "action": "rewrite",
                        "field": "seq",
                        "value": 999,
                    }
                ],
                good,
            )
        async with broken_server(off_by_one.config) as bad:
            buggy = await run([], bad)
    assert [(v.check, v.direction, v.frame) for v in bogus] == [("acked-but-not-received", "s2c", 0)]
    assert "injected" in bogus[0].detail
    assert buggy and all(v.check == "acked-but-not-received" and "server acked seq 11" in buggy[0].detail for v in buggy[:1])


async def test_the_readme_keepalive_rule_keeps_the_client_waiting_and_loses_no_ack(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The ``keepalive-before-ack`` rule of docs/examples/faults.toml (the chaos
    tutorial's and guide's schedule), as written there: a keepalive
    (``A 0``) arrives before the first ack, the client counts it and waits, and the
    ack that follows is not lost (no resend, no reconnect)."""
    import tomllib
    from pathlib import Path

    block = (Path(__file__).resolve().parents[2] / "docs" / "examples" / "faults.toml").read_text()
    (rule,) = [r for r in tomllib.loads(block)["rule"] if r["name"] == "keepalive-before-ack"]
    with trio.fail_after(20):
        async with through_memory_proxy([rule]) as (proxy, got, connect):
            client = await send_through(connect, ack_timeout=5.0)
    assert got == list(range(30))
    assert client.stats["keepalives"] == 1 and client.stats["reconnects"] == 0
    (d,) = proxy.decisions
    assert (d["rule"], d["conn"], d["dir"], d["frame"], d["action"]) == ("keepalive-before-ack", 1, "s2c", 0, "inject")


async def test_a_memory_connection_is_logged_captured_and_pcapd_with_stand_in_addresses(
    tmp_path: Any, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    """Streams without a socket (memory streams): the record, ``--capture``, ``--pcap``
    and the upstream-down line still work, with ``?`` for an address the logs would
    name and the pcap writer's stand-in addresses for each conversation."""
    from refwire.pcap import PcapWriter
    from refwire.pipeline.capture import read_pcap

    pytest.importorskip("dpkt")
    rules = [{"name": "drop-first-ack", "direction": "s2c", "type": "A", "nth": 1, "connection": 1, "action": "drop"}]
    got: list[Any] = []

    async def handler(batch: Any, info: Any) -> None:
        got.extend(ev.fields()["i"] for ev in batch.events)

    server, upstream, front = LumberjackServer(handler), MemoryListener(), MemoryListener()
    record = io.StringIO()
    with trio.fail_after(20), PcapWriter(tmp_path / "chaos.pcapng") as pcap:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve, [upstream])
            async with open_chaos(
                "lumberjack",
                schedule=rules_from(rules, "lumberjack", 1),
                record=record,
                capture=tmp_path / "cap",
                pcap=pcap,
                listeners=[front],
                connect=upstream.connect,
            ) as proxy:
                assert proxy.addresses == ["?"] and proxy.upstream_name == "?"
                await send_through(connect=front.connect)
                await trio.sleep(1)  # (virtual) the proxy sees both ends of each connection close
                assert proxy.connections() == [] and proxy.stats["connections"] == 2
                await upstream.aclose()  # the upstream goes away: the next client is closed at once
                with caplog.at_level(logging.WARNING):
                    stream = await front.connect()
                    assert await stream.receive_some(10) == b""
            await server.shutdown(grace=0.5)
            nursery.cancel_scope.cancel()
    assert set(got) == set(range(30))
    entries = [json.loads(line) for line in record.getvalue().splitlines()]
    assert entries[0]["upstream"] == "?"
    assert entries[-1] == {"conn": 3, "event": "upstream-down", "reason": "memory listener closed"}
    lines = [r.getMessage() for r in caplog.records if r.name == "refwire.chaos"]
    assert lines == ["chaos: connection 3: the upstream ? is down (memory listener closed); closing the client's connection"]
    metas = [json.loads(p.read_text()) for p in sorted((tmp_path / "cap" / "sent").glob("*.json"))]
    assert [(m["client"], m["server"]) for m in metas] == [("?", "?")] * 2  # both connections captured
    conns = read_pcap(tmp_path / "chaos.pcapng")
    assert len(conns) == 2 * 2 + 1  # two conversations per relayed connection, one for the refused client
    client_side, upstream_side = conns[0], conns[1]
    assert client_side.data["c2s"] == upstream_side.data["c2s"]  # no rule on c2s: passed on as sent
    assert len(client_side.data["s2c"]) < len(upstream_side.data["s2c"])  # the dropped first ack
