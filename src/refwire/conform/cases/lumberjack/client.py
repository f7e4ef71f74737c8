"""Lumberjack client cases (``lj.C…``): refwire plays the server -- misbehaving on
purpose where a case says so -- and the testee client is asked (``{events}``)
to send N distinct events and to exit 0 only once it believes all were acked.
An event is known by its payload bytes, so a resent event (renumbered or not)
is recognised.  See specs/lumberjack/README.md §9 for the testee contract.
"""

from __future__ import annotations

import functools

from ....lumberjack.frames import V1, V2, Ack
from ...conversation import Conversation
from ...model import CaseBook, Expect, Verdict, expect
from ._common import FAIL, INFO, PASS, SPEC
from ._serving import (
    CLOSED_ON_BAD,
    EXIT_FAILED,
    EXIT_OK,
    NO_BAD_FRAME,
    ClientWindow,
    LjState,
    _delivered,
    bad_then_normal,
    normal,
    serve,
)

#: The client cases; each case's function answers windows and is wrapped in
#: :func:`~._serving.serve`, the serving loop.
BOOK = CaseBook(SPEC, client_wrap=lambda fn: functools.partial(serve, answer=fn))
client_case = BOOK.client


def _bad_case_expects(n: int, what: str) -> list[Expect]:
    return [
        expect(PASS, "*", ["..."], facts=[CLOSED_ON_BAD, *_delivered(n)], note=f"closed on {what}, reconnected and resent"),
        expect(PASS, "*", ["..."], facts=[CLOSED_ON_BAD, EXIT_FAILED], note=f"closed on {what} and reported the failure"),
    ]


# C1 acks ------------------------------------------------------------------


@client_case(
    "lj.C1.1",
    "count-acks",
    "Acks carrying the window's event count (go-lumber's server)",
    "§3.3",
    "Ack every window with `A <number of its events>`, as go-lumber does. A client numbering 1..n per window "
    "reads that as its last seq and completes; a running-counter client must at least close and report the "
    "failure at once, never hang nor claim success.",
    [
        expect(PASS, "*", ["..."], facts=_delivered(6)),
        expect(
            INFO,
            "*",
            ["..."],
            facts=["closed at once on the count ack", EXIT_FAILED],
            note="a running-counter client cannot work with a count-acking server (§3.3)",
        ),
    ],
    events=6,
    vectors=["ack-count-running"],
)
async def c1_1(st: LjState, c: Conversation, win: ClientWindow) -> None:
    n = len(win.events)
    if not await c.send(Ack(n, win.version).encode(), split="whole", label=f"A {n} (count)"):
        return
    if win.events[-1][0] == n:
        st.acked.update(key for _, key in win.events)
        return
    st.acked.update(key for _, key in win.events)  # go-lumber means: the whole window
    if await c.wait_close(3.0):
        st.s.note("closed at once on the count ack")


