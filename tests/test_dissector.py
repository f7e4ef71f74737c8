"""The generated Wireshark dissector (``refwire dissector``) against refwire's own reading.

Every Lumberjack wire vector (specs/lumberjack/vectors/: frames, conversations,
errors) and a session with acks become TCP connections in one pcapng
(:mod:`refwire.pcap`): each stream once in one segment, once cut into 3-byte
segments (frames split across segments), and the valid client streams once more
on a port that is not Lumberjack's (the heuristic dissector).  One tshark run
with the generated Lua reads them all; every frame and field it shows is
compared with the describer ``refwire decode`` reads with (strict, as the
capture pipeline reads it: specs/lumberjack/README.md §2, §4).  Where refwire
rejects a stream, the dissector's frame at that place carries an expert-info
warning citing §4 of the spec (its table of every error refwire detects).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from support.dissector_lumberjack import _error, _refwire, _shown
from support.tshark import WARN, Capture, experts, needs_tshark, run_tshark, segments

from refwire.cli import main
from refwire.errors import ProtocolError
from refwire.lumberjack.connection import ServerConnection
from refwire.lumberjack.events import Batch, ConnectionClosed
from refwire.lumberjack.frames import DEFAULT_LIMITS, V1, Ack, Compressed, DataFrame, JsonFrame, Window
from refwire.sansio import NeedData

pytestmark = needs_tshark

VECTORS = Path(__file__).resolve().parent.parent / "specs" / "lumberjack" / "vectors"
PORT = 5044
OTHER_PORT = 15044  # no dissector registered: the heuristic must find these
#: the limits of the events a batch holds (§4) the one tshark run sets (the Lua's preferences,
#: refwire's defaults otherwise: 128 and 256 MiB would need a capture of over 64 MiB of events)
#: and refwire's server machine is given: a batch holds 64 KiB, or less once 100 KiB (a quarter
#: of max_connection_memory) less the batches not acked yet is less
LIMITS = attrs.evolve(DEFAULT_LIMITS, max_batch_bytes=64 * 1024, max_connection_memory=400 * 1024)
PREFS = ["-o", f"lumberjack.max_batch_bytes:{LIMITS.max_batch_bytes}", "-o", f"lumberjack.max_connection_memory:{LIMITS.max_connection_memory}"]


def _j(seq: int, n: int) -> bytes:
    """A J frame whose JSON object payload is ``n`` bytes (held as ``n``, §4)."""
    return JsonFrame(seq, b'{"a":"' + b"x" * (n - 8) + b'"}').encode()


def _d(seq: int, pairs: int) -> bytes:
    """A D frame of ``pairs`` pairs of a 1-byte key and an empty value (held as 33 bytes each, §4)."""
    return DataFrame(seq, tuple((b"k", b"") for _ in range(pairs)), version=V1).encode()


#: client streams over the bytes of events a batch may hold (name, chunks, the frame refwire's
#: server rejects, what its error says), and streams just within them (the frame None)
BATCH_BYTES: list[tuple[str, list[bytes], int | None, str]] = [
    ("j-over-max-batch-bytes", [Window(2).encode(), _j(1, 40000), _j(2, 40000)], 2, "the batch's events exceed the limit max_batch_bytes=65536"),
    ("j-at-max-batch-bytes", [Window(2).encode(), _j(1, 32768), _j(2, 32768)], None, ""),
    ("d-pairs-over-max-batch-bytes", [Window(1, version=V1).encode(), _d(1, 1986)], 1, "the batch's events exceed the limit max_batch_bytes=65536"),
    ("d-pairs-at-max-batch-bytes", [Window(1, version=V1).encode(), _d(1, 1985)], None, ""),
    # a C's events are held together (§4): all of its frames against what the batch may still hold, at the C
    ("c-inflating-over-max-batch-bytes", [Window(2).encode(), Compressed.wrap(_j(1, 40000) + _j(2, 40000)).encode()], 1,
     "the C frame's events, with the batch's before it, exceed the limit max_batch_bytes=65536 (a C frame's events are held together, even when they span windows)"),
    ("c-inflating-within-max-batch-bytes", [Window(3).encode(), _j(1, 5536), Compressed.wrap(_j(2, 30000) + _j(3, 30000)).encode()], None, ""),
    ("c-with-its-window-over-max-batch-bytes", [Compressed.wrap(Window(2).encode() + _j(1, 40000) + _j(2, 40000)).encode()], 0,
     "the C frame's events, with the batch's before it, exceed the limit max_batch_bytes=65536 (a C frame's events are held together, even when they span windows)"),
    ("c-after-unacked-batches-over-max-connection-memory",
     [*(b for k in range(3) for b in (Window(1).encode(), _j(k + 1, 30000))), Window(1).encode(), Compressed.wrap(_j(4, 30000)).encode()], 7,
     "the batch's events exceed the 12400 bytes the limit max_connection_memory=409600 leaves them (each byte counts 4x; 90000 bytes of events await their ack) (a C frame's events are held together, even when they span windows)"),
    ("unacked-batches-over-max-connection-memory", [b for k in range(4) for b in (Window(1).encode(), _j(k + 1, 30000))], 7,
     "the batch's events exceed the 12400 bytes the limit max_connection_memory=409600 leaves them (each byte counts 4x; 90000 bytes of events await their ack)"),
]  # fmt: skip


#: J payloads around RFC 8259's grammar and orjson's strictness (§2.3, §4): refwire's decoder decides
#: each (a few valid, most not); each is sent alone in its window and inside a C frame
JSON_PAYLOADS: list[tuple[str, bytes]] = [
    ("trailing-comma", b'{"a":1,}'), ("trailing-comma-in-array", b'{"a":[1,2,]}'), ("single-quotes", b"{'a':1}"),
    ("nan", b'{"a":NaN}'), ("infinity", b'{"a":-Infinity}'), ("unterminated-string", b'{"a":"b}'),
    ("unterminated-object", b'{"a":1'), ("bad-escape", b'{"a":"\\x"}'), ("bad-u-escape", b'{"a":"\\u00g1"}'),
    ("lone-high-surrogate", b'{"a":"\\ud800"}'), ("high-surrogate-then-other", b'{"a":"\\ud800\\u0041"}'),
    ("lone-low-surrogate", b'{"a":"\\udc00"}'), ("invalid-utf8", b'{"a":"\xff"}'), ("overlong-utf8", b'{"a":"\xc0\x80"}'),
    ("utf8-surrogate", b'{"a":"\xed\xa0\x80"}'), ("utf8-over-10ffff", b'{"a":"\xf4\x90\x80\x80"}'),
    ("utf8-cut-short", b'{"a":"\xe2\x82"}'), ("utf8-key", b'{"\xff":1}'), ("control-character", b'{"a":"\x01"}'),
    ("top-level-array", b"[1,2]"), ("top-level-string", b'"a"'), ("top-level-number", b"12"), ("top-level-null", b"null"),
    ("leading-zero", b'{"a":01}'), ("negative-leading-zero", b'{"a":-01}'), ("no-fraction-digit", b'{"a":1.}'),
    ("no-integer-digit", b'{"a":.5}'), ("no-exponent-digit", b'{"a":1e+}'), ("bom", b'\xef\xbb\xbf{"a":1}'),
    ("two-documents", b"{}{}"), ("form-feed", b'\x0c{"a":1}'), ("overflow-exponent", b'{"a":1e400}'),
    ("overflow-double", b'{"a":1.7976931348623159e308}'), ("overflow-digits", b'{"a":1' + b"0" * 400 + b"}"),
    ("too-deep", b'{"a":' + b"[" * 1024 + b"]" * 1024 + b"}"), ("blank", b" "), ("key-without-value", b'{"a"}'),
    ("no-colon", b'{"a" 1}'), ("comma-first", b"{,}"), ("bad-literal", b'{"a":tru}'), ("capital-true", b'{"a":True}'),
    ("mismatched-close", b'{"a":[1,2}'), ("number-key", b"{1:2}"), ("comment", b'{"a":1 /* c */}'),
    ("valid-nested", b' {"a": {"b": [1, {"c": []}, {}], "d": null}, "e": [true, false, -0.5e-3]} \r\n'),
    ("valid-escapes", b'{"\\"\\\\\\/\\b\\f\\n\\r\\t": "\\u0000\\u00e9\\ud834\\udd1e\\uFFFF"}'),
    ("valid-unicode", '{"é": "𝄞 \uffff ü 日本"}'.encode()), ("valid-big-numbers", b'{"a":123456789012345678901234567890,"b":1.7976931348623157e308,"c":1e-400,"d":-0,"e":1E+5,"f":0.0e-0}'),
    ("valid-max-digits", b'{"a":17976931348623157' + b"0" * 292 + b"}"), ("valid-deep", b'{"a":' + b"[" * 1023 + b"]" * 1023 + b"}"),
    ("valid-empty-key", b'{"":""}'), ("valid-delete", b'{"a":"\x7f"}'),
]  # fmt: skip


def _json_j(payload: bytes) -> bytes:
    """A J frame carrying ``payload`` as it is (§2.3)."""
    return b"2J" + (1).to_bytes(4, "big") + len(payload).to_bytes(4, "big") + payload


def _vectors() -> list[tuple[str, dict[str, Any]]]:
    return [
        (kind, v)
        for kind in ("frames", "conversations", "errors")
        for v in json.loads((VECTORS / f"{kind}.json").read_text())["vectors"]
    ]


def _session() -> list[tuple[str, bytes]]:
    """A client and a server: three windows (plain, in a C, plain) of running seqs, a keepalive, the acks (§3.1-§3.4)."""
    out: list[tuple[str, bytes]] = []
    seq = 1
    for w in range(3):
        seqs = list(range(seq, seq + 3))
        seq += 3
        events = b"".join(JsonFrame(s, json.dumps({"w": w, "seq": s}).encode()).encode() for s in seqs)
        out.append(("c2s", Window(3).encode()))
        out.append(("c2s", Compressed.wrap(events).encode() if w == 1 else events))
        if w == 0:
            out.append(("s2c", Ack(0).encode()))
        out.append(("s2c", Ack(seqs[-1]).encode()))
    return out


# --------------------------------------------------------------------------- what refwire reads


def _server_machine(chunks: list[bytes]) -> ProtocolError | None:
    """What refwire's server machine raises on a client's stream, then its EOF (None: nothing)."""
    conn = ServerConnection(limits=LIMITS)
    try:
        for c in [*chunks, b""]:
            conn.receive_data(c, now=0.0)
            while not isinstance(conn.next_event(), (NeedData, ConnectionClosed)):
                pass
    except ProtocolError as exc:
        return exc
    return None


# --------------------------------------------------------------------------- what tshark shows


@pytest.fixture(scope="module")
def lua(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lua") / "refwire-lumberjack.lua"
    assert main(["dissector", "lumberjack", "-o", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def capture(lua: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One pcapng of every case, one tshark run: per case, what refwire reads and what tshark shows."""
    cap = tmp_path_factory.mktemp("cap") / "lumberjack.pcapng"
    with Capture(cap) as w:
        for kind, v in _vectors():
            direction = "c2s" if v["direction"] == "client->server" else "s2c"
            data = bytes.fromhex(v["hex"])
            w.connection(v["name"], PORT, [(direction, data)], kind=kind, vector=v)
            w.connection(v["name"] + " (3-byte segments)", PORT, [(direction, c) for c in segments(data, 3)], kind=kind, vector=v)
            if kind != "errors" and direction == "c2s":
                w.connection(v["name"] + " (heuristic)", OTHER_PORT, [(direction, data)], kind=kind, vector=v)
        for v in _client_context():  # the server's acks after the client's window (§3.3, §3.7)
            window = [("c2s", Window(len(v["client_context"]["seqs"])).encode())]
            window += [("c2s", JsonFrame(s, b'{"a":1}').encode()) for s in v["client_context"]["seqs"]]
            w.connection(v["name"] + " (after the window)", PORT, [*window, ("s2c", bytes.fromhex(v["hex"]))], kind="ack", vector=v)
        session = _session()
        w.connection("session", PORT, session, kind="session", vector={})
        w.connection("session (5-byte segments)", PORT, [(d, c) for d, data in session for c in segments(data, 5)], kind="session", vector={})
        for name, chunks, *_ in BATCH_BYTES:
            w.connection(name, PORT, [("c2s", c) for c in chunks], kind="batch", vector={"name": name})
        w.connection("acked", PORT, ACKED, kind="acked", vector={"name": "acked"})
        for name, payload in JSON_PAYLOADS:
            w.connection(name, PORT, [("c2s", Window(1).encode() + _json_j(payload))], kind="json", vector={"name": name}, inside=False)
            c = Compressed.wrap(_json_j(payload)).encode()
            w.connection(name, PORT, [("c2s", Window(1).encode()), ("c2s", c)], kind="json", vector={"name": name}, inside=True)
    cases = w.cases
    for layers in run_tshark(lua, cap, "lumberjack", "lumberjack", two_pass=False, lua_error_items=False, prefs=PREFS):
        tcp = layers["tcp"][0]
        direction = "c2s" if tcp["tcp.dstport"][0] in (str(PORT), str(OTHER_PORT)) else "s2c"
        shown = cases[int(tcp["tcp.stream"][0])]["shown"].setdefault(direction, [])
        for item in layers["lumberjack"]:
            if "lumberjack.eof" in item:  # the FIN of a direction closed inside a frame or a batch
                cases[int(tcp["tcp.stream"][0])].setdefault("eof", {})[direction] = item
                continue
            assert not [m for _, m in experts(item) if "Lua Error" in m], (cases[int(tcp["tcp.stream"][0])]["name"], item)
            shown.append({"frame": int(layers["frame"][0]["frame.number"][0]), "item": item})
    return {"cases": cases, "cap": cap}


