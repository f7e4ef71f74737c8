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

import pytest
from real_peers import Peer, build_peer


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
