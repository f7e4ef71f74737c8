"""What refwire's Seastar RPC describer and machines read and what the generated dissector shows,
compared (tests/test_dissector_seastar_rpc.py and tests/peers/test_peer_dissector.py;
specs/seastar-rpc/README.md §1, §3, §4).
"""

from __future__ import annotations

from typing import Any

from refwire.describe import UNDECODED, Described
from refwire.errors import ProtocolError
from refwire.protocols import descriptor
from refwire.sansio import NeedData
from refwire.seastar_rpc.compression import COMPRESSOR_NAMES
from refwire.seastar_rpc.connection import ClientConnection, ServerConnection
from refwire.seastar_rpc.events import NegotiationRequested
from refwire.seastar_rpc.frames import (
    DEFAULT_LIMITS,
    Request,
    Response,
    UnknownVerb,
    UserError,
    decode_exception,
)
from support.tshark import machine_warns, warns

SPEC = "specs/seastar-rpc/README.md §"

P = "seastar_rpc"


def _described(sends: list[tuple[str, bytes]]) -> dict[str, list[Described]]:
    """Per direction, the frames refwire's describers (sharing the connection's session) read."""
    session: dict[str, Any] = {}
    load = descriptor("seastar-rpc").load("describer")
    des = {d: load(DEFAULT_LIMITS.max_frame_size, d, session) for d in ("c2s", "s2c")}
    out: dict[str, list[Described]] = {"c2s": [], "s2c": []}
    for direction, data in sends:
        out[direction] += des[direction].feed(data)
        client = des["c2s"]
        if getattr(client, "unblocked", False):
            client.unblocked = False
            out["c2s"] += client.feed(b"")
    return out


def _machine_at(sends: list[tuple[str, bytes]], direction: str) -> tuple[int, ProtocolError] | None:
    """The frame (index among the direction's frames) where refwire's machine of the side reading
    ``direction`` rejects it, fed one frame at a time, and its error: the server accepting the
    client's offer (the connection id of the server's reply), the client offering what its offer
    on the wire names.  None: it accepts every frame the codec reads."""
    frames = _described(sends)
    first = {d: next((f for f in frames[d] if f.type == "negotiation" and f.error is None), None) for d in ("c2s", "s2c")}
    offer = first["c2s"].fields if first["c2s"] is not None else None
    conn: ServerConnection | ClientConnection
    if direction == "c2s":
        conn = ServerConnection(fast=False)
    elif offer is None:
        return None  # the client's offer unseen: the dissector checks nothing against it
    else:
        names = [n for n in (offer["compress"] or "").split(",") if n in COMPRESSOR_NAMES]
        conn = ClientConnection(compressors=names, timeout=offer["timeout"], handler_duration=offer["handler_duration"], stream_parent=offer["stream_parent"], fast=False)
        conn.initiate(now=0.0)
        # the client's calls on the wire, in flight before the responses (their ids 1, 2, ...)
        for d in frames["c2s"]:
            inner = d.inner[0] if d.type == "compressed" and d.inner else d
            # (refwire's client numbers its calls 1, 2, ...: a request of another id is none of its)
            if inner.type == "request" and isinstance(inner.frame, Request) and inner.frame.msg_id == conn.next_msg_id:
                conn.call(inner.frame.verb, inner.frame.payload, now=0.0)
    for k, d in enumerate(frames[direction]):
        if d.type == UNDECODED or d.error is not None:
            return None
        try:
            conn.receive_data(d.data, now=0.0)
            while not isinstance(ev := conn.next_event(), NeedData):
                if isinstance(ev, NegotiationRequested) and isinstance(conn, ServerConnection):
                    reply = first["s2c"].fields if first["s2c"] is not None else {}
                    conn.accept(connection_id=reply.get("connection_id"), now=0.0)
        except ProtocolError as exc:
            return k, exc
    return None



def _exception(payload: bytes) -> dict[str, str]:
    try:
        e = decode_exception(payload)
    except ProtocolError:
        return {"exception": "malformed"}
    if isinstance(e, UserError):
        return {"exception": "0", "message": e.message.decode()}
    if isinstance(e, UnknownVerb):
        return {"exception": "1", "verb": str(e.verb)}
    return {"exception": str(e.type)}


def _expected(d: Described) -> dict[str, Any]:
    if d.type == UNDECODED:
        return {"undecoded": True}
    f = d.fields
    out: dict[str, Any] = {"kind": d.type}
    if d.type == "negotiation":
        out.update(timeout=str(int(f["timeout"])), handler_duration=str(int(f["handler_duration"])))
        out.update({k: str(f[k]) for k in ("compress", "connection_id", "stream_parent") if f[k] is not None})
        if f["isolation"] is not None:
            out["isolation"] = f["isolation"].hex()
    elif d.type in ("request", "response", "stream"):
        out.update({k: str(v) for k, v in f.items() if v is not None})
        if d.type == "response" and f["msg_id"] < 0:
            assert isinstance(d.frame, Response)
            out.update(_exception(d.frame.payload))
    elif d.type in ("compressed", "noop"):
        out.update(compressor=f["compressor"], clen=str(f["clen"]))
        if d.type == "compressed":
            out["inflated_len"] = str(f["inflated_len"])
            out["inner"] = [_expected(i) for i in d.inner]
    return out


