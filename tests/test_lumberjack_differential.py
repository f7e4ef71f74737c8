"""The plain path and the speed path of Lumberjack are the same protocol.

Every codec and machine is built twice, ``fast=False`` (the plain path that reads
like specs/lumberjack/README.md) and ``fast=True`` (``lumberjack/_fast_frames.py``,
``lumberjack/_fast_connection.py``), and fed the same bytes, split the same way:
every vector of specs/lumberjack/vectors/, the hypothesis strategies of
tests/lumberjack_strategies.py (valid client streams, hostile streams, any frame),
random splits and random bytes.  Both must give the same frames and events (by
value, parsed JSON documents included), the same bytes out, the same state after
every chunk and the same error (class, words, frame, field, offset) at the same
chunk.  And ``REFWIRE_REFERENCE=1`` must really put everything on the plain path.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lumberjack_strategies import any_frame, client_streams, hostile_streams, j, split

from refwire.errors import ProtocolError
from refwire.lumberjack import (
    DEFAULT_LIMITS,
    NEED_DATA,
    V1,
    V2,
    Ack,
    AckTimeout,
    Batch,
    ClientConnection,
    Compressed,
    ConnectionClosed,
    DataFrame,
    FrameDecoder,
    JsonFrame,
    ServerConnection,
    Window,
)
from refwire.lumberjack.frames import JsonRun, decode_all, encode_events, inflate_frames, scan_acks
from refwire.wire import Limits

ROOT = Path(__file__).resolve().parent.parent
VECTORS = [
    {**v, "_file": path.name}
    for path in sorted((ROOT / "specs" / "lumberjack" / "vectors").glob("*.json"))
    for v in json.loads(path.read_text(encoding="utf-8"))["vectors"]
]
VERSIONS = {"1": V1, "2": V2}

cuts = st.lists(st.integers(0, 10_000), max_size=6)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------- what is compared


def error_key(exc: BaseException) -> tuple[Any, ...]:
    """An error as both paths must raise it: class, words, frame, field, offset."""
    if isinstance(exc, ProtocolError):
        return (type(exc).__name__, str(exc), exc.frame, exc.field, exc.offset)
    return (type(exc).__name__, str(exc))


def frame_key(f: Any) -> list[tuple[Any, ...]]:
    """A decoded frame by value (a JsonFrame's parsed document too); a JsonRun
    as the frames it stands for."""
    if type(f) is JsonRun:
        return [k for frame in f.frames() for k in frame_key(frame)]
    if type(f) is JsonFrame:
        return [("J", f.version, f.seq, f.payload, type(f.payload), f.data)]
    if type(f) is DataFrame:
        return [("D", f.version, f.seq, f.pairs, [type(x) for p in f.pairs for x in p])]
    if type(f) is Compressed:
        return [("C", f.version, f.payload, type(f.payload))]
    return [(type(f).__name__, f.version, attrs.astuple(f))]


def event_key(ev: Any) -> tuple[Any, ...]:
    if type(ev) is Batch:
        return (
            "Batch",
            ev.version,
            ev.number,
            len(ev),
            ev.last_seq,
            ev.seqs,
            ev.payloads,
            ev.docs,
            [k for e in ev.events for k in frame_key(e)],
        )
    return (type(ev).__name__, attrs.astuple(ev))


def events_of(conn: Any) -> list[Any]:
    """Every event a machine has ready, and the error that ends them."""
    out: list[Any] = []
    while True:
        try:
            ev = conn.next_event()
        except ProtocolError as exc:
            return [*out, ("error", error_key(exc))]
        if ev is NEED_DATA:
            return out
        out.append(event_key(ev))


def chunks_of(data: bytes, how: str | list[int]) -> list[bytes]:
    if how == "whole":
        return [data]
    if how == "bytewise":
        return [data[i : i + 1] for i in range(len(data))]
    assert isinstance(how, list)
    return split(data, how)


# --------------------------------------------------------------------------- the decoder


def decoder_trace(data: bytes, how: str | list[int], *, fast: bool, runs: bool, **kw: Any) -> list[Any]:
    """What a FrameDecoder makes of ``data`` fed in chunks: after each chunk the
    frames (by value), the error, and where the decoder stands."""
    dec = FrameDecoder(fast=fast, **kw)
    assert dec.fast is fast
    trace: list[Any] = []
    for chunk in chunks_of(data, how):
        dec.feed(chunk)
        frames, err = dec.frames_before_error(runs=runs)
        keys = [k for f in frames for k in frame_key(f)]
        trace.append((keys, None if err is None else error_key(err), dec.offset, dec.buffered, dec.pending_frame_name()))
        if err is not None:
            break
    return trace


DECODER_CONFIGS: list[dict[str, Any]] = [
    {},
    {"validate_json": False},
    {"strict_versions": False},
    {"limits": Limits(max_frame_size=40, max_decompressed_size=1 << 16)},
]


def assert_decoders_agree(data: bytes, how: str | list[int], **kw: Any) -> None:
    plain = decoder_trace(data, how, fast=False, runs=False, **kw)
    assert decoder_trace(data, how, fast=True, runs=False, **kw) == plain
    assert decoder_trace(data, how, fast=True, runs=True, **kw) == plain  # runs are JsonFrames by value
    assert decoder_trace(data, how, fast=False, runs=True, **kw) == plain  # (the plain path has no runs)


def assert_decode_all_agrees(data: bytes, **kw: Any) -> None:
    got: list[Any] = []
    for fast in (False, True):
        try:
            got.append([frame_key(f) for f in decode_all(data, fast=fast, **kw)])
        except ProtocolError as exc:
            got.append(error_key(exc))
    assert got[0] == got[1]


def assert_inflate_agrees(payload: bytes, **kw: Any) -> None:
    got: list[Any] = []
    for fast, runs in ((False, False), (True, False), (True, True), (False, True)):
        try:
            got.append([k for f in inflate_frames(payload, runs=runs, fast=fast, **kw) for k in frame_key(f)])
        except ProtocolError as exc:
            got.append(error_key(exc))
    assert got.count(got[0]) == len(got), got


# --------------------------------------------------------------------------- the server machine


def server_trace(data: bytes, how: str | list[int], *, fast: bool, **kw: Any) -> tuple[Any, ...]:
    """A ServerConnection fed ``data`` in chunks then EOF, accepting every
    batch: after each chunk its events, its bytes out, its state and timers."""
    conn = ServerConnection(fast=fast, now=0.0, idle_timeout=60.0, batch_timeout=30.0, **kw)
    assert conn.fast is fast and conn._decoder.fast is fast
    trace: list[Any] = []
    t = 0.0
    for chunk in [*chunks_of(data, how), b""]:
        t += 1.0
        conn.receive_data(chunk, now=t)
        events: list[Any] = []
        stop = False
        while not stop:
            try:
                ev = conn.next_event()
            except ProtocolError as exc:
                events.append(("error", error_key(exc)))
                stop = True
                break
            if ev is NEED_DATA:
                break
            events.append(event_key(ev))
            if type(ev) is Batch:
                events.append(("out before accept", conn.data_to_send()))
                conn.accept(ev, now=t)
            stop = type(ev) is ConnectionClosed
        trace.append(
            (
                events,
                conn.data_to_send(),
                conn.state,
                conn.version,
                conn.mid_batch,
                conn.pending_batches,
                conn.next_deadline(),
                conn._decoder.offset,
                conn._decoder.buffered,
            )
        )
        if stop:
            break
    return tuple(trace), sorted(conn.transitions_seen)


SERVER_CONFIGS: list[dict[str, Any]] = [
    {},
    {"ack_mode": "count", "validate_json": False},
    {"accept_mixed_versions": True, "keepalive_version": "v2"},
    {"answer_empty_window": False, "limits": attrs.evolve(DEFAULT_LIMITS, max_batch_bytes=25, max_window=4)},
]


def assert_servers_agree(data: bytes, how: str | list[int], **kw: Any) -> None:
    assert server_trace(data, how, fast=True, **kw) == server_trace(data, how, fast=False, **kw)


# --------------------------------------------------------------------------- the client machine


def client_trace(ctx: dict[str, Any], data: bytes, how: str | list[int], *, fast: bool, level: int = 0) -> tuple[Any, ...]:
    """A ClientConnection as a vector's ``client_context`` sets it up (the window
    sent), then fed the server's ``data`` in chunks and EOF."""
    version = VERSIONS[ctx["version"]]
    seqs = ctx["seqs"]
    per_window = seqs == list(range(1, len(seqs) + 1))
    conn = ClientConnection(
        version=version,
        compression_level=level,
        sequence="window" if per_window else "running",
        first_seq=seqs[0],
        ack_interpretation="count" if ctx.get("ack_meaning") == "count" else "seq",
        fast=fast,
    )
    assert conn.fast is fast
    events = [{"n": i} if version == V2 else {"line": str(i)} for i in range(len(seqs))]
    conn.send_window(events, now=0.0)
    trace: list[Any] = [conn.data_to_send()]
    for chunk in [*chunks_of(data, how), b""]:
        conn.receive_data(chunk, now=1.0)
        seen: list[Any] = []
        stop = False
        while not stop:
            try:
                ev = conn.next_event()
            except ProtocolError as exc:
                seen.append(("error", error_key(exc)))
                stop = True
                break
            if ev is NEED_DATA:
                break
            seen.append(event_key(ev))
            stop = type(ev) in (ConnectionClosed, AckTimeout)
        trace.append((seen, conn.state, conn.acked, conn.unacked(), bytes(conn.unacked_encoded().body), conn.next_deadline()))
        if stop:
            break
    return tuple(trace), sorted(conn.transitions_seen)


