"""The generated TANK Wireshark dissector (``refwire dissector tank``) against refwire's own reading.

Every TANK wire vector (specs/tank/vectors/frames.json: whole frames, requests and
responses) and a few hand-built streams refwire rejects become TCP connections in one
pcapng (:mod:`refwire.pcap`): each stream once in one segment and once cut into 3-byte
segments (frames split across segments), plus a conversation of vectors on the usual
port and, found by the heuristic (the broker's Ping first, §6), on another port.  One
tshark run (two passes) with the generated Lua reads them all; every frame's header
fields, its topics, partitions, error codes, seqs, high-water marks and its bundles'
message counts, seqs and contents are compared with the describer's reading of the
same bytes (:mod:`refwire.tank.describe`, its codec's objects, and
:func:`~refwire.tank.bundles.decode_bundle` for bundles).  Where refwire rejects, the
dissector's frame carries an expert-info warning citing specs/tank/README.md; responses
name their request's frame and the latency, requests their response's (§3, §8.16).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from support.dissector_tank import _check, _refwire
from support.tshark import Capture, machine_warns, needs_tshark, run_tshark, segments, warns

from refwire.cli import main
from refwire.describe import UNDECODED
from refwire.errors import ProtocolError
from refwire.protocols import descriptor
from refwire.sansio import NeedData
from refwire.tank.bundles import Message, encode_bundle
from refwire.tank.connection import ClientConnection
from refwire.tank.frames import (
    DEFAULT_LIMITS,
    ConsumeRequest,
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
    StatusRequest,
    frame,
)
from refwire.tank.responses import (
    ConsumePartitionResult,
    ConsumeResponse,
    ConsumeTopicResult,
)
from refwire.wire import encode_uvarint

pytestmark = needs_tshark

VECTORS = Path(__file__).resolve().parent.parent / "specs" / "tank" / "vectors" / "frames.json"
PORT = 11011
OTHER_PORT = 21011  # no dissector registered: the heuristic must find the session there

_STATUS = StatusRequest(7).encode()


def _vectors() -> list[dict[str, Any]]:
    return list(json.loads(VECTORS.read_text())["vectors"])


def _vector(name: str) -> bytes:
    return bytes.fromhex(next(v["hex"] for v in _vectors() if v["name"] == name))


def _produce(bundle: bytes, blen: bytes | None = None) -> bytes:
    """A Produce request of one bundle; ``blen``: its bundleLen varint as written (else minimal)."""
    ok = ProduceRequest(9, (ProduceTopic("t", (ProducePartition(0, bundle),)),)).encode()
    if blen is None:
        return ok
    payload = ok[5:]
    head = payload[: payload.index(b"\x01t\x01") + 5]  # ... topicsCnt name partitionsCnt partitionId
    return frame(0x01, head + blen + bundle)


def _consume_response(err: int) -> bytes:
    """A Consume response of one partition entry with error code ``err`` and nothing after it."""
    head = (7).to_bytes(4, "little") + b"\x01\x01t\x01\x00\x00" + bytes([err])
    return frame(0x02, len(head).to_bytes(4, "little") + head)


#: Streams refwire rejects (name, direction, bytes), each citing where (specs/tank/README.md).
ERRORS: list[tuple[str, str, bytes]] = [
    ("unknown-msg-id", "c2s", _STATUS + b"\x0d\x00\x00\x00\x00" + _STATUS),  # §3, §6
    ("length-over-limit", "c2s", _STATUS + b"\x01\xff\xff\xff\xff"),  # §2
    ("varint-6-bytes", "c2s", _produce(b"", b"\x80\x80\x80\x80\x80\x00") + _STATUS),  # §2
    ("varint-over-u32", "c2s", _produce(b"", b"\xff\xff\xff\xff\x1f") + _STATUS),  # §2
    ("trailing-byte", "c2s", frame(0x0A, (7).to_bytes(4, "little") + b"\x00") + _STATUS),  # §3, §6
    ("replica-id", "c2s", frame(0x04, b"") + _STATUS),  # §3
    ("bundle-count-0", "c2s", _produce(b"\x00\x00\x00") + _STATUS),  # §4
    ("bundle-bit-7", "c2s", _produce(b"\x84" + bytes(10) + b"\x01x") + _STATUS),  # §4
    ("bundle-empty", "c2s", _produce(b"") + _STATUS),  # §4
    ("message-cut", "c2s", _produce(b"\x08\x00" + bytes(8) + b"\x01x") + _STATUS),  # §4
    ("snappy-corrupt", "c2s", _produce(b"\x05\x10\xff\xff\xff") + _STATUS),  # §4
    ("consume-unknown-err", "s2c", _consume_response(0x07) + frame(0x03, b"")),  # §3
]

#: Valid streams beside the vectors: empty keys and contents, and a Snappy bundle the Lua
#: decoder must inflate through long literals and 2-byte copies (§4).
VALID: list[tuple[str, str, bytes]] = [
    ("empty-key-and-content", "c2s", _produce(encode_bundle([Message(b"", 5, b""), Message(b"x", 5), Message(b"", 6)]))),
    (
        "snappy-600-messages",
        "c2s",
        _produce(
            encode_bundle(
                [Message(f"m{i:03d}-".encode() + bytes(range(i % 97, i % 97 + 80)), 1000 + i // 7) for i in range(600)],
                compress=True,
            )
        ),
    ),
]

#: A conversation of vectors: the broker's Ping, requests and their responses, some pipelined
#: and answered out of order (matching is by request id, §8.16).
SESSION: list[tuple[str, str]] = [
    ("s2c", "ping"),
    ("c2s", "create-topic"), ("s2c", "create-topic-response"),
    ("c2s", "produce-1-message"), ("s2c", "produce-1-message-response"),
    ("c2s", "consume-from-0"), ("s2c", "consume-response-3-bundles"),
    ("c2s", "produce-with-seqnum-sparse"), ("s2c", "produce-with-seqnum-response"),
    ("c2s", "status"), ("c2s", "discover-topics"), ("c2s", "discover-topology"), ("c2s", "reload-conf"),
    ("s2c", "reload-conf-response"), ("s2c", "discover-topology-response"), ("s2c", "discover-topics-response"),
    ("s2c", "status-response"),
]  # fmt: skip


def _consume_of_partition(name: str, partition: int) -> bytes:
    """The vector ``name`` (a Consume request) asking for ``partition`` instead of its own."""
    (d,) = descriptor("tank").load("describer")(DEFAULT_LIMITS.max_frame_size, "c2s").feed(_vector(name))
    req = d.frame
    assert isinstance(req, ConsumeRequest)
    topics = tuple(attrs.evolve(t, partitions=tuple(attrs.evolve(p, partition=partition) for p in t.partitions)) for t in req.topics)
    return attrs.evolve(req, topics=topics).encode()


def _consume_answer(error: int, *bundles: bytes, seq: int = 0, base: int = 1) -> list[tuple[str, bytes]]:
    """The vector ``consume-from-0`` (asking from ``seq``) and a response to it: ``error`` on its
    partition, whose chunk holds ``bundles`` (numbered from baseSeqNum ``base`` unless err 0xfe, §5)."""
    (d,) = descriptor("tank").load("describer")(DEFAULT_LIMITS.max_frame_size, "c2s").feed(_vector("consume-from-0"))
    req = d.frame
    assert isinstance(req, ConsumeRequest)
    req = attrs.evolve(req, topics=tuple(attrs.evolve(t, partitions=tuple(attrs.evolve(p, seq=seq) for p in t.partitions)) for t in req.topics))
    chunk = b"".join(encode_uvarint(len(b)) + b for b in bundles)
    (t,) = req.topics
    (p,) = t.partitions
    part = ConsumePartitionResult(
        p.partition, error, base_seq=None if error == 0xFE else base, hwmark=1000, chunk=chunk, first_avail=1 if error == 0x01 else None
    )
    return [("c2s", req.encode()), ("s2c", ConsumeResponse(req.request_id, (ConsumeTopicResult(t.name, (part,)),)).encode())]


def _sparse(*seqs: int) -> bytes:
    return encode_bundle([Message(b"m%d" % s, 5, seq=s) for s in seqs], compress=False, sparse=True)


_PLAIN = encode_bundle([Message(b"a", 5), Message(b"b", 5)], compress=False)

#: connections refwire's client machine rejects at one response the codec reads (name, sends, the
#: index of that response, what refwire's error says, what the warning says, the section it cites)
MACHINE: list[tuple[str, list[tuple[str, bytes]], int, str, str, str]] = [
    ("answered-twice", [("c2s", _vector("create-topic")), ("s2c", _vector("create-topic-response")), ("s2c", _vector("create-topic-response"))],
     1, "response to unknown request id 1", "response to unknown request id 1", "§3"),
    ("answer-of-the-wrong-kind", [("c2s", _vector("create-topic")), ("s2c", _vector("discover-partitions-response"))],
     0, "DiscoverPartitionsResponse answers a CreateTopicRequest", "a DiscoverPartitions response answers a CreateTopic request", "§3"),
    ("response-to-an-id-never-sent", [("c2s", _vector("status")), ("s2c", _vector("status-response")), ("s2c", _vector("discover-topics-response"))],
     1, "response to unknown request id 36", "response to unknown request id 36", "§3"),
    ("consume-answer-names-a-partition-not-requested", [("c2s", _consume_of_partition("consume-from-0", 5)), ("s2c", _vector("consume-response-3-bundles"))],
     0, "which was not requested", "which was not requested", "§3"),
    # the chunk walk's own errors (§5), whatever the requested seq (here above, below, and at the bundles)
    ("consume-chunk-sparse-firstseq-below-the-running-seq", _consume_answer(0, _sparse(10, 11), _sparse(5, 6), seq=8),
     0, "sparse firstSeq 5 below the running seq 12", "sparse firstSeq 5 below the running seq 12", "§5"),
    ("consume-chunk-sparse-firstseq-below-the-running-seq-after-a-skipped-bundle",
     _consume_answer(0, _PLAIN, _sparse(2), seq=500),
     0, "sparse firstSeq 2 below the running seq 3", "sparse firstSeq 2 below the running seq 3", "§5"),
    ("consume-chunk-0xfe-first-bundle-not-sparse", _consume_answer(0xFE, _PLAIN),
     0, "err 0xfe but the first bundle is not sparse", "err 0xfe but the first bundle is not sparse", "§5"),
]  # fmt: skip

#: the chunk walk accepts these (a sparse bundle first, below baseSeqNum; then a plain one after
#: a sparse one under err 0xfe; err 0x01's chunk is not walked): no machine warning
MACHINE_OK: list[tuple[str, list[tuple[str, bytes]]]] = [
    ("consume-chunk-first-sparse-below-base", _consume_answer(0, _sparse(3), _PLAIN, seq=0, base=20)),
    ("consume-chunk-0xfe-sparse-then-plain", _consume_answer(0xFE, _sparse(7, 9), _PLAIN, seq=0)),
    ("consume-chunk-0x01-not-walked", _consume_answer(0x01, _sparse(10, 11), _sparse(5, 6))),
]  # fmt: skip


def _client_machine(sends: list[tuple[str, bytes]]) -> tuple[int, ProtocolError] | None:
    """Where refwire's client machine rejects the broker's frames (the index among them, and its
    error), its requests sent as the client's frames say, in the connection's order; None: it
    accepts every frame the codec reads."""
    load = descriptor("tank").load("describer")
    des = {d: load(DEFAULT_LIMITS.max_frame_size, d) for d in ("c2s", "s2c")}
    conn = ClientConnection(now=0.0)
    k = 0
    for direction, data in sends:
        for d in des[direction].feed(data):
            if d.type == UNDECODED or d.error is not None:
                return None  # the codec's
            if direction == "c2s":
                conn.send(d.frame, now=0.0)
                continue
            try:
                conn.receive_data(d.data, now=0.0)
                while not isinstance(conn.next_event(), NeedData):
                    pass
            except ProtocolError as exc:
                return k, exc
            k += 1
    return None



# --------------------------------------------------------------------------- what tshark shows


@pytest.fixture(scope="module")
def lua(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lua") / "refwire-tank.lua"
    assert main(["dissector", "tank", "-o", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def capture(lua: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One pcapng of every case, one tshark run: per case, what tshark shows per direction."""
    cap = tmp_path_factory.mktemp("cap") / "tank.pcapng"
    with Capture(cap) as w:
        for v in _vectors():
            direction = "c2s" if v["direction"] == "c2b" else "s2c"
            data = bytes.fromhex(v["hex"])
            w.connection(v["name"], PORT, [(direction, data)], kind="vector")
            w.connection(v["name"], PORT, [(direction, c) for c in segments(data, 3)], kind="vector")
        for name, direction, data in VALID:
            w.connection(name, PORT, [(direction, data)], kind="valid")
            w.connection(name, PORT, [(direction, c) for c in segments(data, 1000)], kind="valid")
        for name, direction, data in ERRORS:
            w.connection(name, PORT, [(direction, data)], kind="error")
            w.connection(name, PORT, [(direction, c) for c in segments(data, 3)], kind="error")
        session = [(d, _vector(n)) for d, n in SESSION]
        w.connection("session", PORT, session, kind="session")
        w.connection("session", PORT, [(d, c) for d, data in session for c in segments(data, 7)], kind="session")
        w.connection("session", OTHER_PORT, session, kind="session")
        for name, sends in [*((m[0], m[1]) for m in MACHINE), *MACHINE_OK]:
            w.connection(name, PORT, sends, kind="machine", wire=sends)
    cases = w.cases
    for layers in run_tshark(lua, cap, "tank", "tank"):
        tcp = layers["tcp"][0]
        case = cases[int(tcp["tcp.stream"][0])]
        direction = "c2s" if tcp["tcp.dstport"][0] == str(case["port"]) else "s2c"
        shown = case["shown"].setdefault(direction, [])
        for item in layers["tank"]:
            if "tank.eof" in item:  # the FIN of a direction closed inside a frame (§2)
                case.setdefault("eof", {})[direction] = item
                continue
            shown.append({"frame": int(layers["frame"][0]["frame.number"][0]), "item": item})
    return {"cases": cases}


