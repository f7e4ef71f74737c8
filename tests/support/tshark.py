"""Running the generated Lua dissectors in tshark and reading what it shows (the dissector tests).

A test writes its cases as TCP connections into one pcapng (:class:`Capture`), runs tshark
once over it with the generated Lua (:func:`start_tshark` / :func:`packets`, or
:func:`run_tshark`) and compares the fields of tshark's JSON (:func:`walk`, :func:`experts`,
:func:`warns`) with what refwire's describer reads.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from refwire.pcap import PcapWriter

__all__ = [
    "TSHARK",
    "WARN",
    "Capture",
    "segments",
    "experts",
    "needs_tshark",
    "packets",
    "pairs",
    "run_tshark",
    "start_tshark",
    "walk",
    "warns",
]

TSHARK = shutil.which("tshark")
#: the test module's ``pytestmark``: skipped without tshark
needs_tshark = pytest.mark.skipif(
    TSHARK is None, reason="tshark is not installed (apt-get install tshark): the Lua dissector cannot run"
)
#: expert severity "warning" in tshark's JSON
WARN = str(0x00600000)


def segments(data: bytes, size: int) -> list[bytes]:
    """``data`` cut into segments of ``size`` bytes (one empty segment for no bytes)."""
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


def pairs(items: list[tuple[str, Any]]) -> dict[str, list[Any]]:
    """tshark's JSON object as key -> every value (its keys repeat): ``object_pairs_hook``."""
    out: dict[str, list[Any]] = {}
    for k, v in items:
        out.setdefault(k, []).append(v)
    return out


def experts(node: Any) -> list[tuple[str, str]]:
    """(severity, message) of every expert info in a tshark JSON subtree."""
    if isinstance(node, list):
        return [e for n in node for e in experts(n)]
    if not isinstance(node, dict):
        return []
    out = []
    for k, vs in node.items():
        for v in vs:
            if k == "_ws.expert":
                out.append((v["_ws.expert.severity"][0], v["_ws.expert.message"][0]))
            else:
                out += experts(v)
    return out


def warns(node: Any) -> list[str]:
    """The messages of the expert-info warnings in a subtree."""
    return [m for sev, m in experts(node) if sev == WARN]


def walk(node: Any) -> Iterator[tuple[str, Any]]:
    """(key, value) of every field in a tshark JSON subtree, in tree order per key."""
    if isinstance(node, list):
        for n in node:
            yield from walk(n)
    elif isinstance(node, dict):
        for k, vs in node.items():
            for v in vs:
                if isinstance(v, (dict, list)):
                    yield from walk(v)
                else:
                    yield k, v


class Capture:
    """A pcapng of test cases, one TCP connection each: ``cases`` by tcp.stream.

    Each case is a dict of ``name``, ``port``, ``chunks`` (per direction, the bytes sent),
    ``shown`` (filled by the test: what tshark shows) and the extra keys given."""

    def __init__(self, path: Path, client: tuple[str, int] = ("10.0.0.1", 0)) -> None:
        self.path = path
        self.client = client
        self.cases: dict[int, dict[str, Any]] = {}
        self.ts = 1_700_000_000.0
        self._writer = PcapWriter(path)

    def __enter__(self) -> Capture:
        self._writer.__enter__()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self._writer.__exit__(et, e, tb)

    def connection(self, name: str, port: int, sends: Sequence[tuple[str, bytes]], **extra: Any) -> dict[str, Any]:
        """One connection to ``port`` sending ``sends`` (``("c2s" | "s2c", bytes)``, a segment each), closed."""
        conv = self._writer.connection(self.client, ("10.0.0.2", port), self.ts)
        for direction, data in sends:
            self.ts += 0.001
            conv.send(direction, data, self.ts)
        self.ts += 0.001
        conv.close(self.ts)
        per_dir: dict[str, list[bytes]] = {}
        for direction, data in sends:
            per_dir.setdefault(direction, []).append(data)
        case = {"name": name, "port": port, "chunks": per_dir, "shown": {}, **extra}
        self.cases[len(self.cases)] = case
        return case


def start_tshark(
    lua: Path, cap: Path, protos: str, display: str, *, two_pass: bool = True, prefs: Sequence[str] = ()
) -> subprocess.Popen[str]:
    """tshark reading ``cap`` with the Lua ``lua`` (JSON of the layers ``frame tcp`` and
    ``protos``, the packets of the filter ``display``), started (runs may go side by side)."""
    assert TSHARK is not None
    cmd = [TSHARK, *(["-2"] if two_pass else []), "-X", f"lua_script:{lua}", *prefs, "-r", str(cap)]
    cmd += ["-T", "json", "-J", f"frame tcp {protos}", "-Y", display]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def packets(run: subprocess.Popen[str], *, lua_error_items: bool = True) -> list[dict[str, Any]]:
    """The layers of every packet the run shows (after it ends, with no Lua error: in stderr, or
    -- unless ``lua_error_items`` is false -- a text item of the tree)."""
    stdout, stderr = run.communicate(timeout=60)
    assert run.returncode == 0, stderr
    assert "Lua" not in stderr, stderr  # a Lua error in the dissector
    if lua_error_items:
        assert "Lua Error" not in stdout, [line for line in stdout.splitlines() if "Lua Error" in line][:3]
    return [p["_source"][0]["layers"][0] for p in json.loads(stdout, object_pairs_hook=pairs)]


def run_tshark(
    lua: Path, cap: Path, protos: str, display: str, *, two_pass: bool = True, prefs: Sequence[str] = (), lua_error_items: bool = True
) -> list[dict[str, Any]]:
    """:func:`start_tshark` and :func:`packets`."""
    return packets(start_tshark(lua, cap, protos, display, two_pass=two_pass, prefs=prefs), lua_error_items=lua_error_items)
