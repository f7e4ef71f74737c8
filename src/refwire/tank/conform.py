"""TANK conformance cases (``refwire conform tank``).

Server cases (``tk.S…``): refwire plays a TANK client against the testee
broker and judges its answers and how it closes.  Every case works in a topic
of its own, named after the case id (``tk.S2.1`` -> ``conform-tk-S2-1``), so
cases never meet on a shared broker.

Profiles are the behaviours ``specs/tank/README.md`` documents: ``strict``
(the spec; refwire's broker) and ``tank-broker`` (the real C++ broker, where
the spec records a difference: it drops a 6-byte varint's high bits instead of
refusing it, §2).

Ids are never reused or renumbered.  The bytes a case sends depend only on
the run seed and the case id (:func:`refwire.conform.model.case_seed`).
"""

from __future__ import annotations

from typing import Any

import trio

from ..conform.conversation import Conversation, MachineObserver, Token
from ..conform.model import CaseBook, Verdict, expect
from ..conform.runner import Catalogue
from ..errors import ProtocolError
from ..wire import Limits
from .bundles import Message, encode_bundle
from .connection import ClientConnection
from .events import ConsumeResult
from .frames import (
    ConsumePartition,
    ConsumeRequest,
    ConsumeTopic,
    CreateTopicRequest,
    Ping,
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
    frame,
)
from .responses import CreateTopicResponse, ProduceResponse

__all__ = ["CATALOGUE", "ServerObserver"]

SPEC = "specs/tank/README.md"
PASS, INFO, FAIL = Verdict.PASS, Verdict.INFO, Verdict.FAIL
ALL = "strict tank-broker"
CLOSED = "FIN RST"
#: The broker's own Pings (on accept, §6) may come at any time after the first.
PINGS = ("ping",)

PROFILES = {
    "strict": f"the behaviour {SPEC} specifies (refwire's broker)",
    "tank-broker": "the real TANK 4.0 C++ broker, as the spec's captures record it (§2, §6-§9)",
}

FEATURES = {
    "long-poll": "consume with maxWait/minBytes parks until data arrives (§6)",
    "sparse": "ProduceWithSeqnum (0x05) and sparse bundles (§4, §6)",
    "snappy": "raw Snappy bundles (codec 1, §4)",
}

U64_MAX = 2**64 - 1


def topic_of(case_id: str) -> str:
    """The case's own topic (its per-case marker)."""
    return "conform-" + case_id.replace(".", "-")


# --------------------------------------------------------------------------- observer


class ServerObserver(MachineObserver):
    """Tokens for what a broker sends, decoded by refwire's own client machine
    (which knows each request's layout): ``ping``, ``create R err=E``,
    ``produce R E,E…``, ``consume R err=E msgs=N``; ``invalid <field>`` at the
    first byte that does not decode.  A case registers its requests with
    :meth:`request`, which returns their bytes."""

    def __init__(self) -> None:
        super().__init__(ClientConnection(now=0.0, ping_interval=None, limits=Limits(max_frame_size=256 << 20)), eof="eof")
        #: decoded consume results by request id (cases compare their messages)
        self.consumed: dict[int, ConsumeResult] = {}

    def request(self, req: Any) -> bytes:
        self.machine.send(req, now=0.0)
        data: bytes = self.machine.data_to_send()
        return data

    def tokens(self, ev: Any) -> list[Token]:
        from .events import Connected, ConnectionClosed

        if isinstance(ev, Connected):
            return [("ping", {"type": "Ping"})]
        if isinstance(ev, ConnectionClosed):
            return [("closed", {"type": "closed", "reason": ev.reason})]
        if isinstance(ev, ProduceResponse):
            errs = ",".join(f"0x{r.error:02x}" for r in ev.results)
            return [(f"produce {ev.request_id} {errs}", {"type": "ProduceResponse", "errors": [r.error for r in ev.results]})]
        if isinstance(ev, ConsumeResult):
            self.consumed[ev.request_id] = ev
            out: list[Token] = []
            for p in ev.partitions:
                seqs = [getattr(m, "seq", None) for m in p.messages]
                out.append(
                    (
                        f"consume {ev.request_id} err=0x{p.error:02x} msgs={len(p.messages)}",
                        {"type": "ConsumeResult", "error": p.error, "hwmark": p.hwmark, "seqs": seqs, "first_avail": p.first_avail},
                    )
                )
            for t in ev.unknown_topics:
                out.append((f"consume {ev.request_id} unknown-topic", {"type": "ConsumeResult", "unknown": t}))
            return out
        if isinstance(ev, CreateTopicResponse):
            return [(f"create {ev.request_id} err=0x{ev.error:02x}", {"type": "CreateTopicResponse", "error": ev.error})]
        return [(type(ev).__name__, {"type": type(ev).__name__})]


