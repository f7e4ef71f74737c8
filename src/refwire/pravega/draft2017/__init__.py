"""The Pravega 2017 draft dialect (specs/pravega-draft-2017/README.md): connection-offset
appends in Begin/End blocks and Begin/Middle/End partial messages.  Its own
command table (:mod:`.frames`), machines (:mod:`.connection`, over the frame
intake of :mod:`refwire.pravega.draft2017.machine` and the partial-message reassembly of :mod:`refwire.pravega.draft2017.partial`) and events (:mod:`.events`) and writer session (:mod:`refwire.pravega.draft2017.writer`);
it shares the codec machinery, the segment store and the simulator with today's
dialect.

Importing this package gives the Sans-IO core only; the trio drivers are
:mod:`.server` and :mod:`.client`, imported explicitly.
"""

from ...sansio import NEED_DATA
from .connection import DEFAULT_LIMITS, ClientConnection, ServerConnection, State
from .events import BlockAppend, Blocks, ConnectionClosed, KeepAliveReceived, ReplyReceived, RequestReceived
from .frames import (
    DRAFT,
    PROTOCOL,
    AppendSetup,
    BeginAppendBlock,
    DataAppended,
    EndAppendBlock,
    Event,
    KeepAlive,
    Part,
    PartialMessage,
    ReadSegment,
    SegmentRead,
    SetupAppend,
)
from .writer import DraftWriterSession

__all__ = [
    "DEFAULT_LIMITS",
    "DRAFT",
    "NEED_DATA",
    "PROTOCOL",
    "AppendSetup",
    "BeginAppendBlock",
    "BlockAppend",
    "Blocks",
    "ClientConnection",
    "ConnectionClosed",
    "DataAppended",
    "DraftWriterSession",
    "EndAppendBlock",
    "Event",
    "KeepAlive",
    "KeepAliveReceived",
    "Part",
    "PartialMessage",
    "ReadSegment",
    "ReplyReceived",
    "RequestReceived",
    "SegmentRead",
    "ServerConnection",
    "SetupAppend",
    "State",
]
