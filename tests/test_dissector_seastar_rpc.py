"""The generated Seastar RPC Wireshark dissector (``refwire dissector seastar-rpc``) against refwire's own reading.

Every Seastar RPC wire vector (specs/seastar-rpc/vectors/: negotiation.json with its server
decisions, frames.json, compressed.json, errors.json) becomes a TCP connection in one pcapng
(:mod:`refwire.pcap`), once whole and once cut into 3-byte segments.  A frame vector's layout
depends on the negotiation (§2), so its connection opens with the two negotiation frames its
``context`` names (the client's offer, the server's reply), then sends the vector.  Beside them
a conversation with TIMEOUT, HANDLER_DURATION and LZ4 negotiated (requests and responses in
envelopes, an exception, replies out of order) and one with LZ4_FRAGMENTED (a message of
several 32 KiB chunks).  Seastar has no port (§8 names none): the connections are found by the
heuristic (the magic), the error vectors read through *Decode As* (a wrong magic is no
Seastar connection to the heuristic).  One tshark run (two passes) reads them all; every
frame's fields (the negotiation's features, a request's ``timeout_ms``, verb, ``msg_id`` and
``len``, a response's ``msg_id``, ``handler_duration``, ``len`` and decoded exception, an
envelope's compressor, lengths and the frame inside) are compared with the describer's
reading of the same bytes (:mod:`refwire.seastar_rpc.describe`); where refwire rejects, the
frame carries an expert-info warning citing specs/seastar-rpc/README.md; responses name
their request's frame and the latency, requests their response's (§3).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.dissector_seastar_rpc import SPEC, P, _check, _machine_at, _refwire
from support.tshark import Capture, machine_warns, needs_tshark, run_tshark, segments, walk, warns

from refwire.cli import main
from refwire.seastar_rpc.compression import make_compressor
from refwire.seastar_rpc.frames import (
    Features,
    Request,
    Response,
    StreamEnd,
    StreamMessage,
    UnknownVerb,
    UserError,
)

pytestmark = needs_tshark

VECTORS = Path(__file__).resolve().parent.parent / "specs" / "seastar-rpc" / "vectors"
PORT = 7000  # Decode As: Seastar has no port of its own
OTHER_PORT = 17000  # the heuristic finds these


def _load(name: str) -> dict[str, Any]:
    return dict(json.loads((VECTORS / f"{name}.json").read_text()))


def _neg(**kw: Any) -> bytes:
    return Features(**kw).encode()


def _context_prefix(ctx: dict[str, Any]) -> list[tuple[str, bytes]]:
    """The two negotiation frames that give a frame vector its ``context`` (§2, §4, §5)."""
    stream = ctx.get("kind") == "stream"
    comp = ctx.get("compressor")
    timeout, duration = bool(ctx.get("timeout")), bool(ctx.get("duration"))
    offer = _neg(compress=comp, timeout=timeout and not stream, handler_duration=duration, stream_parent=(1 << 16) if stream else None)
    reply = _neg(compress=comp, timeout=timeout and not stream, handler_duration=duration, connection_id=2 << 16)
    return [("c2s", offer), ("s2c", reply)]


def _dir(direction: str) -> list[str]:
    return {"client->server": ["c2s"], "server->client": ["s2c"], "both": ["c2s", "s2c"]}[direction]


def _cases() -> list[tuple[str, str, int, list[tuple[str, bytes]]]]:
    """(name, kind, port, sends) of every vector."""
    out: list[tuple[str, str, int, list[tuple[str, bytes]]]] = []
    neg = _load("negotiation")
    by_name = {v["name"]: bytes.fromhex(v["hex"]) for v in neg["vectors"]}
    nothing = by_name["D1b-client-nothing"]
    for v in neg["vectors"]:
        data = bytes.fromhex(v["hex"])
        sends = [("c2s", data)] if v["direction"] == "client->server" else [("c2s", nothing), ("s2c", data)]
        out.append((v["name"], "vector", OTHER_PORT, sends))
    for d in neg["server_decisions"]:
        out.append((d["name"], "vector", OTHER_PORT, [("c2s", by_name[d["offer"]]), ("s2c", by_name[d["reply"]])]))
    for f in ("frames", "compressed"):
        for v in _load(f)["vectors"]:
            data = bytes.fromhex(v["hex"])
            out.append((v["name"], "vector", OTHER_PORT, _context_prefix(v["context"]) + [(d, data) for d in _dir(v["direction"])]))
    for v in _load("errors")["vectors"]:
        ctx, data = v["context"], bytes.fromhex(v["hex"])
        if ctx["phase"] == "negotiation":
            out.append((v["name"], "error", PORT, [("c2s", data)]))
        else:
            direction = "s2c" if ctx["kind"] == "response" else "c2s"
            out.append((v["name"], "error", PORT, [*_context_prefix(ctx), (direction, data)]))
    return out


def _conversation(comp: str) -> list[tuple[str, bytes]]:
    """A client and a server with TIMEOUT, HANDLER_DURATION and ``comp`` negotiated: calls (one of
    several 32 KiB chunks), replies out of order, a USER exception and an UNKNOWN_VERB (§2-§4)."""
    c = make_compressor(comp)

    def wrap(frame: bytes) -> bytes:
        payload = c.compress(frame)
        return len(payload).to_bytes(4, "little") + payload

    big = bytes(range(256)) * 200 + b"seastar" * 3000  # 72 KiB: three LZ4_FRAGMENTED chunks
    reqs = [Request(1, 1, b"\x02\x00\x00\x00\x03\x00\x00\x00", 1000), Request(3, 2, b"boom", 0),
            Request(999, 3, b"", 250), Request(100, 4, big, 5000)]  # fmt: skip
    resps = [Response(-2, UserError(b"boom").encode(), 3), Response(1, b"\x05\x00\x00\x00", 17),
             Response(-3, UnknownVerb(999).encode(), 0xFFFFFFFF), Response(4, big, 120)]  # fmt: skip
    sends = [("c2s", _neg(compress="LZ4,LZ4_FRAGMENTED" if comp == "LZ4" else comp, timeout=True, handler_duration=True)),
             ("s2c", _neg(compress=comp, timeout=True, handler_duration=True, connection_id=1 << 16))]  # fmt: skip
    sends += [("c2s", wrap(r.encode(with_timeout=True))) for r in reqs[:3]]
    sends += [("s2c", wrap(r.encode(with_duration=True))) for r in resps[:2]]
    sends += [("c2s", wrap(reqs[3].encode(with_timeout=True)))]
    sends += [("s2c", wrap(r.encode(with_duration=True))) for r in resps[2:]]
    return sends


#: connections refwire's machine rejects at one frame the codec reads (name, sends, the direction
#: and the frame index it rejects, what its error says, the section the warning cites)
_STREAM = [("c2s", _neg(handler_duration=True, stream_parent=1 << 16)), ("s2c", _neg(handler_duration=True, connection_id=2 << 16))]
_LZ4 = make_compressor("LZ4")


def _lz4(frame: bytes) -> bytes:
    payload = _LZ4.compress(frame)
    return len(payload).to_bytes(4, "little") + payload


_EOS, _MSG = StreamEnd().encode(), StreamMessage(b"abc").encode()


def _call_answered(exception: bytes, *, msg_id: int = -1, lz4: bool = False) -> list[tuple[str, bytes]]:
    """A plain (or LZ4) connection: call 1 of verb 7, and a response of ``msg_id`` whose data is
    ``exception`` (a negative id: an exception, §3)."""
    wrap = _lz4 if lz4 else (lambda f: f)
    comp = {"compress": "LZ4"} if lz4 else {}
    return [("c2s", _neg(**comp)), ("s2c", _neg(**comp)), ("c2s", wrap(Request(7, 1, b"").encode(with_timeout=False))),
            ("s2c", wrap(Response(msg_id, exception).encode(with_duration=False)))]  # fmt: skip


MACHINE: list[tuple[str, list[tuple[str, bytes]], str, int, str, str]] = [
    ("stream-message-after-end-of-stream", [*_STREAM, ("c2s", _MSG + _EOS), ("c2s", _MSG)], "c2s", 3, "stream message after end-of-stream", "§5"),
    ("second-end-of-stream", [*_STREAM, ("s2c", _MSG + _EOS + _EOS)], "s2c", 3, "a second end-of-stream", "§5"),
    ("stream-message-after-end-of-stream-in-lz4", [
        ("c2s", _neg(compress="LZ4", handler_duration=True, stream_parent=1 << 16)),
        ("s2c", _neg(compress="LZ4", handler_duration=True, connection_id=2 << 16)),
        ("s2c", _lz4(_EOS) + _lz4(_MSG)),
    ], "s2c", 2, "stream message after end-of-stream", "§5"),
    ("compressor-not-offered", [("c2s", _neg(timeout=True)), ("s2c", _neg(compress="LZ4", timeout=True))], "s2c", 0,
     "RPC server responded with compression LZ4 - unsupported", "§2"),
    ("compressor-other-than-offered", [("c2s", _neg(compress="LZ4_FRAGMENTED")), ("s2c", _neg(compress="LZ4"))], "s2c", 0,
     "RPC server responded with compression LZ4 - unsupported", "§2"),
    # a malformed exception for a call in flight: refwire's client drops the connection (§3)
    ("exception-cut-short-for-a-call-in-flight", _call_answered(b"\x00\x00"), "s2c", 1, "truncated: type needs 4 bytes, 2 left", "§3"),
    ("exception-without-its-len-for-a-call-in-flight", _call_answered(b"\x00\x00\x00\x00\x05\x00"), "s2c", 1,
     "truncated: len needs 4 bytes, 2 left", "§3"),
    ("exception-body-overruns-for-a-call-in-flight", _call_answered(b"\x00\x00\x00\x00\x09\x00\x00\x00ab"), "s2c", 1,
     "exception body claims 9 bytes, the response has 2", "§3"),
    ("unknown-verb-of-2-bytes-for-a-call-in-flight", _call_answered(b"\x01\x00\x00\x00\x02\x00\x00\x00ab"), "s2c", 1,
     "UNKNOWN_VERB body must be 8 bytes, got 2", "§3, §9"),
    ("exception-body-overruns-for-a-call-in-flight-in-lz4", _call_answered(b"\x00\x00\x00\x00\x09\x00\x00\x00ab", lz4=True),
     "s2c", 1, "exception body claims 9 bytes, the response has 2", "§3"),
]  # fmt: skip

#: malformed exceptions refwire's client ignores (no call of that id in flight: a stray reply, §3):
#: the codec's warning on the response, no machine warning
STRAY: list[tuple[str, list[tuple[str, bytes]]]] = [
    ("malformed-exception-for-a-call-never-made", _call_answered(b"\x00\x00\x00\x00\x09\x00\x00\x00ab", msg_id=-5)),
    ("malformed-exception-for-a-call-answered",
     [*_call_answered(b"ok", msg_id=1), ("s2c", Response(-1, b"\x00\x00").encode(with_duration=False))]),
]  # fmt: skip


#: segment sizes of the header-boundary connections: a frame ending inside or at the end of the
#: segment that completed its header (e.g. a 29- or 30-byte request: a 28-byte header) is shown
BOUNDARY_SEGMENTS = range(1, 8)


def _boundary(timeout: bool, duration: bool) -> list[tuple[str, bytes]]:
    """A connection negotiating ``timeout`` / ``handler_duration``, then requests and responses
    of every data length 0..8 (their headers 28 / 20 and 16 / 12 bytes, §3), back to back in one
    send per side: each frame starts at another offset of a segment (§1)."""
    reqs = b"".join(Request(7, k + 1, b"r" * k, 1000 if timeout else None).encode(with_timeout=timeout) for k in range(9))
    resps = b"".join(Response(k + 1, b"s" * k, 5 if duration else None).encode(with_duration=duration) for k in range(9))
    return [("c2s", _neg(timeout=timeout, handler_duration=duration)), ("s2c", _neg(timeout=timeout, handler_duration=duration)),
            ("c2s", reqs[:29]), ("c2s", reqs[29:]), ("s2c", resps[:17]), ("s2c", resps[17:])]  # fmt: skip


# --------------------------------------------------------------------------- what tshark shows


@pytest.fixture(scope="module")
def lua(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lua") / "refwire-seastar.lua"
    assert main(["dissector", "seastar-rpc", "-o", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def capture(lua: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    """One pcapng of every case, one tshark run: per case, what tshark shows per direction."""
    cap = tmp_path_factory.mktemp("cap") / "seastar.pcapng"
    with Capture(cap, ("10.0.0.1", 40000)) as w:
        for name, kind, port, sends in _cases():
            w.connection(name, port, sends, kind=kind, wire=sends)
            cut = [(d, c) for d, data in sends for c in segments(data, 3)]
            w.connection(name, port, cut, kind=kind, wire=sends)
        for comp in ("LZ4", "LZ4_FRAGMENTED"):
            talk = _conversation(comp)
            w.connection(comp, OTHER_PORT, talk, kind="conversation", wire=talk)
            cut = [(d, c) for d, data in talk for c in segments(data, 1000)]
            w.connection(comp, OTHER_PORT, cut, kind="conversation", wire=talk)
        for name, sends in [*((m[0], m[1]) for m in MACHINE), *STRAY]:
            w.connection(name, OTHER_PORT, sends, kind="machine", wire=sends)
            w.connection(name, OTHER_PORT, [(d, c) for d, data in sends for c in segments(data, 3)], kind="machine", wire=sends)
        for seg in BOUNDARY_SEGMENTS:
            for timeout in (True, False):
                for duration in (True, False):
                    sends = _boundary(timeout, duration)
                    cut = [(d, c) for d, data in sends for c in segments(data, seg)]
                    w.connection(f"boundary {seg} {timeout} {duration}", PORT, cut, kind="boundary", wire=sends, seg=seg)
    cases = w.cases
    for layers in run_tshark(lua, cap, P, P, prefs=["-d", f"tcp.port=={PORT},{P}"]):
        tcp = layers["tcp"][0]
        case = cases[int(tcp["tcp.stream"][0])]
        direction = "c2s" if tcp["tcp.dstport"][0] == str(case["port"]) else "s2c"
        for item in layers[P]:
            if f"{P}.eof" in item:  # the FIN of a direction closed inside a frame (§1)
                case.setdefault("eof", {})[direction] = item
                continue
            case["shown"].setdefault(direction, []).append({"frame": int(layers["frame"][0]["frame.number"][0]), "item": item})
    return cases


def _named(capture: dict[int, dict[str, Any]], kind: str, name: str) -> list[dict[str, Any]]:
    cases = [c for c in capture.values() if c["kind"] == kind and c["name"] == name]
    assert len(cases) == 2
    return cases


@pytest.mark.parametrize("name", [c[0] for c in _cases() if c[1] == "vector"])
def test_every_vector_shows_what_refwire_reads(capture: dict[int, dict[str, Any]], name: str) -> None:
    """Whole and in 3-byte segments: the features, every header field, exceptions, envelopes
    and the frame inside, with no warning (§2-§5)."""
    for case in _named(capture, "vector", name):
        assert case["shown"], case["name"]
        assert not [e for d in _refwire(case["wire"]).values() for e in d if e.get("undecoded")], case["name"]
        _check(case)


@pytest.mark.parametrize("name", [c[0] for c in _cases() if c[1] == "error"])
def test_a_warning_where_refwire_rejects(capture: dict[int, dict[str, Any]], name: str) -> None:
    """The frame refwire rejects carries a warning citing the spec's section; the frames
    before it show as refwire reads them (§2, §4, §6)."""
    for case in _named(capture, "error", name):
        expected = _refwire(case["wire"])
        assert any(e.get("undecoded") for d in expected.values() for e in d), case["name"]
        _check(case)


@pytest.mark.parametrize("comp", ["LZ4", "LZ4_FRAGMENTED"])
def test_a_compressed_conversation_matches_responses(capture: dict[int, dict[str, Any]], comp: str) -> None:
    """Every envelope opened by the Lua LZ4 decoder (a message of three 32 KiB chunks under
    LZ4_FRAGMENTED), the frames inside as refwire reads them; each response names its
    request's frame and the latency, each request its response's (§3, §4)."""
    for case in _named(capture, "conversation", comp):
        expected = _refwire(case["wire"])
        assert [len(expected[d]) for d in ("c2s", "s2c")] == [5, 5]
        assert not [e for d in expected.values() for e in d if e.get("undecoded")]
        _check(case)
        requests = {}
        for s in case["shown"]["c2s"][1:]:
            inner = s["item"][P][0]
            requests[inner[f"{P}.msg_id"][0]] = (s["frame"], inner)
        assert len(requests) == 4
        for s in case["shown"]["s2c"][1:]:
            inner = s["item"][P][0]
            msg_id = inner[f"{P}.msg_id"][0]
            frame, req = requests[msg_id.lstrip("-")]
            assert int(inner[f"{P}.request_in"][0]) == frame, (comp, msg_id)
            assert float(inner[f"{P}.time"][0]) > 0
            assert int(req[f"{P}.response_in"][0]) == s["frame"]
        kinds = [v for k, v in walk([s["item"] for s in case["shown"]["s2c"]]) if k == f"{P}.exception.type"]
        assert kinds == ["0", "1"]


@pytest.mark.parametrize("name", [m[0] for m in MACHINE])
def test_a_warning_where_the_machine_rejects(capture: dict[int, dict[str, Any]], name: str) -> None:
    """Whole and in 3-byte segments: refwire's machine rejects the connection at one frame the codec
    reads; the warning there (inside its envelope, for a compressed one) says what refwire's error
    says and cites the section; no other frame has one, either way."""
    _, sends, direction, index, says, section = next(m for m in MACHINE if m[0] == name)
    found = _machine_at(sends, direction)
    assert found is not None and found[0] == index, (name, found)
    assert says in found[1].reason, (says, found[1].reason)
    for case in _named(capture, "machine", name):
        _check(case)
        got = machine_warns(P, case["shown"][direction][index]["item"])
        assert any(says in m and f"{SPEC}{section[1:]})" in m for m in got), (case["name"], got)


@pytest.mark.parametrize("name", [m[0] for m in STRAY])
def test_no_machine_warning_for_a_stray_malformed_exception(capture: dict[int, dict[str, Any]], name: str) -> None:
    """A malformed exception answering no call in flight: refwire's client ignores it (§3); the
    codec's warning only, whole and in 3-byte segments."""
    sends = next(m[1] for m in STRAY if m[0] == name)
    assert _machine_at(sends, "s2c") is None
    cases = _named(capture, "machine", name)
    for case in cases:
        _check(case)
        assert not [m for s in case["shown"]["s2c"] for m in machine_warns(P, s["item"])], case["name"]
        assert any(f"{SPEC}3" in m for m in warns(case["shown"]["s2c"][-1]["item"])), case["name"]


