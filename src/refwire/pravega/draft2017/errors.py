"""The errors particular to the 2017 Pravega draft dialect (specs/pravega-draft-2017/README.md).

Its segment store refuses with the current dialect's :class:`~refwire.pravega.errors.StoreError`
family; this module holds what only the draft has.  Every one is a :class:`~refwire.errors.RefwireError`.
"""

from __future__ import annotations

from ...errors import RefwireError

__all__ = ["DraftWriteFailed"]


class DraftWriteFailed(RefwireError):
    """The 2017 draft dialect's writer gave up; ``acked`` is the last ack level it saw."""

    def __init__(self, reason: str, acked: int) -> None:
        super().__init__(reason)
        self.acked = acked
