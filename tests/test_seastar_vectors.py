"""The language-neutral Seastar RPC vectors (specs/seastar-rpc/vectors/*.json) run
against refwire's codec and Sans-IO machines.

* negotiation vectors: hex -> features, features -> the same hex (records sorted);
* server decisions: an offer fed to a ServerConnection gives the captured reply byte for byte;
* frame vectors: decode (whole and one byte at a time) and re-encode byte for byte;
* compressed vectors: decode to the inner frames; re-encode byte for byte where
  python-lz4 is known to match Seastar, else compare decompressed content;
* error vectors: RemoteProtocolError naming frame, field and offset; the server sends nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from vector_layers import LAYERS, codec_error, same_error

from refwire.errors import RemoteLimitExceeded, RemoteProtocolError
from refwire.seastar_rpc import (
    DEFAULT_LIMITS,
    NEED_DATA,
    Accept,
    ClientConnection,
    Features,
    FrameDecoder,
    Negotiate,
    Negotiation,
    NegotiationRequested,
    NoOp,
    Request,
    Response,
    ServerConnection,
    StreamEnd,
    StreamMessage,
    UnknownVerb,
    UserError,
    choose_compressor,
    decode_exception,
    envelope,
    make_compressor,
)
from refwire.seastar_rpc.frames import Frame

VECTOR_DIR = Path(__file__).resolve().parents[1] / "specs" / "seastar-rpc" / "vectors"


def _load(name: str) -> dict[str, Any]:
    return json.loads((VECTOR_DIR / name).read_text())


NEG = _load("negotiation.json")
FRAMES = _load("frames.json")
COMPRESSED = _load("compressed.json")
ERRORS = _load("errors.json")


def _features(d: dict[str, Any]) -> Features:
    iso = d.get("isolation_hex")
    return Features(
        compress=d.get("compress"),
        timeout=d.get("timeout", False),
        connection_id=d.get("connection_id"),
        stream_parent=d.get("stream_parent"),
        isolation=None if iso is None else bytes.fromhex(iso),
        handler_duration=d.get("handler_duration", False),
    )


def test_every_vector_names_its_source() -> None:
    for doc in (NEG, FRAMES, COMPRESSED, ERRORS):
        for v in doc["vectors"]:
            assert v["source"].split(":")[0] in ("captured", "derived", "verified", "code"), v["name"]


# --------------------------------------------------------------------------- negotiation


@pytest.mark.parametrize("v", NEG["vectors"], ids=lambda v: v["name"])
def test_negotiation_vector(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    want = _features(v["frames"][0]["features"])
    dec = FrameDecoder("request")
    for i in range(len(raw)):  # one byte at a time
        assert dec.next_frame() is None
        dec.feed(raw[i : i + 1])
    neg = dec.next_frame()
    assert isinstance(neg, Negotiation)
    assert Features.from_negotiation(neg) == want
    assert want.encode() == raw


@pytest.mark.parametrize("case", NEG["server_decisions"], ids=lambda c: c["name"])
def test_server_reply_to_offer_is_byte_exact(case: dict[str, Any]) -> None:
    by_name = {v["name"]: v for v in NEG["vectors"]}
    offer = bytes.fromhex(by_name[case["offer"]]["hex"])
    reply = bytes.fromhex(by_name[case["reply"]]["hex"])
    server = ServerConnection(compressors=case["server"]["compressors"])
    server.receive_data(offer, now=0.0)
    ev = server.next_event()
    assert isinstance(ev, NegotiationRequested)
    server.send(Accept(case["server"]["connection_id"]), now=0.0)
    assert server.data_to_send() == reply
    # ... and a client that made that offer applies the reply.
    client = ClientConnection(
        compressors=tuple(ev.features.compress_names()),
        timeout=ev.features.timeout,
        handler_duration=ev.features.handler_duration,
        isolation=ev.features.isolation,
        stream_parent=ev.features.stream_parent,
    )
    client.send(Negotiate(), now=0.0)
    assert client.data_to_send() == offer
    client.receive_data(reply, now=0.0)
    got = client.next_event()
    assert got.connection_id == case["server"]["connection_id"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("case", NEG["compressor_choice"], ids=lambda c: f"{c['offer']}->{c['chosen']}")
def test_compressor_choice(case: dict[str, Any]) -> None:
    assert choose_compressor(case["offer"], case["server"], multi_algo=case.get("multi_algo", True)) == case["chosen"]


# --------------------------------------------------------------------------- frames


def _decoder(ctx: dict[str, Any]) -> FrameDecoder:
    dec = FrameDecoder(ctx["kind"], negotiation=False)
    comp = ctx.get("compressor")
    dec.configure(timeout=ctx["timeout"], duration=ctx["duration"], compressor=make_compressor(comp) if comp else None)
    return dec


def _expected(f: dict[str, Any]) -> Frame:
    t = f["type"]
    if t == "request":
        return Request(f["verb"], f["msg_id"], bytes.fromhex(f["payload_hex"]), f["timeout_ms"])
    if t == "response":
        return Response(f["msg_id"], bytes.fromhex(f["payload_hex"]), f["handler_duration"])
    if t == "stream":
        return StreamMessage(bytes.fromhex(f["payload_hex"]))
    if t == "eos":
        return StreamEnd()
    assert t == "noop"
    return NoOp(0)


def _decode_all(dec: FrameDecoder, raw: bytes, *, split: bool) -> list[Frame]:
    out: list[Frame] = []
    chunks = [raw[i : i + 1] for i in range(len(raw))] if split else [raw]
    for c in chunks:
        dec.feed(c)
        while (f := dec.next_frame()) is not None:
            out.append(f)
    assert not dec.in_frame
    return out


def _same(got: list[Frame], frames: list[dict[str, Any]]) -> None:
    want = [_expected(f) for f in frames]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if isinstance(w, NoOp):
            assert isinstance(g, NoOp)
        else:
            assert g == w


def _encode(f: Frame, ctx: dict[str, Any]) -> bytes:
    if isinstance(f, Request):
        return f.encode(with_timeout=ctx["timeout"])
    if isinstance(f, Response):
        return f.encode(with_duration=ctx["duration"])
    assert isinstance(f, (StreamMessage, StreamEnd))
    return f.encode()


@pytest.mark.parametrize("split", [False, True], ids=["whole", "bytewise"])
@pytest.mark.parametrize("v", FRAMES["vectors"], ids=lambda v: v["name"])
def test_frame_vector(v: dict[str, Any], split: bool) -> None:
    raw = bytes.fromhex(v["hex"])
    got = _decode_all(_decoder(v["context"]), raw, split=split)
    _same(got, v["frames"])
    assert b"".join(_encode(f, v["context"]) for f in got) == raw
    for f, fd in zip(got, v["frames"], strict=True):
        exc = fd.get("exception")
        if exc is not None:
            assert isinstance(f, Response) and f.is_exception
            err = decode_exception(f.payload)
            if exc["type"] == "USER":
                assert err == UserError(exc["message"].encode())
            else:
                assert err == UnknownVerb(exc["verb"])


@pytest.mark.parametrize("split", [False, True], ids=["whole", "bytewise"])
@pytest.mark.parametrize("v", COMPRESSED["vectors"], ids=lambda v: v["name"])
def test_compressed_vector(v: dict[str, Any], split: bool) -> None:
    raw = bytes.fromhex(v["hex"])
    ctx = v["context"]
    got = _decode_all(_decoder(ctx), raw, split=split)
    _same(got, v["frames"])
    comp = make_compressor(ctx["compressor"])
    real = [f for f in got if not isinstance(f, NoOp)]
    if v["python_lz4_identical"]:
        encoded = b"".join(envelope(comp, _encode(f, ctx)) if not isinstance(f, NoOp) else b"" for f in got)
        if real:
            assert encoded == raw
        else:
            assert envelope(comp, b"") == raw  # the LZ4_FRAGMENTED empty message
    # Whatever the bytes, what we encode decodes back to the same frames.
    again = b"".join(envelope(comp, _encode(f, ctx)) for f in real)
    assert _decode_all(_decoder(ctx), again, split=False) == real


# --------------------------------------------------------------------------- errors


def _server_for(raw: bytes, eof: bool) -> tuple[ServerConnection, list[object]]:
    server = ServerConnection()
    server.receive_data(raw, now=0.0)
    if eof:
        server.receive_data(b"", now=0.0)
    events: list[object] = []
    with pytest.raises(RemoteProtocolError) as info:
        while (ev := server.next_event()) is not NEED_DATA:
            events.append(ev)
    server._error = info.value  # keep the error for the caller's checks
    return server, events


@pytest.mark.parametrize("v", ERRORS["vectors"], ids=lambda v: v["name"])
def test_error_vector(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    ctx = v["context"]
    want = v["error"]
    # ``error.layer``: "codec", the bare FrameDecoder raises this very error;
    # "machine", the decoder takes every byte and only the connection refuses.
    assert want["layer"] in LAYERS
    bare = codec_error("seastar-rpc", raw, v)
    if want["layer"] == "codec":
        assert bare is not None and same_error(bare, want), bare
    else:
        assert bare is None, bare
    if ctx["phase"] == "negotiation":
        server, events = _server_for(raw, v["eof"])
        assert events == []  # nothing decided, so nothing is ever sent back
        err = server._error
    else:
        dec = _decoder(ctx)
        dec.feed(raw)
        with pytest.raises(Exception) as info:
            while dec.next_frame() is not None:
                pass
            if v["eof"]:
                e = dec.eof_error()
                assert e is not None
                raise e
        err = info.value.as_remote()  # type: ignore[attr-defined]
    assert isinstance(err, RemoteProtocolError)
    assert isinstance(err, RemoteLimitExceeded) == want.get("limit", False), err
    assert err.frame == want["frame"], err
    assert err.field == want["field"], err
    assert err.offset == want["offset"], err
    assert DEFAULT_LIMITS.max_decompressed_size < 2**31  # the bomb vectors assume the default limits