def _client_context() -> list[dict[str, Any]]:
    """The server's machine-error vectors whose acks need the client's window (§4: "client: ...")."""
    return [v for k, v in _vectors() if k == "errors" and "client_context" in v and v["error"]["layer"] == "machine" and v["error"]["field"] != "(eof)"]


def _machine_error(direction: str, chunks: list[bytes], sizes: list[int]) -> int | None:
    """The index of the frame (of ``sizes`` bytes each) where refwire's server machine rejects a
    client's stream, at its default limits (None: it accepts it, or only at its EOF).  A server's
    stream alone is not checked: its acks need the client's window (the ``(after the window)`` cases)."""
    err = _server_machine(chunks) if direction == "c2s" else None
    if err is None or err.field == "(eof)":
        return None
    assert err.offset is not None
    ends = [sum(sizes[: k + 1]) for k in range(len(sizes))]
    return next(k for k, end in enumerate(ends) if err.offset < end)


def _ids() -> list[str]:
    return [f"{kind}:{v['name']}" for kind, v in _vectors()]


def test_every_case_is_in_the_capture(capture: dict[str, Any]) -> None:
    assert len(capture["cases"]) == 2 * len(_vectors()) + sum(
        k != "errors" and v["direction"] == "client->server" for k, v in _vectors()
    ) + 2 + len(_client_context()) + len(BATCH_BYTES) + 1 + 2 * len(JSON_PAYLOADS)


