"""Seastar RPC server cases (``ss.S…``): refwire plays a Seastar client against the
testee server, which registers the conformance verbs of §11.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from ....seastar_rpc.compression import LZ4, LZ4_FRAGMENTED, envelope, make_compressor
from ....seastar_rpc.frames import Features, Negotiation, Request, Response, UserError, decode_exception
from ....seastar_rpc.negotiation import Feature
from ...conversation import Conversation
from ...model import CaseBook, Expect, expect
from ._common import ALL, CLOSED, ECHO, LACKS, NEG, NO_STREAMING, PASS, RAISE, SIZE, SLEEP_MS, SPEC, UNSUPPORTED, ServerObserver

# --------------------------------------------------------------------------- helpers

BOOK = CaseBook(SPEC, server_ignore=("conn-id",))
server_case = BOOK.server

DEFAULT_OFFER = Features(timeout=True, handler_duration=True)


def _obs(c: Conversation) -> ServerObserver:
    assert isinstance(c.observer, ServerObserver)
    return c.observer


async def negotiate(c: Conversation, offer: Features = DEFAULT_OFFER, *, wait: float = 3.0) -> bool:
    """Send ``offer``; True once the server's negotiation reply came."""
    if not await c.send(offer.encode(), label="negotiation"):
        return False
    return await c.wait_for(lambda cv: _obs(cv).reply is not None, wait, label="the negotiation reply")


def request(c: Conversation, verb: int, payload: bytes, *, msg_id: int, timeout_ms: int = 0) -> bytes:
    """A request frame, wrapped in the negotiated compressor's envelope."""
    reply = _obs(c).reply
    frame = Request(verb, msg_id, payload, timeout_ms).encode(with_timeout=reply is not None and reply.timeout)
    if reply is not None and reply.compress in (LZ4, LZ4_FRAGMENTED):
        return envelope(make_compressor(reply.compress), frame)
    return frame


def _msg_id(c: Conversation) -> int:
    return c.rng.randrange(1, 2**31)


def _answered(c: Conversation, msg_id: int) -> Callable[[Conversation], bool]:
    return lambda cv: any(abs(r.msg_id) == msg_id for r in _obs(cv).responses)


async def call(
    c: Conversation, verb: int, payload: bytes, *, label: str, timeout_ms: int = 0, wait: float = 3.0
) -> Response | None:
    """One call; the reply (or exception reply) for its id, or None."""
    msg_id = _msg_id(c)
    if not await c.send(request(c, verb, payload, msg_id=msg_id, timeout_ms=timeout_ms), label=label):
        return None
    await c.wait_for(_answered(c, msg_id), wait, label=f"the reply to {msg_id}")
    got = [r for r in _obs(c).responses if abs(r.msg_id) == msg_id]
    if not got:
        return None
    r = got[0]
    c.note("reply id = request id" if r.msg_id == msg_id else "exception id = -request id")
    return r


async def echo(c: Conversation, n: int, *, wait: float = 3.0) -> None:
    payload = c.rng.randbytes(n)
    r = await call(c, ECHO, payload, label=f"echo {n} bytes", wait=wait)
    if r is not None and r.msg_id > 0:
        c.note("payload identical" if r.payload == payload else f"payload differs ({len(r.payload)} bytes back)")
    await c.quiet(0.1)


def echo_expects(n: int) -> list[Expect]:
    return [expect(PASS, ALL, [NEG, f"R * {n}B"], "open", facts=["reply id = request id", "payload identical"]), LACKS]


async def negotiate_only(c: Conversation, offer: Features) -> None:
    await negotiate(c, offer)
    await c.quiet(0.3)


async def refused(c: Conversation, data: bytes, *, label: str) -> None:
    """Send ``data`` and wait for the server to close."""
    if await c.send(data, label=label):
        await c.wait_close(3.0)


_CLOSED_SILENTLY = [expect(PASS, ALL, [], CLOSED)]


# S1 negotiation -----------------------------------------------------------


