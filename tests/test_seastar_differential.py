"""Seastar RPC's plain path against its speed path (specs/seastar-rpc/README.md).

Every codec and machine of refwire.seastar_rpc takes ``fast=`` (refwire.speed):
``FrameDecoder``, ``ClientConnection``, ``ServerConnection``, ``envelope``.  The
plain path follows the spec's sections; the speed path (``_fast_frames``,
``_fast_connection``, ``_fast_compression``) builds regular frames without the
plain path's calls, opens single-block LZ4 envelopes inline, decodes responses
in runs and delivers them one event at a time, and builds single-block envelopes
in one piece.  Here the same input goes through one built with ``fast=False``
and one with ``fast=True``, and everything observable must be the same: the
frames and events (by value, payload types included), the bytes out
(``data_to_send``), the state, and the errors (class, words, frame, field,
offset):

* every vector of specs/seastar-rpc/vectors, whole, byte by byte and split at
  every byte, through the bare decoder (the speed path's also in runs, as the
  client decodes) and through the machines;
* hypothesis streams of regular and hostile frames in every layout, with and
  without a compressor, against tight limits and a small admission, split
  anyhow (bytes and bytearrays), with and without EOF;
* client sessions (calls, cancels, timers, replies in runs, exceptions, stray
  replies, EOF, resets) and server sessions (offers, requests, replies, errors);
* envelopes of any frame.

And ``fast=False`` / ``REFWIRE_REFERENCE=1`` really take the plain path: no code
of the ``_fast`` modules runs.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import pickle
import random
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import attrs
import lz4.block
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refwire import speed
from refwire.errors import ProtocolError
from refwire.seastar_rpc import (
    NEED_DATA,
    ClientConnection,
    Features,
    FrameDecoder,
    LZ4Compressor,
    LZ4FragmentedCompressor,
    NegotiationRequested,
    Response,
    ServerConnection,
    UnknownVerb,
    UserError,
    envelope,
    make_compressor,
)
from refwire.seastar_rpc.compression import CHUNK_SIZE, Compressor
from refwire.seastar_rpc.events import CallReceived, OversizedCall
from refwire.seastar_rpc.frames import Kind
from refwire.wire import Limits

VECTOR_DIR = Path(__file__).resolve().parents[1] / "specs" / "seastar-rpc" / "vectors"
u32 = struct.Struct("<I").pack
REQ28 = struct.Struct("<QQqI").pack
REQ20 = struct.Struct("<QqI").pack
RSP16 = struct.Struct("<qII").pack
RSP12 = struct.Struct("<qI").pack
LAST = 0x80000000
SMALL = Limits(max_frame_size=64, max_decompressed_size=96, max_string_size=1024, max_buffered=1 << 20)
BIG = Limits(max_frame_size=1 << 20, max_decompressed_size=1 << 20, max_string_size=1024, max_buffered=1 << 22)
DEFAULT = Limits(max_frame_size=64 << 20, max_decompressed_size=64 << 20, max_string_size=64 << 10, max_buffered=64 << 20)


def _load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((VECTOR_DIR / name).read_text())
    return doc


NEG = _load("negotiation.json")
FRAMES = _load("frames.json")["vectors"]
COMPRESSED = _load("compressed.json")["vectors"]
ERRORS = _load("errors.json")["vectors"]


# --------------------------------------------------------------------------- outcomes


def _error(e: ProtocolError) -> tuple[object, ...]:
    return ("error", type(e), str(e), e.frame, e.field, e.offset)


def _decoded(dec: FrameDecoder, parts: Sequence[bytes | bytearray], *, runs: bool, eof: bool) -> list[object]:
    """Every frame (with its payload's type), then the error if any, then the
    decoder's state; ``runs``: regular responses taken a run at a time first."""
    got: list[object] = []
    try:
        for part in parts:
            dec.feed(part)
            while True:
                run = dec.next_responses() if runs else None
                if run is not None:
                    assert len(run) > 0
                    got.extend(("frame", f, type(f.payload)) for f in run.frames())
                    continue
                f = dec.next_frame()
                if f is None:
                    break
                got.append(("frame", f, type(getattr(f, "payload", None))))
        if eof:
            err = dec.eof_error()
            if err is not None:
                raise err
    except ProtocolError as e:
        got.append(_error(e))
    got.append(("state", dec.offset, dec.buffered, dec.in_frame, dec.frame_name()))
    return got


def _same_decoding(make: Callable[[bool], FrameDecoder], parts: Sequence[bytes | bytearray], *, eof: bool) -> list[object]:
    """The plain decoder's outcome; the speed path's, frame by frame and in runs, must equal it."""
    plain = make(False)
    assert not plain.fast
    want = _decoded(plain, parts, runs=False, eof=eof)
    for runs in (False, True):
        fast = make(True)
        assert fast.fast
        assert _decoded(fast, parts, runs=runs, eof=eof) == want, (runs, [len(p) for p in parts])
    return want


def _splits(
    raw: bytes, *, every: bool = True, bytewise: bool = True, randoms: int = 4, seed: int = 0
) -> Iterator[list[bytes | bytearray]]:
    """Whole, byte by byte, at every byte (or a few), and a few random splits (every
    other one as bytearrays)."""
    yield [raw]
    if not raw:
        return
    if bytewise:
        yield [raw[i : i + 1] for i in range(len(raw))]
    cuts = range(1, len(raw)) if every else sorted({1, len(raw) // 2, len(raw) - 1} - {0, len(raw)})
    for i in cuts:
        yield [raw[:i], raw[i:]]
    rnd = random.Random(seed)
    for k in range(randoms):
        points = sorted(rnd.sample(range(len(raw) + 1), min(len(raw) + 1, rnd.randint(1, 6))))
        parts = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
        yield [bytearray(p) for p in parts] if k % 2 else list(parts)


def _decoder_for(ctx: dict[str, Any], limits: Limits = DEFAULT) -> Callable[[bool], FrameDecoder]:
    def make(fast: bool) -> FrameDecoder:
        dec = FrameDecoder(ctx["kind"], limits=limits, negotiation=False, fast=fast)
        comp = ctx.get("compressor")
        dec.configure(
            timeout=ctx["timeout"],
            duration=ctx["duration"],
            compressor=make_compressor(comp) if comp else None,
            discard_over=ctx.get("discard_over"),
        )
        return dec

    return make


# --------------------------------------------------------------------------- machines


def _drain(m: ClientConnection | ServerConnection) -> list[object]:
    """Every event up to NEED_DATA (or the error), then the machine's state and bytes out."""
    seen: list[object] = []
    try:
        while (ev := m.next_event()) is not NEED_DATA:
            seen.append((type(ev).__name__, ev))
    except ProtocolError as e:
        seen.append(_error(e))
    seen.append(("state", m.state, sorted(m.transitions_seen, key=repr), m.data_to_send()))
    return seen


def _server(fast: bool, offer: Features | None, *, admit_len: int | None = None, limits: Limits = DEFAULT) -> ServerConnection:
    """A server, negotiated and accepted when ``offer`` is given."""
    server = ServerConnection(fast=fast, admit_len=admit_len, limits=limits)
    assert server.fast is fast
    if offer is not None:
        server.receive_data(offer.encode(), now=0.0)
        ev = server.next_event()
        assert isinstance(ev, NegotiationRequested)
        server.accept(connection_id=(1 << 16) if offer.stream_parent is None else (2 << 16), now=0.0)
        server.data_to_send()
    return server


def _client(
    fast: bool,
    comp: str | None,
    *,
    duration: bool,
    calls: Sequence[float | None] = (),
    stream: bool = False,
    limits: Limits = DEFAULT,
) -> ClientConnection:
    """A client that made ``calls`` (their timeouts) and got the server's reply."""
    client = ClientConnection(
        compressors=(comp,) if comp else (),
        handler_duration=duration,
        timeout=False,
        stream_parent=7 if stream else None,
        limits=limits,
        fast=fast,
    )
    assert client.fast is fast
    client.initiate(now=0.0)
    for t in calls:
        client.call(5, b"ask", now=0.0, timeout=t)
    client.receive_data(Features(compress=comp, handler_duration=duration, connection_id=9).encode(), now=0.0)
    assert type(client.next_event()).__name__ == "Negotiated"
    return client


def _machine_for(ctx: dict[str, Any]) -> Callable[[bool], ClientConnection | ServerConnection]:
    """The machine that receives a frame vector's bytes, negotiated to its layout."""
    comp = ctx.get("compressor")

    def make(fast: bool) -> ClientConnection | ServerConnection:
        if ctx["kind"] == "request":
            return _server(fast, Features(compress=comp, timeout=ctx["timeout"], handler_duration=ctx["duration"]))
        stream = ctx["kind"] == "stream"
        return _client(fast, comp, duration=ctx["duration"], calls=[] if stream else [None, None, 2.0], stream=stream)

    return make


def _same_machines(
    make: Callable[[bool], ClientConnection | ServerConnection], parts: Sequence[bytes | bytearray], *, eof: bool
) -> list[object]:
    outs = []
    for fast in (False, True):
        m = make(fast)
        seen: list[object] = []
        for part in parts:
            if part:  # (b"" is EOF)
                m.receive_data(part, now=1.0)
                seen.extend(_drain(m))
        if eof:
            m.receive_data(b"", now=1.0)
            seen.extend(_drain(m))
        if isinstance(m, ServerConnection):  # answer what came: the replies' bytes
            for item in list(seen):
                ev = item[1] if isinstance(item, tuple) else None
                if isinstance(ev, CallReceived) and m.reply_wanted(ev, now=1.0):
                    m.respond(ev, ev.payload + b"!", now=1.0)
                    m.respond_unknown_verb(ev, now=1.0)
                elif isinstance(ev, OversizedCall) and m.reply_wanted(ev, now=1.0):
                    m.respond_oversized(ev, estimate=ev.length, max_memory=1, now=1.0)
            seen.append(("replies", m.data_to_send()))
        outs.append(seen)
    assert outs[1] == outs[0]
    return outs[0]


# --------------------------------------------------------------------------- vectors


@pytest.mark.parametrize("v", FRAMES + COMPRESSED, ids=lambda v: v["name"])
def test_frame_and_compressed_vectors_alike(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    ctx = v["context"]
    for parts in _splits(raw, seed=len(raw)):
        out = _same_decoding(_decoder_for(ctx), parts, eof=True)
        assert out[-1] == ("state", len(raw), 0, False, "compressed" if ctx.get("compressor") else ctx["kind"])
        _same_machines(_machine_for(ctx), parts, eof=True)
    # the same frames against tight limits, and (requests) a small admission
    for limits in (SMALL, Limits(max_frame_size=8, max_decompressed_size=8)):
        _same_decoding(_decoder_for(ctx, limits), [raw], eof=True)
    if ctx["kind"] == "request":
        for discard_over in (0, 3, 8):
            for parts in _splits(raw, every=False):
                _same_decoding(_decoder_for({**ctx, "discard_over": discard_over}), parts, eof=True)


@pytest.mark.parametrize("v", ERRORS, ids=lambda v: v["name"])
def test_error_vectors_alike(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    ctx = v["context"]
    for parts in _splits(raw, seed=len(raw)):
        if ctx["phase"] == "negotiation":
            out = _same_decoding(lambda fast: FrameDecoder("request", fast=fast), parts, eof=v["eof"])
            _same_machines(lambda fast: _server(fast, None), parts, eof=v["eof"])
        else:
            out = _same_decoding(_decoder_for(ctx), parts, eof=v["eof"])
            got = _same_machines(_machine_for(ctx), parts, eof=v["eof"])
            assert any(isinstance(x, tuple) and x[0] == "error" for x in got)
        if v["error"]["layer"] == "codec":
            err = out[-2]
            assert isinstance(err, tuple) and err[0] == "error", out
            assert (err[3], err[4], err[5]) == (v["error"]["frame"], v["error"]["field"], v["error"]["offset"])


@pytest.mark.parametrize("v", NEG["vectors"], ids=lambda v: v["name"])
def test_negotiation_vectors_alike(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    kind: Kind = "request" if v["direction"] == "client->server" else "response"

    def make(fast: bool) -> FrameDecoder:
        return FrameDecoder(kind, fast=fast)

    for parts in _splits(raw, seed=len(raw)):
        for eof in (False, True):
            _same_decoding(make, parts, eof=eof)
        if kind == "request":
            _same_machines(lambda fast: _server(fast, None), parts, eof=False)


@pytest.mark.parametrize("case", NEG["server_decisions"], ids=lambda c: c["name"])
def test_server_decisions_alike(case: dict[str, Any]) -> None:
    by_name = {v["name"]: v for v in NEG["vectors"]}
    offer = bytes.fromhex(by_name[case["offer"]]["hex"])
    reply = bytes.fromhex(by_name[case["reply"]]["hex"])
    outs = []
    for fast in (False, True):
        server = ServerConnection(compressors=case["server"]["compressors"], fast=fast)
        server.receive_data(offer, now=0.0)
        ev = server.next_event()
        assert isinstance(ev, NegotiationRequested)
        server.accept(connection_id=case["server"]["connection_id"], now=0.0)
        assert server.data_to_send() == reply
        f = ev.features
        client = ClientConnection(
            compressors=f.compress_names(),
            timeout=f.timeout,
            handler_duration=f.handler_duration,
            isolation=f.isolation,
            stream_parent=f.stream_parent,
            fast=fast,
        )
        client.initiate(now=0.0)
        if f.stream_parent is None:
            client.call(3, b"x" * 40, now=0.0, timeout=1.0)
        sent = client.data_to_send()
        client.receive_data(reply, now=0.0)
        outs.append((ev, sent, _drain(client), _drain(server)))
    assert outs[1] == outs[0]


# --------------------------------------------------------------------------- hypothesis streams

Layout = tuple[Kind, bool, bool, str | None, Limits, int | None]


@st.composite
def _layouts(draw: st.DrawFn) -> Layout:
    kind: Kind = draw(st.sampled_from(["request", "response", "response", "stream"]))
    timeout, duration = draw(st.booleans()), draw(st.booleans())
    comp = draw(st.sampled_from([None, "LZ4", "LZ4_FRAGMENTED"]))
    limits = draw(st.sampled_from([SMALL, BIG]))
    discard_over = draw(st.sampled_from([None, None, 2, 30])) if kind == "request" else None
    return kind, timeout, duration, comp, limits, discard_over


def _frame(layout: Layout, msg_id: int, payload: bytes, *, declared: int | None = None) -> bytes:
    kind, timeout, duration = layout[:3]
    n = len(payload) if declared is None else declared
    if kind == "request":
        return (REQ28(1000, 2, msg_id, n) if timeout else REQ20(2, msg_id, n)) + payload
    if kind == "response":
        return (RSP16(msg_id, n, 7) if duration else RSP12(msg_id, n)) + payload
    return u32(n) + payload


def _wrap(comp: str | None, inner: bytes) -> bytes:
    return inner if comp is None else envelope(make_compressor(comp), inner, fast=False)


def _raw_env(comp: str, payload: bytes, declared: int) -> bytes:
    """An envelope around any block, declaring any size."""
    word = declared | (LAST if comp == "LZ4_FRAGMENTED" else 0)
    return u32(len(payload) + 4) + u32(word) + payload


#: What a stream's frame may be: regular, else anything the speed path must hand to
#: the plain path or refuse alike; the second list only inside envelopes.
PIECES = ["ok", "zero", "negative", "over", "lying", "garbage", "eos", "big"]
ENVELOPE_PIECES = ["trailing", "short", "block", "noop", "mismatch", "ratio"]
_BIG = b"big " * (CHUNK_SIZE // 4 + 60)
_EXCEPTIONS = (UserError(b"boom").encode(), UnknownVerb(9).encode(), b"\x07\x00\x00\x00\x01")


def _piece(layout: Layout, what: str, payload: bytes, k: int) -> bytes:
    """One frame of kind ``what`` in ``layout``; ``k`` (0..) varies what the kind leaves open."""
    kind, _timeout, _duration, comp, limits = layout[:5]
    if what in ("ok", "zero", "negative"):
        msg_id = {"ok": 1 + k if k < 12 else 2**63 - k, "zero": 0, "negative": -1 - k % 12}[what]
        if what == "negative" and kind == "response":
            payload = _EXCEPTIONS[k % 3]
        return _wrap(comp, _frame(layout, msg_id, payload))
    if what == "over":  # at the frame limit and one past it, with or without the data
        n = limits.max_frame_size + k % 2
        return _wrap(comp, _frame(layout, 1, b"o" * n if k % 4 < 2 else b"", declared=n))
    if what == "lying":  # a len past the (compressed) frame's end
        return _wrap(comp, _frame(layout, 2, payload, declared=len(payload) + 1 + k % 3))
    if what == "garbage":
        return (payload + bytes([k % 256]) * 24)[: 1 + k % 24]
    if what == "eos":
        return _wrap(comp, u32(0xFFFFFFFF))
    if what == "big":  # over one LZ4_FRAGMENTED chunk: several chunks (the plain path's)
        return _wrap(comp, _frame(layout, 3, _BIG[: CHUNK_SIZE - 20 + k % 220]))
    assert comp is not None
    inner = _frame(layout, 3, payload)
    if what == "trailing":
        return _wrap(comp, inner + b"tail"[: 1 + k % 4])
    if what == "short":
        return _wrap(comp, inner[: 1 + k % (len(inner) - 1)])
    if what == "block":
        return _raw_env(comp, (payload + b"\xff" * 12)[: 1 + k % 12], 1 + k % 40)
    if what == "noop":  # 00 00 00 00 (§4), a payload under 4 bytes, or LZ4_FRAGMENTED's empty frame
        return (u32(0), u32(2) + b"\x00\x00", envelope(LZ4FragmentedCompressor(), b"", fast=False))[k % 3]
    block = lz4.block.compress(inner, store_size=False)
    if what == "ratio":  # at LZ4's maximum expansion and one past it (§6)
        return _raw_env(comp, block, 255 * len(block) + 16 + k % 2)
    assert what == "mismatch"
    return _raw_env(comp, block, len(inner) + (-1, 1)[k % 2])


@st.composite
def _pieces(draw: st.DrawFn, layout: Layout) -> bytes:
    """One frame of a stream, mostly regular."""
    what = draw(st.sampled_from(["ok"] * 6 + PIECES + (ENVELOPE_PIECES if layout[3] else [])))
    return _piece(layout, what, draw(st.binary(max_size=40)), draw(st.integers(0, 300)))


@st.composite
def _streams(draw: st.DrawFn) -> tuple[Layout, list[bytes | bytearray], bool]:
    layout = draw(_layouts())
    raw = b"".join(draw(st.lists(_pieces(layout), max_size=8)))
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=5)))
    parts: list[bytes | bytearray] = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    if draw(st.booleans()):
        parts = [bytearray(p) for p in parts]
    return layout, parts, draw(st.booleans())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_streams())
def test_streams_decode_alike(case: tuple[Layout, list[bytes | bytearray], bool]) -> None:
    (kind, timeout, duration, comp, limits, discard_over), parts, eof = case
    ctx = {"kind": kind, "timeout": timeout, "duration": duration, "compressor": comp, "discard_over": discard_over}
    _same_decoding(_decoder_for(ctx, limits), parts, eof=eof)


def _layout_cases() -> Iterator[Layout]:
    """Every layout (the timeout field is a request's, the duration a response's)."""
    kind: Kind
    for kind, timeout, duration in (
        ("request", False, False),
        ("request", True, False),
        ("response", False, False),
        ("response", False, True),
        ("stream", False, False),
    ):
        for comp in (None, "LZ4", "LZ4_FRAGMENTED"):
            for limits in (SMALL, BIG):
                for discard_over in (None, 2, 30) if kind == "request" else (None,):
                    yield kind, timeout, duration, comp, limits, discard_over


def _layout_id(layout: Layout) -> str:
    kind, timeout, duration, comp, limits, discard_over = layout
    return f"{kind}-t{timeout:d}-d{duration:d}-{comp}-{'small' if limits is SMALL else 'big'}-admit{discard_over}"


@pytest.mark.parametrize("layout", list(_layout_cases()), ids=_layout_id)
def test_every_kind_of_frame_decodes_alike(layout: Layout) -> None:
    """Each kind of frame, between regular ones, in every layout: whole, at a few splits, and at EOF."""
    kind, timeout, duration, comp, limits, discard_over = layout
    ctx = {"kind": kind, "timeout": timeout, "duration": duration, "compressor": comp, "discard_over": discard_over}
    make = _decoder_for(ctx, limits)
    for what in PIECES + (ENVELOPE_PIECES if comp else []):
        for k, payload in enumerate((b"", b"abc", bytes(range(40)))[: 1 if what == "big" else 3]):
            ok = _piece(layout, "ok", payload, k)
            raw = ok + _piece(layout, what, payload, k) + ok + ok + _piece(layout, what, payload, k + 1) + ok
            for parts in _splits(raw, every=False, bytewise=False, randoms=2, seed=k):
                _same_decoding(make, parts, eof=True)


# --------------------------------------------------------------------------- machine sessions

Op = tuple[Any, ...]


@st.composite
def _client_sessions(draw: st.DrawFn) -> tuple[str | None, bool, list[float | None], list[Op]]:
    comp = draw(st.sampled_from([None, "LZ4", "LZ4_FRAGMENTED"]))
    duration = draw(st.booleans())
    timeouts = draw(st.lists(st.sampled_from([None, 1.0, 2.0, 3.0]), max_size=8))
    layout: Layout = ("response", False, duration, comp, BIG, None)
    raw = b"".join(draw(st.lists(_pieces(layout), max_size=12)))
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=4)))
    ops: list[Op] = []
    for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True):
        if b > a:  # (b"" is EOF)
            ops.append(("data", raw[a:b]))
        for _ in range(draw(st.integers(0, 6))):
            ops.append(
                draw(
                    st.sampled_from(
                        [("event",)] * 4
                        + [
                            ("cancel", draw(st.integers(1, 9))),
                            ("timer", draw(st.sampled_from([1.5, 2.5, 9.0]))),
                            ("call", draw(st.binary(max_size=40)), draw(st.sampled_from([None, 0.5, 5.0])), draw(st.booleans())),
                        ]
                    )
                )
            )
    ops.append(draw(st.sampled_from([("eof",), ("reset",), ("event",)])))
    ops.extend([("event",)] * 40)
    return comp, duration, timeouts, ops