@pytest.mark.parametrize("case_name", _ids())
def test_the_dissector_shows_what_refwire_reads(capture: dict[str, Any], case_name: str) -> None:
    """Every frame and field, whole, split across segments and found by the heuristic; where
    refwire rejects the stream, a warning there naming §4 (specs/lumberjack/README.md §4)."""
    name = case_name.split(":", 1)[1]
    cases = [c for c in capture["cases"].values() if c["vector"].get("name") == name and c["kind"] != "ack"]
    assert len(cases) >= 2
    for case in cases:
        for direction, chunks in case["chunks"].items():
            expected = _refwire(chunks)
            shown = case["shown"].get(direction, [])
            bad = next((k for k, e in enumerate(expected) if _error(e)), None)
            if bad is None:
                assert [_shown(s["item"]) for s in shown] == expected, case["name"]
                warnings = [m for s in shown for sev, m in experts(s["item"]) if sev == WARN]
                at = _machine_error(direction, chunks, [int(s["item"]["lumberjack.size"][0]) for s in shown])
                if name == "window-over-limit":  # refwire's machine rejects it (max_window, §4)
                    assert any("max_window" in m and "§4" in m for m in warnings), warnings
                elif at is not None:  # refwire's machine rejects the frame at `at`, and only there
                    for k, s in enumerate(shown):
                        got = [m for sev, m in experts(s["item"]) if sev == WARN]
                        if k == at:
                            assert any("specs/lumberjack/README.md §" in m and "§4" in m for m in got), (case["name"], got)
                        else:
                            assert not got, (case["name"], k, got)
                else:
                    assert not warnings, (case["name"], warnings)
                eof = case.get("eof", {}).get(direction)
                err = _server_machine(chunks) if direction == "c2s" else None
                if err is not None and "closed inside a batch" in err.reason:  # the FIN between frames, inside a W's batch (§4)
                    want = err.reason.split("(")[1].rstrip(")")  # "k of n events received"
                    assert eof is not None and any(f"closed inside a batch ({want})" in m and "§4" in m for m in _warns(eof)), (eof, want)
                else:
                    assert eof is None, (case["name"], eof)
                continue
            # the frames before the error, as refwire reads them, with no warning
            assert [_shown(s["item"]) for s in shown[:bad]] == expected[:bad], case["name"]
            assert not [m for s in shown[:bad] for sev, m in experts(s["item"]) if sev == WARN], case["name"]
            if expected[bad].get("eof"):
                # the stream ends inside a frame: TCP reassembly waits for bytes that never come;
                # the FIN shows it, naming the frame and the bytes received (§4)
                assert len(shown) == bad, case["name"]
                eof = case["eof"][direction]
                have = sum(map(len, chunks)) - sum(int(s["item"]["lumberjack.size"][0]) for s in shown)
                assert int(eof["lumberjack.eof.received"][0]) == have, (case["name"], eof)
                assert any(m.startswith("connection closed inside a") and "specs/lumberjack/README.md §4" in m for m in _warns(eof)), eof
                continue
            warnings = [m for sev, m in experts(shown[bad]["item"]) if sev == WARN]
            assert any("specs/lumberjack/README.md" in m and "§4" in m for m in warnings), (case["name"], expected[bad], warnings)