@server_case(
    "ss.S1.1",
    "echo-timeout-duration",
    "TIMEOUT and HANDLER_DURATION offered are both echoed",
    "§2",
    "Offer TIMEOUT + HANDLER_DURATION; expect a reply echoing both (a CONNECTION_ID is allowed), connection open.",
    [expect(PASS, ALL, [NEG], "open")],
    vectors=["C1-to-C2"],
)
async def s1_1(c: Conversation) -> None:
    await negotiate_only(c, DEFAULT_OFFER)


@server_case(
    "ss.S1.2",
    "unknown-feature-ignored",
    "An unknown feature is ignored, not echoed",
    "§2, §9.1",
    "Offer TIMEOUT + feature 77 (4 seeded bytes); expect `neg TIMEOUT` only, connection open.",
    [expect(PASS, ALL, ["neg TIMEOUT"], "open")],
)
async def s1_2(c: Conversation) -> None:
    await negotiate_only(c, Features(timeout=True, unknown=((77, c.rng.randbytes(4)),)))


@server_case(
    "ss.S1.3",
    "compressor-choice",
    "LZ4,LZ4_FRAGMENTED -> LZ4 (the first accepted name in the client's order), or none from a single plain factory",
    "§2",
    "Offer COMPRESS `LZ4,LZ4_FRAGMENTED` + TIMEOUT + HANDLER_DURATION; expect COMPRESS=LZ4 chosen (a server accepting "
    "several names), or no COMPRESS (a single plain factory, which accepts only an offer that is exactly its name); "
    "never LZ4_FRAGMENTED, nor the list echoed.",
    [
        expect(PASS, ALL, ["neg COMPRESS=LZ4 TIMEOUT HANDLER_DURATION"], "open", note="several names accepted: the first in the client's order"),
        expect(PASS, ALL, [NEG], "open", note="a single plain factory: the offer is not exactly its name, so nothing is chosen"),
    ],
    features=["lz4"],
    vectors=["Z1-to-Z2"],
)
async def s1_3(c: Conversation) -> None:
    await negotiate_only(c, Features(compress="LZ4,LZ4_FRAGMENTED", timeout=True, handler_duration=True))


@server_case(
    "ss.S1.4",
    "unknown-compressor",
    "An unknown compressor is not chosen: no COMPRESS in the reply",
    "§2",
    "Offer COMPRESS `ZSTD` + TIMEOUT + HANDLER_DURATION; expect a reply without COMPRESS.",
    [expect(PASS, ALL, [NEG], "open")],
)
async def s1_4(c: Conversation) -> None:
    await negotiate_only(c, Features(compress="ZSTD", timeout=True, handler_duration=True))


@server_case(
    "ss.S1.5",
    "bad-magic",
    "Wrong magic: closed without a reply",
    "§2, §9.2",
    "Send a negotiation frame whose magic is `SSTARRPX`; expect the connection closed with nothing sent.",
    _CLOSED_SILENTLY,
    vectors=["bad-magic"],
)
async def s1_5(c: Conversation) -> None:
    await refused(c, b"SSTARRPX" + DEFAULT_OFFER.encode()[8:], label="bad magic")


@server_case(
    "ss.S1.6",
    "record-past-end",
    "A feature record longer than the frame: closed without a reply",
    "§2",
    "Send a negotiation frame of 12 record bytes whose record claims 100 data bytes; expect a silent close.",
    _CLOSED_SILENTLY,
    vectors=["record-flen-underflow"],
)
async def s1_6(c: Conversation) -> None:
    body = (1).to_bytes(4, "little") + (100).to_bytes(4, "little") + c.rng.randbytes(4)
    await refused(c, b"SSTARRPC" + len(body).to_bytes(4, "little") + body, label="flen past the end")


