"""The error hierarchy shared by every protocol: the ground floor, which names none.

Inside a Sans-IO core everything raises :class:`LocalProtocolError`.  At the
receive boundary (``next_event``) it is re-raised as :class:`RemoteProtocolError`
(``raise ... from``), so the caller can tell "the peer sent something wrong"
from "I asked the machine to do something illegal".  Nothing else may escape
from parsing any input: an ``IndexError`` or ``struct.error`` out of a decoder
is a bug.

Every error names where it happened: the protocol, the frame, the field and the
byte offset in the stream (``offset``), and, where the protocol has one, a
suggested reply (``event_hint``) to send before closing.

The errors particular to one protocol (a store's refusal, an RPC status, a client
giving up) live with that protocol, in its package's ``errors`` module, and
derive from :class:`RefwireError`, so a caller can still catch every one of them
at once.  Their old names here keep working: ``from refwire.errors import X``
finds ``X`` in the protocol packages' ``errors`` modules (the packages are those
of :data:`refwire.protocols.PACKAGES`), looked up on first use, never imported by
this module's own import.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from types import ModuleType
from typing import Any

__all__ = [
    "CorruptLog",
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
        protocol: the protocol's short name, as on the command line (the
            ``name`` of its :class:`~refwire.protocols.Descriptor`).
        frame: the frame or command being parsed or built, if known.
        field: the field inside it, if known.
        offset: the byte offset in the stream (or in the enclosing buffer) where
            the faulty field starts, if known.
        event_hint: an event the protocol suggests sending before closing.
        inner: where inside an enclosed message the fault is, when the error is
            about a message carried inside this frame (e.g. a message
            reassembled from partial appends): an error whose ``frame``/``field``/``offset``
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


class CorruptLog(RefwireError):
    """A durable log is damaged in its middle (intact records follow the damage):
    starting would silently drop what the damaged records held, so the store
    refuses; ``path``, ``offset`` and ``resume`` say where.  Raised by the on-disk
    logs of every protocol that keeps one (each spec's durability section)."""

    def __init__(self, path: str, offset: int, resume: int, *, hint: str = "") -> None:
        self.path, self.offset, self.resume = path, offset, resume
        super().__init__(
            f"{path} is damaged at offset {offset}: {resume - offset} bytes hold no intact record, and intact "
            f"records follow at offset {resume}, so this is not a torn write from a crash; refusing to start "
            f"rather than lose what the damaged records held" + (f" ({hint})" if hint else "")
        )


# --------------------------------------------------------------------------- the protocols' errors
# A protocol package's ``errors`` module lists its errors in ``__all__`` and may
# keep old names of them in ``DEPRECATED`` (old name -> current name).

_protocol_modules: list[ModuleType] | None = None
#: The names found so far (each package's ``errors`` module is imported once).
_found: dict[str, Any] = {}


def _protocol_errors() -> list[ModuleType]:
    """The ``errors`` module of every protocol package that has one, in registry order."""
    global _protocol_modules
    if _protocol_modules is None:
        from .protocols import PACKAGES  # the registry's list of packages (it imports none of them)

        found = []
        for package in PACKAGES:
            name = f"{package}.errors"
            try:
                found.append(importlib.import_module(name))
            except ModuleNotFoundError as exc:
                if exc.name != name:
                    raise
        _protocol_modules = found
    return _protocol_modules


def __getattr__(name: str) -> Any:
    """``refwire.errors.X`` for an error ``X`` that lives with its protocol (PEP 562)."""
    if name in _found:
        return _found[name]
    if not name.startswith("_"):
        for module in _protocol_errors():
            if name in getattr(module, "__all__", ()):
                _found[name] = value = vars(module)[name]
                return value
            deprecated: Mapping[str, str] = getattr(module, "DEPRECATED", {})
            if name in deprecated:
                current = deprecated[name]
                warnings.warn(
                    f"refwire.errors.{name} is deprecated; use {module.__name__}.{current} (the same class)",
                    DeprecationWarning,
                    stacklevel=2,
                )
                return vars(module)[current]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """What this module defines, and the current names of the protocols' errors."""
    names = set(globals())
    for module in _protocol_errors():
        names.update(getattr(module, "__all__", ()))
    return sorted(names)
