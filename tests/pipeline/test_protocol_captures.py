"""Pravega, TANK and Seastar RPC captures, without Spark: a real session
between refwire's own client and server of each protocol, recorded through the tap,
decodes with no error and no violation; the same recording with a few bytes changed
is flagged by exactly the rule that checks them."""

from __future__ import annotations

import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pipeline_sessions import record_pravega, record_pravega_draft, record_seastar, record_tank

from refwire.pipeline.capture import connection_protocols, decode_capture
from refwire.pipeline.decoders import decode_bytes
from refwire.pipeline.machines import catalog
from refwire.pipeline.rules import check_rows, rules_for

Rows = list[dict[str, Any]]


def rows_of(path: Path) -> Rows:
    return list(decode_capture(None, path))


def broken_copy(src: Path, dest: Path, conn: str, direction: str, edit: Callable[[bytearray], None]) -> Path:
    """A copy of the capture with one stream's bytes edited."""
    shutil.copytree(src, dest)
    f = dest / f"{conn}.{direction}"
    data = bytearray(f.read_bytes())
    edit(data)
    f.write_bytes(bytes(data))
    return dest


def rules_hit(rows: Rows) -> set[str]:
    return {v["rule"] for v in check_rows(rows)}


def first(rows: Rows, direction: str, type_: str, **where: Any) -> dict[str, Any]:
    return next(r for r in rows if r["direction"] == direction and r["type"] == type_ and all(r[k] == v for k, v in where.items()))


GARBAGE = b"\x00\xff\x00\xffnot a frame at all"


def garbage_is_a_decode_error(src: Path, dest: Path, conn: str, rule: str) -> None:
    size = (src / f"{conn}.c2s").stat().st_size
    rows = rows_of(broken_copy(src, dest, conn, "c2s", lambda b: b.extend(GARBAGE)))
    errors = [r for r in rows if r["type"] == "error"]
    assert len(errors) == 1 and errors[0]["conn"] == conn and size <= errors[0]["offset"] < size + 8  # the header field at fault
    clean = [r for r in rows_of(src) if r["conn"] == conn and r["direction"] == "c2s"]
    assert [r for r in rows if r["conn"] == conn and r["direction"] == "c2s" and r["type"] != "error"] == clean  # frames before the bad byte kept
    assert rules_hit(rows) == {rule}


# --------------------------------------------------------------------------- pravega


async def test_pravega_session_decodes_cleanly_and_breaks_are_flagged(tmp_path: Path) -> None:
    cap = tmp_path / "cap"
    seen = await record_pravega(cap)
    assert seen["read"] == seen["written"]
    assert set(connection_protocols(cap).values()) == {"pravega"}
    rows = rows_of(cap)
    assert not [r for r in rows if r["type"] == "error"] and check_rows(rows) == []
    types = {(r["direction"], r["type"]) for r in rows}
    assert {("c2s", "Hello"), ("c2s", "SetupAppend"), ("c2s", "AppendBlockEnd"), ("s2c", "DataAppended"), ("s2c", "SegmentRead")} <= types
    reads = [r for r in rows if r["type"] == "SegmentRead"]
    assert len(reads) >= 5 and all(r["seq"] >= 0 and r["name"] == "scope/stream/0.#epoch.0" for r in reads)

    # A SegmentRead whose offset is not its ReadSegment's.
    read = reads[2]
    seg = read["name"].encode()
    at = read["offset"] + 8 + 2 + len(seg)

    def bump_offset(b: bytearray) -> None:
        (off,) = struct.unpack_from(">q", b, at)
        struct.pack_into(">q", b, at, off + 1)

    broken = rows_of(broken_copy(cap, tmp_path / "offset", read["conn"], "s2c", bump_offset))
    assert rules_hit(broken) == {"PR-READ-OFFSET-ECHOED"}
    (v,) = check_rows(broken)
    assert (v["conn"], v["frame_no"], v["offset"]) == (read["conn"], read["frame_no"], read["offset"])

    # A DataAppended whose previous_event_number skips the previous ack.
    acks = [r for r in rows if r["type"] == "DataAppended"]
    ack = acks[-1]

    def wrong_previous(b: bytearray) -> None:
        struct.pack_into(">q", b, ack["offset"] + 8 + 16 + 8, 5)

    broken = rows_of(broken_copy(cap, tmp_path / "prev", ack["conn"], "s2c", wrong_previous))
    assert rules_hit(broken) == {"PR-ACK-CHAIN"}
    assert [v["frame_no"] for v in check_rows(broken)] == [ack["frame_no"]]

    # A reply to a request id the client never sent.
    setup = first(rows, "s2c", "AppendSetup")
    broken = rows_of(broken_copy(cap, tmp_path / "rid", setup["conn"], "s2c", lambda b: struct.pack_into(">q", b, setup["offset"] + 8, 987654)))
    assert rules_hit(broken) == {"PR-REQUEST-ID-ECHOED"}

    # A client that does not start with Hello: drop its Hello frame (16 bytes).
    broken = rows_of(broken_copy(cap, tmp_path / "hello", "conn00001", "c2s", lambda b: b.__delitem__(slice(0, 16))))
    assert rules_hit(broken) == {"PR-HELLO-FIRST"}

    garbage_is_a_decode_error(cap, tmp_path / "garbage", "conn00002", "PR-DECODES")


