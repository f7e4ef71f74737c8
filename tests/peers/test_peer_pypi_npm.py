"""The PyPI and npm peers under ``refwire conform``: timbersnake 0.1.0's server
and client, pylogbeat 2.1.0, the npm lumberjack-client 1.0.3 (each judged
under strict: they have no profile of their own), and the Pravega client
(PyPI pravega 0.3.8, Rust core) under its rust-client profile.

The runs are conftest.py's session fixtures, shared with the compatibility
matrix.  What each gets wrong is documented in specs/lumberjack/README.md §7
(and specs/pravega/README.md §14 for the Rust client): those cases must FAIL,
and what they do right must PASS.
"""

from __future__ import annotations

import pytest
from real_peers import CONFORM_TIMEOUT, PeerRun, assert_as_predicted, derived

pytestmark = [pytest.mark.peers, pytest.mark.timeout(3 * CONFORM_TIMEOUT)]

P, N, F, U = "PASS", "NON-STRICT", "FAIL", "UNSUPPORTED"


def _check(run: PeerRun, want: dict[str, str]) -> None:
    wrong = {cid: (run.verdicts.verdict(cid), v, run.verdicts.describe(cid)) for cid, v in want.items() if run.verdicts.verdict(cid) != v}
    assert not wrong, f"case: (got, want, report): {wrong}"


def test_timbersnake_server(timbersnake_server_run: PeerRun) -> None:
    _check(
        timbersnake_server_run,
        {
            # "the plain-J path calls the non-existent json.parse and crashes the connection (every uncompressed J)"
            "lj.S1.1": F,
            "lj.S2.2": F,
            "lj.S3.1": F,
            # "acks ... each C with its last frame's seq", "W ignored": one C holding the window is acked right
            "lj.S4.1": P,
            "lj.S4.3": P,
            "lj.S4.2": F,  # nested C unsupported (the connection idles)
            "lj.S4.4": F,  # no limit on the inflated size: the bomb is inflated, never refused
        },
    )
    assert timbersnake_server_run.verdicts.entry("lj.S1.1")["close"]["by"] == "testee"  # the crash closes the connection


def test_pylogbeat(pylogbeat_client_run: PeerRun) -> None:
    _check(
        pylogbeat_client_run,
        {
            "lj.C1.1": F,  # running counter: hangs on go-lumber's count ack from the 2nd window on (§7)
            "lj.C1.2": P,
            "lj.C1.3": F,  # bare recv(1), recv(1), recv(4): an ack split across segments is misread
            "lj.C2.1": P,
            "lj.C2.3": U,  # v2 only
            "lj.C3.2": F,  # no reconnect and resend: the application must retry
            "lj.C4.1": F,  # waits for an ack EQUAL to its last seq: does not close on one above it (§7)
            "lj.C4.2": F,  # same: keeps waiting after an ack going backwards
            "lj.C4.3": F,  # ignores the ack's version byte (§7)
            "lj.C4.4": P,
            "lj.C5.1": P,
        },
    )


def test_timbersnake_client(timbersnake_client_run: PeerRun) -> None:
    # W 3 hard-coded (inside the C): only a send of exactly 3 events, acked at once and in
    # full, works (lj.C1.3 and lj.C5.1 ask for 3); one ack of any value is success (§7).
    got = {cid: e["verdict"] for cid, e in timbersnake_client_run.verdicts.cases.items() if e["verdict"] != "SKIPPED"}
    _check(timbersnake_client_run, {cid: (P if cid in ("lj.C1.3", "lj.C5.1") else F) for cid in got})


def test_npm_lumberjack_client(npm_client_run: PeerRun) -> None:
    # Never reads acks, never resends (§7): right only when the server acks at once.
    _check(
        npm_client_run,
        {
            "lj.C1.1": P,
            "lj.C2.1": F,
            "lj.C2.3": U,
            "lj.C3.2": F,
            "lj.C4.1": F,
            "lj.C4.2": F,
            "lj.C4.3": F,
            "lj.C4.4": F,
            "lj.C5.1": P,
        },
    )


@pytest.mark.parametrize("case", derived("pravega", "client"))
def test_the_pravega_rust_client_as_its_profile_predicts(pravega_rust_client_run: PeerRun, case: str) -> None:
    assert_as_predicted(pravega_rust_client_run.verdicts, "pravega", case, "rust-client")


def test_the_pravega_rust_client_s_observations(pravega_rust_client_run: PeerRun) -> None:
    """What the Rust client's records show besides the verdicts (specs/pravega/README.md §14)."""
    v = pravega_rust_client_run.verdicts

    def facts(cid: str) -> str:
        o = v.observation(cid)
        return " ".join([*o.events, *o.facts])

    # it found the store through the controller, and read back through a reader group (table segments)
    assert "ReadTableEntriesDelta" in facts("pv.C1.1")
    assert "exit 0" in facts("pv.C1.3")
    # after a WrongHost it sets up again and writes every event once
    assert "each stored once" in facts("pv.C1.2") and "stored 10 events" in facts("pv.C1.2")
    # an incompatible store: it never appends, retrying the Hello until killed
    assert "stored 0 events" in facts("pv.C1.5")
