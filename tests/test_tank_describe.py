"""TANK's describer and layout (refwire.tank.describe, specs/tank/README.md §2, §3):
every vector frame is described with its type, fields and decoded frame; any
split describes the same; a truncated or corrupted stream gives one undecoded
record naming field and offset, then bytes; the layout reads what the codec decodes."""

from __future__ import annotations

from typing import Any

import pytest
from describing import split_invariant
from hypothesis import given, settings
from hypothesis import strategies as st
from tank_vectors import jsonable, load, unhex

from refwire.describe import UNDECODED, Described
from refwire.errors import ProtocolError
from refwire.tank.describe import LAYOUT, RESPONSE_LAYOUT, describer
from refwire.tank.frames import MSG_NAMES, RESPONSE_IDS, FrameDecoder, decode_request
from refwire.tank.responses import RawProduceResponse, decode_produce_response, decode_response

FRAMES = load("frames.json")
C2S = [v for v in FRAMES if v["direction"] == "c2b"]
S2C = [v for v in FRAMES if v["direction"] == "b2c"]
MAX = 1 << 20


def _dir(v: dict[str, Any]) -> str:
    return "c2s" if v["direction"] == "c2b" else "s2c"


def _stream(vectors: list[dict[str, Any]]) -> bytes:
    return b"".join(unhex(v["hex"]) for v in vectors)


def _describe(chunks: list[bytes], direction: str, max_frame_size: int = MAX) -> list[Described]:
    dsc = describer(max_frame_size, direction)
    out = [d for c in chunks for d in dsc.feed(c)]
    return out + dsc.end()


# --------------------------------------------------------------------------- (a) vectors


@pytest.mark.parametrize("v", FRAMES, ids=[v["name"] for v in FRAMES])
def test_every_vector_frame_is_described_with_its_type_and_fields(v: dict[str, Any]) -> None:
    raw = unhex(v["hex"])
    before = unhex(C2S[0]["hex"]) if v["direction"] == "c2b" else unhex(S2C[-1]["hex"])  # not at offset 0
    [first, d] = _describe([before + raw], _dir(v))
    assert (d.type, d.offset, d.data, d.error) == (MSG_NAMES[raw[0]], len(before), raw, None)
    want = v["fields"]
    assert d.fields["msg_id"] == raw[0] and d.fields["length"] == len(raw) - 5
    assert d.fields.get("request_id") == want.get("request_id")
    frame = d.frame
    if "layout" in v:
        assert isinstance(frame, RawProduceResponse)
        frame = decode_produce_response(frame, [(t, tuple(p)) for t, p in v["layout"]])
    assert jsonable(frame) == want
    layout = LAYOUT if v["direction"] == "c2b" else RESPONSE_LAYOUT
    assert d.spans == layout.spans(d.type)
    assert first.type == MSG_NAMES[before[0]] and first.offset == 0


def test_a_direction_describes_every_frame_in_order_and_holds_nothing() -> None:
    for vectors, direction in ((C2S, "c2s"), (S2C, "s2c")):
        stream = _stream(vectors)
        got = _describe([stream], direction)
        assert [d.type for d in got] == [MSG_NAMES[unhex(v["hex"])[0]] for v in vectors]
        assert b"".join(d.data for d in got) == stream
        assert all(d.error is None and d.frame is not None for d in got)


# --------------------------------------------------------------------------- (b) any split


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["c2s", "s2c"]), st.lists(st.integers(0, 1 << 16), max_size=12), st.integers(0, 3))
def test_any_split_describes_the_same_as_one_chunk(direction: str, cuts: list[int], damage: int) -> None:
    stream = bytearray(_stream(C2S if direction == "c2s" else S2C))
    if damage == 1:
        stream[len(stream) // 2] ^= 0xFF  # somewhere in a frame: a payload that does not decode, or no frame
    elif damage == 2:
        del stream[-3:]  # truncated
    elif damage == 3:
        stream[len(unhex((C2S if direction == "c2s" else S2C)[0]["hex"]))] = 0x0D  # the second frame's msgId
    data = bytes(stream)
    at = sorted({c % (len(data) + 1) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *at], [*at, len(data)], strict=True)]
    whole = _describe([data], direction)
    assert split_invariant(_describe(chunks, direction)) == split_invariant(whole)
    assert b"".join(d.data for d in whole) == data


# --------------------------------------------------------------------------- (c) hostile


def test_a_truncated_stream_ends_in_one_undecoded_record_naming_end_and_offset() -> None:
    stream = _stream(C2S[:3])
    cut = stream[:-4]
    dsc = describer(MAX, "c2s")
    got = dsc.feed(cut)
    assert [d.type for d in got] == ["Produce", "Produce"] and dsc.held() == len(unhex(C2S[2]["hex"])) - 4
    [rest] = dsc.end()
    assert rest.type == UNDECODED and rest.data == cut[got[-1].offset + len(got[-1].data) :]
    assert rest.offset == got[-1].offset + len(got[-1].data)
    assert isinstance(rest.error, ProtocolError) and (rest.error.field, rest.error.offset) == ("(end)", len(cut))
    assert dsc.held() == 0 and dsc.end() == []
    assert [d.type for d in dsc.feed(b"\x03\x00\x00\x00\x00")] == [UNDECODED]  # nothing decodes after it


