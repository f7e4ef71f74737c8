"""The error hierarchy shared by every protocol.

Inside a Sans-IO core everything raises :class:`LocalProtocolError`.  At the
receive boundary (``next_event``) it is re-raised as :class:`RemoteProtocolError`
(``raise ... from``), so the caller can tell "the peer sent something wrong"
from "I asked the machine to do something illegal".  Nothing else may escape
from parsing any input: an ``IndexError`` or ``struct.error`` out of a decoder
is a bug.

Every error names where it happened: the protocol, the frame, the field and the
byte offset in the stream (``offset``), and, where the protocol has one, a
suggested reply (``event_hint``) to send before closing.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .pravega.frames import Command as PravegaCommand

__all__ = [
    "LimitExceeded",
    "LocalProtocolError",
    "ProtocolError",
    "RefwireError",
    "RemoteLimitExceeded",
    "RemoteProtocolError",
]


class RefwireError(Exception):
    """Base class of every error refwire raises on purpose."""


class ProtocolError(RefwireError):
    """A violation of a wire protocol.

    Attributes:
        reason: what is wrong, in words.
        protocol: the protocol's short name (``"lumberjack"``, ``"pravega"`` ...).
        frame: the frame or command being parsed or built, if known.
        field: the field inside it, if known.
        offset: the byte offset in the stream (or in the enclosing buffer) where
            the faulty field starts, if known.
        event_hint: an event the protocol suggests sending before closing.
        inner: where inside an enclosed message the fault is, when the error is
            about a message carried inside this frame (e.g. a reassembled Pravega
            draft partial message): an error whose ``frame``/``field``/``offset``
            are relative to that message.  None for most errors.
    """

    def __init__(
        self,
        reason: str,
        *,
        protocol: str | None = None,
        frame: str | None = None,
        field: str | None = None,
        offset: int | None = None,
        event_hint: Any = None,
        inner: ProtocolError | None = None,
    ) -> None:
        self.reason = reason
        self.inner = inner
        self.protocol = protocol
        self.frame = frame
        self.field = field
        self.offset = offset
        self.event_hint = event_hint
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.protocol:
            where.append(self.protocol)
        if self.frame:
            where.append(f"frame {self.frame}")
        if self.field:
            where.append(f"field {self.field}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        text = f"{self.reason} ({', '.join(where)})" if where else self.reason
        inner = getattr(self, "inner", None)
        if inner is not None:
            text += f" [inside: frame {inner.frame}, field {inner.field}, offset {inner.offset}]"
        return text

    def located(
        self,
        *,
        protocol: str | None = None,
        frame: str | None = None,
        offset_base: int = 0,
    ) -> ProtocolError:
        """Fill in context an inner layer did not know, shifting the offset.

        Returns ``self`` (mutated) so it can be used in ``raise err.located(...)``.
        """
        if self.protocol is None:
            self.protocol = protocol
        if self.frame is None:
            self.frame = frame
        if self.offset is not None:
            self.offset += offset_base
        self.args = (self._render(),)
        return self

    def as_remote(self) -> RemoteProtocolError:
        """The same error, as seen at the receive boundary."""
        cls: type[RemoteProtocolError] = (
            RemoteLimitExceeded if isinstance(self, LimitExceeded) else RemoteProtocolError
        )
        return cls(
            self.reason,
            protocol=self.protocol,
            frame=self.frame,
            field=self.field,
            offset=self.offset,
            event_hint=self.event_hint,
            inner=self.inner,
        )


class LocalProtocolError(ProtocolError):
    """Raised inside a core, or when the local side asks for something illegal."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something that breaks the protocol; the connection is done."""


class LimitExceeded(LocalProtocolError):
    """A length, count or size went past a configured :class:`~refwire.wire.Limits` value."""


class RemoteLimitExceeded(RemoteProtocolError):
    """The peer's input went past a configured limit (the remote face of LimitExceeded)."""


# --------------------------------------------------------------------------- durable logs

__all__ += ["CorruptLog"]


class CorruptLog(RefwireError):
    """A durable log is damaged in its middle (intact records follow the damage):
    starting would silently drop what the damaged records held, so the store
    refuses; ``path``, ``offset`` and ``resume`` say where (Pravega's and TANK's logs,
    specs/pravega/README.md §13 and specs/tank/README.md §11)."""

    def __init__(self, path: str, offset: int, resume: int, *, hint: str = "") -> None:
        self.path, self.offset, self.resume = path, offset, resume
        super().__init__(
            f"{path} is damaged at offset {offset}: {resume - offset} bytes hold no intact record, and intact "
            f"records follow at offset {resume}, so this is not a torn write from a crash; refusing to start "
            f"rather than lose what the damaged records held" + (f" ({hint})" if hint else "")
        )


# --------------------------------------------------------------------------- per protocol
# Errors a remote input can cause that are particular to one protocol (a store's
# refusal, an RPC status, a bad argument list) live here too, so a caller can
# catch every one of them as a RefwireError.  Each section extends __all__.

