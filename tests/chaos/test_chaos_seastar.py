"""refwire chaos with Seastar RPC: the negotiation is read in both directions and
configures both (specs/seastar-rpc/README.md §2), so requests and responses are
frames even inside LZ4 envelopes; rules match them by verb and msg_id, and
--check tells a reply the server never owed from one the proxy forged."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from refwire.chaos import ChaosProxy, open_chaos, rules_from
from refwire.seastar_rpc.client import ClientConfig, SeastarClient
from refwire.seastar_rpc.demo import demo_registry
from refwire.seastar_rpc.errors import CallTimeout
from refwire.seastar_rpc.server import SeastarServer

pytestmark = pytest.mark.timeout(60)

ECHO = 2  # the demo echo verb


@asynccontextmanager
async def proxied(rules: Sequence[dict[str, Any]], compressors: Sequence[str]) -> AsyncIterator[tuple[ChaosProxy, SeastarClient]]:
    server = SeastarServer(demo_registry())
    async with trio.open_nursery() as nursery:
        [address] = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        host, port = address.rsplit(":", 1)
        async with open_chaos(
            "seastar-rpc",
            upstream=(host, int(port)),
            schedule=rules_from(rules, "seastar-rpc", 2),
            record=io.StringIO(),
            check=True,
        ) as proxy:
            phost, pport = proxy.addresses[0].rsplit(":", 1)
            async with SeastarClient.connect_tcp(
                phost, int(pport), config=ClientConfig(compressors=tuple(compressors))
            ) as client:
                yield proxy, client
        await server.shutdown(0.5)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("compressors", [(), ("LZ4",), ("LZ4_FRAGMENTED",)])
async def test_requests_and_responses_are_frames_even_compressed(compressors: tuple[str, ...]) -> None:
    with trio.fail_after(20):
        async with proxied([], compressors) as (proxy, client):
            for i in range(5):
                assert await client.call(ECHO, b"hello %d" % i) == b"hello %d" % i
    assert proxy.decisions == []
    assert proxy.checker is not None and proxy.checker.finish() == []
    assert proxy.stats["frames"] >= 2 + 5 + 5  # both negotiation frames, the requests and their responses


async def test_a_dropped_response_times_the_call_out_and_the_others_are_answered() -> None:
    rules = [{"name": "drop-3", "direction": "s2c", "type": "ss:response", "where": {"msg_id": 3}, "action": "drop"}]
    with trio.fail_after(20):
        async with proxied(rules, ("LZ4",)) as (proxy, client):
            got: list[bytes | None] = []
            for i in range(1, 6):
                # only the dropped reply's call may time out (0.5 s, expected to expire); the others
                # are answered in ms and wait up to 10 s, so a busy machine cannot time them out
                try:
                    got.append(await client.call(ECHO, b"m%d" % i, timeout=0.5 if i == 3 else 10.0))
                except CallTimeout:
                    got.append(None)
    assert got == [b"m1", b"m2", None, b"m4", b"m5"]
    assert [(a["rule"], a["type"], a["fields"]["msg_id"]) for a in proxy.decisions] == [("drop-3", "response", 3)]


async def test_check_flags_a_reply_the_proxy_forged() -> None:
    """An uncompressed response's msg_id rewritten to 99 (little-endian, as Seastar writes it):
    the client got a reply it never asked for, and the check says the proxy did it."""
    rules = [
        {
            "name": "forge",
            "direction": "s2c",
            "type": "ss:response",
            "where": {"msg_id": 2},
            "field": "msg_id",
            "value": 99,
            "action": "rewrite",
        }
    ]
    with trio.fail_after(20):
        async with proxied(rules, ()) as (proxy, client):
            assert await client.call(ECHO, b"a") == b"a"
            with pytest.raises(CallTimeout):
                await client.call(ECHO, b"b", timeout=0.5)
    assert proxy.checker is not None
    [v] = proxy.checker.finish()
    assert v.check == "reply-without-request" and "msg_id 99" in v.detail and "injected fault" in v.detail


@pytest.mark.parametrize("compress", [None, "LZ4"])
async def test_a_request_sent_with_the_negotiation_is_relayed_without_waiting_for_more(compress: str | None) -> None:
    """A client may write its negotiation and its first request at once, before
    the server's reply says how frames look (§2).  The proxy holds the request
    until that reply configures its decoder, then relays it at once: the call is
    answered although the client sends nothing more."""
    from refwire.seastar_rpc.compression import envelope, make_compressor
    from refwire.seastar_rpc.frames import Features, Request

    server = SeastarServer(demo_registry())
    async with trio.open_nursery() as nursery:
        [address] = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        host, port = address.rsplit(":", 1)
        async with open_chaos("seastar-rpc", upstream=(host, int(port)), record=io.StringIO(), check=True) as proxy:
            phost, pport = proxy.addresses[0].rsplit(":", 1)
            stream = await trio.open_tcp_stream(phost, int(pport))
            request = Request(ECHO, 1, b"early", 0).encode(with_timeout=True)
            if compress is not None:  # refwire's server takes the one compressor offered
                request = envelope(make_compressor(compress), request)
            with trio.fail_after(5):
                await stream.send_all(Features(compress=compress, timeout=True).encode() + request)
                while proxy.stats["frames"] < 4:  # both negotiations, the request, its response
                    assert await stream.receive_some(65536)
            await stream.aclose()
        await server.shutdown(0.5)
        nursery.cancel_scope.cancel()
    assert proxy.checker is not None and proxy.checker.finish() == []


#: The one call the "late" rule's reply is held past: the second request (msg_id 2 on the first connection).
LATE_ATTEMPT = 1
#: Its timeout, expected to expire: the reply is held 0.6 s after the request reached the proxy.
LATE_TIMEOUT = 0.3
#: Every other call's: expected ~20 ms (the split's gap), so 10 s expires only on a hang, never under load.
CALL_TIMEOUT = 10.0


async def _calls_through(rules: Sequence[dict[str, Any]], replay: Any = None) -> tuple[ChaosProxy, list[bytes], int]:
    """Six echo calls, each retried (on a new connection after an error) until answered;
    returns the proxy, the answers and how many calls timed out.

    Only the call whose reply the "late" rule holds has a short timeout; after it
    times out, the next call waits until the late reply has come (and been ignored),
    so no other call's reply queues behind the held one.  Which frames the calls
    are, and so the decisions, do not depend on how fast the machine is."""
    from refwire.seastar_rpc.errors import RpcConnectionError, RpcError

    server = SeastarServer(demo_registry())
    answers: list[bytes] = []
    timeouts = 0
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            [address] = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            host, port = address.rsplit(":", 1)
            schedule = rules_from(rules, "seastar-rpc", 2)
            async with open_chaos(
                "seastar-rpc", upstream=(host, int(port)), schedule=schedule, record=io.StringIO(), check=True, replay=replay
            ) as proxy:
                phost, pport = proxy.addresses[0].rsplit(":", 1)
                i = attempt = 0
                while i < 6:
                    async with SeastarClient.connect_tcp(phost, int(pport)) as client:
                        while i < 6:
                            timeout = LATE_TIMEOUT if attempt == LATE_ATTEMPT else CALL_TIMEOUT
                            attempt += 1
                            try:
                                answers.append(await client.call(ECHO, b"call %d" % i, timeout=timeout))
                                i += 1
                            except CallTimeout:
                                timeouts += 1  # the reply was held past the call's timeout: call again once it came
                                while client.stats["stray"] == 0:
                                    await trio.sleep(0.01)
                            except (RpcConnectionError, RpcError):
                                break  # the connection is gone: a new one
            await server.shutdown(0.5)
            nursery.cancel_scope.cancel()
    return proxy, answers, timeouts


async def test_faults_between_refwire_peers_every_call_answered_and_replay_repeats_them() -> None:
    """A reply delayed past the call's timeout (its late arrival is not a violation:
    the id was issued), a request split at its msg_id field and a reset after a
    request: every call is answered on retry, --check finds nothing, and the
    record replayed takes the same decisions at the same frames."""
    from refwire.chaos.proxy import replay_plan

    rules = [
        {
            "name": "late",
            "direction": "s2c",
            "type": "ss:response",
            "where": {"msg_id": 2},
            "count": 1,
            "seconds": 0.6,
            "action": "delay",
        },
        {"name": "split", "direction": "c2s", "type": "ss:request", "field": "msg_id", "gap": 0.02, "action": "split"},
        {"name": "rst", "direction": "c2s", "type": "ss:request", "where": {"msg_id": 5}, "count": 1, "action": "reset"},
    ]
    proxy, answers, timeouts = await _calls_through(rules)
    assert answers == [b"call %d" % i for i in range(6)]
    assert timeouts == 1
    assert proxy.finish() == []
    first = [(d["conn"], d["dir"], d["frame"], d["rule"], d["action"]) for d in proxy.decisions]
    assert {r for *_, r, _ in first} == {"late", "split", "rst"}
    again, answers2, timeouts2 = await _calls_through([], replay=replay_plan([json.dumps(d) for d in proxy.decisions]))
    assert [(d["conn"], d["dir"], d["frame"], d["rule"], d["action"]) for d in again.decisions] == first
    assert answers2 == answers and timeouts2 == 1
