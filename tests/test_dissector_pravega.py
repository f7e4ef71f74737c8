"""The generated Pravega Wireshark dissectors (``refwire dissector pravega pravega-draft-2017``, both
dialects in one Lua file) against refwire's own reading.

Every wire vector of both dialects (specs/pravega/vectors/commands.json, errors.json and the
conversations of appends.json; specs/pravega-draft-2017/vectors/frames.json, partials.json,
errors.json and conversations.json) becomes TCP connections in a pcapng (:mod:`refwire.pcap`),
each once whole and once cut into 3-byte segments.  One tshark run (two passes) per dialect reads
them: today's vectors with the preference ``pravega.dialect:pravega`` (most vectors open with no
Hello: the override is what reads them as Pravega), the draft's with the automatic rule (no
Hello: the draft), beside connections that check the rule itself (a Hello first: Pravega, on the
usual port and found by the heuristic on another).  Every frame's fields are compared with the
dialect's describer (:mod:`refwire.pravega.describe`); where refwire rejects, the frame carries
an expert-info warning citing the dialect's spec; replies name their request's frame (by
requestId) and the latency, requests their reply's.  The strings of strings.json are no frames
and are not sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.tshark import Capture, needs_tshark, packets, segments, start_tshark, walk, warns

from refwire.cli import main
from refwire.describe import UNDECODED, Described
from refwire.errors import ProtocolError
from refwire.pravega.client import parse_events
from refwire.pravega.commands import CLIENT_LIMITS, DEFAULT_LIMITS
from refwire.pravega.describe import describer as pravega_describer
from refwire.pravega.draft2017.connection import DEFAULT_LIMITS as DRAFT_LIMITS
from refwire.pravega.draft2017.describe import describer as draft_describer
from refwire.pravega.frames_codec import CURRENT

pytestmark = needs_tshark

ROOT = Path(__file__).resolve().parent.parent / "specs"
PORT = 12345
OTHER_PORT = 22345  # no dissector registered: the Hello heuristic must find the connection there
HELLO = bytes.fromhex("ffffff81000000080000001100000005")
SPECS = {"pravega": "specs/pravega/README.md §", "pravega_draft": "specs/pravega-draft-2017/README.md §"}


def _vectors(spec: str, name: str) -> list[dict[str, Any]]:
    return list(json.loads((ROOT / spec / "vectors" / name).read_text())["vectors"])


def _dir(direction: str | None, command: str | None = None) -> str:
    if direction == "server->client":
        return "s2c"
    if direction is None and command is not None:
        cls = next(c for c in CURRENT.commands.values() if c.NAME == command)
        return "s2c" if cls.DIRECTION == "reply" else "c2s"
    return "c2s"


def _cases(dialect: str) -> list[tuple[str, str, list[tuple[str, bytes]]]]:
    """(name, kind, sends) of every vector of ``dialect``: single frames, errors, conversations."""
    out: list[tuple[str, str, list[tuple[str, bytes]]]] = []
    if dialect == "pravega":
        singles = [(v["name"], _dir(None, v["command"]), v["hex"]) for v in _vectors("pravega", "commands.json")]
        errors = [(v["name"], _dir(v["direction"]), v["hex"]) for v in _vectors("pravega", "errors.json")]
        talks = _vectors("pravega", "appends.json")
    else:
        singles = [(v["name"], _dir(v["direction"]), v["hex"]) for v in _vectors("pravega-draft-2017", "frames.json")]
        singles += [(v["name"], _dir(v["direction"]), v["hex"]) for v in _vectors("pravega-draft-2017", "partials.json")]
        errors = [(v["name"], _dir(v["direction"]), v["hex"]) for v in _vectors("pravega-draft-2017", "errors.json") if "hex" in v]
        talks = _vectors("pravega-draft-2017", "conversations.json")
    out += [(n, "vector", [(d, bytes.fromhex(h))]) for n, d, h in singles]
    out += [(n, "error", [(d, bytes.fromhex(h))]) for n, d, h in errors]
    if dialect == "pravega_draft":  # a draft error vector that opens with today's Hello is Pravega by the rule
        out = [(n, "draft-hello" if s[0][1][:8] == HELLO[:8] else k, s) for n, k, s in out]
    for v in talks:
        sends = [("c2s" if "client" in s else "s2c", bytes.fromhex(s.get("client", s.get("server", "")))) for s in v["steps"]]
        sends = [(d, b) for d, b in sends if b]
        if sends:
            out.append((v["name"], "talk", sends))
    return out


# --------------------------------------------------------------------------- what refwire reads


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str) and len(v) == 36 and v.count("-") == 4:
        return v.replace("-", "")  # a UUID: the dissector shows its 16 bytes
    return str(v).split("\x00")[0]  # Wireshark's strings end at a NUL (modified UTF-8's C0 80)


def _expected(d: Described) -> dict[str, Any]:
    if d.type == UNDECODED:
        return {"undecoded": True}
    if d.error is not None:
        return {"type": str(d.fields["type"]), "length": str(d.fields["length"]), "reject": True}
    return {"reject": False, **{k: _value(v) for k, v in d.fields.items()}}


def _refwire(dialect: str, direction: str, chunks: list[bytes]) -> list[dict[str, Any]]:
    if dialect == "pravega":
        limit = (DEFAULT_LIMITS if direction == "c2s" else CLIENT_LIMITS).max_frame_size
        des = pravega_describer(limit, direction)
    else:
        des = draft_describer(DRAFT_LIMITS.max_frame_size, direction)
    frames = [_expected(d) for c in chunks for d in des.feed(c)]
    return frames + [{"undecoded": True, "eof": True} for _ in des.end()]


# --------------------------------------------------------------------------- what tshark shows


def _shown(proto: str, item: dict[str, list[Any]], expected: dict[str, Any]) -> dict[str, Any]:
    """What the dissector shows of the fields refwire's describer names."""
    if f"{proto}.undecoded" in item:
        return {"undecoded": True}
    if warns(item):
        return {"type": item[f"{proto}.type"][0], "length": item[f"{proto}.length"][0], "reject": True}
    out: dict[str, Any] = {"reject": False}
    for k, v in expected.items():
        key = f"{proto}.{k}"
        if k == "reject" or key not in item:
            continue
        shown = str(item[key][-1]).replace(":", "")  # the last: the draft's BeginAppendBlock.length
        if v in ("true", "false"):
            shown = "true" if int(shown) else "false"
        out[k] = shown
    return out


