"""The plugin's ``seastar_server`` fixture: refwire's Seastar RPC server with the
conformance verbs (specs/seastar-rpc/README.md §11), answering a sync test's
calls and stopped at teardown; ``--refwire-conform seastar-rpc`` against it."""

from __future__ import annotations

import pytest

from refwire.conform.pytest_plugin import RunningServer

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.timeout(60)

ARGS = ["-p", "no:cacheprovider", "-p", "no:randomly"]


def test_seastar_server_fixture_answers_and_stops_at_teardown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import socket
        import trio
        from refwire.seastar_rpc.client import SeastarClient

        PORTS = []

        def test_echo(seastar_server):
            async def main():
                async with SeastarClient.connect_tcp(seastar_server.host, seastar_server.port) as client:
                    return await client.call(100, b"hello")
            assert trio.run(main) == b"hello"
            assert seastar_server.server.stats["calls"] == 1
            PORTS.append(seastar_server.port)

        def test_stopped_after_the_previous_test():
            with socket.socket() as s:
                assert s.connect_ex(("127.0.0.1", PORTS[0])) != 0
        """
    )
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(passed=2)


def test_refwire_conform_seastar_against_the_fixture(pytester: pytest.Pytester, seastar_server: RunningServer) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest(
        *ARGS,
        "--refwire-conform",
        "seastar-rpc",
        "--refwire-server",
        seastar_server.address,
        "--refwire-cases",
        "ss.S1.*,ss.S2.2",
    )
    result.assert_outcomes(passed=10)  # the plain test, ss.S1.1-ss.S1.8 and ss.S2.2