def _refwire(sends: list[tuple[str, bytes]]) -> dict[str, list[dict[str, Any]]]:
    """Per direction, what refwire's describers (sharing the connection's session) read."""
    session: dict[str, Any] = {}
    load = descriptor("seastar-rpc").load("describer")
    des = {d: load(DEFAULT_LIMITS.max_frame_size, d, session) for d in ("c2s", "s2c")}
    out: dict[str, list[dict[str, Any]]] = {"c2s": [], "s2c": []}
    for direction, data in sends:
        out[direction] += [_expected(x) for x in des[direction].feed(data)]
        client = des["c2s"]
        if getattr(client, "unblocked", False):
            client.unblocked = False
            out["c2s"] += [_expected(x) for x in client.feed(b"")]
    for direction, d in des.items():
        out[direction] += [{"undecoded": True, "eof": True} for _ in d.end()]
    return out


_SHOWN = {
    "negotiation": {"neg.compress": "compress", "neg.timeout": "timeout", "neg.connection_id": "connection_id",
                    "neg.stream_parent": "stream_parent", "neg.isolation": "isolation", "neg.handler_duration": "handler_duration"},
    "request": {"timeout_ms": "timeout_ms", "verb": "verb", "msg_id": "msg_id", "len": "len"},
    "response": {"msg_id": "msg_id", "handler_duration": "handler_duration", "len": "len", "exception.type": "exception",
                 "exception.message": "message", "exception.verb": "verb"},
    "stream": {"len": "len"},
    "stream-end": {},
    "compressed": {"compressor": "compressor", "clen": "clen", "inflated_len": "inflated_len"},
    "noop": {"compressor": "compressor", "clen": "clen"},
}  # fmt: skip


def _shown(item: dict[str, list[Any]]) -> dict[str, Any]:
    if f"{P}.undecoded" in item:
        return {"undecoded": True}
    kind = item[f"{P}.kind"][0]
    out: dict[str, Any] = {"kind": kind}
    for field, key in _SHOWN[kind].items():
        if f"{P}.{field}" in item:
            value = str(item[f"{P}.{field}"][0])
            out[key] = value.replace(":", "") if key == "isolation" else value
    if kind == "response" and any(m.startswith(_EXCEPTION_WARNINGS) for m in _own_warns(item)):
        out["exception"] = "malformed"  # the codec's warning on the exception (§3)
        out.pop("message", None)
        out.pop("verb", None)
    if kind == "compressed":
        out["inner"] = [_shown(i) for i in item.get(P, [])]
    return out


#: how the dissector's warnings on an exception refwire's codec refuses begin (§3)
_EXCEPTION_WARNINGS = ("an exception's data of", "the exception body claims", "UNKNOWN_VERB body must be")


def _own_warns(item: dict[str, list[Any]]) -> list[str]:
    """The warnings on the frame itself (not those of a frame nested in it, §4)."""
    return warns({k: v for k, v in item.items() if k != P})


def _check(case: dict[str, Any]) -> None:
    expected = _refwire(case["wire"])
    for direction in ("c2s", "s2c"):
        exp = expected[direction]
        shown = case["shown"].get(direction, [])
        bad = next((k for k, e in enumerate(exp) if e.get("undecoded")), None)
        upto = len(exp) if bad is None else bad
        assert [_shown(s["item"]) for s in shown[:upto]] == exp[:upto], (case["name"], direction)
        # refwire's machine: a warning on exactly the frame it rejects, none elsewhere
        at = _machine_at(case["wire"], direction)
        machine = [k for k, s in enumerate(shown) if machine_warns(P, s["item"])]
        assert machine == ([] if at is None else [at[0]]), (case["name"], direction, at, machine)
        for s, e in zip(shown[:upto], exp[:upto], strict=False):
            # a response whose exception refwire's codec refuses has the codec's warning (§3)
            codec = [m for m in warns(s["item"]) if m not in machine_warns(P, s["item"])]
            if _refused_exception(e):
                assert codec and all(f"{SPEC}3" in m for m in codec), (case["name"], direction, codec)
            else:
                assert not codec, (case["name"], direction, codec)
        if bad is None or not exp[bad].get("eof"):
            assert direction not in case.get("eof", {}), (case["name"], case["eof"])
        if bad is None:
            assert len(shown) == len(exp), case["name"]
        elif exp[bad].get("eof"):
            # TCP reassembly waits for bytes that never come: the FIN shows how many (§1)
            assert len(shown) == bad, case["name"]
            eof = case["eof"][direction]
            sent = sum(len(data) for d, data in case["wire"] if d == direction)
            assert int(eof[f"{P}.eof.received"][0]) == sent - sum(int(s["item"][f"{P}.size"][0]) for s in shown), eof
            assert any(m.startswith("connection closed inside a") and f"{SPEC}1" in m for m in warns(eof)), eof
        else:
            assert any(SPEC in m for m in warns(shown[bad]["item"])), (case["name"], direction, shown[bad]["item"])


def _refused_exception(e: dict[str, Any]) -> bool:
    return e.get("exception") == "malformed" or any(_refused_exception(i) for i in e.get("inner", []))
