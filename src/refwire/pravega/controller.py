"""A minimal Pravega controller: scopes, streams and segment lookup over gRPC
(the controller API calls a client makes), enough for the real ``pravega`` PyPI client.

The controller keeps scopes and streams (configuration, segments with epoch and
key ranges tiling [0, 1), sealed flag, truncation cut) in memory and, with
``state_path``, in a small JSON file rewritten atomically after every change.
It drives the segment store through :class:`SegmentAdmin` (create the stream's
segments, seal them, delete them) and answers every ``getURI`` with the one
segment-store address it was given -- user segments, ``<rg>_kvtable`` table
segments and ``_system`` segments alike.

Segment names are ``scope/stream/<number>.#epoch.<epoch>`` and segment ids
``epoch << 32 | number``, as in Pravega.  Streams never scale here: every
segment is in epoch 0, successors are always empty.

RPCs answered (``/io.pravega.controller.stream.api.grpc.v1.ControllerService/…``):
createScope, checkScopeExists, listScopes, deleteScope, createStream,
checkStreamExists, listStreamsInScope, getStreamConfiguration, updateStream,
truncateStream, sealStream, deleteStream, getCurrentSegments, getEpochSegments,
getSegments, getURI, getSegmentsImmediatelyFollowing (and the deprecated
misspelt alias), isSegmentValid, getDelegationToken, getControllerServerList.
Everything else answers UNIMPLEMENTED.
"""

from __future__ import annotations

import collections
import logging
import os
import pathlib
import re
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import attrs
import orjson
import trio

from ..drivers import StreamServer
from . import _protobuf as pb
from ._grpc import (
    DEFAULT_GRPC_LIMITS,
    GrpcLimits,
    GrpcServerConnection,
    GrpcStatus,
    UnaryHandler,
    serve_grpc_connection,
)
from .errors import GrpcError

__all__ = ["SERVICE", "PravegaController", "SegmentAdmin", "segment_id", "segment_name"]

log = logging.getLogger("refwire.pravega.controller")

SERVICE: Final = "io.pravega.controller.stream.api.grpc.v1.ControllerService"
_STATE_VERSION: Final = 1
#: Pravega's NameUtils: user scope and stream names are ``[\p{Alnum}.-]+``; internal streams start with ``_``.
_NAME_RE: Final = re.compile(r"_?[A-Za-z0-9.\-]+")
_MAX_NAME: Final = 255
_MAX_SEGMENTS: Final = 1000
_PAGE: Final = 100


class SegmentAdmin(Protocol):
    """What the controller needs from the segment store (the lead implements it)."""

    def create_segment(self, name: str) -> bool: ...  # True if created, False if it already existed

    def seal_segment(self, name: str) -> bool: ...  # False if missing

    def delete_segment(self, name: str) -> bool: ...  # False if missing

    def segment_info(self, name: str) -> tuple[int, int, bool] | None: ...  # (start_offset, length, sealed)


def segment_id(number: int, epoch: int) -> int:
    return epoch << 32 | number


def segment_name(scope: str, stream: str, number: int, epoch: int) -> str:
    return f"{scope}/{stream}/{number}.#epoch.{epoch}"


@attrs.define
class _Segment:
    number: int
    epoch: int
    min_key: float
    max_key: float

    @property
    def id(self) -> int:
        return segment_id(self.number, self.epoch)


@attrs.define
class _Stream:
    scaling: pb.ScalingPolicy
    retention: pb.RetentionPolicy
    tags: tuple[str, ...]
    segments: list[_Segment]
    sealed: bool = False
    #: truncation stream cut recorded by truncateStream: segment id -> offset.
    cut: dict[int, int] = attrs.field(factory=dict)


def _valid_name(name: str) -> bool:
    return 0 < len(name) <= _MAX_NAME and _NAME_RE.fullmatch(name) is not None


