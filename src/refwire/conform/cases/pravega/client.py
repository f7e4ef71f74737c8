"""Pravega client cases (``pv.C…``): refwire plays the segment store and a
controller, misbehaving where a case says so; the testee contract is
``specs/pravega/README.md`` §14.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import trio

from ....pravega.connection import ServerConnection
from ....pravega.events import Append, ConnectionClosed, HelloReceived, KeepAliveReceived, RequestReceived
from ....pravega.frames import Hello, ReadSegment, SetupAppend
from ...conversation import Conversation, MachineObserver, Token
from ...model import CaseBook, expect
from ._common import CLIENTS, INFO, PASS, SPEC

# --------------------------------------------------------------------------- client cases
#
# refwire plays the segment store (a SegmentStoreService per case over its own
# SegmentStore, answering through the case's conversations) and, outside the
# simulator, a controller pointing at it.  The testee contract is
# specs/pravega/README.md §14: write {events} events to the stream
# conform/{slug} (one segment, conform/{slug}/0.#epoch.0, which the store
# already has), then read them back from the start, and exit 0 only when each
# event written came back exactly once, in order.


def stream_segment(slug: str) -> str:
    """The one segment of the case's stream ``conform/{slug}`` (§14)."""
    return f"conform/{slug}/0.#epoch.0"


class ClientObserver(MachineObserver):
    """Tokens for what a client sends, decoded by refwire's segment-store machine:
    ``Hello``, ``KeepAlive``, requests by name (``SetupAppend``, ``ReadSegment``…),
    ``append <eventNumber>`` for each reassembled append; ``invalid <field>`` at
    the first byte that does not decode.  The decoded events wait in
    :attr:`events` for the case's store to answer; :attr:`machine` encodes the
    answers."""

    def __init__(self) -> None:
        super().__init__(ServerConnection(frame_timeout=None))
        self.events: list[Any] = []

    def tokens(self, ev: Any) -> list[Token] | None:
        if isinstance(ev, ConnectionClosed):
            return None
        self.events.append(ev)
        if isinstance(ev, HelloReceived):
            return [("Hello", {"type": "Hello", "high": ev.high_version, "low": ev.low_version})]
        if isinstance(ev, KeepAliveReceived):
            return [("KeepAlive", {"type": "KeepAlive"})]
        if isinstance(ev, Append):
            return [(f"append {ev.event_number}", {"type": "Append", "events": ev.event_count})]
        if isinstance(ev, RequestReceived):
            return [(ev.command.NAME, {"type": ev.command.NAME})]
        return []


@attrs.define
class StoreContext:
    """A client case's segment store: the store the controller administers and
    the case's connections answer from, and the reads parked at its tail."""

    server: Any
    parked: list[tuple[Conversation, ReadSegment]] = attrs.field(factory=list)
    #: (segment, event numbers) of each stored append, in order
    stored: list[tuple[str, int, int]] = attrs.field(factory=list)


def store_of(s: Any) -> StoreContext:
    """The case's store (made on first use, with the stream's segment in it)."""
    ctx = getattr(s, "pravega_store", None)
    if ctx is None:
        from ....pravega.server import SegmentStoreServer

        # No log: what it stores is durable at once; trio's clock (virtual in the simulator) for determinism.
        ctx = StoreContext(SegmentStoreServer(now=lambda: trio.current_time() * 1000))
        ctx.server.store.create(stream_segment(s.case.slug))
        s.pravega_store = ctx
    assert isinstance(ctx, StoreContext)
    return ctx


async def client_services(s: Any, host: str, port: int) -> dict[str, str]:
    """A controller for the case (in the session's nursery) whose every
    ``getURI`` names the case's store at ``host:port``; the ``{controller}``
    placeholder is its URI (§14)."""
    from ....pravega.controller import PravegaController

    ctx = store_of(s)
    listeners = await trio.open_tcp_listeners(0, host=host)
    ctl = PravegaController(ctx.server.admin, (host, port))
    await s.nursery.start(ctl.serve, listeners)
    s.action(f"controller on {host}:{listeners[0].socket.getsockname()[1]} (getURI -> {host}:{port})")
    return {"controller": f"tcp://{host}:{listeners[0].socket.getsockname()[1]}"}


#: What a case's store does with one decoded client event instead of the
#: usual: return True when it handled it (answered, or chose not to).
Hook = Callable[[Any, Conversation, ClientObserver, Any], "bool"]