def _play(m: ClientConnection | ServerConnection, ops: list[Op]) -> list[object]:
    seen: list[object] = []
    last: list[CallReceived | OversizedCall] = []
    for op in ops:
        try:
            if op[0] == "data":
                m.receive_data(op[1], now=1.0)
            elif op[0] == "event":
                ev = m.next_event()
                seen.append((type(ev).__name__, attrs.asdict(ev) if attrs.has(type(ev)) else None))
                if isinstance(ev, (CallReceived, OversizedCall)):
                    last.append(ev)
            elif op[0] == "cancel":
                assert isinstance(m, ClientConnection)
                m.cancel(op[1])
            elif op[0] == "timer":
                m.handle_timer(now=op[1])
            elif op[0] == "call":
                assert isinstance(m, ClientConnection)
                m.call(4, op[1], now=1.0, timeout=op[2], one_way=op[3])
            elif op[0] == "respond":
                assert isinstance(m, ServerConnection)
                if last:
                    call = last.pop(0)
                    if isinstance(call, OversizedCall):
                        m.respond_oversized(call, estimate=call.length, max_memory=1, now=op[2])
                    elif op[3]:
                        m.respond_error(call, UserError(op[1]), now=op[2])
                    else:
                        m.respond(call, op[1], now=op[2], handler_duration=len(op[1]))
            elif op[0] == "eof":
                m.receive_data(b"", now=1.0)
            else:
                m.connection_lost(now=1.0)
        except ProtocolError as e:
            seen.append(_error(e))
        pending = m.pending if isinstance(m, ClientConnection) else ()
        seen.append((m.state, pending, sorted(m.transitions_seen, key=repr), m.data_to_send(), m.next_deadline()))
    return seen


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_client_sessions())
def test_client_sessions_alike(case: tuple[str | None, bool, list[float | None], list[Op]]) -> None:
    comp, duration, timeouts, ops = case
    plain = _play(_client(False, comp, duration=duration, calls=timeouts), ops)
    assert _play(_client(True, comp, duration=duration, calls=timeouts), ops) == plain