# --------------------------------------------------------------------------- helpers

BOOK = CaseBook(SPEC, server_ignore=(), server_budget=6.0)
server_case = BOOK.server


def obs(c: Conversation) -> ServerObserver:
    o = c.observer
    assert isinstance(o, ServerObserver)
    return o


def messages(c: Conversation, n: int, size: int = 24) -> list[Message]:
    """``n`` messages whose contents come from the case seed."""
    return [Message(bytes(c.rng.getrandbits(8) for _ in range(size)), ts=1_700_000_000_000 + i) for i in range(n)]


async def create(c: Conversation, rid: int, topic: str) -> None:
    await c.send(obs(c).request(CreateTopicRequest(rid, topic, 1)), label=f"CreateTopic {topic}", split="whole")
    await c.wait_for(lambda cv: any(t.startswith(f"create {rid} ") for t in cv.tokens), 3.0, label="create answered")


def produce_request(rid: int, topic: str, bundle: bytes, *, base_seq: int | None = None) -> ProduceRequest:
    return ProduceRequest(rid, (ProduceTopic(topic, (ProducePartition(0, bundle, base_seq),)),), with_seqnum=base_seq is not None)


def consume_request(rid: int, topic: str, seq: int, *, fetch: int = 1 << 20, wait_ms: int = 0, min_bytes: int = 0) -> ConsumeRequest:
    return ConsumeRequest(rid, (ConsumeTopic(topic, (ConsumePartition(0, seq, fetch),)),), max_wait_ms=wait_ms, min_bytes=min_bytes)


async def answered(c: Conversation, prefix: str, timeout: float = 3.0) -> bool:
    return await c.wait_for(lambda cv: any(t.startswith(prefix) for t in cv.tokens), timeout, label=prefix)


def contents(c: Conversation, rid: int) -> list[bytes]:
    res = obs(c).consumed.get(rid)
    return [] if res is None else [m.content for p in res.partitions for m in p.messages]  # type: ignore[attr-defined]


def seqs(c: Conversation, rid: int) -> list[int | None]:
    res = obs(c).consumed.get(rid)
    return [] if res is None else [getattr(m, "seq", None) for p in res.partitions for m in p.messages]


async def first_ping(c: Conversation) -> None:
    await c.wait_for(lambda cv: "ping" in cv.tokens, 2.0, label="the broker's Ping")


# --------------------------------------------------------------------------- S1 connection


@server_case(
    "tk.S1.1",
    "ping-on-accept",
    "The broker speaks first: a Ping on accept",
    "§3, §6",
    "Connect and send nothing for 1 s. The broker must send one Ping (0x03, empty) first.",
    [expect(PASS, ALL, ["ping"], "open")],
    vectors=["frames.json"],
)
async def s1_1(c: Conversation) -> None:
    await first_ping(c)
    await c.quiet(1.0)


@server_case(
    "tk.S1.2",
    "client-ping-unanswered",
    "A client's Ping is never answered",
    "§3",
    "After the broker's Ping, send three Pings. Nothing may come back, and the connection stays open.",
    [expect(PASS, ALL, ["ping"], "open")],
)
async def s1_2(c: Conversation) -> None:
    await first_ping(c)
    for _ in range(3):
        await c.send(Ping().encode(), label="Ping", split="whole")
    await c.quiet(1.0)


@server_case(
    "tk.S1.3",
    "idle-close",
    "An idle connection is closed after 16 s",
    "§6",
    "Connect, read the Ping, then send nothing for 20 s. The broker closes the connection after its idle TTL (16 s).",
    [
        expect(PASS, ALL, ["ping"], CLOSED),
        expect(INFO, "*", ["ping"], "open", note="no idle close: the connection was kept for 20 s (an implementation choice)"),
    ],
    tags=["slow"],
    budget=24.0,
)
async def s1_3(c: Conversation) -> None:
    await first_ping(c)
    await c.wait_close(20.0)


