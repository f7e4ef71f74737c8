"""Frame observers for the fault proxy: the bytes of one direction of one
connection cut into frames, with their exact bytes, without enforcing any
state machine (a proxy must pass on what a conformant machine would refuse).

An observer is lenient: it decodes with the protocol's own codec and generous
limits; at the first byte it cannot decode it gives up on framing for the rest
of that direction and hands back raw byte runs (``type`` ``"?"``), so traffic
it does not understand still flows, unchanged.

Each protocol's observer is in its adapter (:mod:`refwire.chaos.adapters`,
found with :func:`refwire.chaos.adapter.observer_for`); here are what they
share: :class:`Observed`, the :class:`Observer` protocol, the cut of frames a
fixed header sizes (:class:`LengthFramed`), and :class:`BytesObserver`, the
observer of a protocol without an adapter.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import attrs

__all__ = ["BytesObserver", "LengthFramed", "Observed", "Observer"]


@attrs.frozen
class Observed:
    """One frame (or a run of bytes that did not decode: ``type`` ``"?"``)."""

    type: str
    data: bytes
    fields: dict[str, Any] = attrs.field(factory=dict)
    #: where this frame's fields lie, when it depends on more than its type
    #: (TANK: a request and its response put ``request_id`` apart); else
    #: the adapter's :attr:`~refwire.chaos.adapter.Adapter.fields`
    spans: dict[str, tuple[int, int]] | None = None


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


class LengthFramed:
    """Frames that a fixed header sizes (Pravega's and TANK's): the shared cut.
    A subclass says whether a first byte can start a frame (:meth:`_starts`),
    reads its header (:meth:`_header`: the frame's name and whole size, or an
    error) and describes a whole frame (:meth:`_observe`).  At the first byte
    that fits no frame the rest of the direction is relayed as bytes."""

    HEADER: int

    def __init__(self, max_frame_size: int) -> None:
        self._max = max_frame_size
        self._pending = bytearray()
        self._broken = False

    def held(self) -> int:
        return len(self._pending)

    def _starts(self, first: int) -> str | None:
        """Why no frame starts with byte ``first`` (None: one may)."""
        raise NotImplementedError

    def _header(self, head: bytes) -> tuple[str, int] | str:
        """(name, whole frame size) from the header bytes, or why they are no header."""
        raise NotImplementedError

    def _observe(self, name: str, raw: bytes) -> Observed:
        raise NotImplementedError

    def feed(self, data: bytes) -> list[Observed]:
        if self._broken:
            return [Observed("?", data)] if data else []
        self._pending += data
        out: list[Observed] = []
        buf = self._pending
        while buf:
            why = self._starts(buf[0])  # known from the first byte: nothing is held for it
            if why is None and len(buf) >= self.HEADER:
                head = self._header(bytes(buf[: self.HEADER]))
                if isinstance(head, str):
                    why = head
                elif head[1] > self._max:
                    why = f"{head[0]} of {head[1]} bytes is over max_frame_size={self._max}"
            if why is not None:
                self._broken = True
                out.append(Observed("?", bytes(buf), {"error": why}))
                buf.clear()
                break
            if len(buf) < self.HEADER:
                break
            name, size = cast(tuple[str, int], head)
            if len(buf) < size:
                break
            raw = bytes(buf[:size])
            del buf[:size]
            out.append(self._observe(name, raw))
        return out
