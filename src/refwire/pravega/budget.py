"""A segment store connection's memory budget, both dialects (specs/pravega/README.md §11,
specs/pravega-draft-2017/README.md §11).

``Limits.max_connection_memory`` (``--connection-memory``) is shared out as tighter caps that
the existing checks already apply, each at the field that claims the bytes and before they are
buffered:

* **frames** (:data:`FRAME_SHARE`): a frame may take an eighth.  A byte of a frame costs up to
  about three times itself while it is held: the receive buffer, the decoded command, and the
  reassembled append (a held AppendBlock and the AppendBlockEnd that completes it; the draft's
  block, partial message and the Event it completes), and two frames may be held at once.
* **replies** (:data:`REPLY_SHARE`): replies written and not yet taken by the client (and
  replies queued behind one waiting for durability) may take a quarter, at most the pump's own
  16 MiB (:data:`MAX_REPLIES`, :data:`refwire.drivers.DEFAULT_MAX_UNWRITTEN`): above it nothing more is read or
  answered, parked reads woken by new data included, until the client reads.  One reply may
  go past it (a read answers at most 2 MiB).
* **parked reads** (:data:`PARKED_SHARE`): reads parked at the tail may take an eighth, each
  costing :func:`parked_cost` (its strings, and the task and cancel scope that wait for data);
  past it, as past ``max_parked_reads``, the oldest is answered empty at once.

Data the store accepted is the store's, not the connection's: it is not counted.
"""

from __future__ import annotations

import sys
from typing import Final

import attrs

from ..errors import LimitExceeded
from ..wire import Limits, check_limit

__all__ = [
    "FRAME_SHARE",
    "MAX_REPLIES",
    "PARKED_READ_COST",
    "PARKED_SHARE",
    "REPLY_SHARE",
    "Shares",
    "capped",
    "check_share",
    "parked_cost",
    "shares",
]

#: a frame may take 1/FRAME_SHARE of the budget
FRAME_SHARE: Final = 8
#: queued replies may take 1/REPLY_SHARE of the budget, at most MAX_REPLIES
REPLY_SHARE: Final = 4
#: the pump's own bound on unwritten bytes (``refwire.drivers.DEFAULT_MAX_UNWRITTEN``; this
#: module is Sans-IO and does not import the drivers)
MAX_REPLIES: Final = 16 * 1024 * 1024
#: parked reads may take 1/PARKED_SHARE of the budget
PARKED_SHARE: Final = 8
#: what a parked read costs besides its strings: its command, task and cancel scope (measured
#: at about 2 KiB in CPython 3.11; rounded up)
PARKED_READ_COST: Final = 4096


@attrs.frozen
class Shares:
    """``max_connection_memory`` shared out (see the module docstring)."""

    total: int
    frame: int
    replies: int
    parked: int


def shares(limits: Limits) -> Shares:
    """The shares of ``limits.max_connection_memory``."""
    total = limits.max_connection_memory
    return Shares(total, total // FRAME_SHARE, min(MAX_REPLIES, total // REPLY_SHARE), total // PARKED_SHARE)


def capped(limits: Limits, *fields: str) -> tuple[Limits, frozenset[str]]:
    """``limits`` with each of ``fields`` at most the frame share, and the fields the budget
    made tighter (their errors name ``max_connection_memory``)."""
    share = shares(limits).frame
    bound = frozenset(name for name in fields if getattr(limits, name) > share)
    if not bound:
        return limits, bound
    return attrs.evolve(limits, **{name: share for name in bound}), bound


def parked_cost(*strings: str) -> int:
    """What a parked read holds: its strings as Python keeps them (a non-ASCII character
    takes 2 or 4 bytes) and :data:`PARKED_READ_COST`."""
    return PARKED_READ_COST + sum(sys.getsizeof(s) for s in strings)


def check_share(
    value: int,
    limits: Limits,
    limit_field: str,
    bound: frozenset[str],
    *,
    name: str,
    field: str,
    frame: str | None,
    offset: int | None,
    protocol: str,
) -> None:
    """``check_limit(value, limits.<limit_field>, name=name, ...)``; when the budget made
    that limit tighter (``limit_field in bound``) the error names ``max_connection_memory``."""
    limit: int = getattr(limits, limit_field)
    if limit_field in bound and value > limit:
        raise LimitExceeded(
            f"{field} {value} exceeds the {limit} bytes the limit max_connection_memory={limits.max_connection_memory} "
            f"allows ({name} is {limit} under it)",
            protocol=protocol,
            frame=frame,
            field=field,
            offset=offset,
        )
    check_limit(value, limit, name=name, field=field, frame=frame, offset=offset, protocol=protocol)
