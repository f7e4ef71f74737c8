"""The generated Wireshark dissectors on sessions with the real peers.

Each session is recorded as ``refwire record --pcap`` records it (refwire's tap and
pcapng writer, sessions.py): refwire's client -> tap -> the real server (go-lumber's
ljserver, Logstash's Beats input, the TANK broker, a Seastar RPC server; recorded inside
the conformance fixture while that server is up, so none is started again), and the real
client -> tap -> refwire's server (ljclient, tank-client, the Seastar ``rpc::client``,
the Pravega Rust client from PyPI).  tshark runs the generated Lua over the pcapng (two
passes); every frame of every connection and its fields must equal what refwire's
describers read from refwire's own reassembly of the same file (the comparisons of
tests/test_dissector*.py, in tests/support/dissector_*.py), with no warning (a real peer's
ordinary session is valid), and as many frames per direction as ``refwire decode FILE
--json`` prints.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import CONFORM_PEERS, SEASTAR_FLAGS
from real_peers import TEST_TIMEOUT, Peer, PeerRun
from sessions import CAPTURES, TANK_TOPIC, PravegaSession, reference_then, run_clients, tank_topic
from support import dissector_lumberjack as lumberjack_t
from support import dissector_pravega as pravega_t
from support import dissector_seastar_rpc as seastar_t
from support import dissector_tank as tank_t
from support.tshark import check_session_cases, decoded, needs_tshark, record_session, session_cases

from refwire.cli import main

pytestmark = [pytest.mark.peers, needs_tshark, pytest.mark.timeout(TEST_TIMEOUT)]

#: protocol -> (the dissectors' names, tshark's display filter)
SHOWN = {
    "lumberjack": ("lumberjack", "lumberjack"),
    "tank": ("tank", "tank"),
    "seastar-rpc": ("seastar_rpc", "seastar_rpc"),
    "pravega": ("pravega pravega_draft", "pravega or pravega_draft"),
}
#: real server -> (protocol, its conformance fixture, which records the session)
SERVERS = {
    "go-lumber": ("lumberjack", "go_lumber_server_run"),
    "logstash": ("lumberjack", "logstash_server_run"),
    "tank": ("tank", "tank_server_run"),
    "seastar": ("seastar-rpc", "seastar_server_run"),
}


@pytest.fixture(scope="module")
def lua(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``refwire dissector PROTO -o FILE`` per protocol (Pravega's file holds both dialects)."""
    tmp = tmp_path_factory.mktemp("lua")
    out = {}
    for protocol in SHOWN:
        out[protocol] = tmp / f"refwire-{protocol}.lua"
        also = ["pravega-draft-2017"] if protocol == "pravega" else []
        assert main(["dissector", protocol, *also, "-o", str(out[protocol])]) == 0
    return out


# --------------------------------------------------------------------------- the comparison


def _check(protocol: str, case: dict[str, Any]) -> None:
    """Every frame and field as refwire's describer reads it (the dissector tests' own comparison)."""
    if protocol == "lumberjack":
        for direction, chunks in case["chunks"].items():
            expected = lumberjack_t._refwire(chunks)
            assert not [e for e in expected if lumberjack_t._error(e) or e.get("undecoded")], (case["name"], direction)
            assert [lumberjack_t._shown(s["item"]) for s in case["shown"].get(direction, [])] == expected, (case["name"], direction)
    elif protocol == "tank":
        for direction, chunks in case["chunks"].items():
            assert not [e for e in tank_t._refwire(direction, chunks) if e.get("undecoded") or e["reject"]], (case["name"], direction)
        tank_t._check(case)
    elif protocol == "seastar-rpc":
        assert not [e for d in seastar_t._refwire(case["wire"]).values() for e in d if e.get("undecoded")], case["name"]
        seastar_t._check(case)
    else:
        for direction, chunks in case["chunks"].items():
            expected = pravega_t._refwire("pravega", direction, chunks)
            assert not [e for e in expected if e.get("undecoded") or e["reject"]], (case["name"], direction)
        shown = {d: [(s["proto"], s["item"]) for s in v] for d, v in case["shown"].items()}
        pravega_t._check({**case, "dialect": "pravega", "shown": shown})


def check_session(protocol: str, pcap: Path, lua: Path) -> dict[str, Counter[str]]:
    """The dissector against refwire on every connection of ``pcap``; per direction, what
    refwire decoded (for the assertions on what the session held)."""
    protos, display = SHOWN[protocol]
    return check_session_cases(session_cases(lua, pcap, protos, display), decoded(pcap, protocol), lambda case: _check(protocol, case))


