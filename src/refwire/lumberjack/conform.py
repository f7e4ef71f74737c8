"""Lumberjack conformance cases (``refwire conform lumberjack``).

Server cases (``lj.S…``): refwire plays a Beats-like client against the
testee server and judges its acks and how it closes.  Client cases
(``lj.C…``): refwire plays a server -- misbehaving on purpose where a case
says so -- and judges what the testee client sends and its exit status.

Profiles are the behaviours ``specs/lumberjack/README.md`` documents:
``strict`` (the spec; refwire's defaults), ``go-lumber`` (count acks, no
answer to ``W 0``, close on anything odd, §6) and ``logstash`` (highest-seq
acks with a signed compare, lenient framing, RST on errors, §6-§7).

Ids are never reused or renumbered: a retired case keeps its id, marked
retired in its title.  The bytes a case sends depend only on the run seed
and the case id (:func:`refwire.conform.model.case_seed`).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import orjson
import trio

from ..conform.clients import ClientSession
from ..conform.conversation import Conversation
from ..conform.model import CaseBook, Expect, Verdict, expect
from ..conform.runner import Catalogue
from ..errors import ProtocolError
from ..wire import Limits
from .frames import V1, V2, Ack, Compressed, DataFrame, FrameDecoder, JsonFrame, Window, decode_all, inflate

__all__ = ["CATALOGUE", "ClientObserver", "ServerObserver"]

SPEC = "specs/lumberjack/README.md"
PASS, NON_STRICT, INFO, FAIL = Verdict.PASS, Verdict.NON_STRICT, Verdict.INFO, Verdict.FAIL
ALL = "strict go-lumber logstash"
#: Keepalives may come at any time while a server holds a batch (§3.4).
KEEPALIVES = ("A 0", "1A 0")
CLOSED = "FIN RST"

PROFILES = {
    "strict": f"the behaviour {SPEC} specifies (refwire's defaults)",
    "go-lumber": "go-lumber's server (Beats' library): count acks, W 0 ignored, FIN on errors (§3.3, §6); "
    "as a client, Beats' go-lumber client: forgets a partial ack after an I/O error (§3.7)",
    "logstash": "Logstash's beats input: highest-seq acks with a signed compare, lenient framing, RST on errors (§3.3, §6, §7)",
}

FEATURES = {
    "v1": "protocol version 1 (W/D/A with version byte '1')",
    "compression": "C frames (zlib)",
    "compression.nested": "C frames inside C frames",
    "compression.window-inside": "a W inside a C frame",
    "empty-window": "answering W 0",
    "tls": "TLS (client cases: refwire serves TLS with a CA made for the run, passed as {tls_ca})",
}


# --------------------------------------------------------------------------- observer


class ServerObserver:
    """Tokens for what a server sends: ``A n`` (v2 ack), ``1A n`` (v1 ack), any
    other frame as its version and type (``2W``), ``invalid <field>`` at the
    first byte that does not decode (then nothing more is decoded)."""

    def __init__(self) -> None:
        self._dec = FrameDecoder(Limits(max_window=2**32 - 1, max_frame_size=1 << 20), validate_json=False, strict_versions=False)
        self._broken = False

    def feed(self, data: bytes) -> list[tuple[str, dict[str, Any]]]:
        if self._broken:
            return []
        self._dec.feed(data)
        frames, err = self._dec.frames_before_error()
        out = [self._token(f) for f in frames]
        if err is not None:
            self._broken = True
            out.append(_invalid(err))
        return out

    def eof(self) -> list[tuple[str, dict[str, Any]]]:
        if self._broken or not self._dec.buffered:
            return []
        return [("truncated", {"type": "truncated", "bytes": self._dec.buffered, "offset": self._dec.offset})]

    @staticmethod
    def _token(f: Any) -> tuple[str, dict[str, Any]]:
        if isinstance(f, Ack):
            prefix = "" if f.version == V2 else chr(f.version)
            return f"{prefix}A {f.seq}", {"type": "A", "version": chr(f.version), "seq": f.seq}
        name = type(f).__name__
        version = chr(getattr(f, "version", V2))
        return f"{version}{_LETTER.get(name, name)}", {"type": name, "version": version}


_LETTER = {"Window": "W", "JsonFrame": "J", "DataFrame": "D", "Compressed": "C"}


def _invalid(err: ProtocolError) -> tuple[str, dict[str, Any]]:
    return f"invalid {err.field or 'frame'}", {
        "type": "invalid",
        "field": err.field,
        "frame": err.frame,
        "offset": err.offset,
        "reason": err.reason,
    }


# --------------------------------------------------------------------------- frame helpers


def W(n: int, v: int = V2) -> bytes:
    return Window(n, v).encode()


def J(seq: int, doc: Any = None, *, raw: bytes | None = None) -> bytes:
    payload = raw if raw is not None else orjson.dumps(doc if doc is not None else {"message": f"event {seq}", "seq": seq})
    return JsonFrame(seq, payload).encode()


def D(seq: int, line: str = "hello") -> bytes:
    return DataFrame(seq, ((b"line", line.encode()), (b"seq", str(seq).encode()))).encode()


def C(inner: bytes, level: int = 6, v: int = V2) -> bytes:
    return Compressed(zlib.compress(inner, level), v).encode()


def window(seqs: Sequence[int], v: int = V2) -> bytes:
    return W(len(seqs), v) + b"".join(J(s) if v == V2 else D(s) for s in seqs)


def field_cuts(frames: Sequence[bytes]) -> list[int]:
    """Offsets of every field boundary of a run of W/J frames (§2)."""
    cuts: list[int] = []
    base = 0
    for f in frames:
        layout = (1, 2, 6) if f[1:2] == b"W" else (1, 2, 6, 10)
        cuts.extend(base + k for k in layout if k < len(f))
        base += len(f)
        cuts.append(base)
    return cuts[:-1]


# --------------------------------------------------------------------------- server cases

#: Every case of this catalogue; client cases' functions answer windows and are
#: wrapped in :func:`serve`, the serving loop.
BOOK = CaseBook(SPEC, server_ignore=KEEPALIVES, client_wrap=lambda fn: functools.partial(serve, answer=fn))
server_case = BOOK.server


async def _send_and_wait_acks(
    c: Conversation, data: bytes, acks: int, *, label: str, split: Any = "seeded", gap: float | None = None, wait: float = 3.0
) -> None:
    if await c.send(data, label=label, split=split, gap=gap):
        await c.wait_tokens(acks, wait, ignore=KEEPALIVES)


async def _send_and_wait_close(c: Conversation, data: bytes, *, label: str, wait: float = 3.0) -> None:
    if await c.send(data, label=label):
        await c.wait_close(wait)


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
    [expect(PASS, "strict logstash", ["A 2"], "open"), expect(PASS, "go-lumber", ["A 2"], "open")],
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
    "Send `W3 J4294967294 J4294967295 J1`; strict acks `A 1`, go-lumber `A 3`; Logstash acks `A 0`, which a client cannot tell from a keepalive (documented bug).",
    [
        expect(PASS, "strict", ["A 1"], "open"),
        expect(PASS, "go-lumber", ["A 3"], "open"),
        expect(
            FAIL, "logstash", ["A 0", "..."], "open", note="Logstash's signed compare acks a batch crossing 2^32 with 0 (§3.2)"
        ),
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
    "Send `W3 J2147483646 J2147483647 J2147483648`; strict acks `A 2147483648`, go-lumber `A 3`; Logstash acks early and never completes (documented bug).",
    [expect(PASS, "strict", ["A 2147483648"], "open"), expect(PASS, "go-lumber", ["A 3"], "open")],
)
async def s3_3(c: Conversation) -> None:
    await _send_and_wait_acks(
        c, W(3) + J(2147483646) + J(2147483647) + J(2147483648), 1, label="W3 J2147483646 J2147483647 J2147483648"
    )


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


@functools.cache
def _bomb_body() -> bytes:
    """The bomb's zlib stream (the same bytes every time: it depends on no seed)."""
    head = b'{"bomb":"'
    payload = head + b"a" * (BOMB_INFLATED - len(head) - 2) + b'"}'
    z = zlib.compressobj(9)
    inner = JsonFrame(1, b"").encode()[:6] + len(payload).to_bytes(4, "big")
    return z.compress(inner) + z.compress(payload) + z.flush()