@server_case(
    "ss.S1.7",
    "truncated-negotiation",
    "EOF inside the negotiation frame: closed without a reply",
    "§1.4, §2",
    "Send the first 14 bytes of a negotiation frame, then FIN (half-close); expect a silent close.",
    _CLOSED_SILENTLY,
    vectors=["truncated-negotiation-eof"],
)
async def s1_7(c: Conversation) -> None:
    if await c.send(DEFAULT_OFFER.encode()[:14], label="14 bytes of a negotiation frame"):
        await c.half_close()
        await c.wait_close(3.0)


#: ss.S1.8's negotiation frame: this many bytes of records, over refwire's 64 KiB limit (§6).
LONG_NEGOTIATION = 100_000


@server_case(
    "ss.S1.8",
    "long-negotiation",
    "A complete negotiation frame of 100 000 record bytes: answered, or refused by a limit",
    "§2, §6",
    f"Offer TIMEOUT + HANDLER_DURATION + feature 77 carrying seeded bytes, {LONG_NEGOTIATION} record bytes in all, "
    "the whole frame sent; expect the usual reply (no limit, as Seastar, or a higher one), or a silent close (a "
    "length limit, as refwire's 64 KiB); never a reply and then a close.",
    [
        expect(PASS, ALL, [NEG], "open", note="no limit on the negotiation length (Seastar), or one above the frame"),
        expect(PASS, "strict", [], CLOSED, note="a limit on the negotiation length (refwire: 64 KiB) closes without a reply"),
    ],
    budget=8.0,
)
async def s1_8(c: Conversation) -> None:
    filler = LONG_NEGOTIATION - 3 * 8  # three record headers: TIMEOUT, HANDLER_DURATION, 77
    offer = Features(timeout=True, handler_duration=True, unknown=((77, c.rng.randbytes(filler)),))
    data = offer.encode()
    assert len(data) == 12 + LONG_NEGOTIATION
    if await c.send(data, label=f"negotiation frame of {LONG_NEGOTIATION} record bytes"):
        await c.wait_for(lambda cv: _obs(cv).reply is not None, 3.0, label="the negotiation reply")
        await c.quiet(0.3)


# S2 echo sizes ------------------------------------------------------------


def _echo_case(cid: str, n: int, what: str) -> None:
    @server_case(
        cid,
        f"echo-{what}",
        f"echo of {n} bytes comes back identical with the request's msg_id",
        "§3, §11",
        f"Negotiate TIMEOUT + HANDLER_DURATION, call echo ({ECHO}) with {n} seeded bytes; expect one reply "
        f"of {n} bytes, identical, with the request's msg_id.",
        echo_expects(n),
        features=["verb-echo"],
        budget=8.0,
    )
    async def run(c: Conversation) -> None:
        if await negotiate(c):
            await echo(c, n, wait=5.0)


for _cid, _n, _what in (
    ("ss.S2.1", 0, "empty"),
    ("ss.S2.2", 1, "1-byte"),
    ("ss.S2.3", 32768, "32k"),
    ("ss.S2.4", 32769, "32k-plus-1"),
    ("ss.S2.5", 1 << 20, "1m"),
):
    _echo_case(_cid, _n, _what)


# S3 exceptions and timeouts -----------------------------------------------

UNKNOWN = 0x5EA5_7A11


@server_case(
    "ss.S3.1",
    "unknown-verb",
    "An unknown verb gets UNKNOWN_VERB with the verb, negated id, duration unmeasured",
    "§3",
    f"Call verb {UNKNOWN:#x}; expect `E -id UNKNOWN_VERB {UNKNOWN} d=-` (handler_duration 0xffffffff), connection open.",
    [expect(PASS, ALL, [NEG, f"E * UNKNOWN_VERB {UNKNOWN} d=-"], "open", facts=["exception id = -request id"])],
    vectors=["C6-unknown-verb-999"],
)
async def s3_1(c: Conversation) -> None:
    if await negotiate(c):
        await call(c, UNKNOWN, c.rng.randbytes(8), label="unknown verb")
        await c.quiet(0.2)