def ack_scan(data: bytes, base: int, *, fast: bool) -> list[Any]:
    """What scan_acks yields from ``data``, and its error."""
    seen: list[Any] = []
    try:
        seen.extend(scan_acks(bytearray(data), base=base, fast=fast))
    except ProtocolError as exc:
        seen.append(error_key(exc))
    return seen


# --------------------------------------------------------------------------- every vector


def _ids(vectors: list[dict[str, Any]]) -> list[Any]:
    return [pytest.param(v, id=v["name"]) for v in vectors]


SPLITS: list[str | list[int]] = ["whole", "bytewise", [3, 17, 40], [1, 2, 11, 12, 60, 61, 95]]


@pytest.mark.parametrize("vector", _ids(VECTORS))
def test_every_vector_decodes_alike(vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    for how in SPLITS:
        for kw in DECODER_CONFIGS:
            assert_decoders_agree(data, how, **kw)
    for kw in DECODER_CONFIGS:
        assert_decode_all_agrees(data, **kw)
    for n in range(len(data) + 1):  # the acks a client reads, from every prefix
        assert ack_scan(data[:n], 9, fast=True) == ack_scan(data[:n], 9, fast=False)


@pytest.mark.parametrize("vector", _ids([v for v in VECTORS if v["direction"] == "client->server"]))
def test_every_client_to_server_vector_serves_alike(vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    own = attrs.evolve(DEFAULT_LIMITS, **vector.get("limits", {}))
    for how in SPLITS:
        assert_servers_agree(data, how, limits=own)
        for kw in SERVER_CONFIGS:
            assert_servers_agree(data, how, **kw)


@pytest.mark.parametrize("vector", _ids([v for v in VECTORS if "client_context" in v]))
@pytest.mark.parametrize("level", [0, 3])
def test_every_server_to_client_vector_is_read_alike(vector: dict[str, Any], level: int) -> None:
    data = bytes.fromhex(vector["hex"])
    for how in SPLITS:
        plain = client_trace(vector["client_context"], data, how, fast=False, level=level)
        assert client_trace(vector["client_context"], data, how, fast=True, level=level) == plain


# --------------------------------------------------------------------------- the strategies, random splits


@FAST
@given(client_streams(), cuts)
def test_valid_client_streams_alike(stream: tuple[bytes, list[list[int]]], where: list[int]) -> None:
    data = stream[0]
    assert_servers_agree(data, where)
    assert_servers_agree(data, where, ack_mode="count", accept_mixed_versions=True)
    assert_decoders_agree(data, where)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_streams(), st.sampled_from(SERVER_CONFIGS), st.sampled_from([None, 1, 20, 40]), cuts)
def test_hostile_streams_alike(data: bytes, cfg: dict[str, Any], batch_bytes: int | None, where: list[int]) -> None:
    if batch_bytes is not None:
        cfg = {**cfg, "limits": attrs.evolve(cfg.get("limits", DEFAULT_LIMITS), max_batch_bytes=batch_bytes)}
    assert_servers_agree(data, where, **cfg)
    assert_decoders_agree(data, where, strict_versions=not cfg.get("accept_mixed_versions", False))


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "in-a-C"])
@pytest.mark.parametrize("version", [V2, V1], ids=["2J", "1J"])
def test_runs_cut_by_windows_versions_and_limits_alike(compress: bool, version: int) -> None:
    """``W k`` then ``n`` J frames in one run, for every ``k`` and ``n``: the run is
    cut where the window ends, where ``max_batch_bytes`` is crossed, where the
    version byte differs; each refusal names its own frame."""
    for k in range(4):
        for n in range(1, 6):
            body = b"".join(j(i + 1, b'{"n":%d}' % i, version) for i in range(n))
            data = Window(k).encode() + (Compressed(zlib.compress(body)).encode() if compress else body)
            for limit in (DEFAULT_LIMITS.max_batch_bytes, 7, 14, 20, 21):
                for mixed in (False, True):
                    lim = attrs.evolve(DEFAULT_LIMITS, max_batch_bytes=limit)
                    assert_servers_agree(data, "whole", limits=lim, accept_mixed_versions=mixed)
                    assert_servers_agree(data + data, [len(data) + 3], limits=lim, accept_mixed_versions=mixed)