@server_case(
    "lj.S4.4",
    "zlib-bomb",
    "A small `C` inflating past the size limit is refused",
    "§3.6, §4",
    f"Send `W1 C(J1)` where the `J`'s payload is a {BOMB_INFLATED >> 20} MiB JSON string (about 80 KiB compressed); "
    "expect the connection closed with nothing acked, within the budget.",
    [expect(PASS, "strict", [], CLOSED)],
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
    await _send_and_wait_close(
        c,
        W(1) + Compressed(body).encode(),
        label=f"W1 C(J1 with {BOMB_INFLATED >> 20} MiB payload) ({len(body)} bytes compressed)",
        wait=8.0,
    )


@server_case(
    "lj.S4.5",
    "compressed-truncated",
    "A truncated zlib stream is refused",
    "§3.6, §4",
    "Send `W2 C(J1 J2)` whose zlib stream lacks its last 8 bytes; strict and go-lumber close with nothing acked; Logstash keeps what inflated and waits.",
    [
        expect(PASS, "strict go-lumber", [], CLOSED),
        expect(NON_STRICT, "logstash", [], "open", note="Logstash uses the frames it could inflate (§3.6)"),
    ],
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
            NON_STRICT, "go-lumber logstash", ["A 1"], "open", note="the extra event is dropped or parked without an error (§3.6)"
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
        if await c.send(W(1, V1) + D(1), label="1W1 1D1"):
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
        expect(NON_STRICT, "logstash", ["A 10000"], "open", note="Logstash has no window limit (§4)"),
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


# --------------------------------------------------------------------------- client cases
#
# refwire plays the server; the testee client is asked (``{events}``) to send
# N distinct events and to exit 0 only once it believes all were acked.  An
# event is known by its payload bytes, so a resent event (renumbered or not)
# is recognised.  See specs/lumberjack/README.md §9 for the testee contract.


@attrs.define
class ClientWindow:
    """One window a client sent: its version, announced count and events (seq, payload key)."""

    version: int
    count: int
    events: list[tuple[int, bytes]] = attrs.field(factory=list)

    @property
    def full(self) -> bool:
        return len(self.events) >= self.count


class ClientObserver:
    """Tokens for what a client sends: ``W n`` (``1W n`` on v1), ``J seq`` /
    ``D seq`` per event (the events inside a ``C`` are inflated and shown the
    same way), ``invalid <field>`` at the first byte that does not decode.
    Complete windows collect in :attr:`done`."""

    def __init__(self) -> None:
        self._limits = Limits(max_window=2**32 - 1, max_frame_size=64 << 20)
        self._dec = FrameDecoder(self._limits, validate_json=False, strict_versions=False)
        self._broken = False
        self.current: ClientWindow | None = None
        self.done: list[ClientWindow] = []
        self.stray = 0

    def feed(self, data: bytes) -> list[tuple[str, dict[str, Any]]]:
        if self._broken:
            return []
        self._dec.feed(data)
        frames, err = self._dec.frames_before_error()
        out: list[tuple[str, dict[str, Any]]] = []
        for f in frames:
            self._frame(f, out, 0)
        if err is not None:
            self._broken = True
            out.append(_invalid(err))
        return out

    def _frame(self, f: Any, out: list[tuple[str, dict[str, Any]]], depth: int) -> None:
        v = "" if getattr(f, "version", V2) == V2 else chr(f.version)
        if isinstance(f, Window):
            self.current = ClientWindow(f.version, f.count)
            out.append((f"{v}W {f.count}", {"type": "W", "version": chr(f.version), "count": f.count}))
            if f.count == 0:
                self.done.append(self.current)
                self.current = None
        elif isinstance(f, (JsonFrame, DataFrame)):
            key = f.payload if isinstance(f, JsonFrame) else repr(f.pairs).encode()
            letter = "J" if isinstance(f, JsonFrame) else "D"
            out.append((f"{v}{letter} {f.seq}", {"type": letter, "version": chr(f.version), "seq": f.seq}))
            if self.current is None:
                self.stray += 1
                return
            self.current.events.append((f.seq, bytes(key)))
            if self.current.full:
                self.done.append(self.current)
                self.current = None
        elif isinstance(f, Compressed):
            if depth >= 4:
                out.append(("invalid C nesting", {"type": "invalid", "field": "payload"}))
                self._broken = True
                return
            try:
                inner = decode_all(
                    inflate(f.payload, max_size=64 << 20), self._limits, validate_json=False, strict_versions=False
                )
            except ProtocolError as exc:
                self._broken = True
                out.append(_invalid(exc))
                return
            for g in inner:
                self._frame(g, out, depth + 1)
        else:
            out.append((f"{v}{type(f).__name__[0]}", {"type": type(f).__name__}))

    def eof(self) -> list[tuple[str, dict[str, Any]]]:
        if self._broken or not self._dec.buffered:
            return []
        return [("truncated", {"type": "truncated", "bytes": self._dec.buffered})]


#: The client's exit status said "all acked" (or manual mode, where it is unknown).
EXIT_OK = "exit [0u]*"
#: The client reported a failure (or was killed at the budget end).
EXIT_FAILED = "exit [!0u]*"
CLOSED_ON_BAD = "closed the connection after the bad frame"


class LjState:
    """What refwire (as the server) acked and saw across a client case's connections."""

    def __init__(self, s: ClientSession) -> None:
        self.s = s
        self.windows = 0
        self.acked: set[bytes] = set()
        self.seen: set[bytes] = set()
        self.resent = 0
        self.resent_acked = 0
        self.bad_sent = False

    def arrived(self, win: ClientWindow) -> None:
        self.windows += 1
        for _, key in win.events:
            if key in self.seen:
                self.resent += 1
                if key in self.acked:
                    self.resent_acked += 1
            self.seen.add(key)

    async def ack(
        self, c: Conversation, win: ClientWindow, k: int, *, split: Any = "whole", gap: float | None = None, label: str = ""
    ) -> bool:
        """Ack the first ``k`` events of ``win`` the strict way: ``A <seq of event k>``."""
        seq = win.events[k - 1][0] if k else 0
        ok = await c.send(Ack(seq, win.version).encode(), label=label or f"A {seq}", split=split, gap=gap)
        if ok and k:
            self.acked.update(key for _, key in win.events[:k])
        return ok

    def finish(self, s: ClientSession) -> None:
        n = s.events
        got = len(self.acked)
        s.note(f"all {n} events acked" if got >= n else f"{got} of {n} events acked")
        s.note(f"resent {self.resent} event{'s' if self.resent > 1 else ''}" if self.resent else "no event resent")
        s.note("resent an acked event" if self.resent_acked else "no acked event resent")
        if len(s.conversations) > 1:
            s.note("reconnected")
        if s.exit_status == 0 and got < n:
            s.note(f"claims success with {n - got} of {n} events unacked")


Answer = Callable[[LjState, Conversation, ClientWindow], Awaitable[None]]


async def normal(st: LjState, c: Conversation, win: ClientWindow) -> None:
    await st.ack(c, win, len(win.events))


def _window_or_close(obs: ClientObserver, k: int) -> Callable[[Conversation], bool]:
    return lambda cv: len(obs.done) > k or cv.closed_by_testee is not None


async def serve(s: ClientSession, answer: Answer) -> None:
    """Accept the client's connections one after the other and answer each
    complete window with ``answer`` (acking is up to it) until the testee
    exits, the budget ends or (manual mode) every event was acked and the
    client closed."""
    st = LjState(s)
    s.after_exit.append(st.finish)
    while True:
        c = await s.accept(10.0 if not s.conversations else 5.0)
        if c is None:
            return
        obs = c.observer
        assert isinstance(obs, ClientObserver)
        k = 0
        while True:
            await c.wait_for(_window_or_close(obs, k), 60.0)
            if len(obs.done) > k:
                win = obs.done[k]
                k += 1
                st.arrived(win)
                if win.events:
                    await answer(st, c, win)
                elif win.count == 0:
                    await c.send(Ack(0, win.version).encode(), split="whole", label="A 0 (empty window)")
                continue
            break
        # Close our side too, at once: a TLS client may wait for our close_notify.
        await c.close("FIN")
        if s.manual and len(st.acked) >= s.events:
            return


async def bad_then_normal(
    st: LjState, c: Conversation, win: ClientWindow, bad: Callable[[ClientWindow], bytes | None], label: str
) -> None:
    """The first window gets ``bad(win)`` (None: not possible for this window,
    ack it normally); the client must close that connection.  Later windows
    are acked normally, so a client that reconnects and resends completes."""
    if st.bad_sent:
        await normal(st, c, win)
        return
    data = bad(win)
    if data is None:
        await normal(st, c, win)
        return
    st.bad_sent = True
    await c.send(data, label=label, split="whole")
    if c.closed_by_testee is not None or await c.wait_close(1.0):
        st.s.note(CLOSED_ON_BAD)
    else:
        st.s.note("kept the connection open after the bad frame")
        await c.close("FIN")



_DELIVERED = ("all {n} events acked", "no acked event resent", EXIT_OK)


def _delivered(n: int, *extra: str) -> tuple[str, ...]:
    return tuple(f.format(n=n) for f in _DELIVERED) + extra


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
        expect(Verdict.UNSUPPORTED, "*", ["..."], facts=[*_delivered(6)], note="no window had 3 or more events"),
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
    "normally; the client must verify, send and complete.",
    [expect(PASS, "*", ["..."], facts=_delivered(3))],
    events=3,
    tags=["tls"],
    features=["tls"],
)
async def c5_1(st: LjState, c: Conversation, win: ClientWindow) -> None:
    await normal(st, c, win)


# --------------------------------------------------------------------------- catalogue


async def serve_for_simulation(listener: Any, sink: str) -> None:
    """refwire's own server on ``listener``, writing each event to ``sink``
    before the ack (the server cases run against it inside the simulator)."""
    from .server import LumberjackServer

    async def write(batch: Any, info: Any) -> None:
        with Path(sink).open("ab") as f:
            for ev in batch.events:
                f.write(orjson.dumps(ev.fields()) + b"\n")

    await LumberjackServer(write).serve([listener])


async def client_for_simulation(connect: Callable[[], Awaitable[trio.abc.Stream]], values: Mapping[str, str]) -> int:
    """refwire's own client as a client-case testee (the §9 contract) for
    ``--client --sim``: v2, windows of 3, at most 5 attempts per window, the
    backoff jitter seeded from ``{seed}``; 0 once every one of ``{events}``
    events is acked, 1 when it gave up."""
    import random

    from .client import ClientConfig, LumberjackClient, SendFailed

    n = int(values["events"])
    cfg = ClientConfig(window_size=3, ack_timeout=30.0, max_attempts=5, backoff_initial=0.05, backoff_max=0.5)
    client = LumberjackClient(connect, config=cfg, rng=random.Random(int(values["seed"])))
    try:
        async with client:
            await client.send([{"message": f"conform event {i}", "n": i} for i in range(n)])
    except SendFailed:
        return 1
    return 0


CATALOGUE = Catalogue(
    protocol="lumberjack",
    prefix="lj",
    cases=tuple(BOOK.cases),
    profiles=PROFILES,
    features=FEATURES,
    server_observer=ServerObserver,
    client_observer=ClientObserver,
    spec=SPEC,
    sim_server=serve_for_simulation,
    warm=_bomb_body,
    sim_client=client_for_simulation,
)
