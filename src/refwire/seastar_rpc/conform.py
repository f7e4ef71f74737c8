"""Seastar RPC conformance cases (``refwire conform seastar-rpc``).

Server cases (``ss.S…``): refwire plays a Seastar client against the testee
server, which registers the conformance verbs of
``specs/seastar-rpc/README.md §11`` (echo, sleep_ms, raise, size); a case
whose verb the testee answers with UNKNOWN_VERB is UNSUPPORTED.  Client cases
(``ss.C…``): refwire plays a server -- delaying, reordering, failing and
closing on purpose -- and the testee client follows the testee contract of
``specs/seastar-rpc/README.md §12``.

Profiles: ``strict`` (the spec; refwire's server) and ``seastar`` (the real
Seastar 25.05 server as the spec records it).  The bytes a case sends depend
only on the run seed and the case id (``c.rng``).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

from ..conform.clients import ClientSession
from ..conform.conversation import Conversation
from ..conform.model import CaseBook, Expect, Verdict, expect
from ..conform.runner import Catalogue
from ..errors import ProtocolError
from .compression import LZ4, LZ4_FRAGMENTED, envelope, make_compressor
from .conform_verbs import CONFORM_VERBS
from .frames import (
    DEFAULT_LIMITS,
    UNMEASURED,
    Feature,
    Features,
    FrameDecoder,
    Negotiation,
    NoOp,
    Request,
    Response,
    StreamEnd,
    StreamMessage,
    UnknownVerb,
    UserError,
    decode_exception,
)

__all__ = ["CATALOGUE", "ClientObserver", "ServerObserver", "contract_client"]

SPEC = "specs/seastar-rpc/README.md"
PASS, NON_STRICT, INFO, FAIL, UNSUPPORTED = Verdict.PASS, Verdict.NON_STRICT, Verdict.INFO, Verdict.FAIL, Verdict.UNSUPPORTED
ALL = "strict seastar"
CLOSED = "FIN RST"
ECHO, SLEEP_MS, RAISE, SIZE = (CONFORM_VERBS[k] for k in ("echo", "sleep_ms", "raise", "size"))

PROFILES = {
    "strict": f"the behaviour {SPEC} specifies (refwire's server and client)",
    "seastar": "the real Seastar 25.05 server as the spec records it (§3, §8): it reads an oversized request's whole body "
    "before answering it",
}

FEATURES = {
    "lz4": "the LZ4 compressor (§4)",
    "lz4-fragmented": "the LZ4_FRAGMENTED compressor (§4)",
    "streams": "streaming: CONNECTION_ID and STREAM_PARENT (§5)",
    "timeout": "the TIMEOUT feature and dropping expired replies (§3)",
}

#: The testee answered a conformance verb with UNKNOWN_VERB: it lacks the verb (§11).
LACKS = expect(UNSUPPORTED, "*", ["...", "E * UNKNOWN_VERB 10[0-3] d=*", "..."], note="the testee lacks a conformance verb (§11)")
NEG = "neg TIMEOUT HANDLER_DURATION"


def _invalid(err: ProtocolError) -> tuple[str, dict[str, Any]]:
    return f"invalid {err.field or 'frame'}", {
        "type": "invalid",
        "field": err.field,
        "frame": err.frame,
        "offset": err.offset,
        "reason": err.reason,
    }


def _neg_token(neg: Negotiation) -> tuple[str, dict[str, Any]]:
    """``neg`` + the features in wire order (first record of a number wins),
    leaving out CONNECTION_ID (its own token, ``conn-id``)."""
    seen: dict[int, bytes] = {}
    for number, data in neg.records:
        seen.setdefault(number, data)
    names = []
    for number, data in seen.items():
        if number == Feature.CONNECTION_ID:
            continue
        if number == Feature.COMPRESS:
            names.append(f"COMPRESS={data.decode('latin-1')}")
        elif number == Feature.ISOLATION:
            names.append(f"ISOLATION={data.decode('latin-1')}")
        elif number in Feature._value2member_map_:
            names.append(Feature(number).name)
        else:
            names.append(f"F{number}")
    return " ".join(["neg", *names]), {"type": "negotiation", "features": {str(k): v.hex() for k, v in seen.items()}}


class _Observer:
    """Shared decoding loop: refwire's :class:`~refwire.seastar_rpc.frames.FrameDecoder`,
    ``invalid <field>`` at the first bad byte (then nothing more is decoded)."""

    def __init__(self, kind: Any) -> None:
        self._dec = FrameDecoder(kind, limits=DEFAULT_LIMITS)
        self._broken = False

    def feed(self, data: bytes) -> list[tuple[str, dict[str, Any]]]:
        if self._broken:
            return []
        self._dec.feed(data)
        out: list[tuple[str, dict[str, Any]]] = []
        try:
            while True:
                frame = self._dec.next_frame()
                if frame is None:
                    break
                out.extend(self._tokens(frame))
        except ProtocolError as err:
            self._broken = True
            out.append(_invalid(err))
        return out

    def eof(self) -> list[tuple[str, dict[str, Any]]]:
        if self._broken or not self._dec.in_frame:
            return []
        return [("truncated", {"type": "truncated", "bytes": self._dec.buffered, "offset": self._dec.offset})]

    def _tokens(self, frame: object) -> list[tuple[str, dict[str, Any]]]:
        raise NotImplementedError


class ServerObserver(_Observer):
    """Tokens for what a server sends: ``neg <features>`` (then ``conn-id`` when
    it sent a CONNECTION_ID), ``R <msg_id> <len>B`` (a reply),
    ``E <msg_id> USER d=<µs>`` / ``E <msg_id> UNKNOWN_VERB <verb> d=<µs>``
    (``d=-``: not measured), ``S <len>B`` / ``EOS`` on a stream connection,
    ``invalid <field>``, ``truncated``."""

    def __init__(self) -> None:
        super().__init__("response")
        #: "stream" once the case made this a stream connection (before its reply).
        self.kind = "response"
        self.reply: Features | None = None
        self.responses: list[Response] = []

    def _tokens(self, frame: object) -> list[tuple[str, dict[str, Any]]]:
        if isinstance(frame, Negotiation):
            token = _neg_token(frame)
            self.reply = Features.from_negotiation(frame)
            comp = self.reply.compress
            self._dec.configure(
                kind="stream" if self.kind == "stream" else "response",
                duration=self.reply.handler_duration,
                compressor=None if comp is None else make_compressor(comp) if comp in (LZ4, LZ4_FRAGMENTED) else _unknown(comp),
            )
            out = [token]
            if self.reply.connection_id is not None:
                out.append(("conn-id", {"type": "connection_id", "id": self.reply.connection_id}))
            return out
        if isinstance(frame, Response):
            self.responses.append(frame)
            d = (
                "none"
                if frame.handler_duration is None
                else "-"
                if frame.handler_duration == UNMEASURED
                else str(frame.handler_duration)
            )
            info = {
                "type": "response",
                "msg_id": frame.msg_id,
                "len": len(frame.payload),
                "handler_duration": frame.handler_duration,
            }
            if frame.msg_id >= 0:
                return [(f"R {frame.msg_id} {len(frame.payload)}B", info)]
            exc = decode_exception(frame.payload)
            if isinstance(exc, UserError):
                info["message"] = exc.message.decode("utf-8", "replace")
                return [(f"E {frame.msg_id} USER d={d}", info)]
            if isinstance(exc, UnknownVerb):
                return [(f"E {frame.msg_id} UNKNOWN_VERB {exc.verb} d={d}", info)]
            return [(f"E {frame.msg_id} TYPE{exc.type} d={d}", info)]
        if isinstance(frame, StreamMessage):
            return [(f"S {len(frame.payload)}B", {"type": "stream", "len": len(frame.payload)})]
        if isinstance(frame, StreamEnd):
            return [("EOS", {"type": "eos"})]
        if isinstance(frame, NoOp):
            return []
        return [(type(frame).__name__, {"type": type(frame).__name__})]


def _unknown(name: str) -> Any:
    raise ProtocolError(f"the server chose compressor {name!r}, which was not offered", field="compress", frame="negotiation")


class ClientObserver(_Observer):
    """Tokens for what a client sends: ``neg <features>``, then ``call <verb>``
    per request (the requests are kept in :attr:`requests`).  refwire's case
    server never accepts a compressor, so requests are uncompressed."""

    def __init__(self) -> None:
        super().__init__("request")
        self.offer: Features | None = None
        self.requests: list[Request] = []

    def _tokens(self, frame: object) -> list[tuple[str, dict[str, Any]]]:
        if isinstance(frame, Negotiation):
            self.offer = Features.from_negotiation(frame)
            self._dec.configure(kind="request", timeout=self.offer.timeout)
            return [_neg_token(frame)]
        if isinstance(frame, Request):
            self.requests.append(frame)
            return [
                (f"call {frame.verb}", {"type": "request", "verb": frame.verb, "msg_id": frame.msg_id, "len": len(frame.payload)})
            ]
        if isinstance(frame, NoOp):
            return []
        return [(type(frame).__name__, {"type": type(frame).__name__})]


# --------------------------------------------------------------------------- helpers

BOOK = CaseBook(SPEC, server_ignore=("conn-id",), client_wrap=lambda fn: functools.partial(serve, answer=fn))
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
    "LZ4,LZ4_FRAGMENTED -> LZ4 (the first accepted name in the client's order)",
    "§2",
    "Offer COMPRESS `LZ4,LZ4_FRAGMENTED` + TIMEOUT + HANDLER_DURATION; expect COMPRESS=LZ4 chosen.",
    [expect(PASS, ALL, ["neg COMPRESS=LZ4 TIMEOUT HANDLER_DURATION"], "open")],
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
    features=["timeout"],
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
    features=["lz4-fragmented"],
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
    features=["lz4"],
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
    "expect a reply carrying only a CONNECTION_ID (the stream's), connection open.",
    [expect(PASS, ALL, ["neg", "conn-id"], "open", facts=["the parent connection got a CONNECTION_ID"])],
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
        expect(PASS, "seastar", [NEG, "E * USER d=-", "R * 6B"], "open", facts=[OVERSIZED_TEXT, "answered after the body"]),
        expect(PASS, "strict", [NEG, "E * USER d=-", "R * 6B"], "open", facts=[OVERSIZED_TEXT]),
        expect(INFO, "*", [NEG, "R * 8B", "..."], note=f"the testee admitted {OVERSIZED} bytes: its memory limit is higher"),
        LACKS,
    ],
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


# --------------------------------------------------------------------------- client cases

client_case = BOOK.client
EXIT_OK = "exit 0"
#: The client reported a failure itself (not killed at the budget end).
EXIT_FAILED = "exit [1-9]*"


class SsState:
    """What refwire (as the server) answered across a client case."""

    def __init__(self, s: ClientSession) -> None:
        self.s = s
        self.echoed = 0

    def finish(self, s: ClientSession) -> None:
        s.note(f"all {s.events} calls echoed" if self.echoed >= s.events else f"{self.echoed} of {s.events} calls echoed")


Answer = Callable[[SsState, Conversation, ClientObserver], Awaitable[None]]


def _cobs(c: Conversation) -> ClientObserver:
    assert isinstance(c.observer, ClientObserver)
    return c.observer


def response(c: Conversation, msg_id: int, payload: bytes) -> bytes:
    offer = _cobs(c).offer
    return Response(msg_id, payload, 0).encode(with_duration=offer is not None and offer.handler_duration)


async def reply_echo(st: SsState, c: Conversation, req: Request, *, label: str = "") -> bool:
    ok = await c.send(response(c, req.msg_id, req.payload), split="whole", label=label or f"echo reply {req.msg_id}")
    if ok and req.verb == ECHO:
        st.echoed += 1
    return ok


async def wait_requests(c: Conversation, n: int, timeout: float) -> list[Request]:
    await c.wait_for(lambda cv: len(_cobs(cv).requests) >= n, timeout, label=f"{n} request(s)")
    return _cobs(c).requests[:n]


async def serve(s: ClientSession, answer: Answer) -> None:
    """Accept the client's connection, answer its negotiation (echo TIMEOUT,
    HANDLER_DURATION and ISOLATION, no compressor), run ``answer``, then wait
    for the testee to exit."""
    st = SsState(s)
    s.after_exit.append(st.finish)
    c = await s.accept(10.0)
    if c is None:
        return
    obs = _cobs(c)
    await c.wait_for(lambda cv: obs.offer is not None, 10.0, label="the negotiation offer")
    if obs.offer is None:
        return
    reply = Features(timeout=obs.offer.timeout, handler_duration=obs.offer.handler_duration, isolation=obs.offer.isolation)
    if not await c.send(reply.encode(), split="whole", label="negotiation reply"):
        return
    await answer(st, c, obs)
    await s.wait_exit(10.0)


def _ok(n: int) -> list[Expect]:
    return [expect(PASS, "*", ["..."], facts=[f"all {n} calls echoed", EXIT_OK])]


_FAILED = [expect(PASS, "*", ["..."], facts=[EXIT_FAILED], note="reported the failure")]


@client_case(
    "ss.C1.1",
    "delayed-replies",
    "Replies delayed 0.3 s each are waited for",
    "§3, §12",
    "Answer each echo call 0.3 s after it arrives; expect every call echoed and exit 0.",
    _ok(4),
    events=4,
)
async def c1_1(st: SsState, c: Conversation, obs: ClientObserver) -> None:
    for k in range(st.s.events):
        reqs = await wait_requests(c, k + 1, 10.0)
        if len(reqs) <= k:
            return
        await c.sleep(0.3)
        if not await reply_echo(st, c, reqs[k]):
            return


@client_case(
    "ss.C1.2",
    "reordered-replies",
    "Replies in reverse order are matched by msg_id",
    "§1.3, §3, §12",
    "Wait for all the client's calls (up to 3 s), answer them last first; expect every call echoed and exit 0.",
    _ok(5),
    events=5,
)
async def c1_2(st: SsState, c: Conversation, obs: ClientObserver) -> None:
    done = 0
    while done < st.s.events:
        await wait_requests(c, st.s.events, 3.0)
        batch = obs.requests[done:]
        if not batch:
            return
        for req in reversed(batch):
            if not await reply_echo(st, c, req, label=f"reply {req.msg_id} (reordered)"):
                return
        done += len(batch)


@client_case(
    "ss.C1.3",
    "exception-reply",
    "A USER exception reply is a failure, not a matched echo",
    "§3, §12",
    "Answer the first call with a USER exception `conform: refused`, echo the others; expect a non-zero exit.",
    _FAILED,
    events=3,
)
async def c1_3(st: SsState, c: Conversation, obs: ClientObserver) -> None:
    for k in range(st.s.events):
        reqs = await wait_requests(c, k + 1, 10.0)
        if len(reqs) <= k:
            return
        req = reqs[k]
        if k == 0:
            data = Response(-req.msg_id, UserError(b"conform: refused").encode(), 0)
            offer = obs.offer
            if not await c.send(
                data.encode(with_duration=offer is not None and offer.handler_duration), split="whole", label="USER exception"
            ):
                return
        elif not await reply_echo(st, c, req):
            return


@client_case(
    "ss.C1.4",
    "close-mid-reply",
    "The server closes in the middle of a reply: the client fails, never hangs",
    "§1.4, §12",
    "Send the first half of the first call's reply, then FIN; expect a non-zero exit within the budget.",
    _FAILED,
    events=3,
)
async def c1_4(st: SsState, c: Conversation, obs: ClientObserver) -> None:
    reqs = await wait_requests(c, 1, 10.0)
    if not reqs:
        return
    data = response(c, reqs[0].msg_id, reqs[0].payload)
    if await c.send(data[: max(1, len(data) // 2)], split="whole", label="half a reply"):
        await c.close("FIN")


@client_case(
    "ss.C1.5",
    "corrupted-payload",
    "A reply whose payload differs from the request's is a failure",
    "§12",
    "Echo every call, flipping the first byte of the second reply's payload; expect a non-zero exit.",
    _FAILED,
    events=3,
)
async def c1_5(st: SsState, c: Conversation, obs: ClientObserver) -> None:
    for k in range(st.s.events):
        reqs = await wait_requests(c, k + 1, 10.0)
        if len(reqs) <= k:
            return
        req = reqs[k]
        if k == 1:
            bad = bytes([req.payload[0] ^ 0xFF]) + req.payload[1:] if req.payload else b"x"
            req = attrs.evolve(req, payload=bad, verb=0)
        if not await reply_echo(st, c, req):
            return


# --------------------------------------------------------------------------- the contract client


def contract_payloads(values: Mapping[str, str]) -> list[bytes]:
    """The payloads of the §12 contract: ``{events}`` payloads of 1-64 bytes
    drawn from ``random.Random({seed})``."""
    rng = random.Random(int(values["seed"]))
    return [rng.randbytes(rng.randrange(1, 65)) for _ in range(int(values["events"]))]


async def contract_client(
    connect: Callable[[], Awaitable[trio.abc.Stream]], values: Mapping[str, str], *, fault: str = ""
) -> int:
    """refwire's own client as a client-case testee (``specs/seastar-rpc/README.md §12``):
    every echo call in flight at once, 5 s each; 0 when every reply matched its
    payload, 1 otherwise.  ``fault`` makes it a deliberately broken client (tests)."""
    from .client import ClientConfig, SeastarClient

    payloads = contract_payloads(values)
    got: list[bytes | None] = [None] * len(payloads)
    arrivals: list[bytes] = []
    timeout = 0.05 if fault == "short-timeout" else 5.0
    client = SeastarClient(connect, config=ClientConfig(connect_timeout=5.0, negotiation_timeout=5.0))

    async def one(i: int, p: bytes) -> None:
        try:
            got[i] = await client.call(ECHO, p, timeout=timeout)
            arrivals.append(got[i] or b"")
        except Exception as exc:
            if fault == "exception-is-success" and type(exc).__name__ == "RemoteVerbError":
                got[i] = p
            elif fault == "exit0-on-close" and type(exc).__name__ != "RemoteVerbError":
                got[i] = p

    try:
        async with client:
            async with trio.open_nursery() as nursery:
                for i, p in enumerate(payloads):
                    nursery.start_soon(one, i, p)
    except Exception:
        return 0 if fault == "exit0-on-close" else 1
    if fault == "in-order":
        return 0 if arrivals == payloads else 1
    if fault == "no-compare":
        return 0 if all(g is not None for g in got) else 1
    return 0 if got == payloads else 1


async def serve_for_simulation(listener: Any, sink: str) -> None:
    """refwire's own server (demo + conformance verbs) on ``listener`` (``--sim``)."""
    from .conform_verbs import add_conformance_verbs
    from .demo import demo_registry
    from .server import SeastarServer

    await SeastarServer(add_conformance_verbs(demo_registry())).serve([listener])


async def client_for_simulation(connect: Callable[[], Awaitable[trio.abc.Stream]], values: Mapping[str, str]) -> int:
    """The §12 contract client for ``--client --sim``."""
    return await contract_client(connect, values)


CATALOGUE = Catalogue(
    protocol="seastar-rpc",
    prefix="ss",
    cases=tuple(BOOK.cases),
    profiles=PROFILES,
    features=FEATURES,
    server_observer=ServerObserver,
    client_observer=ClientObserver,
    spec=SPEC,
    sim_server=serve_for_simulation,
    sim_client=client_for_simulation,
)