@pytest.mark.parametrize("name", [n for n, _ in JSON_PAYLOADS])
def test_the_j_payload_is_checked_as_refwire_parses_it(capture: dict[str, Any], name: str) -> None:
    """A J payload refwire's decoder refuses (not one strict RFC 8259 JSON object, as orjson parses:
    §2.3, §4) has a warning on its json field, where refwire's error points (field json, the
    payload's first byte), citing §2.3 and §4; one it accepts has none -- alone and inside a C."""
    payload = dict(JSON_PAYLOADS)[name]
    cases = [c for c in capture["cases"].values() if c["kind"] == "json" and c["vector"]["name"] == name]
    assert len(cases) == 2
    for case in cases:
        expected = _refwire(case["chunks"]["c2s"])
        refused = any(map(_error, expected))
        if name.startswith("valid-"):
            assert not refused, (name, expected)
        else:
            assert refused, (name, expected)
        shown = case["shown"]["c2s"]
        assert [_shown(s["item"])["type"] for s in shown] == ["W", "C" if case["inside"] else "J"], case["name"]
        j = shown[1]["item"]["lumberjack"][0] if case["inside"] else shown[1]["item"]
        assert j["lumberjack.json"], name
        at_json = _warns(j.get("lumberjack.json_tree", {}))
        assert _warns(j) == at_json, (name, _warns(j))  # on the json field, nowhere else in the frame
        if refused:
            assert len(at_json) == 1 and "specs/lumberjack/README.md §2.3, §4" in at_json[0], (name, at_json)
            assert at_json[0].startswith("the J payload must be a JSON object" if name.startswith("top-level") else "the J payload is not valid JSON"), at_json
        else:
            assert at_json == [], (name, at_json)
    assert payload