@server_case(
    "ss.S3.2",
    "raise-user",
    "A handler's exception is a USER exception carrying its text",
    "§3, §11",
    f"Call raise ({RAISE}) with a seeded text; expect a USER exception whose message is that text.",
    [expect(PASS, ALL, [NEG, "E * USER d=*"], "open", facts=["exception id = -request id", "message is the text"]), LACKS],
    features=["verb-raise"],
    vectors=["C5-user-boom"],
)
async def s3_2(c: Conversation) -> None:
    if not await negotiate(c):
        return
    text = f"conform {c.rng.randrange(10**9)}"
    r = await call(c, RAISE, text.encode(), label="raise")
    if r is not None and r.msg_id < 0:
        exc = decode_exception(r.payload)
        c.note("message is the text" if isinstance(exc, UserError) and exc.message == text.encode() else "message differs")
    await c.quiet(0.2)


@server_case(
    "ss.S3.3",
    "expired-timeout",
    "A reply past its propagated deadline is not sent; the connection lives",
    "§3, §9.6",
    f"Call sleep_ms ({SLEEP_MS}) 50 with timeout_ms 1, wait 0.3 s, then echo 6 bytes without a timeout; "
    "expect only the echo's reply.",
    [expect(PASS, ALL, [NEG, "R * 6B"], "open", facts=["payload identical"]), LACKS],
    features=["timeout", "verb-sleep-ms", "verb-echo"],
)
async def s3_3(c: Conversation) -> None:
    if not await negotiate(c):
        return
    if await c.send(
        request(c, SLEEP_MS, (50).to_bytes(4, "little"), msg_id=_msg_id(c), timeout_ms=1), label="sleep_ms 50, timeout 1 ms"
    ):
        await c.quiet(0.3)
        await echo(c, 6)
        await c.quiet(0.2)


# S4 compression -----------------------------------------------------------


@server_case(
    "ss.S4.1",
    "lz4-fragmented-boundaries",
    "LZ4_FRAGMENTED requests of exactly 32 KiB and 64 KiB",
    "§4",
    "Offer `LZ4_FRAGMENTED` only; echo 32740 then 65508 seeded bytes, so that each request frame (28-byte header "
    "included) is exactly 1 and 2 chunks of 32 KiB, ending with a full last chunk; expect both back identical.",
    [
        expect(
            PASS,
            ALL,
            ["neg COMPRESS=LZ4_FRAGMENTED TIMEOUT HANDLER_DURATION", "R * 32740B", "R * 65508B"],
            "open",
            facts=["payload identical"],
        ),
        LACKS,
    ],
    features=["lz4-fragmented", "verb-echo"],
    budget=8.0,
)
async def s4_1(c: Conversation) -> None:
    if await negotiate(c, Features(compress="LZ4_FRAGMENTED", timeout=True, handler_duration=True)):
        await echo(c, 32768 - 28)
        await echo(c, 65536 - 28)
        if any(f.startswith("payload differs") for f in c.facts):
            c.note("a payload differs")


@server_case(
    "ss.S4.2",
    "lz4-zero-size",
    "An LZ4 envelope declaring size 0 is fatal: closed without a reply",
    "§4, §9.11",
    "Negotiate LZ4, send the envelope `05 00 00 00 | 00 00 00 00 | 00` (declared size 0); expect a silent close.",
    [expect(PASS, ALL, ["neg COMPRESS=LZ4 TIMEOUT HANDLER_DURATION"], CLOSED)],
    features=["lz4"],
    vectors=["D8e-lz4-declared-size-0"],
)
async def s4_2(c: Conversation) -> None:
    if await negotiate(c, Features(compress="LZ4", timeout=True, handler_duration=True)):
        await refused(c, bytes.fromhex("050000000000000000"), label="LZ4 envelope of declared size 0")


