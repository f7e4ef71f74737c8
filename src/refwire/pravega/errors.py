"""The errors particular to Pravega (specs/pravega/README.md): the segment store's
refusals, the controller's gRPC statuses and the client's.

Each :class:`StoreError` subclass is one refusal the service
(:mod:`refwire.pravega.service`) answers with its reply command; the 2017 draft
dialect's store refuses with them too.  Every one is a :class:`~refwire.errors.RefwireError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import attrs

from ..errors import RefwireError

if TYPE_CHECKING:
    from .frames import Command

__all__ = [
    "BadAttributeError",
    "BadKeyVersionError",
    "BadOffsetError",
    "GrpcError",
    "IllegalArgumentError",
    "KeyDoesNotExistError",
    "NoSuchSegmentError",
    "RequestFailed",
    "SegmentExistsError",
    "SegmentSealedError",
    "SegmentTruncatedError",
    "StoreError",
    "TableNotEmptyError",
    "WriteFailed",
]


class StoreError(RefwireError):
    """A segment-store operation refused (specs/pravega/README.md §8); the service
    (``refwire.pravega.service``) maps each subclass to its reply command."""


class NoSuchSegmentError(StoreError):
    """The segment does not exist (reply: NoSuchSegment)."""


class SegmentExistsError(StoreError):
    """The segment already exists (reply: SegmentAlreadyExists)."""


class SegmentSealedError(StoreError):
    """The segment is sealed (reply: SegmentIsSealed)."""


class SegmentTruncatedError(StoreError):
    """A read below the segment's start (reply: SegmentIsTruncated); ``start_offset`` is that start."""

    def __init__(self, start_offset: int) -> None:
        super().__init__(f"truncated below {start_offset}")
        self.start_offset = start_offset


class BadOffsetError(StoreError):
    """A conditional write at the wrong offset: ``given`` is the offset the
    request expected; ``actual`` the segment's length."""

    def __init__(self, given: int, actual: int) -> None:
        super().__init__(f"expected offset {given}, segment length is {actual}")
        self.given = given
        self.actual = actual


class BadAttributeError(StoreError):
    """The writer's attribute is not the expected one (a conditional append, §5.4)."""


class IllegalArgumentError(StoreError):
    """A request argument the store cannot apply (an offset outside the segment, a table op on a stream segment)."""


class BadKeyVersionError(StoreError):
    """A table key's version is not the expected one (reply: TableKeyBadVersion, §9)."""


class KeyDoesNotExistError(StoreError):
    """A conditional table update names a key that does not exist (reply: TableKeyDoesNotExist, §9)."""


class TableNotEmptyError(StoreError):
    """A must-be-empty table segment delete found entries (reply: TableSegmentNotEmpty, §9)."""


class GrpcError(RefwireError):
    """A controller RPC refused with a non-OK gRPC status (``code``, a
    ``refwire.pravega._grpc.GrpcStatus``) and ``message``; raised by a handler
    and answered as the call's trailers-only response."""

    def __init__(self, code: IntEnum, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


class RequestFailed(RefwireError):
    """The segment store answered a request with an error reply (``reply``, a
    ``refwire.pravega.frames.Command``)."""

    def __init__(self, reply: Command) -> None:
        super().__init__(_describe_reply(reply))
        self.reply = reply


def _describe_reply(reply: Any) -> str:
    """``the segment store answered NoSuchSegment (segment 's/t/0', offset 0)``:
    the reply's fields in words, without the request id or an empty stack trace."""
    parts = []
    if attrs.has(type(reply)):
        for f in attrs.fields(type(reply)):
            value = getattr(reply, f.name)
            if f.name in ("request_id", "type") or value in ("", b"", None):
                continue
            parts.append(f"{f.name.replace('_', ' ')} {value!r}")
    detail = f" ({', '.join(parts)})" if parts else ""
    return f"the segment store answered {getattr(reply, 'NAME', type(reply).__name__)}{detail}"


class WriteFailed(RefwireError):
    """A Pravega EventWriter gave up; ``unacked`` are the event numbers not known stored."""

    def __init__(self, reason: str, unacked: Sequence[int]) -> None:
        super().__init__(reason)
        self.unacked = list(unacked)