@pytest.mark.parametrize("name", [v["name"] for v in _vectors()])
def test_every_vector_shows_what_refwire_reads(capture: dict[str, Any], name: str) -> None:
    """Whole and in 3-byte segments: every header field, topic, partition, error code, seq,
    high-water mark, bundle count, message seq and content, with no warning (§2-§5)."""
    cases = [c for c in capture["cases"].values() if c["kind"] == "vector" and c["name"] == name]
    assert len(cases) == 2
    for case in cases:
        assert case["shown"], case["name"]
        _check(case)


@pytest.mark.parametrize("name", [e[0] for e in VALID])
def test_valid_streams_show_what_refwire_reads(capture: dict[str, Any], name: str) -> None:
    cases = [c for c in capture["cases"].values() if c["kind"] == "valid" and c["name"] == name]
    assert len(cases) == 2
    for case in cases:
        direction = next(iter(case["chunks"]))
        assert not any(e.get("reject") or e.get("undecoded") for e in _refwire(direction, case["chunks"][direction]))
        _check(case)


@pytest.mark.parametrize("name", [e[0] for e in ERRORS])
def test_a_warning_where_refwire_rejects(capture: dict[str, Any], name: str) -> None:
    """The frame refwire rejects carries a warning citing specs/tank/README.md; the frames
    before it (and after it, where the header still cuts the stream) show as refwire reads them."""
    cases = [c for c in capture["cases"].values() if c["kind"] == "error" and c["name"] == name]
    assert len(cases) == 2
    for case in cases:
        direction = next(iter(case["chunks"]))
        assert any(e.get("reject") or e.get("undecoded") for e in _refwire(direction, case["chunks"][direction]))
        _check(case)


