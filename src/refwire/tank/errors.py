"""The errors particular to TANK (specs/tank/README.md): the broker's error codes,
a connection lost with requests outstanding, and a truncated bundle.

Every one is a :class:`~refwire.errors.RefwireError`; :class:`TruncatedBundle` is
also a :class:`~refwire.errors.LocalProtocolError` (a decoder raises it).
"""

from __future__ import annotations

from ..errors import LocalProtocolError, RefwireError

__all__ = ["ConnectionLost", "ConsumeError", "TankError", "TruncatedBundle"]


class TankError(RefwireError):
    """The TANK broker answered with an error code (``code``, specs/tank/README.md §3)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class ConsumeError(TankError):
    """A TANK consume failed: unknown topic or partition (0xff), or a cluster/system code."""


class ConnectionLost(RefwireError):
    """The TANK connection failed while a request was outstanding (its outcome is unknown, specs/tank/README.md §6)."""


class TruncatedBundle(LocalProtocolError):
    """A TANK entry, bundle or message runs past the bytes present (specs/tank/README.md §5).

    In a consume chunk this ends a partial trailing bundle (TANK 1 brokers clip
    chunks at the fetch size); anywhere else it is malformed input.
    """