@pytest.mark.parametrize("comp", [None, "LZ4", "LZ4_FRAGMENTED"])
@pytest.mark.parametrize("duration", [False, True])
def test_a_run_of_replies_with_cancels_timers_and_strays_alike(comp: str | None, duration: bool) -> None:
    """Replies to pending, cancelled, timed-out, never-issued (the next id among
    them) and no ids, exceptions between them, cancels and timers between the
    events of one run, then a lone reply, EOF inside a frame."""
    layout: Layout = ("response", False, duration, comp, BIG, None)
    replies = [_piece(layout, "ok", b"r%d" % i, i - 1) for i in (1, 2, 3, 5, 6, 4, 9, 10, 11)]  # 11: the next id
    replies.insert(4, _piece(layout, "zero", b"zero", 0))
    replies.insert(6, _piece(layout, "negative", b"", 7))  # -8: call 8 fails
    lone = _piece(layout, "ok", b"lone", 6)
    ops: list[Op] = [
        ("data", b"".join(replies)),
        ("event",),
        ("cancel", 2),
        ("event",),
        ("timer", 2.5),
        ("event",),
        ("call", b"more", None, False),
        *[("event",)] * 8,
        ("data", lone + lone[:3]),
        *[("event",)] * 3,
        ("eof",),
        *[("event",)] * 3,
    ]
    timeouts: list[float | None] = [None, None, 2.0, None, 3.0, None, 1.0, None, None]
    plain = _play(_client(False, comp, duration=duration, calls=timeouts), ops)
    assert _play(_client(True, comp, duration=duration, calls=timeouts), ops) == plain
    names = [x[0] for x in plain if isinstance(x, tuple) and isinstance(x[0], str)]
    assert {"Reply", "StrayReply", "CallFailed", "CallTimedOut"} <= set(names), names