# --------------------------------------------------------------------------- real servers


@pytest.mark.parametrize("peer", sorted(SERVERS))
def test_a_session_with_the_real_server(peer: str, lua: dict[str, Path], request: pytest.FixtureRequest) -> None:
    """refwire's client -> tap -> the real server, recorded after its conformance run: the
    frames each way as refwire reads them (every kind of the protocol's ordinary session)."""
    protocol, fixture = SERVERS[peer]
    run: PeerRun = request.getfixturevalue(fixture)
    if run.verdicts.unavailable is not None:
        pytest.fail(run.verdicts.unavailable, pytrace=False)
    pcap = CAPTURES.get(peer)
    assert isinstance(pcap, Path), pcap or f"{fixture} recorded no session"
    seen = check_session(protocol, pcap, lua[protocol])
    c2s, s2c = seen["c2s"], seen["s2c"]
    if protocol == "lumberjack":  # 2 connections: W J J J W J J J W J, then W C W C W C; an ack per window
        assert (c2s["W"], c2s["J"], c2s["C"], s2c["A"]) == (6, 14, 3, 6), seen
    elif protocol == "tank":  # Ping; 7 requests, 7 responses
        assert (c2s["top"], s2c["top"]) == (7, 8), seen
    else:  # 3 connections: negotiation, 7 calls and 7 replies each; the last 2 in LZ4 envelopes
        assert (c2s["negotiation"], c2s["request"], s2c["response"], c2s["compressed"], s2c["compressed"]) == (3, 21, 21, 14, 14), seen


# --------------------------------------------------------------------------- real clients


def _built(request: pytest.FixtureRequest, fixture: str) -> Path:
    peer: Peer = request.getfixturevalue(fixture)
    return Path(peer.dir()) / "bin"


@pytest.mark.parametrize("client", ["ljclient", "tank-client", "seastar-client", "pravega-rust-client"])
def test_a_session_with_the_real_client(client: str, lua: dict[str, Path], tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The real client -> tap -> refwire's server: the frames each way as refwire reads them."""
    pcap = tmp_path / f"{client}.pcapng"
    if client == "ljclient":
        protocol = "lumberjack"
        argv = [str(_built(request, "go_lumber_peer") / "ljclient"), "-c", "{host}:{port}", "-n", "5", "-batch", "2", "-timeout", "10s"]
        record_session(pcap, run_clients([*argv, "-compress", "0"], [*argv, "-compress", "3"]), reference=protocol)
    elif client == "tank-client":
        protocol = "tank"
        argv = [str(_built(request, "tank_peer") / "tank-client"), "{host}", "{port}", TANK_TOPIC, "5", "7", "2", "64"]
        record_session(pcap, run_clients(argv), upstream=reference_then(protocol, tank_topic))
    elif client == "seastar-client":
        protocol = "seastar-rpc"
        argv = [str(_built(request, "seastar_peer") / "seastar-testee"), *SEASTAR_FLAGS, "--connect", "{host}:{port}", "--events", "5"]
        record_session(pcap, run_clients([*argv, "--seed", "7"]), reference=protocol)
    else:
        protocol = "pravega"
        pytest.importorskip("pravega_client", reason="pip install pravega==0.3.8, or .[interop]")
        session = PravegaSession(CONFORM_PEERS / "pravega_rust_client.py")
        record_session(pcap, session.talk, upstream=session.serve)
    seen = check_session(protocol, pcap, lua[protocol])
    c2s, s2c = seen["c2s"], seen["s2c"]
    if client == "ljclient":  # 5 events in windows of 2 (2, 2, 1), plain then one C per window
        assert (c2s["W"], c2s["J"], c2s["C"], s2c["A"]) == (6, 10, 3, 6), seen
    elif client == "tank-client":  # 5 messages produced in bundles of 2; consumed with a 64-byte fetch size
        assert (c2s["Produce"], s2c["Produce"]) == (3, 3) and c2s["Consume"] == s2c["Consume"] >= 1, seen
    elif client == "seastar-client":  # 5 echo calls in flight at once
        assert (c2s["negotiation"], c2s["request"], s2c["response"]) == (1, 5, 5), seen
    else:  # 5 events appended (a bare AppendBlockEnd each, acked), then read back
        assert (c2s["AppendBlockEnd"], s2c["DataAppended"]) == (5, 5) and c2s["Hello"] == s2c["Hello"] >= 1, seen
        assert c2s["ReadSegment"] >= 1 and s2c["SegmentRead"] >= 1, seen
