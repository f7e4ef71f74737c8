"""Lumberjack server cases S4: compression (``C`` frames, nested, truncated, a
zlib bomb).
"""

from __future__ import annotations

import functools
import zlib

import trio

from ....lumberjack.frames import Compressed, JsonFrame
from ...conversation import Conversation
from ...model import expect
from ._common import ALL, CLOSED, FAIL, KEEPALIVES, PASS, C, J, W, _send_and_wait_acks, _send_and_wait_close, server_book

BOOK = server_book()
server_case = BOOK.server


# S4 compression -----------------------------------------------------------


@server_case(
    "lj.S4.1",
    "compressed-whole-window",
    "A window whose events travel in one `C` is acked",
    "§2.4, §3.6",
    "Send `W3 C(J1 J2 J3)` at a zlib level drawn from the case seed (0, 1, 6 or 9); expect `A 3`.",
    [expect(PASS, ALL, ["A 3"], "open")],
    features=["compression"],
    tags=["compression"],
    vectors=["compressed-json-seq-1-zlib-0", "compressed-json-seq-1-zlib-9"],
)
async def s4_1(c: Conversation) -> None:
    level = c.rng.choice((0, 1, 6, 9))
    c.action(f"zlib level {level}")
    await _send_and_wait_acks(c, W(3) + C(J(1) + J(2) + J(3), level), 1, label=f"W3 C{level}(J1 J2 J3)")


@server_case(
    "lj.S4.2",
    "compressed-nested",
    "A `C` inside a `C` is inflated",
    "§3.6",
    "Send `W2 C(C(J1 J2))`; expect `A 2`.",
    [expect(PASS, ALL, ["A 2"], "open")],
    features=["compression", "compression.nested"],
    tags=["compression"],
    vectors=["nested-compressed"],
)
async def s4_2(c: Conversation) -> None:
    await _send_and_wait_acks(c, W(2) + C(C(J(1) + J(2))), 1, label="W2 C(C(J1 J2))")


@server_case(
    "lj.S4.3",
    "window-inside-compressed",
    "A `W` inside a `C` starts a window",
    "§3.6",
    "Send `C(W2 J1 J2)`; strict and Logstash ack `A 2`, go-lumber closes.",
    [expect(PASS, "strict logstash", ["A 2"], "open"), expect(PASS, "go-lumber", [], CLOSED)],
    features=["compression", "compression.window-inside"],
    tags=["compression"],
    vectors=["timbersnake-window-inside-compressed"],
)
async def s4_3(c: Conversation) -> None:
    await _send_and_wait_acks(c, C(W(2) + J(1) + J(2)), 1, label="C(W2 J1 J2)")


#: Inflated size of the bomb: above the 64 MiB default limit (§4).
BOMB_INFLATED = 80 << 20


#: The bomb's JSON object has this many string fields of equal length, each
#: under 16 M characters: a JSON parser's own string-length limit (Jackson's
#: 20 M characters by default) never decides the case, only a limit on the
#: inflated size does.
BOMB_STRINGS = 8


def _bomb_payload_parts() -> list[bytes]:
    """``{"b0":"aaa…","b1":"aaa…",…}``, exactly :data:`BOMB_INFLATED` bytes, in pieces."""
    n = BOMB_STRINGS
    frame = sum(len(f'"b{i}":""'.encode()) for i in range(n)) + (n - 1) + 2  # keys, quotes, commas, braces
    each, extra = divmod(BOMB_INFLATED - frame, n)
    parts = [b"{"]
    for i in range(n):
        parts.append((b"," if i else b"") + f'"b{i}":"'.encode() + b"a" * (each + (1 if i < extra else 0)) + b'"')
    parts.append(b"}")
    return parts


@functools.cache
def _bomb_body() -> bytes:
    """The bomb's zlib stream (the same bytes every time: it depends on no seed)."""
    parts = _bomb_payload_parts()
    size = sum(map(len, parts))
    z = zlib.compressobj(9)
    inner = JsonFrame(1, b"").encode()[:6] + size.to_bytes(4, "big")
    return z.compress(inner) + b"".join(z.compress(p) for p in parts) + z.flush()


