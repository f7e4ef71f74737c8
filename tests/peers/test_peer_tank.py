"""The real TANK (phaistos-networks/TANK ecb7a2d, v4.0) under ``refwire conform
tank``: its broker (``bin/tank``) and tank-cli (through peers/tank/tank-client,
an ``--exec`` testee of the §12 contract), built by ``peers/build.sh tank``.

The verdicts expected are derived from the case data (``--profile
tank-broker``), not written here a second time: a profile sentence the real
programs contradict fails its case here.  Every conformance run gets a broker
of its own on a new data directory, since the server cases use fixed topic
names.  All cases run, the slow idle close (tk.S1.3) too: the broker closes at
16 s, which the other cases overlap.  About 40 s with a warm build cache.
"""

from __future__ import annotations

import pytest
from conftest import CLIENT_SHAPES
from real_peers import Peer, PeerRun, Verdicts, assert_as_predicted, build_peer, derived, timeout_for

pytestmark = [pytest.mark.peers, pytest.mark.timeout(timeout_for("tank"))]

PROFILE = "tank-broker"

#: The runs are conftest.py's session fixtures (tank_server_run, tank_cli_*_run), shared with the
#: compatibility matrix.

# ----------------------------------------------------------------------------- server


@pytest.mark.parametrize("case", derived("tank", "server", slow=True))
def test_server_as_its_profile_predicts(tank_server_run: PeerRun, case: str) -> None:
    assert_as_predicted(tank_server_run.verdicts, "tank", case, PROFILE)


# ----------------------------------------------------------------------------- client


@pytest.fixture(scope="module", params=sorted(CLIENT_SHAPES))
def client_verdicts(request: pytest.FixtureRequest) -> Verdicts:
    run: PeerRun = request.getfixturevalue(f"tank_cli_{request.param.replace('-', '_')}_run")
    return run.verdicts


@pytest.mark.parametrize("case", derived("tank", "client"))
def test_client_as_its_profile_predicts(client_verdicts: Verdicts, case: str) -> None:
    assert_as_predicted(client_verdicts, "tank", case, PROFILE)


def test_a_partial_bundle_is_exercised_only_when_a_chunk_holds_two(client_verdicts: Verdicts, request: pytest.FixtureRequest) -> None:
    """tk.C1.2 says whether it cut a bundle: with one bundle per message it did (PASS); with one bundle
    for all it could not (INFO, not exercised)."""
    shape = request.node.callspec.params["client_verdicts"]
    want = {"bundle1": "PASS", "one-bundle": "INFO"}[shape]
    assert client_verdicts.verdict("tk.C1.2") == want, client_verdicts.describe("tk.C1.2")


def test_build_is_cached(tank_peer: Peer) -> None:
    """A second peers/build.sh finds the build in its cache: it only prints the directory."""
    built = tank_peer.dir()
    assert build_peer("tank").path == built
    assert {"tank", "tank-cli", "tank-client"} <= {p.name for p in (built / "bin").iterdir()}
    assert "clang" in (built / "versions.txt").read_text()