# --- Lumberjack (specs/lumberjack/README.md)

__all__ += ["AckWaitExpired", "SendFailed", "WindowNotAcked"]


class SendFailed(RefwireError):
    """A Lumberjack client's ``send`` gave up (``max_attempts`` reached): the server
    kept closing, resetting, timing out or breaking the protocol
    (specs/lumberjack/README.md §3.7).

    ``acked`` counts the events of that ``send`` call that were acked;
    ``unacked`` holds the rest, in order (re-queue them for at-least-once).
    """

    def __init__(self, message: str, *, acked: int, unacked: list[Any]) -> None:
        super().__init__(message)
        self.acked = acked
        self.unacked = unacked


class WindowNotAcked(RefwireError):
    """One attempt at a Lumberjack window ended before its last ack: the server
    closed the connection (specs/lumberjack/README.md §3.7).  The client reconnects
    and resends what is unacked; after ``max_attempts`` it raises :class:`SendFailed`
    with this as the cause (also kept as the client's ``last_error``)."""


class AckWaitExpired(WindowNotAcked):
    """No ack and no keepalive for ``waited`` seconds (the client's ack timeout,
    specs/lumberjack/README.md §3.9)."""

    def __init__(self, waited: float) -> None:
        self.waited = waited
        super().__init__(f"no ack for {waited:.1f}s")


# --- Pravega, current and 2017 draft (specs/pravega/README.md, specs/pravega-draft-2017/README.md)


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

    def __init__(self, reply: PravegaCommand) -> None:
        super().__init__(_describe_reply(reply))
        self.reply = reply


def _describe_reply(reply: Any) -> str:
    """``the segment store answered NoSuchSegment (segment 's/t/0', offset 0)``:
    the reply's fields in words, without the request id or an empty stack trace."""
    import attrs

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


class DraftWriteFailed(RefwireError):
    """The 2017 draft dialect's writer gave up; ``acked`` is the last ack level it saw."""

    def __init__(self, reason: str, acked: int) -> None:
        super().__init__(reason)
        self.acked = acked


__all__ += [
    "BadAttributeError",
    "BadKeyVersionError",
    "BadOffsetError",
    "DraftWriteFailed",
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

# --- TANK (specs/tank/README.md)


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


__all__ += ["ConnectionLost", "ConsumeError", "TankError", "TruncatedBundle"]

# --- Seastar RPC (specs/seastar-rpc/README.md)

__all__ += [
    "BadArguments",
    "CallTimeout",
    "RemoteVerbError",
    "RpcConnectionError",
    "RpcError",
    "StreamClosed",
    "StreamClosedError",
    "StreamingNotSupported",
    "UnknownExceptionError",
    "UnknownVerbError",
]


class RpcError(RefwireError):
    """Base of the errors a Seastar RPC client call or stream can end with."""


class RemoteVerbError(RpcError):
    """The handler failed: a USER exception reply; ``message`` is Seastar's opaque
    text (specs/seastar-rpc/README.md §3)."""

    def __init__(self, message: bytes) -> None:
        self.message = message
        super().__init__(f"remote verb error: {message.decode('utf-8', 'replace')}")


class UnknownVerbError(RpcError):
    """The server has no handler for ``verb``: an UNKNOWN_VERB exception reply
    (specs/seastar-rpc/README.md §3)."""

    def __init__(self, verb: int) -> None:
        self.verb = verb
        super().__init__(f"unknown verb {verb}")


class UnknownExceptionError(RpcError):
    """An exception reply of a type Seastar never sends; ``type`` is its number
    (specs/seastar-rpc/README.md §3)."""

    def __init__(self, type_: int) -> None:
        self.type = type_
        super().__init__(f"unknown exception type {type_}")


class CallTimeout(RpcError):
    """No reply before the call's deadline; a late reply is ignored (specs/seastar-rpc/README.md §3)."""

    def __init__(self, msg_id: int) -> None:
        self.msg_id = msg_id
        super().__init__(f"rpc call {msg_id} timed out")


class RpcConnectionError(RpcError):
    """The connection closed, broke or failed to negotiate before the call was answered."""


class StreamingNotSupported(RpcError):
    """The server gave no CONNECTION_ID (in its negotiation reply, or for the stream
    connection itself), so no stream can be opened (specs/seastar-rpc/README.md §5)."""


class StreamClosedError(RpcError):
    """The client end of a stream is closed: its parent went away, or it ended
    (specs/seastar-rpc/README.md §5)."""


class BadArguments(RefwireError):
    """Raised by a server handler whose arguments (the caller's payload) do not
    deserialize: no reply is sent and the connection stays (specs/seastar-rpc/README.md §3)."""


class StreamClosed(RefwireError):
    """The server end of a stream ended: its parent closed, the connection was lost,
    or it is already at end-of-stream (specs/seastar-rpc/README.md §5)."""
