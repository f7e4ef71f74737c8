"""Logstash's Beats input (logstash-plugins/logstash-input-beats 7.0.9: the Java
Netty server of org.logstash.beats) under ``refwire conform lumberjack``,
judged against the logstash profile.  The plugin's Ruby side is replaced by
peers/logstash's BeatsInputPeer, which writes each event to the sink before
the listener returns (the ack follows) and sets Jackson's StreamReadConstraints
as Logstash's jvm.options do.

Each case's expected verdict is derived from the case data: what the
logstash profile predicts (real_peers.assert_as_predicted), so a wrong
sentence in the profile fails here.  The fast cases only; about 40 s with a warm build cache
(the JVM's start included).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from real_peers import TEST_TIMEOUT, Peer, Verdicts, assert_as_predicted, conform, derived, free_port, merge, server

pytestmark = [pytest.mark.peers, pytest.mark.timeout(TEST_TIMEOUT)]

#: The 80 MiB zlib bomb runs alone: Logstash's beats handlers share a few executor
#: threads (one per core), and a case whose connection lands on the thread busy
#: inflating and parsing the bomb gets no ack within its wait (lj.S4.2 did).
BOMB = "lj.S4.4"

#: Every fast server case, judged by what the logstash profile predicts.
SERVER = derived("lumberjack", "server")


@dataclass(frozen=True)
class Run:
    verdicts: Verdicts
    log: str  #: the server's log (stdout and stderr)


@pytest.fixture(scope="module")
def logstash_run(logstash_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> Run:
    if (unbuilt := Verdicts.of(logstash_peer)) is not None:
        return Run(unbuilt, "")
    tmp = tmp_path_factory.mktemp("logstash-server")
    sink = tmp / "sink.jsonl"
    port = free_port()
    argv = [str(logstash_peer.dir() / "bin" / "logstash-beats"), "--port", str(port), "--out", str(sink)]
    with server(argv, tmp / "logstash.log", port=port):
        common = ["--server", f"127.0.0.1:{port}", "--agent", "logstash-beats", "--profile", "logstash", "--sink", str(sink)]
        fast = conform([*common, "--jobs", "4", "--exclude", BOMB], tmp / "report")
        bomb = conform([*common, "--cases", BOMB], tmp / "report-bomb")
    return Run(merge(fast, bomb), (tmp / "logstash.log").read_text(errors="replace"))


@pytest.fixture(scope="module")
def server_verdicts(logstash_run: Run) -> Verdicts:
    return logstash_run.verdicts


@pytest.mark.parametrize("case", SERVER)
def test_server_as_its_profile_predicts(server_verdicts: Verdicts, case: str) -> None:
    assert_as_predicted(server_verdicts, "lumberjack", case, "logstash")


def test_the_bomb_is_inflated_whole(logstash_run: Run) -> None:
    """lj.S4.4 FAILs Logstash because it inflates and acks the bomb, not because
    a JSON parser refused one long string: its log shows the whole batch."""
    assert "StreamConstraintsException" not in logstash_run.log, logstash_run.log[-2000:]


def test_versions_recorded(logstash_peer: Peer) -> None:
    """The build says which Netty and Jackson it ran with (verdicts can depend on them)."""
    versions = (logstash_peer.dir() / "versions.txt").read_text()
    for line in ("netty: ", "jackson-core: ", "jackson-databind: ", "jackson StreamReadConstraints: "):
        assert line in versions, versions


def test_jackson_limits_as_logstash(logstash_peer: Peer, logstash_run: Run) -> None:
    """Where jackson-core has StreamReadConstraints, the server raised the string
    length limit to Logstash's 200 M characters (Jackson's default is 20 M)."""
    versions = (logstash_peer.dir() / "versions.txt").read_text()
    log = logstash_run.log
    if "jackson StreamReadConstraints: present" in versions:
        assert "StreamReadConstraints: maxStringLength 200000000, maxNumberLength 10000" in log, log[:2000]
    else:
        assert "has no StreamReadConstraints" in log, log[:2000]
