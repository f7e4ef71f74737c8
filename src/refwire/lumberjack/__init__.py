"""Lumberjack v1/v2 (Beats / Logstash): codec, Sans-IO machines, trio client and server.

See specs/lumberjack/README.md for the normalized protocol and the choices made
where go-lumber and Logstash disagree.
"""

from __future__ import annotations

from .connection import (
    NEED_DATA,
    AckReceived,
    AckTimeout,
    Batch,
    ClientConnection,
    ConnectionClosed,
    EmptyWindow,
    KeepAlive,
    ServerConnection,
    State,
    encode_event,
    next_seq,
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
)

__all__ = [
    "DEFAULT_LIMITS",
    "NEED_DATA",
    "V1",
    "V2",
    "Ack",
    "AckReceived",
    "AckTimeout",
    "Batch",
    "ClientConnection",
    "Compressed",
    "ConnectionClosed",
    "DataFrame",
    "EmptyWindow",
    "Frame",
    "FrameDecoder",
    "JsonFrame",
    "KeepAlive",
    "ServerConnection",
    "State",
    "Window",
    "decode_all",
    "encode_event",
    "next_seq",
]