@FAST
@given(st.lists(any_frame, max_size=6), st.binary(max_size=12), cuts, st.sampled_from(DECODER_CONFIGS))
def test_any_frames_then_garbage_decode_alike(frames: list[Any], tail: bytes, where: list[int], cfg: dict[str, Any]) -> None:
    data = b"".join(f.encode() for f in frames) + tail
    assert_decoders_agree(data, where, **cfg)
    assert_decode_all_agrees(data, **cfg)


@FAST
@given(st.binary(max_size=80), cuts, st.sampled_from(SERVER_CONFIGS))
def test_random_bytes_alike(data: bytes, where: list[int], cfg: dict[str, Any]) -> None:
    # mostly the first bytes' errors; a valid prefix sometimes
    data = b"2W\x00\x00\x00\x02" + data if data[:1] == b"\x00" else data
    assert_servers_agree(data, where, **cfg)
    assert_decoders_agree(data, where)


@FAST
@given(hostile_streams(), st.integers(0, 9), st.sampled_from([None, 0, 30, 200]))
def test_compressed_payloads_inflate_alike(inner: bytes, level: int, budget: int | None) -> None:
    payload = zlib.compress(inner, level)
    for kw in ({}, {"validate_json": False, "strict_versions": False}):
        assert_inflate_agrees(payload, budget=budget, **kw)
        assert_inflate_agrees(payload[:-3], budget=budget, **kw)  # truncated


