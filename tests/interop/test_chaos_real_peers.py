"""Real third-party peers through ``refwire chaos``: the real Pravega client
(PyPI ``pravega==0.3.8``, Rust core) finds the store through refwire's
controller, which advertises the proxy in front of the store (what
``refwire serve pravega --advertise`` does), so its segment traffic goes
through the faults; it still writes every event exactly once and reads them
back in order (specs/pravega/README.md §5.6)."""

from __future__ import annotations

import io
from typing import Any

import pytest
import trio
from support.pravega_peer import run_peer as run_pravega_peer

from refwire.chaos import open_chaos, rules_from
from refwire.pravega.client import parse_events
from refwire.pravega.controller import PravegaController
from refwire.pravega.server import SegmentStoreServer

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


@pytest.mark.usefixtures("pravega_client")
async def test_the_real_pravega_client_through_a_reset_writes_each_event_once() -> None:
    server = SegmentStoreServer()
    # The 8th client-to-store frame of the first segment connection is cut by a reset (after a few appends).
    rules = [{"name": "reset", "direction": "c2s", "connection": 1, "nth": 8, "action": "reset"}]
    async with trio.open_nursery() as nursery:
        store_l = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(server.serve, store_l)
        store_port = store_l[0].socket.getsockname()[1]
        record = io.StringIO()
        async with open_chaos(
            "pravega", upstream=("127.0.0.1", store_port), schedule=rules_from(rules, "pravega", 4), record=record, check=True
        ) as proxy:
            phost, pport = proxy.addresses[0].rsplit(":", 1)
            ctl = PravegaController(server.admin, (phost, int(pport)))  # the proxy is the store clients are told of
            ctl_l = await trio.open_tcp_listeners(0, host="127.0.0.1")
            await nursery.start(ctl.serve, ctl_l)
            steps = {
                r["step"]: r
                for r in await run_pravega_peer(f"tcp://127.0.0.1:{ctl_l[0].socket.getsockname()[1]}", "events", 300, deadline=90)
            }
            await ctl.shutdown(grace=1)
        nursery.cancel_scope.cancel()
    assert [a["action"] for a in proxy.decisions] == ["reset"]
    assert proxy.stats["connections"] >= 2  # the client came back through the proxy
    assert steps["read"]["n"] == 300 and steps["read"]["in_order"] is True, steps["read"]
    stored, _ = parse_events(bytes(server.store.segments["sc/st/0.#epoch.0"].data))
    assert [p for _, p in stored] == [f"event {i}".encode() for i in range(300)]  # each exactly once
    assert proxy.checker is not None and proxy.checker.finish() == []


# --------------------------------------------------------------------------- Lumberjack peers


@pytest.mark.parametrize("transport", ["tcp", "tls"])
async def test_pylogbeat_through_the_proxy_with_acks_delayed_and_every_c_inner_frame_seen(
    transport: str, pylogbeat_send: Any, refwire_server: Any, run_peer: Any, tls: Any
) -> None:
    """pylogbeat (PyPI; it never reconnects, spec lumberjack §7) through refwire chaos
    into refwire's server with every ack delayed 0.2 s; with TLS the proxy
    terminates the client's TLS and originates its own.  Every event arrives
    once, in order, and --check finds nothing."""
    peer = pylogbeat_send.command()
    server_ctx = tls.server_context if transport == "tls" else None
    rules = [{"name": "slow-acks", "direction": "s2c", "type": "lj:A", "action": "delay", "seconds": 0.2}]
    async with refwire_server(ssl_context=server_ctx) as srv:
        upstream_tls = None
        if transport == "tls":
            import ssl as ssl_mod

            upstream_tls = ssl_mod.create_default_context(cafile=str(tls.ca_pem))
        async with open_chaos(
            "lumberjack",
            upstream=(srv.host, srv.port),
            schedule=rules_from(rules, "lumberjack", 1),
            record=io.StringIO(),
            check=True,
            tls=server_ctx,
            upstream_tls=upstream_tls,
            upstream_hostname="localhost",
        ) as proxy:
            phost, pport = proxy.addresses[0].rsplit(":", 1)
            cmd = [*peer, phost, pport, "300", "--batch", "100", "--timeout", "15"]
            if transport == "tls":
                cmd += ["--tls-ca", str(tls.ca_pem)]
            run = await run_peer(cmd, timeout=60)
        assert run.returncode == 0 and run.summary.get("ok") is True, run.describe()
        assert [e["n"] for e in srv.received.events()] == list(range(300))
    assert len(proxy.decisions) == 3 and {a["rule"] for a in proxy.decisions} == {"slow-acks"}
    assert proxy.checker is not None and proxy.checker.finish() == []