def _capture(run: Any) -> list[tuple[int, int, str, dict[str, Any]]]:
    """(tcp.stream, destination port, the protocol, its item) of every frame tshark shows."""
    out = []
    for layers in packets(run):
        tcp = layers["tcp"][0]
        for proto in ("pravega", "pravega_draft"):
            for item in layers.get(proto, []):
                out.append((int(tcp["tcp.stream"][0]), int(tcp["tcp.dstport"][0]), proto, item | {"_frame": [layers["frame"][0]["frame.number"][0]]}))
    return out


@pytest.fixture(scope="module")
def lua(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lua") / "refwire-pravega.lua"
    assert main(["dissector", "pravega", "pravega-draft-2017", "-o", str(path)]) == 0
    return path


def _write(tmp: Path, dialect: str, extra: list[tuple[str, str, int, list[tuple[str, bytes]]]]) -> tuple[Path, dict[int, dict[str, Any]]]:
    """The pcapng of every case of ``dialect`` (and ``extra``), and the cases by tcp.stream."""
    cap = tmp / f"{dialect}.pcapng"
    with Capture(cap, ("10.0.0.1", 40000)) as w:
        for name, kind, sends in _cases(dialect):
            w.connection(name, PORT, sends, kind=kind, dialect=dialect)
            w.connection(name, PORT, [(d, c) for d, data in sends for c in segments(data, 3)], kind=kind, dialect=dialect)
        for name, kind, port, sends in extra:
            w.connection(name, port, sends, kind=kind, dialect=dialect)
    cases = w.cases
    return cap, cases


#: connections that check the dialect rule (read with the automatic rule)
_SETUP = bytes.fromhex(next(v["hex"] for v in _vectors("pravega", "commands.json") if v["command"] == "SetupAppend"))
CHOICE: list[tuple[str, str, int, list[tuple[str, bytes]]]] = [
    ("hello-first", "choice", PORT, [("c2s", HELLO + _SETUP), ("s2c", HELLO)]),
    ("hello-first-3-byte-segments", "choice", PORT, [("c2s", c) for c in segments(HELLO + _SETUP, 3)]),
    ("hello-first-heuristic", "choice", OTHER_PORT, [("c2s", HELLO + _SETUP), ("s2c", HELLO)]),
]


@pytest.fixture(scope="module")
def runs(lua: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[int, dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("cap")
    out = {}
    started = []
    for dialect, prefs, extra in (("pravega", ["-o", "pravega.dialect:pravega"], []), ("pravega_draft", [], CHOICE)):
        cap, cases = _write(tmp, dialect, extra)
        started.append((start_tshark(lua, cap, "pravega pravega_draft", "pravega or pravega_draft", prefs=prefs), cases))
        out[dialect] = cases
    for run, cases in started:
        for stream, dport, proto, item in _capture(run):
            case = cases[stream]
            direction = "c2s" if dport == case["port"] else "s2c"
            case["shown"].setdefault(direction, []).append((proto, item))
    return out


def _check(case: dict[str, Any]) -> None:
    proto = case["dialect"]
    for direction, chunks in case["chunks"].items():
        expected = _refwire("pravega" if proto == "pravega" else "draft", direction, chunks)
        shown = case["shown"].get(direction, [])
        assert all(p == proto for p, _ in shown), (case["name"], [p for p, _ in shown])
        bad = next((k for k, e in enumerate(expected) if e.get("undecoded")), None)
        upto = len(expected) if bad is None else bad
        got = [_shown(proto, item, e) for (_, item), e in zip(shown[:upto], expected[:upto], strict=False)]
        assert got == expected[:upto], case["name"]
        for (_, item), e in zip(shown, expected[:upto], strict=False):
            if e["reject"]:
                assert any(SPECS[proto] in m for m in warns(item)), (case["name"], e)
        if bad is None:
            assert len(shown) == len(expected), case["name"]
        elif expected[bad].get("eof"):
            assert len(shown) == bad, case["name"]  # TCP reassembly waits for bytes that never come
        else:
            warnings = warns(shown[bad][1])
            assert any(SPECS[proto] in m for m in warnings), (case["name"], expected[bad], warnings)


@pytest.mark.parametrize("dialect", ["pravega", "pravega_draft"])
def test_every_vector_shows_what_refwire_reads(runs: dict[str, dict[int, dict[str, Any]]], dialect: str) -> None:
    """Whole and in 3-byte segments: every scalar field of every command as the describer reads
    it, no warning; a warning citing the spec where refwire rejects (every error vector)."""
    cases = [c for c in runs[dialect].values() if c["kind"] in ("vector", "error", "talk")]
    assert len(cases) > 100
    failures = []
    for case in cases:
        try:
            _check(case)
        except AssertionError as exc:
            failures.append(f"{case['name']}: {str(exc)[:300]}")
    assert not failures, "\n".join(failures[:10]) + f"\n({len(failures)} of {len(cases)})"


@pytest.mark.parametrize("dialect", ["pravega", "pravega_draft"])
def test_error_vectors_get_a_warning(runs: dict[str, dict[int, dict[str, Any]]], dialect: str) -> None:
    """Each error vector refwire's describer rejects (a frame or undecoded bytes) carries a warning."""
    seen = 0
    for case in runs[dialect].values():
        if case["kind"] != "error":
            continue
        direction = next(iter(case["chunks"]))
        expected = _refwire("pravega" if dialect == "pravega" else "draft", direction, case["chunks"][direction])
        if any(e.get("reject") or (e.get("undecoded") and not e.get("eof")) for e in expected):
            assert any(SPECS[dialect] in m for _, item in case["shown"].get(direction, []) for m in warns(item)), case["name"]
            seen += 1
    assert seen >= 20


def test_replies_name_their_request(runs: dict[str, dict[int, dict[str, Any]]]) -> None:
    """By requestId per connection: a reply names its request's frame and the latency, the
    request its reply's (two passes)."""
    matched = 0
    for case in runs["pravega"].values():
        if case["kind"] != "talk":
            continue
        requests = {int(item["_frame"][0]): item for _, item in case["shown"].get("c2s", [])}
        for _, item in case["shown"].get("s2c", []):
            if "pravega.request_in" not in item:
                continue
            req = requests[int(item["pravega.request_in"][0])]
            assert req["pravega.request_id"][-1] == item["pravega.request_id"][-1]
            assert float(item["pravega.time"][0]) > 0
            assert int(req["pravega.response_in"][0]) == int(item["_frame"][0])
            matched += 1
    assert matched >= 20


def test_events_inside_append_data(runs: dict[str, dict[int, dict[str, Any]]]) -> None:
    """An AppendBlock's events and a bare AppendBlockEnd's (whole Event frames, the Rust client's)
    are counted and sized as refwire's reader splits them (§5.2)."""
    checked = 0
    for case in runs["pravega"].values():
        if case["kind"] not in ("talk", "vector") or "c2s" not in case["chunks"]:
            continue
        des = pravega_describer(DEFAULT_LIMITS.max_frame_size, "c2s")
        described = [d for c in case["chunks"]["c2s"] for d in des.feed(c)]
        for d, (_, item) in zip(described, case["shown"].get("c2s", []), strict=False):
            if d.type not in ("AppendBlock", "AppendBlockEnd") or d.frame is None:
                continue
            data = bytes(d.frame.data)
            try:
                events, used = parse_events(data)
            except ProtocolError:
                continue  # a trailing Padding or PartialEvent (AppendBlock): not compared here
            if used != len(data) or not events:
                continue  # the rest of a split event (Java's AppendBlockEnd): no events shown
            fields = list(walk(item))
            assert [v for k, v in fields if k == "pravega.events"] == [str(len(events))], case["name"]
            assert [v for k, v in fields if k == "pravega.event.length"] == [str(len(e)) for _, e in events], case["name"]
            checked += 1
    assert checked >= 50, checked


def test_the_dialect_is_chosen_by_the_hello(runs: dict[str, dict[int, dict[str, Any]]]) -> None:
    """Automatic rule: a connection opening with a Hello is Pravega (on the usual port, split in
    3-byte segments, and by the heuristic on another port); the draft's connections (no Hello) are
    the draft.  The preference pravega.dialect:pravega reads connections without a Hello as Pravega."""
    choice = [c for c in runs["pravega_draft"].values() if c["kind"] == "choice"]
    assert len(choice) == 3
    hello = [c for c in runs["pravega_draft"].values() if c["kind"] == "draft-hello"]
    assert len(hello) == 2  # unknown-code-current-hello, whole and in segments: no draft warning, Pravega's reading
    for case in hello:
        assert [p for p, _ in case["shown"]["c2s"]] == ["pravega"], case["name"]
    for case in choice:
        shown = case["shown"]["c2s"]
        assert [p for p, _ in shown] == ["pravega", "pravega"], case["name"]
        assert [item["pravega.type"][0] for _, item in shown] == ["-127", "1"], case["name"]
        assert not any(warns(item) for _, item in shown)
    drafts = [c for c in runs["pravega_draft"].values() if c["kind"] == "vector"]
    assert drafts and all(p == "pravega_draft" for c in drafts for s in c["shown"].values() for p, _ in s)
    overridden = [c for c in runs["pravega"].values() if c["kind"] == "vector" and c["name"] != "hello-17-5"]
    assert overridden and all(p == "pravega" for c in overridden for s in c["shown"].values() for p, _ in s)


def test_one_file_holds_both_and_is_deterministic(lua: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.lua"
    assert main(["dissector", "pravega", "pravega-draft-2017", "-o", str(again)]) == 0
    text = lua.read_text()
    assert again.read_text() == text
    assert "refwire.pravega.describe:LAYOUT" in text and "refwire.dissector.pravega_draft:PART" in text
    assert 'ProtoField.int64("pravega.request_id", "request_id", base.DEC)' in text
