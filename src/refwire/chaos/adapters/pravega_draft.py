"""The 2017 Pravega draft in the fault proxy (specs/pravega-draft-2017/README.md).

Observed as Pravega is (:mod:`refwire.chaos.adapters.pravega`), with the
draft's own command table (§1, §2-§4; its type codes clash with today's), and
its fixed-width leading fields as rule fields.  No ``--check`` invariants yet.
"""

from __future__ import annotations

from typing import Any

from ...pravega.draft2017.describe import LAYOUT
from ...pravega.draft2017.frames import DRAFT
from ..adapter import Adapter
from ..observe import Observer
from .pravega import PravegaObserver, command_fields

__all__ = ["ADAPTER", "FIELDS"]

#: Per command: each field a rule may match, rewrite or corrupt, as (offset, size).
FIELDS = command_fields(LAYOUT)


def _observer(max_frame_size: int, direction: str, session: dict[str, Any]) -> Observer:
    return PravegaObserver(max_frame_size, DRAFT)


ADAPTER = Adapter(observer=_observer, fields=FIELDS, prefix="pd")
