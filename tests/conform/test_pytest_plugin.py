"""The pytest plugin (``refwire.conform.pytest_plugin``, entry point pytest11):
the ``lumberjack_server`` fixture, and ``--refwire-conform`` turning the cases
into test items whose outcome is the verdict (cases of specs/lumberjack/README.md
§3-§4), run with ``pytester`` against refwire's own server."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from refwire.conform.pytest_plugin import RunningServer
from refwire.lumberjack.server import ServerConfig

from .broken_servers import AckOffByOne, FaultyConfig

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.timeout(60)

ARGS = ["-p", "no:cacheprovider", "-p", "no:randomly", "--refwire-time-scale", "0.5"]


@pytest.fixture
def lumberjack_server_config(request: pytest.FixtureRequest) -> Any:
    """Overrides the plugin's: the server below is refwire's, or refwire's with one change."""
    return getattr(request, "param", None)


def test_the_plugin_is_registered_and_loads_without_trio() -> None:
    code = "import sys, refwire.conform.pytest_plugin; print(sorted(m for m in ('trio', 'refwire.conform.runner') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    from importlib.metadata import entry_points

    assert [e.value for e in entry_points(group="pytest11") if e.name == "refwire"] == ["refwire.conform.pytest_plugin"]


def test_lumberjack_server_fixture_receives_events_and_stops_at_teardown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import json, socket, struct

        PORTS = []

        def send(address, events):
            host, port = address.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=5) as s:
                data = struct.pack(">2sI", b"2W", len(events))
                for seq, ev in enumerate(events, 1):
                    body = json.dumps(ev).encode()
                    data += struct.pack(">2sII", b"2J", seq, len(body)) + body
                s.sendall(data)
                return s.recv(6)

        def test_ship(lumberjack_server):
            assert lumberjack_server.address == f"127.0.0.1:{lumberjack_server.port}"
            ack = send(lumberjack_server.address, [{"message": "a"}, {"message": "b"}])
            assert ack == b"2A" + (2).to_bytes(4, "big")
            assert lumberjack_server.events == [{"message": "a"}, {"message": "b"}]
            assert lumberjack_server.batches == [[{"message": "a"}, {"message": "b"}]]
            PORTS.append(lumberjack_server.port)

        def test_stopped_after_the_previous_test():
            try:
                socket.create_connection(("127.0.0.1", PORTS[0]), timeout=2).close()
            except ConnectionRefusedError:
                return
            raise AssertionError("the server of the previous test still listens")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_lumberjack_server_sink_lets_the_delivery_case_be_judged(
    pytester: pytest.Pytester, lumberjack_server: RunningServer
) -> None:
    result = pytester.runpytest(
        *ARGS,
        "--refwire-conform",
        "lumberjack",
        "--refwire-server",
        lumberjack_server.address,
        "--refwire-sink",
        str(lumberjack_server.sink),
        "--refwire-cases",
        "ack-after-delivery",
    )
    result.assert_outcomes(passed=1)
    assert len(lumberjack_server.sink.read_text().splitlines()) == 2 == len(lumberjack_server.events)


def test_without_the_option_nothing_is_collected(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "lj.S" not in result.stdout.str()


def test_refwire_conform_against_refwire_passes_and_skips(pytester: pytest.Pytester, lumberjack_server: RunningServer) -> None:
    result = pytester.runpytest(
        *ARGS,
        "-v",
        "-rs",
        "--refwire-conform",
        "lumberjack",
        "--refwire-server",
        lumberjack_server.address,
        "--refwire-cases",
        "lj.S1.1,lj.S3.1,lj.S6.1,lj.S5.*",
    )
    result.assert_outcomes(passed=3, skipped=5)  # S5.1, S5.2, S5.4 and S5.5 are slow, S5.3 needs a sink
    result.stdout.fnmatch_lines(
        ["*refwire-conform-lumberjack::lj.S1.1 v2-single-window PASSED*", "*lj.S5.1 stall-mid-batch SKIPPED*"]
    )
    result.stdout.fnmatch_lines(["*SKIPPED: tagged slow (name it in --refwire-cases to run it)*"])
    result.stdout.fnmatch_lines(["*UNSUPPORTED: needs --sink*"])


@pytest.mark.parametrize("lumberjack_server_config", [ServerConfig(ack_mode="count")], indirect=True)
def test_non_strict_is_an_xfail(pytester: pytest.Pytester, lumberjack_server: RunningServer) -> None:
    result = pytester.runpytest(
        *ARGS,
        "-rx",
        "--refwire-conform",
        "lumberjack",
        "--refwire-server",
        lumberjack_server.address,
        "--refwire-cases",
        "lj.S3.1",
    )
    result.assert_outcomes(xfailed=1)
    result.stdout.fnmatch_lines(["*NON-STRICT: consistent with go-lumber's documented behaviour, not strict's*"])
    # judged against go-lumber's behaviour, it passes
    result = pytester.runpytest(
        *ARGS,
        "--refwire-conform",
        "lumberjack",
        "--refwire-server",
        lumberjack_server.address,
        "--refwire-cases",
        "lj.S3.1",
        "--refwire-profile",
        "go-lumber",
    )
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("lumberjack_server_config", [FaultyConfig(machine_class=AckOffByOne)], indirect=True)
def test_fail_is_a_failure_with_expected_observed_and_requirement(
    pytester: pytest.Pytester, lumberjack_server: RunningServer
) -> None:
    result = pytester.runpytest(
        *ARGS,
        "--refwire-conform",
        "lumberjack",
        "--refwire-server",
        lumberjack_server.address,
        "--refwire-cases",
        "lj.S3.1,lj.S6.1",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*FAIL lj.S3.1 ack-value-running-seq*",
            "*Requirement: specs/lumberjack/README.md §3.3*",
            "*Expected:*A 102*",
            "*Observed:*A 103*",
            "*Replay:*refwire conform lumberjack --server*--cases lj.S3.1*",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_bad_options_and_a_refused_first_connection(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-p", "no:cacheprovider", "--refwire-conform", "lumberjack")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--refwire-conform needs the server under test*"])
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--refwire-conform", "lumberjack", "--refwire-server", "127.0.0.1:9", "--refwire-profile", "x"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--refwire-conform", "lumberjack", "--refwire-server", f"127.0.0.1:{port}"
    )
    assert result.ret == 2
    result.stdout.fnmatch_lines(["*could not open the first connection*"])
