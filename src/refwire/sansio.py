"""Pieces every Sans-IO connection shares (DESIGN.md §1): the ``NEED_DATA``
sentinel and the conversion of a core's local error into a remote one at the
receive boundary."""

from __future__ import annotations

from typing import Final

from .errors import ProtocolError, RemoteProtocolError

__all__ = ["NEED_DATA", "NeedData", "to_remote"]


class NeedData:
    """Sentinel: the machine needs more bytes before it can produce an event."""

    _instance: NeedData | None = None

    def __new__(cls) -> NeedData:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData()


def to_remote(exc: ProtocolError) -> RemoteProtocolError:
    """``exc`` as a :class:`RemoteProtocolError` (the peer sent something wrong), chained to it."""
    if isinstance(exc, RemoteProtocolError):
        return exc
    remote = exc.as_remote()
    remote.__cause__ = exc
    return remote
