"""Events of the Lumberjack Sans-IO machines (:mod:`refwire.lumberjack.connection`):
what ``next_event()`` returns, and what ``send()`` takes (specs/lumberjack/README.md §3).

Server (reader): :class:`Batch`, :class:`EmptyWindow`, :class:`ConnectionClosed`,
and from its timers :class:`IdleTimeout`, :class:`BatchTimeout` and
:class:`IdleAtShutdown`; it sends :class:`Accept`.

Client (writer): :class:`AckReceived`, :class:`KeepAlive`, :class:`AckTimeout`,
:class:`ConnectionClosed`; it sends :class:`SendWindow`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from .frames import DataFrame, EncodedWindow, JsonFrame, json_frames

__all__ = [
    "Accept",
    "AckReceived",
    "AckTimeout",
    "Batch",
    "BatchTimeout",
    "ConnectionClosed",
    "EmptyWindow",
    "Event",
    "IdleAtShutdown",
    "IdleTimeout",
    "KeepAlive",
    "SendWindow",
]

#: one data event of a batch: a ``J`` frame (v2) or a ``D`` frame (v1).
Event = JsonFrame | DataFrame


# --------------------------------------------------------------------------- server


#: one stretch of a batch's ``J`` events decoded in columns: the version byte
#: they carry, their sequence numbers, payloads, and parsed documents (or None).
JsonColumns = tuple[int, list[int], list[bytes], "list[Any] | None"]


@attrs.frozen(eq=False, repr=False)
class Batch:
    """A complete window of events, delivered to the application.

    Ack it with :meth:`ServerConnection.accept` (``send(Accept(batch))``) once
    the application holds it.

    The server machine decodes a window's ``J`` frames in columns; ``events``
    builds their :class:`~refwire.lumberjack.frames.JsonFrame` objects the
    first time it is read (and keeps them).  ``len(batch)``, :attr:`last_seq`,
    :attr:`seqs`, :attr:`payloads` and :attr:`docs` read the columns and build
    nothing: the cheap way through a large window.
    """

    version: int
    _events: tuple[Event, ...] | None = attrs.field(alias="events")
    number: int  #: 0, 1, 2 ... per connection
    _columns: tuple[JsonColumns, ...] = attrs.field(default=(), alias="columns", kw_only=True)

    @classmethod
    def of_columns(cls, version: int, columns: Sequence[JsonColumns], number: int) -> Batch:
        """A batch of ``J`` events decoded in columns (the server machine's)."""
        return cls(version, None, number, columns=tuple(columns))

    @property
    def events(self) -> tuple[Event, ...]:
        """The events as frames, in order."""
        events = self._events
        if events is None:
            built: list[Event] = []
            for version, seqs, payloads, docs in self._columns:
                built += json_frames(version, seqs, payloads, docs)
            events = tuple(built)
            object.__setattr__(self, "_events", events)
        return events

    @property
    def seqs(self) -> list[int]:
        """The events' sequence numbers, in order."""
        if self._events is not None:
            return [e.seq for e in self._events]
        return [seq for _, seqs, _, _ in self._columns for seq in seqs]

    @property
    def payloads(self) -> list[bytes]:
        """The ``J`` payloads (the JSON bytes as received), in order; a v1
        batch's ``D`` events have none (:attr:`events` holds their pairs)."""
        if self._events is not None:
            return [e.payload for e in self._events if isinstance(e, JsonFrame)]
        return [p for _, _, payloads, _ in self._columns for p in payloads]

    @property
    def docs(self) -> list[Any]:
        """The ``J`` events' parsed documents when the server validated JSON
        (else ``None`` each), in order."""
        if self._events is not None:
            return [e.data for e in self._events if isinstance(e, JsonFrame)]
        return [d for _, seqs, _, docs in self._columns for d in (docs if docs is not None else [None] * len(seqs))]

    @property
    def last_seq(self) -> int:
        if self._events is not None:
            return self._events[-1].seq
        return self._columns[-1][1][-1]

    def __len__(self) -> int:
        if self._events is not None:
            return len(self._events)
        return sum(len(seqs) for _, seqs, _, _ in self._columns)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Batch):
            return NotImplemented
        return (self.version, self.number, self.events) == (other.version, other.number, other.events)

    def __hash__(self) -> int:
        return hash((self.version, self.events, self.number))

    def __repr__(self) -> str:
        return f"Batch(version={self.version!r}, events={self.events!r}, number={self.number!r})"


@attrs.frozen
class EmptyWindow:
    """The client sent ``W 0``; its ``A 0`` is already queued in ``data_to_send()``,
    or, while earlier batches wait for acceptance, follows the last one's ack."""

    version: int


@attrs.frozen
class IdleTimeout:
    """Server: nothing pending and no byte received nor ack sent for ``waited``
    seconds (the machine's ``idle_timeout``); the driver closes the connection."""

    waited: float


@attrs.frozen
class BatchTimeout:
    """Server: a batch (or a frame) stopped arriving ``waited`` seconds ago (the
    machine's ``batch_timeout``); the driver closes the connection."""

    waited: float


@attrs.frozen
class IdleAtShutdown:
    """Server: the server is shutting down (``close_when_idle``) and this
    connection has nothing pending or half-received; the driver closes it."""


@attrs.frozen
class Accept:
    """Server, sent: the application holds ``batch``; ack it (batches are acked
    in the order they were delivered)."""

    batch: Batch


# --------------------------------------------------------------------------- both


@attrs.frozen
class ConnectionClosed:
    """The byte stream ended: ``clean`` for EOF at a frame and batch boundary
    (client: with the window fully acked); ``reason`` says how it ended otherwise
    (``"reset"``, ``"write failed"``)."""

    clean: bool
    reason: str = ""


# --------------------------------------------------------------------------- client


@attrs.frozen
class AckReceived:
    """Client: the server acknowledged ``newly`` more events (``total`` so far in
    the window); ``complete`` when the whole window is acked."""

    seq: int
    newly: int
    total: int
    complete: bool


@attrs.frozen
class KeepAlive:
    """Client: ``A 0`` -- the server is alive and still working on the window."""

    version: int


@attrs.frozen
class AckTimeout:
    """Client: no ack or keepalive within ``ack_timeout``; the connection is done."""

    waited: float


@attrs.frozen
class SendWindow:
    """Client, sent: ``W n`` and the ``n`` application ``events`` (one ``C`` when
    compressing).  ``encoded`` may give them already prepared: an
    :class:`~refwire.lumberjack.frames.EncodedWindow` (a resend does not encode
    twice) or one :func:`~refwire.lumberjack.encode_event` result per event."""

    events: Sequence[Any]
    encoded: Sequence[Any] | EncodedWindow | None = None
