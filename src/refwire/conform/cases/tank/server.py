"""TANK server cases (``tk.S…``): refwire plays a TANK client against the testee
broker; every case works in a topic of its own (:func:`~._common.topic_of`).
"""

from __future__ import annotations

from ....tank.bundles import Message, encode_bundle
from ....tank.frames import CreateTopicRequest, Ping, ProducePartition, ProduceRequest, ProduceTopic, frame
from ...conversation import Conversation
from ...model import CaseBook, expect
from ._common import (
    ALL,
    CLOSED,
    FAIL,
    INFO,
    PASS,
    SPEC,
    answered,
    consume_request,
    contents,
    create,
    first_ping,
    messages,
    obs,
    produce_request,
    seqs,
    topic_of,
)

BOOK = CaseBook(SPEC, server_ignore=(), server_budget=6.0)
server_case = BOOK.server


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
    topic = topic_of(c, "tk.S2.1")
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
    topic = topic_of(c, "tk.S2.2")
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
    topic = topic_of(c, "tk.S2.3")
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
    topic = topic_of(c, "tk.S2.4")
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
    topic = topic_of(c, "tk.S3.1")
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
    topic = topic_of(c, "tk.S3.2")
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
    topic = topic_of(c, "tk.S3.3")
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
    budget=10.0,
)
async def s3_4(c: Conversation) -> None:
    topic = topic_of(c, "tk.S3.4")
    await first_ping(c)
    await create(c, 1, topic)
    t0 = c.now()
    await c.send(obs(c).request(consume_request(2, topic, 1, wait_ms=500, min_bytes=1)), label="Consume from 1, maxWait 500 ms")
    # 10x the poll's 0.5 s (about 0.63 s once aligned): a busy machine's answer still comes in time
    await answered(c, "consume 2 ", timeout=6.5)
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
    topic = topic_of(c, "tk.S3.5")
    await first_ping(c)
    await create(c, 1, topic)
    await c.send(obs(c).request(produce_request(2, topic, encode_bundle(messages(c, 4, 200), compress=False))), label="Produce 4")
    await answered(c, "produce 2 ")
    await c.send(obs(c).request(consume_request(3, topic, 0, fetch=16)), label="Consume from 0, fetchSize 16")
    await answered(c, "consume 3 ")


# --------------------------------------------------------------------------- S4 hostile input


def _produce_with_varint(rid: int, topic: str, bundle: bytes, varint: bytes) -> bytes:
    """A Produce of ``bundle`` whose bundleLen is written as the bytes ``varint`` (§2)."""
    from ....tank.frames import PRODUCE, w_str8
    from ....wire import Writer

    w = Writer()
    w.u16le(2, "clientVersion").u32le(rid, "requestId")
    w_str8(w, b"c++", "clientId")
    w.u8(0, "requiredAcks").u32le(0, "ackTimeoutMs").u8(1, "topicsCnt")
    w_str8(w, topic, "topic")
    w.u8(1, "partitionsCnt").u16le(0, "partitionId")
    w.raw(varint)
    w.raw(bundle)
    return frame(PRODUCE, w.getvalue())


