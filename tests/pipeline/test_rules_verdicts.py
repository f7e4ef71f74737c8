"""The capture pipeline's conformance rules, one rule at a time.

For every rule of every protocol: a small frames table (rows with the
pipeline's own columns, :data:`~refwire.pipeline.decoders.FRAME_COLUMNS`)
with one planted violation gives exactly that violation, and its clean twin
gives nothing.  The rules with a pure-Python twin run through
:func:`~refwire.pipeline.rules.check_rows`, as captures are checked without
Spark; Lumberjack's ordering rules exist only as DataFrame queries, so they
(and the DataFrame forms of the other protocols' rules, which must say what
their twins say) run in one test on the shared Spark session.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs
import orjson
import pytest

from refwire.pipeline.decoders import FRAME_COLUMNS
from refwire.pipeline.dialects.lumberjack import check_acks
from refwire.pipeline.rulekit import Rule, check_decodes, fields, not_before, ordered
from refwire.pipeline.rules import VIOLATION_COLUMNS, check_rows, rules_for

Row = dict[str, Any]
COLUMNS = [name for name, _ in FRAME_COLUMNS]


def row(
    protocol: str,
    direction: str,
    frame_no: int,
    type: str,
    *,
    conn: str = "conn1",
    offset: int | None = None,
    seq: int | None = None,
    count: int | None = None,
    name: str | None = None,
    parent_offset: int | None = None,
    error: str | None = None,
    ts: float | None = None,
    fj: dict[str, Any] | None = None,
    **fields_: Any,
) -> Row:
    """One frames-table row (every column of FRAME_COLUMNS); ``fj`` and other keywords go to fields_json."""
    r: Row = {
        "protocol": protocol,
        "conn": conn,
        "direction": direction,
        "frame_no": frame_no,
        "offset": 10 * frame_no if offset is None else offset,
        "parent_offset": parent_offset,
        "type": type,
        "size": 8,
        "seq": seq,
        "count": count,
        "name": name,
        "fields_json": orjson.dumps({**(fj or {}), **fields_}).decode(),
        "error": error,
        "ts": ts,
    }
    assert list(r) == COLUMNS
    return r


def violations(rows: Iterable[Row], protocol: str | None = None) -> list[tuple[str, str, int, int, str]]:
    return [(v["rule"], v["direction"], v["frame_no"], v["offset"], v["detail"]) for v in check_rows(list(rows), protocol)]


# --------------------------------------------------------------------------- Pravega

PR = "pravega"


def pr(direction: str, frame_no: int, type: str, **kw: Any) -> Row:
    return row(PR, direction, frame_no, type, **kw)


HELLO = pr("c2s", 0, "Hello", seq=None)
PR_CASES: dict[str, tuple[list[Row], list[Row], list[tuple[str, str, int, int, str]]]] = {
    # rule: (planted, clean twin, the violations of the planted table)
    "PR-DECODES": (
        [HELLO, pr("c2s", 1, "error", offset=13, error="bad command type 99"), pr("s2c", 0, "error", offset=0)],
        [HELLO, pr("s2c", 0, "Hello")],
        [("PR-DECODES", "c2s", 1, 13, "bad command type 99"), ("PR-DECODES", "s2c", 0, 0, "decode error")],
    ),
    "PR-HELLO-FIRST": (
        [pr("c2s", 1, "Hello"), pr("c2s", 0, "SetupAppend", seq=None)],
        # a row inside another frame is no command of the client's own, wherever it is numbered
        [pr("c2s", 0, "SetupAppend", offset=5, parent_offset=9), pr("c2s", 1, "Hello"), pr("c2s", 2, "SetupAppend")],
        [("PR-HELLO-FIRST", "c2s", 0, 0, "the client's first command is SetupAppend, not Hello")],
    ),
    "PR-REQUEST-ID-ECHOED": (
        [
            HELLO,
            pr("c2s", 1, "SetupAppend", seq=5, ts=2.0),
            pr("s2c", 0, "SegmentCreated", seq=7, ts=3.0),  # never sent
            pr("s2c", 1, "SegmentCreated", seq=5, ts=1.0),  # sent, but after this reply
            pr("c2s", 2, "ReadSegment", seq=8, name="s", ts=5.0, fj={"offset": 4096}),
            pr("s2c", 2, "AuthTokenCheckFailed", seq=4096, ts=4.0),  # the quirk's id, but before its read
        ],
        [
            HELLO,
            pr("c2s", 1, "SetupAppend", seq=5, ts=2.0),
            pr("c2s", 2, "ReadSegment", seq=8, name="s", ts=2.0, fj={"offset": 4096}),
            pr("s2c", 0, "Hello", seq=99),  # Hello, KeepAlive and absent ids (-1) answer nothing
            pr("s2c", 1, "KeepAlive", seq=98),
            pr("s2c", 2, "WrongHost", seq=-1),
            pr("s2c", 3, "SegmentCreated", seq=5, ts=2.0),
            pr("s2c", 4, "SegmentCreated", seq=5, ts=None),
            pr("s2c", 5, "AuthTokenCheckFailed", seq=4096, ts=3.0),  # the Java quirk: the read offset as id (§6.1)
            pr("c2s", 3, "ReadSegment", seq=9, name="s", ts=2.0),  # no offset field: no quirk id
            pr("s2c", 6, "SegmentRead", seq=9, name="s", ts=3.0),
        ],
        [
            ("PR-REQUEST-ID-ECHOED", "s2c", 0, 0, "SegmentCreated answers request id 7, which the client never sent before it"),
            ("PR-REQUEST-ID-ECHOED", "s2c", 1, 10, "SegmentCreated answers request id 5, which the client never sent before it"),
            ("PR-REQUEST-ID-ECHOED", "s2c", 2, 20, "AuthTokenCheckFailed answers request id 4096, which the client never sent before it"),
        ],
    ),
    "PR-READ-OFFSET-ECHOED": (
        [
            HELLO,
            pr("c2s", 1, "ReadSegment", seq=3, name="s", offset=10, fj={"offset": 100}),
            pr("c2s", 2, "ReadSegment", seq=3, name="s", offset=20, fj={"offset": 300}),
            pr("c2s", 3, "ReadSegment", seq=4, name="t", offset=30, fj={"offset": 0}),
            pr("c2s", 4, "GetSegmentAttribute", seq=4, name="s", offset=40, fj={"offset": 0}),  # not a read
            pr("s2c", 0, "SegmentRead", seq=3, name="s", fj={"offset": 50}),
            pr("s2c", 1, "SegmentRead", seq=4, name="s", fj={"offset": 0}),
        ],
        [
            HELLO,
            pr("c2s", 1, "ReadSegment", seq=3, name="s", fj={"offset": 100}),
            pr("c2s", 3, "ReadSegment", seq=4, name="t", fj={"offset": 0}),
            pr("s2c", 0, "SegmentRead", seq=3, name="s", fj={"offset": 100}),
            pr("s2c", 1, "SegmentRead", seq=4, name="t", fj={"offset": 0}),
            pr("s2c", 2, "SegmentRead", seq=-1, name="x", fj={"offset": 7}),  # no request id: nothing to echo
        ],
        [
            ("PR-READ-OFFSET-ECHOED", "s2c", 0, 0, "SegmentRead offset 50 but ReadSegment 3 asked for offset 100, 300"),
            ("PR-READ-OFFSET-ECHOED", "s2c", 1, 10, "SegmentRead offset 0 but no ReadSegment 4 of s"),
        ],
    ),
    "PR-ACK-CHAIN": (
        [
            HELLO,
            pr("s2c", 0, "AppendSetup", writer_id="w1", last_event_number=4),
            pr("s2c", 1, "DataAppended", writer_id="w1", event_number=6, previous_event_number=3),
            pr("s2c", 2, "DataAppended", writer_id="w1", event_number=6, previous_event_number=6),
            pr("s2c", 3, "DataAppended", writer_id="w1", event_number=6),  # no previous: the ack must still increase
            pr("s2c", 4, "DataAppended", writer_id="w2", event_number=1, previous_event_number=0),
            pr("s2c", 5, "DataAppended", writer_id="w1", event_number=8, previous_event_number=9),
        ],
        [
            HELLO,
            pr("s2c", 0, "AppendSetup", writer_id="w1", last_event_number=4),
            pr("s2c", 1, "AppendSetup", writer_id="w2", last_event_number=-1),
            pr("s2c", 2, "DataAppended", writer_id="w1", event_number=6, previous_event_number=4),
            pr("s2c", 3, "DataAppended", writer_id="w2", event_number=0, previous_event_number=-1),
            pr("s2c", 4, "DataAppended", writer_id="w1", event_number=7),
            pr("s2c", 5, "DataAppended", writer_id="w1", event_number=9, previous_event_number=7),
        ],
        [
            ("PR-ACK-CHAIN", "s2c", 1, 10, "DataAppended 6 of writer w1: previous_event_number 3, but the previous ack was 4"),
            ("PR-ACK-CHAIN", "s2c", 2, 20, "DataAppended 6 of writer w1 does not increase (previous 6)"),
            ("PR-ACK-CHAIN", "s2c", 3, 30, "DataAppended 6 of writer w1 does not increase (previous 6)"),
            ("PR-ACK-CHAIN", "s2c", 4, 40, "DataAppended 1 for writer w2, which was never set up on this connection"),
            ("PR-ACK-CHAIN", "s2c", 5, 50, "DataAppended 8 of writer w1: previous_event_number 9, but the previous ack was 6"),
        ],
    ),
}


# --------------------------------------------------------------------------- TANK

TK = "tank"


def tk(direction: str, frame_no: int, type: str, **kw: Any) -> Row:
    return row(TK, direction, frame_no, type, **kw)


def part(topic: str, partition: int, first: int | None, last: int | None, **kw: Any) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "first_seq": first, "last_seq": last, **kw}


TK_CASES: dict[str, tuple[list[Row], list[Row], list[tuple[str, str, int, int, str]]]] = {
    "TK-DECODES": (
        [tk("c2s", 0, "Ping"), tk("s2c", 3, "error", offset=77, parent_offset=40, error="bundle: bad varint")],
        [tk("c2s", 0, "Ping"), tk("s2c", 0, "Ping")],
        [("TK-DECODES", "s2c", 3, 77, "bundle: bad varint")],
    ),
    "TK-RESPONSE-MATCHES-REQUEST": (
        [
            tk("c2s", 0, "Consume", seq=1, ts=1.0),
            tk("c2s", 1, "Produce", seq=2, ts=5.0),
            tk("s2c", 0, "Produce", seq=1, ts=2.0),  # id 1 was a Consume
            tk("s2c", 1, "Consume", seq=1, ts=2.0),
            tk("s2c", 2, "Consume", seq=1, ts=2.0),  # answered already
            tk("s2c", 3, "Produce", seq=2, ts=4.0),  # before its request
        ],
        [
            tk("c2s", 0, "Consume", seq=1, ts=1.0),
            tk("c2s", 1, "ProduceWithSeqnum", seq=2, ts=1.0),  # answered by a Produce
            tk("c2s", 2, "Ping", seq=3),
            tk("c2s", 3, "Consume", seq=1, ts=3.0),  # the same id again, once answered
            tk("s2c", 0, "Ping", seq=9),  # pings answer nothing
            tk("s2c", 1, "Consume", seq=1, ts=2.0),
            tk("s2c", 2, "Produce", seq=2, ts=None),
            tk("s2c", 3, "Consume", seq=1, ts=4.0),
            tk("s2c", 4, "Consume", seq=7, parent_offset=30),  # a row inside a frame is not a response
            tk("s2c", 5, "Discover", seq=None),
        ],
        [
            ("TK-RESPONSE-MATCHES-REQUEST", "s2c", 0, 0, "Produce response with request id 1, which matches no outstanding Produce request"),
            ("TK-RESPONSE-MATCHES-REQUEST", "s2c", 2, 20, "Consume response with request id 1, which matches no outstanding Consume request"),
            ("TK-RESPONSE-MATCHES-REQUEST", "s2c", 3, 30, "Produce response with request id 2, which matches no outstanding Produce request"),
        ],
    ),
    "TK-CONSUME-SEQ-INCREASING": (
        [
            tk("c2s", 0, "Consume", seq=1),
            tk("c2s", 1, "Consume", seq=2),
            tk("c2s", 2, "Consume", seq=3),
            tk("s2c", 0, "Consume", seq=1, partitions=[part("t", 9, None, None), part("t", 0, 5, 3), part("t", 1, 1, 4, increasing=False)]),
            tk("s2c", 1, "Consume", seq=2, partitions=[part("t", 0, 3, 6), part("t", 1, 5, 6)]),
            tk("s2c", 2, "Consume", seq=3, partitions=[part("t", 0, 6, 9, requested_seq=0)]),
        ],
        [
            tk("c2s", 0, "Consume", seq=1),
            tk("c2s", 1, "Consume", seq=2),
            tk("c2s", 2, "Consume", seq=3),
            tk("c2s", 3, "Consume", seq=4),
            tk("c2s", 4, "Consume", seq=5),
            tk("s2c", 0, "Consume", seq=1, partitions=[part("t", 0, 1, 4), part("u", 0, 1, 1), part("t", 1, None, None), part("t", 2, 5, None)]),
            tk("s2c", 1, "Consume", seq=2, partitions=[part("t", 0, 5, 6), part("u", 0, 2, 2)]),
            tk("s2c", 2, "Consume", seq=3, partitions=[part("t", 0, 3, 4, requested_seq=3)]),  # asked again from 3
            tk("s2c", 3, "Consume", seq=4, partitions=[part("t", 0, 4, 4, requested_seq=4)]),  # again, from 4
            tk("s2c", 4, "Consume", seq=5, partitions=[part("t", 0, 1, 2, requested_seq=1)]),  # again, from the start
        ],
        [
            ("TK-CONSUME-SEQ-INCREASING", "s2c", 0, 0, "t/0: sequence numbers 5..3 do not increase inside the response"),
            ("TK-CONSUME-SEQ-INCREASING", "s2c", 0, 0, "t/1: sequence numbers 1..4 do not increase inside the response"),
            ("TK-CONSUME-SEQ-INCREASING", "s2c", 1, 10, "t/0: response starts at sequence number 3, not after 3 delivered before"),
            ("TK-CONSUME-SEQ-INCREASING", "s2c", 2, 20, "t/0: response starts at sequence number 6, not after 6 delivered before"),
        ],
    ),
    "TK-PRODUCE-ACKED": (
        [
            tk("c2s", 0, "Produce", seq=1),
            tk("c2s", 1, "ProduceWithSeqnum", seq=2),
            tk("c2s", 2, "Produce", seq=3),
            tk("c2s", 3, "Consume", seq=1),
            tk("s2c", 0, "Produce", seq=2),
            tk("s2c", 1, "Consume", seq=1),  # answers the Consume, not the Produce of the same id
            tk("s2c", 2, "Produce", seq=3),
            tk("s2c", 3, "Produce", seq=3),
        ],
        [tk("c2s", 0, "Produce", seq=1), tk("c2s", 1, "ProduceWithSeqnum", seq=2), tk("s2c", 0, "Produce", seq=2), tk("s2c", 1, "Produce", seq=1)],
        [
            ("TK-RESPONSE-MATCHES-REQUEST", "s2c", 3, 30, "Produce response with request id 3, which matches no outstanding Produce request"),
            ("TK-PRODUCE-ACKED", "c2s", 0, 0, "Produce request 1 answered by 0 produce responses"),
            ("TK-PRODUCE-ACKED", "c2s", 2, 20, "Produce request 3 answered by 2 produce responses"),
        ],
    ),
}


# --------------------------------------------------------------------------- Seastar RPC

SS = "seastar-rpc"


def ss(direction: str, frame_no: int, type: str, **kw: Any) -> Row:
    return row(SS, direction, frame_no, type, **kw)


NEG = [ss("c2s", 0, "negotiation"), ss("s2c", 0, "negotiation")]
SS_CASES: dict[str, tuple[list[Row], list[Row], list[tuple[str, str, int, int, str]]]] = {
    "SS-DECODES": (
        [*NEG, ss("c2s", 1, "compressed", name="lz4"), ss("c2s", 2, "error", offset=0, parent_offset=10, error="lz4: corrupt block")],
        [*NEG, ss("c2s", 1, "compressed", name="lz4"), ss("c2s", 2, "request", offset=0, parent_offset=10, seq=1, name="5")],
        [("SS-DECODES", "c2s", 2, 0, "lz4: corrupt block")],
    ),
    "SS-NEGOTIATION-FIRST": (
        [ss("c2s", 0, "request", seq=1, name="5"), ss("c2s", 1, "negotiation"), ss("s2c", 0, "response", seq=1)],
        # a row inside an envelope is no frame of the direction's own, wherever it is numbered; each direction has its first frame
        [ss("c2s", 0, "request", offset=0, parent_offset=9, seq=1, name="5"), ss("c2s", 1, "negotiation"), ss("s2c", 0, "negotiation"), ss("s2c", 1, "response", seq=1)],
        [
            ("SS-NEGOTIATION-FIRST", "c2s", 0, 0, "the first frame is request, not the negotiation frame"),
            ("SS-NEGOTIATION-FIRST", "s2c", 0, 0, "the first frame is response, not the negotiation frame"),
        ],
    ),
    "SS-RESPONSE-MATCHES-REQUEST": (
        [
            *NEG,
            ss("c2s", 1, "request", seq=1, name="5", ts=1.0),
            ss("c2s", 2, "request", seq=2, name="5", ts=5.0),
            ss("c2s", 3, "stream-message", seq=9),  # not a request
            ss("s2c", 1, "response", seq=9),  # never asked
            ss("s2c", 2, "response", seq=1, ts=2.0),
            ss("s2c", 3, "response", seq=-1, ts=2.0),  # answered already
            ss("s2c", 4, "response", seq=2, ts=3.0),  # before its request
        ],
        [
            *NEG,
            ss("c2s", 1, "request", seq=1, name="5", ts=1.0),
            ss("c2s", 2, "request", seq=2, name="5", ts=1.0),
            ss("c2s", 3, "request", seq=1, name="5", ts=3.0),
            ss("s2c", 1, "response", seq=1, ts=2.0),
            ss("s2c", 2, "response", seq=-2, ts=None),  # an exception answers its request too
            ss("s2c", 3, "response", seq=1, ts=4.0),
        ],
        [
            ("SS-RESPONSE-MATCHES-REQUEST", "s2c", 1, 10, "response for msg id 9, which matches no outstanding request"),
            ("SS-RESPONSE-MATCHES-REQUEST", "s2c", 3, 30, "response for msg id -1, which matches no outstanding request"),
            ("SS-RESPONSE-MATCHES-REQUEST", "s2c", 4, 40, "response for msg id 2, which matches no outstanding request"),
        ],
    ),
    "SS-NO-REPLY-TO-ONE-WAY": (
        [*NEG, ss("c2s", 1, "request", seq=3, name="4"), ss("s2c", 1, "response", seq=-3, exception="USER")],
        [
            *NEG,
            ss("c2s", 1, "request", seq=3, name="4"),
            ss("c2s", 2, "request", seq=5, name="4"),
            ss("c2s", 3, "request", seq=6, name="5"),
            ss("c2s", 4, "stream-message", seq=7, name=None),
            ss("s2c", 1, "response", seq=-3, exception="UNKNOWN_VERB"),  # the testee does not know the verb: it may say so
            ss("s2c", 2, "response", seq=6),
        ],
        [("SS-NO-REPLY-TO-ONE-WAY", "s2c", 1, 10, "response for msg id -3, a call of one-way verb(s) [4]")],
    ),
}


# --------------------------------------------------------------------------- the pure rules, per protocol

PURE = [(PR, r, *c) for r, c in PR_CASES.items()] + [(TK, r, *c) for r, c in TK_CASES.items()] + [(SS, r, *c) for r, c in SS_CASES.items()]


@pytest.mark.parametrize(("protocol", "rule", "planted", "clean", "want"), PURE, ids=[p[1] for p in PURE])
def test_a_planted_violation_is_flagged_by_its_rule_and_its_clean_twin_by_none(
    protocol: str, rule: str, planted: list[Row], clean: list[Row], want: list[tuple[str, str, int, int, str]]
) -> None:
    assert violations(planted) == want
    assert violations(clean) == []
    # the same with the protocol named, as a capture of one protocol is checked
    assert violations(planted, protocol) == want
    assert {v[0] for v in want} >= {rule}


def test_every_rule_with_a_pure_twin_has_a_planted_case() -> None:
    planted = {r for p, r, *_ in PURE}
    with_twin = {r.id for p in (PR, TK, SS, "lumberjack") for r in rules_for(p) if r.check is not None}
    assert with_twin == planted | {"LJ-DECODES"}


def test_violations_keep_their_connection_and_protocol_and_come_in_connection_order() -> None:
    a = [{**r, "conn": "b"} for r in PR_CASES["PR-HELLO-FIRST"][0]]
    b = [{**r, "conn": "a"} for r in SS_CASES["SS-NEGOTIATION-FIRST"][0]]
    out = check_rows(a + b)
    assert [(v["protocol"], v["conn"], v["rule"]) for v in out] == [
        ("pravega", "b", "PR-HELLO-FIRST"),
        ("seastar-rpc", "a", "SS-NEGOTIATION-FIRST"),
        ("seastar-rpc", "a", "SS-NEGOTIATION-FIRST"),
    ]
    assert list(out[0]) == [name for name, _ in VIOLATION_COLUMNS]
    assert out[0] == {
        "rule": "PR-HELLO-FIRST",
        "protocol": "pravega",
        "conn": "b",
        "direction": "c2s",
        "frame_no": 0,
        "offset": 0,
        "detail": "the client's first command is SetupAppend, not Hello",
    }
    # naming a protocol checks only that protocol's rows, under that protocol's rules
    assert [v["protocol"] for v in check_rows(a + b, "pravega")] == ["pravega"]
    assert check_rows(a + b, "nope") == [] and check_rows([]) == []
    # a row without a protocol column is taken as the named protocol's
    bare = [{k: v for k, v in r.items() if k != "protocol"} for r in PR_CASES["PR-HELLO-FIRST"][0]]
    assert [v["rule"] for v in check_rows(bare, "pravega")] == ["PR-HELLO-FIRST"]


def test_which_protocols_have_rules() -> None:
    assert [r.id for r in rules_for("lumberjack")] == ["LJ-DECODES", "LJ-SEQ-CONTIGUOUS", "LJ-WINDOW-COUNT", "LJ-ACK-MATCHES-WINDOW"]
    assert rules_for("pravega-draft-2017") == [] and rules_for("no-such-protocol") == []
    assert all(isinstance(r, Rule) and r.protocol == p and r.description for p in (PR, TK, SS, "lumberjack") for r in rules_for(p))


# --------------------------------------------------------------------------- Lumberjack

LJ = "lumberjack"


def lj(direction: str, frame_no: int, type: str, seq: int | None = None, count: int | None = None, **kw: Any) -> Row:
    return row(LJ, direction, frame_no, type, seq=seq, count=count, **kw)


def lj_conn(c2s: list[tuple[str, int]], acks: list[int], **kw: Any) -> list[Row]:
    """``c2s``: ("W", n) / ("J", seq) / ("D", seq) / ("C", n) in order; ``acks``: the s2c ``A`` seqs."""
    rows = [lj("c2s", i, t, seq=None if t in "WC" else v, count=v if t in "WC" else None, **kw) for i, (t, v) in enumerate(c2s)]
    return rows + [lj("s2c", i, "A", seq=s, **kw) for i, s in enumerate(acks)]


# seqs run on across windows, past 2**32 - 1 to 1 (never 0), and a window may start again at 1
LJ_CLEAN = lj_conn(
    [("W", 2), ("J", 4294967294), ("J", 4294967295), ("W", 1), ("C", 1), ("D", 1), ("W", 2), ("J", 1), ("J", 2)],
    [0, 4294967294, 4294967295, 0, 1, 2],
)
LJ_CASES: dict[str, tuple[list[Row], list[tuple[str, str, int, int, str]]]] = {
    "LJ-DECODES": (
        [*lj_conn([("W", 1), ("J", 1)], [1]), lj("c2s", 2, "error", offset=33, error="unknown frame type 0x00"), lj("s2c", 1, "error", offset=6)],
        [("LJ-DECODES", "c2s", 2, 33, "unknown frame type 0x00"), ("LJ-DECODES", "s2c", 1, 6, "decode error")],
    ),
    "LJ-SEQ-CONTIGUOUS": (
        lj_conn([("W", 3), ("J", 1), ("J", 3), ("J", 4), ("W", 1), ("J", 9)], [4, 9]),
        [
            ("LJ-SEQ-CONTIGUOUS", "c2s", 2, 20, "seq 3 after 1 (expected 2)"),
            ("LJ-SEQ-CONTIGUOUS", "c2s", 5, 50, "seq 9 after 4 (expected 5)"),
        ],
    ),
    "LJ-WINDOW-COUNT": (
        lj_conn([("J", 1), ("W", 3), ("J", 1), ("J", 2), ("W", 0), ("W", 1), ("J", 3)], [2, 3]),
        [
            ("LJ-WINDOW-COUNT", "c2s", 1, 10, "W 3 followed by 2 data frames"),
            ("LJ-WINDOW-COUNT", "c2s", 0, 0, "data frame before any W"),
        ],
    ),
    "LJ-ACK-MATCHES-WINDOW": (
        lj_conn([("W", 2), ("J", 1), ("J", 2), ("W", 2), ("J", 3), ("J", 4), ("W", 1), ("J", 5)], [0, 1, 3]),
        [
            ("LJ-ACK-MATCHES-WINDOW", "s2c", 2, 20, "ack 3 does not match window 1 (seqs 1..2, 2 events, partial ack 1)"),
            ("LJ-ACK-MATCHES-WINDOW", "c2s", 3, 30, "window of 2 events (seqs 3..4) never acked"),
            ("LJ-ACK-MATCHES-WINDOW", "c2s", 6, 60, "window of 1 events (seqs 5..5) never acked"),
        ],
    ),
}


def test_lumberjack_s_pure_rule_flags_an_undecodable_byte_and_nothing_on_a_clean_connection() -> None:
    assert violations(LJ_CASES["LJ-DECODES"][0]) == LJ_CASES["LJ-DECODES"][1]
    assert violations(LJ_CLEAN) == []
    # the ordering rules are DataFrame queries only (see the Spark test below)
    assert [r.id for r in rules_for(LJ) if r.check is None] == ["LJ-SEQ-CONTIGUOUS", "LJ-WINDOW-COUNT", "LJ-ACK-MATCHES-WINDOW"]


WINDOWS = [(0, 0, [1, 2, 3]), (4, 40, []), (5, 50, [4, 5, 6]), (9, 90, [7])]


@pytest.mark.parametrize(
    ("acks", "want"),
    [
        # each window closed by its last seq; keepalives and partial acks before it; the empty window needs none
        ([(0, 0, 0), (1, 6, 1), (2, 12, 3), (3, 18, 6), (4, 24, 7)], []),
        ([(0, 0, 3), (1, 6, 4), (2, 12, 6), (3, 18, 7)], []),
        # a partial ack that goes back is a mismatch; the next window is then expected
        ([(0, 0, 2), (1, 6, 1), (2, 12, 6), (3, 18, 7)],
         [("s2c", 1, 6, "ack 1 does not match window 1 (seqs 1..3, 3 events, partial ack 2)")]),
        ([(0, 0, 2), (1, 6, 2), (2, 12, 6), (3, 18, 7)],
         [("s2c", 1, 6, "ack 2 does not match window 1 (seqs 1..3, 3 events, partial ack 2)")]),
        # an ack of a later window's last seq skips the windows between
        ([(0, 0, 7)], [("s2c", 0, 0, "ack 7 closes window 4 but window 1 (seqs 1..3, 3 events) was never acked in full")]),
        ([(0, 0, 6), (1, 6, 7)], [("s2c", 0, 0, "ack 6 closes window 3 but window 1 (seqs 1..3, 3 events) was never acked in full")]),
        ([(0, 0, 3), (1, 6, 9), (2, 12, 6), (3, 18, 7)],
         [("s2c", 1, 6, "ack 9 does not match window 3 (seqs 4..6, 3 events)"),
          ("s2c", 2, 12, "ack 6 does not match window 4 (seqs 7..7, 1 events)"),
          ("s2c", 3, 18, "ack 7 but no window is outstanding (4 sent)")]),
        # unacked windows are named where they were sent; the empty one is not
        ([(0, 0, 3)], [("c2s", 5, 50, "window of 3 events (seqs 4..6) never acked"), ("c2s", 9, 90, "window of 1 events (seqs 7..7) never acked")]),
        ([(0, 0, 3), (1, 6, 6), (2, 12, 7), (3, 18, 8)], [("s2c", 3, 18, "ack 8 but no window is outstanding (4 sent)")]),
    ],
)
def test_lumberjack_acks_pair_with_windows_in_order(acks: list[tuple[int, int, int]], want: list[tuple[str, int, int, str]]) -> None:
    assert check_acks(WINDOWS, acks) == want


def test_an_ack_after_a_trailing_empty_window_has_no_window_to_close() -> None:
    assert check_acks([(0, 0, [1]), (2, 20, [])], [(0, 0, 1), (1, 6, 1)]) == [("s2c", 1, 6, "ack 1 but no window is outstanding (2 sent)")]
    assert check_acks([], [(0, 0, 0), (1, 6, 4), (2, 12, 5)]) == [
        ("s2c", 1, 6, "ack 4 but no window is outstanding (0 sent)"),
        ("s2c", 2, 12, "ack 5 but no window is outstanding (0 sent)"),
    ]
    assert check_acks([(0, 0, [1]), (2, 20, [])], [(0, 0, 1), (1, 6, 1), (2, 12, 2)]) == [
        ("s2c", 1, 6, "ack 1 but no window is outstanding (2 sent)"),
        ("s2c", 2, 12, "ack 2 but no window is outstanding (2 sent)"),
    ]


# --------------------------------------------------------------------------- what every rule is made of


def test_the_rule_kit() -> None:
    rows = [
        {"direction": "c2s", "frame_no": 2, "type": "B", "offset": 5, "error": None},
        {"direction": "s2c", "frame_no": 0, "type": "A", "offset": 0, "error": None},
        {"direction": "c2s", "frame_no": 0, "type": "A", "offset": 0, "error": None},
        {"direction": "c2s", "frame_no": 1, "type": "error", "offset": 3, "error": None},
    ]
    assert [(r["direction"], r["frame_no"]) for r in ordered(rows, "c2s")] == [("c2s", 0), ("c2s", 1), ("c2s", 2)]
    assert [r["frame_no"] for r in ordered(rows, "c2s", "A", "B")] == [0, 2]
    assert [r["frame_no"] for r in ordered(rows, "s2c", "B")] == []
    assert check_decodes(rows) == [("c2s", 1, 3, "decode error")]
    assert check_decodes([{**rows[3], "error": "bad"}]) == [("c2s", 1, 3, "bad")]
    assert fields({"fields_json": '{"a": 1}'}) == {"a": 1}
    assert fields({"fields_json": "[1]"}) == {} and fields({"fields_json": None}) == {} and fields({}) == {}
    assert not_before(1.0, 1.0) and not_before(1.0, 2.0) and not not_before(2.0, 1.0)
    assert not_before(None, 1.0) and not_before(1.0, None) and not_before(None, None)


# --------------------------------------------------------------------------- the DataFrame forms (one Spark session)


def test_the_dataframe_rules_flag_the_planted_violations_and_agree_with_their_twins(spark: Any) -> None:
    from refwire.pipeline.rules import run_rules
    from refwire.pipeline.schema import spark_ddl

    tables: list[tuple[str, str, list[Row], list[tuple[str, str, int, int, str]]]] = []
    for rule, (planted, want) in LJ_CASES.items():
        tables.append((LJ, rule, planted, want))
    tables.append((LJ, "clean", LJ_CLEAN, []))
    for proto, cases in ((PR, PR_CASES), (TK, TK_CASES), (SS, SS_CASES)):
        for rule, (planted, clean, want) in cases.items():
            tables.append((proto, rule, planted, want))
            tables.append((proto, rule + "/clean", clean, []))
    rows = [{**r, "conn": name} for proto, name, rs, _ in tables for r in rs]
    frames = spark.createDataFrame([tuple(r[c] for c in COLUMNS) for r in rows], spark_ddl(FRAME_COLUMNS))
    got: dict[str, list[tuple[str, str, int, int, str]]] = {}
    for proto in (LJ, PR, TK, SS):
        v = run_rules(frames, proto).collect()
        assert v == [] or list(v[0].asDict()) == [name for name, _ in VIOLATION_COLUMNS]
        for r in v:
            assert r["protocol"] == proto
            got.setdefault(r["conn"], []).append((r["rule"], r["direction"], r["frame_no"], r["offset"], r["detail"]))
    for _proto, name, _, want in tables:
        assert sorted(got.get(name, [])) == sorted(want), name
    only = run_rules(frames, LJ, ["LJ-WINDOW-COUNT"]).collect()
    assert {r["rule"] for r in only} == {"LJ-WINDOW-COUNT"} and {r["conn"] for r in only} == {"LJ-WINDOW-COUNT"}


# --------------------------------------------------------------------------- Lumberjack's synthetic captures plant what they name


def _windows(c2s: bytes) -> list[tuple[int, int, list[int]]]:
    """``(w_frame_no, w_offset, seqs)`` per window, as the ack rule's query groups them."""
    from refwire.pipeline.decoders import decode_bytes

    out: list[tuple[int, int, list[int]]] = []
    for r in decode_bytes(LJ, c2s):
        if r.type == "W":
            out.append((r.frame_no, r.offset, []))
        elif r.type in ("J", "D") and out and r.seq is not None:
            out[-1][2].append(r.seq)
    return out


