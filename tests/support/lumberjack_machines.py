"""Lumberjack frames the machine tests feed (specs/lumberjack): a JSON frame by its
sequence number, and a Compressed frame wrapping others."""

from __future__ import annotations

import zlib

from lumberjack_strategies import json_frame

from refwire.lumberjack import V2, Compressed


def J(seq: int) -> bytes:
    """An encoded JSON frame numbered ``seq`` holding ``{"n": seq}``."""
    return json_frame(seq, {"n": seq}).encode()


def C(*frames: bytes) -> bytes:
    """An encoded v2 Compressed frame holding ``frames``."""
    return Compressed(zlib.compress(b"".join(frames), 6), V2).encode()
