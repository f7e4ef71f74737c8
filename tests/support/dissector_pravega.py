"""What refwire's Pravega describers (both dialects) and machines read and what the generated
dissectors show, compared (tests/test_dissector_pravega.py and tests/peers/test_peer_dissector.py;
specs/pravega/README.md, specs/pravega-draft-2017/README.md).
"""

from __future__ import annotations

import json
import struct
import uuid
from pathlib import Path
from typing import Any, Final

from pravega_draft_harness import DraftHarness, populate

from refwire.describe import UNDECODED, Described
from refwire.errors import ProtocolError
from refwire.pravega.commands import CLIENT_LIMITS, DEFAULT_LIMITS
from refwire.pravega.connection import ClientConnection, ServerConnection
from refwire.pravega.describe import describer as pravega_describer
from refwire.pravega.draft2017.connection import DEFAULT_LIMITS as DRAFT_LIMITS
from refwire.pravega.draft2017.connection import ClientConnection as DraftClient
from refwire.pravega.draft2017.describe import describer as draft_describer
from refwire.pravega.events import Append, ConnectionClosed, RequestReceived
from refwire.pravega.frames import AppendSetup, SetupAppend
from refwire.sansio import NeedData
from support.tshark import machine_warns, warns

ROOT = Path(__file__).resolve().parents[2] / "specs"

PORT = 12345

HELLO = bytes.fromhex("ffffff81000000080000001100000005")

SPECS = {"pravega": "specs/pravega/README.md §", "pravega_draft": "specs/pravega-draft-2017/README.md §"}


def _vectors(spec: str, name: str) -> list[dict[str, Any]]:
    return list(json.loads((ROOT / spec / "vectors" / name).read_text())["vectors"])


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


def _machine(direction: str, chunks: list[bytes], hello: tuple[int, int] | None) -> ProtocolError | None:
    """What refwire's machine of the side reading ``chunks`` raises (None: nothing).  The server
    answers each SetupAppend with a new writer's AppendSetup and stores every append (§5.4: what
    the bytes cannot say); the client speaks the versions of its Hello (``hello``: high, low; none
    sent: any version)."""
    conn: ServerConnection | ClientConnection
    if direction == "c2s":
        conn = ServerConnection(fast=False)
    else:
        conn = ClientConnection(version=hello or (2**31 - 1, -(2**31)), fast=False)
    try:
        for c in [*chunks, b""]:
            conn.receive_data(c, now=0.0)
            while not isinstance(ev := conn.next_event(), NeedData):
                if isinstance(conn, ServerConnection) and isinstance(ev, RequestReceived) and isinstance(ev.command, SetupAppend):
                    cmd = ev.command
                    conn.send(AppendSetup(request_id=cmd.request_id, segment=cmd.segment, writer_id=cmd.writer_id, last_event_number=-(2**63)), now=0.0)
                elif isinstance(conn, ServerConnection) and isinstance(ev, Append):
                    conn.append_stored(ev, 0, now=0.0)
                elif isinstance(ev, ConnectionClosed):
                    break
    except ProtocolError as exc:
        return exc
    return None


def _client_hello(case: dict[str, Any]) -> tuple[int, int] | None:
    first = b"".join(case["chunks"].get("c2s", []))[:16]
    if len(first) == 16 and first[:8] == HELLO[:8]:
        return int.from_bytes(first[8:12], "big", signed=True), int.from_bytes(first[12:16], "big", signed=True)
    return None


def _machine_at(case: dict[str, Any], direction: str) -> tuple[int, ProtocolError] | None:
    """The frame where refwire's Pravega machine rejects this direction, and its error, when the
    codec accepts that frame (a codec error or an EOF inside a frame is the describer's: None)."""
    chunks = case["chunks"][direction]
    err = _machine(direction, chunks, _client_hello(case))
    if err is None or err.offset is None or err.field == "(eof)":
        return None
    limit = (DEFAULT_LIMITS if direction == "c2s" else CLIENT_LIMITS).max_frame_size
    for k, d in enumerate(_described(limit, direction, chunks)):
        if d.offset <= err.offset < d.offset + len(d.data):
            return None if d.type == UNDECODED or d.error is not None else (k, err)
    return None