@server_case(
    "tk.S1.4",
    "unknown-message-id",
    "An unknown message id closes the connection",
    "§2, §3",
    "Send a frame with message id 0x42. The broker must close the connection without an answer.",
    [expect(PASS, ALL, ["ping"], CLOSED)],
)
async def s1_4(c: Conversation) -> None:
    await first_ping(c)
    await c.send(frame(0x42, b"\x00" * 8), label="frame 0x42", split="whole")
    await c.wait_close(3.0)


# --------------------------------------------------------------------------- S2 produce and consume


@server_case(
    "tk.S2.1",
    "produce-consume-roundtrip",
    "Produce a bundle, consume it back byte for byte",
    "§3, §4, §6",
    "Create the case's topic, produce one uncompressed bundle of 3 messages (split at seeded offsets), consume "
    "from seq 0. The answer must carry the 3 messages with seqs 1, 2, 3 and identical contents.",
    [expect(PASS, ALL, ["ping", "create 1 err=0x00", "produce 2 0x00", "consume 3 err=0x00 msgs=3"], "open", facts=["contents identical, seqs 1..3"])],
    vectors=["bundles.json"],
)
async def s2_1(c: Conversation) -> None:
    topic = topic_of("tk.S2.1")
    await first_ping(c)
    await create(c, 1, topic)
    sent = messages(c, 3)
    await c.send(obs(c).request(produce_request(2, topic, encode_bundle(sent, compress=False))), label="Produce 3 messages")
    if await answered(c, "produce 2 "):
        await c.send(obs(c).request(consume_request(3, topic, 0)), label="Consume from 0")
        await answered(c, "consume 3 ")
    if contents(c, 3) == [m.content for m in sent] and seqs(c, 3) == [1, 2, 3]:
        c.note("contents identical, seqs 1..3")


@server_case(
    "tk.S2.2",
    "sequence-numbers-continue",
    "A second bundle continues the sequence",
    "§6",
    "Produce a bundle of 2 messages, then one of 3; consume from seq 3. The answer must start at seq 3 "
    "(the second bundle's first message) and hold its 3 messages, seqs 3, 4, 5.",
    [expect(PASS, ALL, ["ping", "create 1 err=0x00", "produce 2 0x00", "produce 3 0x00", "consume 4 err=0x00 msgs=3"], "open", facts=["seqs 3..5"])],
)
async def s2_2(c: Conversation) -> None:
    topic = topic_of("tk.S2.2")
    await first_ping(c)
    await create(c, 1, topic)
    await c.send(obs(c).request(produce_request(2, topic, encode_bundle(messages(c, 2), compress=False))), label="Produce 2")
    await answered(c, "produce 2 ")
    await c.send(obs(c).request(produce_request(3, topic, encode_bundle(messages(c, 3), compress=False))), label="Produce 3")
    await answered(c, "produce 3 ")
    await c.send(obs(c).request(consume_request(4, topic, 3)), label="Consume from 3")
    await answered(c, "consume 4 ")
    if seqs(c, 4) == [3, 4, 5]:
        c.note("seqs 3..5")


@server_case(
    "tk.S2.3",
    "snappy-bundle",
    "A Snappy-compressed bundle round-trips",
    "§4",
    "Produce a bundle compressed with raw Snappy (codec 1) holding 8 repetitive messages; consume it back. "
    "The contents must be identical.",
    [
        expect(PASS, ALL, ["ping", "create 1 err=0x00", "produce 2 0x00", "consume 3 err=0x00 msgs=8"], "open", facts=["contents identical"]),
    ],
    features=["snappy"],
    vectors=["bundles.json"],
)
async def s2_3(c: Conversation) -> None:
    topic = topic_of("tk.S2.3")
    await first_ping(c)
    await create(c, 1, topic)
    sent = [Message(b"snappy " * 20 + bytes([i]), ts=1_700_000_000_000) for i in range(8)]
    await c.send(obs(c).request(produce_request(2, topic, encode_bundle(sent, compress=True))), label="Produce (Snappy)")
    if await answered(c, "produce 2 "):
        await c.send(obs(c).request(consume_request(3, topic, 0)), label="Consume from 0")
        await answered(c, "consume 3 ")
    if contents(c, 3) == [m.content for m in sent]:
        c.note("contents identical")


