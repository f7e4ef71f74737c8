"""Seastar 25.05's RPC library (scylladb/seastar) under ``refwire conform
seastar-rpc``, judged against the ``seastar`` profile.

Seastar is a library: the testee is our own program over it
(peers/seastar/seastar_testee.cc, built with the library's flags by
peers/build.sh), ``bin/seastar-testee``.  As a server it registers the
conformance verbs (specs/seastar-rpc/README.md §11) with a streaming domain and
a 16 MiB memory limit, and either Seastar's ``multi_algo_compressor_factory``
over LZ4 + LZ4_FRAGMENTED or the single ``lz4_compressor::factory``; as a client
it follows the contract of §12 with the real ``rpc::client``.

Each expected verdict is derived from the case data (``derived`` /
``assert_as_predicted``), not written here a second time: a case whose
``seastar`` expectation is wrong fails.  A case the runner still gets wrong
would be a strict xfail in ``KNOWN`` with the reason; there is none.  The fast
cases only; about a minute with a warm build cache (the first build takes
about 13 min at -j2 on 2 cores).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from conftest import SEASTAR_FLAGS, SINGLE_FACTORY
from real_peers import Peer, PeerRun, Verdicts, assert_as_predicted, build_peer, derived, server, timeout_for

pytestmark = [pytest.mark.peers, pytest.mark.timeout(timeout_for("seastar"))]

PROTOCOL = "seastar-rpc"
PROFILE = "seastar"
#: Cases whose verdict the runner gets wrong against the real library (case -> why): none left.
KNOWN_SERVER: dict[str, str] = {}
KNOWN_CLIENT: dict[str, str] = {}



# ----------------------------------------------------------------------------- server


@pytest.fixture(scope="module")
def server_verdicts(seastar_server_run: PeerRun) -> Verdicts:
    """The multi-algorithm server through every fast server case (conftest.py's session run)."""
    return seastar_server_run.verdicts


@pytest.mark.parametrize("case", derived(PROTOCOL, "server", known=KNOWN_SERVER))
def test_server_case(server_verdicts: Verdicts, case: str) -> None:
    assert_as_predicted(server_verdicts, PROTOCOL, case, PROFILE)


def test_server_supports_every_requirement(server_verdicts: Verdicts) -> None:
    """Our server has every §11 requirement (verbs, streaming, both compressors, the
    16 MiB limit), so no case may come back UNSUPPORTED, which the profile allows."""
    server_verdicts.entry("ss.S1.1")  # fails with the reason when the peer could not be built (CI=true)
    lacking = {c: server_verdicts.describe(c) for c, e in server_verdicts.cases.items() if e["verdict"] == "UNSUPPORTED"}
    assert not lacking, lacking


@pytest.fixture(scope="module")
def single_factory_verdicts(seastar_single_factory_run: PeerRun) -> Verdicts:
    """A server with the single LZ4 factory (as rpc_demo): LZ4_FRAGMENTED declared left out."""
    return seastar_single_factory_run.verdicts


@pytest.mark.parametrize("case", SINGLE_FACTORY)
def test_single_factory_server_case(single_factory_verdicts: Verdicts, case: str) -> None:
    assert_as_predicted(single_factory_verdicts, PROTOCOL, case, PROFILE)


def test_single_factory_declines_the_list(single_factory_verdicts: Verdicts) -> None:
    """ss.S1.3 passes a single plain factory because it declines ``LZ4,LZ4_FRAGMENTED``
    (spec §2), and the multi-algorithm one because it picks LZ4: both seen here."""
    obs = single_factory_verdicts.observation("ss.S1.3")
    assert obs.events == ("neg TIMEOUT HANDLER_DURATION",), obs.describe()
    assert single_factory_verdicts.verdict("ss.S4.1") == "UNSUPPORTED"


# ----------------------------------------------------------------------------- client


@pytest.fixture(scope="module")
def client_verdicts(seastar_client_run: PeerRun) -> Verdicts:
    """The real ``rpc::client`` following §12, once per client case."""
    return seastar_client_run.verdicts


@pytest.mark.parametrize("case", derived(PROTOCOL, "client", known=KNOWN_CLIENT))
def test_client_case(client_verdicts: Verdicts, case: str) -> None:
    assert_as_predicted(client_verdicts, PROTOCOL, case, PROFILE)


def test_build_is_cached(seastar_peer: Peer) -> None:
    """A second peers/build.sh finds the build in its cache: it only prints the directory."""
    built = seastar_peer.dir()
    assert build_peer("seastar").path == built
    assert (built / "bin" / "seastar-testee").is_file()
    assert "g++: " in (built / "versions.txt").read_text()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_testee_server_stops_cleanly_on_a_signal(seastar_peer: Peer, tmp_path: Path, sig: signal.Signals) -> None:
    """The server stops its connections and exits 0 on SIGTERM or SIGINT (it was killed by
    SIGSEGV: its server object outlived the reactor)."""
    argv = [str(seastar_peer.dir() / "bin" / "seastar-testee"), *SEASTAR_FLAGS, "--listen", "127.0.0.1:0"]
    with server(argv, tmp_path / "seastar.log", ready=r"^listening on (127\.0\.0\.1:\d+)$") as (proc, ready):
        assert ready is not None
        proc.send_signal(sig)
        assert proc.wait(60) == 0, (tmp_path / "seastar.log").read_text(errors="replace")
