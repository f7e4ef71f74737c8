"""TANK (phaistos-networks) broker protocol: codec, Sans-IO machines and the broker's service.

See specs/tank/README.md for the normalized protocol, the divergences from the
seed document and the choices made where the real broker has quirks.  The trio
drivers are imported explicitly: :class:`~refwire.tank.server.TankBroker` from
``refwire.tank.server``, :class:`~refwire.tank.client.TankClient` from
``refwire.tank.client``; the directory-backed storage from ``refwire.tank.disk``.

The speed path of the bundle and chunk decoder lives beside the plain one in
``refwire.tank._fast_bundles``, imported here so that it has registered itself
before anything uses it (``fast=`` and ``REFWIRE_REFERENCE``: :mod:`refwire.speed`).
"""

from __future__ import annotations

from . import _fast_bundles  # noqa: F401  (registers the speed path)
from .bundles import U64_MAX, BundleHeader, ChunkResult, Message, decode_bundle, encode_bundle, encode_entry, read_chunk
from .connection import NEED_DATA, BrokerConnection, ClientConnection, State
from .events import ClientEvent, Connected, ConnectionClosed, ConsumeResult, IdleTimeout, PartitionData
from .frames import (
    DEFAULT_LIMITS,
    ConsumePartition,
    ConsumeRequest,
    ConsumeTopic,
    CreateTopicRequest,
    DiscoverPartitionsRequest,
    DiscoverTopicsRequest,
    DiscoverTopologyRequest,
    FrameDecoder,
    Ping,
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
    ReloadConfRequest,
    StatusRequest,
    decode_request,
)
from .responses import (
    ConsumePartitionResult,
    ConsumeResponse,
    ConsumeTopicResult,
    CreateTopicResponse,
    DiscoverPartitionsResponse,
    DiscoverTopicsResponse,
    DiscoverTopologyResponse,
    PartitionInfo,
    ProduceResponse,
    ProduceResult,
    RawProduceResponse,
    ReloadConfResponse,
    StatusResponse,
    TopicInfo,
    decode_produce_response,
    decode_response,
)
from .service import BrokerConfig, BrokerService
from .storage import Entry, MemoryLog, MemoryStorage, PartitionLog, Storage

__all__ = [
    "DEFAULT_LIMITS",
    "NEED_DATA",
    "U64_MAX",
    "BrokerConfig",
    "BrokerConnection",
    "BrokerService",
    "BundleHeader",
    "ChunkResult",
    "ClientEvent",
    "ClientConnection",
    "Connected",
    "ConnectionClosed",
    "ConsumePartition",
    "ConsumePartitionResult",
    "ConsumeRequest",
    "ConsumeResponse",
    "ConsumeResult",
    "ConsumeTopic",
    "ConsumeTopicResult",
    "CreateTopicRequest",
    "CreateTopicResponse",
    "DiscoverPartitionsRequest",
    "DiscoverPartitionsResponse",
    "DiscoverTopicsRequest",
    "DiscoverTopicsResponse",
    "DiscoverTopologyRequest",
    "DiscoverTopologyResponse",
    "Entry",
    "FrameDecoder",
    "IdleTimeout",
    "MemoryLog",
    "MemoryStorage",
    "Message",
    "PartitionData",
    "PartitionInfo",
    "PartitionLog",
    "Ping",
    "ProducePartition",
    "ProduceRequest",
    "ProduceResponse",
    "ProduceResult",
    "ProduceTopic",
    "RawProduceResponse",
    "ReloadConfRequest",
    "ReloadConfResponse",
    "State",
    "StatusRequest",
    "StatusResponse",
    "Storage",
    "TopicInfo",
    "decode_bundle",
    "decode_produce_response",
    "decode_request",
    "decode_response",
    "encode_bundle",
    "encode_entry",
    "read_chunk",
]