@st.composite
def _server_sessions(draw: st.DrawFn) -> tuple[Features, int | None, Limits, list[Op]]:
    comp = draw(st.sampled_from([None, "LZ4", "LZ4_FRAGMENTED"]))
    offer = Features(compress=comp, timeout=draw(st.booleans()), handler_duration=draw(st.booleans()))
    admit_len = draw(st.sampled_from([None, 2, 30]))
    limits = draw(st.sampled_from([SMALL, BIG]))
    layout: Layout = ("request", offer.timeout, offer.handler_duration, comp, limits, admit_len)
    raw = b"".join(draw(st.lists(_pieces(layout), max_size=10)))
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=4)))
    ops: list[Op] = []
    for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True):
        if b > a:
            ops.append(("data", raw[a:b]))
        for _ in range(draw(st.integers(0, 6))):
            ops.append(
                draw(
                    st.sampled_from(
                        [("event",)] * 3
                        + [
                            (
                                "respond",
                                draw(st.binary(max_size=60)),
                                draw(st.sampled_from([1.0, 1.5, 5000.0])),
                                draw(st.booleans()),
                            )
                        ]
                    )
                )
            )
    ops.append(draw(st.sampled_from([("eof",), ("reset",), ("event",)])))
    ops.extend([("event",)] * 30)
    return offer, admit_len, limits, ops


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_server_sessions())
def test_server_sessions_alike(case: tuple[Features, int | None, Limits, list[Op]]) -> None:
    offer, admit_len, limits, ops = case
    plain = _play(_server(False, offer, admit_len=admit_len, limits=limits), ops)
    assert _play(_server(True, offer, admit_len=admit_len, limits=limits), ops) == plain