@server_case(
    "ss.S4.3",
    "lz4-echo",
    "An LZ4-compressed echo of 40 000 seeded bytes comes back identical",
    "§4",
    "Negotiate LZ4; echo 40 000 seeded bytes; expect them back identical.",
    [expect(PASS, ALL, ["neg COMPRESS=LZ4 TIMEOUT HANDLER_DURATION", "R * 40000B"], "open", facts=["payload identical"]), LACKS],
    features=["lz4", "verb-echo"],
)
async def s4_3(c: Conversation) -> None:
    if await negotiate(c, Features(compress="LZ4", timeout=True, handler_duration=True)):
        await echo(c, 40000)


# S5 streams ---------------------------------------------------------------


async def _parent(c: Conversation) -> tuple[trio.abc.Stream, int] | None:
    """A parent RPC connection to the same testee (``c.open_another``) and the
    CONNECTION_ID it got; None if it got none."""
    if c.open_another is None:
        raise RuntimeError("this runner cannot open a second connection to the testee")
    obs = ServerObserver()
    stream: trio.abc.Stream | None = None
    with trio.move_on_at(min(trio.current_time() + 3.0 * c.time_scale, c.deadline)):
        stream = await c.open_another()
        await stream.send_all(DEFAULT_OFFER.encode())
        while obs.reply is None:
            data = await stream.receive_some(65536)
            if not data:
                break
            obs.feed(bytes(data))
    if stream is None or obs.reply is None or obs.reply.connection_id is None:
        c.note("the parent connection got no CONNECTION_ID")
        if stream is not None:
            await stream.aclose()
        return None
    c.note("the parent connection got a CONNECTION_ID")
    return stream, obs.reply.connection_id


@server_case(
    "ss.S5.1",
    "stream-child",
    "A child connection naming the server's CONNECTION_ID as STREAM_PARENT becomes a stream",
    "§5",
    "Open a parent RPC connection and read its CONNECTION_ID; on this connection offer STREAM_PARENT = that id; "
    "expect a reply carrying only a CONNECTION_ID (the stream's), connection open. A parent that gets no CONNECTION_ID "
    "shows a server without streaming: UNSUPPORTED.",
    [expect(PASS, ALL, ["neg", "conn-id"], "open", facts=["the parent connection got a CONNECTION_ID"]), NO_STREAMING],
    features=["streams"],
    vectors=["C9-to-C10"],
    ignore=(),
)
async def s5_1(c: Conversation) -> None:
    parent = await _parent(c)
    if parent is None:
        return
    stream, cid = parent
    try:
        _obs(c).kind = "stream"
        await negotiate_only(c, Features(stream_parent=cid))
    finally:
        # The stream first: a server closes a parent's streams when the parent goes
        # (Seastar at once), and that close must not be taken for the stream's refusal.
        await c.close("FIN")
        await stream.aclose()


@server_case(
    "ss.S5.2",
    "stream-unknown-parent",
    "STREAM_PARENT naming no connection: closed without a reply",
    "§2, §5",
    "Offer STREAM_PARENT = a seeded id no connection has (counter above 2^40); expect a silent close.",
    _CLOSED_SILENTLY,
    features=["streams"],
)
async def s5_2(c: Conversation) -> None:
    _obs(c).kind = "stream"
    await refused(c, Features(stream_parent=(c.rng.randrange(2**40, 2**47) << 16)).encode(), label="unknown STREAM_PARENT")