async def _answer(s: Any, c: Conversation, o: ClientObserver, ev: Any, ctx: StoreContext) -> None:
    """Answer one client event the way refwire's segment store does."""
    server = ctx.server
    service, m, now = server.service, o.machine, c.now()
    if isinstance(ev, Append):
        out = service.append(ev, now=server._time_ms())
        if out.kind == "ok":
            ctx.stored.append((ev.segment, ev.event_number, ev.event_count))
            m.append_stored(ev, server._segment_length(ev.segment), now=now)
            await _wake(s, ctx, ev.segment)
        elif out.kind == "conditional":
            m.append_conditional_failed(ev, now=now)
        elif out.kind == "failed":
            m.append_failed(ev, out.reply, now=now)
        else:
            if out.reply is not None:
                m.send(out.reply, now=now)
            m.close(now=now)
    elif isinstance(ev, RequestReceived):
        res = service.process(ev.command, now=server._time_ms())
        if res.park:
            assert isinstance(ev.command, ReadSegment)
            ctx.parked.append((c, ev.command))
            return
        if res.reply is not None:
            m.send(res.reply, now=now)
        if res.close:
            m.close(now=now)


async def _wake(s: Any, ctx: StoreContext, segment: str) -> None:
    """Answer the reads parked on ``segment`` (after the reply that woke them, §6)."""
    keep = []
    for c, cmd in ctx.parked:
        if cmd.segment != segment or c.closed_by_testee is not None:
            keep.append((c, cmd))
            continue
        o = c.observer
        assert isinstance(o, ClientObserver)
        res = ctx.server.service.process(cmd, now=ctx.server._time_ms(), was_parked=True)
        if res.park:
            keep.append((c, cmd))
        elif res.reply is not None:
            o.machine.send(res.reply, now=c.now())
            if c is not s.current:
                await _flush(c, o)
    ctx.parked = keep


async def _flush(c: Conversation, o: ClientObserver) -> bool:
    data = o.machine.data_to_send()
    if not data:
        return True
    return await c.send(data, label="replies", split="whole")


async def serve_store(s: Any, hook: Hook | None = None) -> None:
    """The case's segment store: accept the client's connections one after
    another (and side by side), answer every event as refwire's store does
    unless ``hook`` takes it, until the client exits or the budget ends; then
    note what the store holds."""
    ctx = store_of(s)
    s.current = None

    async def one(c: Conversation) -> None:
        o = c.observer
        assert isinstance(o, ClientObserver)
        served = 0

        def ready(cv: Conversation) -> bool:
            return len(o.events) > served or cv.closed_by_testee is not None or bool(s.exited.is_set())

        while c.closed_by_testee is None and not s.exited.is_set():
            await c.wait_for(ready, 1.0)
            while served < len(o.events) and c.closed_by_runner is None:
                ev = o.events[served]
                served += 1
                s.current = c
                if hook is None or not hook(s, c, o, ev):
                    await _answer(s, c, o, ev, ctx)
                s.current = None
                if not await _flush(c, o):
                    return
                if o.machine.must_close:
                    await c.close("FIN")
                    return
            if c.closed_by_runner is not None:
                return

    async with trio.open_nursery() as nursery:
        while not s.exited.is_set():
            c = await s.accept(30.0)
            if c is None:
                break
            nursery.start_soon(one, c)
        nursery.cancel_scope.cancel()
    _note_stored(s, ctx)


def _note_stored(s: Any, ctx: StoreContext) -> None:
    from ....pravega.client import parse_events

    seg = ctx.server.store.segments.get(stream_segment(s.case.slug))
    if seg is None:
        return
    evs, _ = parse_events(bytes(seg.data))
    payloads = [p for _, p in evs]
    s.note(f"stored {len(payloads)} events")
    if len(set(payloads)) == len(payloads):
        s.note("each stored once")


BOOK = CaseBook(SPEC, client_budget=40.0)
EXIT_OK = "exit 0"
client_case = BOOK.client


@client_case(
    "pv.C1.1",
    "write-and-read-back",
    "Write events and read them back",
    "§5, §6, §14",
    "Serve normally (with a controller for clients that use one). The client writes its events and reads them back; "
    "it must exit 0 and the store must hold each event once.",
    [expect(PASS, CLIENTS, ["...", "append *", "..."], facts=[EXIT_OK, "stored 20 events", "each stored once"])],
    events=20,
)
async def c1_1(s: Any) -> None:
    await serve_store(s)


def _wrong_host_once(s: Any, c: Conversation, o: ClientObserver, ev: Any) -> bool:
    """The first SetupAppend is answered WrongHost (§8)."""
    from ....pravega.frames import WrongHost

    if isinstance(ev, RequestReceived) and isinstance(ev.command, SetupAppend) and not getattr(s, "_wrong_host_sent", False):
        s._wrong_host_sent = True
        cmd = ev.command
        o.machine.send(WrongHost(request_id=cmd.request_id, segment=cmd.segment, correct_host=""), now=c.now())
        s.note("WrongHost sent")
        return True
    return False