def test_a_corrupted_msg_id_gives_one_undecoded_record_then_bytes() -> None:
    frames = [unhex(v["hex"]) for v in S2C[:4]]
    bad = bytearray(b"".join(frames))
    at = len(frames[0]) + len(frames[1])
    bad[at] = 0x0D  # no such message id (§3)
    dsc = describer(MAX, "s2c")
    got = dsc.feed(bytes(bad))
    assert [d.type for d in got] == [MSG_NAMES[frames[0][0]], MSG_NAMES[frames[1][0]], UNDECODED]
    undecoded = got[-1]
    assert undecoded.offset == at and undecoded.data == bytes(bad[at:]) and undecoded.frame is None
    assert isinstance(undecoded.error, ProtocolError)
    assert (undecoded.error.field, undecoded.error.offset, undecoded.error.frame) == ("msgId", at, "0x0d")
    [later] = dsc.feed(frames[0])
    assert (later.type, later.offset, later.data, later.error) == (UNDECODED, len(bad), frames[0], None)
    assert dsc.end() == []


def test_a_frame_over_the_limit_ends_the_framing_at_its_header() -> None:
    ping, big = b"\x03\x00\x00\x00\x00", unhex(C2S[0]["hex"])
    dsc = describer(len(big) - 1, "c2s")
    got = dsc.feed(ping + big[:5])  # the header alone decides
    assert [d.type for d in got] == ["Ping", UNDECODED]
    assert got[1].error is not None and (got[1].error.field, got[1].error.offset) == ("length", 5)


def test_a_payload_that_does_not_decode_is_a_frame_with_an_error_and_the_next_frame_follows() -> None:
    raw = bytearray(unhex(next(v for v in C2S if v["name"] == "status")["hex"]))
    raw[1] += 1  # payloadLen one more than the request holds
    raw += b"\x00"
    ping = b"\x03\x00\x00\x00\x00"
    got = _describe([bytes(raw) + ping], "c2s")
    assert [(d.type, d.frame is None) for d in got] == [("Status", True), ("Ping", False)]
    err = got[0].error
    assert isinstance(err, ProtocolError) and err.offset == len(raw) - 1  # the stray byte, at its stream offset
    assert got[0].fields["request_id"] == 1 and got[1].offset == len(raw)


def test_end_reports_held_bytes_and_nothing_when_none() -> None:
    dsc = describer(MAX, "c2s")
    assert dsc.feed(b"\x01\x10") == [] and dsc.held() == 2
    [held] = dsc.end()
    assert (held.type, held.offset, held.data) == (UNDECODED, 0, b"\x01\x10")
    assert held.error is not None and (held.error.field, held.error.offset) == ("(end)", 2)
    assert describer(MAX, "s2c").end() == []


# --------------------------------------------------------------------------- (d) layout = codec


@pytest.mark.parametrize("v", FRAMES, ids=[v["name"] for v in FRAMES])
def test_the_layout_reads_what_the_codec_decodes(v: dict[str, Any]) -> None:
    raw = unhex(v["hex"])
    dec = FrameDecoder(frozenset(MSG_NAMES))
    dec.feed(raw)
    got = dec.next_frame()
    assert got is not None
    msg_id, payload, _ = got
    obj: Any = decode_request(msg_id, payload) if v["direction"] == "c2b" else decode_response(msg_id, payload)
    layout = LAYOUT if v["direction"] == "c2b" else RESPONSE_LAYOUT
    name = MSG_NAMES[msg_id]
    fields = layout.read(name, raw)
    codec = {"msg_id": msg_id, "length": len(payload)}
    if hasattr(obj, "request_id"):
        codec["request_id"] = obj.request_id
    assert fields == codec
    assert len(raw) >= layout.frames[name].min_size


def test_every_message_the_codec_knows_has_a_layout_entry() -> None:
    for layout in (LAYOUT, RESPONSE_LAYOUT):
        assert layout.byte_order == "little"
        for name in MSG_NAMES.values():
            assert name in layout.frames or name in layout.notes
            assert layout.frames[name].type == name
    # a request id where each direction puts it (§3); none where there is none
    assert LAYOUT.spans("Consume")["request_id"] == (7, 4) and RESPONSE_LAYOUT.spans("Consume")["request_id"] == (9, 4)
    assert "request_id" not in LAYOUT.spans("Ping") and "request_id" not in LAYOUT.spans("ReplicaID")
    assert {n for n, f in RESPONSE_LAYOUT.frames.items() if "request_id" in f.spans()} == {
        MSG_NAMES[i] for i in RESPONSE_IDS if MSG_NAMES[i] != "Ping"
    }
    for word in ("varint", "str8", "headerLen", "ProduceWithSeqnum", "ReplicaID", "ConsumePeer"):
        assert word in LAYOUT.notes
