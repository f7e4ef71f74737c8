"""Frame observers for the fault proxy: the bytes of one direction of one
connection cut into frames, with their exact bytes, without enforcing any
state machine (a proxy must pass on what a conformant machine would refuse).

An observer is lenient: it decodes with the protocol's own codec and generous
limits; at the first byte it cannot decode it gives up on framing for the rest
of that direction and hands back raw byte runs (``type`` ``"?"``), so traffic
it does not understand still flows, unchanged.

Lumberjack (specs/lumberjack/README.md §2) is observed frame by frame: ``W``,
``J``, ``D``, ``C`` and ``A``, with their key fields.  Protocols without an
observer yet are relayed as byte runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import attrs

from ..wire import Limits

__all__ = ["FIELDS", "Observed", "Observer", "observer_for", "observed_types"]


@attrs.frozen
class Observed:
    """One frame (or a run of bytes that did not decode: ``type`` ``"?"``)."""

    type: str
    data: bytes
    fields: dict[str, Any] = attrs.field(factory=dict)


class Observer(Protocol):
    def feed(self, data: bytes) -> list[Observed]:
        """The frames the new bytes complete (an incomplete frame is held)."""
        ...

    def held(self) -> int:
        """Bytes held for an incomplete frame."""
        ...


class BytesObserver:
    """No framing: every chunk is a run of bytes."""

    def feed(self, data: bytes) -> list[Observed]:
        return [Observed("?", data)] if data else []

    def held(self) -> int:
        return 0


class LumberjackObserver:
    """Lumberjack v1/v2 frames (§2), decoded leniently (no JSON validation, either version byte)."""

    def __init__(self, max_frame_size: int) -> None:
        from ..lumberjack.frames import FrameDecoder

        self._dec = FrameDecoder(
            Limits(max_window=2**32 - 1, max_frame_size=max_frame_size, max_buffered=max_frame_size),
            validate_json=False,
            strict_versions=False,
        )
        self._pending = bytearray()
        self._broken = False

    def held(self) -> int:
        return len(self._pending)

    def feed(self, data: bytes) -> list[Observed]:
        from ..lumberjack.frames import frame_size

        if self._broken:
            return [Observed("?", data)] if data else []
        self._pending += data
        self._dec.feed(data)
        frames, err = self._dec.frames_before_error()
        out = []
        for f in frames:
            size = frame_size(f)
            raw = bytes(self._pending[:size])
            del self._pending[:size]
            out.append(Observed(*_lumberjack_fields(f, raw)))
        if err is not None:
            self._broken = True
            if self._pending:
                out.append(Observed("?", bytes(self._pending), {"error": str(err)}))
            self._pending.clear()
        return out


def _lumberjack_fields(f: Any, raw: bytes) -> tuple[str, bytes, dict[str, Any]]:
    from ..lumberjack.frames import Ack, Compressed, DataFrame, JsonFrame, Window

    version = chr(raw[0])
    if isinstance(f, Ack):
        return "A", raw, {"version": version, "seq": f.seq}
    if isinstance(f, Window):
        return "W", raw, {"version": version, "count": f.count}
    if isinstance(f, JsonFrame):
        return "J", raw, {"version": version, "seq": f.seq, "length": len(f.payload)}
    if isinstance(f, DataFrame):
        return "D", raw, {"version": version, "seq": f.seq, "pairs": len(f.pairs)}
    assert isinstance(f, Compressed)
    return "C", raw, {"version": version, "length": len(f.payload)}


#: Per protocol and frame type: each field a rule may match, rewrite or corrupt,
#: as (offset in the frame, size in bytes).  specs/lumberjack/README.md §2.
FIELDS: dict[str, dict[str, dict[str, tuple[int, int]]]] = {
    "lumberjack": {
        "A": {"version": (0, 1), "type": (1, 1), "seq": (2, 4)},
        "W": {"version": (0, 1), "type": (1, 1), "count": (2, 4)},
        "J": {"version": (0, 1), "type": (1, 1), "seq": (2, 4), "length": (6, 4)},
        "D": {"version": (0, 1), "type": (1, 1), "seq": (2, 4), "pairs": (6, 4)},
        "C": {"version": (0, 1), "type": (1, 1), "length": (2, 4)},
    },
}


def observed_types(protocol: str) -> tuple[str, ...]:
    """The frame types rules can name for ``protocol`` (``"?"``: undecoded bytes)."""
    return (*FIELDS.get(protocol, {}), "?")


_OBSERVERS: dict[str, Callable[[int], Observer]] = {"lumberjack": LumberjackObserver}


def observer_for(protocol: str, max_frame_size: int) -> Observer:
    """A fresh observer of one direction of one connection."""
    make = _OBSERVERS.get(protocol)
    return make(max_frame_size) if make is not None else BytesObserver()
