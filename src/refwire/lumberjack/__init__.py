"""Lumberjack v1/v2 (Beats / Logstash): the Sans-IO core -- frame codec
(:mod:`.frames`, zlib ``C`` frames included), events (:mod:`.events`) and the client
and server machines (:mod:`.connection`).

Importing this package imports no trio: the trio drivers are imported explicitly
from :mod:`refwire.lumberjack.client` and :mod:`refwire.lumberjack.server`, and the
shared errors a peer can cause live in :mod:`refwire.errors` (the client's own in
:mod:`refwire.lumberjack.errors`).  See specs/lumberjack/README.md
for the normalized protocol and the choices made where go-lumber and Logstash disagree.

Each codec and machine has a plain path that follows the spec's sections
(:mod:`refwire.lumberjack.codec`, :mod:`.compression`, :mod:`.frames`, :mod:`.connection`,
:mod:`refwire.lumberjack.writer`) and, beside it, a speed path (:mod:`refwire.lumberjack._fast_frames`,
:mod:`refwire.lumberjack._fast_connection`), chosen once per object by ``fast=`` or, by default,
the process-wide ``REFWIRE_REFERENCE`` switch (:mod:`refwire.speed`).
"""

from __future__ import annotations

# The speed paths register themselves with the plain modules they sit beside
# (refwire.speed decides, per object, which one runs); imported first, they are
# there before anything is built.
from . import _fast_connection, _fast_frames  # noqa: F401
from .connection import NEED_DATA, ClientConnection, ServerConnection, State
from .events import (
    Accept,
    AckReceived,
    AckTimeout,
    Batch,
    BatchTimeout,
    ConnectionClosed,
    EmptyWindow,
    IdleAtShutdown,
    IdleTimeout,
    KeepAlive,
    SendWindow,
)
from .frames import (
    DEFAULT_LIMITS,
    V1,
    V2,
    Ack,
    Compressed,
    DataFrame,
    Frame,
    FrameDecoder,
    JsonFrame,
    Window,
    decode_all,
    encode_event,
    next_seq,
)

__all__ = [
    "DEFAULT_LIMITS",
    "NEED_DATA",
    "V1",
    "V2",
    "Accept",
    "Ack",
    "AckReceived",
    "AckTimeout",
    "Batch",
    "BatchTimeout",
    "ClientConnection",
    "Compressed",
    "ConnectionClosed",
    "DataFrame",
    "EmptyWindow",
    "Frame",
    "FrameDecoder",
    "IdleAtShutdown",
    "IdleTimeout",
    "JsonFrame",
    "KeepAlive",
    "SendWindow",
    "ServerConnection",
    "State",
    "Window",
    "decode_all",
    "encode_event",
    "next_seq",
]