def _described(limit: int, direction: str, chunks: list[bytes]) -> list[Described]:
    des = pravega_describer(limit, direction)
    return [d for c in chunks for d in des.feed(c)]


def _draft_segments() -> dict[str, list[dict[str, Any]]]:
    """The store each draft vector starts with, by name (its ``initial_segments``)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for f in ("errors.json", "conversations.json"):
        for v in _vectors("pravega-draft-2017", f):
            out.setdefault(v["name"], v.get("initial_segments", []))
    for name, *_ in _draft_blocks():
        out[name] = _DRAFT_BLOCK_SEGMENTS
    return out


#: refwire's draft errors the dissector does not flag (``_draft_machine_at`` returns them as such):
#: what depends on the store's AppendSetup (a Begin before it, an offset other than the running
#: one), a store refusing
DRAFT_UNSEEN: Final = ("used before its AppendSetup", "is not the running offset", "exceeds the limit max_window")


def _draft_machine_at(case: dict[str, Any], direction: str) -> tuple[int | None, ProtocolError] | None:
    """Where refwire's draft machine of the side reading ``direction`` rejects it (the frame index
    among the describer's, or None for an error the dissector does not flag), and its error; None:
    it accepts the direction.  The server answers from a store holding the vector's segments."""
    chunks = case["chunks"][direction]
    err: ProtocolError | None = None
    if direction == "c2s":
        h = DraftHarness()
        populate(h.store, _draft_segments().get(case["name"], []))
        for c in chunks:
            h.feed(c)
        h.eof()
        err = h.error
    else:
        conn = DraftClient()
        try:
            for c in [*chunks, b""]:
                conn.receive_data(c, now=0.0)
                while not isinstance(conn.next_event(), NeedData):
                    pass
        except ProtocolError as exc:
            err = exc
    if err is None or err.offset is None or err.field == "(eof)":
        return None
    unseen = any(u in err.reason for u in DRAFT_UNSEEN)
    des = draft_describer(DRAFT_LIMITS.max_frame_size, direction)
    frames = [d for c in chunks for d in des.feed(c)]
    # the last frame starting at or before the offset (a part's data offset may be its frame's end)
    k = max((i for i, d in enumerate(frames) if d.offset <= err.offset), default=None)
    if k is None or frames[k].type == UNDECODED or frames[k].error is not None:
        return None  # the codec's
    return (None if unseen else k), err



def _codec_warns(proto: str, item: Any) -> list[str]:
    machine = machine_warns(proto, item)
    return [m for m in warns(item) if m not in machine]


def _shown(proto: str, item: dict[str, list[Any]], expected: dict[str, Any]) -> dict[str, Any]:
    """What the dissector shows of the fields refwire's describer names."""
    if f"{proto}.undecoded" in item:
        return {"undecoded": True}
    if _codec_warns(proto, item):
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


