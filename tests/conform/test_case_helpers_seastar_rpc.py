"""The Seastar RPC conformance cases' shared helpers give the right verdict
inputs (refwire.conform.cases.seastar_rpc._common; specs/seastar-rpc/README.md).

* :class:`ServerObserver` turns what a server sends (built here with refwire's
  own codecs) into the exact tokens the cases judge: its negotiation reply with
  the features in wire order, the first record of a number winning (§2), then
  ``conn-id`` for a CONNECTION_ID (§5.1); ``R <id> <len>B`` for a reply and
  ``E <id> USER|UNKNOWN_VERB <verb>|TYPE<n> d=<µs>`` for an exception, ``d=-``
  when not measured and ``d=none`` without HANDLER_DURATION (§3); the frame
  inside each LZ4 envelope, nothing for a no-op envelope (§4); ``S <len>B`` /
  ``EOS`` on a stream connection (§5); a compressor it was not offered, or
  any byte that does not decode, is ``invalid <field>`` and ends decoding;
  bytes left at the end are ``truncated``.  Any split gives the same tokens.
* :class:`ClientObserver` does the same for what a client sends: its offer,
  then ``call <verb>`` per request, with or without TIMEOUT (§2, §3).
* :data:`LACKS` (a conformance verb answered UNKNOWN_VERB, §11) and
  :data:`NO_STREAMING` (no CONNECTION_ID, §5.1) are UNSUPPORTED exactly when
  the observed tokens / facts say so, judged by refwire.conform.model's judge.
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from refwire.conform.cases.seastar_rpc._common import (
    ECHO,
    LACKS,
    NEG,
    NO_STREAMING,
    RAISE,
    SIZE,
    SLEEP_MS,
    ClientObserver,
    ServerObserver,
)
from refwire.conform.model import Case, Expect, Observation, Verdict, judge
from refwire.seastar_rpc.compression import envelope, make_compressor
from refwire.seastar_rpc.frames import (
    UNMEASURED,
    Features,
    Request,
    Response,
    StreamEnd,
    StreamMessage,
    UnknownException,
    UnknownVerb,
    UserError,
)
from refwire.seastar_rpc.negotiation import Negotiation

REPLY = Features(timeout=True, handler_duration=True).encode()


def _rsp(msg_id: int, payload: bytes = b"", duration: int | None = None, *, with_duration: bool = True) -> bytes:
    return Response(msg_id, payload, duration).encode(with_duration=with_duration)


def _invalid(field: str, frame: str, offset: int | None, reason: str) -> tuple[str, dict[str, object]]:
    return f"invalid {field}", {"type": "invalid", "field": field, "frame": frame, "offset": offset, "reason": reason}


# --------------------------------------------------------------------------- what a server sends


def test_the_default_reply_is_the_neg_token_the_cases_expect() -> None:
    o = ServerObserver()
    assert o.reply is None and o.responses == []
    assert o.feed(REPLY) == [(NEG, {"type": "negotiation", "features": {"1": "", "5": ""}})]
    assert NEG == "neg TIMEOUT HANDLER_DURATION"
    assert o.reply == Features(timeout=True, handler_duration=True) and o.responses == []


def test_a_reply_names_its_features_in_wire_order_first_record_winning_and_conn_id_apart() -> None:
    o = ServerObserver()
    neg = Negotiation(((5, b""), (9, b"a"), (2, (77).to_bytes(8, "little")), (4, b"\xe9x"), (9, b"b"), (3, bytes(8)), (0, b"LZ4")))
    got = o.feed(neg.encode())
    features = {"5": "", "9": "61", "2": "4d00000000000000", "4": "e978", "3": "0000000000000000", "0": "4c5a34"}
    assert got == [
        ("neg HANDLER_DURATION F9 ISOLATION=\xe9x STREAM_PARENT COMPRESS=LZ4", {"type": "negotiation", "features": features}),
        ("conn-id", {"type": "connection_id", "id": 77}),
    ]
    assert o.reply is not None and o.reply.connection_id == 77 and o.reply.compress == "LZ4"


def test_a_conn_id_of_zero_is_still_a_conn_id() -> None:
    o = ServerObserver()
    assert [t for t, _ in o.feed(Features(connection_id=0).encode())] == ["neg", "conn-id"]


def test_replies_and_exceptions_with_their_handler_durations() -> None:
    o = ServerObserver()
    o.feed(REPLY)
    wire = (
        _rsp(1, b"abc", 250)
        + _rsp(0)
        + _rsp(-2, UserError(b"\xffboom").encode(), UNMEASURED)
        + _rsp(-3, UnknownVerb(101).encode(), 17)
        + _rsp(-4, UnknownException(7, b"zz").encode(), 0)
    )
    assert o.feed(wire) == [
        ("R 1 3B", {"type": "response", "msg_id": 1, "len": 3, "handler_duration": 250}),
        ("R 0 0B", {"type": "response", "msg_id": 0, "len": 0, "handler_duration": UNMEASURED}),
        ("E -2 USER d=-", {"type": "response", "msg_id": -2, "len": 13, "handler_duration": UNMEASURED, "message": "\ufffdboom"}),
        ("E -3 UNKNOWN_VERB 101 d=17", {"type": "response", "msg_id": -3, "len": 16, "handler_duration": 17}),
        ("E -4 TYPE7 d=0", {"type": "response", "msg_id": -4, "len": 10, "handler_duration": 0}),
    ]
    assert [r.msg_id for r in o.responses] == [1, 0, -2, -3, -4]
    assert o.responses[0] == Response(1, b"abc", 250)


def test_without_handler_duration_the_duration_is_none() -> None:
    o = ServerObserver()
    o.feed(Features(timeout=True).encode())
    got = o.feed(_rsp(3, b"x", with_duration=False) + _rsp(-1, UnknownVerb(100).encode(), with_duration=False))
    assert got == [
        ("R 3 1B", {"type": "response", "msg_id": 3, "len": 1, "handler_duration": None}),
        ("E -1 UNKNOWN_VERB 100 d=none", {"type": "response", "msg_id": -1, "len": 16, "handler_duration": None}),
    ]


def test_a_compressed_connection_is_read_inside_its_envelopes_and_a_noop_is_nothing() -> None:
    for name in ("LZ4", "LZ4_FRAGMENTED"):
        o = ServerObserver()
        assert [t for t, _ in o.feed(Features(compress=name, handler_duration=True).encode())] == [f"neg COMPRESS={name} HANDLER_DURATION"]
        comp = make_compressor(name)
        got = o.feed(envelope(comp, _rsp(5, b"xy", 9)) + b"\x00\x00\x00\x00" + envelope(comp, _rsp(-6, UserError(b"no").encode(), 2)))
        assert got == [
            ("R 5 2B", {"type": "response", "msg_id": 5, "len": 2, "handler_duration": 9}),
            ("E -6 USER d=2", {"type": "response", "msg_id": -6, "len": 10, "handler_duration": 2, "message": "no"}),
        ]


@pytest.mark.parametrize("chosen", ["ZSTD", "LZ4,LZ4_FRAGMENTED"])
def test_a_compressor_that_was_not_offered_is_invalid(chosen: str) -> None:
    o = ServerObserver()
    reason = f"the server chose compressor {chosen!r}, which was not offered"
    assert o.feed(Features(compress=chosen).encode()) == [_invalid("compress", "negotiation", None, reason)]
    assert o.feed(_rsp(1, with_duration=False)) == [] and o.eof() == []


def test_a_stream_connection_carries_stream_frames() -> None:
    o = ServerObserver()
    assert o.kind == "response"
    o.kind = "stream"
    assert o.kind == "stream"
    got = o.feed(REPLY + StreamMessage(b"hello").encode() + StreamMessage(b"").encode() + StreamEnd().encode())
    assert got == [(NEG, {"type": "negotiation", "features": {"1": "", "5": ""}}), ("S 5B", {"type": "stream", "len": 5}),
                   ("S 0B", {"type": "stream", "len": 0}), ("EOS", {"type": "eos"})]
    o.kind = "response"
    assert o.kind == "response"


def test_a_compressed_stream_connection_carries_stream_frames_in_envelopes() -> None:
    o = ServerObserver()
    o.kind = "stream"
    comp = make_compressor("LZ4")
    got = o.feed(Features(compress="LZ4").encode() + envelope(comp, StreamMessage(b"abc").encode()) + envelope(comp, StreamEnd().encode()))
    assert got == [("neg COMPRESS=LZ4", {"type": "negotiation", "features": {"0": "4c5a34"}}), ("S 3B", {"type": "stream", "len": 3}),
                   ("EOS", {"type": "eos"})]


def test_a_response_connection_does_not_read_stream_frames() -> None:
    o = ServerObserver()
    o.kind = "response"
    o.feed(REPLY)
    assert [t for t, _ in o.feed(StreamMessage(bytes(16)).encode())] == ["R 16 0B"]  # len 16 + 12 zero bytes: a response header


def test_the_first_byte_that_does_not_decode_is_invalid_and_ends_decoding() -> None:
    o = ServerObserver()
    assert o.feed(b"SSTARRPX" + bytes(4)) == [_invalid("magic", "negotiation", 0, "wrong protocol magic: 5353544152525058")]
    assert o.feed(REPLY) == [] and o.eof() == []
    o = ServerObserver()
    bad = _rsp(-3, b"\x00\x00\x00\x00\x09\x00\x00\x00ab", 1)
    got = o.feed(REPLY + _rsp(1, b"a", 1) + bad + _rsp(2, b"b", 1))
    assert got[:2] == [(NEG, {"type": "negotiation", "features": {"1": "", "5": ""}}),
                       ("R 1 1B", {"type": "response", "msg_id": 1, "len": 1, "handler_duration": 1})]
    assert got[2:] == [_invalid("len", "exception", 4, "exception body claims 9 bytes, the response has 2")]
    assert o.feed(_rsp(3)) == [] and o.eof() == []


def test_bytes_left_at_the_end_are_truncated_once() -> None:
    o = ServerObserver()
    assert o.feed(REPLY + _rsp(1, b"abc", 1)[:9]) == [(NEG, {"type": "negotiation", "features": {"1": "", "5": ""}})]
    assert o.eof() == [("truncated", {"type": "truncated", "bytes": 9, "offset": len(REPLY)})]
    assert o.eof() == []
    clean = ServerObserver()
    clean.feed(REPLY)
    assert clean.eof() == []


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=200), max_size=10))
def test_any_split_gives_the_same_tokens(cuts: list[int]) -> None:
    comp = make_compressor("LZ4")
    wire = (
        Features(compress="LZ4", handler_duration=True, connection_id=5).encode()
        + envelope(comp, _rsp(1, b"abc", 3))
        + b"\x00\x00\x00\x00"
        + envelope(comp, _rsp(-2, UnknownVerb(103).encode(), UNMEASURED))
    )
    whole = ServerObserver().feed(wire)
    assert [t for t, _ in whole] == ["neg COMPRESS=LZ4 HANDLER_DURATION", "conn-id", "R 1 3B", "E -2 UNKNOWN_VERB 103 d=-"]
    o = ServerObserver()
    got = []
    at = 0
    for c in [*sorted({c for c in cuts if c < len(wire)}), len(wire)]:
        got += o.feed(wire[at:c])
        at = c
    assert got == whole


# --------------------------------------------------------------------------- what a client sends


def test_a_clients_offer_and_calls() -> None:
    o = ClientObserver()
    assert o.offer is None and o.requests == []
    offer = Features(compress="LZ4,LZ4_FRAGMENTED", timeout=True, handler_duration=True, isolation=b"\xe9x", connection_id=3)
    got = o.feed(offer.encode() + Request(ECHO, 1, b"hi", 500).encode(with_timeout=True) + Request(SIZE, 2).encode(with_timeout=True))
    features = {"0": b"LZ4,LZ4_FRAGMENTED".hex(), "1": "", "2": "0300000000000000", "4": "e978", "5": ""}
    assert got == [
        ("neg COMPRESS=LZ4,LZ4_FRAGMENTED TIMEOUT ISOLATION=\xe9x HANDLER_DURATION", {"type": "negotiation", "features": features}),
        ("call 100", {"type": "request", "verb": 100, "msg_id": 1, "len": 2}),
        ("call 103", {"type": "request", "verb": 103, "msg_id": 2, "len": 0}),
    ]
    assert o.offer == offer
    assert o.requests == [Request(ECHO, 1, b"hi", 500), Request(SIZE, 2, b"", 0)]


def test_a_client_without_timeout_sends_short_requests_uncompressed() -> None:
    o = ClientObserver()
    got = o.feed(Features(compress="LZ\xe9").encode() + Request(SLEEP_MS, 2, b"\x05\x00\x00\x00").encode(with_timeout=False))
    assert got == [
        ("neg COMPRESS=LZ\xe9", {"type": "negotiation", "features": {"0": "4c5ae9"}}),
        ("call 101", {"type": "request", "verb": 101, "msg_id": 2, "len": 4}),
    ]
    assert o.offer == Features(compress="LZ\xe9") and o.requests == [Request(SLEEP_MS, 2, b"\x05\x00\x00\x00", None)]


def test_a_clients_unknown_and_repeated_features() -> None:
    o = ClientObserver()
    got = o.feed(Negotiation(((9, b"a"), (1, b""), (9, b"b"), (3, bytes(8)))).encode())
    assert got == [("neg F9 TIMEOUT STREAM_PARENT", {"type": "negotiation", "features": {"9": "61", "1": "", "3": "0" * 16}})]
    # the case server makes no stream connection: a STREAM_PARENT offer still sends requests
    assert [t for t, _ in o.feed(Request(RAISE, 4).encode(with_timeout=True))] == ["call 102"]


def test_a_client_that_does_not_decode_is_invalid_then_nothing() -> None:
    o = ClientObserver()
    reason = "STREAM_PARENT must carry 8 bytes, got 1"
    assert o.feed(Negotiation(((3, b"a"),)).encode() + Request(ECHO, 1).encode(with_timeout=False)) == [
        _invalid("stream_parent", "negotiation", 16, reason)
    ]
    assert o.feed(Features().encode()) == [] and o.eof() == [] and o.requests == []


def test_a_client_cut_inside_a_request_is_truncated() -> None:
    o = ClientObserver()
    neg = Features().encode()
    assert [t for t, _ in o.feed(neg + Request(ECHO, 1, b"abc").encode(with_timeout=False)[:-1])] == ["neg"]
    assert o.eof() == [("truncated", {"type": "truncated", "bytes": 22, "offset": len(neg)})]
    assert o.eof() == []


# --------------------------------------------------------------------------- the expectations, judged


def _case(*expects: Expect) -> Case:
    async def run(c: object) -> None:
        return None

    return Case(id="ss.T1.1", slug="t", title="t", role="server", requirement="§11", procedure_text="", expects=expects, run=run)


def _verdict(e: Expect, events: list[str], facts: tuple[str, ...] = (), close: str = "FIN") -> Verdict:
    return judge(_case(e), Observation(events=tuple(events), close=close, facts=facts), "strict")[0]


@pytest.mark.parametrize("verb", [ECHO, SLEEP_MS, RAISE, SIZE])
def test_an_unknown_verb_answer_to_a_conformance_verb_is_unsupported(verb: int) -> None:
    o = ServerObserver()
    tokens = [t for t, _ in o.feed(REPLY + _rsp(1, b"ok", 5) + _rsp(-2, UnknownVerb(verb).encode(), UNMEASURED))]
    assert _verdict(LACKS, tokens) is Verdict.UNSUPPORTED
    assert _verdict(LACKS, tokens, close="open") is Verdict.UNSUPPORTED
    assert _verdict(LACKS, [*tokens, "R 3 0B"], close="RST") is Verdict.UNSUPPORTED


@pytest.mark.parametrize(
    "answer",
    [_rsp(-2, UnknownVerb(7).encode(), 0), _rsp(-2, UnknownVerb(104).encode(), 0), _rsp(-2, UserError(b"x").encode(), 0), _rsp(2, b"", 0)],
)
def test_any_other_answer_is_not_a_lacking_verb(answer: bytes) -> None:
    tokens = [t for t, _ in ServerObserver().feed(REPLY + answer)]
    assert _verdict(LACKS, tokens) is Verdict.FAIL


def test_no_connection_id_is_unsupported_streaming_only_with_its_fact() -> None:
    fact = "the parent connection got no CONNECTION_ID"
    assert _verdict(NO_STREAMING, [NEG], (fact,)) is Verdict.UNSUPPORTED
    assert _verdict(NO_STREAMING, [], (fact, "other"), close="open") is Verdict.UNSUPPORTED
    assert _verdict(NO_STREAMING, [NEG, "conn-id"], ()) is Verdict.FAIL
    assert _verdict(NO_STREAMING, [NEG], ("the parent connection got a CONNECTION_ID",)) is Verdict.FAIL


def test_the_conformance_verbs_are_those_of_section_11() -> None:
    assert (ECHO, SLEEP_MS, RAISE, SIZE) == (100, 101, 102, 103)
