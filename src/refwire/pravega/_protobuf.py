"""The Pravega controller's protobuf messages (the controller API, ``package
io.pravega.controller.stream.api.grpc.v1``), described in code from their field
numbers and checked against the published proto for the enum values.

The wire format is the ``protobuf`` runtime's: the message classes below are
small frozen attrs classes listing their fields (``FIELDS``); from those lists a
``FileDescriptorProto`` is built once, at first use, into a private descriptor
pool, and :meth:`Message.encode` / :meth:`Message.decode` go through the
runtime's message classes for it (no ``protoc`` step, no generated files).
Decoding checks refwire's limits (:data:`DEFAULT_LIMITS`: the encoded size
before parsing, string sizes and nesting depth after) and turns every failure
into a :class:`~refwire.errors.LocalProtocolError` (protocol
``pravega-controller``) naming the message; the runtime does not say which
field or byte was wrong, so ``field`` is ``(message)`` and ``offset`` 0 (the
message's start) unless a refwire check names better.
"""

from __future__ import annotations

import functools
from enum import IntEnum
from typing import Any, ClassVar, Final, Literal, Self, TypeVar

import attrs

from ..errors import LimitExceeded, LocalProtocolError
from ..wire import Limits

__all__ = [
    "DEFAULT_LIMITS",
    "PROTOCOL",
    "M",
    "Message",
    "ProtoField",
    "decode_message",
    "encode_message",
]

PROTOCOL: Final = "pravega-controller"
#: The proto package of the controller API.
PACKAGE: Final = "io.pravega.controller.stream.api.grpc.v1"

#: 4 MiB messages (gRPC's default receive limit), nesting up to 32 messages deep.
DEFAULT_LIMITS: Final = Limits(max_frame_size=4 * 1024 * 1024, max_string_size=1024 * 1024, max_nesting_depth=32)

Kind = Literal["int32", "int64", "bool", "enum", "string", "bytes", "double", "message"]


@attrs.frozen
class ProtoField:
    """One field of a message: its number, attribute name, kind and (for
    ``message``) the class of the embedded message."""

    number: int
    name: str
    kind: Kind
    repeated: bool = False
    message: type[Message] | None = None


class Message:
    """Base of the message classes: frozen attrs classes that list their
    :class:`ProtoField` s in ``FIELDS`` (attribute names equal field names).
    Repeated fields are tuples; an absent embedded message is None."""

    FIELDS: ClassVar[tuple[ProtoField, ...]] = ()

    def encode(self) -> bytes:
        return encode_message(self)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, *, limits: Limits = DEFAULT_LIMITS) -> Self:
        return decode_message(cls, data, limits=limits)


M = TypeVar("M", bound=Message)


# --------------------------------------------------------------------------- the runtime bridge


def _error(reason: str, msg: type[Message], field: str = "(message)") -> LocalProtocolError:
    return LocalProtocolError(reason, protocol=PROTOCOL, frame=msg.__name__, field=field, offset=0)


@functools.cache
def _runtime() -> dict[type[Message], Any]:
    """The runtime message class of every :class:`Message` subclass, from one
    ``FileDescriptorProto`` built from their ``FIELDS`` (enums travel as int32:
    the same varint on the wire, and proto3 enums are open anyway)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    types = {
        "int32": F.TYPE_INT32,
        "enum": F.TYPE_INT32,
        "int64": F.TYPE_INT64,
        "bool": F.TYPE_BOOL,
        "string": F.TYPE_STRING,
        "bytes": F.TYPE_BYTES,
        "double": F.TYPE_DOUBLE,
        "message": F.TYPE_MESSAGE,
    }
    # The module's own classes (attrs replaces each decorated class, so __subclasses__ would see both).
    classes = [v for v in globals().values() if isinstance(v, type) and issubclass(v, Message) and v is not Message]
    fdp = descriptor_pb2.FileDescriptorProto(name="refwire_pravega_controller.proto", package=PACKAGE, syntax="proto3")
    for cls in sorted(classes, key=lambda c: c.__name__):
        mt = fdp.message_type.add(name=cls.__name__)
        for f in cls.FIELDS:
            fd = mt.field.add(name=f.name, number=f.number, type=types[f.kind])
            fd.label = F.LABEL_REPEATED if f.repeated else F.LABEL_OPTIONAL
            if f.kind == "message":
                assert f.message is not None
                fd.type_name = f".{PACKAGE}.{f.message.__name__}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {cls: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{cls.__name__}")) for cls in classes}


def _to_runtime(msg: Message, runtime: dict[type[Message], Any]) -> Any:
    out = runtime[type(msg)]()
    for f in msg.FIELDS:
        value = getattr(msg, f.name)
        try:
            if f.kind == "message":
                if f.repeated:
                    getattr(out, f.name).extend(_to_runtime(v, runtime) for v in value)
                elif value is not None:
                    getattr(out, f.name).CopyFrom(_to_runtime(value, runtime))
            elif f.repeated:
                getattr(out, f.name).extend(value)
            else:
                setattr(out, f.name, value)
        except (ValueError, TypeError) as exc:
            raise LocalProtocolError(
                f"value {value!r} does not fit in {f.kind}: {exc}", protocol=PROTOCOL, frame=type(msg).__name__, field=f.name
            ) from None
    return out


def _from_runtime(cls: type[M], obj: Any, limits: Limits, depth: int) -> M:
    if depth > limits.max_nesting_depth:
        raise _error(f"messages nested deeper than max_nesting_depth={limits.max_nesting_depth}", cls)
    kw: dict[str, Any] = {}
    for f in cls.FIELDS:
        value = getattr(obj, f.name)
        if f.kind == "message":
            assert f.message is not None
            if f.repeated:
                kw[f.name] = tuple(_from_runtime(f.message, v, limits, depth + 1) for v in value)
            else:
                kw[f.name] = _from_runtime(f.message, value, limits, depth + 1) if obj.HasField(f.name) else None
            continue
        for v in value if f.repeated else (value,):
            if f.kind in ("string", "bytes") and len(v) > limits.max_string_size:
                raise LimitExceeded(
                    f"{f.kind} of {len(v)} > max_string_size={limits.max_string_size}",
                    protocol=PROTOCOL,
                    frame=cls.__name__,
                    field=f.name,
                    offset=0,
                )
        kw[f.name] = tuple(value) if f.repeated else value
    return cls(**kw)


def encode_message(msg: Message) -> bytes:
    """``msg`` in protobuf's wire format (deterministic: the same message, the same bytes)."""
    data: bytes = _to_runtime(msg, _runtime()).SerializeToString(deterministic=True)
    return data


def decode_message(cls: type[M], data: bytes | bytearray | memoryview, *, limits: Limits = DEFAULT_LIMITS) -> M:
    """One ``cls`` from ``data``: the size is checked against ``limits`` first;
    any malformed input is a :class:`~refwire.errors.LocalProtocolError`."""
    if len(data) > limits.max_frame_size:
        raise LimitExceeded(
            f"message of {len(data)} bytes > max_frame_size={limits.max_frame_size}",
            protocol=PROTOCOL,
            frame=cls.__name__,
            field="(message)",
            offset=0,
        )
    from google.protobuf.message import DecodeError

    try:
        obj = _runtime()[cls].FromString(bytes(data))
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise _error(f"not a valid {cls.__name__}: {exc}", cls) from None
    return _from_runtime(cls, obj, limits, 1)


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