def _draft_blocks() -> list[tuple[str, str, int, list[tuple[str, bytes]]]]:
    """Draft connections whose BeginAppendBlock comes as a partial message (§5, §6.3): one valid,
    one whose Begin's wire length the block does not fill (refwire names the End part that
    completed the Begin), one whose End's offset is not the Begin's plus its block length."""
    from refwire.pravega.draft2017 import frames as D
    from refwire.pravega.draft2017.partial import split_message

    cid = uuid.UUID(int=7)
    setup = D.SetupAppend(connection_id=cid, segment="seg").encode()
    event = D.Event(data=b"hello").encode()

    def begin(length: int) -> bytes:
        return b"".join(split_message(D.BeginAppendBlock(connection_id=cid, connection_offset=0, length=length).encode(), [10]))

    def end(offset: int) -> bytes:
        return D.EndAppendBlock(connection_id=cid, connection_offset=offset, block_length=len(event)).encode()

    def split(code: int, payload: bytes) -> bytes:  # a message of type code, as a Begin and an End part
        return b"".join(split_message(struct.pack(">ii", code, len(payload)) + payload, [10]))

    setup_payload = setup[8:]
    return [
        # reassembled messages whose fields the codec refuses (§5 rule 5): at the End part
        ("draft-partial-setup-truncated-field", "talk", PORT, [("c2s", split(D.SetupAppend.TYPE, bytes(16) + b"\x00\x10ab"))]),
        ("draft-partial-setup-trailing-byte", "talk", PORT, [("c2s", split(D.SetupAppend.TYPE, setup_payload + b"x"))]),
        ("draft-partial-setup-bad-utf", "talk", PORT, [("c2s", split(D.SetupAppend.TYPE, bytes(16) + b"\x00\x01\xff"))]),
        ("draft-partial-begin-and-end", "talk", PORT, [("c2s", setup + begin(len(event)) + event + end(len(event)))]),
        ("draft-partial-begin-wire-length-short", "talk", PORT, [("c2s", setup + begin(len(event) + 7) + event + end(len(event)))]),
        ("draft-partial-end-offset-lies", "talk", PORT, [("c2s", setup + begin(len(event)) + event + end(len(event) + 1))]),
    ]


#: the store of the connections of _draft_blocks (one empty segment)
_DRAFT_BLOCK_SEGMENTS: Final = [{"name": "seg", "data": "", "sealed": False, "start_offset": 0, "connections": {}}]


def _check(case: dict[str, Any]) -> None:
    proto = case["dialect"]
    for direction, chunks in case["chunks"].items():
        expected = _refwire("pravega" if proto == "pravega" else "draft", direction, chunks)
        shown = case["shown"].get(direction, [])
        # refwire's machine: its warning on exactly the frame it rejects, none elsewhere
        at = _machine_at(case, direction) if proto == "pravega" else _draft_machine_at(case, direction)
        got_machine = [k for k, (_, item) in enumerate(shown) if machine_warns(proto, item)]
        assert got_machine == ([] if at is None or at[0] is None else [at[0]]), (case["name"], direction, at, got_machine)
        assert all(p == proto for p, _ in shown), (case["name"], [p for p, _ in shown])
        bad = next((k for k, e in enumerate(expected) if e.get("undecoded")), None)
        upto = len(expected) if bad is None else bad
        got = [_shown(proto, item, e) for (_, item), e in zip(shown[:upto], expected[:upto], strict=False)]
        assert got == expected[:upto], case["name"]
        for (_, item), e in zip(shown, expected[:upto], strict=False):
            if e["reject"]:
                assert any(SPECS[proto] in m for m in warns(item)), (case["name"], e)
        if bad is None or not expected[bad].get("eof"):
            assert direction not in case.get("eof", {}), (case["name"], case["eof"])
        if bad is None:
            assert len(shown) == len(expected), case["name"]
        elif expected[bad].get("eof"):
            # TCP reassembly waits for bytes that never come: the FIN shows how many
            assert len(shown) == bad, case["name"]
            eproto, eof = case["eof"][direction]
            assert eproto == proto, (case["name"], eproto)
            have = sum(map(len, chunks)) - sum(int(item[f"{proto}.size"][0]) for _, item in shown)
            assert int(eof[f"{proto}.eof.received"][0]) == have, (case["name"], eof)
            section = "§1.2" if proto == "pravega" else "§6.7"
            assert any(m.startswith("connection closed inside a") and SPECS[proto] + section[1:] in m for m in warns(eof)), eof
        else:
            warnings = warns(shown[bad][1])
            assert any(SPECS[proto] in m for m in warnings), (case["name"], expected[bad], warnings)
