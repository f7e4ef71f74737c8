"""TANK's plain path against its speed path (specs/tank/README.md §4, §5; :mod:`refwire.speed`).

The plain bundle and chunk decoder (:mod:`refwire.tank.bundles`, ``fast=False``)
and the speed path (:mod:`refwire.tank._fast_bundles`, ``fast=True``: columns,
bisection, trusted ``Message`` construction) must be indistinguishable from the
outside.  Every vector of ``specs/tank/vectors/``, the hypothesis strategies of
the TANK tests, hostile bytes and random splits of the stream go through both;
each must give the same values (messages, columns, ``next_seq``,
``min_fetch_size``, ``partial``, ``drained``), the same events, the same bytes
out, the same machine state, and the same errors (class, words, frame, field,
offset).  Last, ``REFWIRE_REFERENCE=1`` really selects the plain path.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from support.tank_strategies import chunks, messages_st
from tank_vectors import load, unhex

from refwire.errors import ProtocolError
from refwire.tank import (
    NEED_DATA,
    ClientConnection,
    ConsumePartition,
    ConsumePartitionResult,
    ConsumeRequest,
    ConsumeResponse,
    ConsumeResult,
    ConsumeTopic,
    ConsumeTopicResult,
    CreateTopicRequest,
    CreateTopicResponse,
    DiscoverPartitionsRequest,
    DiscoverPartitionsResponse,
    DiscoverTopicsRequest,
    DiscoverTopicsResponse,
    DiscoverTopologyRequest,
    DiscoverTopologyResponse,
    Message,
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
    RawProduceResponse,
    ReloadConfRequest,
    ReloadConfResponse,
    StatusRequest,
    StatusResponse,
    decode_response,
    encode_bundle,
    encode_entry,
)
from refwire.tank import bundles as tb
from refwire.tank.bundles import U64_MAX, ChunkResult
from refwire.tank.connection import PING_FRAME
from refwire.tank.frames import Request
from refwire.wire import Limits

FRAMES = load("frames.json")
BUNDLES = load("bundles.json")
PARTIAL = load("partial_chunks.json")
LIMITS = (None, Limits(max_decompressed_size=64))
#: no "explain" phase: on Python 3.11 it traces every line, and a difference
#: found here is plain enough once shrunk
PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink)


# --------------------------------------------------------------------------- outcomes


def _error(exc: ProtocolError) -> tuple[object, ...]:
    return ("error", type(exc), str(exc), exc.reason, exc.protocol, exc.frame, exc.field, exc.offset)


def _chunk_view(r: ChunkResult) -> tuple[object, ...]:
    """Everything a result tells, the columns read before and after the messages are built."""
    columns = (r.count, r.contents, r.timestamps, r.keys, r.seqs)
    messages = r.messages
    assert (r.count, r.contents, r.timestamps, r.keys, r.seqs) == columns
    assert all(type(c) is bytes for c in r.contents) and all(type(m) is Message for m in messages)
    return ("chunk", messages, columns, r.next_seq, r.min_fetch_size, r.partial, r.drained, hash(r), repr(r))


def _outcome(fn: Callable[..., Any], *args: object, **kw: object) -> tuple[object, ...]:
    try:
        got = fn(*args, **kw)
    except ProtocolError as exc:
        return _error(exc)
    if isinstance(got, ChunkResult):
        return _chunk_view(got)
    header, messages = got
    return ("bundle", header, messages, [type(m.content) for m in messages])


def same_chunk(chunk: bytes | memoryview, **kw: Any) -> tuple[object, ...]:
    """``read_chunk`` on both paths: the same outcome (returned)."""
    fast = _outcome(tb.read_chunk, chunk, fast=True, **kw)
    plain = _outcome(tb.read_chunk, chunk, fast=False, **kw)
    assert fast == plain, kw
    return fast


def same_bundle(bundle: bytes | memoryview, **kw: Any) -> tuple[object, ...]:
    """``decode_bundle`` on both paths: the same outcome (returned)."""
    fast = _outcome(tb.decode_bundle, bundle, fast=True, **kw)
    plain = _outcome(tb.decode_bundle, bundle, fast=False, **kw)
    assert fast == plain, kw
    return fast


# --------------------------------------------------------------------------- the vectors


@pytest.mark.parametrize("v", BUNDLES, ids=[v["name"] for v in BUNDLES])
def test_bundle_vectors_and_every_cut_and_flip(v: dict[str, Any]) -> None:
    raw = unhex(v["hex"])
    assert same_bundle(raw, base_seq=v["base_seq"])[0] == "bundle"
    for base_seq in (None, 0, 7):
        same_bundle(memoryview(raw), base_seq=base_seq, base=3)
    for limits in LIMITS:
        same_bundle(raw, base_seq=1, limits=limits)
    for cut in range(len(raw)):
        same_bundle(raw[:cut], base_seq=1, base=5)
    for i in range(len(raw)):
        for x in (0x01, 0x80, 0xFF):
            hostile = bytearray(raw)
            hostile[i] ^= x
            same_bundle(bytes(hostile), base_seq=2, base=5)


@pytest.mark.parametrize("v", PARTIAL, ids=[v["name"] for v in PARTIAL])
def test_partial_chunk_vectors_every_cut_requested_and_hwmark(v: dict[str, Any]) -> None:
    chunk = unhex(v["chunk"])
    for cut in v["cuts"]:
        got = same_chunk(chunk[: cut["cut"]], base_seq=v["base_seq"], hwmark=v["hwmark"], requested_seq=v["requested_seq"])
        assert got[0] == "chunk" and [m.seq for m in got[1]] == cut["seqs"]  # type: ignore[attr-defined]
    hw = v["hwmark"]
    for cut in range(0, len(chunk) + 1, 3):
        for requested in (0, v["requested_seq"], hw - 1, hw, U64_MAX):
            for hwmark in (hw, hw - 2):
                same_chunk(chunk[:cut], base_seq=v["base_seq"], hwmark=hwmark, requested_seq=requested, offset=11)
    for requested in [*range(hw + 2), U64_MAX]:  # the whole chunk: every requested number and hwmark
        for hwmark in range(hw + 2):
            same_chunk(chunk, base_seq=v["base_seq"], hwmark=hwmark, requested_seq=requested)
    same_chunk(memoryview(chunk), base_seq=v["base_seq"], hwmark=hw, requested_seq=0, limits=LIMITS[1])


def test_partial_chunk_vectors_every_flip() -> None:
    for v in PARTIAL:
        chunk = unhex(v["chunk"])
        for i in range(len(chunk)):
            hostile = bytearray(chunk)
            hostile[i] ^= 0x5A
            same_chunk(bytes(hostile), base_seq=v["base_seq"], hwmark=v["hwmark"], requested_seq=v["requested_seq"])


def _request_for(resp: object, layout: Sequence[Sequence[Any]] | None, requested: int) -> Request | None:
    """The request a broker frame answers (``None`` for a Ping), asking ``requested`` of every consumed partition."""
    if isinstance(resp, ConsumeResponse):
        topics = tuple(
            ConsumeTopic(t.name, tuple(ConsumePartition(p.partition, requested, 1 << 20) for p in t.partitions))
            for t in resp.topics
        )
        return ConsumeRequest(resp.request_id, topics)
    if isinstance(resp, RawProduceResponse):
        assert layout is not None
        topics_p = tuple(ProduceTopic(t, tuple(ProducePartition(p, b"\x04\x00") for p in ps)) for t, ps in layout)
        return ProduceRequest(resp.request_id, topics_p)
    simple: dict[type, Callable[[Any], Request]] = {
        DiscoverPartitionsResponse: lambda r: DiscoverPartitionsRequest(r.request_id, r.topic),
        CreateTopicResponse: lambda r: CreateTopicRequest(r.request_id, r.topic, 1),
        ReloadConfResponse: lambda r: ReloadConfRequest(r.request_id, r.topic, r.partition),
        StatusResponse: lambda r: StatusRequest(r.request_id),
        DiscoverTopicsResponse: lambda r: DiscoverTopicsRequest(r.request_id),
        DiscoverTopologyResponse: lambda r: DiscoverTopologyRequest(r.request_id),
    }
    make = simple.get(type(resp))
    return make(resp) if make else None


def _event_view(ev: object) -> object:
    if isinstance(ev, ConsumeResult):
        return (ev, [None if p.chunk is None else _chunk_view(p.chunk) for p in ev.partitions])
    return ev


def run_client(
    fast: bool, requests: Sequence[Request], stream: bytes, cuts: Sequence[int], limits: Limits | None = None
) -> list[object]:
    """Everything a client connection shows when ``stream`` arrives in pieces cut at ``cuts``, then EOF."""
    c = ClientConnection(now=0.0, ping_interval=None, fast=fast, **({"limits": limits} if limits else {}))
    assert c.fast is fast
    for r in requests:
        c.send(r, now=0.0)
    seen: list[object] = [("sent", c.data_to_send())]
    bounds = [0, *sorted(set(cuts)), len(stream)]
    pieces = [stream[a:b] for a, b in itertools.pairwise(bounds)] + [b""]
    for now, piece in enumerate(pieces, 1):
        c.receive_data(piece, now=float(now))
        try:
            while (ev := c.next_event()) is not NEED_DATA:
                seen.append(("event", _event_view(ev)))
        except ProtocolError as exc:
            seen.append(_error(exc))
            break
        seen.append(("state", c.state, c.pending, c.data_to_send()))
    seen.append(("end", c.state, c.pending, c.data_to_send()))
    return seen


def same_client(requests: Sequence[Request], stream: bytes, cuts: Sequence[int], limits: Limits | None = None) -> list[object]:
    fast = run_client(True, requests, stream, cuts, limits)
    assert fast == run_client(False, requests, stream, cuts, limits)
    return fast


B2C = [v for v in FRAMES if v["direction"] == "b2c"]


@pytest.mark.parametrize("v", B2C, ids=[v["name"] for v in B2C])
def test_frame_vectors_through_both_clients(v: dict[str, Any]) -> None:
    """Every broker frame, whole and byte by byte, answering a request for several sequence numbers."""
    raw = unhex(v["hex"])
    resp = decode_response(raw[0], raw[5:])
    stream = PING_FRAME + raw
    for requested in (0, 2, 5, U64_MAX):
        request = _request_for(resp, v.get("layout"), requested)
        requests = [request] if request is not None else []
        seen = same_client(requests, stream, [])
        assert not any(s[0] == "error" for s in seen)  # type: ignore[index]
        same_client(requests, stream, range(1, len(stream)))
        if isinstance(resp, ConsumeResponse):
            same_client(requests, stream, [], Limits(max_decompressed_size=64))


CONSUME_B2C = [v for v in B2C if v["hex"].startswith("02")]


@pytest.mark.parametrize("v", CONSUME_B2C, ids=[v["name"] for v in CONSUME_B2C])
def test_consume_vectors_with_every_chunk_byte_flipped(v: dict[str, Any]) -> None:
    """Hostile chunks inside well-framed consume responses: the same events or the same error."""
    raw = unhex(v["hex"])
    resp = decode_response(raw[0], raw[5:])
    assert isinstance(resp, ConsumeResponse)
    request = _request_for(resp, None, 0)
    assert request is not None
    chunk_bytes = sum(len(p.chunk) for t in resp.topics for p in t.partitions)
    for i in range(len(raw) - chunk_bytes, len(raw)):
        hostile = bytearray(raw)
        hostile[i] ^= 0xA5
        same_client([request], bytes(hostile), [])


# --------------------------------------------------------------------------- hypothesis strategies, hostile bytes, splits


@given(chunks(), st.integers(0, 80) | st.just(U64_MAX), st.integers(0, 90), st.sampled_from(LIMITS), st.booleans())
@settings(phases=PHASES, max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_generated_chunks_both_paths(
    chunk_base: tuple[bytes, int | None], requested: int, hwmark: int, limits: Limits | None, view: bool
) -> None:
    chunk, base_seq = chunk_base
    data = memoryview(chunk) if view else chunk
    same_chunk(data, base_seq=base_seq, hwmark=hwmark, requested_seq=requested, limits=limits, offset=9)


@given(messages_st, st.booleans(), st.none() | st.integers(0, 2**40), st.booleans())
@settings(phases=PHASES, max_examples=100, deadline=None)
def test_generated_bundles_both_paths(msgs: list[Message], compress: bool, base_seq: int | None, sparse: bool) -> None:
    if sparse:
        msgs = [attrs.evolve(m, seq=10 + 3 * i) for i, m in enumerate(msgs)]
    bundle = encode_bundle(msgs, compress=compress, sparse=sparse)
    got = same_bundle(bundle, base_seq=base_seq)
    assert got[0] == "bundle"
    same_chunk(encode_entry(bundle), base_seq=None if sparse else (base_seq or 1), hwmark=2**41, requested_seq=0)


@given(st.binary(max_size=200), st.none() | st.integers(0, 40), st.integers(0, 60), st.integers(0, 50) | st.just(U64_MAX))
@settings(phases=PHASES, max_examples=250, deadline=None)
def test_hostile_bytes_both_paths(data: bytes, base_seq: int | None, hwmark: int, requested: int) -> None:
    same_bundle(data, base_seq=base_seq, base=4)
    same_chunk(data, base_seq=base_seq, hwmark=hwmark, requested_seq=requested, offset=4)


@st.composite
def consume_streams(draw: st.DrawFn) -> tuple[ConsumeRequest, bytes, list[int]]:
    """A consume request, a response carrying 1-3 generated chunks (after the broker's Ping), and cut points."""
    parts_req: list[ConsumePartition] = []
    parts_resp: list[ConsumePartitionResult] = []
    for pid in range(draw(st.integers(1, 3))):
        chunk, base_seq = draw(chunks())
        requested = draw(st.integers(0, 80) | st.just(U64_MAX))
        hwmark = draw(st.integers(0, 90))
        err = 0xFE if base_seq is None else 0
        parts_req.append(ConsumePartition(pid, requested, 1 << 20))
        parts_resp.append(ConsumePartitionResult(pid, err, base_seq, hwmark, chunk))
    rid = draw(st.integers(1, 2**32 - 1))
    request = ConsumeRequest(rid, (ConsumeTopic("t", tuple(parts_req)),))
    stream = PING_FRAME + ConsumeResponse(rid, (ConsumeTopicResult("t", tuple(parts_resp)),)).encode()
    cuts = draw(st.lists(st.integers(1, len(stream) - 1), max_size=6))
    return request, stream, cuts


@given(consume_streams(), st.sampled_from(LIMITS))
@settings(phases=PHASES, max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_generated_consume_streams_split_at_random_through_both_clients(
    got: tuple[ConsumeRequest, bytes, list[int]], limits: Limits | None
) -> None:
    request, stream, cuts = got
    same_client([request], stream, cuts, limits)


# --------------------------------------------------------------------------- the switch


_PROBE = """
import refwire.tank.bundles as tb
from refwire.tank import ClientConnection, Message, encode_bundle, encode_entry
calls = []
for name in ("read_chunk", "decode_bundle"):
    real = tb._SPEED[name]
    tb._SPEED[name] = lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a)
bundle = encode_bundle([Message(b"x", 1)])
tb.decode_bundle(bundle, base_seq=1)
r = tb.read_chunk(encode_entry(bundle), base_seq=1, hwmark=9, requested_seq=0)
columns = tb.ChunkResult.of_columns(([b"x"], [1], [None], [1]), 2)
print(ClientConnection(now=0.0).fast, ",".join(calls) or "-", r._columns is not None, columns._fast)
"""


@pytest.mark.parametrize(("value", "expected"), [("1", "False - False False"), (None, "True decode_bundle,read_chunk True True")])
def test_refwire_reference_selects_the_plain_path(value: str | None, expected: str) -> None:
    """``REFWIRE_REFERENCE=1`` at import: every TANK codec and machine built without ``fast=`` takes the plain path."""
    env = {k: v for k, v in os.environ.items() if k != "REFWIRE_REFERENCE"}
    if value is not None:
        env["REFWIRE_REFERENCE"] = value
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == expected


def test_fast_argument_beats_the_switch() -> None:
    for fast in (True, False):
        assert ClientConnection(now=0.0, fast=fast).fast is fast
        r = tb.read_chunk(encode_entry(encode_bundle([Message(b"x", 1)])), base_seq=1, hwmark=9, requested_seq=0, fast=fast)
        assert (r._columns is not None) is fast
        assert ChunkResult.of_columns(([], [], [], []), 0, fast=fast)._fast is fast