# --------------------------------------------------------------------------- pravega 2017 draft


async def test_pravega_draft_session_decodes_with_its_partial_messages(tmp_path: Path) -> None:
    cap = tmp_path / "cap"
    seen = await record_pravega_draft(cap)
    assert seen["read"] == seen["stored"] and seen["level"] == len(seen["stored"])
    assert set(connection_protocols(cap).values()) == {"pravega-draft-2017"}
    rows = rows_of(cap)
    assert not [r for r in rows if r["type"] == "error"]
    types = {(r["direction"], r["type"]) for r in rows}
    assert {("c2s", "SetupAppend"), ("c2s", "BeginAppendBlock"), ("c2s", "Event"), ("c2s", "EndAppendBlock")} <= types
    assert {("s2c", "AppendSetup"), ("s2c", "DataAppended"), ("s2c", "PartialMessage"), ("s2c", "SegmentRead")} <= types
    # a reply sent in parts is one more row, under its Begin part, holding the whole message
    whole = [r for r in rows if r["type"] == "SegmentRead" and r["parent_offset"] is not None]
    assert whole and all(first(rows, "s2c", "PartialMessage", offset=r["parent_offset"], conn=r["conn"]) for r in whole)
    acks = [r["seq"] for r in rows if r["type"] == "DataAppended"]
    assert acks == sorted(acks) and acks[-1] == seen["level"]
    # today's dialect is still told apart from the draft
    v17 = tmp_path / "v17"
    await record_pravega(v17, events=6)
    assert set(connection_protocols(v17).values()) == {"pravega"}


# --------------------------------------------------------------------------- tank


async def test_tank_session_decodes_cleanly_and_breaks_are_flagged(tmp_path: Path) -> None:
    cap = tmp_path / "cap"
    seen = await record_tank(cap)
    assert len(seen["consumed"]) == 30
    rows = rows_of(cap)
    assert not [r for r in rows if r["type"] == "error"] and check_rows(rows) == []
    consumes = [r for r in rows if r["direction"] == "s2c" and r["type"] == "Consume"]
    assert sum(r["count"] for r in consumes) == 30  # every message seen, numbered from the request context
    assert [r["seq"] for r in rows if r["direction"] == "s2c" and r["type"] == "Produce"] == [
        r["seq"] for r in rows if r["direction"] == "c2s" and r["type"] == "Produce"
    ]
    assert first(rows, "s2c", "Ping")["frame_no"] == 0  # the broker's Ping on accept

    # A consume response carrying a request id that was never sent.
    resp = consumes[0]
    broken = rows_of(broken_copy(cap, tmp_path / "rid", resp["conn"], "s2c", lambda b: struct.pack_into("<I", b, resp["offset"] + 5 + 4, 9999)))
    assert rules_hit(broken) == {"TK-RESPONSE-MATCHES-REQUEST"}
    (v,) = check_rows(broken)
    assert (v["frame_no"], v["offset"]) == (resp["frame_no"], resp["offset"])

    # A produce request answered by nobody: cut the stream before the last produce response.
    last_ack = [r for r in rows if r["direction"] == "s2c" and r["type"] == "Produce"][-1]
    after = [r for r in rows if r["direction"] == "s2c" and r["frame_no"] > last_ack["frame_no"] and r["parent_offset"] is None]
    later = after[0]["offset"] if after else None

    def drop_ack(b: bytearray) -> None:
        del b[last_ack["offset"] : later if later is not None else len(b)]

    broken = rows_of(broken_copy(cap, tmp_path / "noack", last_ack["conn"], "s2c", drop_ack))
    assert rules_hit(broken) == {"TK-PRODUCE-ACKED"}

    garbage_is_a_decode_error(cap, tmp_path / "garbage", "conn00001", "TK-DECODES")


def test_tank_server_direction_needs_the_requests() -> None:
    """Without the client's requests a produce response stays raw error bytes (still no error)."""
    from refwire.tank.bundles import Message, encode_bundle
    from refwire.tank.frames import ProducePartition, ProduceRequest, ProduceTopic
    from refwire.tank.responses import ProduceResponse, ProduceResult

    req = ProduceRequest(7, (ProduceTopic("t", (ProducePartition(0, encode_bundle([Message(b"a", 1)])), ProducePartition(1, encode_bundle([Message(b"b", 1)])))),))
    resp = ProduceResponse(7, (ProduceResult("t", 0, 0), ProduceResult("t", 1, 1))).encode()
    with_ctx = decode_bytes("tank", resp, "s2c", peer=req.encode())
    alone = decode_bytes("tank", resp, "s2c")
    assert '"partition":1,"error":1' in with_ctx[0].fields_json and "errors_hex" in alone[0].fields_json