@pytest.mark.parametrize("name", [m[0] for m in MACHINE])
def test_a_warning_where_the_client_machine_rejects(capture: dict[str, Any], name: str) -> None:
    """refwire's client machine rejects a response the codec reads (its request id not in flight:
    answered twice, or a response before any request; of the wrong kind for its request; a Consume
    response naming a partition not requested): the warning at exactly that response, citing §3;
    none on any other frame."""
    _, sends, index, says, shows, section = next(m for m in MACHINE if m[0] == name)
    found = _client_machine(sends)
    assert found is not None and found[0] == index, (name, found)
    assert says in found[1].reason, (says, found[1].reason)
    (case,) = [c for c in capture["cases"].values() if c["kind"] == "machine" and c["name"] == name]
    assert not [m for s in case["shown"]["c2s"] for m in warns(s["item"])]
    responses = case["shown"]["s2c"]
    for k, s in enumerate(responses):
        if k == index:
            got = machine_warns("tank", s["item"])
            assert any(shows in m and f"specs/tank/README.md {section})" in m for m in got), got
            assert [m for m in warns(s["item"]) if m not in got] == [], s  # the codec reads it
        else:
            assert not warns(s["item"]), (name, k)


@pytest.mark.parametrize("name", [m[0] for m in MACHINE_OK])
def test_no_warning_where_the_chunk_walk_accepts(capture: dict[str, Any], name: str) -> None:
    """refwire's client accepts these Consume responses' chunks (§5): no warning on any frame."""
    sends = next(m[1] for m in MACHINE_OK if m[0] == name)
    assert _client_machine(sends) is None
    (case,) = [c for c in capture["cases"].values() if c["kind"] == "machine" and c["name"] == name]
    assert len(case["shown"]["s2c"]) == 1
    assert not [m for ss in case["shown"].values() for s in ss for m in warns(s["item"])], name


