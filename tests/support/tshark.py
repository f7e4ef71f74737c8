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
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from refwire.pcap import PcapWriter

__all__ = [
    "TSHARK",
    "WARN",
    "Capture",
    "check_session_cases",
    "decoded",
    "segments",
    "experts",
    "machine_warns",
    "needs_tshark",
    "packets",
    "pairs",
    "record_session",
    "run_tshark",
    "session_cases",
    "start_tshark",
    "walk",
    "warns",
    "wire_order",
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


def machine_warns(proto: str, node: Any) -> list[str]:
    """The messages of the warnings of refwire's connection machine (``<proto>.machine``,
    the generated Lua's ``machine_error``) in a tshark JSON subtree."""
    out: list[str] = []
    if isinstance(node, list):
        for n in node:
            out += machine_warns(proto, n)
    elif isinstance(node, dict):
        for k, vs in node.items():
            for v in vs:
                if k == "_ws.expert" and f"{proto}.machine" in v:
                    out.append(v["_ws.expert.message"][0])
                else:
                    out += machine_warns(proto, v)
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


# --------------------------------------------------------------------------- sessions with real peers


def record_session(
    pcap: Path,
    talk: Callable[[str, int], Awaitable[object]],
    *,
    upstream: tuple[str, int] | Callable[[Any, Path], Awaitable[tuple[str, int]]] | None = None,
    reference: str | None = None,
    timeout: float = 60.0,
) -> Path:
    """A session recorded as ``refwire record --pcap`` records it: refwire's tap
    (:func:`refwire.tap.open_tap`, its :class:`~refwire.pcap.PcapWriter`) between a
    client and ``upstream`` (host, port; or ``await upstream(nursery, workdir)`` starts
    a server and gives its address), or refwire's own server of the protocol
    ``reference`` (its descriptor's reference server, started here); ``talk(host,
    port)`` is the client, connecting to the tap.  Ends once every connection through
    the tap has ended (both sides closed), within ``timeout`` s; the pcapng is
    ``pcap``, the capture directory and the server's work directory beside it."""
    import trio

    from refwire.protocols import descriptor
    from refwire.tap import open_tap

    async def main() -> None:
        with trio.fail_after(timeout):
            async with trio.open_nursery() as nursery:
                work = pcap.with_name(pcap.stem + "-server")
                work.mkdir(exist_ok=True)
                if reference is not None:
                    running = await descriptor(reference).load("reference_server")(nursery, None, work)
                    up = (running.host, running.port)
                elif callable(upstream):
                    up = await upstream(nursery, work)
                else:
                    assert upstream is not None
                    up = upstream
                with PcapWriter(pcap) as writer:
                    async with open_tap(("127.0.0.1", 0), up, pcap.with_name(pcap.stem + "-capture"), pcap=writer) as tap:
                        host, port = tap.addresses[0].rsplit(":", 1)
                        await talk(host, int(port))
                        await tap.wait_finished(tap.started)
                nursery.cancel_scope.cancel()

    trio.run(main)
    return pcap


def wire_order(conn: Any) -> list[tuple[str, bytes]]:
    """A connection reassembled by :func:`refwire.pipeline.capture.read_pcap` (what ``refwire
    decode`` reads) as its segments, both directions in the order they were captured."""
    out: list[tuple[float, int, str, bytes]] = []
    for direction in ("c2s", "s2c"):
        data, times = bytes(conn.data[direction]), conn.times[direction]
        for k, (offset, ts) in enumerate(times):
            end = times[k + 1][0] if k + 1 < len(times) else len(data)
            out.append((ts, len(out), direction, data[offset:end]))
    return [(d, b) for _, _, d, b in sorted(out)]


def session_cases(lua: Path, pcap: Path, protos: str, display: str, *, prefs: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every TCP connection of a recorded session as a case of the dissector tests: ``name``,
    ``port`` (the server's), ``chunks`` (per direction, its segments), ``wire`` (both directions'
    segments in capture order), ``shown`` (per direction, ``{"frame", "item"}`` of each PDU of
    ``protos`` tshark shows with the generated Lua, two passes).  The bytes are refwire's own
    reassembly of the pcap (:func:`refwire.pipeline.capture.read_pcap`)."""
    from refwire.pipeline.capture import read_pcap

    cases: dict[tuple[int, int], dict[str, Any]] = {}
    for n, conn in enumerate(read_pcap(pcap)):
        assert not conn.gaps and conn.cut is None, (pcap, n, conn.gaps, conn.cut)
        wire = wire_order(conn)
        chunks: dict[str, list[bytes]] = {}
        for d, b in wire:
            chunks.setdefault(d, []).append(b)
        cases[(conn.client[1], conn.server[1])] = {
            "name": f"{pcap.name} connection {n + 1}", "port": conn.server[1], "chunks": chunks, "wire": wire, "shown": {},
        }  # fmt: skip
    names = protos.split()
    for layers in run_tshark(lua, pcap, protos, display, prefs=prefs):
        tcp = layers["tcp"][0]
        sport, dport = int(tcp["tcp.srcport"][0]), int(tcp["tcp.dstport"][0])
        c2s = (sport, dport) in cases
        case = cases[(sport, dport) if c2s else (dport, sport)]
        for proto in names:
            for item in layers.get(proto, []):
                shown = {"frame": int(layers["frame"][0]["frame.number"][0]), "item": item, "proto": proto}
                case["shown"].setdefault("c2s" if c2s else "s2c", []).append(shown)
    return list(cases.values())


def decoded(pcap: Path, protocol: str) -> list[dict[str, Counter[str]]]:
    """Per connection (in the file's order), per direction: the frames ``refwire decode FILE --json
    --protocol PROTOCOL`` prints (``top``: not inside another frame; ``error``: rows that are errors)."""
    import contextlib
    import io

    from refwire.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["decode", str(pcap), "--json", "--protocol", protocol]) == 0, out.getvalue()[-2000:]
    conns: dict[str, dict[str, Counter[str]]] = {}
    for line in out.getvalue().splitlines():
        row = json.loads(line)
        counts = conns.setdefault(row["conn"], {"c2s": Counter(), "s2c": Counter()})[row["direction"]]
        counts["error"] += row["type"] == "error"
        counts["top"] += row["parent_offset"] is None
        counts[str(row["type"])] += 1
    return [conns[c] for c in sorted(conns)]


def check_session_cases(
    cases: Sequence[dict[str, Any]], rows: Sequence[dict[str, Counter[str]]], check: Callable[[dict[str, Any]], None]
) -> dict[str, Counter[str]]:
    """A recorded session's cases (:func:`session_cases`) against what ``refwire decode`` read of
    each connection (:func:`decoded`, in the same order): ``check(case)`` (every frame and field as
    refwire's describer reads it), then per direction no warning, no error row and as many frames
    as decode printed.  Returns, per direction, what refwire decoded over all connections."""
    assert len(cases) == len(rows) >= 1, (len(cases), len(rows))
    total: dict[str, Counter[str]] = {"c2s": Counter(), "s2c": Counter()}
    for case, row in zip(cases, rows, strict=True):
        check(case)
        for direction in ("c2s", "s2c"):
            shown = case["shown"].get(direction, [])
            assert not [m for s in shown for m in warns(s["item"])], (case["name"], direction)
            assert row[direction]["error"] == 0, (case["name"], direction, row[direction])
            assert len(shown) == row[direction]["top"], (case["name"], direction, len(shown), row[direction])
            total[direction].update(row[direction])
    return total
