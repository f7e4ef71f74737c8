"""Lumberjack server cases S6: errors (what a server must refuse, and how it closes)."""

from __future__ import annotations

from ....lumberjack.frames import V1, Ack, DataFrame
from ...conversation import Conversation
from ...model import expect
from ._common import ALL, CLOSED, FAIL, KEEPALIVES, PASS, D, J, W, _send_and_wait_close, server_book, window

BOOK = server_book()
server_case = BOOK.server


# S6 errors ----------------------------------------------------------------

_CLOSE_ALL = [expect(PASS, ALL, [], CLOSED)]


@server_case(
    "lj.S6.1",
    "bad-version-byte",
    "A frame with version byte '3' is refused",
    "§2, §4",
    "Send `3W1 2J1`; expect the connection closed with nothing acked.",
    _CLOSE_ALL,
    vectors=["bad-version-byte"],
)
async def s6_1(c: Conversation) -> None:
    await _send_and_wait_close(c, b"3W" + (1).to_bytes(4, "big") + J(1), label="3W1 J1")


@server_case(
    "lj.S6.2",
    "unknown-frame-type",
    "An unknown frame type is refused",
    "§2, §4",
    "Send `W1` then a frame of type `X`; expect the connection closed with nothing acked.",
    _CLOSE_ALL,
    vectors=["unknown-frame-type"],
)
async def s6_2(c: Conversation) -> None:
    await _send_and_wait_close(c, W(1) + b"2X" + bytes(8), label="W1 2X")


@server_case(
    "lj.S6.3",
    "json-not-object",
    "A `J` whose JSON is not an object",
    "§2.3, §4",
    "Send `W1 J1` with the payload `[1,2]`; strict and Logstash close with nothing acked; go-lumber accepts it.",
    [expect(PASS, "strict logstash", [], CLOSED), expect(PASS, "go-lumber", ["A 1"], "open")],
    vectors=["json-array"],
)
async def s6_3(c: Conversation) -> None:
    await _send_and_wait_close(c, W(1) + J(1, raw=b"[1,2]"), label="W1 J1([1,2])")


@server_case(
    "lj.S6.4",
    "json-invalid",
    "A `J` whose payload is not JSON is refused",
    "§2.3, §4",
    "Send `W1 J1` with the payload `{not json`; expect the connection closed with nothing acked.",
    _CLOSE_ALL,
    vectors=["json-not-json"],
)
async def s6_4(c: Conversation) -> None:
    await _send_and_wait_close(c, W(1) + J(1, raw=b"{not json"), label="W1 J1({not json)")


