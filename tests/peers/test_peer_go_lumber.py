"""go-lumber v0.2.0 (elastic/go-lumber, the Lumberjack stack inside Beats) under
``refwire conform lumberjack``: its server (peers/go-lumber/ljserver) and its
v2 client (peers/go-lumber/ljclient, an ``--exec`` testee), judged against the
go-lumber profile.

Each case's expected verdict is derived from the case data: what the
go-lumber profile predicts (real_peers.assert_as_predicted), so a wrong
sentence in the profile fails here.  The fast cases only (``--tags slow`` ones take
30 to 65 s each); about 40 s with a warm build cache.
"""

from __future__ import annotations

import pytest
from real_peers import TEST_TIMEOUT, Peer, PeerRun, Verdicts, assert_as_predicted, build_peer, conform, derived, server

pytestmark = [pytest.mark.peers, pytest.mark.timeout(TEST_TIMEOUT)]

#: Every fast server case, judged by what the go-lumber profile predicts.
SERVER = derived("lumberjack", "server")


@pytest.fixture(scope="module")
def server_verdicts(go_lumber_server_run: PeerRun) -> Verdicts:
    return go_lumber_server_run.verdicts


@pytest.mark.parametrize("case", SERVER)
def test_server_as_its_profile_predicts(server_verdicts: Verdicts, case: str) -> None:
    assert_as_predicted(server_verdicts, "lumberjack", case, "go-lumber")


@pytest.fixture(scope="module")
def maxwin_verdicts(go_lumber_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> Verdicts:
    """ljserver with a window limit raised to 50 000 (go-lumber's MaxWindowSize option)."""
    if (unbuilt := Verdicts.of(go_lumber_peer)) is not None:
        return unbuilt
    tmp = tmp_path_factory.mktemp("go-lumber-maxwin")
    argv = [str(go_lumber_peer.dir() / "bin" / "ljserver"), "-bind", "127.0.0.1:0", "-out", str(tmp / "sink"), "-q", "-maxwin", "50000"]
    with server(argv, tmp / "ljserver.log", ready=r"^listening on (127\.0\.0\.1:\d+)$") as (_, ready):
        assert ready is not None
        return conform(["--server", ready[1], "--agent", "go-lumber-maxwin", "--profile", "go-lumber", "--cases", "lj.S6.10"], tmp / "r")


def test_a_raised_window_limit_is_consistent_with_logstash_not_called_logstash(maxwin_verdicts: Verdicts) -> None:
    """go-lumber with -maxwin 50000 takes W 10001 and waits, as Logstash does:
    NON-STRICT under go-lumber's profile, consistent with the logstash
    profile's documented behaviour -- and the report says no more than that."""
    assert maxwin_verdicts.verdict("lj.S6.10") == "NON-STRICT", maxwin_verdicts.describe("lj.S6.10")
    assert maxwin_verdicts.matched("lj.S6.10") == ["logstash"], maxwin_verdicts.describe("lj.S6.10")
    reason = str(maxwin_verdicts.entry("lj.S6.10")["reason"])
    assert reason.startswith("consistent with logstash's documented behaviour, not go-lumber's"), reason


# ----------------------------------------------------------------------------- client

#: Every fast client case, judged by what the go-lumber profile predicts for
#: go-lumber's bare v2 SyncClient (what libbeat adds around it -- reconnecting,
#: resending -- is not go-lumber's and not here).
CLIENT = derived("lumberjack", "client")


@pytest.fixture(scope="module", params=["plain", "zlib3"])
def client_verdicts(request: pytest.FixtureRequest) -> Verdicts:
    """ljclient as the testee: plain J frames (-compress 0), and one C per window (-compress 3, Beats' default)."""
    run: PeerRun = request.getfixturevalue(f"go_lumber_client_{request.param}_run")
    return run.verdicts


@pytest.mark.parametrize("case", CLIENT)
def test_client_as_its_profile_predicts(client_verdicts: Verdicts, case: str) -> None:
    assert_as_predicted(client_verdicts, "lumberjack", case, "go-lumber")


def test_build_is_cached(go_lumber_peer: Peer) -> None:
    """A second peers/build.sh finds the build in its cache: it only prints the directory."""
    built = go_lumber_peer.dir()
    assert build_peer("go-lumber").path == built
    assert {"ljserver", "ljclient"} <= {p.name for p in (built / "bin").iterdir()}
    assert "go: go version" in (built / "versions.txt").read_text()
