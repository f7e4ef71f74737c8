"""The slow Lumberjack cases (30 to 70 s each) against the real programs, with
``REFWIRE_PEERS_SLOW=1`` only: go-lumber's and Logstash's servers through a
stalled batch (lj.S5.1) and an idle connection (lj.S5.2), and go-lumber's
client through 40 s of keepalives before its ack (lj.C2.2) and a server that
never acks (lj.C3.1, declared unsupported: the library leaves reconnecting to
its caller).  The runs overlap: 75 s idle, under 3 min under load.  Each verdict is the one the
peer's profile predicts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from real_peers import TEST_TIMEOUT, Peer, Verdicts, assert_as_predicted, conform, free_port, server

SLOW = os.environ.get("REFWIRE_PEERS_SLOW", "").strip().lower() in ("1", "true", "yes")

pytestmark = [
    pytest.mark.peers,
    pytest.mark.timeout(TEST_TIMEOUT),
    pytest.mark.skipif(not SLOW, reason="the slow real-peer cases (30 to 70 s each) run with REFWIRE_PEERS_SLOW=1"),
]

SERVER_CASES = ("lj.S5.1", "lj.S5.2")
CLIENT_CASES = ("lj.C2.2", "lj.C3.1")
SLOW_ARGS = ("--tags", "slow", "--jobs", "2")


def _ljserver(peer: Peer, tmp: Path) -> Verdicts:
    if (unbuilt := Verdicts.of(peer)) is not None:
        return unbuilt
    argv = [str(peer.dir() / "bin" / "ljserver"), "-bind", "127.0.0.1:0", "-out", str(tmp / "sink.jsonl"), "-q"]
    with server(argv, tmp / "ljserver.log", ready=r"^listening on (127\.0\.0\.1:\d+)$") as (_, ready):
        assert ready is not None
        args = ["--server", ready[1], "--agent", "go-lumber-slow", "--profile", "go-lumber", "--cases", ",".join(SERVER_CASES)]
        return conform([*args, *SLOW_ARGS], tmp / "report")


def _logstash(peer: Peer, tmp: Path) -> Verdicts:
    if (unbuilt := Verdicts.of(peer)) is not None:
        return unbuilt
    port = free_port()
    argv = [str(peer.dir() / "bin" / "logstash-beats"), "--port", str(port), "--out", str(tmp / "sink.jsonl")]
    with server(argv, tmp / "logstash.log", port=port):
        args = ["--server", f"127.0.0.1:{port}", "--agent", "logstash-slow", "--profile", "logstash", "--cases", ",".join(SERVER_CASES)]
        return conform([*args, *SLOW_ARGS], tmp / "report")


def _ljclient(peer: Peer, tmp: Path) -> Verdicts:
    if (unbuilt := Verdicts.of(peer)) is not None:
        return unbuilt
    (declare := tmp / "declare.toml").write_text('unsupported = ["resend"]\n')
    exec_ = f"{peer.dir() / 'bin' / 'ljclient'} -c {{host}}:{{port}} -n {{events}} -timeout 30s -tls-ca {{tls_ca}}"
    args = ["--client", "--exec", exec_, "--agent", "go-lumber-client-slow", "--profile", "go-lumber", "--declare", str(declare)]
    return conform([*args, "--cases", ",".join(CLIENT_CASES), *SLOW_ARGS], tmp / "report")


@pytest.fixture(scope="module")
def slow_runs(go_lumber_peer: Peer, logstash_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> Mapping[str, Verdicts]:
    # (the directories are made here: tmp_path_factory is not for threads)
    tmp = {name: tmp_path_factory.mktemp(f"slow-{name}") for name in ("ljserver", "logstash", "ljclient")}
    runs: dict[str, Callable[[], Verdicts]] = {
        "go-lumber-server": lambda: _ljserver(go_lumber_peer, tmp["ljserver"]),
        "logstash": lambda: _logstash(logstash_peer, tmp["logstash"]),
        "go-lumber-client": lambda: _ljclient(go_lumber_peer, tmp["ljclient"]),
    }
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = {name: pool.submit(fn) for name, fn in runs.items()}
        return {name: f.result() for name, f in futures.items()}


@pytest.mark.parametrize(
    ("run", "case", "profile"),
    [
        *(("go-lumber-server", c, "go-lumber") for c in SERVER_CASES),
        *(("logstash", c, "logstash") for c in SERVER_CASES),
        *(("go-lumber-client", c, "go-lumber") for c in CLIENT_CASES),
    ],
)
def test_slow_case_as_its_profile_predicts(slow_runs: Mapping[str, Verdicts], run: str, case: str, profile: str) -> None:
    assert_as_predicted(slow_runs[run], "lumberjack", case, profile)
