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

import pytest
from real_peers import TEST_TIMEOUT, Peer, PeerRun, Verdicts, assert_as_predicted, derived

pytestmark = [pytest.mark.peers, pytest.mark.timeout(TEST_TIMEOUT)]

#: Every fast server case, judged by what the logstash profile predicts.
SERVER = derived("lumberjack", "server")


@pytest.fixture(scope="module")
def server_verdicts(logstash_server_run: PeerRun) -> Verdicts:
    return logstash_server_run.verdicts


@pytest.mark.parametrize("case", SERVER)
def test_server_as_its_profile_predicts(server_verdicts: Verdicts, case: str) -> None:
    assert_as_predicted(server_verdicts, "lumberjack", case, "logstash")


def test_the_bomb_is_inflated_whole(logstash_server_run: PeerRun) -> None:
    """lj.S4.4 FAILs Logstash because it inflates and acks the bomb, not because
    a JSON parser refused one long string: its log shows the whole batch."""
    assert "StreamConstraintsException" not in logstash_server_run.log, logstash_server_run.log[-2000:]


def test_versions_recorded(logstash_peer: Peer) -> None:
    """The build says which Netty and Jackson it ran with (verdicts can depend on them)."""
    versions = (logstash_peer.dir() / "versions.txt").read_text()
    for line in ("netty: ", "jackson-core: ", "jackson-databind: ", "jackson StreamReadConstraints: "):
        assert line in versions, versions


def test_jackson_limits_as_logstash(logstash_peer: Peer, logstash_server_run: PeerRun) -> None:
    """Where jackson-core has StreamReadConstraints, the server raised the string
    length limit to Logstash's 200 M characters (Jackson's default is 20 M)."""
    versions = (logstash_peer.dir() / "versions.txt").read_text()
    log = logstash_server_run.log
    if "jackson StreamReadConstraints: present" in versions:
        assert "StreamReadConstraints: maxStringLength 200000000, maxNumberLength 10000" in log, log[:2000]
    else:
        assert "has no StreamReadConstraints" in log, log[:2000]
