"""The Seastar RPC describer (refwire.seastar_rpc.describe) against the spec's vectors
(specs/seastar-rpc/vectors/*.json): every frame described with its type and fields,
any split of a stream described alike, hostile streams described as one error and
then raw bytes, and the LAYOUT agreeing with the codec."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refwire.describe import UNDECODED, Described
from refwire.seastar_rpc import frames as codec
from refwire.seastar_rpc.describe import LAYOUT, describer
from refwire.seastar_rpc.frames import DEFAULT_LIMITS, EOS, MAGIC, Features, Request, Response

VECTOR_DIR = Path(__file__).resolve().parents[1] / "specs" / "seastar-rpc" / "vectors"
MAX = DEFAULT_LIMITS.max_frame_size


def _load(name: str) -> list[dict[str, Any]]:
    vectors: list[dict[str, Any]] = json.loads((VECTOR_DIR / name).read_text())["vectors"]
    return vectors


NEG = _load("negotiation.json")
FRAMES = _load("frames.json")
COMPRESSED = _load("compressed.json")
ERRORS = _load("errors.json")
#: the vector's type -> the described type
TYPES = {"request": "request", "response": "response", "stream": "stream", "eos": "stream-end", "noop": "noop"}


def _negotiations(ctx: dict[str, Any]) -> tuple[bytes, bytes]:
    """The client's offer and the server's reply that give the frame layout of ``ctx``."""
    offer = Features(
        compress=ctx.get("compressor"),
        timeout=bool(ctx.get("timeout")),
        handler_duration=bool(ctx.get("duration")),
        stream_parent=1 if ctx.get("kind") == "stream" else None,
    )
    reply = Features(compress=ctx.get("compressor"), timeout=offer.timeout, handler_duration=offer.handler_duration, connection_id=7)
    return offer.encode(), reply.encode()


def _directions(v: dict[str, Any]) -> list[str]:
    return {"client->server": ["c2s"], "server->client": ["s2c"], "both": ["c2s", "s2c"]}[v["direction"]]


def _connection(ctx: dict[str, Any], direction: str, data: bytes, chunks: list[int] | None = None) -> list[Described]:
    """What ``direction``'s describer makes of ``data`` sent after both negotiation frames
    (cut at ``chunks``, if given), its ``end()`` included, the negotiation left out."""
    offer, reply = _negotiations(ctx)
    session: dict[str, Any] = {}
    c2s, s2c = describer(MAX, "c2s", session), describer(MAX, "s2c", session)
    assert [d.type for d in c2s.feed(offer)] == ["negotiation"]
    assert [d.type for d in s2c.feed(reply)] == ["negotiation"]
    side = c2s if direction == "c2s" else s2c
    out: list[Described] = []
    for piece in _cut(data, chunks or []):
        out += side.feed(piece)
    return out + side.end()


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def _frame_cases() -> list[tuple[str, dict[str, Any], str, dict[str, Any]]]:
    return [(v["name"], v, d, v["context"]) for v in FRAMES + COMPRESSED for d in _directions(v)]


# --------------------------------------------------------------------------- (a) vectors


def _check_fields(d: Described, want: dict[str, Any], ctx: dict[str, Any]) -> None:
    assert d.type == TYPES[want["type"]]
    payload = bytes.fromhex(want.get("payload_hex", ""))
    if want["type"] == "request":
        assert d.fields == {"timeout_ms": want["timeout_ms"], "verb": want["verb"], "msg_id": want["msg_id"], "len": len(payload)}
        assert isinstance(d.frame, Request) and d.frame.payload == payload
    elif want["type"] == "response":
        assert d.fields == {"msg_id": want["msg_id"], "handler_duration": want["handler_duration"], "len": len(payload)}
        assert isinstance(d.frame, Response) and d.frame.payload == payload
    elif want["type"] == "stream":
        assert d.fields == {"len": len(payload)} and d.frame.payload == payload
    else:
        assert d.fields == ({} if want["type"] == "eos" else {"compressor": ctx["compressor"], "clen": len(d.data) - 4, "inflated_len": 0})


@pytest.mark.parametrize(("name", "v", "direction", "ctx"), _frame_cases(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_vector_frame_is_described(name: str, v: dict[str, Any], direction: str, ctx: dict[str, Any]) -> None:
    data = bytes.fromhex(v["hex"])
    got = _connection(ctx, direction, data)
    offer, reply = _negotiations(ctx)
    at = len(offer if direction == "c2s" else reply)
    assert len(got) == len(v["frames"])
    assert b"".join(d.data for d in got) == data  # every byte, in order, each frame's exact bytes
    for d, want in zip(got, v["frames"], strict=True):
        assert d.offset == at
        at += len(d.data)
        if ctx.get("compressor") and want["type"] != "noop":
            assert d.type == "compressed" and d.spans == {"clen": (0, 4)} and len(d.inner) == 1
            assert d.fields == {"compressor": ctx["compressor"], "clen": len(d.data) - 4, "inflated_len": len(d.inner[0].data)}
            inner = d.inner[0]
            assert inner.offset == 0 and inner.spans == {}  # no spans inside an envelope
            _check_fields(inner, want, ctx)
        else:
            _check_fields(d, want, ctx)
            assert d.spans == LAYOUT.spans(_variant(d, ctx))


@pytest.mark.parametrize("v", NEG, ids=lambda v: v["name"])
def test_every_negotiation_vector_is_described(v: dict[str, Any]) -> None:
    data = bytes.fromhex(v["hex"])
    (d,) = describer(MAX, "c2s" if v["direction"] == "client->server" else "s2c").feed(data)
    want = dict(v["frames"][0]["features"])
    if "isolation_hex" in want:
        want["isolation"] = bytes.fromhex(want.pop("isolation_hex"))
    expected = {"compress": None, "timeout": False, "connection_id": None, "stream_parent": None, "isolation": None,
                "handler_duration": False, "unknown": (), **want}
    assert (d.type, d.offset, d.data, d.fields) == ("negotiation", 0, data, expected)
    assert d.spans == {"magic": (0, 8), "len": (8, 4)}


def test_a_request_before_the_reply_is_held_until_the_reply_is_seen() -> None:
    ctx = {"kind": "request", "timeout": True, "duration": True, "compressor": "LZ4"}
    offer, reply = _negotiations(ctx)
    (v,) = [v for v in COMPRESSED if v["name"] == "D8-lz4-of-D3"]
    session: dict[str, Any] = {}
    c2s, s2c = describer(MAX, "c2s", session), describer(MAX, "s2c", session)
    assert [d.type for d in c2s.feed(offer + bytes.fromhex(v["hex"]))] == ["negotiation"]
    assert c2s.held() == len(v["hex"]) // 2 and not session["c2s"].unblocked
    assert [d.type for d in s2c.feed(reply)] == ["negotiation"]
    assert session["c2s"].unblocked
    (d,) = c2s.feed(b"")
    assert (d.type, d.offset, d.inner[0].fields["verb"], c2s.held()) == ("compressed", len(offer), 2, 0)


# --------------------------------------------------------------------------- (b) splits


def _same(d: Described) -> tuple[Any, ...]:
    return (d.type, d.offset, d.data, d.fields, d.frame, d.spans, tuple(map(_same, d.inner)),
            None if d.error is None else (type(d.error), str(d.error)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(_frame_cases()), cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
def test_any_split_describes_as_one_chunk(case: tuple[str, dict[str, Any], str, dict[str, Any]], cuts: list[int]) -> None:
    _, v, direction, ctx = case
    data = bytes.fromhex(v["hex"])
    whole = _connection(ctx, direction, data)
    assert [_same(d) for d in _connection(ctx, direction, data, cuts)] == [_same(d) for d in whole]
    assert UNDECODED not in [d.type for d in whole]


@settings(max_examples=200, deadline=None)
@given(case=st.sampled_from(_frame_cases()), cut=st.integers(min_value=0), cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8))
def test_any_split_of_a_truncated_stream_describes_alike(case: tuple[str, dict[str, Any], str, dict[str, Any]], cut: int, cuts: list[int]) -> None:
    _, v, direction, ctx = case
    data = bytes.fromhex(v["hex"])
    data = data[: cut % len(data)]
    assert [_same(d) for d in _connection(ctx, direction, data, cuts)] == [_same(d) for d in _connection(ctx, direction, data)]


# --------------------------------------------------------------------------- (c) hostile


def _error_stream(v: dict[str, Any]) -> tuple[str, bytes, int]:
    """(direction, the whole stream, the offset of the vector's first byte in it)."""
    ctx = v["context"]
    data = bytes.fromhex(v["hex"])
    if ctx["phase"] == "negotiation":
        return "c2s", data, 0
    offer, reply = _negotiations(ctx)
    return ("c2s", offer + data, len(offer)) if ctx["kind"] == "request" else ("s2c", reply + data, len(reply))


@pytest.mark.parametrize("v", ERRORS, ids=lambda v: v["name"])
def test_a_hostile_stream_is_one_error_then_raw_bytes(v: dict[str, Any]) -> None:
    direction, stream, at = _error_stream(v)
    session: dict[str, Any] = {}
    if v["context"]["phase"] == "frames":  # the peer's negotiation frame, as seen
        offer, reply = _negotiations(v["context"])
        session = {"offer": Features.from_negotiation(_neg(offer)), "reply": Features.from_negotiation(_neg(reply))}
    d = describer(MAX, direction, session)
    got = d.feed(stream)
    got += d.end() if v["eof"] else []
    bad = [x for x in got if x.type == UNDECODED]
    assert len(bad) == 1, got
    (err,) = [x.error for x in bad]
    assert err is not None
    assert (err.field, err.offset) == (v["error"]["field"], at + v["error"]["offset"])
    assert err.frame == v["error"]["frame"]
    good = got[: got.index(bad[0])]
    first = bad[0].offset
    assert first == sum(len(x.data) for x in good) and bad[0].data == stream[first:]
    assert bad[0].fields == {"error": str(err)}
    assert d.held() == 0 and d.end() == []
    more = d.feed(b"\x01\x02\x03")
    assert [(x.type, x.offset, x.data, x.error) for x in more] == [(UNDECODED, len(stream), b"\x01\x02\x03", None)]


def test_a_truncated_request_is_held_and_end_reports_it() -> None:
    offer, _ = _negotiations({"kind": "request", "timeout": True})
    frame = Request(2, 1, b"abcdefgh", 5).encode(with_timeout=True)
    d = describer(MAX, "c2s", {"reply": Features()})
    assert [x.type for x in d.feed(offer + frame + frame[:10])] == ["negotiation", "request"]
    assert d.held() == 10
    (end,) = d.end()
    assert (end.type, end.offset, end.data) == (UNDECODED, len(offer) + len(frame), frame[:10])
    assert end.error is not None and (end.error.field, end.error.frame, end.error.offset) == ("(eof)", "request", len(offer) + len(frame))
    assert d.held() == 0 and d.end() == []


def test_a_corrupted_envelope_is_one_error_naming_its_field() -> None:
    ctx = {"kind": "request", "timeout": True, "compressor": "LZ4"}
    offer, reply = _negotiations(ctx)
    (v,) = [v for v in COMPRESSED if v["name"] == "D8-lz4-of-D3"]
    envelope = bytearray.fromhex(v["hex"])
    envelope[4:8] = (0).to_bytes(4, "little")  # LZ4's declared size of 0 is fatal (§4)
    d = describer(MAX, "c2s", {"reply": Features.from_negotiation(_neg(reply))})
    got = d.feed(offer + bytes.fromhex(v["hex"]) + envelope + b"tail")
    assert [x.type for x in got] == ["negotiation", "compressed", UNDECODED]
    err = got[2].error
    assert err is not None and (err.field, err.offset) == ("uncompressed_size", len(offer) + len(v["hex"]) // 2 + 4)
    assert got[2].data == bytes(envelope) + b"tail"


def test_a_reply_naming_an_unknown_compressor_leaves_the_rest_undecoded() -> None:
    offer = Features(compress="LZ4,LZ4_FRAGMENTED").encode()
    reply = Features(compress="ZSTD").encode()
    session: dict[str, Any] = {}
    c2s, s2c = describer(MAX, "c2s", session), describer(MAX, "s2c", session)
    c2s.feed(offer)
    got = s2c.feed(reply + b"\x04\x00\x00\x00abcd")
    assert [x.type for x in got] == ["negotiation", UNDECODED]
    assert got[1].error is not None and (got[1].error.field, got[1].error.offset) == ("COMPRESS", len(reply))


def _neg(data: bytes) -> codec.Negotiation:
    return codec.decode_negotiation_records(data[12:])


# --------------------------------------------------------------------------- (d) layout


def _variant(d: Described, ctx: dict[str, Any]) -> str:
    if d.type == "request" and not ctx.get("timeout"):
        return "request/no-timeout"
    if d.type == "response" and not ctx.get("duration"):
        return "response/no-duration"
    return d.type


@pytest.mark.parametrize(("name", "v", "direction", "ctx"), _frame_cases(), ids=lambda x: x if isinstance(x, str) else "")
def test_the_layout_reads_what_the_codec_decoded(name: str, v: dict[str, Any], direction: str, ctx: dict[str, Any]) -> None:
    for outer in _connection(ctx, direction, bytes.fromhex(v["hex"])):
        if outer.type in ("compressed", "noop"):
            assert LAYOUT.read(outer.type, outer.data) == {"clen": len(outer.data) - 4} == {"clen": outer.fields["clen"]}
        for d in outer.inner or (outer,):
            if d.type == "noop":
                continue
            variant = _variant(d, ctx)
            if d is outer:
                assert d.spans == LAYOUT.spans(variant)
            read = LAYOUT.read(variant, d.data)
            assert len(d.data) >= LAYOUT.frames[variant].min_size
            if d.type == "request":
                want = {"verb": d.frame.verb, "msg_id": d.frame.msg_id, "len": len(d.frame.payload)}
                assert read == (want | {"timeout_ms": d.frame.timeout_ms} if ctx.get("timeout") else want)
            elif d.type == "response":
                want = {"msg_id": d.frame.msg_id, "len": len(d.frame.payload)}
                assert read == (want | {"handler_duration": d.frame.handler_duration} if ctx.get("duration") else want)
            elif d.type == "stream":
                assert read == {"len": len(d.frame.payload)}
            else:
                assert read == {"len": EOS}


@pytest.mark.parametrize("v", NEG, ids=lambda v: v["name"])
def test_the_layout_reads_the_negotiation_header(v: dict[str, Any]) -> None:
    data = bytes.fromhex(v["hex"])
    (d,) = describer(MAX, "c2s").feed(data)
    assert LAYOUT.read("negotiation", d.data) == {"magic": MAGIC, "len": len(d.data) - 12}
    assert sum(8 + len(rec) for _, rec in d.frame.records) == len(d.data) - 12


def test_every_frame_type_of_the_codec_has_a_layout_entry() -> None:
    names = {"Negotiation": "negotiation", "Request": "request", "Response": "response", "StreamMessage": "stream",
             "StreamEnd": "stream-end", "NoOp": "noop"}
    for cls in typing.get_args(codec.Frame):
        entry = names.get(cls.__name__)
        assert entry in LAYOUT.frames or cls.__name__ in LAYOUT.notes, cls
    assert LAYOUT.byte_order == "little" and "compressed" in LAYOUT.frames
    assert LAYOUT.frames["request"].min_size == 28 and LAYOUT.frames["request/no-timeout"].min_size == 20
    assert LAYOUT.frames["response"].min_size == 16 and LAYOUT.frames["response/no-duration"].min_size == 12


def test_the_proxy_rule_fields_come_from_the_layout() -> None:
    from refwire.chaos.adapters.seastar_rpc import FIELDS

    assert FIELDS == {
        "negotiation": {},
        "request": {"timeout_ms": (0, 8), "verb": (8, 8), "msg_id": (16, 8), "length": (24, 4)},
        "response": {"msg_id": (0, 8), "length": (8, 4)},
        "stream": {"length": (0, 4)},
        "stream-end": {},
        "noop": {},
    }
