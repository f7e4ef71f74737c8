"""What the Pravega cases share: the spec, the profiles of the real server and
clients, the features, each case's segments (:func:`segment_of`),
:class:`ServerObserver` (what a segment store sends) and the server cases' helpers.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from ....errors import ProtocolError
from ....pravega.connection import ClientConnection
from ....pravega.events import ConnectionClosed, HelloReceived, KeepAliveReceived, ReplyReceived
from ....pravega.frames import (
    CLIENT_LIMITS,
    NULL_VALUE,
    AppendSetup,
    Command,
    CreateSegment,
    DataAppended,
    Hello,
    ReadSegment,
    SegmentAlreadyExists,
    SegmentRead,
    encode_event,
    request_id_of,
)
from ....pravega.writer import WriterSession
from ...conversation import Conversation, MachineObserver, Token
from ...model import CaseBook, Verdict
from ...runner import TesteeState

SPEC = "specs/pravega/README.md"
PASS, INFO, FAIL = Verdict.PASS, Verdict.INFO, Verdict.FAIL
SERVERS = "strict java-server"
CLIENTS = "strict rust-client java-client"
CLOSED = "FIN RST"
#: A KeepAlive echo may come whenever the store likes; a case that counts them says so.
SERVER_IGNORE: tuple[str, ...] = ()

PROFILES = {
    "strict": f"the behaviour {SPEC} specifies (refwire's segment store and client)",
    "java-server": "the Java segment store (Pravega master, wire v17) as the spec records it (§1.1, §5, §8, §10.3)",
    "rust-client": "pravega-client-rust (PyPI pravega==0.3.8, wire v15) as the spec records it (§5.2, §7.1, §10.2)",
    "java-client": "Pravega's Java client (wire v17) as the spec records it (§5.2, §7, §10.2)",
}

FEATURES = {
    "tables": "table segments (CreateTableSegment, UpdateTableEntries, ReadTable; §9)",
    "conditional": "conditional appends (ConditionalAppend; §5.4)",
}

#: The Java server's frame limit: header + payload (§1.1).
SERVER_MAX_FRAME = 0x00FFFFFF
HEADER = 8


def segment_of(c: Any, case_id: str, n: int = 0) -> str:
    """The case's own segment ``n``: a stream named after the case id, the run
    id and a seeded suffix (``conform/pv-S2-1-<run id>-<seeded>/0.#epoch.0``), so
    that no run meets a segment an earlier run made (§4: segment names)."""
    key = f"_seg{n}"
    got = getattr(c, key, None)
    if got is None:
        run_id = getattr(c, "run_id", "")
        mark = f"-{run_id}" if run_id else ""
        got = f"conform/{case_id.replace('.', '-')}{mark}-{c.rng.getrandbits(32):08x}/{n}.#epoch.0"
        setattr(c, key, got)
    return str(got)


def writer_of(c: Conversation) -> uuid.UUID:
    """A writer id drawn from the case seed."""
    return uuid.UUID(int=c.rng.getrandbits(128), version=4)


def _token(cmd: Command) -> str:
    if isinstance(cmd, DataAppended):
        return f"DataAppended {cmd.event_number}"
    if cmd.NAME == "ConditionalCheckFailed":
        return f"ConditionalCheckFailed {getattr(cmd, 'event_number', '?')}"
    rid = request_id_of(cmd)
    return cmd.NAME if rid == -1 else f"{cmd.NAME} {rid}"


# --------------------------------------------------------------------------- observer


class ServerObserver(MachineObserver):
    """Tokens for what a segment store sends, decoded by refwire's client
    machine: ``Hello``, ``KeepAlive``, ``<Reply> <requestId>`` (``DataAppended
    <eventNumber>``); ``invalid <field>`` at the first byte that does not
    decode.  The decoded replies are kept in :attr:`replies` for the case."""

    def __init__(self) -> None:
        super().__init__(ClientConnection(CLIENT_LIMITS, version=(NULL_VALUE_HIGH, 0)), eof="lost")
        self.replies: list[Command] = []
        self.hellos: list[HelloReceived] = []

    def tokens(self, ev: Any) -> list[Token]:
        if isinstance(ev, HelloReceived):
            self.hellos.append(ev)
            return [("Hello", {"type": "Hello", "high": ev.high_version, "low": ev.low_version})]
        if isinstance(ev, KeepAliveReceived):
            return [("KeepAlive", {"type": "KeepAlive"})]
        if isinstance(ev, ReplyReceived):
            self.replies.append(ev.command)
            return [(_token(ev.command), {"type": ev.command.NAME})]
        if isinstance(ev, ConnectionClosed):
            return [("closed", {"type": "closed", "reason": ev.reason})]
        return []


#: The observer accepts any server Hello (judging versions is the cases' job).
NULL_VALUE_HIGH = 2**31 - 1


# --------------------------------------------------------------------------- helpers


def server_book() -> CaseBook:
    """The book of one module's server cases (:mod:`.catalogue` joins the books, in order)."""
    return CaseBook(SPEC, server_ignore=SERVER_IGNORE, server_budget=6.0)


def obs(c: Conversation) -> ServerObserver:
    o = c.observer
    assert isinstance(o, ServerObserver)
    return o


def replies(c: Conversation, kind: type[Any]) -> list[Any]:
    return [r for r in obs(c).replies if isinstance(r, kind)]


async def has(c: Conversation, prefix: str, timeout: float = 3.0) -> bool:
    return await c.wait_for(lambda cv: any(t.startswith(prefix) for t in cv.tokens), timeout, label=prefix)


def answer(c: Conversation, rid: int) -> Command | None:
    """The reply to request ``rid`` (acks aside), if it came."""
    for r in obs(c).replies:
        if not isinstance(r, DataAppended) and request_id_of(r) == rid:
            return r
    return None


async def answered(c: Conversation, rid: int, timeout: float = 3.0) -> Command | None:
    await c.wait_for(lambda cv: answer(cv, rid) is not None, timeout, label=f"request {rid} answered")
    return answer(c, rid)


async def hello(c: Conversation) -> bool:
    await c.send(Hello(high_version=17, low_version=5).encode(), label="Hello(17, 5)", split="whole")
    return await has(c, "Hello", 3.0)


async def create(c: Conversation, rid: int, segment: str) -> bool:
    """CreateSegment (§4).  SegmentAlreadyExists for the case's own segment means an
    earlier run with this run id made it: the store's state, not its behaviour,
    would decide the case (:class:`~refwire.conform.runner.TesteeState`)."""
    await c.send(CreateSegment(request_id=rid, segment=segment).encode(), label=f"CreateSegment {segment}")
    r = await answered(c, rid)
    if isinstance(r, SegmentAlreadyExists):
        raise TesteeState(
            f"segment {segment} already exists on the store: an earlier run with this run id made it; run again with a "
            "fresh --run-id (the default), or reset the store first"
        )
    return r is not None


async def setup(c: Conversation, rid: int, w: WriterSession) -> AppendSetup | None:
    """SetupAppend (§5.1) for the case's writer; the AppendSetup is checked by the
    writer.  One saying that events of this new writer are already stored comes
    from an earlier run's writes (:class:`~refwire.conform.runner.TesteeState`)."""
    await c.send(w.setup(rid).encode(), label=f"SetupAppend {w.segment}")
    r = await answered(c, rid)
    if isinstance(r, AppendSetup) and r.writer_id == w.writer_id and r.segment == w.segment:
        last, written = r.last_event_number, w.next_number - 1
        if last != NULL_VALUE and last > written:
            if written <= 0:
                raise TesteeState(
                    f"the store says event {last} of this case's new writer is already stored on {w.segment}: an earlier "
                    "run with this run id wrote it; run again with a fresh --run-id (the default), or reset the store"
                )
            c.note(f"AppendSetup says event {last} is stored, but only {written} were written")
            return None
        w.on_append_setup(r)
        return r
    return None


def events_for(c: Conversation, n: int, *, low: int = 1, high: int = 120) -> list[bytes]:
    """``n`` event payloads of seeded sizes and contents."""
    return [bytes(c.rng.getrandbits(8) for _ in range(c.rng.randint(low, high))) for _ in range(n)]


async def acked(c: Conversation, number: int, timeout: float = 3.0) -> bool:
    return await c.wait_for(
        lambda cv: any(r.event_number >= number for r in replies(cv, DataAppended)), timeout, label=f"ack of {number}"
    )


def ack_chain_ok(c: Conversation, last: int) -> bool:
    """The acks chain exactly (§5.4): each ``previousEventNumber`` is the
    ``eventNumber`` before it, the first is ``Long.MIN_VALUE``, the last is ``last``."""
    acks = replies(c, DataAppended)
    prev = NULL_VALUE
    for a in acks:
        if a.previous_event_number != prev or not a.event_number > prev:
            return False
        prev = a.event_number
    return prev == last


async def read_all(c: Conversation, rid: int, segment: str, offset: int = 0, length: int = 1 << 20) -> bytes | None:
    """One ReadSegment; the data of its SegmentRead (None: no SegmentRead)."""
    await c.send(
        ReadSegment(segment=segment, offset=offset, suggested_length=length, request_id=rid).encode(),
        label=f"ReadSegment @{offset}",
    )
    r = await answered(c, rid)
    return bytes(r.data) if isinstance(r, SegmentRead) else None


def frames_of(payloads: Sequence[bytes]) -> bytes:
    return b"".join(encode_event(p) for p in payloads)


async def _write_all(c: Conversation, w: WriterSession, last: int) -> None:
    data = w.take()
    if data:
        await c.send(data, label=f"appends up to event {last}")
    await acked(c, last)
    for a in replies(c, DataAppended):
        try:
            w.on_data_appended(a)
        except ProtocolError:
            pass