@server_case(
    "tk.S2.4",
    "sparse-bundle-keeps-seqs",
    "A sparse bundle keeps its sequence numbers; one below the high-water mark is refused",
    "§4, §6",
    "ProduceWithSeqnum (0x05) a sparse bundle with seqs 10 and 15; consume from 0: the messages carry 10 and 15. "
    "Then produce a sparse bundle starting at 12 (at or below the high-water mark): refused with 0x0a.",
    [
        expect(
            PASS,
            ALL,
            ["ping", "create 1 err=0x00", "produce 2 0x00", "consume 3 err=0xfe msgs=2", "produce 4 0x0a"],
            "open",
            facts=["seqs 10, 15"],
        )
    ],
    features=["sparse"],
    vectors=["frames.json"],
)
async def s2_4(c: Conversation) -> None:
    topic = topic_of("tk.S2.4")
    await first_ping(c)
    await create(c, 1, topic)
    sparse = encode_bundle([Message(b"ten", 1, seq=10), Message(b"fifteen", 2, seq=15)], compress=False, sparse=True)
    await c.send(obs(c).request(produce_request(2, topic, sparse, base_seq=10)), label="ProduceWithSeqnum 10, 15")
    if await answered(c, "produce 2 "):
        await c.send(obs(c).request(consume_request(3, topic, 0)), label="Consume from 0")
        await answered(c, "consume 3 ")
    if seqs(c, 3) == [10, 15]:
        c.note("seqs 10, 15")
    low = encode_bundle([Message(b"twelve", 3, seq=12)], compress=False, sparse=True)
    await c.send(obs(c).request(produce_request(4, topic, low, base_seq=12)), label="ProduceWithSeqnum 12 (<= hwmark)")
    await answered(c, "produce 4 ")


# --------------------------------------------------------------------------- S3 consume boundaries and long polls


@server_case(
    "tk.S3.1",
    "consume-past-the-end",
    "Consuming past last+1 is a boundary error carrying firstAvail",
    "§3, §6",
    "Produce 2 messages, then consume from seq 10 (beyond last + 1). The answer must be err 0x01 (boundary) with firstAvail 1.",
    [expect(PASS, ALL, ["ping", "create 1 err=0x00", "produce 2 0x00", "consume 3 err=0x01 msgs=0"], "open", facts=["firstAvail 1"])],
)
async def s3_1(c: Conversation) -> None:
    topic = topic_of("tk.S3.1")
    await first_ping(c)
    await create(c, 1, topic)
    await c.send(obs(c).request(produce_request(2, topic, encode_bundle(messages(c, 2), compress=False))), label="Produce 2")
    await answered(c, "produce 2 ")
    await c.send(obs(c).request(consume_request(3, topic, 10)), label="Consume from 10")
    await answered(c, "consume 3 ")
    res = obs(c).consumed.get(3)
    if res is not None and res.partitions and res.partitions[0].first_avail == 1:
        c.note("firstAvail 1")


@server_case(
    "tk.S3.2",
    "consume-at-the-end",
    "Consuming at last+1 without waiting answers at once, empty",
    "§6",
    "Produce 2 messages, consume from seq 3 with maxWait 0: an empty answer (err 0, no messages) with hwmark 2, at once.",
    [expect(PASS, ALL, ["ping", "create 1 err=0x00", "produce 2 0x00", "consume 3 err=0x00 msgs=0"], "open", facts=["hwmark 2"])],
)
async def s3_2(c: Conversation) -> None:
    topic = topic_of("tk.S3.2")
    await first_ping(c)
    await create(c, 1, topic)
    await c.send(obs(c).request(produce_request(2, topic, encode_bundle(messages(c, 2), compress=False))), label="Produce 2")
    await answered(c, "produce 2 ")
    await c.send(obs(c).request(consume_request(3, topic, 3)), label="Consume from 3, maxWait 0")
    await answered(c, "consume 3 ", timeout=1.0)
    res = obs(c).consumed.get(3)
    if res is not None and res.partitions and res.partitions[0].hwmark == 2:
        c.note("hwmark 2")


