"""Seastar RPC (scylladb/seastar ``doc/rpc.md`` as the real Seastar behaves): the
Sans-IO core -- frame codec (:mod:`.frames`; the negotiation frame in
:mod:`refwire.seastar_rpc.negotiation`), LZ4 / LZ4_FRAGMENTED compression (:mod:`.compression`), events
(:mod:`.events`) and the client and server machines (:mod:`.connection`; the
server's, and what both share, in :mod:`refwire.seastar_rpc.machine`).

Importing this package imports no trio: the trio drivers are imported explicitly
from :mod:`refwire.seastar_rpc.client` and :mod:`refwire.seastar_rpc.server`, and the
shared errors a peer can cause live in :mod:`refwire.errors` (the RPC's own in
:mod:`refwire.seastar_rpc.errors`).  See specs/seastar-rpc/README.md
for the normalized protocol and every place where refwire follows Seastar rather
than its document.

The speed paths live beside the plain ones: ``_fast_frames`` (the decoder's
regular frames, inline LZ4 and response runs), ``_fast_compression`` (single-block
envelopes) and ``_fast_connection`` (the client delivering runs), imported here so
that they have registered themselves before anything uses them (``fast=`` and
``REFWIRE_REFERENCE``: :mod:`refwire.speed`).
"""

from __future__ import annotations

from . import _fast_compression, _fast_connection, _fast_frames  # noqa: F401  (they register the speed paths)
from .compression import (
    COMPRESSOR_NAMES,
    LZ4,
    LZ4_FRAGMENTED,
    Compressor,
    LZ4Compressor,
    LZ4FragmentedCompressor,
    choose_compressor,
    envelope,
    envelope_function,
    make_compressor,
)
from .connection import NEED_DATA, NEGOTIATION_TIMED_OUT, ClientConnection, ServerConnection, State
from .events import (
    Accept,
    Call,
    CallFailed,
    CallReceived,
    CallTimedOut,
    ConnectionClosed,
    Negotiate,
    Negotiated,
    NegotiationRequested,
    OversizedCall,
    Reject,
    Reply,
    Respond,
    RespondError,
    StrayReply,
)
from .frames import (
    DEFAULT_LIMITS,
    EOS,
    MAGIC,
    UNMEASURED,
    ExceptionType,
    Feature,
    Features,
    FrameDecoder,
    Negotiation,
    NoOp,
    OversizedRequest,
    RemoteException,
    Request,
    Response,
    ResponseRun,
    StreamEnd,
    StreamMessage,
    UnknownException,
    UnknownVerb,
    UserError,
    decode_exception,
)

__all__ = [
    "COMPRESSOR_NAMES",
    "DEFAULT_LIMITS",
    "EOS",
    "LZ4",
    "LZ4_FRAGMENTED",
    "MAGIC",
    "NEED_DATA",
    "NEGOTIATION_TIMED_OUT",
    "UNMEASURED",
    "Accept",
    "Call",
    "CallFailed",
    "CallReceived",
    "CallTimedOut",
    "ClientConnection",
    "Compressor",
    "ConnectionClosed",
    "ExceptionType",
    "Feature",
    "Features",
    "FrameDecoder",
    "LZ4Compressor",
    "LZ4FragmentedCompressor",
    "Negotiate",
    "Negotiated",
    "Negotiation",
    "NegotiationRequested",
    "NoOp",
    "OversizedCall",
    "OversizedRequest",
    "RemoteException",
    "Reject",
    "Reply",
    "Request",
    "Respond",
    "RespondError",
    "Response",
    "ResponseRun",
    "ServerConnection",
    "State",
    "StrayReply",
    "StreamEnd",
    "StreamMessage",
    "UnknownException",
    "UnknownVerb",
    "UserError",
    "choose_compressor",
    "decode_exception",
    "envelope",
    "envelope_function",
    "make_compressor",
]