def test_lumberjack_synthetic_captures_plant_the_fault_they_name(tmp_path: Any) -> None:
    from refwire.pipeline.decoders import decode_bytes
    from refwire.pipeline.dialects.lumberjack import _check_rows, lumberjack_connection, write_lumberjack_capture

    c2s, s2c = lumberjack_connection(3, 4, first_seq=4294967294)
    ws = _windows(c2s)
    assert [w[2] for w in ws] == [[4294967294, 4294967295, 1, 2], [3, 4, 5, 6], [7, 8, 9, 10]]
    rows = decode_bytes(LJ, c2s)
    assert [r.type for r in rows if r.parent_offset is None] == ["W", "J", "J", "J", "J", "W", "C", "W", "J", "J", "J", "J"]
    acks = [(r.frame_no, r.offset, r.seq) for r in decode_bytes(LJ, s2c, "s2c")]
    assert [a[2] for a in acks] == [0, 2, 6, 10]
    assert check_acks(ws, acks) == []
    # the Spark UDF's argument shapes: (window_no, w_frame_no, w_offset, seqs) and (frame_no, offset, seq)
    assert _check_rows([(i + 1, *w) for i, w in enumerate(ws)], acks[:-1]) == [("c2s", ws[2][0], ws[2][1], "window of 4 events (seqs 7..10) never acked")]
    assert _check_rows(None, None) == [] and _check_rows(None, [(0, 0, 3)]) == [("s2c", 0, 0, "ack 3 but no window is outstanding (0 sent)")]

    gap, _ = lumberjack_connection(5, 4, fault="seq-gap")
    assert [w[2] for w in _windows(gap)][2] == [9, 10, 12, 13]
    _, wrong = lumberjack_connection(5, 4, fault="wrong-ack")
    assert [r.seq for r in decode_bytes(LJ, wrong, "s2c")] == [0, 4, 8, 11, 16, 20]
    garbage, _ = lumberjack_connection(2, 3, fault="garbage")
    assert garbage.startswith(lumberjack_connection(2, 3)[0])
    assert [(v["rule"], v["offset"]) for v in check_rows([{**attrs.asdict(r), "protocol": LJ, "conn": "c", "direction": "c2s", "ts": None} for r in decode_bytes(LJ, garbage)])] == [
        ("LJ-DECODES", len(garbage) - len(b"\x00\xffnot a frame"))
    ]

    c2s, s2c = lumberjack_connection()
    assert [len(w[2]) for w in _windows(c2s)] == [20] * 5 and check_acks(_windows(c2s), [(r.frame_no, r.offset, r.seq) for r in decode_bytes(LJ, s2c, "s2c")]) == []
    assert b'{"w": 0, "seq": 1, "message": "x"}' in c2s and b'{"w": 0, "seq": 23, "message": ""}' in lumberjack_connection(1, 23)[0]
    assert garbage.endswith(b"\x00\xffnot a frame")
    (default,) = write_lumberjack_capture(tmp_path / "a" / "b")
    assert write_lumberjack_capture(tmp_path / "a" / "b") == [default] == ["conn00001"]  # into a directory that is there
    assert (tmp_path / "a" / "b" / "conn00001.c2s").read_bytes() == lumberjack_connection(5, 20, first_seq=1001)[0]
    names = write_lumberjack_capture(tmp_path / "cap", ["", "wrong-ack"], windows=2, window_size=2)
    assert names == ["conn00001", "conn00002"]
    assert (tmp_path / "cap" / "conn00001.c2s").read_bytes() == lumberjack_connection(2, 2, first_seq=1001)[0]
    assert (tmp_path / "cap" / "conn00002.s2c").read_bytes() == lumberjack_connection(2, 2, fault="wrong-ack", first_seq=2001)[1]
    with pytest.raises(ValueError, match=r"unknown fault 'nope'; choose from \('seq-gap', 'wrong-ack', 'garbage'\)"):
        write_lumberjack_capture(tmp_path / "bad", ["nope"])


def test_a_client_whose_first_bytes_do_not_decode_is_flagged_once_by_the_decoding_rule() -> None:
    rows = [pr("c2s", 0, "error", error="bad type"), pr("c2s", 1, "SetupAppend"), pr("s2c", 0, "error", error="bad length")]
    assert violations(rows) == [("PR-DECODES", "c2s", 0, 0, "bad type"), ("PR-DECODES", "s2c", 0, 0, "bad length")]