@server_case(
    "tk.S3.3",
    "long-poll-woken",
    "A long poll at the end is woken by a produce, before the produce's own answer",
    "§6, §9",
    "Consume at the end with maxWait 5 s and minBytes 1, then (same connection) produce one message. The consume "
    "must be answered with that message, and its answer must come before the produce's.",
    [expect(PASS, ALL, ["ping", "create 1 err=0x00", "consume 2 err=0x00 msgs=1", "produce 3 0x00"], "open")],
    features=["long-poll"],
)
async def s3_3(c: Conversation) -> None:
    topic = topic_of("tk.S3.3")
    await first_ping(c)
    await create(c, 1, topic)
    await c.send(obs(c).request(consume_request(2, topic, 1, wait_ms=5000, min_bytes=1)), label="Consume from 1, maxWait 5 s")
    await c.quiet(0.3)
    await c.send(obs(c).request(produce_request(3, topic, encode_bundle(messages(c, 1), compress=False))), label="Produce 1")
    await answered(c, "produce 3 ")
    await answered(c, "consume 2 ", timeout=1.0)


@server_case(
    "tk.S3.4",
    "long-poll-timeout",
    "A long poll with nothing to wake it is answered empty at its maxWait",
    "§6",
    "Consume at the end with maxWait 500 ms and minBytes 1, and produce nothing. The answer must come after about "
    "0.5 s (aligned up to 128 ms), empty.",
    [expect(PASS, ALL, ["ping", "create 1 err=0x00", "consume 2 err=0x00 msgs=0"], "open", facts=["answered after the wait"])],
    features=["long-poll"],
)
async def s3_4(c: Conversation) -> None:
    topic = topic_of("tk.S3.4")
    await first_ping(c)
    await create(c, 1, topic)
    t0 = c.now()
    await c.send(obs(c).request(consume_request(2, topic, 1, wait_ms=500, min_bytes=1)), label="Consume from 1, maxWait 500 ms")
    await answered(c, "consume 2 ", timeout=3.0)
    if 0.45 <= c.now() - t0:
        c.note("answered after the wait")


@server_case(
    "tk.S3.5",
    "first-bundle-whole",
    "The first bundle of a chunk is whole even past fetchSize",
    "§6, §9",
    "Produce a bundle of 4 messages of 200 bytes, then consume from 0 with fetchSize 16. The answer must still hold "
    "the whole first bundle (4 messages): a smaller fetch size never starves a consumer.",
    [expect(PASS, ALL, ["ping", "create 1 err=0x00", "produce 2 0x00", "consume 3 err=0x00 msgs=4"], "open")],
    vectors=["partial_chunks.json"],
)
async def s3_5(c: Conversation) -> None:
    topic = topic_of("tk.S3.5")
    await first_ping(c)
    await create(c, 1, topic)
    await c.send(obs(c).request(produce_request(2, topic, encode_bundle(messages(c, 4, 200), compress=False))), label="Produce 4")
    await answered(c, "produce 2 ")
    await c.send(obs(c).request(consume_request(3, topic, 0, fetch=16)), label="Consume from 0, fetchSize 16")
    await answered(c, "consume 3 ")


# --------------------------------------------------------------------------- S4 hostile input


