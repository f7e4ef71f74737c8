"""Synthetic Lumberjack v2 captures with injected faults, for tests, benchmarks and demos.

Built with refwire's own encoders (specs/lumberjack/README.md §2): each
connection sends windows of J frames (every other window inside a C frame)
and the server side acks each window with its last seq.  Faults:
``seq-gap`` (one seq skipped inside a window),
``wrong-ack`` (a window's ack one short of its last seq), ``garbage`` (bytes
that are not a frame after the last frame).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from refwire.lumberjack.frames import Ack, Compressed, JsonFrame, Window

__all__ = ["FAULTS", "lumberjack_connection", "write_lumberjack_capture"]

FAULTS = ("seq-gap", "wrong-ack", "garbage")


def lumberjack_connection(windows: int = 5, window_size: int = 20, *, fault: str = "", first_seq: int = 1) -> tuple[bytes, bytes]:
    """``(c2s, s2c)`` bytes of one connection; ``first_seq`` runs across windows."""
    c2s: list[bytes] = []
    s2c: list[bytes] = []
    seq = first_seq
    for w in range(windows):
        seqs = []
        for _ in range(window_size):
            seqs.append(seq)
            seq = 1 if seq >= 0xFFFFFFFF else seq + 1
        if fault == "seq-gap" and w == windows // 2:
            seqs[window_size // 2 :] = [s + 1 for s in seqs[window_size // 2 :]]
        frames = b"".join(JsonFrame(s, json.dumps({"w": w, "seq": s, "message": "x" * (s % 23)}).encode()).encode() for s in seqs)
        c2s.append(Window(window_size).encode())
        c2s.append(Compressed.wrap(frames).encode() if w % 2 else frames)
        ack = seqs[-1] - 1 if fault == "wrong-ack" and w == windows // 2 else seqs[-1]
        s2c.append(Ack(0).encode() if w == 0 else b"")
        s2c.append(Ack(ack).encode())
    if fault == "garbage":
        c2s.append(b"\x00\xffnot a frame")
    return b"".join(c2s), b"".join(s2c)


def write_lumberjack_capture(out: str | Path, faults: Sequence[str] = ("",), *, windows: int = 5, window_size: int = 20) -> list[str]:
    """One connection per entry of ``faults`` ("" = clean); returns the connection names."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    names = []
    for i, fault in enumerate(faults, 1):
        if fault and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose from {FAULTS}")
        name = f"conn{i:05d}"
        c2s, s2c = lumberjack_connection(windows, window_size, fault=fault, first_seq=1 + 1000 * i)
        (d / f"{name}.c2s").write_bytes(c2s)
        (d / f"{name}.s2c").write_bytes(s2c)
        names.append(name)
    return names
