"""Helpers shared by the TANK vector tests: JSON-able views of decoded frames
(bytes as hex) and loading of specs/tank/vectors/*.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

VECTORS = Path(__file__).resolve().parent.parent / "specs" / "tank" / "vectors"


def jsonable(obj: Any) -> Any:
    """attrs instances become ``{"type": ClassName, field: value...}``; bytes become hex."""
    if attrs.has(type(obj)):
        out: dict[str, Any] = {"type": type(obj).__name__}
        for f in attrs.fields(type(obj)):
            out[f.name] = jsonable(getattr(obj, f.name))
        return out
    if isinstance(obj, bytes | bytearray):
        return obj.hex()
    if isinstance(obj, tuple | list):
        return [jsonable(x) for x in obj]
    return obj


def load(name: str) -> list[dict[str, Any]]:
    return list(json.loads((VECTORS / name).read_text())["vectors"])


def unhex(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))