def _produce_with_long_varint(rid: int, topic: str, bundle: bytes) -> bytes:
    """A Produce whose bundleLen is a 6-byte varint (§2): the true length, padded with continuation bytes."""
    from ..wire import Writer
    from .frames import PRODUCE, w_str8

    w = Writer()
    w.u16le(2, "clientVersion").u32le(rid, "requestId")
    w_str8(w, b"c++", "clientId")
    w.u8(0, "requiredAcks").u32le(0, "ackTimeoutMs").u8(1, "topicsCnt")
    w_str8(w, topic, "topic")
    w.u8(1, "partitionsCnt").u16le(0, "partitionId")
    n = len(bundle)
    varint = bytes([(n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, 0x80, 0x80, 0x80, 0x00])
    w.raw(varint)
    w.raw(bundle)
    return frame(PRODUCE, w.getvalue())


@server_case(
    "tk.S4.1",
    "varint-six-bytes",
    "A 6-byte varint is refused",
    "§2",
    "Produce with the bundle length written as a 6-byte varint (the right value, padded). refwire refuses a 6th "
    "byte and closes; the real broker drops the high bits and accepts (NON-STRICT under the strict profile).",
    [
        expect(PASS, "strict", ["ping", "create 1 err=0x00"], CLOSED),
        expect(PASS, "tank-broker", ["ping", "create 1 err=0x00", "produce 2 0x00"], "open", note="the real broker drops a 6th byte's bits"),
    ],
)
async def s4_1(c: Conversation) -> None:
    topic = topic_of("tk.S4.1")
    await first_ping(c)
    await create(c, 1, topic)
    o = obs(c)
    o.machine.send(produce_request(2, topic, b"x"), now=0.0)  # registered, so an answer decodes
    o.machine.data_to_send()
    raw = _produce_with_long_varint(2, topic, encode_bundle(messages(c, 1), compress=False))
    await c.send(raw, label="Produce, bundleLen as a 6-byte varint", split="whole")
    if not await c.wait_close(2.0):
        await answered(c, "produce 2 ", timeout=0.5)


@server_case(
    "tk.S4.2",
    "malformed-second-bundle",
    "A produce whose second bundle is malformed stores nothing",
    "§6, §7",
    "Produce to two partitions of the case's topic... in one request: the first bundle valid, the second "
    "cut short. The broker refuses the request as a whole (closes, or answers an error for it); a consume on the "
    "same connection, if it stays open, finds nothing stored.",
    [
        expect(PASS, ALL, ["ping", "create 1 err=0x00"], CLOSED),
        expect(PASS, ALL, ["ping", "create 1 err=0x00", "produce 2 0x*", "consume 3 err=0x00 msgs=0"], "open"),
    ],
)
async def s4_2(c: Conversation) -> None:
    topic = topic_of("tk.S4.2")
    await first_ping(c)
    await c.send(obs(c).request(CreateTopicRequest(1, topic, 2)), label="CreateTopic, 2 partitions", split="whole")
    await answered(c, "create 1 ")
    good = encode_bundle(messages(c, 2), compress=False)
    bad = encode_bundle(messages(c, 2), compress=False)[:-3]
    req = ProduceRequest(2, (ProduceTopic(topic, (ProducePartition(0, good), ProducePartition(1, bad))),))
    await c.send(obs(c).request(req), label="Produce: partition 0 valid, partition 1 cut short")
    if await c.wait_close(1.5):
        return
    await c.send(obs(c).request(consume_request(3, topic, 0)), label="Consume partition 0 from 0")
    await answered(c, "consume 3 ")


@server_case(
    "tk.S4.3",
    "unknown-topic",
    "Produce and consume on a topic that does not exist",
    "§3, §6",
    "Without creating it, produce to the case's topic (err 0xff, topic-wide) and consume from it (the topic "
    "comes back unknown). The connection stays open.",
    [expect(PASS, ALL, ["ping", "produce 1 0xff", "consume 2 unknown-topic"], "open")],
)
async def s4_3(c: Conversation) -> None:
    topic = topic_of("tk.S4.3") + f"-{c.rng.getrandbits(32):08x}"
    await first_ping(c)
    await c.send(obs(c).request(produce_request(1, topic, encode_bundle(messages(c, 1), compress=False))), label="Produce to an unknown topic")
    await answered(c, "produce 1 ")
    await c.send(obs(c).request(consume_request(2, topic, 0)), label="Consume an unknown topic")
    await answered(c, "consume 2 ")


# --------------------------------------------------------------------------- client cases
#
# refwire plays the broker (a BrokerService per case, answering through the
# case's conversation), misbehaving where a case says so.  The testee contract
# is specs/tank/README.md §12: produce {events} messages to partition 0 of the
# topic named {slug} (the broker has it), then consume from seq 1 until it has
# them all, and exit 0 only when it got each message it produced exactly once,
# in order.


class ClientObserver(MachineObserver):
    """Tokens for what a client sends, decoded by refwire's broker machine:
    ``produce``, ``consume seq=S fetch=F``, other requests by name, and
    ``invalid <field>`` at the first byte that does not decode.  The decoded
    requests wait in :attr:`requests` for the case's broker to answer."""

    def __init__(self) -> None:
        from .connection import BrokerConnection

        super().__init__(BrokerConnection(now=0.0, idle_timeout=None, limits=Limits(max_frame_size=256 << 20)))
        self.machine.data_to_send()  # its greeting Ping is the case's to send
        self.requests: list[Any] = []

    def tokens(self, ev: Any) -> list[Token]:
        if isinstance(ev, ProduceRequest):
            self.requests.append(ev)
            return [("produce", {"type": "Produce", "request_id": ev.request_id})]
        if isinstance(ev, ConsumeRequest):
            self.requests.append(ev)
            p = ev.topics[0].partitions[0] if ev.topics and ev.topics[0].partitions else None
            token = "consume" if p is None else f"consume seq={p.seq} fetch={p.fetch_size}"
            return [(token, {"type": "Consume", "request_id": ev.request_id})]
        if hasattr(ev, "request_id"):
            self.requests.append(ev)
            return [(type(ev).__name__, {"type": type(ev).__name__})]
        return []


Shaper = Any  # (ConsumeResponse, ConsumeRequest) -> ConsumeResponse: how a case's broker misbehaves


async def serve_client(s: Any, shape: Shaper | None = None, *, pings: bool = False) -> None:
    """The case's broker: accept the client's connections one after the other,
    answer every request with a :class:`~refwire.tank.service.BrokerService`
    (``shape`` alters each consume answer; ``pings``: a Ping before every
    answer), until the client exits or the
    budget ends; then note what was stored and how the client ended."""
    from .service import BrokerService
    from .storage import MemoryStorage

    service = BrokerService(MemoryStorage())
    topic = s.case.slug
    service.storage.create_topic(topic, 1)
    while not s.exited.is_set():
        c = await s.accept(30.0)
        if c is None:
            break
        await c.send(Ping().encode(), label="Ping (the broker speaks first)", split="whole")
        o = c.observer
        assert isinstance(o, ClientObserver)
        served = 0
        while c.closed_by_testee is None and not s.exited.is_set():
            await c.wait_for(
                lambda cv, o=o, served=served: len(o.requests) > served or cv.closed_by_testee is not None or s.exited.is_set(),
                1.0,
            )
            while served < len(o.requests):
                req = o.requests[served]
                served += 1
                out = service.handle(1, req, now=c.now())
                for _, resp in out:
                    if shape is not None and isinstance(req, ConsumeRequest) and hasattr(resp, "topics"):
                        resp = shape(resp, req)
                    if pings and not await c.send(Ping().encode(), label="Ping", split="whole"):
                        break
                    if not await c.send(resp.encode(), label=type(resp).__name__, split="whole"):
                        break
        if c.closed_by_testee is None:
            await c.close("FIN")
    lg = service.storage.topics[topic][0]
    s.note(f"stored {lg.last_assigned} messages")


def _truncate_last_bundle(resp: Any, req: Any) -> Any:
    """Every chunk holding more than one bundle loses its last bundle's final 3 bytes (a partial bundle, §5)."""
    import attrs

    from ..wire import decode_uvarint
    from .responses import ConsumeTopicResult

    topics = []
    for t in resp.topics:
        parts = []
        for p in t.partitions:
            chunk = p.chunk
            starts, pos = [], 0
            while pos < len(chunk):
                starts.append(pos)
                n, q = decode_uvarint(chunk, pos, len(chunk), field="bundleLen")
                pos = q + n
            if len(starts) > 1:
                chunk = chunk[:-3]
            parts.append(attrs.evolve(p, chunk=chunk))
        topics.append(ConsumeTopicResult(t.name, tuple(parts), t.unknown, t.partitions_count))
    return attrs.evolve(resp, topics=tuple(topics))


def _cut_at_fetch_size(resp: Any, req: Any) -> Any:
    """The chunk is cut at the request's fetchSize, even inside the first bundle (§5: the client must ask again, larger)."""
    import attrs

    from .responses import ConsumeTopicResult

    asked = {(t.name, p.partition): p.fetch_size for t in req.topics for p in t.partitions}
    topics = [
        ConsumeTopicResult(
            t.name,
            tuple(attrs.evolve(p, chunk=p.chunk[: asked.get((t.name, p.partition), len(p.chunk))]) for p in t.partitions),
            t.unknown,
            t.partitions_count,
        )
        for t in resp.topics
    ]
    return attrs.evolve(resp, topics=tuple(topics))


EXIT_OK = "exit 0"
client_case = BOOK.client


@client_case(
    "tk.C1.1",
    "produce-and-consume",
    "Produce, then consume everything back",
    "§3, §6, §12",
    "Serve normally: the client produces its messages and consumes them back from seq 1. It must exit 0, "
    "and the broker must hold them all.",
    [expect(PASS, ALL, ["...", "produce", "..."], facts=[EXIT_OK, "stored 12 messages"])],
    events=12,
)
async def c1_1(s: Any) -> None:
    await serve_client(s)


@client_case(
    "tk.C1.2",
    "partial-bundle-at-chunk-end",
    "A chunk that ends inside a bundle",
    "§5, §12",
    "Cut every consume chunk of more than one bundle inside its last bundle (as a fetch size ending mid-bundle "
    "does). The client must keep the whole bundles, ask again from the first message it lacks, and get each once.",
    [expect(PASS, ALL, ["...", "consume *", "...", "consume *", "..."], facts=[EXIT_OK])],
    events=40,
    vectors=["partial_chunks.json"],
)
async def c1_2(s: Any) -> None:
    await serve_client(s, _truncate_last_bundle)


@client_case(
    "tk.C1.3",
    "first-bundle-over-fetch-size",
    "A first bundle larger than the fetch size",
    "§5, §12",
    "Cut every consume chunk at the request's fetchSize, even inside its first bundle. A client whose fetch size is "
    "smaller than a bundle must ask again with a larger one (the chunk says how large) and get each message once.",
    [expect(PASS, ALL, ["..."], facts=[EXIT_OK])],
    events=10,
)
async def c1_3(s: Any) -> None:
    await serve_client(s, _cut_at_fetch_size)


@client_case(
    "tk.C1.4",
    "broker-pings",
    "The broker's Pings at any time",
    "§3, §6, §12",
    "Send a Ping before every answer. The client must take them as the keepalives they are and complete.",
    [expect(PASS, ALL, ["..."], facts=[EXIT_OK])],
    events=8,
)
async def c1_4(s: Any) -> None:
    await serve_client(s, pings=True)


# --------------------------------------------------------------------------- catalogue


async def serve_for_simulation(listener: Any, sink: str) -> None:
    """refwire's own broker on ``listener`` (the server cases run against it inside the simulator)."""
    from .server import TankBroker

    await TankBroker().serve([listener])


async def client_for_simulation(connect: Any, values: Any) -> int:
    """refwire's own TANK client as a client-case testee (the §12 contract): produce
    ``{events}`` messages to topic ``{slug}``, consume them back from seq 1 with a
    64-byte fetch size (so partial chunks and retries happen), exit 0 only when each
    came back once, in order."""
    import random

    from .client import ClientConfig, TankClient

    n, topic = int(values["events"]), values["slug"]
    rng = random.Random(int(values["seed"]))
    sent = [bytes(rng.getrandbits(8) for _ in range(20)) + i.to_bytes(4, "big") for i in range(n)]
    client = TankClient(connect, config=ClientConfig(ping_interval=None, fetch_size=64))
    got: list[bytes] = []
    try:
        async with client:
            for i in range(0, n, 4):
                r = await client.produce(topic, 0, [Message(m, ts=1) for m in sent[i : i + 4]], compress=False)
                if r.error:
                    return 1
            seq = 1
            for _ in range(4 * n + 8):
                if len(got) >= n:
                    break
                pd = await client.consume(topic, 0, seq)
                for m in pd.messages:
                    got.append(m.content)  # type: ignore[attr-defined]
                if pd.chunk is not None:
                    seq = pd.chunk.next_seq
    except (ProtocolError, OSError, trio.BrokenResourceError, trio.ClosedResourceError):
        return 1
    return 0 if got == sent else 1


CATALOGUE = Catalogue(
    protocol="tank",
    prefix="tk",
    cases=tuple(BOOK.cases),
    profiles=PROFILES,
    features=FEATURES,
    server_observer=ServerObserver,
    client_observer=ClientObserver,
    spec=SPEC,
    sim_server=serve_for_simulation,
    sim_client=client_for_simulation,
)
