"""Lumberjack server cases S1 (framing), S2 (windows) and S3 (ack values and
sequence numbers): refwire plays a Beats-like client against the testee server.
"""

from __future__ import annotations

from ....lumberjack.frames import V1
from ...conversation import Conversation
from ...model import expect
from ._common import (
    ALL,
    CLOSED,
    FAIL,
    KEEPALIVES,
    PASS,
    D,
    J,
    W,
    _send_and_wait_acks,
    _send_and_wait_close,
    field_cuts,
    server_book,
    window,
)

BOOK = server_book()
server_case = BOOK.server


# S1 framing ---------------------------------------------------------------


@server_case(
    "lj.S1.1",
    "v2-single-window",
    "One v2 window of one event is acked",
    "§3.1, §3.3",
    "Send `W1 J1`; expect `A 1` and the connection kept open.",
    [expect(PASS, ALL, ["A 1"], "open")],
    vectors=["json-seq-1"],
)
async def s1_1(c: Conversation) -> None:
    await _send_and_wait_acks(c, W(1) + J(1), 1, label="W1 J1")


@server_case(
    "lj.S1.2",
    "v1-kv-window",
    "A v1 window of key/value events is acked with a v1 ack",
    "§2.2, §3.3",
    "Send `1W2 1D1 1D2` in one write; expect `1A 2` (the ack carries the batch's version byte).",
    [expect(PASS, ALL, ["1A 2"], "open")],
    features=["v1"],
    tags=["v1"],
    vectors=["window-v1", "logstash-forwarder-v1"],
)
async def s1_2(c: Conversation) -> None:
    await _send_and_wait_acks(c, W(2, V1) + D(1) + D(2), 1, label="1W2 1D1 1D2", split="whole")


@server_case(
    "lj.S1.3",
    "byte-trickle",
    "A window written one byte per write is reassembled",
    "§1, §2",
    "Send `W2 J1 J2` one byte per write, 2 ms apart; expect `A 2`.",
    [expect(PASS, ALL, ["A 2"], "open")],
    budget=8.0,
)
async def s1_3(c: Conversation) -> None:
    await _send_and_wait_acks(c, window([1, 2]), 1, label="W2 J1 J2", split="bytes", gap=0.002, wait=5.0)


@server_case(
    "lj.S1.4",
    "frame-split-at-fields",
    "Frames split at every field boundary are reassembled",
    "§2",
    "Send `W2 J1 J2` cut at every field boundary (version, type, seq, length, payload), 50 ms apart; expect `A 2`.",
    [expect(PASS, ALL, ["A 2"], "open")],
    budget=6.0,
)
async def s1_4(c: Conversation) -> None:
    frames = [W(2), J(1), J(2)]
    await _send_and_wait_acks(c, b"".join(frames), 1, label="W2 J1 J2", split=field_cuts(frames), gap=0.05)


# S2 windows ---------------------------------------------------------------


@server_case(
    "lj.S2.1",
    "sequential-windows",
    "Sequential windows numbered 1..n are each acked",
    "§3.1-§3.3",
    "Send three windows (3, 2 and 4 events, each numbered from 1), each after the previous ack; expect `A 3, A 2, A 4`.",
    [expect(PASS, ALL, ["A 3", "A 2", "A 4"], "open")],
    budget=10.0,
)
async def s2_1(c: Conversation) -> None:
    for k, n in enumerate((3, 2, 4), start=1):
        if not await c.send(window(range(1, n + 1)), label=f"window {k}: W{n} J1..J{n}"):
            return
        if not await c.wait_tokens(k, 3.0, settle=0.0, ignore=KEEPALIVES):
            return
    await c.quiet(0.3)


@server_case(
    "lj.S2.2",
    "pipelined-windows",
    "Two windows sent back to back are acked in order",
    "§3.8",
    "Send `W2 J1 J2 W3 J1 J2 J3` in one write; expect `A 2, A 3` (windows of different sizes, so acks out of order show).",
    [expect(PASS, ALL, ["A 2", "A 3"], "open")],
    vectors=["pipelined-windows"],
)
async def s2_2(c: Conversation) -> None:
    await _send_and_wait_acks(c, window([1, 2]) + window([1, 2, 3]), 2, label="W2 J1 J2 W3 J1 J2 J3", split="whole")