@pytest.mark.parametrize("seg", BOUNDARY_SEGMENTS)
def test_a_frame_ending_in_the_segment_that_completed_its_header(capture: dict[int, dict[str, Any]], seg: int) -> None:
    """In segments of ``seg`` bytes, requests and responses of every size around their header's
    (with and without ``timeout_ms`` / ``handler_duration``, §2, §3) are each shown as refwire
    reads them, though the segment that completes a header also ends the frame or holds part of
    its data: TCP is asked for whole segments until a frame's size is known."""
    cases = [c for c in capture.values() if c["kind"] == "boundary" and c["seg"] == seg]
    assert len(cases) == 4
    for case in cases:
        expected = _refwire(case["wire"])
        assert [len(expected[d]) for d in ("c2s", "s2c")] == [10, 10], case["name"]
        assert not [e for d in expected.values() for e in d if e.get("undecoded")], case["name"]
        _check(case)


def test_the_lua_is_deterministic_and_names_its_sources(lua: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.lua"
    assert main(["dissector", "seastar-rpc", "-o", str(again)]) == 0
    text = lua.read_text()
    assert again.read_text() == text
    assert "refwire.seastar_rpc.describe:LAYOUT" in text and "refwire.dissector.seastar_rpc:PART" in text
    assert 'ProtoField.int64("seastar_rpc.msg_id", "msg_id", base.DEC)' in text
    assert "add_for_decode_as(P)" in text and "P:register_heuristic" in text
