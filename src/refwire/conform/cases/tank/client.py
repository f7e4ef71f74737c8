"""TANK client cases (``tk.C…``): refwire plays the broker, misbehaving where a
case says so; the testee contract is ``specs/tank/README.md`` §12.
"""

from __future__ import annotations

from typing import Any

from ....tank.frames import ConsumeRequest, Ping, ProduceRequest
from ....wire import Limits
from ...conversation import MachineObserver, Token
from ...model import CaseBook, expect
from ._common import ALL, INFO, PASS, SPEC

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
        from ....tank.connection import BrokerConnection

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
    from ....tank.service import BrokerService
    from ....tank.storage import MemoryStorage

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


class _TruncateLastBundle:
    """Every chunk holding more than one bundle loses its last bundle's final 3 bytes (a partial bundle, §5);
    :attr:`cuts` counts the chunks so cut."""

    def __init__(self) -> None:
        self.cuts = 0

    def __call__(self, resp: Any, req: Any) -> Any:
        import attrs

        from ....tank.responses import ConsumeTopicResult
        from ....wire import decode_uvarint

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
                    self.cuts += 1
                parts.append(attrs.evolve(p, chunk=chunk))
            topics.append(ConsumeTopicResult(t.name, tuple(parts), t.unknown, t.partitions_count))
        return attrs.evolve(resp, topics=tuple(topics))


def _cut_at_fetch_size(resp: Any, req: Any) -> Any:
    """The chunk is cut at the request's fetchSize, even inside the first bundle (§5: the client must ask again, larger)."""
    import attrs

    from ....tank.responses import ConsumeTopicResult

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


BOOK = CaseBook(SPEC)
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
    "does). The client must keep the whole bundles, ask again from the first message it lacks, and get each once. "
    "When no chunk the client asked for held more than one bundle (one bundle of all its messages, or a fetch size "
    "below two bundles), nothing was cut: INFO, not exercised.",
    [
        expect(PASS, ALL, ["...", "consume *", "...", "consume *", "..."], facts=[EXIT_OK, "partial bundles served: [1-9]*"]),
        expect(
            INFO,
            ALL,
            ["..."],
            facts=[EXIT_OK, "partial bundles served: 0"],
            note="not exercised: no chunk held more than one bundle, so no partial bundle was served",
        ),
    ],
    events=40,
    vectors=["partial_chunks.json"],
)
async def c1_2(s: Any) -> None:
    cut = _TruncateLastBundle()
    try:
        await serve_client(s, cut)
    finally:
        s.note(f"partial bundles served: {cut.cuts}")


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

