"""The minimal Pravega controller (the controller API calls a client makes): the protobuf
codec, the h2c gRPC plumbing driven by an h2 client in the test, the RPC
semantics, persistence, and the real ``pravega`` client as a peer."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from refwire.errors import LimitExceeded, LocalProtocolError
from refwire.pravega import _protobuf as pb
from refwire.pravega._grpc import GrpcLimits, grpc_frame, percent_encode
from refwire.pravega.controller import SERVICE, PravegaController, segment_id
from refwire.wire import Limits

# --------------------------------------------------------------------------- fakes and helpers


class FakeAdmin:
    """In-memory SegmentAdmin: name -> [start_offset, length, sealed]."""

    def __init__(self) -> None:
        self.segments: dict[str, list[Any]] = {}

    def create_segment(self, name: str) -> bool:
        if name in self.segments:
            return False
        self.segments[name] = [0, 0, False]
        return True

    def seal_segment(self, name: str) -> bool:
        if name not in self.segments:
            return False
        self.segments[name][2] = True
        return True

    def delete_segment(self, name: str) -> bool:
        return self.segments.pop(name, None) is not None

    def segment_info(self, name: str) -> tuple[int, int, bool] | None:
        s = self.segments.get(name)
        return None if s is None else (s[0], s[1], s[2])


@attrs.define
class Reply:
    headers: dict[bytes, bytes] = attrs.field(factory=dict)
    data: bytearray = attrs.field(factory=bytearray)
    trailers: dict[bytes, bytes] = attrs.field(factory=dict)
    ended: bool = False
    reset: bool = False

    @property
    def grpc_status(self) -> int:
        return int((self.trailers or self.headers)[b"grpc-status"])

    @property
    def grpc_message(self) -> str:
        return (self.trailers or self.headers).get(b"grpc-message", b"").decode()

    def message(self) -> bytes:
        assert self.data[0] == 0 and int.from_bytes(self.data[1:5], "big") == len(self.data) - 5
        return bytes(self.data[5:])


class H2Client:
    """A plain h2 client over a trio stream, enough to make unary gRPC calls."""

    def __init__(self, stream: trio.abc.Stream, settings: dict[h2.settings.SettingCodes, int] | None = None) -> None:
        self.stream = stream
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        if settings:
            self.conn.local_settings = h2.settings.Settings(client=True, initial_values=settings)
        self.conn.initiate_connection()
        self.replies: dict[int, Reply] = {}
        self.events: list[h2.events.Event] = []

    async def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            await self.stream.send_all(data)

    def start(
        self,
        method: str,
        body: bytes,
        *,
        path: str | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
        end: bool = True,
    ) -> int:
        sid = self.conn.get_next_available_stream_id()
        hdrs = headers or [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", (path or f"/{SERVICE}/{method}").encode()),
            (b":authority", b"127.0.0.1"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]
        self.conn.send_headers(sid, hdrs)
        self.conn.send_data(sid, body, end_stream=end)
        self.replies[sid] = Reply()
        return sid

    async def pump(self, until: Any) -> None:
        await self.flush()
        with trio.fail_after(5):
            while not until():
                data = await self.stream.receive_some(65536)
                if not data:
                    raise EOFError("server closed the connection")
                for ev in self.conn.receive_data(data):
                    self.events.append(ev)
                    sid = getattr(ev, "stream_id", None)
                    reply = self.replies.get(sid) if sid else None
                    if isinstance(ev, h2.events.ResponseReceived) and reply:
                        reply.headers = dict(ev.headers or [])
                    elif isinstance(ev, h2.events.DataReceived) and reply:
                        reply.data += ev.data or b""
                        self.conn.acknowledge_received_data(ev.flow_controlled_length or 0, ev.stream_id or 0)
                    elif isinstance(ev, h2.events.TrailersReceived) and reply:
                        reply.trailers = dict(ev.headers or [])
                    elif isinstance(ev, h2.events.StreamEnded) and reply:
                        reply.ended = True
                    elif isinstance(ev, h2.events.StreamReset) and reply:
                        reply.reset = True
                await self.flush()

    async def call(self, method: str, request: pb.Message | bytes, **kw: Any) -> Reply:
        body = grpc_frame(request if isinstance(request, bytes) else request.encode())
        sid = self.start(method, body, **kw)
        await self.pump(lambda: self.replies[sid].ended)
        return self.replies[sid]

    async def ok(self, method: str, request: pb.Message, reply_type: type[pb.M]) -> pb.M:
        reply = await self.call(method, request)
        assert reply.headers[b":status"] == b"200", reply
        assert reply.grpc_status == 0, reply
        return reply_type.decode(reply.message())


@asynccontextmanager
async def running(ctl: PravegaController) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(ctl.serve, listeners)
        try:
            yield listeners[0].socket.getsockname()[1]
        finally:
            with trio.fail_after(5):
                await ctl.shutdown(1.0)


@asynccontextmanager
async def client(port: int, settings: dict[h2.settings.SettingCodes, int] | None = None) -> AsyncIterator[H2Client]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        yield H2Client(stream, settings)
    finally:
        await trio.aclose_forcefully(stream)


STORE = ("127.0.0.1", 12345)
SI = pb.StreamInfo("sc", "st")


# --------------------------------------------------------------------------- protobuf codec

SAMPLES: list[pb.Message] = [
    pb.ScopeInfo("sc"),
    pb.StreamInfo("sc", "st", 5),
    pb.StreamConfig(SI, pb.ScalingPolicy(0, 0, 0, 3), pb.RetentionPolicy(0, 0, (1 << 63) - 1), pb.Tags(("a", "b"))),
    pb.StatusResponse(2),
    pb.SegmentRanges((pb.SegmentRange(pb.SegmentId(SI, 1 << 32 | 7), 0.25, 0.5),), "tok"),
    pb.NodeUri("127.0.0.1", 6000),
    pb.SegmentsAtTime((pb.SegmentLocation(pb.SegmentId(SI, 3), 1 << 40),), ""),
    pb.SuccessorResponse((pb.SegmentEntry(pb.SegmentRange(pb.SegmentId(SI, 4), 0.0, 1.0), (0, -1, 1 << 62)),), ""),
    pb.ExistsResponse(True),
    pb.ScopesResponse(("a", "é", "😀"), pb.ContinuationToken("a")),
    pb.StreamCut(SI, (pb.Int64Entry(1, 2), pb.Int64Entry(-5, 0))),
    pb.GetEpochSegmentsRequest(SI, -3),
    pb.ScalingPolicy(scale_type=-1, target_rate=(1 << 31) - 1, scale_factor=-(1 << 31)),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_protobuf_round_trip(msg: pb.Message) -> None:
    assert type(msg).decode(msg.encode()) == msg


def test_protobuf_known_bytes() -> None:
    # hand-derived proto3 encodings (tag = number << 3 | wire type)
    assert pb.ScopeInfo("sc").encode() == bytes.fromhex("0a027363")
    assert pb.NodeUri("h", 300).encode() == bytes.fromhex("0a016810ac02")
    assert pb.StatusResponse(-1).encode() == bytes.fromhex("08ffffffffffffffffff01")  # int32 -1 sign-extended
    assert pb.StatusResponse(0).encode() == b""  # defaults are omitted
    assert pb.SegmentRange(None, 0.0, 1.0).encode() == bytes.fromhex("19000000000000f03f")
    assert pb.SegmentEntry(None, (1, 2)).encode() == bytes.fromhex("12020102")  # packed
    assert pb.SegmentEntry.decode(bytes.fromhex("10011002")).value == (1, 2)  # unpacked also accepted


def test_protobuf_skips_unknown_fields_and_defaults() -> None:
    unknown = (
        bytes.fromhex("f807 2a")
        + bytes.fromhex("f907 0102030405060708")
        + bytes.fromhex("fa07 03616263")
        + bytes.fromhex("fd07 01020304")
    )
    assert pb.NodeUri.decode(unknown + pb.NodeUri("x", 1).encode()) == pb.NodeUri("x", 1)
    assert pb.StreamConfig.decode(b"") == pb.StreamConfig()
    assert pb.ScopeInfo.decode(bytes.fromhex("0a0161 0a0162")).scope == "b"  # last one wins


@pytest.mark.parametrize(
    ("data", "cls"),
    [
        ("08", pb.StatusResponse),  # truncated varint
        ("0880", pb.StatusResponse),
        ("08" + "ff" * 10 + "01", pb.StatusResponse),  # a varint longer than 10 bytes
        ("80", pb.StatusResponse),  # truncated tag
        ("0a05616263", pb.ScopeInfo),  # a string cut short
        ("0a8080808010", pb.ScopeInfo),  # a 4 GiB string length in 6 bytes: refused, nothing allocated
        ("19000000", pb.SegmentRange),  # a double needs 8 bytes
        ("0b", pb.NodeUri),  # a group (wire type 3)
        ("f30700", pb.NodeUri),
        ("0700", pb.NodeUri),  # field number 0
        ("0a02ff61", pb.ScopeInfo),  # invalid UTF-8 in a proto3 string
        ("0a030a0561", pb.SegmentId),  # an embedded message cut short
    ],
)
def test_protobuf_hostile(data: str, cls: type[pb.Message]) -> None:
    with pytest.raises(LocalProtocolError) as info:
        cls.decode(bytes.fromhex(data))
    err = info.value
    assert err.protocol == "pravega-controller" and err.frame == cls.__name__ and err.offset == 0
    assert err.field == "(message)" and f"not a valid {cls.__name__}" in str(err)


def test_protobuf_wrong_wire_type_is_an_unknown_field() -> None:
    """As in every protobuf runtime (Java's too): a known field number with another
    wire type is kept as an unknown field, and the field keeps its default."""
    assert pb.ScopeInfo.decode(bytes.fromhex("0801")) == pb.ScopeInfo("")
    assert pb.StatusResponse.decode(bytes.fromhex("0a00")) == pb.StatusResponse(0)


def test_protobuf_limits() -> None:
    with pytest.raises(LimitExceeded):
        pb.ScopeInfo.decode(pb.ScopeInfo("x" * 100).encode(), limits=Limits(max_string_size=10))
    with pytest.raises(LimitExceeded):
        pb.ScopeInfo.decode(pb.ScopeInfo("x" * 100).encode(), limits=Limits(max_frame_size=50))
    deep = pb.SegmentRanges((pb.SegmentRange(pb.SegmentId(SI, 1)),)).encode()  # 4 levels
    pb.SegmentRanges.decode(deep, limits=Limits(max_nesting_depth=4))
    with pytest.raises(LocalProtocolError, match="max_nesting_depth"):
        pb.SegmentRanges.decode(deep, limits=Limits(max_nesting_depth=3))
    with pytest.raises(LocalProtocolError, match="does not fit"):
        pb.StatusResponse(1 << 31).encode()


@given(st.binary(max_size=200))
def test_protobuf_garbage_is_typed(data: bytes) -> None:
    for cls in (pb.StreamConfig, pb.SegmentRanges, pb.StreamCut):
        try:
            cls.decode(data)
        except LocalProtocolError:
            pass


def test_percent_encode() -> None:
    assert percent_encode("a b%é\n") == "a b%25%C3%A9%0A"


# --------------------------------------------------------------------------- RPCs over h2c


async def test_every_method_over_h2() -> None:
    admin = FakeAdmin()
    ctl = PravegaController(admin, STORE)
    async with running(ctl) as port, client(port) as c:
        Status = pb.StatusResponse
        assert (await c.ok("createScope", pb.ScopeInfo("sc"), Status)).status == pb.CreateScopeStatus.SUCCESS
        assert (await c.ok("createScope", pb.ScopeInfo("sc"), Status)).status == pb.CreateScopeStatus.SCOPE_EXISTS
        assert (await c.ok("createScope", pb.ScopeInfo("bad/name"), Status)).status == pb.CreateScopeStatus.INVALID_SCOPE_NAME
        assert (await c.ok("checkScopeExists", pb.ScopeInfo("sc"), pb.ExistsResponse)).exists
        assert not (await c.ok("checkScopeExists", pb.ScopeInfo("nope"), pb.ExistsResponse)).exists
        scopes = await c.ok("listScopes", pb.ScopesRequest(pb.ContinuationToken("")), pb.ScopesResponse)
        assert scopes.scopes == ("sc",)
        assert scopes.continuation_token is not None
        page2 = await c.ok("listScopes", pb.ScopesRequest(scopes.continuation_token), pb.ScopesResponse)
        assert page2.scopes == ()

        config = pb.StreamConfig(SI, pb.ScalingPolicy(min_num_segments=3), pb.RetentionPolicy(retention_max=(1 << 63) - 1))
        assert (await c.ok("createStream", config, Status)).status == pb.CreateStreamStatus.SUCCESS
        assert (await c.ok("createStream", config, Status)).status == pb.CreateStreamStatus.STREAM_EXISTS
        orphan = pb.StreamConfig(pb.StreamInfo("nope", "st"), pb.ScalingPolicy(min_num_segments=1))
        assert (await c.ok("createStream", orphan, Status)).status == pb.CreateStreamStatus.SCOPE_NOT_FOUND
        assert sorted(admin.segments) == [f"sc/st/{i}.#epoch.0" for i in range(3)]
        assert (await c.ok("checkStreamExists", SI, pb.ExistsResponse)).exists
        listed = await c.ok("listStreamsInScope", pb.StreamsInScopeRequest(pb.ScopeInfo("sc")), pb.StreamsInScopeResponse)
        assert [s.stream for s in listed.streams] == ["st"]
        assert (await c.ok("getStreamConfiguration", SI, pb.StreamConfig)) == attrs.evolve(config, tags=pb.Tags())

        ranges = await c.ok("getCurrentSegments", SI, pb.SegmentRanges)
        assert [r.segment_id.segment_id for r in ranges.segment_ranges if r.segment_id] == [0, 1, 2]
        keys = [(r.min_key, r.max_key) for r in ranges.segment_ranges]
        assert keys[0][0] == 0.0 and keys[-1][1] == 1.0
        assert all(keys[i][1] == keys[i + 1][0] for i in range(2))  # they tile [0, 1)
        assert (await c.ok("getEpochSegments", pb.GetEpochSegmentsRequest(SI, 0), pb.SegmentRanges)) == ranges

        admin.segments["sc/st/1.#epoch.0"][0] = 40  # the store's start offset
        at = await c.ok("getSegments", pb.GetSegmentsRequest(SI, 0), pb.SegmentsAtTime)
        assert [(loc.segment_id.segment_id if loc.segment_id else None, loc.offset) for loc in at.segments] == [
            (0, 0),
            (1, 40),
            (2, 0),
        ]
        cut = pb.StreamCut(SI, (pb.Int64Entry(2, 7),))
        assert (await c.ok("truncateStream", cut, Status)).status == pb.UpdateStreamStatus.SUCCESS
        at = await c.ok("getSegments", pb.GetSegmentsRequest(SI, 0), pb.SegmentsAtTime)
        assert at.segments[2].offset == 7
        bad_cut = pb.StreamCut(SI, (pb.Int64Entry(segment_id(9, 1), 7),))
        assert (await c.ok("truncateStream", bad_cut, Status)).status == pb.UpdateStreamStatus.FAILURE

        for seg in (
            pb.SegmentId(SI, 1),
            pb.SegmentId(pb.StreamInfo("sc", "rg1_kvtable"), 0),
            pb.SegmentId(pb.StreamInfo("_system", "x"), 5),
        ):
            assert (await c.ok("getURI", seg, pb.NodeUri)) == pb.NodeUri(*STORE)
        assert (await c.ok("getSegmentsImmediatelyFollowing", pb.SegmentId(SI, 1), pb.SuccessorResponse)).segments == ()
        assert (await c.ok("isSegmentValid", pb.SegmentId(SI, 1), pb.SegmentValidityResponse)).response
        assert not (await c.ok("isSegmentValid", pb.SegmentId(SI, 9), pb.SegmentValidityResponse)).response
        assert (await c.ok("getDelegationToken", SI, pb.DelegationToken)).delegation_token == ""
        servers = await c.ok("getControllerServerList", pb.ServerRequest(), pb.ServerResponse)
        assert servers.node_uri == (pb.NodeUri("127.0.0.1", port),)

        update = attrs.evolve(config, tags=pb.Tags(("t",)))
        assert (await c.ok("updateStream", update, Status)).status == pb.UpdateStreamStatus.SUCCESS
        assert (await c.ok("getStreamConfiguration", SI, pb.StreamConfig)).tags == pb.Tags(("t",))
        missing = pb.StreamInfo("sc", "nope")
        assert (await c.ok("updateStream", pb.StreamConfig(missing), Status)).status == pb.UpdateStreamStatus.STREAM_NOT_FOUND

        assert (await c.ok("deleteStream", SI, Status)).status == pb.DeleteStreamStatus.STREAM_NOT_SEALED
        assert (await c.ok("deleteScope", pb.ScopeInfo("sc"), Status)).status == pb.DeleteScopeStatus.SCOPE_NOT_EMPTY
        assert (await c.ok("sealStream", SI, Status)).status == pb.UpdateStreamStatus.SUCCESS
        assert all(s[2] for s in admin.segments.values())
        assert (await c.ok("getCurrentSegments", SI, pb.SegmentRanges)).segment_ranges == ()
        assert not (await c.ok("isSegmentValid", pb.SegmentId(SI, 1), pb.SegmentValidityResponse)).response
        assert (await c.ok("sealStream", missing, Status)).status == pb.UpdateStreamStatus.STREAM_NOT_FOUND
        assert (await c.ok("deleteStream", SI, Status)).status == pb.DeleteStreamStatus.SUCCESS
        assert admin.segments == {}
        assert (await c.ok("deleteStream", SI, Status)).status == pb.DeleteStreamStatus.STREAM_NOT_FOUND
        assert (await c.ok("deleteScope", pb.ScopeInfo("sc"), Status)).status == pb.DeleteScopeStatus.SUCCESS
        assert (await c.ok("deleteScope", pb.ScopeInfo("sc"), Status)).status == pb.DeleteScopeStatus.SCOPE_NOT_FOUND

        reply = await c.call("getCurrentSegments", SI)
        assert reply.grpc_status == 5 and "sc/st" in reply.grpc_message  # NOT_FOUND: the Rust client does not retry it
    assert "createScope" in ctl.calls and "getURI" in ctl.calls


async def test_unimplemented_bad_requests_and_http_errors() -> None:
    async with running(PravegaController(FakeAdmin(), STORE)) as port, client(port) as c:
        reply = await c.call("createTransaction", b"")
        assert reply.headers[b":status"] == b"200"
        assert reply.grpc_status == 12 and "createTransaction" in reply.grpc_message and not reply.data
        reply = await c.call("x", b"", path="/other.Service/createScope")
        assert reply.grpc_status == 12
        reply = await c.call("createScope", bytes.fromhex("0a05616263"))  # truncated string
        assert reply.grpc_status == 13 and "not a valid ScopeInfo" in reply.grpc_message
        sid = c.start("createScope", b"\x00\x00\x00")  # shorter than a gRPC prefix
        await c.pump(lambda: c.replies[sid].ended)
        assert c.replies[sid].grpc_status == 13
        sid = c.start("createScope", grpc_frame(b"", compressed=True))
        await c.pump(lambda: c.replies[sid].ended)
        assert c.replies[sid].grpc_status == 13
        sid = c.start("createScope", grpc_frame(b"") + grpc_frame(b""))  # two messages for a unary call
        await c.pump(lambda: c.replies[sid].ended)
        assert c.replies[sid].grpc_status == 13
        get = [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"x")]
        sid = c.start("", b"", headers=get)
        await c.pump(lambda: c.replies[sid].ended)
        assert c.replies[sid].headers[b":status"] == b"405"
        json = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", f"/{SERVICE}/createScope".encode()),
            (b":authority", b"x"),
            (b"content-type", b"application/json"),
        ]
        sid = c.start("", b"{}", headers=json)
        await c.pump(lambda: c.replies[sid].ended)
        assert c.replies[sid].headers[b":status"] == b"415"
        # the connection still works
        assert (await c.ok("createScope", pb.ScopeInfo("ok"), pb.StatusResponse)).status == 0


async def test_message_size_limit() -> None:
    ctl = PravegaController(FakeAdmin(), STORE, limits=GrpcLimits(max_message_size=100))
    async with running(ctl) as port, client(port) as c:
        reply = await c.call("createScope", pb.ScopeInfo("x" * 200))
        assert reply.grpc_status == 8 and "max_message_size=100" in reply.grpc_message
        # only the prefix is needed to refuse: a huge declared length with no body
        sid = c.start("createScope", b"\x00\xff\xff\xff\xff")
        await c.pump(lambda: c.replies[sid].ended)
        assert c.replies[sid].grpc_status == 8
        assert (await c.ok("createScope", pb.ScopeInfo("sc"), pb.StatusResponse)).status == 0


async def test_concurrent_streams_flow_control_and_ping() -> None:
    admin = FakeAdmin()
    ctl = PravegaController(admin, STORE)
    async with running(ctl) as port:
        async with client(port) as c:
            await c.ok("createScope", pb.ScopeInfo("sc"), pb.StatusResponse)
            config = pb.StreamConfig(SI, pb.ScalingPolicy(min_num_segments=200))
            assert (await c.ok("createStream", config, pb.StatusResponse)).status == 0
        # A client with a 100-byte stream window: the ~7 KB answers must be sent in
        # pieces as WINDOW_UPDATEs arrive.  Five calls are in flight at once.
        async with client(port, {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 100}) as c:
            sids = [c.start("getCurrentSegments", grpc_frame(SI.encode())) for _ in range(5)]
            c.conn.ping(b"12345678")
            await c.pump(lambda: all(c.replies[s].ended for s in sids))
            answers = [pb.SegmentRanges.decode(c.replies[s].message()) for s in sids]
            assert all(len(a.segment_ranges) == 200 for a in answers) and len(set(answers)) == 1
            assert len(c.replies[sids[0]].data) > 5000
            pongs = [e for e in c.events if isinstance(e, h2.events.PingAckReceived)]
            assert pongs and pongs[0].ping_data == b"12345678"
            data_frames = sum(1 for e in c.events if isinstance(e, h2.events.DataReceived))
            assert data_frames >= 5 * 50  # at most 100 bytes each


async def test_shutdown_sends_goaway() -> None:
    ctl = PravegaController(FakeAdmin(), STORE)
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(ctl.serve, listeners)
        port = listeners[0].socket.getsockname()[1]
        async with client(port) as c:
            await c.ok("createScope", pb.ScopeInfo("sc"), pb.StatusResponse)
            with trio.fail_after(5):
                await ctl.shutdown(2.0)

            def terminated() -> bool:
                return any(isinstance(e, h2.events.ConnectionTerminated) for e in c.events)

            await c.pump(terminated)
            goaway = next(e for e in c.events if isinstance(e, h2.events.ConnectionTerminated))
            assert goaway.error_code == 0 and goaway.last_stream_id == 1


async def test_state_survives_restart(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "controller.json"
    admin = FakeAdmin()
    ctl = PravegaController(admin, STORE, state_path=path)
    ctl.create_scope(pb.ScopeInfo("sc").encode())
    ctl.create_stream(pb.StreamConfig(SI, pb.ScalingPolicy(min_num_segments=2), pb.RetentionPolicy(1, 5, 9)).encode())
    ctl.truncate_stream(pb.StreamCut(SI, (pb.Int64Entry(1, 3),)).encode())
    ctl.create_scope(pb.ScopeInfo("empty").encode())
    assert not list(tmp_path.glob("*.tmp"))

    again = PravegaController(admin, STORE, state_path=path)
    assert pb.ExistsResponse.decode(again.check_scope_exists(pb.ScopeInfo("empty").encode())).exists
    assert pb.StreamConfig.decode(again.get_stream_configuration(SI.encode())) == pb.StreamConfig.decode(
        ctl.get_stream_configuration(SI.encode())
    )
    assert again.get_current_segments(SI.encode()) == ctl.get_current_segments(SI.encode())
    assert again.get_segments(pb.GetSegmentsRequest(SI).encode()) == ctl.get_segments(pb.GetSegmentsRequest(SI).encode())
    again.seal_stream(SI.encode())
    assert PravegaController(admin, STORE, state_path=path).get_current_segments(SI.encode()) == pb.SegmentRanges().encode()

    path.write_bytes(b"{not json")
    with pytest.raises(ValueError, match="controller state"):
        PravegaController(admin, STORE, state_path=path)


# --------------------------------------------------------------------------- the real client

_REAL_CLIENT = textwrap.dedent(
    """
    import sys
    import pravega_client
    manager = pravega_client.StreamManager(sys.argv[1])
    print("RESULT scope", manager.create_scope("sc"), flush=True)
    print("RESULT scope-again", manager.create_scope("sc"), flush=True)
    print("RESULT stream", manager.create_stream("sc", "st", 2), flush=True)
    writer = manager.create_writer("sc", "st")
    print("RESULT writer", flush=True)
    writer.write_event("hello")  # blocks: the fake segment store never answers
    """
)

HELLO_V15 = bytes.fromhex(
    "ffffff81 00000008 0000000f 00000005"
)  # as the pravega==0.3.8 client sends it (specs/pravega/README.md §12)


@pytest.fixture
def pravega_client_installed() -> None:
    """Skip without the real client, except on CI (CI=true), where that is a failure."""
    if importlib.util.find_spec("pravega_client") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("pravega_client is not installed (pip install pravega==0.3.8, the interop extra)")
        pytest.skip("pravega_client is not installed (pip install pravega==0.3.8)")


@pytest.mark.interop
@pytest.mark.usefixtures("pravega_client_installed")
async def test_real_pravega_client() -> None:
    hellos: list[bytes] = []
    got_hello = trio.Event()

    async def fake_store(stream: trio.abc.Stream) -> None:
        data = b""
        while len(data) < 16:
            chunk = await stream.receive_some(16 - len(data))
            if not chunk:
                return
            data += chunk
        hellos.append(data)
        got_hello.set()
        await trio.sleep_forever()

    admin = FakeAdmin()
    output = bytearray()
    async with trio.open_nursery() as nursery:
        store_listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        store_port = store_listeners[0].socket.getsockname()[1]
        await nursery.start(trio.serve_listeners, fake_store, store_listeners)
        ctl = PravegaController(admin, ("127.0.0.1", store_port))
        async with running(ctl) as port:
            env = dict(os.environ, RUST_LOG="warn")
            proc = await trio.lowlevel.open_process(
                [sys.executable, "-c", _REAL_CLIENT, f"tcp://127.0.0.1:{port}"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
            )
            try:

                async def collect() -> None:
                    assert proc.stdout is not None
                    async for chunk in proc.stdout:
                        output.extend(chunk)

                nursery.start_soon(collect)
                with trio.fail_after(15):
                    await got_hello.wait()
            finally:
                proc.kill()
                with trio.fail_after(5):
                    await proc.wait()
        nursery.cancel_scope.cancel()
    text = output.decode(errors="replace")
    print("controller RPCs called by the real client:", list(ctl.calls))
    results = [line.split(" ", 1)[1] for line in text.splitlines() if line.startswith("RESULT ")]
    assert results == ["scope True", "scope-again False", "stream True", "writer"], text
    assert hellos[0] == HELLO_V15
    assert sorted(admin.segments) == ["sc/st/0.#epoch.0", "sc/st/1.#epoch.0"]
    assert {"createScope", "createStream", "getCurrentSegments", "getURI"} <= set(ctl.calls), list(ctl.calls)


class FailingAdmin(FakeAdmin):
    def create_segment(self, name: str) -> bool:
        raise RuntimeError("store is down")


async def test_broken_peers_and_failing_store_cost_one_call_or_connection() -> None:
    ctl = PravegaController(FailingAdmin(), STORE)
    async with running(ctl) as port:
        # not HTTP/2 at all: that connection is closed, the server goes on
        with trio.fail_after(5):
            garbage = await trio.open_tcp_stream("127.0.0.1", port)
            await garbage.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            while await garbage.receive_some(1024):
                pass
            await garbage.aclose()
        # a client that vanishes in the middle of a request
        async with client(port) as c:
            c.start("createScope", grpc_frame(pb.ScopeInfo("abc").encode())[:7], end=False)
            await c.flush()
        async with client(port) as c:
            assert (await c.ok("createScope", pb.ScopeInfo("sc"), pb.StatusResponse)).status == 0
            reply = await c.call("createStream", pb.StreamConfig(SI, pb.ScalingPolicy(min_num_segments=1)))
            assert reply.grpc_status == 13 and "store is down" in reply.grpc_message
            assert not pb.ExistsResponse.decode((await c.call("checkStreamExists", SI)).message()).exists


# --------------------------------------------------------------------------- the Sans-IO connection, in memory


def _exchange(cli: h2.connection.H2Connection, srv: Any, *, chunk: int = 1 << 20) -> list[h2.events.Event]:
    """Move bytes both ways (server input in ``chunk``-byte pieces) until both are quiet."""
    events: list[h2.events.Event] = []
    while True:
        up, down = cli.data_to_send(), srv.data_to_send()
        if not up and not down:
            return events
        for i in range(0, len(up), chunk):
            srv.receive_data(up[i : i + chunk])
        if down:
            for ev in cli.receive_data(down):
                events.append(ev)
                if isinstance(ev, h2.events.DataReceived) and ev.stream_id:
                    cli.acknowledge_received_data(ev.flow_controlled_length or 0, ev.stream_id)


def _memory_pair(ctl: PravegaController, **settings: int) -> tuple[h2.connection.H2Connection, Any]:
    from refwire.pravega._grpc import GrpcServerConnection

    cli = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    if settings:
        cli.local_settings = h2.settings.Settings(
            client=True, initial_values={getattr(h2.settings.SettingCodes, k): v for k, v in settings.items()}
        )
    cli.initiate_connection()
    return cli, GrpcServerConnection(ctl.handlers, on_call=ctl._record_call)


def _send(cli: h2.connection.H2Connection, method: str, msg: pb.Message) -> int:
    sid = cli.get_next_available_stream_id()
    cli.send_headers(
        sid,
        [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", f"/{SERVICE}/{method}".encode()),
            (b":authority", b"x"),
            (b"content-type", b"application/grpc"),
        ],
    )
    cli.send_data(sid, grpc_frame(msg.encode()), end_stream=True)
    return sid


def _trailers(events: list[h2.events.Event], sid: int) -> dict[bytes, bytes]:
    for ev in events:
        if isinstance(ev, (h2.events.TrailersReceived, h2.events.ResponseReceived)) and ev.stream_id == sid:
            headers = dict(ev.headers or [])
            if b"grpc-status" in headers:
                return headers
    raise AssertionError(f"no grpc-status for stream {sid}")


def test_byte_at_a_time_gives_the_same_answers() -> None:
    ctl = PravegaController(FakeAdmin(), STORE)
    cli, srv = _memory_pair(ctl)
    sids = [_send(cli, "createScope", pb.ScopeInfo("sc")), _send(cli, "checkScopeExists", pb.ScopeInfo("sc"))]
    events = _exchange(cli, srv, chunk=1)
    data = b"".join(ev.data or b"" for ev in events if isinstance(ev, h2.events.DataReceived) and ev.stream_id == sids[1])
    assert pb.ExistsResponse.decode(data[5:]).exists
    assert all(_trailers(events, s)[b"grpc-status"] == b"0" for s in sids)


def test_drain_finishes_answers_in_flight_then_goaway() -> None:
    ctl = PravegaController(FakeAdmin(), STORE)
    ctl.create_scope(pb.ScopeInfo("sc").encode())
    ctl.create_stream(pb.StreamConfig(SI, pb.ScalingPolicy(min_num_segments=100)).encode())
    cli, srv = _memory_pair(ctl, INITIAL_WINDOW_SIZE=64)
    big = _send(cli, "getCurrentSegments", SI)
    srv.receive_data(cli.data_to_send())
    srv.start_shutdown()  # the big answer is stuck behind the 64-byte window
    assert not srv.closed
    late = _send(cli, "createScope", pb.ScopeInfo("late"))
    events = _exchange(cli, srv)
    assert _trailers(events, late)[b"grpc-status"] == b"14"  # UNAVAILABLE while draining
    assert _trailers(events, big)[b"grpc-status"] == b"0"
    body = b"".join(ev.data or b"" for ev in events if isinstance(ev, h2.events.DataReceived) and ev.stream_id == big)
    assert len(pb.SegmentRanges.decode(body[5:]).segment_ranges) == 100
    goaway = [ev for ev in events if isinstance(ev, h2.events.ConnectionTerminated)]
    assert srv.closed and goaway and goaway[0].error_code == 0
    assert not pb.ExistsResponse.decode(ctl.check_scope_exists(pb.ScopeInfo("late").encode())).exists
