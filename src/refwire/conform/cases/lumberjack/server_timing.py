"""Lumberjack server cases S5: timing (a stalled batch, an idle connection, the
ack only after delivery).
"""

from __future__ import annotations

from pathlib import Path

from ...conversation import Conversation
from ...model import expect
from ._common import ALL, CLOSED, INFO, KEEPALIVES, PASS, J, W, server_book

BOOK = server_book()
server_case = BOOK.server


# S5 timing ----------------------------------------------------------------


@server_case(
    "lj.S5.1",
    "stall-mid-batch",
    "A client that stalls inside a batch",
    "§3.9",
    "Send `W3 J1 J2`, then nothing for 35 s; strict and go-lumber close after their 30 s batch timeout with nothing acked; Logstash sends `A 0` keepalives and waits forever.",
    [
        expect(INFO, "strict go-lumber", [], CLOSED),
        expect(
            INFO, "logstash", ["A 0", "..."], "open", note="keepalives count as activity: a stalled client is never closed (§6)"
        ),
    ],
    tags=["slow", "serial"],
    budget=40.0,
    ignore=(),
)
async def s5_1(c: Conversation) -> None:
    if await c.send(W(3) + J(1) + J(2), label="W3 J1 J2 (one event short)"):
        await c.wait_close(35.0)


@server_case(
    "lj.S5.2",
    "idle-between-batches",
    "An idle connection between batches",
    "§3.9",
    "Send `W1 J1`, take the ack, then stay silent for 65 s; strict and Logstash close after 60 s idle, go-lumber keeps the connection.",
    [expect(INFO, "strict logstash", ["A 1"], CLOSED), expect(INFO, "go-lumber", ["A 1"], "open")],
    tags=["slow", "serial"],
    budget=70.0,
)
async def s5_2(c: Conversation) -> None:
    if await c.send(W(1) + J(1), label="W1 J1"):
        await c.wait_tokens(1, 3.0, settle=0.0, ignore=KEEPALIVES)
        await c.wait_close(65.0)


@server_case(
    "lj.S5.3",
    "ack-after-delivery",
    "The ack comes only after the application holds the batch",
    "§3.3",
    "Send `W2 J1 J2` with events marked for this case; when `A 2` arrives, the testee's sink (--sink, one JSON event per line) must already hold both events.",
    [expect(PASS, ALL, ["A 2"], "open", facts=["sink: 2 of 2 delivered before the ack"])],
    needs_sink=True,
)
async def s5_3(c: Conversation) -> None:
    marker = f"refwire-conform-{c.rng.getrandbits(64):016x}"
    data = W(2) + J(1, {"refwire_case": marker, "n": 1}) + J(2, {"refwire_case": marker, "n": 2})
    if await c.send(data, label=f"W2 J1 J2 (marked {marker})") and await c.wait_for(
        lambda cv: bool(cv.tokens), 3.0, label="the ack"
    ):
        delivered = _sink_count(c.sink, marker)
        c.note(f"sink: {delivered} of 2 delivered before the ack")
        await c.quiet(0.2)


def _sink_count(sink: str | None, marker: str) -> int:
    if not sink:
        return 0
    try:
        with Path(sink).open("rb") as f:
            return sum(1 for line in f if marker.encode() in line)
    except OSError:
        return 0
