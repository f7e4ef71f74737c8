"""specs/tank/vectors/*.json: every captured frame decodes to its fields and
re-encodes byte for byte; bundles and varints likewise; partial chunks give
the recorded deliveries (specs/tank/README.md §9, §5)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tank_vectors import VECTORS, jsonable, load, unhex

from refwire.tank import decode_bundle, decode_produce_response, decode_request, decode_response, encode_bundle, read_chunk
from refwire.tank.bundles import CODEC_SNAPPY
from refwire.tank.frames import frame
from refwire.wire import decode_uvarint, encode_uvarint

FRAMES = load("frames.json")
BUNDLES = load("bundles.json")
PARTIAL = load("partial_chunks.json")


@pytest.mark.parametrize("v", FRAMES, ids=[v["name"] for v in FRAMES])
def test_frame_vector(v: dict[str, Any]) -> None:
    raw = unhex(v["hex"])
    assert int.from_bytes(raw[1:5], "little") == len(raw) - 5
    if v["direction"] == "c2b":
        obj: Any = decode_request(raw[0], raw[5:])
    else:
        obj = decode_response(raw[0], raw[5:])
        if "layout" in v:
            obj = decode_produce_response(obj, [(t, tuple(p)) for t, p in v["layout"]])
    assert jsonable(obj) == v["fields"]
    assert obj.encode() == raw
    assert "captured" in v["source"]


def test_produce_with_seqnum_is_answered_with_id_1() -> None:
    v = next(v for v in FRAMES if v["name"] == "produce-with-seqnum-response")
    assert unhex(v["hex"])[0] == 0x01


@pytest.mark.parametrize("v", BUNDLES, ids=[v["name"] for v in BUNDLES])
def test_bundle_vector(v: dict[str, Any]) -> None:
    raw = unhex(v["hex"])
    header, msgs = decode_bundle(raw, base_seq=v["base_seq"])
    assert jsonable(header) == v["header"]
    assert jsonable(msgs) == v["messages"]
    # The encoder follows the C++ client's choices, so it reproduces the capture.
    again = encode_bundle(msgs, compress=header.codec == CODEC_SNAPPY, sparse=header.sparse)
    assert again == raw


def test_varint_table() -> None:
    doc = json.loads((VECTORS / "bundles.json").read_text())
    for value, hx in doc["varints"]["values"]:
        assert encode_uvarint(value).hex() == hx
        assert decode_uvarint(bytes.fromhex(hx), 0) == (value, len(hx) // 2)


@pytest.mark.parametrize("v", PARTIAL, ids=[v["name"] for v in PARTIAL])
def test_partial_chunk_vector(v: dict[str, Any]) -> None:
    chunk = unhex(v["chunk"])
    for cut in v["cuts"]:
        r = read_chunk(chunk[: cut["cut"]], base_seq=v["base_seq"], hwmark=v["hwmark"], requested_seq=v["requested_seq"])
        assert [m.seq for m in r.messages] == cut["seqs"], cut
        assert (r.next_seq, r.partial, r.min_fetch_size) == (cut["next_seq"], cut["partial"], cut["min_fetch_size"]), cut


def test_partial_chunk_hand_checked_points() -> None:
    """Independent of the generated file: a few cuts of capture 5 (§9) worked out by hand."""
    chunk = unhex(PARTIAL[0]["chunk"])
    # cut 34: bundle 1 whole (17 bytes); bundle 2 ('alpha' complete at 34), beta/gamma missing.
    r = read_chunk(chunk[:34], base_seq=1, hwmark=6, requested_seq=0)
    assert [m.content for m in r.messages] == [b"hello", b"alpha"] and r.next_seq == 3 and r.partial
    assert r.min_fetch_size == 30  # the whole second entry: 1-byte varint + 29-byte bundle
    # A consumer resuming from 3 gets nothing from the first bundle and skips alpha.
    r = read_chunk(chunk, base_seq=1, hwmark=6, requested_seq=3)
    assert [m.seq for m in r.messages] == [3, 4, 5, 6] and r.next_seq == 7
    # hwmark cuts delivery.
    r = read_chunk(chunk, base_seq=1, hwmark=4, requested_seq=0)
    assert [m.seq for m in r.messages] == [1, 2, 3, 4]
    # The Snappy bundle of capture 9 (§9) cut anywhere yields nothing from it and asks for all 164 bytes.
    snappy = unhex(PARTIAL[2]["chunk"])[32:]
    r = read_chunk(snappy[:1], base_seq=7, hwmark=26, requested_seq=10)
    assert r.partial and r.min_fetch_size > 1  # the length varint itself is cut: an estimate
    for cut in (2, 3, 50, 163):
        r = read_chunk(snappy[:cut], base_seq=7, hwmark=26, requested_seq=10)
        assert r.messages == () and r.partial and r.min_fetch_size == 164 and r.next_seq == 10


def test_frame_helper() -> None:
    assert frame(3, b"") == b"\x03\x00\x00\x00\x00"