# --------------------------------------------------------------------------- envelopes


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["LZ4", "LZ4_FRAGMENTED", "independent"]),
    st.binary(max_size=64) | st.integers(0, 3 * CHUNK_SIZE).map(lambda n: (b"refwire " * (n // 8 + 1))[:n]),
)
def test_envelopes_alike(name: str, frame: bytes) -> None:
    comp: Compressor = LZ4FragmentedCompressor(dependent=False) if name == "independent" else make_compressor(name)
    outs: list[object] = []
    for fast in (False, True):
        try:
            outs.append(envelope(comp, frame, fast=fast))
        except ProtocolError as e:
            outs.append(_error(e))
    assert outs[1] == outs[0]
    assert type(outs[1]) is type(outs[0])


# --------------------------------------------------------------------------- the plain path is the plain path


#: The speed modules a profiler sees run: a compiled one's functions (setup.py) do not show.
_FAST_FILES = tuple(
    f"{m}.py"
    for m in ("_fast_frames", "_fast_connection", "_fast_compression")
    if str(importlib.import_module(f"refwire.seastar_rpc.{m}").__file__).endswith(".py")
)


def _fast_code_run(body: Callable[[], object]) -> set[str]:
    """The ``_fast`` modules whose code ran while ``body`` did."""
    ran: set[str] = set()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        name = os.path.basename(frame.f_code.co_filename)
        if event == "call" and name in _FAST_FILES:
            ran.add(name)

    sys.setprofile(profile)
    try:
        body()
    finally:
        sys.setprofile(None)
    return ran


def _everything(fast: bool | None) -> None:
    """A compressed client and server session with runs of replies, and an envelope."""
    for comp in ("LZ4", "LZ4_FRAGMENTED", None):
        client = ClientConnection(compressors=(comp,) if comp else (), fast=fast)
        server = ServerConnection(fast=fast)
        client.initiate(now=0.0)
        ids = [client.call(1, b"x" * i, now=0.0) for i in range(6)]
        server.receive_data(client.data_to_send(), now=0.0)
        assert isinstance(server.next_event(), NegotiationRequested)
        server.accept(now=0.0)
        client.receive_data(server.data_to_send(), now=0.0)
        assert type(client.next_event()).__name__ == "Negotiated"
        server.receive_data(client.data_to_send(), now=0.0)
        while isinstance(call := server.next_event(), CallReceived):
            server.respond(call, call.payload, now=0.0)
        client.receive_data(server.data_to_send(), now=0.0)
        assert [getattr(client.next_event(), "msg_id", None) for _ in ids] == ids
        if comp:
            envelope(LZ4Compressor(), b"frame", fast=fast)


def test_fast_false_runs_no_speed_path_code() -> None:
    assert _fast_code_run(lambda: _everything(False)) == set()
    assert _fast_code_run(lambda: _everything(True)) == set(_FAST_FILES)
    assert _fast_code_run(lambda: _everything(None)) == (set() if speed.REFERENCE else set(_FAST_FILES))


_WHICH_PATH = """
from refwire.seastar_rpc import ClientConnection, FrameDecoder, ServerConnection, envelope_function
def path(fn):
    return "fast" if "._fast" in fn.__module__ else "plain"
d = FrameDecoder("response")
c = ClientConnection()
s = ServerConnection()
print(d.fast, c.fast, s.fast, c._decoder.fast, s._decoder.fast,
      path(type(d)), path(type(c._decoder)), path(c._pump_path), path(c._envelope), path(s._envelope), path(envelope_function()))
"""


@pytest.mark.parametrize("value", [None, "1"])
def test_refwire_reference_selects_the_plain_path(value: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != speed.ENVIRONMENT_VARIABLE}
    if value is not None:
        env[speed.ENVIRONMENT_VARIABLE] = value
    out = subprocess.run([sys.executable, "-c", _WHICH_PATH], env=env, capture_output=True, text=True, timeout=60, check=True)
    if value is None:
        assert out.stdout.split() == ["True"] * 5 + ["fast"] * 6
    else:
        assert out.stdout.split() == ["False"] * 5 + ["plain"] * 6


@pytest.mark.parametrize("fast", [False, True])
def test_a_copied_or_pickled_decoder_keeps_its_path(fast: bool) -> None:
    dec = FrameDecoder("response", negotiation=False, fast=fast)
    dec.configure(compressor=LZ4Compressor())
    raw = envelope(LZ4Compressor(), RSP12(1, 2) + b"ab", fast=False)
    dec.feed(raw[:-1])
    for again in (copy.deepcopy(dec), pickle.loads(pickle.dumps(dec))):
        assert type(again) is type(dec) and again.fast is fast and again.buffered == len(raw) - 1
        again.feed(raw[-1:])
        assert again.next_frame() == Response(1, b"ab", None)
