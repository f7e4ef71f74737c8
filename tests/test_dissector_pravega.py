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

Each dialect also has a session of refwire's own client and server recorded through refwire's tap
(as ``refwire record --pcap`` records it; the draft has no real peer to record): one more tshark
run reads both, and every frame must be what ``refwire decode --json`` reads, with no warning, the
draft's connections as the draft and Pravega's as Pravega (the checks of the real peers' sessions,
tests/peers/test_peer_dissector.py).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Final

import pytest
from support.dissector_pravega import (
    HELLO,
    PORT,
    SPECS,
    _check,
    _draft_blocks,
    _draft_machine_at,
    _machine_at,
    _refwire,
    _vectors,
)
from support.tshark import (
    Capture,
    check_session_cases,
    decoded,
    machine_warns,
    needs_tshark,
    packets,
    record_session,
    segments,
    session_cases,
    start_tshark,
    walk,
    warns,
)

from refwire.cli import main
from refwire.errors import ProtocolError
from refwire.pravega import frames as F
from refwire.pravega.client import parse_events
from refwire.pravega.commands import DEFAULT_LIMITS
from refwire.pravega.describe import describer as pravega_describer
from refwire.pravega.frames_codec import CURRENT

pytestmark = needs_tshark

OTHER_PORT = 22345  # no dissector registered: the Hello heuristic must find the connection there


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


# --------------------------------------------------------------------------- what tshark shows


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


_W1, _W2 = uuid.UUID(int=1), uuid.UUID(int=2)


def _setup(w: uuid.UUID = _W1, rid: int = 1) -> bytes:
    return F.SetupAppend(request_id=rid, writer_id=w, segment="s", delegation_token="").encode()


def _end(w: uuid.UUID = _W1, *, size: int = 0, data: bytes = b"", n: int = 1, last: int = 1, rid: int = 2) -> bytes:
    return F.AppendBlockEnd(writer_id=w, size_of_whole_events=size, data=data, num_events=n, last_event_number=last, request_id=rid).encode()


def _cond(en: int, w: uuid.UUID = _W1) -> bytes:
    return F.ConditionalAppend(writer_id=w, event_number=en, expected_offset=0, event=b"e", request_id=3).encode()