class PravegaController:
    """The controller service; ``await nursery.start(ctl.serve, listeners)`` serves it.

    ``segment_store`` is the ``(host, port)`` every ``getURI`` answers; it may be
    reassigned before clients ask (e.g. once the store's port is known).
    ``calls`` records the method names called, most recent last.
    """

    def __init__(
        self,
        admin: SegmentAdmin,
        segment_store: tuple[str, int],
        *,
        state_path: pathlib.Path | None = None,
        limits: GrpcLimits = DEFAULT_GRPC_LIMITS,
    ) -> None:
        self.admin = admin
        self.segment_store = segment_store
        self.state_path = state_path
        self.limits = limits
        self.calls: collections.deque[str] = collections.deque(maxlen=10_000)
        self._scopes: dict[str, dict[str, _Stream]] = {}
        self._listeners: Sequence[trio.abc.Listener[Any]] = ()
        self._server: StreamServer | None = None
        if state_path is not None and state_path.exists():
            self._load(state_path)
        self.handlers: dict[str, UnaryHandler] = {f"/{SERVICE}/{name}": fn for name, fn in self._methods().items()}

    # -- serving --------------------------------------------------------------
    async def serve(
        self,
        listeners: Sequence[trio.abc.Listener[Any]],
        *,
        task_status: trio.TaskStatus[Sequence[trio.abc.Listener[Any]]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve gRPC (h2c) on ``listeners`` until :meth:`shutdown`."""
        self._listeners = listeners
        self._server = StreamServer(self._handle_connection, name="pravega-controller")
        await self._server.serve(listeners, task_status=task_status)

    async def shutdown(self, grace: float = 5.0) -> None:
        """Stop accepting; each connection finishes its answers in flight, sends GOAWAY and closes."""
        if self._server is not None:
            await self._server.shutdown(grace)

    async def _handle_connection(self, stream: trio.abc.Stream) -> None:
        assert self._server is not None
        conn = GrpcServerConnection(self.handlers, limits=self.limits, on_call=self._record_call)
        await serve_grpc_connection(stream, conn, closing=self._server.closing)

    def _record_call(self, path: str) -> None:
        name = path.rsplit("/", 1)[-1]
        self.calls.append(name)
        log.debug("controller: %s", name)

    # -- persistence -----------------------------------------------------------
    def _to_json(self) -> dict[str, Any]:
        scopes: dict[str, Any] = {}
        for scope, streams in self._scopes.items():
            scopes[scope] = {
                name: {
                    "scaling": attrs.asdict(st.scaling),
                    "retention": attrs.asdict(st.retention),
                    "tags": list(st.tags),
                    "segments": [attrs.asdict(seg) for seg in st.segments],
                    "sealed": st.sealed,
                    "cut": {str(k): v for k, v in st.cut.items()},
                }
                for name, st in streams.items()
            }
        return {"version": _STATE_VERSION, "scopes": scopes}

    def _load(self, path: pathlib.Path) -> None:
        try:
            doc = orjson.loads(path.read_bytes())
            if doc.get("version") != _STATE_VERSION:
                raise ValueError(f"unknown state version {doc.get('version')!r}")
            for scope, streams in doc["scopes"].items():
                self._scopes[scope] = {
                    name: _Stream(
                        scaling=pb.ScalingPolicy(**st["scaling"]),
                        retention=pb.RetentionPolicy(**st["retention"]),
                        tags=tuple(st["tags"]),
                        segments=[_Segment(**seg) for seg in st["segments"]],
                        sealed=bool(st["sealed"]),
                        cut={int(k): int(v) for k, v in st["cut"].items()},
                    )
                    for name, st in streams.items()
                }
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"cannot load the controller state from {path}: {exc}") from exc

    def _save(self) -> None:
        """Rewrite the state file atomically (temporary file, fsync, rename, fsync the directory)."""
        if self.state_path is None:
            return
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(orjson.dumps(self._to_json(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_path)
        dir_fd = os.open(self.state_path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    # -- helpers ----------------------------------------------------------------
    @staticmethod
    def _stream_key(info: pb.StreamInfo | None) -> tuple[str, str]:
        if info is None:
            raise GrpcError(GrpcStatus.INVALID_ARGUMENT, "streamInfo is missing")
        return info.scope, info.stream

    def _find(self, info: pb.StreamInfo | None) -> tuple[str, str, _Stream]:
        scope, name = self._stream_key(info)
        stream = self._scopes.get(scope, {}).get(name)
        if stream is None:
            raise GrpcError(GrpcStatus.NOT_FOUND, f"stream {scope}/{name} does not exist")
        return scope, name, stream

    def _ranges(self, scope: str, name: str, segments: Sequence[_Segment]) -> pb.SegmentRanges:
        info = pb.StreamInfo(scope, name)
        return pb.SegmentRanges(
            tuple(pb.SegmentRange(pb.SegmentId(info, seg.id), seg.min_key, seg.max_key) for seg in segments), ""
        )

    def _config(self, scope: str, name: str, st: _Stream) -> pb.StreamConfig:
        return pb.StreamConfig(pb.StreamInfo(scope, name), st.scaling, st.retention, pb.Tags(st.tags))

    # -- RPCs ---------------------------------------------------------------------
    def _methods(self) -> dict[str, Callable[[bytes], bytes]]:
        return {
            "createScope": self.create_scope,
            "checkScopeExists": self.check_scope_exists,
            "listScopes": self.list_scopes,
            "deleteScope": self.delete_scope,
            "createStream": self.create_stream,
            "checkStreamExists": self.check_stream_exists,
            "listStreamsInScope": self.list_streams_in_scope,
            "getStreamConfiguration": self.get_stream_configuration,
            "updateStream": self.update_stream,
            "truncateStream": self.truncate_stream,
            "sealStream": self.seal_stream,
            "deleteStream": self.delete_stream,
            "getCurrentSegments": self.get_current_segments,
            "getEpochSegments": self.get_epoch_segments,
            "getSegments": self.get_segments,
            "getURI": self.get_uri,
            "getSegmentsImmediatelyFollowing": self.get_successors,
            "getSegmentsImmediatlyFollowing": self.get_successors,  # the deprecated misspelling
            "isSegmentValid": self.is_segment_valid,
            "getDelegationToken": self.get_delegation_token,
            "getControllerServerList": self.get_controller_server_list,
        }

    def create_scope(self, request: bytes) -> bytes:
        scope = pb.ScopeInfo.decode(request).scope
        if not _valid_name(scope) or scope.startswith("_"):
            status = pb.CreateScopeStatus.INVALID_SCOPE_NAME
        elif scope in self._scopes:
            status = pb.CreateScopeStatus.SCOPE_EXISTS
        else:
            self._scopes[scope] = {}
            self._save()
            status = pb.CreateScopeStatus.SUCCESS
        return pb.StatusResponse(status).encode()

    def check_scope_exists(self, request: bytes) -> bytes:
        return pb.ExistsResponse(pb.ScopeInfo.decode(request).scope in self._scopes).encode()

    def list_scopes(self, request: bytes) -> bytes:
        """Pages of up to 100 names in sorted order; the token is the last name
        returned, and an empty page ends the listing (as the Rust client expects)."""
        req = pb.ScopesRequest.decode(request)
        after = req.continuation_token.token if req.continuation_token else ""
        page = [s for s in sorted(self._scopes) if s > after][:_PAGE]
        token = page[-1] if page else after
        return pb.ScopesResponse(tuple(page), pb.ContinuationToken(token)).encode()

    def delete_scope(self, request: bytes) -> bytes:
        scope = pb.ScopeInfo.decode(request).scope
        if scope not in self._scopes:
            status = pb.DeleteScopeStatus.SCOPE_NOT_FOUND
        elif self._scopes[scope]:
            status = pb.DeleteScopeStatus.SCOPE_NOT_EMPTY
        else:
            del self._scopes[scope]
            self._save()
            status = pb.DeleteScopeStatus.SUCCESS
        return pb.StatusResponse(status).encode()

    def create_stream(self, request: bytes) -> bytes:
        config = pb.StreamConfig.decode(request)
        scope, name = self._stream_key(config.stream_info)
        scaling = config.scaling_policy or pb.ScalingPolicy()
        n = scaling.min_num_segments or 1  # proto3: absent = 0; Pravega's default is 1
        if not _valid_name(name):
            status = pb.CreateStreamStatus.INVALID_STREAM_NAME
        elif scope not in self._scopes:
            status = pb.CreateStreamStatus.SCOPE_NOT_FOUND
        elif name in self._scopes[scope]:
            status = pb.CreateStreamStatus.STREAM_EXISTS
        elif not 1 <= n <= _MAX_SEGMENTS:
            status = pb.CreateStreamStatus.FAILURE
        else:
            # key ranges tile [0, 1): segment i owns [i/n, (i+1)/n), the last ends exactly at 1.0
            segments = [_Segment(i, 0, i / n, 1.0 if i == n - 1 else (i + 1) / n) for i in range(n)]
            for seg in segments:
                self.admin.create_segment(segment_name(scope, name, seg.number, seg.epoch))
            self._scopes[scope][name] = _Stream(
                scaling=attrs.evolve(scaling, min_num_segments=n),
                retention=config.retention_policy or pb.RetentionPolicy(),
                tags=config.tags.tag if config.tags else (),
                segments=segments,
            )
            self._save()
            status = pb.CreateStreamStatus.SUCCESS
        return pb.StatusResponse(status).encode()

    def check_stream_exists(self, request: bytes) -> bytes:
        scope, name = self._stream_key(pb.StreamInfo.decode(request))
        return pb.ExistsResponse(name in self._scopes.get(scope, {})).encode()

    def list_streams_in_scope(self, request: bytes) -> bytes:
        req = pb.StreamsInScopeRequest.decode(request)
        scope = req.scope.scope if req.scope else ""
        if scope not in self._scopes:
            return pb.StreamsInScopeResponse(status=pb.StreamsInScopeStatus.SCOPE_NOT_FOUND).encode()
        after = req.continuation_token.token if req.continuation_token else ""
        page = [s for s in sorted(self._scopes[scope]) if s > after][:_PAGE]
        token = page[-1] if page else after
        streams = tuple(pb.StreamInfo(scope, s) for s in page)
        return pb.StreamsInScopeResponse(streams, pb.ContinuationToken(token), pb.StreamsInScopeStatus.SUCCESS).encode()

    def get_stream_configuration(self, request: bytes) -> bytes:
        scope, name, st = self._find(pb.StreamInfo.decode(request))
        return self._config(scope, name, st).encode()

    def _update_status(self, info: pb.StreamInfo | None) -> tuple[int, _Stream | None]:
        scope, name = self._stream_key(info)
        if scope not in self._scopes:
            return pb.UpdateStreamStatus.SCOPE_NOT_FOUND, None
        st = self._scopes[scope].get(name)
        if st is None:
            return pb.UpdateStreamStatus.STREAM_NOT_FOUND, None
        return pb.UpdateStreamStatus.SUCCESS, st

    def update_stream(self, request: bytes) -> bytes:
        """Minimal: records the new policies and tags; never rescales (the
        segment count stays as created).  A sealed stream cannot be updated."""
        config = pb.StreamConfig.decode(request)
        status, st = self._update_status(config.stream_info)
        if st is not None:
            if st.sealed:
                status = pb.UpdateStreamStatus.FAILURE
            else:
                if config.scaling_policy is not None:
                    st.scaling = attrs.evolve(config.scaling_policy, min_num_segments=len(st.segments))
                if config.retention_policy is not None:
                    st.retention = config.retention_policy
                st.tags = config.tags.tag if config.tags else ()
                self._save()
        return pb.StatusResponse(status).encode()

    def truncate_stream(self, request: bytes) -> bytes:
        """Records the cut (segment id -> offset); ``getSegments`` then starts
        readers there.  The segments' bytes are not truncated: SegmentAdmin has
        no truncate operation.  A cut naming a segment the stream does not
        have, or a negative offset, fails."""
        cut = pb.StreamCut.decode(request)
        status, st = self._update_status(cut.stream_info)
        if st is not None:
            ids = {seg.id for seg in st.segments}
            entries = {e.key: e.value for e in cut.cut}
            if any(k not in ids or v < 0 for k, v in entries.items()):
                status = pb.UpdateStreamStatus.FAILURE
            else:
                for k, v in entries.items():
                    st.cut[k] = max(st.cut.get(k, 0), v)
                self._save()
        return pb.StatusResponse(status).encode()

    def seal_stream(self, request: bytes) -> bytes:
        scope, name = self._stream_key(pb.StreamInfo.decode(request))
        status, st = self._update_status(pb.StreamInfo(scope, name))
        if st is not None and not st.sealed:
            for seg in st.segments:
                self.admin.seal_segment(segment_name(scope, name, seg.number, seg.epoch))
            st.sealed = True
            self._save()
        return pb.StatusResponse(status).encode()

    def delete_stream(self, request: bytes) -> bytes:
        scope, name = self._stream_key(pb.StreamInfo.decode(request))
        st = self._scopes.get(scope, {}).get(name)
        if st is None:
            status = pb.DeleteStreamStatus.STREAM_NOT_FOUND
        elif not st.sealed:
            status = pb.DeleteStreamStatus.STREAM_NOT_SEALED
        else:
            for seg in st.segments:
                self.admin.delete_segment(segment_name(scope, name, seg.number, seg.epoch))
            del self._scopes[scope][name]
            self._save()
            status = pb.DeleteStreamStatus.SUCCESS
        return pb.StatusResponse(status).encode()

    def get_current_segments(self, request: bytes) -> bytes:
        """The active segments; a sealed stream has none (as Pravega answers)."""
        scope, name, st = self._find(pb.StreamInfo.decode(request))
        return self._ranges(scope, name, [] if st.sealed else st.segments).encode()

    def get_epoch_segments(self, request: bytes) -> bytes:
        req = pb.GetEpochSegmentsRequest.decode(request)
        scope, name, st = self._find(req.stream_info)
        if req.epoch != 0:
            raise GrpcError(GrpcStatus.NOT_FOUND, f"stream {scope}/{name} has no epoch {req.epoch}")
        return self._ranges(scope, name, st.segments).encode()

    def get_segments(self, request: bytes) -> bytes:
        """Segments at a time: with no scaling these are always the head
        segments, each at max(start offset in the store, recorded cut)."""
        req = pb.GetSegmentsRequest.decode(request)
        scope, name, st = self._find(req.stream_info)
        info = pb.StreamInfo(scope, name)
        locations = []
        for seg in st.segments:
            stored = self.admin.segment_info(segment_name(scope, name, seg.number, seg.epoch))
            offset = max(stored[0] if stored else 0, st.cut.get(seg.id, 0))
            locations.append(pb.SegmentLocation(pb.SegmentId(info, seg.id), offset))
        return pb.SegmentsAtTime(tuple(locations), "").encode()

    def get_uri(self, request: bytes) -> bytes:
        pb.SegmentId.decode(request)  # validated; every segment lives in the one store
        host, port = self.segment_store
        return pb.NodeUri(host, port).encode()

    def get_successors(self, request: bytes) -> bytes:
        pb.SegmentId.decode(request)
        return pb.SuccessorResponse((), "").encode()  # streams never scale here

    def is_segment_valid(self, request: bytes) -> bytes:
        """True while the segment belongs to an existing, unsealed stream."""
        req = pb.SegmentId.decode(request)
        scope, name = self._stream_key(req.stream_info)
        st = self._scopes.get(scope, {}).get(name)
        valid = st is not None and not st.sealed and any(seg.id == req.segment_id for seg in st.segments)
        return pb.SegmentValidityResponse(valid).encode()

    def get_delegation_token(self, request: bytes) -> bytes:
        pb.StreamInfo.decode(request)
        return pb.DelegationToken("").encode()  # no auth

    def get_controller_server_list(self, request: bytes) -> bytes:
        pb.ServerRequest.decode(request)
        uris = []
        for listener in self._listeners:
            sock = getattr(listener, "socket", None)
            if sock is not None:
                host, port = sock.getsockname()[:2]
                uris.append(pb.NodeUri(host, port))
        return pb.ServerResponse(tuple(uris)).encode()
