"""Real peers: the third-party implementations themselves, built from their
pinned sources by ``peers/build.sh`` (peers/README.md), run on 127.0.0.1 and
put through ``refwire conform``.

- ``REFWIRE_PEERS=skip`` skips every test here, with that reason.
- A peer that cannot be built (no toolchain and not root to install it, a
  compile error) skips its tests with the build's own words -- unless
  ``CI=true``, where the tests fail (in their call phase, so a strict xfail,
  which expects an AssertionError, does not hide it).  A machine with no
  source at all (no snapshot, and the clone cannot fetch) skips them, CI or
  not, and says so.
- A first build takes minutes (peers/README.md); after that the cache answers
  at once.  Every wait has a deadline; every process started here runs in a
  process group of its own and is stopped (SIGTERM, then SIGKILL) in a
  ``finally``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from real_peers import Peer, PeerRun, Verdicts, build_peer, conform, free_port, merge, server


@pytest.fixture(scope="session", autouse=True)
def _real_peers_on() -> None:
    """``REFWIRE_PEERS=skip``: skip before anything is built."""
    if os.environ.get("REFWIRE_PEERS", "").strip().lower() == "skip":
        pytest.skip("REFWIRE_PEERS=skip: the real-peer tests are turned off")


@pytest.fixture(scope="session")
def go_lumber_peer() -> Peer:
    """go-lumber v0.2.0 built by peers/build.sh: ``bin/ljserver``, ``bin/ljclient``."""
    return build_peer("go-lumber")


@pytest.fixture(scope="session")
def logstash_peer() -> Peer:
    """Logstash's Beats input (logstash-input-beats 7.0.9) built by peers/build.sh: ``bin/logstash-beats``."""
    return build_peer("logstash")


@pytest.fixture(scope="session")
def tank_peer() -> Peer:
    """The TANK broker and tank-cli (phaistos-networks/TANK) built by peers/build.sh."""
    return build_peer("tank")


@pytest.fixture(scope="session")
def seastar_peer() -> Peer:
    """Seastar 25.05's RPC library with our testee program, built by peers/build.sh."""
    return build_peer("seastar")


# --------------------------------------------------------------------------- the runs
# Session fixtures: each module asserts its peer's verdicts, and the
# compatibility matrix (test_peer_matrix.py) shows them all, from one run each.

#: The 80 MiB zlib bomb runs alone: while a server inflates it (and Logstash's few
#: executor threads parse it), the batches of cases running beside it would wait
#: for their acks.
LJ_BOMB = "lj.S4.4"


def _lj_server_run(peer: str, program: str, profile: str, common: list[str], tmp: Path, how: str, log: Path) -> PeerRun:
    fast = conform([*common, "--profile", profile, "--jobs", "4", "--exclude", LJ_BOMB], tmp / "report")
    bomb = conform([*common, "--profile", profile, "--cases", LJ_BOMB], tmp / "report-bomb")
    return PeerRun(peer, program, "server", "lumberjack", profile, merge(fast, bomb), how, log.read_text(errors="replace"))


@pytest.fixture(scope="session")
def go_lumber_server_run(go_lumber_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """ljserver (go-lumber's server) with its defaults, every fast server case."""
    program, how = "ljserver", "ljserver -bind 127.0.0.1:0 -out SINK"
    if (unbuilt := Verdicts.of(go_lumber_peer)) is not None:
        return PeerRun("go-lumber", program, "server", "lumberjack", "go-lumber", unbuilt, how)
    tmp = tmp_path_factory.mktemp("go-lumber-server")
    sink = tmp / "sink.jsonl"
    argv = [str(go_lumber_peer.dir() / "bin" / "ljserver"), "-bind", "127.0.0.1:0", "-out", str(sink), "-q"]
    with server(argv, tmp / "ljserver.log", ready=r"^listening on (127\.0\.0\.1:\d+)$") as (_, ready):
        assert ready is not None
        common = ["--server", ready[1], "--agent", "go-lumber-server", "--sink", str(sink)]
        return _lj_server_run("go-lumber", program, "go-lumber", common, tmp, how, tmp / "ljserver.log")


def _go_lumber_client_run(level: int, go_lumber_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    program = f"ljclient -compress {level}"
    how = f"ljclient -c {{host}}:{{port}} -n {{events}} -compress {level} -timeout 30s -tls-ca {{tls_ca}}"
    if (unbuilt := Verdicts.of(go_lumber_peer)) is not None:
        return PeerRun("go-lumber", program, "client", "lumberjack", "go-lumber", unbuilt, how)
    tmp = tmp_path_factory.mktemp(f"go-lumber-client-z{level}")
    exec_ = f"{go_lumber_peer.dir() / 'bin'}/{how}"
    args = ["--client", "--exec", exec_, "--agent", f"go-lumber-client-z{level}", "--profile", "go-lumber", "--jobs", "4"]
    return PeerRun("go-lumber", program, "client", "lumberjack", "go-lumber", conform(args, tmp / "report"), how)


@pytest.fixture(scope="session")
def go_lumber_client_plain_run(go_lumber_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """ljclient (go-lumber's v2 SyncClient) sending plain J frames, every fast client case."""
    return _go_lumber_client_run(0, go_lumber_peer, tmp_path_factory)


@pytest.fixture(scope="session")
def go_lumber_client_zlib3_run(go_lumber_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """ljclient sending one C per window at zlib level 3 (Beats' default)."""
    return _go_lumber_client_run(3, go_lumber_peer, tmp_path_factory)


@pytest.fixture(scope="session")
def logstash_server_run(logstash_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """logstash-beats (Logstash's Beats input) with the plugin's defaults, every fast server case."""
    program, how = "logstash-beats", "logstash-beats --port PORT --out SINK"
    if (unbuilt := Verdicts.of(logstash_peer)) is not None:
        return PeerRun("logstash", program, "server", "lumberjack", "logstash", unbuilt, how)
    tmp = tmp_path_factory.mktemp("logstash-server")
    sink = tmp / "sink.jsonl"
    port = free_port()
    argv = [str(logstash_peer.dir() / "bin" / "logstash-beats"), "--port", str(port), "--out", str(sink)]
    with server(argv, tmp / "logstash.log", port=port):
        common = ["--server", f"127.0.0.1:{port}", "--agent", "logstash-beats", "--sink", str(sink)]
        return _lj_server_run("logstash", program, "logstash", common, tmp, how, tmp / "logstash.log")
