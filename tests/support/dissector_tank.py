"""What refwire's TANK describer reads and what the generated dissector shows, compared
(tests/test_dissector_tank.py and tests/peers/test_peer_dissector.py; specs/tank/README.md §2-§5).
"""

from __future__ import annotations

from typing import Any

from refwire.describe import UNDECODED, Described
from refwire.errors import ProtocolError
from refwire.protocols import descriptor
from refwire.tank.bundles import decode_bundle
from refwire.tank.frames import (
    DEFAULT_LIMITS,
    ConsumeRequest,
    CreateTopicRequest,
    DiscoverPartitionsRequest,
    ProduceRequest,
    ReloadConfRequest,
)
from refwire.tank.responses import (
    ConsumeResponse,
    CreateTopicResponse,
    DiscoverPartitionsResponse,
    DiscoverTopicsResponse,
    RawProduceResponse,
    ReloadConfResponse,
)
from refwire.wire import decode_uvarint
from support.tshark import walk, warns

HEAD = ("msg_id", "length", "request_id")

#: what of a body is compared: result key -> the dissector's field
BODY = {
    "topics": "tank.topic", "partitions": "tank.partition", "errs": "tank.err", "hwmarks": "tank.hwmark",
    "seqs": "tank.seq", "counts": "tank.bundle.count", "contents": "tank.msg.content", "msg_seqs": "tank.msg.seq",
}  # fmt: skip


def _bundle(bundle: bytes, base: int | None, out: dict[str, list[str]]) -> int | None:
    """One bundle's count, contents and seqs onto ``out``; its last seq (raises where refwire refuses it)."""
    header, messages = decode_bundle(bundle, base_seq=base, limits=DEFAULT_LIMITS, fast=False)
    out["counts"].append(str(header.count))
    out["contents"] += [m.content.hex() for m in messages]
    out["msg_seqs"] += [str(m.seq) for m in messages if m.seq is not None]
    return messages[-1].seq if messages else None


def _chunk(chunk: bytes, base: int | None, out: dict[str, list[str]]) -> None:
    """A consume chunk's entries (§5): non-sparse bundles numbered from ``base``, then the previous end."""
    p = 0
    while p < len(chunk):
        blen, p = decode_uvarint(chunk, p, len(chunk), field="bundleLen")
        last = _bundle(chunk[p : p + blen], base, out)
        base = None if last is None else last + 1
        p += blen


def _body(f: Any) -> tuple[dict[str, list[str]], bool]:
    """What the dissector shows of a decoded frame's body, and whether refwire's broker refuses it."""
    out: dict[str, list[str]] = {k: [] for k in BODY}
    try:
        if isinstance(f, ProduceRequest):
            for t in f.topics:
                out["topics"].append(t.name)
                for p in t.partitions:
                    out["partitions"].append(str(p.partition))
                    _bundle(p.bundle, p.base_seq, out)
        elif isinstance(f, ConsumeRequest):
            for ct in f.topics:
                out["topics"].append(ct.name)
                out["partitions"] += [str(p.partition) for p in ct.partitions]
                out["seqs"] += [str(p.seq) for p in ct.partitions]
        elif isinstance(f, RawProduceResponse):
            out["errs"] = [f"0x{b:02x}" for b in f.body]
        elif isinstance(f, ConsumeResponse):
            for rt in f.topics:
                out["topics"].append(rt.name)
                for r in rt.partitions:
                    out["partitions"].append(str(r.partition))
                    out["errs"].append(f"0x{r.error:02x}")
                    if r.error in (0x00, 0xFE, 0x01):
                        out["hwmarks"].append(str(r.hwmark))
                    if r.chunk:
                        _chunk(r.chunk, r.base_seq, out)
        elif isinstance(f, DiscoverPartitionsRequest):
            out["topics"] = [f.topic]
            out["partitions"] = [str(p) for p in f.partitions]
        elif isinstance(f, DiscoverPartitionsResponse):
            out["topics"] = [f.topic]
            out["hwmarks"] = [str(p.hwmark) for p in f.partitions]
        elif isinstance(f, CreateTopicRequest):
            out["topics"] = [f.topic]
        elif isinstance(f, CreateTopicResponse):
            out["topics"], out["errs"] = [f.topic], [f"0x{f.error:02x}"]
        elif isinstance(f, ReloadConfRequest):
            out["topics"], out["partitions"] = [f.topic], [str(f.partition)]
        elif isinstance(f, ReloadConfResponse):
            out["topics"], out["partitions"], out["errs"] = [f.topic], [str(f.partition)], [f"0x{f.error:02x}"]
        elif isinstance(f, DiscoverTopicsResponse):
            out["topics"] = [t.name for t in f.topics]
    except ProtocolError:
        return out, True
    return out, False


def _expected(d: Described) -> dict[str, Any]:
    if d.type == UNDECODED:
        return {"undecoded": True, "error": d.error}
    out: dict[str, Any] = {k: str(d.fields[k]) for k in HEAD if k in d.fields}
    body, refused = _body(d.frame) if d.frame is not None else ({}, False)
    out["reject"] = d.error is not None or refused
    if not out["reject"]:
        out.update(body)
    return out


def _refwire(direction: str, chunks: list[bytes]) -> list[dict[str, Any]]:
    des = descriptor("tank").load("describer")(DEFAULT_LIMITS.max_frame_size, direction)
    frames = [_expected(d) for c in chunks for d in des.feed(c)]
    return frames + [{"undecoded": True, "eof": True, "error": d.error} for d in des.end()]


def _shown(item: dict[str, list[Any]]) -> dict[str, Any]:
    if "tank.undecoded" in item:
        return {"undecoded": True}
    out: dict[str, Any] = {k: item[f"tank.{k}"][0] for k in HEAD if f"tank.{k}" in item}
    out["reject"] = bool(warns(item))
    if not out["reject"]:
        fields = list(walk(item))
        for key, abbrev in BODY.items():
            out[key] = [v.replace(":", "") for k, v in fields if k == abbrev]
    return out


def _check(case: dict[str, Any]) -> None:
    for direction, chunks in case["chunks"].items():
        expected = _refwire(direction, chunks)
        shown = case["shown"].get(direction, [])
        for s in shown:
            if "tank.response" in s["item"]:
                assert s["item"]["tank.response"][0] == ("1" if direction == "s2c" else "0"), case["name"]
        bad = next((k for k, e in enumerate(expected) if e.get("undecoded")), None)
        upto = len(expected) if bad is None else bad
        assert [_shown(s["item"]) for s in shown[:upto]] == expected[:upto], case["name"]
        for s, e in zip(shown, expected[:upto], strict=False):
            if e["reject"]:
                assert any("specs/tank/README.md §" in m for m in warns(s["item"])), (case["name"], e)
        if bad is None or not expected[bad].get("eof"):
            assert direction not in case.get("eof", {}), (case["name"], case["eof"])
        if bad is None:
            assert len(shown) == len(expected), case["name"]
        elif expected[bad].get("eof"):
            # TCP reassembly waits for bytes that never come: the FIN shows them (§2)
            assert len(shown) == bad, case["name"]
            eof = case["eof"][direction]
            have = sum(map(len, chunks)) - sum(int(s["item"]["tank.size"][0]) for s in shown)
            assert int(eof["tank.eof.received"][0]) == have, (case["name"], eof)
            assert any(m.startswith("connection closed inside a") and "specs/tank/README.md §2" in m for m in warns(eof)), eof
        else:
            warnings = warns(shown[bad]["item"])
            assert any("specs/tank/README.md §" in m for m in warnings), (case["name"], expected[bad], warnings)