@server_case(
    "lj.S2.3",
    "empty-window",
    "An empty window (`W 0`)",
    "§3.5",
    "Send `W0`, then `W1 J1`; strict and Logstash answer `A 0` then `A 1`, go-lumber ignores the `W 0`.",
    [expect(PASS, "strict logstash", ["A 0", "A 1"], "open"), expect(PASS, "go-lumber", ["A 1"], "open")],
    features=["empty-window"],
    ignore=(),
    vectors=["empty-window"],
)
async def s2_3(c: Conversation) -> None:
    if await c.send(W(0), label="W0"):
        await c.quiet(0.3)
        await _send_and_wait_acks(c, window([1]), 1, label="W1 J1")


@server_case(
    "lj.S2.4",
    "window-inside-unfinished",
    "A `W` inside an unfinished window is refused",
    "§3.1, §4",
    "Send `W3 J1 J2 W1 J3`; expect the connection closed with nothing acked (Logstash acks `A 2` and loses the next window, a documented bug).",
    [
        expect(PASS, "strict go-lumber", [], CLOSED),
        expect(
            FAIL,
            "logstash",
            ["A 2"],
            "open RST FIN",
            note="Logstash's documented bug: a short batch is acked and the next window is lost (§3.1)",
        ),
    ],
    vectors=["window-inside-unfinished-window"],
)
async def s2_4(c: Conversation) -> None:
    await _send_and_wait_close(c, W(3) + J(1) + J(2) + W(1) + J(3), label="W3 J1 J2 W1 J3")


# S3 ack values and sequence numbers ----------------------------------------


@server_case(
    "lj.S3.1",
    "ack-value-running-seq",
    "The ack names the batch's last sequence number",
    "§3.3",
    "Send `W2 J101 J102` (a running counter); strict and Logstash ack `A 102`, go-lumber acks the count `A 2`.",
    [expect(PASS, "strict logstash", ["A 102"], "open"), expect(PASS, "go-lumber", ["A 2"], "open")],
    vectors=["ack-last-seq-running", "ack-count-running"],
)
async def s3_1(c: Conversation) -> None:
    await _send_and_wait_acks(c, W(2) + J(101) + J(102), 1, label="W2 J101 J102")


@server_case(
    "lj.S3.2",
    "rollover-running-sequence",
    "A running counter wrapping past 2^32 - 1 is acked with its last seq",
    "§3.2",
    "Send `W3 J4294967294 J4294967295 J1` (a counter that wraps to 1, skipping 0); strict and Logstash ack `A 1` "
    "(Logstash's signed compare sees -2, -1, 1: the highest is the last), go-lumber `A 3`.",
    [
        expect(PASS, "strict logstash", ["A 1"], "open"),
        expect(PASS, "go-lumber", ["A 3"], "open"),
    ],
    ignore=(),
    vectors=["rollover-running-sequence"],
)
async def s3_2(c: Conversation) -> None:
    await _send_and_wait_acks(c, W(3) + J(4294967294) + J(4294967295) + J(1), 1, label="W3 J4294967294 J4294967295 J1")


@server_case(
    "lj.S3.3",
    "signed-compare-2^31",
    "A batch crossing 2^31 is acked once, with its last seq",
    "§3.2",
    "Send `W3 J2147483646 J2147483647 J2147483648`; strict acks `A 2147483648`, go-lumber `A 3`; Logstash acks "
    "`A 2147483647` (2^31 reads as negative, so its highest seq stops at 2^31 - 1) and never completes the batch "
    "(documented bug).",
    [
        expect(PASS, "strict", ["A 2147483648"], "open"),
        expect(PASS, "go-lumber", ["A 3"], "open"),
        expect(
            FAIL,
            "logstash",
            ["A 2147483647"],
            "open",
            note="Logstash compares seqs as signed ints: the ack tops out at 2^31 - 1, short of the batch's last event (§3.2)",
        ),
    ],
)
async def s3_3(c: Conversation) -> None:
    await _send_and_wait_acks(
        c, W(3) + J(2147483646) + J(2147483647) + J(2147483648), 1, label="W3 J2147483646 J2147483647 J2147483648"
    )