def test_the_session_has_no_machine_error(capture: dict[str, Any]) -> None:
    """refwire's client machine accepts the session; the dissector flags nothing in it."""
    session = [(d, _vector(n)) for d, n in SESSION]
    assert _client_machine(session) is None
    cases = [c for c in capture["cases"].values() if c["kind"] == "session"]
    assert len(cases) == 3
    assert not [m for c in cases for ss in c["shown"].values() for s in ss for m in warns(s["item"])]


def test_the_session_matches_responses_with_requests(capture: dict[str, Any]) -> None:
    """Each response names the frame of the oldest request of its id and kind, with the latency;
    with two passes each request names its response's frame (§3, §8.16); on another port the
    heuristic finds the connection by the broker's Ping and the direction by who sent it (§6)."""
    sessions = [c for c in capture["cases"].values() if c["kind"] == "session"]
    assert len(sessions) == 3
    for case in sessions:
        _check(case)
        requests = [(s["frame"], s["item"]) for s in case["shown"]["c2s"]]
        responses = [(s["frame"], s["item"]) for s in case["shown"]["s2c"] if "tank.request_id" in s["item"]]
        pending: dict[str, list[tuple[int, str]]] = {}
        for number, item in requests:
            pending.setdefault(item["tank.request_id"][0], []).append((number, item["tank.msg_id"][0]))
        matched = 0
        for number, item in responses:
            rid, kind = item["tank.request_id"][0], item["tank.msg_id"][0]
            queue = pending[rid]
            req = next(r for r in queue if r[1] == kind or (kind == "1" and r[1] == "5"))
            queue.remove(req)
            assert int(item["tank.request_in"][0]) == req[0], (case["port"], rid)
            assert float(item["tank.time"][0]) > 0
            answered = next(i for n, i in requests if n == req[0] and i["tank.request_id"][0] == rid)
            assert int(answered["tank.response_in"][0]) == number
            matched += 1
        assert matched == len(requests) == 8


def test_the_lua_is_deterministic_and_names_its_sources(lua: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.lua"
    assert main(["dissector", "tank", "-o", str(again)]) == 0
    text = lua.read_text()
    assert again.read_text() == text
    assert "refwire.tank.describe:LAYOUT" in text and "refwire.dissector.tank:PART" in text
    assert 'ProtoField.uint32("tank.request_id", "request_id", base.DEC)' in text
    assert "local SERVER_LAYOUT = {" in text and '[1] = "Produce"' in text