# --------------------------------------------------------------------------- the client's bytes


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=6)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
v2_events = st.one_of(
    st.dictionaries(st.text(max_size=6), json_values, max_size=4),
    st.dictionaries(st.integers(0, 5), st.integers(), max_size=2),  # keys orjson refuses
    st.binary(max_size=10),
    st.text(max_size=10),
    st.builds(lambda d: type("M", (dict,), {})(d), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)),
    st.sampled_from([1, None, [1], {1, 2}, {"a": {1, 2}}]),  # not events, or not JSON
)
v1_events = st.one_of(
    st.dictionaries(
        st.one_of(st.text(max_size=4), st.binary(max_size=4)),
        st.one_of(st.text(max_size=4), st.binary(max_size=4), json_values),
        max_size=3,
    ),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.sampled_from([1, None, [1]]),
)


def _encode(version: int, events: list[Any], seqs: list[int] | None, fast: bool) -> Any:
    try:
        w = encode_events(version, events, seqs, fast=fast)
    except Exception as exc:  # the same refusal on both paths
        return error_key(exc)
    return (w.version, bytes(w.body), w.starts, w.seqs, w.payloads())


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([V1, V2]), st.data())
def test_events_encode_alike(version: int, data: st.DataObject) -> None:
    events = data.draw(st.lists(v2_events if version == V2 else v1_events, max_size=5))
    seqs = data.draw(st.one_of(st.none(), st.lists(st.integers(1, 2**32 - 1), min_size=len(events), max_size=len(events) + 1)))
    assert _encode(version, events, seqs, True) == _encode(version, events, seqs, False)


