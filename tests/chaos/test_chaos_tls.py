"""refwire chaos in a TLS deployment: the proxy terminates the client's TLS with
its own certificate and originates TLS to the server, so the faults still see
frames (a dropped Lumberjack ack is resent, every event arrives); a client that
does not trust the proxy's certificate is closed and logged, nothing relayed."""

from __future__ import annotations

import io
import ssl
from typing import Any

import pytest
import trio
import trustme

from refwire.chaos import open_chaos, rules_from
from refwire.lumberjack.client import ClientConfig, LumberjackClient
from refwire.lumberjack.server import LumberjackServer

pytestmark = pytest.mark.timeout(60)


def _contexts() -> tuple[ssl.SSLContext, ssl.SSLContext, ssl.SSLContext]:
    """(the server's, the proxy's as a server, a client trusting the CA)."""
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(server_ctx)
    proxy_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(proxy_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    return server_ctx, proxy_ctx, client_ctx


async def test_tls_terminated_and_reoriginated_frames_still_seen() -> None:
    server_ctx, proxy_ctx, client_ctx = _contexts()
    got: list[int] = []

    async def handler(batch: Any, info: Any) -> None:
        got.extend(ev.fields()["i"] for ev in batch.events)

    server = LumberjackServer(handler, ssl_context=server_ctx)
    rules = [{"name": "drop-ack", "direction": "s2c", "type": "lj:A", "nth": 1, "connection": 1, "action": "drop"}]
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            [address] = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            host, port = address.rsplit(":", 1)
            async with open_chaos(
                "lumberjack",
                upstream=(host, int(port)),
                schedule=rules_from(rules, "lumberjack", 1),
                record=io.StringIO(),
                tls=proxy_ctx,
                upstream_tls=client_ctx,
            ) as proxy:
                phost, pport = proxy.addresses[0].rsplit(":", 1)
                config = ClientConfig(window_size=5, ack_timeout=0.5, backoff_initial=0.01, backoff_max=0.05)
                client = LumberjackClient.connect_tcp(
                    phost, int(pport), ssl_context=client_ctx, server_hostname="localhost", config=config
                )
                async with client:
                    await client.send([{"i": i} for i in range(20)])
            await server.shutdown(grace=0.5)
            nursery.cancel_scope.cancel()
    assert [a["rule"] for a in proxy.decisions] == ["drop-ack"]  # the ack was seen as a frame inside TLS
    assert sorted(set(got)) == list(range(20)) and client.stats["reconnects"] >= 1


async def test_a_client_that_does_not_trust_the_proxy_is_closed() -> None:
    server_ctx, proxy_ctx, _ = _contexts()
    stranger = ssl.create_default_context()  # trusts the system store only

    async def handler(batch: Any, info: Any) -> None:
        pass

    server = LumberjackServer(handler, ssl_context=server_ctx)
    record = io.StringIO()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            [address] = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            host, port = address.rsplit(":", 1)
            async with open_chaos("lumberjack", upstream=(host, int(port)), record=record, tls=proxy_ctx) as proxy:
                phost, pport = proxy.addresses[0].rsplit(":", 1)
                tcp = await trio.open_tcp_stream(phost, int(pport))
                tls = trio.SSLStream(tcp, stranger, server_hostname="localhost")
                with pytest.raises((trio.BrokenResourceError, ssl.SSLError)):
                    await tls.do_handshake()
                await trio.aclose_forcefully(tls)
                with trio.fail_after(5):
                    while '"tls-failed"' not in record.getvalue():
                        await trio.sleep(0.01)
            await server.shutdown(grace=0.5)
            nursery.cancel_scope.cancel()
    assert proxy.stats["frames"] == 0