def six_byte_varint(n: int) -> bytes:
    """``n`` (< 2^14) as a 6-byte varint: its two 7-bit groups, then continuation bytes and a 0 (the same value)."""
    return bytes([(n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, 0x80, 0x80, 0x80, 0x00])


def overflowing_varint(n: int) -> bytes:
    """``n`` + 2^32 as a 5-byte varint: the 5th byte carries bit 32 (0x10), which a u32 cannot hold."""
    return bytes([(n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, ((n >> 14) & 0x7F) | 0x80, ((n >> 21) & 0x7F) | 0x80, 0x10 | (n >> 28)])


async def _produce_raw(c: Conversation, topic: str, raw: bytes, label: str) -> None:
    """Send ``raw``, a hand-made Produce to ``topic`` with request id 2, registered so that its answer decodes."""
    o = obs(c)
    o.machine.send(produce_request(2, topic, b"x"), now=0.0)
    o.machine.data_to_send()
    await c.send(raw, label=label, split="whole")


@server_case(
    "tk.S4.1",
    "varint-six-bytes",
    "A 6-byte varint is refused",
    "§2",
    "Produce with the bundle length written as a 6-byte varint (the right value, padded). A varint has at most 5 "
    "bytes: the broker must close the connection. The real broker closes too (it gives up after 5 bytes).",
    [expect(PASS, ALL, ["ping", "create 1 err=0x00"], CLOSED)],
)
async def s4_1(c: Conversation) -> None:
    topic = topic_of(c, "tk.S4.1")
    await first_ping(c)
    await create(c, 1, topic)
    bundle = encode_bundle(messages(c, 1), compress=False)
    await _produce_raw(c, topic, _produce_with_varint(2, topic, bundle, six_byte_varint(len(bundle))), "Produce, bundleLen as a 6-byte varint")
    if not await c.wait_close(2.0):
        await answered(c, "produce 2 ", timeout=0.5)


@server_case(
    "tk.S4.2",
    "malformed-second-bundle",
    "A produce whose second bundle is malformed stores nothing",
    "§6, §7",
    "Produce to two partitions of the case's topic in one request: the first bundle valid, the second one's last "
    "message cut short. The broker refuses the request as a whole (closes, or answers an error for it); a consume "
    "on the same connection, if it stays open, finds nothing stored. The real broker checks only the framing: it "
    "stores both bundles and answers 0 (a bug: the partition then holds a bundle no consumer can read).",
    [
        expect(PASS, "strict", ["ping", "create 1 err=0x00"], CLOSED),
        expect(PASS, "strict", ["ping", "create 1 err=0x00", "produce 2 0x*", "consume 3 err=0x00 msgs=0"], "open"),
        expect(
            FAIL,
            "tank-broker",
            ["ping", "create 1 err=0x00", "produce 2 0x00,0x00", "consume 3 err=0x00 msgs=2"],
            "open",
            note="the real broker checks a bundle's framing, not its messages: it stored the malformed bundle (§6)",
        ),
    ],
)
async def s4_2(c: Conversation) -> None:
    topic = topic_of(c, "tk.S4.2")
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
    topic = topic_of(c, "tk.S4.3") + f"-{c.rng.getrandbits(32):08x}"
    await first_ping(c)
    await c.send(obs(c).request(produce_request(1, topic, encode_bundle(messages(c, 1), compress=False))), label="Produce to an unknown topic")
    await answered(c, "produce 1 ")
    await c.send(obs(c).request(consume_request(2, topic, 0)), label="Consume an unknown topic")
    await answered(c, "consume 2 ")


@server_case(
    "tk.S4.4",
    "varint-fifth-byte-overflow",
    "A 5-byte varint above 2^32 - 1 is refused",
    "§2",
    "Produce with the bundle length written as a 5-byte varint whose 5th byte sets bit 32 (the true length plus "
    "2^32). A varint is a u32: the broker must close the connection. The real broker keeps the low 32 bits (the "
    "true length here): it stores the bundle, answers 0 and stays open, which its profile documents.",
    [
        expect(PASS, "strict", ["ping", "create 1 err=0x00"], CLOSED),
        expect(
            PASS,
            "tank-broker",
            ["ping", "create 1 err=0x00", "produce 2 0x00", "consume 3 err=0x00 msgs=1"],
            "open",
            note="the real broker drops the bits of a 5th byte above bit 31 (§2)",
        ),
    ],
)
async def s4_4(c: Conversation) -> None:
    topic = topic_of(c, "tk.S4.4")
    await first_ping(c)
    await create(c, 1, topic)
    bundle = encode_bundle(messages(c, 1), compress=False)
    raw = _produce_with_varint(2, topic, bundle, overflowing_varint(len(bundle)))
    await _produce_raw(c, topic, raw, "Produce, bundleLen + 2^32 as a 5-byte varint")
    if await c.wait_close(1.5):
        return
    if await answered(c, "produce 2 ", timeout=0.5):
        await c.send(obs(c).request(consume_request(3, topic, 0)), label="Consume from 0")
        await answered(c, "consume 3 ")


@server_case(
    "tk.S4.5",
    "message-cut-short",
    "A bundle whose message runs past its end is refused",
    "§4, §6",
    "Produce one bundle whose only message says it holds more content than the bundle has (the bundle cut 3 bytes "
    "short, its length the bytes present). The broker must refuse it (close, or answer an error) and store nothing. "
    "The real broker checks only the framing: it stores it, answers 0 and serves it to a consume from 0 (a bug: "
    "no consumer can decode it).",
    [
        expect(PASS, "strict", ["ping", "create 1 err=0x00"], CLOSED),
        expect(PASS, "strict", ["ping", "create 1 err=0x00", "produce 2 0x[!0]*", "consume 3 err=0x00 msgs=0"], "open"),
        expect(
            FAIL,
            "tank-broker",
            ["ping", "create 1 err=0x00", "produce 2 0x00", "invalid content"],
            "open",
            note="the real broker checks a bundle's framing, not its messages: it stored the malformed bundle and serves it (§6)",
        ),
    ],
)
async def s4_5(c: Conversation) -> None:
    topic = topic_of(c, "tk.S4.5")
    await first_ping(c)
    await create(c, 1, topic)
    bad = encode_bundle(messages(c, 1), compress=False)[:-3]
    await c.send(obs(c).request(produce_request(2, topic, bad)), label="Produce a bundle whose message is cut short")
    if await c.wait_close(1.5):
        return
    if await answered(c, "produce 2 ", timeout=0.5):
        await c.send(obs(c).request(consume_request(3, topic, 0)), label="Consume from 0")
        await answered(c, "consume 3 ")
