"""refwire.drivers.pump over an in-memory stream, with a toy machine on the
refwire.sansio contract: events in order, writes flushed while the application
holds an event, timers, EOF, reset, write failures, protocol errors, stop."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import trio
import trio.testing

from refwire.drivers import EOF, READ_TIMEOUT, RESET, STOPPED, WRITE_FAILED, WRITE_TIMEOUT, Pump, pump
from refwire.errors import LocalProtocolError, RemoteProtocolError
from refwire.sansio import NEED_DATA, FrameMachine, closed_inside


class Line(FrameMachine):
    """Newline-framed toy: each line is an event; ``send(x)`` writes ``x + b"\\n"``;
    ``ping_every`` seconds of quiet send ``b"ping\\n"``; a line ``bad`` is a
    protocol error."""

    PROTOCOL = "toy"
    TRANSITIONS: ClassVar[dict[Any, Any]] = {}
    ERROR_STATE = "error"
    CLOSED_STATE = "closed"

    def __init__(self, ping_every: float | None = None) -> None:
        super().__init__("open")
        self._buf = bytearray()
        self.ping_every = ping_every
        self.last_out = 0.0
        self.failed_at: float | None = None
        self.lost_at: float | None = None

    def _feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    def _pump(self) -> None:
        while (i := self._buf.find(b"\n")) >= 0:
            line = bytes(self._buf[:i])
            del self._buf[: i + 1]
            if line == b"bad":
                raise LocalProtocolError("bad line", protocol="toy", field="line", offset=0)
            self._events.append(line)

    def _at_eof(self) -> None:
        if self.state == "closed":
            return
        if self._buf:
            raise closed_inside("a line", protocol="toy", offset=0, detail=f"{len(self._buf)} bytes of it")
        self.state = "closed"
        self._events.append(("closed", self._reset))

    def send(self, event: Any, *, now: float) -> None:
        self._out += bytes(event) + b"\n"
        self.last_out = now

    def next_deadline(self) -> float | None:
        return None if self.ping_every is None or self.state != "open" else self.last_out + self.ping_every

    def handle_timer(self, *, now: float) -> None:
        d = self.next_deadline()
        if d is not None and now >= d:
            self.send(b"ping", now=now)
            self._events.append(("pinged", now))

    def send_failed(self, *, now: float) -> None:
        self.failed_at = now
        super().send_failed(now=now)


async def test_echo_until_eof() -> None:
    a, b = trio.testing.memory_stream_pair()
    m = Line()
    seen: list[Any] = []
    p = Pump(b, m, lambda ev: _record(seen, p, ev))
    async with trio.open_nursery() as n:
        n.start_soon(_run_into, p, seen)
        await a.send_all(b"one\ntw")
        await a.send_all(b"o\n")
        got = b""
        while len(got) < 8:
            got += await a.receive_some()
        assert got == b"ONE\nTWO\n"
        await a.send_eof()
    assert seen == [b"one", b"two", ("closed", False), ("ended", EOF)]


async def _record(seen: list[Any], p: Pump, ev: Any) -> None:
    seen.append(ev)
    if isinstance(ev, bytes):
        p.send(ev.upper())


async def _run_into(p: Pump, seen: list[Any]) -> None:
    seen.append(("ended", await p.run()))


async def test_timer_fires_while_application_holds_an_event(autojump_clock: trio.abc.Clock) -> None:
    a, b = trio.testing.memory_stream_pair()
    m = Line(ping_every=1.0)
    release = trio.Event()
    seen: list[Any] = []

    async def on_event(ev: Any) -> None:
        seen.append(ev)
        if ev == b"hold":
            await release.wait()

    async with trio.open_nursery() as n:
        n.start_soon(pump, b, m, on_event)
        await a.send_all(b"hold\n")
        got = b""
        while got.count(b"ping") < 3:
            got += await a.receive_some()
        release.set()
        n.cancel_scope.cancel()
    assert got == b"ping\n" * 3
    # the pings' own events wait for the held one (one deliverer at a time), then all come out in order
    assert seen[0] == b"hold"


async def test_timer_event_delivered_while_reader_waits(autojump_clock: trio.abc.Clock) -> None:
    _a, b = trio.testing.memory_stream_pair()
    m = Line(ping_every=2.0)
    seen: list[Any] = []
    got = trio.Event()

    async def on_event(ev: Any) -> None:
        seen.append(ev)
        got.set()

    async with trio.open_nursery() as n:
        n.start_soon(pump, b, m, on_event)
        await got.wait()
        n.cancel_scope.cancel()
    assert seen == [("pinged", pytest.approx(2.0))]


async def test_send_moves_the_deadline_earlier(autojump_clock: trio.abc.Clock) -> None:
    a, b = trio.testing.memory_stream_pair()
    m = Line(ping_every=None)
    async with trio.open_nursery() as n:
        p = await n.start(pump, b, m, _ignore)
        await trio.sleep(5)
        m.ping_every = 1.0
        m.last_out = trio.current_time()
        p.kick()
        t0 = trio.current_time()
        assert await a.receive_some() == b"ping\n"
        assert trio.current_time() - t0 == pytest.approx(1.0)
        n.cancel_scope.cancel()


async def _ignore(ev: Any) -> None:
    pass


async def test_protocol_error_flushes_then_raises() -> None:
    a, b = trio.testing.memory_stream_pair()
    m = Line()

    async def on_event(ev: Any) -> None:
        p.send(b"reply-" + ev)

    p = Pump(b, m, on_event)
    await a.send_all(b"x\nbad\n")
    with pytest.raises(RemoteProtocolError, match="bad line") as info:
        await p.run()
    assert info.value.field == "line"
    assert p.ended == "protocol-error"
    assert await a.receive_some() == b"reply-x\n"


async def test_eof_inside_a_frame_is_the_shared_error() -> None:
    a, b = trio.testing.memory_stream_pair()
    await a.send_all(b"half")
    await a.send_eof()
    with pytest.raises(RemoteProtocolError, match=r"connection closed inside a line \(4 bytes of it\)") as info:
        await pump(b, Line(), _ignore)
    assert info.value.field == "(eof)"


async def test_reset_tells_the_machine_and_delivers_its_closing_event() -> None:
    a, b = trio.testing.memory_stream_pair()
    seen: list[Any] = []

    async def on_event(ev: Any) -> None:
        seen.append(ev)

    await a.send_all(b"x\n")
    await a.aclose()
    # a closed memory stream reads as EOF; a real reset raises BrokenResourceError
    b.receive_some = _broken  # type: ignore[method-assign]
    assert await pump(b, Line(), on_event) == RESET
    assert seen == [("closed", True)]


async def _broken(max_bytes: int | None = None) -> bytes:
    raise trio.BrokenResourceError("reset")


async def test_write_failure_calls_send_failed_and_ends() -> None:
    a, b = trio.testing.memory_stream_pair()
    m = Line()
    seen: list[Any] = []

    async def on_event(ev: Any) -> None:
        seen.append(ev)
        if isinstance(ev, bytes):
            await a.aclose()
            p.send(b"reply")

    async def broken_send(data: bytes) -> None:
        raise trio.BrokenResourceError("peer gone")

    b.send_all = broken_send  # type: ignore[method-assign]
    p = Pump(b, m, on_event)
    await a.send_all(b"x\n")
    with trio.fail_after(5):
        assert await p.run() == WRITE_FAILED
    assert m.failed_at is not None
    assert seen == [b"x", ("closed", True)]


async def test_write_timeout_is_a_failed_write(autojump_clock: trio.abc.Clock) -> None:
    a, b = trio.testing.memory_stream_pair()
    m = Line()

    async def stuck_send(data: bytes) -> None:
        await trio.sleep_forever()

    b.send_all = stuck_send  # type: ignore[method-assign]

    async def on_event(ev: Any) -> None:
        if isinstance(ev, bytes):
            p.send(b"reply")

    p = Pump(b, m, on_event, write_timeout=3.0)
    await a.send_all(b"x\n")
    assert await p.run() == WRITE_TIMEOUT
    assert m.failed_at == pytest.approx(3.0)


async def test_stop_flushes_and_returns_stopped() -> None:
    a, b = trio.testing.memory_stream_pair()
    m = Line()

    async def on_event(ev: Any) -> None:
        p.send(b"last")
        p.stop()

    p = Pump(b, m, on_event)
    await a.send_all(b"x\n")
    assert await p.run() == STOPPED
    assert await a.receive_some() == b"last\n"


async def test_an_application_error_ends_the_pump_and_is_raised() -> None:
    a, b = trio.testing.memory_stream_pair()

    async def on_event(ev: Any) -> None:
        raise ValueError("application says no")

    await a.send_all(b"x\n")
    with pytest.raises(ValueError, match="application says no"):
        await pump(b, Line(), on_event)


async def test_flush_writes_from_the_calling_task() -> None:
    a, b = trio.testing.memory_stream_pair()
    m = Line()
    async with trio.open_nursery() as n:
        p = await n.start(pump, b, m, _ignore)
        m.send(b"now", now=0.0)
        await p.flush()
        assert m.data_to_send() == b""
        assert await a.receive_some() == b"now\n"
        n.cancel_scope.cancel()


def test_machine_contract_requires_now() -> None:
    m = Line()
    with pytest.raises(TypeError):
        m.receive_data(b"x\n")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        m.handle_timer(1.0)  # type: ignore[misc]
    m.receive_data(b"x\n", now=1.0)
    assert m.next_event() == b"x"
    assert m.next_event() is NEED_DATA


async def test_a_peer_that_does_not_read_stops_the_reading(autojump_clock: trio.testing.MockClock) -> None:
    """Each line asks for a 100 kB answer; the peer sends 200 lines and reads
    nothing: the pump reads no more once more than max_unwritten bytes are
    owed, and reads on once the peer has taken them.  Virtual time: the sleep
    ends only once every task is blocked, so the pump has surely stalled."""
    a, b = trio.testing.lockstep_stream_pair()  # a write completes only as the peer reads
    m = Line()
    seen: list[bytes] = []

    async def answer(ev: Any) -> None:
        if isinstance(ev, bytes):
            seen.append(ev)
            p.send(b"x" * 100_000)

    p = Pump(b, m, answer, max_unwritten=300_000, write_timeout=None)
    with trio.fail_after(10):
        async with trio.open_nursery() as n:
            n.start_soon(p.run)

            async def ask() -> None:
                for i in range(200):
                    await a.send_all(b"line %d\n" % i)

            n.start_soon(ask)
            await trio.sleep(0.5)
            # stalled by the limit (more than max_unwritten owed), not by a slow scheduler
            assert 300_000 < p.unwritten <= 300_000 + 100_000 + 1 and 3 <= len(seen) <= 5, (p.unwritten, len(seen))
            got = 0
            while got < 200 * 100_001:  # now read everything: the pump reads on
                got += len(await a.receive_some(1 << 20))
            while p.unwritten:  # the last send_all returns once the peer took its bytes
                await trio.sleep(0.01)
            assert len(seen) == 200
            await a.aclose()


# -- Pump.run_until: the machine driven from the calling task (a stop-and-wait driver's round trip)


async def test_run_until_writes_then_reads_until_done() -> None:
    a, b = trio.testing.memory_stream_pair()
    m = Line()
    seen: list[Any] = []

    async def on_event(ev: Any) -> None:
        seen.append(ev)

    p = Pump(b, m, on_event)
    m.send(b"ask", now=0.0)
    assert await p.run_until(lambda: True)  # done at once: only the write happens
    assert await a.receive_some() == b"ask\n"
    assert seen == []
    await a.send_all(b"one\ntwo\nthree\n")
    assert await p.run_until(lambda: len(seen) >= 2)
    assert seen == [b"one", b"two", b"three"]  # a read's events are all delivered
    assert p.ended is None
    await a.send_all(b"four\n")
    await a.send_eof()
    assert not await p.run_until(lambda: len(seen) >= 9)  # the connection ended first
    assert seen == [b"one", b"two", b"three", b"four", ("closed", False)]
    assert p.ended == EOF
    assert not await p.run_until(lambda: False)  # ended: returns without reading


async def test_run_until_reset_tells_the_machine() -> None:
    _a, b = trio.testing.memory_stream_pair()
    seen: list[Any] = []

    async def on_event(ev: Any) -> None:
        seen.append(ev)

    b.receive_some = _broken  # type: ignore[method-assign]
    m = Line()
    p = Pump(b, m, on_event)
    assert not await p.run_until(lambda: False)
    assert p.ended == RESET and p.broken and seen == [("closed", True)]


async def test_run_until_runs_the_machine_timer(autojump_clock: trio.abc.Clock) -> None:
    a, b = trio.testing.memory_stream_pair()
    m = Line(ping_every=5.0)
    seen: list[Any] = []

    async def on_event(ev: Any) -> None:
        seen.append(ev)

    p = Pump(b, m, on_event)
    assert await p.run_until(lambda: len(seen) >= 1)
    assert seen == [("pinged", 5.0)] and trio.current_time() == 5.0
    assert await a.receive_some() == b"ping\n"


async def test_run_until_raises_a_protocol_error_after_writing_the_reply() -> None:
    a, b = trio.testing.memory_stream_pair()
    m = Line()

    async def on_event(ev: Any) -> None:
        m.send(b"reply-" + ev, now=0.0)

    p = Pump(b, m, on_event)
    await a.send_all(b"x\nbad\n")
    with pytest.raises(RemoteProtocolError, match="bad line"):
        await p.run_until(lambda: False)
    assert p.ended == "protocol-error"
    assert await a.receive_some() == b"reply-x\n"


def _collector() -> tuple[list[Any], Any]:
    """A list and an ``on_event`` that appends every event to it."""
    seen: list[Any] = []

    async def on_event(ev: Any) -> None:
        seen.append(ev)

    return seen, on_event


@pytest.mark.parametrize("closed_read", ["raises", "eof"])
async def test_run_until_gives_the_connection_up_at_its_bound(autojump_clock: trio.abc.Clock, closed_read: str) -> None:
    a, b = trio.testing.memory_stream_pair()
    if closed_read == "eof":  # a stream whose read, closed under it, ends rather than raising
        real = b.receive_some

        async def eof_when_closed(max_bytes: int | None = None) -> bytes | bytearray:
            try:
                return await real(max_bytes)
            except trio.ClosedResourceError:
                return b""

        b.receive_some = eof_when_closed  # type: ignore[method-assign]
    m = Line()
    seen, on_event = _collector()

    p = Pump(b, m, on_event)
    m.send(b"ask", now=0.0)
    with trio.fail_after(60):  # (virtual time: a bound that never fires fails here)
        assert not await p.run_until(lambda: b"answer" in seen, give_up_at=5.0)
    assert trio.current_time() == 5.0  # not a moment later, and not earlier
    assert p.ended == READ_TIMEOUT and p.broken
    assert seen == [("closed", True)]  # the machine was told connection_lost
    assert await a.receive_some() == b"ask\n"
    assert await a.receive_some() == b""  # the stream was closed
    await trio.testing.wait_all_tasks_blocked()
    assert not p._watching  # the watchdog ended with the connection
    assert not await p.run_until(lambda: False, give_up_at=99.0)  # ended: returns at once
    assert trio.current_time() == 5.0 and not p._watching  # and starts no watchdog


async def test_run_until_bounds_only_the_call_in_progress(autojump_clock: trio.abc.Clock) -> None:
    """The watchdog follows each call's bound, earlier or later than the last one,
    and an idle pump past an old bound is not given up."""
    a, b = trio.testing.memory_stream_pair()
    m = Line()
    seen, on_event = _collector()

    async def answer(at: float, line: bytes) -> None:
        await trio.sleep_until(at)
        await a.send_all(line)

    p = Pump(b, m, on_event)
    with trio.fail_after(1000):  # (virtual time: a bound that never fires fails here)
        await _bounded_calls(p, seen, answer)


async def _bounded_calls(p: Pump, seen: list[Any], answer: Any) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer, 1.0, b"one\n")
        assert await p.run_until(lambda: len(seen) >= 1, give_up_at=100.0)  # the watchdog: asleep until 100
        assert trio.current_time() == 1.0
        await trio.sleep_until(50.0)
        nursery.start_soon(answer, 120.0, b"two\n")
        assert await p.run_until(lambda: len(seen) >= 2, give_up_at=150.0)  # it wakes at 100 mid-call, moves to 150
        assert trio.current_time() == 120.0 and p.ended is None
        await trio.sleep_until(300.0)  # idle past that bound: nothing happens
        assert p.ended is None
        nursery.start_soon(answer, 310.0, b"three\n")
        assert await p.run_until(lambda: len(seen) >= 3, give_up_at=320.0)
        assert trio.current_time() == 310.0 and p.ended is None
        nursery.start_soon(answer, 400.0, b"late\n")
        assert not await p.run_until(lambda: b"late" in seen, give_up_at=312.0)  # earlier than its wake-up at 320
        assert trio.current_time() == 312.0 and p.ended == READ_TIMEOUT
        assert seen == [b"one", b"two", b"three", ("closed", True)]
        nursery.cancel_scope.cancel()


async def test_run_until_bound_later_than_the_watchdogs_wake_up(autojump_clock: trio.abc.Clock) -> None:
    """The watchdog, asleep until an old bound, wakes during a call with a later
    one and gives up at the later one (not at its wake-up, and not never)."""
    a, b = trio.testing.memory_stream_pair()
    seen, on_event = _collector()

    p = Pump(b, Line(), on_event)
    await a.send_all(b"one\n")
    assert await p.run_until(lambda: bool(seen), give_up_at=100.0)
    await trio.sleep_until(50.0)
    with trio.fail_after(1000):  # (virtual time: a bound that never fires fails here)
        assert not await p.run_until(lambda: b"two" in seen, give_up_at=150.0)
    assert trio.current_time() == 150.0 and p.ended == READ_TIMEOUT


async def test_one_watchdog_per_pump_even_before_it_first_runs(autojump_clock: trio.abc.Clock) -> None:
    _a, b = trio.testing.memory_stream_pair()
    p = Pump(b, Line(), _ignore)
    assert await p.run_until(lambda: True, give_up_at=10.0)  # done at once: the watchdog has not run yet
    assert await p.run_until(lambda: True, give_up_at=5.0)  # an earlier bound for the one starting
    await trio.testing.wait_all_tasks_blocked()
    names = [t.name for n in trio.lowlevel.current_root_task().child_nurseries for t in n.child_tasks]
    assert sum("refwire pump watchdog" in name for name in names) == 1
    with trio.fail_after(60):  # (virtual time)
        assert not await p.run_until(lambda: False, give_up_at=5.0)
    assert trio.current_time() == 5.0 and p.ended == READ_TIMEOUT


async def test_run_until_bound_fails_a_write_the_peer_never_takes(autojump_clock: trio.abc.Clock) -> None:
    a, b = trio.testing.lockstep_stream_pair()  # a write waits until the peer reads: it never does
    m = Line()
    p = Pump(b, m, _ignore)
    m.send(b"stuck", now=0.0)
    with trio.fail_after(60):  # (virtual time)
        assert not await p.run_until(lambda: False, give_up_at=3.0)
    assert trio.current_time() == 3.0
    assert p.ended == READ_TIMEOUT and p.broken and m.failed_at == 3.0  # the machine was told send_failed
    await a.aclose()


async def test_stop_ends_the_watchdog(autojump_clock: trio.abc.Clock) -> None:
    a, b = trio.testing.memory_stream_pair()
    m = Line()
    seen, on_event = _collector()

    p = Pump(b, m, on_event)
    await a.send_all(b"x\n")
    assert await p.run_until(lambda: bool(seen), give_up_at=1000.0)
    await trio.testing.wait_all_tasks_blocked()
    assert p._watching  # asleep until 1000
    p.stop()
    await trio.testing.wait_all_tasks_blocked()
    assert not p._watching and trio.current_time() == 0.0  # ended at once, not at its wake-up
    assert p.ended == STOPPED


async def test_run_until_over_a_socket_writes_inline_and_falls_back_when_the_kernel_is_full() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    with trio.fail_after(20):
        async with listener, await trio.open_tcp_stream("127.0.0.1", port) as client:
            server = await listener.accept()
            async with server:
                m = Line()
                seen: list[Any] = []

                async def on_event(ev: Any) -> None:
                    seen.append(ev)

                p = Pump(client, m, on_event)
                sent_all: list[int] = []
                real_send_all = client.send_all

                async def counting_send_all(data: Any) -> None:
                    sent_all.append(len(data))
                    await real_send_all(data)

                client.send_all = counting_send_all  # type: ignore[method-assign]
                m.send(b"small", now=0.0)
                assert await p.run_until(lambda: True)
                assert await server.receive_some() == b"small\n"
                assert sent_all == []  # the kernel took it all inline
                m.send(b"kicked", now=0.0)
                p.kick()  # queued on the pump before the call: written inline all the same
                assert await p.run_until(lambda: True)
                assert await server.receive_some() == b"kicked\n"
                assert sent_all == [] and p.unwritten == 0
                big = b"x" * (8 * 1024 * 1024)  # more than the kernel takes at once: the rest goes by send_all
                m.send(big, now=0.0)

                async def drain() -> bytes:
                    got = bytearray()
                    while len(got) < len(big) + 1:
                        got += await server.receive_some(1 << 20)
                    return bytes(got)

                async with trio.open_nursery() as nursery:
                    result: list[bytes] = []

                    async def reader() -> None:
                        result.append(await drain())

                    nursery.start_soon(reader)
                    assert await p.run_until(lambda: True)
                assert result == [big + b"\n"] and p.unwritten == 0
                assert len(sent_all) == 1 and 0 < sent_all[0] < len(big)  # the rest, after what the kernel took
                await server.send_all(b"answer\n")
                assert await p.run_until(lambda: bool(seen))
                assert seen == [b"answer"]