@server_case(
    "lj.S3.6",
    "rollover-to-zero",
    "A running counter wrapping to 0 is acked `A 0`, which reads as a keepalive",
    "§3.2, §3.4",
    "Send `W3 J4294967294 J4294967295 J0` (a counter that wraps to 0, as logstash-forwarder's does); strict and "
    "Logstash ack `A 0` (the last seq; Logstash's highest signed seq), which a client cannot tell from a keepalive; "
    "go-lumber acks `A 3`.",
    [
        expect(PASS, "strict logstash", ["A 0"], "open", note="an ack of 0 is also a keepalive's value: number from 1 (§3.2)"),
        expect(PASS, "go-lumber", ["A 3"], "open"),
    ],
    ignore=(),
)
async def s3_6(c: Conversation) -> None:
    # ``ignore=()``: the ack is ``A 0``; a keepalive before it would show as one more
    # token (a server acking at once sends none).
    if await c.send(W(3) + J(4294967294) + J(4294967295) + J(0), label="W3 J4294967294 J4294967295 J0"):
        await c.wait_tokens(1, 3.0)


@server_case(
    "lj.S3.4",
    "upper-half-sequence",
    "A batch in the upper half of the sequence space is acked",
    "§3.2",
    "Send `W2 J2147483653 J2147483654`; strict acks `A 2147483654`, go-lumber `A 2`; Logstash never acks it (documented bug).",
    [
        expect(PASS, "strict", ["A 2147483654"], "open"),
        expect(PASS, "go-lumber", ["A 2"], "open"),
        expect(FAIL, "logstash", [], "open", note="Logstash never acks a batch whose seqs lie in [2^31, 2^32 - 2] (§3.2)"),
    ],
)
async def s3_4(c: Conversation) -> None:
    await _send_and_wait_acks(c, W(2) + J(2147483653) + J(2147483654), 1, label="W2 J2147483653 J2147483654")


@server_case(
    "lj.S3.5",
    "ack-out-of-order-seqs",
    "The ack names the last event received, not the highest seq",
    "§3.3",
    "Send `W4 J8 J11 J2 J6`; strict acks `A 6` (last received), Logstash `A 11` (highest), go-lumber `A 4` (count); "
    "the first, the lowest and the last seq plus or minus one are all different values, so no wrong choice passes as another profile.",
    [
        expect(PASS, "strict", ["A 6"], "open"),
        expect(PASS, "logstash", ["A 11", "..."], "open"),
        expect(PASS, "go-lumber", ["A 4"], "open"),
    ],
)
async def s3_5(c: Conversation) -> None:
    await _send_and_wait_acks(c, W(4) + J(8) + J(11) + J(2) + J(6), 1, label="W4 J8 J11 J2 J6")


@server_case(
    "lj.S3.7",
    "ack-duplicate-seq",
    "A batch whose two events carry the same seq is acked once",
    "§3.3",
    "Send `W2 J1 J1`; strict acks `A 1` (the last event's seq), go-lumber `A 2` (the count); Logstash sends one "
    "`A 1` per event carrying the highest seq, so `A 1, A 1`.",
    [
        expect(PASS, "strict", ["A 1"], "open"),
        expect(PASS, "go-lumber", ["A 2"], "open"),
        expect(PASS, "logstash", ["A 1", "A 1"], "open", note="one ack per event that carries the highest seq (§3.3)"),
    ],
)
async def s3_7(c: Conversation) -> None:
    await _send_and_wait_acks(c, W(2) + J(1) + J(1), 1, label="W2 J1 J1")