@server_case(
    "ss.S5.3",
    "stream-parent-short",
    "A STREAM_PARENT record of 4 bytes: refused (strict); Seastar reads 8 bytes from it",
    "§2, §5, §6",
    "Open a parent RPC connection and read its CONNECTION_ID (below 2^32); on this connection offer a STREAM_PARENT "
    "record of flen 4 holding the id's low 4 bytes; expect a silent close. Seastar reads 8 bytes from the record "
    "whatever its flen: the 4 bytes, its string's terminating NUL and 3 bytes of that string's buffer that no-one "
    "wrote. When those are zero it finds the parent and answers as for a stream; else it looks for a parent that "
    "does not exist and closes.",
    [
        expect(
            PASS,
            ALL,
            [],
            CLOSED,
            facts=["the parent connection got a CONNECTION_ID"],
            note="the short record refused (Seastar: read as 8 bytes, past the record, naming no parent)",
        ),
        expect(
            PASS,
            "seastar",
            ["neg", "conn-id"],
            "open",
            facts=["the parent connection got a CONNECTION_ID"],
            note="read as 8 bytes, past the record, whose 3 unwritten bytes were zero: the parent was found",
        ),
        NO_STREAMING,
    ],
    features=["streams"],
    ignore=(),
)
async def s5_3(c: Conversation) -> None:
    parent = await _parent(c)
    if parent is None:
        return
    stream, cid = parent
    try:
        if cid >= 1 << 32:
            c.note(f"the parent's CONNECTION_ID {cid:#x} does not fit in 4 bytes")
            return
        _obs(c).kind = "stream"
        short = Negotiation(((Feature.STREAM_PARENT, cid.to_bytes(8, "little")[:4]),)).encode()
        if await c.send(short, label="STREAM_PARENT of 4 bytes"):
            await c.wait_for(lambda cv: _obs(cv).reply is not None, 3.0, label="a reply or the close")
            await c.quiet(0.3)
    finally:
        await c.close("FIN")  # before the parent: see ss.S5.1
        await stream.aclose()


# S6 limits ----------------------------------------------------------------

#: Over refwire's default 16 MiB memory budget (and the 10 000 000 of the captured probe, §8).
OVERSIZED = (16 << 20) + (64 << 10)
OVERSIZED_TEXT = "message: request size * large than memory limit *"


@server_case(
    "ss.S6.1",
    "over-memory-limit",
    "A request over the memory limit gets Seastar's USER exception; the connection lives",
    "§3, §6",
    f"Call size ({SIZE}) with {OVERSIZED} zero bytes: the header and 64 KiB, 0.3 s of listening, the rest; then echo "
    "6 bytes. Expect the USER exception `request size N large than memory limit M` (duration unmeasured) and the echo. "
    "Seastar and refwire read the whole body before answering (`seastar` requires it; `strict` accepts either).",
    [
        expect(PASS, ALL, [NEG, "E * USER d=-", "R * 6B"], "open", facts=[OVERSIZED_TEXT, "answered after the body"]),
        expect(
            PASS,
            "strict",
            [NEG, "E * USER d=-", "R * 6B"],
            "open",
            facts=[OVERSIZED_TEXT, "answered before the body ended"],
            note="answered at the header (strict allows it; Seastar reads the whole body first)",
        ),
        expect(
            UNSUPPORTED,
            "*",
            [NEG, "R * 8B", "..."],
            note=f"the testee admitted {OVERSIZED} bytes: its memory limit is above the 16 MiB §11 requires",
        ),
        LACKS,
    ],
    features=["memory-limit", "verb-size", "verb-echo"],
    vectors=["oversized-request-user-exception"],
    budget=10.0,
)
async def s6_1(c: Conversation) -> None:
    if not await negotiate(c):
        return
    msg_id = _msg_id(c)
    # The header alone (28 bytes with TIMEOUT), its len naming the whole body.
    head = Request(SIZE, msg_id, b"", 0).encode(with_timeout=True)[:24] + OVERSIZED.to_bytes(4, "little")
    if not await c.send(head + bytes(64 << 10), label="size: header and 64 KiB", split="whole"):
        return
    await c.quiet(0.3)
    early = _answered(c, msg_id)(c)
    if not await c.send(bytes(OVERSIZED - (64 << 10)), label="the rest of the body", split="whole"):
        return
    await c.wait_for(_answered(c, msg_id), 5.0, label="the answer")
    got = [r for r in _obs(c).responses if abs(r.msg_id) == msg_id]
    if got:
        c.note("answered before the body ended" if early else "answered after the body")
        if got[0].msg_id < 0:
            exc = decode_exception(got[0].payload)
            if isinstance(exc, UserError):
                c.note("message: " + exc.message.decode("utf-8", "replace"))
    await echo(c, 6)
