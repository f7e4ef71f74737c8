"""The errors particular to Seastar RPC (specs/seastar-rpc/README.md §3, §5): how a
client call or a stream ends, and a handler's refusal of its arguments.

Every one is a :class:`~refwire.errors.RefwireError`; those a call or a stream can
end with are :class:`RpcError`.  ``StreamClosed``, the server end's old name for
:class:`StreamClosedError`, still works (with a :class:`DeprecationWarning`).
"""

from __future__ import annotations

import warnings
from typing import Any, Final

from ..errors import RefwireError

__all__ = [
    "BadArguments",
    "CallTimeout",
    "RemoteVerbError",
    "RpcConnectionError",
    "RpcError",
    "StreamClosedError",
    "StreamingNotSupported",
    "UnknownExceptionError",
    "UnknownVerbError",
]

#: Old names that still work, with a DeprecationWarning: old name -> current name.
DEPRECATED: Final = {"StreamClosed": "StreamClosedError"}


class RpcError(RefwireError):
    """Base of the errors a Seastar RPC call, or either end of a stream, can end with."""


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
    """One end of a stream can no longer be used (specs/seastar-rpc/README.md §5):
    the client's or the server's, after its parent went away, the connection was
    lost or aborted, or it already ended (``receive`` after end-of-stream)."""


class BadArguments(RefwireError):
    """Raised by a server handler whose arguments (the caller's payload) do not
    deserialize: no reply is sent and the connection stays (specs/seastar-rpc/README.md §3)."""


def __getattr__(name: str) -> Any:
    """The deprecated names of :data:`DEPRECATED` (PEP 562)."""
    current = DEPRECATED.get(name)
    if current is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name} is deprecated; use {current} (the same class)", DeprecationWarning, stacklevel=2)
    return globals()[current]