_EVENT = F.Event(data=b"abcde").encode()
#: connections each of which refwire's machine rejects at one frame (name, sends, what its error
#: says, the spec sections the warning cites); and one it does not (an incompatible Hello: answered
#: and closed, nothing after it is read, §7.1)
MACHINE: list[tuple[str, list[tuple[str, bytes]], str, str]] = [
    ("reply-sent-by-the-client", [("c2s", _setup() + F.AppendSetup(request_id=1, segment="s", writer_id=_W1, last_event_number=0).encode())], "AppendSetup is a reply, not a request", "§1.2, §3"),
    ("request-sent-by-the-server", [("s2c", F.KeepAlive().encode() + F.ReadSegment(segment="s", offset=0, suggested_length=1, request_id=4).encode())], "ReadSegment is a request, not a reply", "§1.2, §3"),
    ("partial-event-outside-a-block", [("c2s", _setup() + F.PartialEvent(data=b"abc").encode())], "PartialEvent is not a top-level command", "§5.3, §10.1"),
    ("append-after-append-block", [("c2s", _setup() + F.AppendBlock(writer_id=_W1, data=_EVENT).encode() + _cond(1))], "unexpected ConditionalAppend following an append block", "§5.3"),
    ("setup-after-append-block", [("c2s", _setup() + F.AppendBlock(writer_id=_W1, data=_EVENT).encode() + _setup(_W2))], "unexpected SetupAppend following an append block", "§5.3"),
    ("block-before-setup", [("c2s", _setup(_W2) + F.AppendBlock(writer_id=_W1, data=_EVENT).encode())], "referenced before SetupAppend", "§5.3"),
    ("block-end-before-setup", [("c2s", _end())], "referenced before SetupAppend", "§5.3"),
    ("conditional-before-setup", [("c2s", _cond(1))], "referenced before SetupAppend", "§5.3"),
    ("num-events-zero", [("c2s", _setup() + _end(data=_EVENT, n=0))], "numEvents must be positive, got 0", "§5.3"),
    ("last-event-number-backwards", [("c2s", _setup() + _end(data=_EVENT, last=5) + _end(data=_EVENT, last=4))], "last event number went backwards: 4 after 5", "§5.3"),
    ("event-number-backwards", [("c2s", _setup() + _cond(5) + _cond(4))], "event number went backwards: 4 after 5", "§5.3"),
    ("block-end-of-another-writer", [("c2s", _setup() + _setup(_W2) + F.AppendBlock(writer_id=_W1, data=_EVENT).encode() + _end(_W2, size=len(_EVENT)))], "does not match its AppendBlock writer", "§5.3"),
    ("size-of-whole-events-past-the-block", [("c2s", _setup() + F.AppendBlock(writer_id=_W1, data=_EVENT).encode() + _end(size=len(_EVENT) + 1))], "sizeOfWholeEvents 14 is outside the block's 13 bytes", "§5.3"),
    ("block-remainder-too-short", [("c2s", _setup() + F.AppendBlock(writer_id=_W1, data=_EVENT + b"xyz").encode() + _end(size=len(_EVENT), data=b"z"))], "3 bytes after the whole events are not a command header", "§5.3"),
    ("partial-event-longer-than-the-block", [("c2s", _setup() + F.AppendBlock(writer_id=_W1, data=_EVENT + bytes.fromhex("fffffffe00000009") + b"ab").encode() + _end(size=len(_EVENT), data=b"z"))], "the PartialEvent length 9 does not match the 2 bytes left in the block", "§5.3"),
    ("too-many-writers", [("c2s", b"".join(_setup(uuid.UUID(int=k + 1), k) for k in range(DEFAULT_LIMITS.max_window + 1)))], f"exceeds the limit max_writers={DEFAULT_LIMITS.max_window}", "§11"),
    ("server-hello-outside-the-client-versions", [("c2s", HELLO), ("s2c", F.Hello(high_version=4, low_version=2).encode())], "server speaks versions 2..4", "§7.1"),
    # a reassembled append (the block's whole events, its PartialEvent, the AppendBlockEnd's data) over
    # max_buffered + max_frame_size with the default limits: two frames of 15 and 10 MiB (§5.3, §11)
    ("reassembled-append-over-max-buffered", [("c2s", _setup() + F.AppendBlock(writer_id=_W1, data=_EVENT + F.PartialEvent(data=bytes(15 << 20)).encode()).encode()
                                               + _end(size=len(_EVENT), data=b"\xaa" * (10 << 20)))],
     f"data {len(_EVENT) + (25 << 20)} exceeds the limit max_buffered={DEFAULT_LIMITS.max_buffered + DEFAULT_LIMITS.max_frame_size}", "§5.3, §11"),
]
#: refwire's server reads nothing after an incompatible Hello: no warning after it
MACHINE_NONE: list[tuple[str, list[tuple[str, bytes]]]] = [
    ("incompatible-hello-then-nothing-read", [("c2s", F.Hello(high_version=40, low_version=30).encode() + _end()), ("s2c", F.Hello().encode())]),
]