@FAST
@given(
    st.sampled_from([V1, V2]),
    st.lists(st.dictionaries(st.text(max_size=4), st.integers(), max_size=3), min_size=1, max_size=6),
    st.integers(0, 9),
    st.sampled_from(["window", "running"]),
)
def test_clients_send_alike(version: int, events: list[Any], level: int, sequence: Any) -> None:
    sent = []
    for fast in (False, True):
        c = ClientConnection(version=version, compression_level=level, sequence=sequence, first_seq=2**32 - 2, fast=fast)
        c.send_window(events, now=0.0)
        first = c.data_to_send()
        c.receive_data(Ack(2 if sequence == "window" else 2**32 - 1, version).encode(), now=1.0)
        acked = events_of(c)
        c.connection_lost(now=2.0)
        closed = events_of(c)
        again = ClientConnection(version=version, compression_level=level, fast=fast)
        if c.unacked():
            again.send_window(c.unacked(), now=3.0, encoded=c.unacked_encoded())  # a resend, renumbered
        sent.append((first, acked, closed, again.data_to_send()))
    assert sent[0] == sent[1]


acks_and_garbage = st.lists(
    st.one_of(
        st.builds(lambda s, v: Ack(s, v).encode(), st.integers(0, 2**32 - 1), st.sampled_from([V1, V2])),
        st.binary(max_size=3),
        st.sampled_from([b"2W", b"3A", b"2", b"1A\x00"]),
    ),
    max_size=6,
).map(b"".join)


@FAST
@given(acks_and_garbage, st.integers(0, 1000))
def test_acks_scan_alike(data: bytes, base: int) -> None:
    assert ack_scan(data, base, fast=True) == ack_scan(data, base, fast=False)


@FAST
@given(acks_and_garbage, cuts, st.sampled_from(["seq", "count"]))
def test_clients_read_alike(data: bytes, where: list[int], meaning: str) -> None:
    ctx = {"version": "2", "seqs": [1, 2, 3], "ack_meaning": meaning}
    assert client_trace(ctx, data, where, fast=True) == client_trace(ctx, data, where, fast=False)


# --------------------------------------------------------------------------- the switch


def test_the_plain_and_the_speed_path_differ_where_they_should() -> None:
    """The two paths really are two: runs and columns on one, frames on the other."""
    stream = Window(2).encode() + JsonFrame(1, b"{}").encode() + JsonFrame(2, b'{"a":1}').encode()
    kinds = {}
    for fast in (False, True):
        dec = FrameDecoder(fast=fast)
        dec.feed(stream)
        kinds[fast] = [type(f) for f in dec.frames(runs=True)]
        conn = ServerConnection(fast=fast)
        conn.receive_data(stream, now=0.0)
        batch = conn.next_event()
        assert type(batch) is Batch and (batch._events is None) is fast  # columns only on the speed path
    assert kinds == {False: [Window, JsonFrame, JsonFrame], True: [Window, JsonRun]}