@client_case(
    "lj.C1.2",
    "partial-acks",
    "Partial acks: `A 1` then `A 2` for `W 2`",
    "§3.3, §3.7",
    "Ack each window of n >= 2 events first up to event n/2 (`A 1` for `W2`), then, 0.3 s later, in full. "
    "The client must keep waiting after the partial ack, not resend the acked events, and complete.",
    [expect(PASS, "*", ["..."], facts=_delivered(4, "no event resent"))],
    events=4,
    vectors=["partial-acks"],
)
async def c1_2(st: LjState, c: Conversation, win: ClientWindow) -> None:
    n = len(win.events)
    if n >= 2 and win.events[n // 2 - 1][0] != 0:
        if not await st.ack(c, win, n // 2, label=f"A {win.events[n // 2 - 1][0]} (partial: {n // 2} of {n})"):
            return
        await c.sleep(0.3)
        if c.closed_by_testee is not None:
            return
    await normal(st, c, win)


@client_case(
    "lj.C1.3",
    "ack-split-bytes",
    "An ack arriving one byte per TCP segment",
    "§1, §2.5",
    "Write each ack one byte at a time, 50 ms apart; the client must reassemble it and complete.",
    [expect(PASS, "*", ["..."], facts=_delivered(3))],
    events=3,
)
async def c1_3(st: LjState, c: Conversation, win: ClientWindow) -> None:
    await st.ack(c, win, len(win.events), split="bytes", gap=0.05)


# C2 keepalives ------------------------------------------------------------


@client_case(
    "lj.C2.1",
    "keepalives-then-ack",
    "Keepalives (`A 0`) before the ack are not acks",
    "§3.4",
    "Answer each window with three `A 0` keepalives 0.5 s apart, then the ack. The client must wait for the "
    "real ack (a keepalive is not success), not resend, and complete.",
    [expect(PASS, "*", ["..."], facts=_delivered(3, "no event resent"))],
    events=3,
    vectors=["keepalives-then-ack"],
)
async def c2_1(st: LjState, c: Conversation, win: ClientWindow) -> None:
    for _ in range(3):
        if not await c.send(Ack(0, win.version).encode(), split="whole", label="A 0 (keepalive)"):
            return
        await c.sleep(0.5, quiet=True)
    if c.closed_by_testee is None:
        await normal(st, c, win)


@client_case(
    "lj.C2.2",
    "keepalives-40s",
    "Keepalives every 2 s for 40 s re-arm the ack timeout",
    "§3.4, §3.9",
    "Answer the first window with `A 0` every 2 s for 40 s, then the ack (later windows at once). A client "
    "with a 30 s ack timeout re-armed by keepalives must neither time out nor resend.",
    [expect(PASS, "*", ["..."], facts=_delivered(2, "no event resent"))],
    events=2,
    tags=["slow", "serial"],
    budget=60.0,
    vectors=["keepalives-then-ack"],
)
async def c2_2(st: LjState, c: Conversation, win: ClientWindow) -> None:
    if st.windows == 1:
        for _ in range(20):
            if c.closed_by_testee is not None or not await c.send(
                Ack(0, win.version).encode(), split="whole", label="A 0 (keepalive)"
            ):
                return
            await c.sleep(2.0, quiet=True)
    await normal(st, c, win)


@client_case(
    "lj.C2.3",
    "v2-keepalive-on-v1",
    "Logstash's `2A 0` keepalive on a v1 connection",
    "§3.4",
    "When the client sends a v1 window, answer with `2A 0` twice (as Logstash does), then `1A <last seq>`. "
    "The client must take the keepalive as one and complete. A v2 client has nothing to show here (UNSUPPORTED).",
    [
        expect(Verdict.UNSUPPORTED, "*", ["..."], facts=["the client sent v2*"], note="the case needs a v1 client"),
        expect(PASS, "*", ["..."], facts=_delivered(2, "no event resent")),
    ],
    events=2,
    features=["v1"],
    tags=["v1"],
    vectors=["logstash-keepalive-on-v1"],
)
async def c2_3(st: LjState, c: Conversation, win: ClientWindow) -> None:
    if win.version == V2:
        st.s.note("the client sent v2 windows: the case needs v1")
    else:
        for _ in range(2):
            if not await c.send(Ack(0, V2).encode(), split="whole", label="2A 0 (Logstash's keepalive on v1)"):
                return
            await c.sleep(0.5, quiet=True)
    if c.closed_by_testee is None:
        await normal(st, c, win)


# C3 failures: at-least-once -----------------------------------------------


@client_case(
    "lj.C3.1",
    "never-ack",
    "A server that never acks: time out, reconnect, resend",
    "§3.7, §3.9",
    "Never answer the first window (no ack, no keepalive) and wait up to 40 s; the client must time out, "
    "close, reconnect and resend the whole window (at-least-once), which is then acked.",
    [expect(PASS, "*", ["..."], facts=[*_delivered(2), "reconnected", "resent [1-9]* event*"])],
    events=2,
    tags=["slow", "serial"],
    features=["resend"],
    budget=60.0,
)
async def c3_1(st: LjState, c: Conversation, win: ClientWindow) -> None:
    if st.bad_sent:
        await normal(st, c, win)
        return
    st.bad_sent = True
    c.action("never answer this window")
    if not await c.wait_close(40.0):
        await c.close("FIN")


@client_case(
    "lj.C3.2",
    "rst-mid-window",
    "A connection reset with the window half acked",
    "§3.7",
    "Ack the first window up to event n/2 (when n >= 2), then reset the connection (RST); the client must "
    "reconnect and resend the unacked events, which are then acked. strict: only the unacked ones; "
    "go-lumber's client forgets the partial ack and resends the whole window.",
    [
        expect(PASS, "strict logstash", ["..."], facts=[*_delivered(4), "reconnected"]),
        expect(
            PASS,
            "go-lumber",
            ["..."],
            facts=["all 4 events acked", "resent an acked event", EXIT_OK, "reconnected"],
            note="go-lumber's client forgets a partial ack after an I/O error (§3.7)",
        ),
    ],
    events=4,
    features=["resend"],
)
async def c3_2(st: LjState, c: Conversation, win: ClientWindow) -> None:
    if st.bad_sent:
        await normal(st, c, win)
        return
    st.bad_sent = True
    n = len(win.events)
    if n >= 2 and win.events[n // 2 - 1][0] != 0:
        if not await st.ack(c, win, n // 2, label="partial ack"):
            return
        await c.sleep(0.2)
    await c.close("RST")


# C4 invalid frames from the server ----------------------------------------


def _beyond(win: ClientWindow) -> bytes:
    seq = (win.events[-1][0] + 5) % 2**32 or 5
    return Ack(seq, win.version).encode()


@client_case(
    "lj.C4.1",
    "ack-beyond-window",
    "An ack naming no event of the window",
    "§3.3, §4",
    "Answer the first window with `A <last seq + 5>`; the client must close that connection (then it may "
    "reconnect and resend, or report the failure); it must not take the ack as success.",
    _bad_case_expects(2, "an ack beyond its window"),
    events=2,
    vectors=["ack-beyond-window"],
)
async def c4_1(st: LjState, c: Conversation, win: ClientWindow) -> None:
    await bad_then_normal(st, c, win, _beyond, "A beyond the window")


def _backwards(win: ClientWindow) -> bytes | None:
    if len(win.events) < 3:
        return None
    return Ack(win.events[1][0], win.version).encode() + Ack(win.events[0][0], win.version).encode()


@client_case(
    "lj.C4.2",
    "ack-goes-backwards",
    "An ack going backwards",
    "§3.3, §4",
    "Answer the first window of 3 or more events with `A <seq of event 2>` then `A <seq of event 1>`; the "
    "client must close that connection.",
    [
        *_bad_case_expects(6, "an ack going backwards"),
        expect(Verdict.UNSUPPORTED, "*", ["..."], facts=[NO_BAD_FRAME], note="no window had 3 or more events"),
        expect(
            FAIL,
            "go-lumber",
            ["..."],
            facts=["kept the connection open after the bad frame"],
            note="go-lumber's client reads acks until one reaches the window's size and never checks that they go forward (§3.3)",
        ),
    ],
    events=6,
    vectors=["ack-goes-backwards"],
)
async def c4_2(st: LjState, c: Conversation, win: ClientWindow) -> None:
    if not st.bad_sent and len(win.events) >= 3:
        st.acked.update(key for _, key in win.events[:2])  # the first `A` is a valid partial ack
    await bad_then_normal(st, c, win, _backwards, "A 2 then A 1 (backwards)")


@client_case(
    "lj.C4.3",
    "ack-wrong-version",
    "An ack with the other version byte",
    "§3.3, §4",
    "Answer the first window with its ack carrying the other version byte (`1A` on v2, `2A` on v1); "
    "the client must close that connection.",
    _bad_case_expects(2, "an ack with the wrong version byte"),
    events=2,
    vectors=["ack-wrong-version"],
)
async def c4_3(st: LjState, c: Conversation, win: ClientWindow) -> None:
    def wrong(w: ClientWindow) -> bytes:
        return Ack(w.events[-1][0], V1 if w.version == V2 else V2).encode()

    await bad_then_normal(st, c, win, wrong, "ack with the wrong version byte")


@client_case(
    "lj.C4.4",
    "unknown-server-frame",
    "An unknown frame type from the server",
    "§2, §4",
    "Answer the first window with `2Z` and four bytes; the client must close that connection, not hang.",
    _bad_case_expects(2, "an unknown frame"),
    events=2,
    vectors=["server-sends-unknown-type"],
)
async def c4_4(st: LjState, c: Conversation, win: ClientWindow) -> None:
    await bad_then_normal(st, c, win, lambda w: b"2Z" + bytes(4), "2Z (unknown frame type)")


# C5 TLS -------------------------------------------------------------------


@client_case(
    "lj.C5.1",
    "tls-window",
    "Events over TLS",
    "§1",
    "Serve TLS with a certificate for 127.0.0.1/localhost from a CA made for the run (`{tls_ca}`); ack "
    "normally; the client must connect, send and complete. The certificate is valid, so a client that does not "
    "verify it passes too: this case does not test verification.",
    [expect(PASS, "*", ["..."], facts=_delivered(3))],
    events=3,
    tags=["tls"],
    features=["tls"],
)
async def c5_1(st: LjState, c: Conversation, win: ClientWindow) -> None:
    await normal(st, c, win)