@server_case(
    "lj.S4.4",
    "zlib-bomb",
    "A small `C` inflating past the size limit is refused",
    "§3.6, §4",
    f"Send `W1 C(J1)` where the `J`'s payload is a {BOMB_INFLATED >> 20} MiB JSON object of {BOMB_STRINGS} strings "
    "(about 80 KiB compressed; no string long enough for a JSON parser's own limit to refuse it); expect the connection "
    "closed with nothing acked, within the budget.  go-lumber and Logstash put no limit on the inflated size and ack it "
    "(documented bug).",
    [
        expect(PASS, "strict", [], CLOSED),
        expect(
            FAIL,
            "go-lumber logstash",
            ["A 1"],
            note="no limit on a C frame's inflated size: the whole bomb is inflated, parsed and acked (§3.6, §4)",
        ),
    ],
    features=["compression"],
    tags=["compression"],
    vectors=["zlib-bomb"],
    budget=10.0,
)
async def s4_4(c: Conversation) -> None:
    # Built once, in a thread: compressing 80 MiB would stall the cases running beside this one
    # (--jobs).  Already built (the catalogue's ``warm`` ran first, as in the simulator, where a
    # thread would let virtual time jump by however long it took): no thread, no wait.
    body = _bomb_body() if _bomb_body.cache_info().currsize else await trio.to_thread.run_sync(_bomb_body)
    label = f"W1 C(J1 with {BOMB_INFLATED >> 20} MiB payload) ({len(body)} bytes compressed)"
    if await c.send(W(1) + Compressed(body).encode(), label=label):
        # The close, or an ack (a server with no limit): either decides the case.
        await c.wait_for(
            lambda c: c.closed_by_testee is not None or "flood" in c.tokens or any(t not in KEEPALIVES for t in c.tokens),
            8.0,
            label="the testee to close (or ack)",
        )
        await c.quiet(0.3)


@server_case(
    "lj.S4.5",
    "compressed-truncated",
    "A truncated zlib stream is refused",
    "§3.6, §4",
    "Send `W2 C(J1 J2)` whose zlib stream lacks its last 8 bytes, so it ends inside `J2`; expect the connection "
    "closed with nothing acked (lj.S4.7 cuts on a frame boundary instead).",
    [expect(PASS, ALL, [], CLOSED)],
    features=["compression"],
    tags=["compression"],
    vectors=["compressed-zlib-truncated"],
)
async def s4_5(c: Conversation) -> None:
    z = zlib.compress(J(1) + J(2), 6)[:-8]
    await _send_and_wait_close(c, W(2) + Compressed(z).encode(), label="W2 C(truncated zlib)")


@server_case(
    "lj.S4.6",
    "compressed-more-events-than-window",
    "A `C` holding more events than the window announced",
    "§3.6, §4",
    "Send `W1 C(J1 J2)`; strict acks `A 1` then closes (J2 is outside any window); go-lumber acks `A 1` and drops J2; Logstash acks `A 1` and parks J2.",
    [
        expect(PASS, "strict", ["A 1"], CLOSED),
        expect(
            PASS, "go-lumber logstash", ["A 1"], "open", note="the extra event is dropped or parked without an error (§3.6)"
        ),
    ],
    features=["compression"],
    tags=["compression"],
    vectors=["compressed-more-events-than-window"],
)
async def s4_6(c: Conversation) -> None:
    if await c.send(W(1) + C(J(1) + J(2)), label="W1 C(J1 J2)"):
        await c.wait_tokens(1, 3.0, settle=0.0, ignore=KEEPALIVES)
        await c.wait_close(1.0)


@server_case(
    "lj.S4.7",
    "compressed-truncated-on-frame-boundary",
    "A zlib stream cut after its last whole frame",
    "§3.6, §4",
    "Send `W2 C(J1 J2)` whose zlib stream lacks only its Adler-32 trailer, so `J1` and `J2` inflate whole; strict "
    "and go-lumber close with nothing acked (the stream never ends: go-lumber's inflater fails reading the checksum "
    "with the last bytes of `J2`); Logstash uses the frames that inflated and acks `A 2`.",
    [
        expect(PASS, "strict go-lumber", [], CLOSED),
        expect(
            PASS,
            "logstash",
            ["A 2"],
            "open",
            note="the frames that inflated are used; the stream's end and checksum are never checked (§3.6)",
        ),
    ],
    features=["compression"],
    tags=["compression"],
)
async def s4_7(c: Conversation) -> None:
    z = zlib.compress(J(1) + J(2), 6)[:-4]
    if await c.send(W(2) + Compressed(z).encode(), label="W2 C(J1 J2 without the Adler-32)"):
        await c.wait_for(
            lambda c: c.closed_by_testee is not None or any(t not in KEEPALIVES for t in c.tokens),
            3.0,
            label="the testee to close (or ack)",
        )
        await c.quiet(0.3)
