"""What refwire's Lumberjack describer reads and what the generated dissector shows, compared
(tests/test_dissector.py and tests/peers/test_peer_dissector.py; specs/lumberjack/README.md §2, §4).
"""

from __future__ import annotations

from typing import Any

from refwire.describe import UNDECODED, Described
from refwire.lumberjack.frames import DEFAULT_LIMITS
from refwire.protocols import descriptor

FIELDS = ("version", "count", "seq", "len", "pairs")


def _expected(d: Described) -> dict[str, Any]:
    if d.type == UNDECODED:
        return {"undecoded": True, "error": d.error}
    out: dict[str, Any] = {"type": d.type, **{k: str(d.fields[k]) for k in FIELDS if k in d.fields}}
    if d.type == "C" and "inner_error" not in d.fields:
        out["inner"] = [_expected(i) for i in d.inner]
    if "inner_error" in d.fields:
        out["error"] = d.fields["inner_error"]
    return out


def _refwire(chunks: list[bytes]) -> list[dict[str, Any]]:
    des = descriptor("lumberjack").load("describer")(DEFAULT_LIMITS.max_frame_size, strict=True)
    frames = [_expected(d) for c in chunks for d in des.feed(c)]
    return frames + [{"undecoded": True, "eof": True, "error": d.error} for d in des.end()]


def _error(e: dict[str, Any]) -> bool:
    """Whether refwire rejects this frame or one inside it."""
    return e.get("error") is not None or any(_error(i) for i in e.get("inner", ()))


def _shown(item: dict[str, list[Any]], inner: bool = True) -> dict[str, Any]:
    if "lumberjack.undecoded" in item:
        return {"undecoded": True}
    out: dict[str, Any] = {"type": item["lumberjack.type"][0]}
    out.update({k: item[f"lumberjack.{k}"][0] for k in FIELDS if f"lumberjack.{k}" in item})
    if out["type"] == "C" and "lumberjack.inner_frames" in item:
        out["inner"] = [_shown(i) for i in item.get("lumberjack", [])]
    return out
