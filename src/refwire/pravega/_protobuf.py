"""The Pravega controller's protobuf messages (the controller API, ``package
io.pravega.controller.stream.api.grpc.v1``), written from its field numbers and
checked against the published proto for the enum values; no generated code.

The proto3 codec they use is :mod:`._protobuf_codec`, re-exported here.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar

import attrs

from ._protobuf_codec import DEFAULT_LIMITS, PROTOCOL, Kind, M, Message, ProtoField, decode_message, encode_message

__all__ = [
    "DEFAULT_LIMITS",
    "PROTOCOL",
    "M",
    "Message",
    "ProtoField",
    "decode_message",
    "encode_message",
]


# --------------------------------------------------------------------------- messages (controller API)


def _f(number: int, name: str, kind: Kind, *, repeated: bool = False, message: type[Message] | None = None) -> ProtoField:
    return ProtoField(number, name, kind, repeated, message)


@attrs.frozen
class ScopeInfo(Message):
    scope: str = ""
    FIELDS: ClassVar = (_f(1, "scope", "string"),)


@attrs.frozen
class StreamInfo(Message):
    scope: str = ""
    stream: str = ""
    access_operation: int = 0
    FIELDS: ClassVar = (_f(1, "scope", "string"), _f(2, "stream", "string"), _f(3, "access_operation", "enum"))


@attrs.frozen
class ScalingPolicy(Message):
    scale_type: int = 0  # FIXED_NUM_SEGMENTS 0, BY_RATE_IN_KBYTES_PER_SEC 1, BY_RATE_IN_EVENTS_PER_SEC 2
    target_rate: int = 0
    scale_factor: int = 0
    min_num_segments: int = 0
    FIELDS: ClassVar = (
        _f(1, "scale_type", "enum"),
        _f(2, "target_rate", "int32"),
        _f(3, "scale_factor", "int32"),
        _f(4, "min_num_segments", "int32"),
    )


@attrs.frozen
class RetentionPolicy(Message):
    retention_type: int = 0  # UNKNOWN 0, TIME 1, SIZE 2
    retention_param: int = 0
    retention_max: int = 0
    FIELDS: ClassVar = (
        _f(1, "retention_type", "enum"),
        _f(2, "retention_param", "int64"),
        _f(3, "retention_max", "int64"),
    )


@attrs.frozen
class Tags(Message):
    tag: tuple[str, ...] = ()
    FIELDS: ClassVar = (_f(1, "tag", "string", repeated=True),)


@attrs.frozen
class StreamConfig(Message):
    stream_info: StreamInfo | None = None
    scaling_policy: ScalingPolicy | None = None
    retention_policy: RetentionPolicy | None = None
    tags: Tags | None = None
    FIELDS: ClassVar = (
        _f(1, "stream_info", "message", message=StreamInfo),
        _f(2, "scaling_policy", "message", message=ScalingPolicy),
        _f(3, "retention_policy", "message", message=RetentionPolicy),
        _f(4, "tags", "message", message=Tags),
    )


@attrs.frozen
class StatusResponse(Message):
    """CreateScopeStatus, CreateStreamStatus, UpdateStreamStatus,
    DeleteStreamStatus and DeleteScopeStatus all are ``{1 status}``."""

    status: int = 0
    FIELDS: ClassVar = (_f(1, "status", "enum"),)


@attrs.frozen
class SegmentId(Message):
    stream_info: StreamInfo | None = None
    segment_id: int = 0
    FIELDS: ClassVar = (_f(1, "stream_info", "message", message=StreamInfo), _f(2, "segment_id", "int64"))


@attrs.frozen
class SegmentRange(Message):
    segment_id: SegmentId | None = None
    min_key: float = 0.0
    max_key: float = 0.0
    FIELDS: ClassVar = (
        _f(1, "segment_id", "message", message=SegmentId),
        _f(2, "min_key", "double"),
        _f(3, "max_key", "double"),
    )


@attrs.frozen
class SegmentRanges(Message):
    segment_ranges: tuple[SegmentRange, ...] = ()
    delegation_token: str = ""
    FIELDS: ClassVar = (
        _f(1, "segment_ranges", "message", repeated=True, message=SegmentRange),
        _f(2, "delegation_token", "string"),
    )


@attrs.frozen
class NodeUri(Message):
    endpoint: str = ""
    port: int = 0
    FIELDS: ClassVar = (_f(1, "endpoint", "string"), _f(2, "port", "int32"))


@attrs.frozen
class ServerRequest(Message):
    FIELDS: ClassVar = ()


@attrs.frozen
class ServerResponse(Message):
    node_uri: tuple[NodeUri, ...] = ()
    FIELDS: ClassVar = (_f(1, "node_uri", "message", repeated=True, message=NodeUri),)


@attrs.frozen
class GetSegmentsRequest(Message):
    stream_info: StreamInfo | None = None
    timestamp: int = 0
    FIELDS: ClassVar = (_f(1, "stream_info", "message", message=StreamInfo), _f(2, "timestamp", "int64"))


@attrs.frozen
class GetEpochSegmentsRequest(Message):
    stream_info: StreamInfo | None = None
    epoch: int = 0
    FIELDS: ClassVar = (_f(1, "stream_info", "message", message=StreamInfo), _f(2, "epoch", "int32"))


@attrs.frozen
class SegmentLocation(Message):
    segment_id: SegmentId | None = None
    offset: int = 0
    FIELDS: ClassVar = (_f(1, "segment_id", "message", message=SegmentId), _f(2, "offset", "int64"))


@attrs.frozen
class SegmentsAtTime(Message):
    segments: tuple[SegmentLocation, ...] = ()
    delegation_token: str = ""
    FIELDS: ClassVar = (
        _f(1, "segments", "message", repeated=True, message=SegmentLocation),
        _f(2, "delegation_token", "string"),
    )


@attrs.frozen
class SegmentEntry(Message):
    segment: SegmentRange | None = None
    value: tuple[int, ...] = ()
    FIELDS: ClassVar = (_f(1, "segment", "message", message=SegmentRange), _f(2, "value", "int64", repeated=True))


@attrs.frozen
class SuccessorResponse(Message):
    segments: tuple[SegmentEntry, ...] = ()
    delegation_token: str = ""
    FIELDS: ClassVar = (
        _f(1, "segments", "message", repeated=True, message=SegmentEntry),
        _f(2, "delegation_token", "string"),
    )


@attrs.frozen
class ExistsResponse(Message):
    exists: bool = False
    FIELDS: ClassVar = (_f(1, "exists", "bool"),)


@attrs.frozen
class SegmentValidityResponse(Message):
    response: bool = False
    FIELDS: ClassVar = (_f(1, "response", "bool"),)


@attrs.frozen
class DelegationToken(Message):
    delegation_token: str = ""
    FIELDS: ClassVar = (_f(1, "delegation_token", "string"),)


@attrs.frozen
class ContinuationToken(Message):
    token: str = ""
    FIELDS: ClassVar = (_f(1, "token", "string"),)


@attrs.frozen
class ScopesRequest(Message):
    continuation_token: ContinuationToken | None = None
    FIELDS: ClassVar = (_f(1, "continuation_token", "message", message=ContinuationToken),)


@attrs.frozen
class ScopesResponse(Message):
    scopes: tuple[str, ...] = ()
    continuation_token: ContinuationToken | None = None
    FIELDS: ClassVar = (
        _f(1, "scopes", "string", repeated=True),
        _f(2, "continuation_token", "message", message=ContinuationToken),
    )


@attrs.frozen
class StreamsInScopeRequest(Message):
    scope: ScopeInfo | None = None
    continuation_token: ContinuationToken | None = None
    FIELDS: ClassVar = (
        _f(1, "scope", "message", message=ScopeInfo),
        _f(2, "continuation_token", "message", message=ContinuationToken),
    )


@attrs.frozen
class StreamsInScopeResponse(Message):
    streams: tuple[StreamInfo, ...] = ()
    continuation_token: ContinuationToken | None = None
    status: int = 0  # SUCCESS 0, FAILURE 1, SCOPE_NOT_FOUND 2
    FIELDS: ClassVar = (
        _f(1, "streams", "message", repeated=True, message=StreamInfo),
        _f(2, "continuation_token", "message", message=ContinuationToken),
        _f(3, "status", "enum"),
    )


@attrs.frozen
class Int64Entry(Message):
    """One entry of a ``map<int64, int64>`` (maps are repeated key/value messages)."""

    key: int = 0
    value: int = 0
    FIELDS: ClassVar = (_f(1, "key", "int64"), _f(2, "value", "int64"))


@attrs.frozen
class StreamCut(Message):
    stream_info: StreamInfo | None = None
    cut: tuple[Int64Entry, ...] = ()
    FIELDS: ClassVar = (
        _f(1, "stream_info", "message", message=StreamInfo),
        _f(2, "cut", "message", repeated=True, message=Int64Entry),
    )


# --------------------------------------------------------------------------- status enums


class CreateScopeStatus(IntEnum):
    SUCCESS = 0
    FAILURE = 1
    SCOPE_EXISTS = 2
    INVALID_SCOPE_NAME = 3


class DeleteScopeStatus(IntEnum):
    SUCCESS = 0
    FAILURE = 1
    SCOPE_NOT_FOUND = 2
    SCOPE_NOT_EMPTY = 3


class CreateStreamStatus(IntEnum):
    SUCCESS = 0
    FAILURE = 1
    STREAM_EXISTS = 2
    SCOPE_NOT_FOUND = 3
    INVALID_STREAM_NAME = 4


class UpdateStreamStatus(IntEnum):
    SUCCESS = 0
    FAILURE = 1
    STREAM_NOT_FOUND = 2
    SCOPE_NOT_FOUND = 3


class DeleteStreamStatus(IntEnum):
    SUCCESS = 0
    FAILURE = 1
    STREAM_NOT_FOUND = 2
    STREAM_NOT_SEALED = 3


class StreamsInScopeStatus(IntEnum):
    SUCCESS = 0
    FAILURE = 1
    SCOPE_NOT_FOUND = 2
