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

from .frames import DataFrame, EncodedWindow, JsonFrame

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


@attrs.frozen
class Batch:
    """A complete window of events, delivered to the application.

    Ack it with :meth:`ServerConnection.accept` (``send(Accept(batch))``) once
    the application holds it.
    """

    version: int
    events: tuple[Event, ...]
    number: int  #: 0, 1, 2 ... per connection

    @property
    def last_seq(self) -> int:
        return self.events[-1].seq

    def __len__(self) -> int:
        return len(self.events)


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