# --------------------------------------------------------------------------- seastar rpc


@pytest.mark.parametrize("compressors", [("LZ4",), ()])
async def test_seastar_session_decodes_cleanly_and_breaks_are_flagged(tmp_path: Path, compressors: tuple[str, ...]) -> None:
    cap = tmp_path / "cap"
    seen = await record_seastar(cap, compressors=compressors)
    assert len(seen["notes"]) == 3 and seen["replies"][-1] == b"last"
    rows = rows_of(cap)
    assert not [r for r in rows if r["type"] == "error"] and check_rows(rows) == []
    requests = [r for r in rows if r["type"] == "request"]
    responses = [r for r in rows if r["type"] == "response"]
    assert len(requests) == len(responses) + 3  # the one-way notes get no reply
    assert {r["name"] for r in requests} == {"1", "2", "3", "4", "99"}
    kinds = {(r["seq"] < 0, r["fields_json"].split('"exception":"')[1].split('"')[0] if r["seq"] < 0 else None) for r in responses}
    assert kinds == {(False, None), (True, "USER"), (True, "UNKNOWN_VERB")}
    if compressors:  # every frame after the negotiation is inside an LZ4 envelope
        envelopes = [r for r in rows if r["type"] == "compressed"]
        assert len(envelopes) == len(requests) + len(responses)
        assert all(r["parent_offset"] is not None and r["offset"] == 0 for r in requests + responses)
        garbage_is_a_decode_error(cap, tmp_path / "garbage", "conn00001", "SS-DECODES")
        return

    # A response whose msg id no request had.
    resp = responses[4]
    broken = rows_of(broken_copy(cap, tmp_path / "mid", resp["conn"], "s2c", lambda b: struct.pack_into("<q", b, resp["offset"], 777)))
    assert rules_hit(broken) == {"SS-RESPONSE-MATCHES-REQUEST"}
    (v,) = check_rows(broken)
    assert (v["frame_no"], v["offset"]) == (resp["frame_no"], resp["offset"])

    # A reply to a one-way note: give a note's msg id to the last reply.
    note = next(r for r in requests if r["name"] == "4")
    last = responses[-1]
    broken = rows_of(broken_copy(cap, tmp_path / "oneway", last["conn"], "s2c", lambda b: struct.pack_into("<q", b, last["offset"], note["seq"])))
    (v,) = check_rows(broken)  # the note was outstanding, so only the one-way rule objects
    assert (v["rule"], v["frame_no"]) == ("SS-NO-REPLY-TO-ONE-WAY", last["frame_no"])


def test_seastar_needs_the_negotiation_frame_first() -> None:
    from refwire.seastar_rpc.frames import Features, Request

    neg = Features(timeout=True).encode()
    server = Features(timeout=True, handler_duration=True).encode()
    call = Request(2, 1, b"hi", 0).encode(with_timeout=True)
    assert [r.type for r in decode_bytes("seastar-rpc", neg + call, "c2s", peer=server)] == ["negotiation", "request"]
    rows = decode_bytes("seastar-rpc", call, "c2s", peer=server)
    assert [r.type for r in rows] == ["error"] and rows[0].offset == 0 and "magic" in (rows[0].error or "")
    rows_d = [dict(protocol="seastar-rpc", conn="c", direction="c2s", frame_no=r.frame_no, offset=r.offset, parent_offset=r.parent_offset,
                   type=r.type, seq=r.seq, name=r.name, fields_json=r.fields_json, error=r.error, ts=None) for r in rows]
    assert {v["rule"] for v in check_rows(rows_d)} == {"SS-DECODES", "SS-NEGOTIATION-FIRST"}


# --------------------------------------------------------------------------- catalogs


def test_catalogs_cover_every_transition_table() -> None:
    from refwire.pravega import connection as pc
    from refwire.seastar_rpc import connection as sc
    from refwire.tank import connection as tc

    for proto, tables in (
        ("pravega", {"client": pc.CLIENT_TRANSITIONS, "server": pc.SERVER_TRANSITIONS}),
        ("tank", {"client": tc.CLIENT_TRANSITIONS, "broker": tc.BROKER_TRANSITIONS}),
        ("seastar-rpc", {"client": sc.CLIENT_TRANSITIONS, "server": sc.SERVER_TRANSITIONS}),
    ):
        cat = catalog(proto)
        assert cat is not None
        want = {f"{m}:{s.value}-{i}->{t.value}" for m, table in tables.items() for (s, i), t in table.items()}
        assert {t.key for t in cat} == want
    assert {p for p in ("lumberjack", "pravega", "pravega-draft-2017", "tank", "seastar-rpc") if rules_for(p)} == {"lumberjack", "pravega", "tank", "seastar-rpc"}


def test_default_campaign_includes_every_protocol() -> None:
    from refwire.pipeline.campaign import resolve_protocols
    from refwire.protocols import names

    assert set(resolve_protocols("all")) == set(names("scenario")) >= {"lumberjack", "pravega", "pravega-draft-2017", "tank", "seastar-rpc"}