PROBE = """
from refwire.lumberjack import ClientConnection, FrameDecoder, ServerConnection, V2, Window, JsonFrame
from refwire.lumberjack import codec, connection, frames
dec = FrameDecoder()
dec.feed(Window(1).encode() + JsonFrame(1, b"{}").encode())
runs = [type(f).__name__ for f in dec.frames(runs=True)]
server, client = ServerConnection(), ClientConnection()
print(dec.fast, server.fast, server._decoder.fast, client.fast,
      dec._scan is frames.SCANNERS[dec.fast],
      server._take_frames is connection.FRAME_LOOPS[server.fast],
      client._scan_acks is frames.ACK_SCANNERS[client.fast],
      client._encode_events is codec.EVENT_ENCODERS[client.fast],
      frames.SCANNERS[False] is frames.scan_frames, frames.SCANNERS[True].__module__, ",".join(runs))
"""


@pytest.mark.parametrize(("value", "fast"), [("1", False), ("", True), ("0", True), (None, True)])
def test_refwire_reference_selects_the_plain_path(value: str | None, fast: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REFWIRE_REFERENCE"}
    if value is not None:
        env["REFWIRE_REFERENCE"] = value
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True).stdout.split()
    runs = "Window,JsonRun" if fast else "Window,JsonFrame"
    assert out == [str(fast)] * 4 + ["True"] * 5 + ["refwire.lumberjack._fast_frames", runs]


WORKLOAD = """
import sys, zlib
from refwire.lumberjack import ClientConnection, FrameDecoder, ServerConnection, Window, JsonFrame, Compressed, NEED_DATA
from refwire.lumberjack.frames import decode_all, encode_events, inflate_frames, scan_acks
called = set()
def watch(frame, event, arg):
    if event == "call":
        called.add(frame.f_code.co_filename.rsplit("/", 1)[-1])
sys.setprofile(watch)
js = JsonFrame(1, b"{}").encode() + JsonFrame(2, b'{"a":1}').encode()
stream = Window(2).encode() + js + Window(2).encode() + Compressed(zlib.compress(js)).encode()
server, client = ServerConnection(), ClientConnection()
server.receive_data(stream, now=0.0)
while (ev := server.next_event()) is not NEED_DATA:
    server.accept(ev, now=0.0)
client.send_window([{"a": 1}, {"b": 2}], now=0.0)
client.receive_data(server.data_to_send()[:6], now=0.0)  # the first batch's ack
while client.next_event() is not NEED_DATA:
    pass
dec = FrameDecoder()
dec.feed(stream)
dec.frames(runs=True)
decode_all(js), inflate_frames(zlib.compress(js), runs=True), encode_events(0x32, [{}]), list(scan_acks(b"2A\\0\\0\\0\\1"))
sys.setprofile(None)
print(" ".join(sorted(name for name in called if name.startswith("_fast"))) or "-")
"""


def _seen_by_a_profiler(*modules: str) -> str:
    """Those of ``modules`` (``refwire.lumberjack._fast*`` stems) that run interpreted,
    as the workload prints them: a compiled module's functions (setup.py) do not show."""
    names = [f"{m}.py" for m in modules if str(importlib.import_module(f"refwire.lumberjack.{m}").__file__).endswith(".py")]
    return " ".join(sorted(names)) or "-"


@pytest.mark.parametrize(("value", "ran"), [("1", "-"), (None, _seen_by_a_profiler("_fast_connection", "_fast_frames"))])
def test_no_speed_path_code_runs_under_refwire_reference(value: str | None, ran: str) -> None:
    """Under ``REFWIRE_REFERENCE=1`` a decoder, both machines and the codec's
    functions, built and called without ``fast=``, run no function of the
    ``_fast*`` modules (they are imported, to register themselves, and no more)."""
    env = {k: v for k, v in os.environ.items() if k != "REFWIRE_REFERENCE"}
    if value is not None:
        env["REFWIRE_REFERENCE"] = value
    out = subprocess.run([sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == ran


def test_an_explicit_choice_beats_the_switch() -> None:
    for fast in (False, True):
        assert FrameDecoder(fast=fast).fast is fast
        assert ServerConnection(fast=fast).fast is fast and ServerConnection(fast=fast)._runs is fast
        assert ClientConnection(fast=fast).fast is fast
