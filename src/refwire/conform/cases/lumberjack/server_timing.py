"""Lumberjack server cases S5: timing (a stalled batch, an idle connection, the
ack only after delivery, keepalives while the application holds a batch).
"""

from __future__ import annotations

from pathlib import Path

from ....logs import plural
from ....lumberjack.frames import V1, V2
from ...conversation import Conversation
from ...model import Expect, Verdict, expect
from ...runner import HOLDS_BATCHES, TesteeState
from ._common import ALL, CLOSED, FAIL, INFO, KEEPALIVES, PASS, D, J, W, server_book

UNSUPPORTED = Verdict.UNSUPPORTED

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
    # The marker carries the run id (§3.3 is judged on the sink): a sink that was not
    # emptied since an earlier run holds that run's events under another marker.
    marker = c.name(f"refwire-conform-{c.rng.getrandbits(64):016x}")
    already = _sink_count(c.sink, marker)
    if already:
        raise TesteeState(
            f"the sink {c.sink} already holds {plural(already, 'event')} marked {marker}, from an earlier run with this run id; "
            "run again with a fresh --run-id (the default), or empty the sink first"
        )
    data = W(2) + J(1, {"refwire_case": marker, "n": 1}) + J(2, {"refwire_case": marker, "n": 2})
    if await c.send(data, label=f"W2 J1 J2 (marked {marker})", answers=1) and await c.wait_for(
        lambda cv: any(t not in KEEPALIVES for t in cv.tokens), 3.0, label="the ack", answer=True
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


# S5.4-S5.5 keepalives while the application holds a batch (§3.4) ------------

#: The periods told apart (§3.4): go-lumber's 3 s, Logstash's and refwire's 5 s.
#: A testee owes a keepalive at least every :data:`OWED_PERIOD` seconds.
PERIODS = (3.0, 5.0)
OWED_PERIOD = 5.0
#: An interval fits period P when it lies in [EARLY * P, P + LATE] (§3.4).
EARLY, LATE = 0.5, 1.5
#: The shortest hold (--holds-batches) that owes a keepalive under every profile.
MIN_HOLD = OWED_PERIOD + LATE + 0.5
#: Seconds of a longer hold that are watched (then the case closes, the batch unacked).
WATCH = 12.0
NO_KEEPALIVE = "no keepalive while the batch was held"


def fits(intervals: list[float], tail: float, period: float) -> bool:
    """Whether keepalives timed ``intervals`` apart (the first from the batch),
    then ``tail`` seconds of silence until the ack or the end of the watch,
    fit ``period`` (§3.4): each interval in [EARLY * P, P + LATE], the tail
    at most P + LATE, and at least one keepalive."""
    low, high = EARLY * period, period + LATE
    return bool(intervals) and all(low <= i <= high for i in intervals) and tail <= high


async def _watch_keepalives(c: Conversation, v: int) -> None:
    """Send a window of one event, watch what the testee sends while its
    application holds it (``--holds-batches``), and note the keepalives' version
    byte and whether their timing fits each of :data:`PERIODS`."""
    hold = c.holds_batches or 0.0
    if hold < MIN_HOLD:
        c.note(f"--holds-batches {hold:g} is below the {MIN_HOLD:g} s this case needs")
        return
    name = "W1 J1" if v == V2 else "1W1 1D1"
    if not await c.send(W(1, v) + (J(1) if v == V2 else D(1)), label=name, split="whole", answers=1):
        return
    sent = c.now()
    watch = min(hold, WATCH) + LATE
    await c.wait_for(
        lambda cv: cv.closed_by_testee is not None or any(not f.get("keepalive") for f in cv.frames),
        watch,
        label="the ack (watching the keepalives)",
    )
    acks = [f["t"] for f in c.frames if not f.get("keepalive")]
    end = acks[0] if acks else c.now()
    held = [k for k in c.keepalives if k["t"] <= end]
    times = [k["t"] - sent for k in held]
    intervals = [b - a for a, b in zip([0.0, *times], times, strict=False)]
    tail = end - sent - (times[-1] if times else 0.0)
    c.action(
        f"keepalives {', '.join(f'{t:.3f}' for t in times) or 'none'} s after the batch; "
        f"{'acked' if acks else 'watch ended'} {end - sent:.3f} s after it"
    )
    if acks and end - sent < hold - 0.5:
        c.note(f"acked after {end - sent:.1f} s, sooner than --holds-batches {hold:g}")
    if not held:
        c.note(NO_KEEPALIVE)
        return
    c.note("keepalive version " + "/".join(sorted({str(k["version"]) for k in held})))
    for period in PERIODS:
        if fits(intervals, tail, period):
            c.note(f"keepalive period fits {period:g} s")


def _unjudgeable() -> list[Expect]:
    return [
        expect(
            UNSUPPORTED,
            "*",
            [],
            "open",
            facts=["--holds-batches * is below *"],
            note=f"a hold of at least {MIN_HOLD:g} s owes a keepalive under every profile",
        ),
        expect(
            INFO,
            "*",
            ["..."],
            facts=["acked after * s, sooner than --holds-batches *"],
            note="the testee held the batch less than --holds-batches said: its keepalives cannot be judged",
        ),
    ]


@server_case(
    "lj.S5.4",
    "keepalive-v2-while-held",
    "Keepalives on a v2 connection while the application holds a batch",
    "§3.4",
    f"Needs --holds-batches S (S ≥ {MIN_HOLD:g}). Send `W1 J1` and watch until the ack (at most min(S, {WATCH:g}) + {LATE:g} s): "
    f"every interval (batch to first keepalive, between keepalives, last one to the ack) must fit the period P, "
    f"[{EARLY:g}·P, P + {LATE:g} s]; strict: `A 0` (version '2') at least every {OWED_PERIOD:g} s; go-lumber: every 3 s; "
    "Logstash: every 5 s.",
    [
        *_unjudgeable(),
        expect(PASS, "strict go-lumber", ["..."], "open", facts=["keepalive version 2", "keepalive period fits 3 s"]),
        expect(PASS, "strict logstash", ["..."], "open", facts=["keepalive version 2", "keepalive period fits 5 s"]),
    ],
    tags=["slow", "keepalive", HOLDS_BATCHES],
    vectors=["keepalive-v2"],
)
async def s5_4(c: Conversation) -> None:
    await _watch_keepalives(c, V2)


@server_case(
    "lj.S5.5",
    "keepalive-v1-while-held",
    "Keepalives on a v1 connection while the application holds a batch",
    "§3.4",
    f"Needs --holds-batches S (S ≥ {MIN_HOLD:g}). Send `1W1 1D1` and watch as lj.S5.4 does; strict: `1A 0` (the connection's "
    f"version byte) at least every {OWED_PERIOD:g} s; go-lumber sends none on v1; Logstash sends `2A 0` every 5 s (its bug).",
    [
        *_unjudgeable(),
        expect(PASS, "strict", ["..."], "open", facts=["keepalive version 1", f"keepalive period fits {OWED_PERIOD:g} s"]),
        expect(PASS, "go-lumber", ["..."], "open", facts=[NO_KEEPALIVE], note="go-lumber's v1 writer sends no keepalives (§3.4)"),
        expect(
            FAIL,
            "logstash",
            ["..."],
            "open",
            facts=["keepalive version 2", "keepalive period fits 5 s"],
            note="Logstash's documented bug: '2A' 0 keepalives on a v1 connection, which v1 clients checking the version byte refuse (§3.4, §6)",
        ),
    ],
    features=["v1"],
    tags=["slow", "keepalive", "v1", HOLDS_BATCHES],
    vectors=["logstash-keepalive-on-v1"],
)
async def s5_5(c: Conversation) -> None:
    await _watch_keepalives(c, V1)