def _warns(item: dict[str, Any]) -> list[str]:
    return [m for sev, m in experts(item) if sev == WARN]


#: the server acks each batch (refwire's application accepts it): what it held is released (§3.3, §4)
ACKED: list[tuple[str, bytes]] = [d for k in range(5) for d in (("c2s", Window(1).encode() + _j(k + 1, 30000)), ("s2c", Ack(k + 1).encode()))]


@pytest.mark.parametrize("acked", [False, True])
def test_acked_batches_release_what_they_held(capture: dict[str, Any], acked: bool) -> None:
    """Five batches of 30000 bytes: refwire's server refuses the fourth while none is acked (the
    memory's quarter, 100 KiB, is used up), and accepts all five when each is acked (accepted) before
    the next W; the dissector agrees (no warning on the acked connection)."""
    conn = ServerConnection(limits=LIMITS)
    error = None
    batches: list[Batch] = []
    try:
        for direction, data in ACKED:
            if direction == "s2c":
                if acked:
                    conn.accept(batches.pop(0), now=0.0)
                    assert conn.data_to_send() == data
                continue
            conn.receive_data(data, now=0.0)
            while not isinstance(ev := conn.next_event(), NeedData):
                assert isinstance(ev, Batch)
                batches.append(ev)
    except ProtocolError as exc:
        error = exc
    assert (error is None) == acked, error
    (case,) = [c for c in capture["cases"].values() if c["kind"] == "acked"]
    assert len(case["shown"]["c2s"]) == 10 and len(case["shown"]["s2c"]) == 5
    assert not [m for ss in case["shown"].values() for s in ss for m in _warns(s["item"])], case["name"]