async def test_the_npm_lumberjack_client_through_the_proxy(
    lumberjack_client_send: Any, refwire_server: Any, run_peer: Any
) -> None:
    """The npm lumberjack-client (pipelined windows of one event, never reading acks
    itself) through refwire chaos: frames observed both ways, every event delivered,
    and --check finds nothing."""
    peer = lumberjack_client_send.command()
    async with refwire_server() as srv:
        async with open_chaos("lumberjack", upstream=(srv.host, srv.port), record=io.StringIO(), check=True) as proxy:
            phost, pport = proxy.addresses[0].rsplit(":", 1)
            run = await run_peer(
                [*peer, phost, pport, "200", "--mode", "per-event", "--timeout", "15"], timeout=60, env=lumberjack_client_send.env
            )
        assert run.returncode == 0 and run.summary.get("ok") is True, run.describe()
        assert [e["n"] for e in srv.received.events()] == list(range(200))
    assert proxy.stats["frames"] >= 2 * 200  # a W and a J (or C) per event, and their acks
    assert proxy.checker is not None and proxy.checker.finish() == []


@pytest.mark.parametrize("client", ["pylogbeat", "lumberjack-client"])
async def test_real_clients_into_timbersnakes_server_through_the_proxy(
    client: str, pylogbeat_send: Any, lumberjack_client_send: Any, timbersnake_server: Any, run_peer: Any
) -> None:
    """Both real clients into timbersnake's (PyPI) server through refwire chaos,
    windows split at their count field with a gap (pylogbeat's three; a seeded tenth
    of the npm client's 300): every event arrives
    once, and --check finds nothing -- timbersnake acks each frame it reads (a
    ``C`` with its last frame's seq, spec lumberjack §7), which is cumulative."""
    peer, args, env, which = (
        (pylogbeat_send, ["--batch", "100", "--timeout", "15"], None, {})  # its three windows
        if client == "pylogbeat"
        else (
            lumberjack_client_send,
            ["--mode", "per-event", "--timeout", "15"],
            lumberjack_client_send.env,
            {"probability": 0.1},
        )
    )
    rules = [{"name": "split-w", "direction": "c2s", "type": "lj:W", "field": "count", "gap": 0.02, "action": "split", **which}]
    async with timbersnake_server(2) as ts:
        async with open_chaos(
            "lumberjack",
            upstream=("127.0.0.1", ts.port),
            schedule=rules_from(rules, "lumberjack", 1),
            record=io.StringIO(),
            check=True,
        ) as proxy:
            phost, pport = proxy.addresses[0].rsplit(":", 1)
            run = await run_peer([*peer.command(), phost, pport, "300", *args], timeout=60, env=env)
        assert run.returncode == 0 and run.summary.get("ok") is True, run.describe()
        await ts.wait_until(lambda: len(ts.events) >= 300, 10, "300 events")
        final = await ts.stop()
    assert final["count"] == 300 and final["errors"] == 0 and ts.errors == [], final
    assert sorted(ev["n"] for _, ev in ts.events) == list(range(300))
    assert proxy.decisions and {a["rule"] for a in proxy.decisions} == {"split-w"}
    assert proxy.finish() == []
