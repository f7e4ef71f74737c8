"""What the TANK cases share: the spec, the profiles of the real broker, the
features, :class:`ServerObserver` (what a broker sends) and the server cases' helpers.
"""

from __future__ import annotations

from typing import Any

from ....tank.bundles import Message
from ....tank.connection import ClientConnection
from ....tank.events import ConsumeResult
from ....tank.frames import (
    ConsumePartition,
    ConsumeRequest,
    ConsumeTopic,
    CreateTopicRequest,
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
)
from ....tank.responses import CreateTopicResponse, ProduceResponse
from ...conversation import Conversation, MachineObserver, Token
from ...model import Verdict
from ...runner import TesteeState

SPEC = "specs/tank/README.md"
PASS, INFO, FAIL = Verdict.PASS, Verdict.INFO, Verdict.FAIL
ALL = "strict tank-broker"
CLOSED = "FIN RST"
#: The broker's own Pings (on accept, §6) may come at any time after the first.
PINGS = ("ping",)

PROFILES = {
    "strict": f"the behaviour {SPEC} specifies (refwire's broker)",
    "tank-broker": "the real TANK 4.0 (C++): its broker, and tank-cli in the client cases, as the spec records them (§2, §6-§9, §12)",
}

FEATURES = {
    "long-poll": "consume with maxWait/minBytes parks until data arrives (§6)",
    "sparse": "ProduceWithSeqnum (0x05) and sparse bundles (§4, §6)",
    "snappy": "raw Snappy bundles (codec 1, §4)",
}

U64_MAX = 2**64 - 1


def topic_of(c: Conversation, case_id: str) -> str:
    """The case's own topic: ``conform-<case id>-<run id>`` (``conform-tk-S2-1-0a1b2c3d``),
    so that no run finds a topic an earlier run created (``is_valid_topic_name``, §3)."""
    return c.name("conform-" + case_id.replace(".", "-"))


# --------------------------------------------------------------------------- observer


class ServerObserver(MachineObserver):
    """Tokens for what a broker sends, decoded by refwire's own client machine
    (which knows each request's layout) with its default limits (frames of up to
    256 MiB, as much buffered, §6): ``ping``, ``create R err=E``,
    ``produce R E,E…``, ``consume R err=E msgs=N``; ``invalid <field>`` at the
    first byte that does not decode.  A case registers its requests with
    :meth:`request`, which returns their bytes."""

    def __init__(self) -> None:
        super().__init__(ClientConnection(now=0.0, ping_interval=None), eof="eof")
        #: decoded consume results by request id (cases compare their messages)
        self.consumed: dict[int, ConsumeResult] = {}

    def request(self, req: Any) -> bytes:
        self.machine.send(req, now=0.0)
        data: bytes = self.machine.data_to_send()
        return data

    def tokens(self, ev: Any) -> list[Token]:
        from ....tank.events import Connected, ConnectionClosed

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


def obs(c: Conversation) -> ServerObserver:
    o = c.observer
    assert isinstance(o, ServerObserver)
    return o


def messages(c: Conversation, n: int, size: int = 24) -> list[Message]:
    """``n`` messages whose contents come from the case seed."""
    return [Message(bytes(c.rng.getrandbits(8) for _ in range(size)), ts=1_700_000_000_000 + i) for i in range(n)]


#: CreateTopic's error for a topic that already exists (§3, the real broker's code).
TOPIC_EXISTS = 0x01


async def create(c: Conversation, rid: int, topic: str) -> None:
    """Create the case's topic and wait for the answer (§3).  A topic that already
    exists was left by a run under the same run id: the testee's state, not its
    behaviour, would decide the case (:class:`~refwire.conform.runner.TesteeState`)."""
    await c.send(obs(c).request(CreateTopicRequest(rid, topic, 1)), label=f"CreateTopic {topic}", split="whole")
    await answered(c, f"create {rid} ")
    if f"create {rid} err=0x{TOPIC_EXISTS:02x}" in c.tokens:
        raise TesteeState(
            f"topic {topic} already exists on the broker (CreateTopic err 0x{TOPIC_EXISTS:02x}): it was left by an earlier run "
            "with this run id; run again with a fresh --run-id (the default), or reset the broker first"
        )
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