@pytest.fixture(scope="module")
def runs(lua: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[int, dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("cap")
    out = {}
    started = []
    machine = [(n, "machine", PORT, sends) for n, sends, _, _ in MACHINE] + [(n, "machine-none", PORT, sends) for n, sends in MACHINE_NONE]
    for dialect, prefs, extra in (("pravega", ["-o", "pravega.dialect:pravega"], machine), ("pravega_draft", [], CHOICE + _draft_blocks())):
        cap, cases = _write(tmp, dialect, extra)
        started.append((start_tshark(lua, cap, "pravega pravega_draft", "pravega or pravega_draft", prefs=prefs), cases))
        out[dialect] = cases
    for run, cases in started:
        for stream, dport, proto, item in _capture(run):
            case = cases[stream]
            direction = "c2s" if dport == case["port"] else "s2c"
            if f"{proto}.eof" in item:  # the FIN of a direction closed inside a frame
                case.setdefault("eof", {})[direction] = (proto, item)
                continue
            case["shown"].setdefault(direction, []).append((proto, item))
    return out


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


@pytest.mark.parametrize("name", [m[0] for m in MACHINE])
def test_a_warning_where_the_machine_rejects(runs: dict[str, dict[int, dict[str, Any]]], name: str) -> None:
    """refwire's machine (the server's on what the client sends, the client's on what the server
    sends) rejects the connection at one frame the codec accepts: the warning there, with what
    refwire's error says and the section; no warning on any other frame, either way."""
    (case,) = [c for c in runs["pravega"].values() if c["name"] == name and c["kind"] == "machine"]
    _, sends, says, section = next(m for m in MACHINE if m[0] == name)
    direction = sends[-1][0]
    found = _machine_at(case, direction)
    assert found is not None, name
    at, err = found
    assert says in err.reason, (says, err.reason)
    _check(case)  # the warning on exactly frame `at`, none elsewhere, every frame as refwire reads it
    got = machine_warns("pravega", case["shown"][direction][at][1])
    assert any(says in m and f"specs/pravega/README.md {section})" in m for m in got), got


def test_no_warning_after_an_incompatible_hello(runs: dict[str, dict[int, dict[str, Any]]]) -> None:
    """refwire's server answers an incompatible Hello and closes: nothing after it is checked (§7.1);
    the client refuses the server's Hello (§7.1), at that Hello."""
    cases = [c for c in runs["pravega"].values() if c["kind"] == "machine-none"]
    assert len(cases) == len(MACHINE_NONE)
    for case in cases:
        assert _machine_at(case, "c2s") is None, case["name"]
        assert not [m for _, item in case["shown"]["c2s"] for m in warns(item)], case["name"]
        assert _machine_at(case, "s2c") is not None, case["name"]
        _check(case)


def test_the_draft_machine_errors_get_a_warning(runs: dict[str, dict[int, dict[str, Any]]]) -> None:
    """Every draft connection refwire's draft machine rejects at a frame the codec reads (the
    directions §3, the states §3/§6.3/§6.4, partial messages §5, blocks §6.3) carries the warning
    there, saying what refwire's error says and citing the draft's spec; the errors that depend on
    the store (DRAFT_UNSEEN) get none (``_check``: none on any other frame)."""
    seen = unseen = 0
    for case in runs["pravega_draft"].values():
        if case["kind"] not in ("vector", "error", "talk"):
            continue
        for direction in case["chunks"]:
            at = _draft_machine_at(case, direction)
            if at is None:
                continue
            if at[0] is None:
                unseen += 1
                assert not [m for _, item in case["shown"].get(direction, []) for m in machine_warns("pravega_draft", item)]
                continue
            got = machine_warns("pravega_draft", case["shown"][direction][at[0]][1])
            words = " ".join(at[1].reason.split()[:2])  # (ids and offsets are written otherwise)
            assert any(words in m and SPECS["pravega_draft"] in m for m in got), (case["name"], at[1].reason, got)
            seen += 1
    assert seen >= 80 and unseen >= 10, (seen, unseen)
    blocks = {c["name"]: _draft_machine_at(c, "c2s") for c in runs["pravega_draft"].values() if c["name"].startswith("draft-partial-")}
    assert blocks["draft-partial-begin-and-end"] is None
    short, lies = blocks["draft-partial-begin-wire-length-short"], blocks["draft-partial-end-offset-lies"]
    assert short is not None and short[0] == 2 and "wire bytes between Begin and End" in short[1].reason, short
    assert lies is not None and lies[0] == 4 and "is not Begin's" in lies[1].reason, lies
    # a reassembled message's fields the codec refuses: at its End part (frame 1), as the codec's
    # warning on a whole frame says it (refwire's and the dissector's wording of a field differ)
    for name, says, section in [
        ("draft-partial-setup-truncated-field", "truncated: segment needs 16 bytes, 2 left", "§2, §4"),
        ("draft-partial-setup-trailing-byte", "1 bytes after the last field", "§2, §10.1 D11"),
        ("draft-partial-setup-bad-utf", "malformed modified UTF-8", "§2"),
    ]:
        found = blocks[name]
        assert found is not None and found[0] == 1 and found[1].reason.startswith("reassembled message: "), (name, found)
        assert says in found[1].reason, (name, found[1].reason)
        case = next(c for c in runs["pravega_draft"].values() if c["name"] == name)
        got = machine_warns("pravega_draft", case["shown"]["c2s"][1][1])
        assert any(m.startswith("reassembled message: ") and says in m and f"{SPECS['pravega_draft']}{section[1:]})" in m for m in got), (name, got)


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


# --------------------------------------------------------------------------- recorded sessions


#: the segments the recorded sessions write (the draft's store holds its segment from the start:
#: the draft has no CreateSegment, specs/pravega-draft-2017/README.md §6.2)
DRAFT_SEGMENT: Final = "dissector/draft/0"
SESSION_SEGMENT: Final = "dissector/pravega/0"
#: the draft session's ConnectionId, and the size of its server's reply parts (§5 "Sending")
_DRAFT_CID: Final = uuid.UUID(int=0x2017)
_DRAFT_REPLY_PART: Final = 16 * 1024
#: an event of this size or more is cut into partial messages of _DRAFT_CUT bytes
_DRAFT_LARGE: Final = 64 * 1024
_DRAFT_CUT: Final = 24 * 1024


#: the draft store of the recorded session (its protocol errors must stay none)
_DRAFT_FRONTS: list[Any] = []


class _DraftPlan:
    """The draft writer's plan (:class:`refwire.pravega.draft2017.writer.Planner`, §5, §6.3, §6.4):
    three events a block, a large event cut into partial messages whose last part follows the
    EndAppendBlock (``straddle``), every block padded with a KeepAlive."""

    def block_events(self) -> int:
        return 3

    def cuts(self, frame_len: int) -> list[int]:
        return list(range(_DRAFT_CUT, frame_len, _DRAFT_CUT)) if frame_len >= _DRAFT_LARGE else []

    def straddle(self) -> bool:
        return True

    def padding(self) -> bytes | None:
        return b"pad"


async def _draft_store(nursery: Any, workdir: Path) -> tuple[str, int]:
    """refwire's draft segment store (:class:`~refwire.pravega.draft2017.server.DraftFrontend`,
    in memory) holding :data:`DRAFT_SEGMENT`, its replies cut in parts of _DRAFT_REPLY_PART bytes
    (the draft's descriptor names no reference server)."""
    import trio

    from refwire.pravega.draft2017.server import DraftConfig, DraftFrontend
    from refwire.pravega.server import SegmentStoreServer

    server = SegmentStoreServer()
    server.store.create(DRAFT_SEGMENT)
    front = DraftFrontend(server, config=DraftConfig(reply_part_size=_DRAFT_REPLY_PART))
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    await nursery.start(server.sync_forever)
    await nursery.start(front.serve, listeners)
    _DRAFT_FRONTS.append(front)
    return "127.0.0.1", int(listeners[0].socket.getsockname()[1])


#: the draft session's events: small ones, then one cut into partial messages, then more
_DRAFT_EVENTS: Final = ([b"draft event %d" % i for i in range(4)] + [bytes(range(256)) * 400], [b"after %d" % i for i in range(2)])


async def _draft_talk(host: str, port: int) -> None:
    """refwire's draft client (specs/pravega-draft-2017/README.md §5-§8): a :class:`DraftWriter`
    writes twice (a connection each: SetupAppend, AppendSetup with the ack level, blocks with
    Events, KeepAlive padding and the partial messages of a large event, DataAppended); then a
    :class:`DraftConnection` sends a KeepAlive (echoed) and a :class:`DraftReader` reads the segment
    back (the large read's SegmentRead comes as partial messages)."""
    import trio

    from refwire.pravega.client import parse_events
    from refwire.pravega.draft2017.client import DraftConnection, DraftReader, DraftWriter
    from refwire.pravega.draft2017.frames import KeepAlive

    writer = DraftWriter(host, port, DRAFT_SEGMENT, connection_id=_DRAFT_CID, planner=_DraftPlan())
    for events in _DRAFT_EVENTS:
        level = await writer.write(events)
    assert writer.stats == {"connections": 2, "reconnects": 0, "protocol_errors": 0}, writer.stats
    conn = DraftConnection(await trio.open_tcp_stream(host, port))
    data = b""
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        await conn.send(KeepAlive(data=b"ping"))
        reader = DraftReader(conn, DRAFT_SEGMENT, read_size=100)
        data += (await reader.read(timeout=10)).data
        reader.read_size = 1024 * 1024
        while not (r := await reader.read(timeout=10)).at_tail:
            data += r.data
        data += r.data
        nursery.cancel_scope.cancel()
    assert len(data) == level and [e for _, e in parse_events(data)[0]] == [e for es in _DRAFT_EVENTS for e in es]


async def _pravega_talk(host: str, port: int) -> None:
    """refwire's Pravega client (specs/pravega/README.md §5-§7): CreateSegment; an
    :class:`EventWriter` in the Rust client's style (a bare AppendBlockEnd per batch, a large event
    among them) and one in the Java client's (1000-byte AppendBlocks: whole events, then the head of
    the event that did not fit as a PartialEvent, its tail in the AppendBlockEnd; the last padded);
    SealSegment; then GetStreamSegmentInfo and a
    :class:`SegmentReader` reading every event back to the sealed end."""
    import trio

    from refwire.pravega.client import (
        EventWriter,
        PravegaConnection,
        SegmentReader,
        WriterConfig,
        create_segment,
        seal_segment,
        segment_info,
    )

    assert await create_segment(host, port, SESSION_SEGMENT) is True
    rust = [[b"rust event %d" % i for i in range(3)], [bytes(range(256)) * 400, b"after the large one"]]
    java = [[b"java event %03d " % i * 20 for i in range(10)]]  # 300-byte events in 1000-byte blocks
    for config, batches in ((WriterConfig(style="rust"), rust), (WriterConfig(style="java"), java)):
        async with EventWriter(host, port, SESSION_SEGMENT, writer_id=uuid.uuid4(), config=config) as writer:
            writer.session.java_block_sizes = [1000]  # (Java's blocks: whole events, a PartialEvent, or Padding)
            for batch in batches:
                await writer.write(batch)
    await seal_segment(host, port, SESSION_SEGMENT)
    conn = await PravegaConnection.connect(host, port)
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        info = await segment_info(conn, SESSION_SEGMENT)
        assert info.is_sealed
        got = [e async for _, e in SegmentReader(conn, SESSION_SEGMENT, read_size=64 * 1024).events()]
        nursery.cancel_scope.cancel()
    assert got == [e for batches in (rust, java) for b in batches for e in b]


@pytest.fixture(scope="module")
def sessions(lua: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[dict[str, Any]], list[Any]]]:
    """Each dialect's session with refwire's own client and server, recorded as ``refwire record
    --pcap`` records it (:func:`support.tshark.record_session`): by dialect, every connection as
    tshark shows it (one run over both files, concatenated: a pcapng of two sections; the draft's
    port decoded as Pravega, the dissector's automatic rule choosing) and what ``refwire decode
    FILE --json`` printed of it."""
    from refwire.pipeline.capture import read_pcap

    tmp = tmp_path_factory.mktemp("sessions")
    _DRAFT_FRONTS.clear()
    draft = record_session(tmp / "pravega-draft-2017.pcapng", _draft_talk, upstream=_draft_store, timeout=30)
    assert [f.stats["protocol_errors"] for f in _DRAFT_FRONTS] == [0] and not _DRAFT_FRONTS[0].errors
    today = record_session(tmp / "pravega.pcapng", _pravega_talk, reference="pravega", timeout=30)
    both = tmp / "both.pcapng"
    both.write_bytes(draft.read_bytes() + today.read_bytes())
    (port,) = {c.server[1] for c in read_pcap(draft)}  # the tap's: no port of the dissector's
    assert port not in {c.client[1] for c in read_pcap(today)}, port
    cases = session_cases(lua, both, "pravega pravega_draft", "pravega or pravega_draft", prefs=["-d", f"tcp.port=={port},pravega"])
    n = len(read_pcap(draft))
    assert [c["port"] == port for c in cases] == [k < n for k in range(len(cases))]
    return {"pravega_draft": (cases[:n], decoded(draft, "pravega-draft-2017")), "pravega": (cases[n:], decoded(today, "pravega"))}


def _check_recorded(dialect: str, case: dict[str, Any]) -> None:
    """Every frame of a recorded connection as refwire's describer of ``dialect`` reads it (no
    frame refwire rejects, nothing undecoded), shown by that dialect's dissector (:func:`_check`)."""
    for direction, chunks in case["chunks"].items():
        expected = _refwire("pravega" if dialect == "pravega" else "draft", direction, chunks)
        assert not [e for e in expected if e.get("undecoded") or e["reject"]], (case["name"], direction)
    shown = {d: [(s["proto"], s["item"]) for s in v] for d, v in case["shown"].items()}
    _check({**case, "dialect": dialect, "shown": shown})


@pytest.mark.parametrize("dialect", ["pravega", "pravega_draft"])
def test_a_recorded_session_shows_what_refwire_decodes(sessions: dict[str, tuple[list[dict[str, Any]], list[Any]]], dialect: str) -> None:
    """refwire's own client and server of the dialect, through refwire's tap: every frame of every
    connection as refwire reads it, as many per direction as ``refwire decode --json`` prints, no
    warning; the draft's connections (no Hello) read as the draft, Pravega's (a Hello first, found
    on the tap's port by the heuristic) as Pravega."""
    from refwire.pravega.draft2017 import frames as D

    cases, rows = sessions[dialect]
    seen = check_session_cases(cases, rows, lambda case: _check_recorded(dialect, case))
    c2s, s2c = seen["c2s"], seen["s2c"]
    firsts = [int(case["shown"]["c2s"][0]["item"][f"{dialect}.type"][0]) for case in cases]
    if dialect == "pravega_draft":
        # 2 writer connections (blocks of 3 events, each padded with a KeepAlive, the 102 KB event in
        # 5 partial messages, its last after the EndAppendBlock), then a reader's (a KeepAlive, 2
        # reads, the second's SegmentRead in 16 KB parts)
        assert len(cases) == 3 and firsts == [D.SetupAppend.TYPE, D.SetupAppend.TYPE, D.KeepAlive.TYPE], firsts  # no Hello
        assert (c2s["SetupAppend"], c2s["BeginAppendBlock"], c2s["EndAppendBlock"], c2s["KeepAlive"], c2s["ReadSegment"]) == (2, 3, 3, 4, 2), seen
        assert (c2s["Event"], c2s["PartialMessage"]) == (sum(map(len, _DRAFT_EVENTS)), 5), seen  # (the cut event: 1 Event, in its parts)
        assert (s2c["AppendSetup"], s2c["DataAppended"], s2c["KeepAlive"], s2c["SegmentRead"]) == (2, 3, 4, 2), seen
        assert s2c["PartialMessage"] > 100 * 1024 // _DRAFT_REPLY_PART, seen
    else:
        # CreateSegment, the Rust-style writer, the Java-style one, SealSegment, the reader: a Hello each
        assert len(cases) == 5 and firsts == [F.Hello.TYPE] * 5 and c2s["Hello"] == s2c["Hello"] == 5, seen
        assert (c2s["CreateSegment"], c2s["SetupAppend"], c2s["SealSegment"], c2s["GetStreamSegmentInfo"]) == (1, 2, 1, 1), seen
        assert (c2s["AppendBlockEnd"], c2s["AppendBlock"], s2c["DataAppended"]) == (5, 3, 5), seen
        assert c2s["ReadSegment"] == s2c["SegmentRead"] == 2, seen