@client_case(
    "pv.C1.2",
    "wrong-host-once",
    "A WrongHost answer to the first SetupAppend",
    "§8, §14",
    "Answer the client's first SetupAppend with WrongHost (the segment moved). The client must set up again (after "
    "asking the controller, if it uses one) and complete: exit 0, each event stored once.",
    [
        expect(
            PASS,
            CLIENTS,
            ["...", "SetupAppend", "...", "SetupAppend", "...", "append *", "..."],
            facts=["WrongHost sent", EXIT_OK, "each stored once"],
        )
    ],
    events=10,
)
async def c1_2(s: Any) -> None:
    await serve_store(s, _wrong_host_once)


def _reset_before_first_ack(s: Any, c: Conversation, o: ClientObserver, ev: Any) -> bool:
    """The first append is stored, then the connection is reset before its DataAppended."""
    if isinstance(ev, Append) and not getattr(s, "_reset_sent", False):
        s._reset_sent = True
        ctx = store_of(s)
        out = ctx.server.service.append(ev, now=ctx.server._time_ms())
        if out.kind == "ok":
            ctx.stored.append((ev.segment, ev.event_number, ev.event_count))
            s.note(f"stored events up to {ev.event_number}, then reset before the ack")
        s.pending_reset = c
        return True
    return False


@client_case(
    "pv.C1.3",
    "reset-between-append-and-ack",
    "The connection is reset after an append is stored, before its ack",
    "§5.4, §5.6, §14",
    "Store the client's first append, then reset the connection before its DataAppended. The client must reconnect, "
    "SetupAppend again, take AppendSetup.lastEventNumber as acknowledged and resend only the events the store lacks: "
    "exit 0, each event stored exactly once.",
    [
        expect(
            PASS,
            CLIENTS,
            ["...", "append *", "...", "SetupAppend", "..."],
            facts=["stored events up to *", EXIT_OK, "stored 12 events", "each stored once"],
        )
    ],
    events=12,
)
async def c1_3(s: Any) -> None:
    s.pending_reset = None

    def hook(s: Any, c: Conversation, o: ClientObserver, ev: Any) -> bool:
        return _reset_before_first_ack(s, c, o, ev)

    async def resetter() -> None:
        while not s.exited.is_set():
            c = s.pending_reset
            if c is not None:
                s.pending_reset = None
                await c.close("RST")
            await trio.sleep(0.01)

    async with trio.open_nursery() as n:
        n.start_soon(resetter)
        await serve_store(s, hook)
        n.cancel_scope.cancel()


def _sealed_on_append(s: Any, c: Conversation, o: ClientObserver, ev: Any) -> bool:
    """The segment is sealed when the first append arrives: every append is refused SegmentIsSealed (§8)."""
    if isinstance(ev, Append):
        ctx = store_of(s)
        if not getattr(s, "_sealed", False):
            s._sealed = True
            ctx.server.store.seal(ev.segment)
            s.note("segment sealed at the first append")
        return False
    return False


@client_case(
    "pv.C1.4",
    "sealed-at-first-append",
    "The segment is sealed under the writer",
    "§5.4, §8, §14",
    "Seal the segment when the first append arrives (the store answers SegmentIsSealed; the stream has no successor). "
    "The client cannot write its events and must not claim it did: any exit status but 0 (or still running at the "
    "budget's end).",
    [expect(PASS, CLIENTS, ["...", "append *", "..."], facts=["segment sealed at the first append", "exit [!0]*"])],
    events=5,
    budget=25.0,
)
async def c1_4(s: Any) -> None:
    await serve_store(s, _sealed_on_append)


def _old_hello(s: Any, c: Conversation, o: ClientObserver, ev: Any) -> bool:
    """Every Hello is answered Hello(4, 2): a store too old for any v5+ client (§7.1)."""
    if isinstance(ev, HelloReceived):
        o.machine.data_to_send()  # the machine's own Hello(17, 5) is dropped
        o.machine.send(Hello(high_version=4, low_version=2), now=c.now())
        s.note("Hello(4, 2) sent")
        return True
    return False


@client_case(
    "pv.C1.5",
    "incompatible-store-hello",
    "A store whose Hello has no version in common",
    "§7.1, §14",
    "Answer the client's Hello with Hello(4, 2). The Rust client and refwire's refuse such a store: nothing may be "
    "appended and the client must not exit 0. (The Java client only logs it: INFO under java-client.)",
    [
        expect(
            PASS, "strict rust-client", ["connect", "Hello", "..."], facts=["Hello(4, 2) sent", "stored 0 events", "exit [!0]*"]
        ),
        expect(
            INFO, "java-client", ["Hello", "..."], facts=["Hello(4, 2) sent"], note="the Java client only logs a version mismatch"
        ),
    ],
    events=5,
    budget=20.0,
)
async def c1_5(s: Any) -> None:
    await serve_store(s, _old_hello)
