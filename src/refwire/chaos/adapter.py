"""What a protocol gives the fault proxy: one :class:`Adapter` per protocol.

The proxy itself knows no protocol.  Each protocol's descriptor
(:mod:`refwire.protocols`) names its adapter (``chaos``), in
:mod:`refwire.chaos.adapters`: how to cut a direction of its traffic into
frames, which fields rules may name in each frame type and how its integers
are written, its ``--check`` invariants, the prefix its frame types may carry
in a schedule (``"lj:A"``), and how to open and close an envelope of frames
(a Lumberjack ``C``).  :func:`adapter_for` finds it; a protocol without one
(a plain byte relay) gets :data:`BYTES`: no framing, no fields, no checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, TypeVar

import attrs

from ..protocols import descriptor, names
from .check import Checker
from .observe import BytesObserver, Observed, Observer

__all__ = [
    "BYTES",
    "BYTE_ORDER",
    "FIELDS",
    "Adapter",
    "adapter_for",
    "checker_for",
    "inner_frames",
    "observed_types",
    "observer_for",
    "rewrap",
]

#: Per frame type: each field a rule may match, rewrite or corrupt, as (offset in the frame, size in bytes).
Fields = dict[str, dict[str, tuple[int, int]]]


def _bytes_observer(max_frame_size: int, direction: str, session: dict[str, Any]) -> Observer:
    return BytesObserver()


@attrs.frozen(kw_only=True)
class Adapter:
    """One protocol's part of the fault proxy (see the module docstring)."""

    #: ``observer(max_frame_size, direction, session)``: a fresh observer of one
    #: direction (``c2s`` or ``s2c``) of one connection; ``session`` is a dict the
    #: two directions of that connection share (a negotiation may configure both).
    observer: Callable[[int, str, dict[str, Any]], Observer] = _bytes_observer
    #: The fields rules may name, per frame type (a frame's own ``spans`` override them).
    fields: Fields = attrs.field(factory=dict)
    #: How the protocol writes its integer fields (a ``rewrite`` encodes its value so).
    byte_order: Literal["big", "little"] = "big"
    #: ``checker()``: a fresh :class:`~refwire.chaos.check.Checker` of its invariants (``--check``).
    checker: Callable[[], Checker] = Checker
    #: A schedule may name a frame type as ``"<prefix>:<type>"`` (``"lj:A"``).
    prefix: str = ""
    #: ``inner_frames(frame, max_size)``: the frames inside an envelope, or None
    #: when ``frame`` is none or does not open (it then passes as it is).
    inner_frames: Callable[[Observed, int], list[Observed] | None] | None = None
    #: ``rewrap(envelope, inner)``: the envelope again around the (changed) inner frames' bytes.
    rewrap: Callable[[Observed, list[bytes]], bytes] | None = None


#: A protocol without an adapter: every chunk a run of bytes, no fields, no checks.
BYTES = Adapter()


def adapter_for(protocol: str) -> Adapter:
    """The adapter ``protocol``'s descriptor names, or :data:`BYTES` when it is
    no known protocol (``tcp``: a plain byte relay) or has none."""
    try:
        d = descriptor(protocol, "chaos")
    except ValueError:
        return BYTES
    adapter = d.load("chaos")
    if not isinstance(adapter, Adapter):
        raise TypeError(f"{d.chaos} is not a refwire.chaos.adapter.Adapter")
    return adapter


def observer_for(protocol: str, max_frame_size: int, direction: str = "c2s", session: dict[str, Any] | None = None) -> Observer:
    """A fresh observer of one direction (``c2s`` or ``s2c``) of one connection;
    ``session`` is shared by the two directions of one connection (Seastar RPC's
    negotiation configures both)."""
    return adapter_for(protocol).observer(max_frame_size, direction, {} if session is None else session)


def checker_for(protocol: str) -> Checker:
    """A fresh checker of ``protocol``'s invariants (one that records nothing when it has none)."""
    return adapter_for(protocol).checker()


def observed_types(protocol: str) -> tuple[str, ...]:
    """The frame types rules can name for ``protocol`` (``"?"``: undecoded bytes)."""
    return (*adapter_for(protocol).fields, "?")


def inner_frames(protocol: str, frame: Observed, max_size: int) -> list[Observed] | None:
    """The frames inside an envelope (a Lumberjack ``C``: its inflated payload),
    or None when ``frame`` is none or does not open (it then passes as it is)."""
    opener = adapter_for(protocol).inner_frames
    return None if opener is None else opener(frame, max_size)


def rewrap(protocol: str, envelope: Observed, inner: list[bytes]) -> bytes:
    """``envelope`` again around the (changed) ``inner`` frames (an envelope
    :func:`inner_frames` opened)."""
    closer = adapter_for(protocol).rewrap
    if closer is None:
        raise ValueError(f"{protocol} frames carry no inner frames")
    return closer(envelope, inner)


_T = TypeVar("_T")


class _PerProtocol(Mapping[str, _T]):
    """A read-only view, by protocol name, of one piece of every protocol's adapter."""

    def __init__(self, piece: Callable[[Adapter], _T]) -> None:
        self._piece = piece

    def __getitem__(self, protocol: str) -> _T:
        if protocol not in names("chaos"):
            raise KeyError(protocol)
        return self._piece(adapter_for(protocol))

    def __iter__(self) -> Iterator[str]:
        return iter(names("chaos"))

    def __len__(self) -> int:
        return len(names("chaos"))


#: Per protocol: its adapter's :attr:`Adapter.fields` (``FIELDS[protocol][frame type]``).
FIELDS: Mapping[str, Fields] = _PerProtocol(lambda a: a.fields)
#: Per protocol: its adapter's :attr:`Adapter.byte_order`.
BYTE_ORDER: Mapping[str, Literal["big", "little"]] = _PerProtocol(lambda a: a.byte_order)