@server_case(
    "lj.S6.5",
    "eof-inside-frame",
    "EOF inside a frame acks nothing of the batch",
    "§4",
    "Send `W2 J1` and half of `J2`, then FIN; expect nothing acked and the connection closed.",
    [expect(PASS, ALL, [], CLOSED)],
    vectors=["eof-inside-frame"],
)
async def s6_5(c: Conversation) -> None:
    j2 = J(2)
    if await c.send(W(2) + J(1) + j2[: len(j2) // 2], label="W2 J1 half-of-J2"):
        await c.half_close()
        await c.wait_close(3.0)


@server_case(
    "lj.S6.6",
    "version-switch",
    "A v1 batch after a v2 batch on one connection",
    "§3.10",
    "Send `W1 J1`, take `A 1`, then `1W1 1D1`; strict and go-lumber close after the first ack; Logstash acks both.",
    [expect(PASS, "strict go-lumber", ["A 1"], CLOSED), expect(PASS, "logstash", ["A 1", "1A 1"], "open")],
    features=["v1"],
    tags=["v1"],
    vectors=["version-change-between-batches"],
)
async def s6_6(c: Conversation) -> None:
    if await c.send(W(1) + J(1), label="W1 J1") and await c.wait_tokens(1, 3.0, settle=0.0, ignore=KEEPALIVES):
        # In one write: the case is about the version switch, not about a split `D`
        # (lj.S6.12 splits one on purpose).
        if await c.send(W(1, V1) + D(1), label="1W1 1D1", split="whole"):
            await c.wait_for(
                lambda cv: cv.closed_by_testee is not None or len(case_tokens(cv)) >= 2, 3.0, label="a close or a second ack"
            )
            await c.quiet(0.2)


def case_tokens(c: Conversation) -> list[str]:
    return [t for t in c.tokens if t not in KEEPALIVES]


@server_case(
    "lj.S6.7",
    "http-on-port",
    "An HTTP request on the port is refused promptly",
    "§4",
    "Send `GET / HTTP/1.1` with a Host header; expect the connection closed within 3 s, with no Lumberjack frame in reply.",
    _CLOSE_ALL,
    vectors=["http-request"],
)
async def s6_7(c: Conversation) -> None:
    await _send_and_wait_close(c, b"GET / HTTP/1.1\r\nHost: refwire-conform\r\n\r\n", label="GET / HTTP/1.1")


@server_case(
    "lj.S6.8",
    "ack-from-client",
    "An `A` frame from the client is refused",
    "§4",
    "Send `A 1` as the first frame; expect the connection closed.",
    _CLOSE_ALL,
    vectors=["ack-from-client"],
)
async def s6_8(c: Conversation) -> None:
    await _send_and_wait_close(c, Ack(1).encode(), label="A 1 (from the client)")


@server_case(
    "lj.S6.9",
    "data-without-window",
    "An event before any `W` is refused",
    "§3.1, §4",
    "Send `J1` with no window; strict and go-lumber close; Logstash parks it forever, never acked (documented bug).",
    [
        expect(PASS, "strict go-lumber", [], CLOSED),
        expect(FAIL, "logstash", [], "open", note="Logstash keeps data without a W in a batch that is never acked (§3.1)"),
    ],
    vectors=["data-without-window"],
)
async def s6_9(c: Conversation) -> None:
    await _send_and_wait_close(c, J(1), label="J1 (no W)")


@server_case(
    "lj.S6.10",
    "window-over-limit",
    "A window of 10 000 events is acked, one above 10 000 is refused",
    "§4",
    "Send `W 10000` and its 10 000 events, take `A 10000`, then `W 10001`; strict and go-lumber close "
    "(their limit is exactly 10 000); Logstash has no limit and waits.",
    [
        expect(PASS, "strict go-lumber", ["A 10000"], CLOSED),
        expect(PASS, "logstash", ["A 10000"], "open", note="no window limit, or one above 10000, as Logstash (§4)"),
    ],
    tags=["strict"],
    vectors=["window-over-limit"],
    budget=8.0,
)
async def s6_10(c: Conversation) -> None:
    if await c.send(window(range(1, 10001)), label="W10000 J1..J10000", split="whole") and await c.wait_tokens(
        1, 4.0, settle=0.0, ignore=KEEPALIVES
    ):
        await _send_and_wait_close(c, W(10001), label="W10001")


@server_case(
    "lj.S6.11",
    "ack-then-reset",
    "An event the server cannot take is refused before its batch is acked",
    "§3.3, §4",
    "Send `W3 J3 J1 J2` where `J1`'s payload is `[1,2]`; strict closes with nothing acked (no event of a batch may "
    "be acked that the application will not get); go-lumber takes the array and acks `A 3`; Logstash acks `A 3` and "
    "then resets, so `J1` and `J2` are acked but never delivered (documented bug).",
    [
        expect(PASS, "strict", [], CLOSED),
        expect(PASS, "go-lumber", ["A 3"], "open"),
        expect(
            FAIL,
            "logstash",
            ["A 3"],
            CLOSED,
            note="Logstash acks the batch's highest seq, then fails on the array and resets: acked events are lost (§3.3)",
        ),
    ],
)
async def s6_11(c: Conversation) -> None:
    if await c.send(W(3) + J(3) + J(1, raw=b"[1,2]") + J(2), label="W3 J3 J1([1,2]) J2"):
        await c.wait_close(3.0)


@server_case(
    "lj.S6.12",
    "v1-data-split",
    "A v1 `D` frame split across reads",
    "§2.2, §6",
    "Send `1W1 1D1` in three writes 50 ms apart, cut inside the `D`'s pairs; strict and go-lumber ack `1A 1`; "
    "Logstash reads a v1 `D` from the bytes at hand and resets when they end inside it (documented bug).",
    [
        expect(PASS, "strict go-lumber", ["1A 1"], "open"),
        expect(FAIL, "logstash", [], CLOSED, note="Logstash's v1 decoder needs a whole D frame in one read (§6)"),
    ],
    features=["v1"],
    tags=["v1"],
)
async def s6_12(c: Conversation) -> None:
    w, d = W(1, V1), D(1)
    cuts = [len(w) + 13, len(w) + len(d) - 3]  # in the first pair's key, then in the last pair's value
    if await c.send(w + d, label="1W1 1D1", split=cuts, gap=0.05):
        await c.wait_for(
            lambda cv: cv.closed_by_testee is not None or len(case_tokens(cv)) >= 1, 3.0, label="an ack or a close"
        )
        await c.quiet(0.3)


@server_case(
    "lj.S6.13",
    "v1-data-no-pairs",
    "A v1 `D` frame with no key/value pairs is an event",
    "§2.2",
    "Send `1W1 1D1` whose `D` holds 0 pairs; strict and go-lumber ack `1A 1`; Logstash resets (documented bug).",
    [
        expect(PASS, "strict go-lumber", ["1A 1"], "open"),
        expect(FAIL, "logstash", [], CLOSED, note="Logstash refuses a D frame with 0 pairs (§6)"),
    ],
    features=["v1"],
    tags=["v1"],
)
async def s6_13(c: Conversation) -> None:
    data = W(1, V1) + DataFrame(1, ()).encode()
    if await c.send(data, label="1W1 1D1(0 pairs)", split="whole"):
        await c.wait_for(
            lambda cv: cv.closed_by_testee is not None or len(case_tokens(cv)) >= 1, 3.0, label="an ack or a close"
        )
        await c.quiet(0.3)