@pytest.mark.parametrize("name", [b[0] for b in BATCH_BYTES])
def test_the_bytes_a_batch_holds(capture: dict[str, Any], name: str) -> None:
    """refwire's server counts the bytes of events a batch holds (§4: a J's payload, a D's keys and
    values plus 32 a pair, a C's inflated frames), within max_batch_bytes and what
    max_connection_memory leaves once earlier batches await their ack: the warning at the data
    frame that crosses it, or at a C whose frames together do, saying what refwire's error says;
    none within them."""
    _, chunks, at, says = next(b for b in BATCH_BYTES if b[0] == name)
    err = _server_machine(chunks)
    (case,) = [c for c in capture["cases"].values() if c["kind"] == "batch" and c["vector"]["name"] == name]
    shown = case["shown"]["c2s"]
    assert [_shown(s["item"]) for s in shown] == _refwire(chunks), name
    assert _machine_error("c2s", chunks, [int(s["item"]["lumberjack.size"][0]) for s in shown]) == at
    for k, s in enumerate(shown):
        got = _warns(s["item"])
        if k == at:
            assert err is not None and err.reason == says, (name, err)
            # (Wireshark cuts a label at 240 bytes: a long one is shown up to there)
            full = f"{says} (specs/lumberjack/README.md §4)"
            assert len(got) == 1 and (got[0] == full or (len(got[0]) >= 200 and full.startswith(got[0]))), (name, got)
        else:
            assert not got, (name, k, got)
    if at is None:
        assert err is None, (name, err)


@pytest.mark.parametrize("name", [v["name"] for v in _client_context()])
def test_a_bad_ack_after_the_window_gets_a_warning(capture: dict[str, Any], name: str) -> None:
    """The client's window, then the server's ack refwire's client machine rejects: the warning
    at that ack naming the spec's section (§3.3, §3.7, §4); the window shows none."""
    (case,) = [c for c in capture["cases"].values() if c["kind"] == "ack" and c["vector"]["name"] == name]
    v = case["vector"]
    assert not [m for s in case["shown"]["c2s"] for m in _warns(s["item"])], case["name"]
    acks = case["shown"]["s2c"]
    at = len(v["frames_before_error"])
    assert len(acks) == at + 1, acks
    assert not [m for s in acks[:at] for m in _warns(s["item"])], case["name"]
    got = _warns(acks[at]["item"])
    assert any("specs/lumberjack/README.md §" in m and "§4" in m for m in got), got
    assert not case.get("eof"), case["eof"]


def test_the_session_matches_acks_with_windows(capture: dict[str, Any]) -> None:
    """Each ``A n`` names the frame of the window whose last seq is n, and the latency (§3.3);
    ``A 0`` is a keepalive (§3.4)."""
    sessions = [c for c in capture["cases"].values() if c["kind"] == "session"]
    assert len(sessions) == 2
    for case in sessions:
        windows = [s["frame"] for s in case["shown"]["c2s"] if s["item"]["lumberjack.type"][0] == "W"]
        acks = [s["item"] for s in case["shown"]["s2c"]]
        assert [a["lumberjack.seq"][0] for a in acks] == ["0", "3", "6", "9"]
        assert acks[0]["lumberjack.keepalive"][0] == "1"
        assert [int(a["lumberjack.ack.window"][0]) for a in acks[1:]] == windows
        assert all(float(a["lumberjack.ack.time"][0]) > 0 for a in acks[1:])
        assert [_shown(s["item"]) for s in case["shown"]["c2s"]] == _refwire(case["chunks"]["c2s"])


def test_the_lua_limits_default_to_refwires(lua: Path) -> None:
    """The preferences the tests set default to refwire's limits (§4)."""
    text = lua.read_text()
    assert f'Pref.uint("max_batch_bytes", {DEFAULT_LIMITS.max_batch_bytes},' in text
    assert f'Pref.uint("max_connection_memory", {DEFAULT_LIMITS.max_connection_memory},' in text


def test_the_lua_is_deterministic_and_names_its_sources(lua: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.lua"
    assert main(["dissector", "lumberjack", "-o", str(again)]) == 0
    text = lua.read_text()
    assert again.read_text() == text
    assert "refwire.lumberjack.describe:LAYOUT" in text and "refwire.dissector.lumberjack:PART" in text
    assert 'ProtoField.uint32("lumberjack.count", "count", base.DEC)' in text


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dissector", "no-such-protocol", "-o", str(tmp_path / "x.lua")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no Wireshark dissector for 'no-such-protocol'" in err and "lumberjack, pravega" in err
    assert main(["dissector", "lumberjack", "-o", str(tmp_path / "missing" / "x.lua")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "cannot write" in err and "Traceback" not in err
