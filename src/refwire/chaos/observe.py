"""Frame observers for the fault proxy: the bytes of one direction of one
connection cut into frames, with their exact bytes, without enforcing any
state machine (a proxy must pass on what a conformant machine would refuse).

An observer is lenient: it reads with the protocol's describer
(:mod:`refwire.describe`, the one lenient reading every tool shares); at the
first byte that is no frame it gives up on framing for the rest of that
direction and hands back raw byte runs (``type`` ``"?"``), so traffic it does
not understand still flows, unchanged.

Each protocol's observer is in its adapter (:mod:`refwire.chaos.adapters`,
found with :func:`refwire.chaos.adapter.observer_for`), a thin wrapper of its
describer; here are what they share: :class:`Observed`, the :class:`Observer`
protocol, and :class:`BytesObserver`, the observer of a protocol without an adapter.
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs

__all__ = ["BytesObserver", "Observed", "Observer"]


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
