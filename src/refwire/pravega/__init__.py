"""The Pravega segment-store wire protocol (specs/pravega/README.md).

Importing this package gives the Sans-IO core only (no trio, no simulator, no
pipeline):

* :mod:`.frames` (over :mod:`.frames_codec`) -- every v17 wire command, byte-exact
  with Pravega, and the codec;
* :mod:`.connection` / :mod:`.events` -- Sans-IO server and client machines
  (append reassembly, writer state, Hello/KeepAlive) and the events they give;
* :mod:`refwire.pravega.writer` -- the Sans-IO writer session (exactly once across reconnects);
* :mod:`.service` / :mod:`.store` / :mod:`.storage` -- the service behind the
  server machine, the segment store's state and the :class:`Log` protocol it
  writes to (with the in-memory :class:`MemoryLog`).

Each codec and machine has a plain path that follows the spec's sections
(:mod:`refwire.pravega.commands`, :mod:`.frames_codec`, :mod:`.connection`, :mod:`refwire.pravega.partial`) and,
beside it, a speed path doing the same work faster (:mod:`refwire.pravega._fast_frames`,
:mod:`refwire.pravega._fast_connection`), which registers itself into hooks the plain modules
declare when this package is imported.  Which one runs is decided once per
decoder or machine: ``fast=True``/``False``, or by default the process-wide
switch of :mod:`refwire.speed` (``REFWIRE_REFERENCE=1`` selects the plain path).

The drivers are imported explicitly: :mod:`.server` / :mod:`.client` (trio),
:mod:`.disk` (the log in a directory), :mod:`.controller` (a minimal gRPC
controller so the real ``pravega`` client can find the store).  The 2017 draft
dialect is :mod:`refwire.pravega.draft2017`.
"""

from ..sansio import NEED_DATA

# The speed paths register themselves into the plain modules' hooks on import (a
# plain module never imports its speed path, so this is where they are imported).
from . import _fast_connection, _fast_frames  # noqa: F401
from .connection import ClientConnection, ServerConnection, State
from .events import (
    Append,
    AppendBytes,
    ConnectionClosed,
    HelloReceived,
    KeepAliveReceived,
    ReplyReceived,
    ReplySlot,
    RequestReceived,
)
from .frames import (
    CLIENT_LIMITS,
    DEFAULT_LIMITS,
    MAX_WIRECOMMAND_SIZE,
    NULL_VALUE,
    OLDEST_COMPATIBLE_VERSION,
    WIRE_VERSION,
    Command,
    CommandDecoder,
    decode_command,
    encode_command,
    encode_event,
    request_id_of,
)
from .service import AppendOutcome, Outcome, SegmentStoreService, TokenVerdict, TokenVerifier
from .storage import Log, MemoryLog
from .store import ReadResult, Segment, SegmentStore
from .writer import PendingEvent, WriterSession

__all__ = [
    "CLIENT_LIMITS",
    "DEFAULT_LIMITS",
    "MAX_WIRECOMMAND_SIZE",
    "NEED_DATA",
    "NULL_VALUE",
    "OLDEST_COMPATIBLE_VERSION",
    "WIRE_VERSION",
    "Append",
    "AppendBytes",
    "AppendOutcome",
    "ClientConnection",
    "Command",
    "CommandDecoder",
    "ConnectionClosed",
    "HelloReceived",
    "KeepAliveReceived",
    "Log",
    "MemoryLog",
    "Outcome",
    "PendingEvent",
    "ReadResult",
    "ReplyReceived",
    "ReplySlot",
    "RequestReceived",
    "Segment",
    "SegmentStore",
    "SegmentStoreService",
    "ServerConnection",
    "State",
    "TokenVerdict",
    "TokenVerifier",
    "WriterSession",
    "decode_command",
    "encode_command",
    "encode_event",
    "request_id_of",
]
