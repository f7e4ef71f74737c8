"""The Pravega segment store and clients on trio over loopback
(specs/pravega/README.md §5-§8): writers in both dialects, reconnects without
duplicates, restarts from the directory log, tail reads, hostile inputs that
close only their own connection, token checks, and the ``refwire`` CLI.

Every server listens on 127.0.0.1 port 0, every test runs under
``trio.fail_after`` and stops what it started."""

from __future__ import annotations

import random
import re
import shutil
import struct
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from streams import PassThrough
from support.pravega_trio import LOCAL, SEG, RawClient, W, running, setup_writer

from refwire.pravega.client import (
    EventWriter,
    PravegaConnection,
    SegmentReader,
    WriterConfig,
    create_segment,
    parse_events,
    seal_segment,
    segment_info,
)
from refwire.pravega.errors import RequestFailed, WriteFailed
from refwire.pravega.frames import (
    NULL_VALUE,
    AppendBlock,
    AppendBlockEnd,
    AppendSetup,
    AuthTokenCheckFailed,
    CommandDecoder,
    DataAppended,
    Hello,
    KeepAlive,
    ReadSegment,
    SegmentRead,
    SetupAppend,
    encode_event,
)
from refwire.pravega.server import SegmentStoreServer, ServerConfig


def payloads(n: int, tag: str = "e") -> list[bytes]:
    return [f"{tag}{i:05d}".encode() * (1 + i % 7) for i in range(n)]


def stored_events(server: SegmentStoreServer, segment: str = SEG) -> list[bytes]:
    data = bytes(server.store.segments[segment].data)
    events, used = parse_events(data)
    assert used == len(data)
    return [p for _o, p in events]


# --------------------------------------------------------------------------- writers


@pytest.mark.parametrize("style", ["rust", "java"])
async def test_event_writer_many_events_memory_store(style: str) -> None:
    server = SegmentStoreServer()
    with trio.fail_after(20):
        async with running(server) as (host, port):
            assert await create_segment(host, port, SEG) is True
            assert await create_segment(host, port, SEG) is False
            writer = EventWriter(host, port, SEG, config=WriterConfig(style=style))  # type: ignore[arg-type]
            if style == "java":
                writer.session.java_block_sizes = [50, 200, 13, 1000]
            evs = payloads(600)
            await writer.write(evs[:300])
            await writer.write(evs[300:])
            assert stored_events(server) == evs
            # read them back through SegmentReader, in small reads so events cross read boundaries
            conn = await PravegaConnection.connect(host, port)
            async with trio.open_nursery() as nursery:
                await nursery.start(conn.run)
                reader = SegmentReader(conn, SEG, read_size=97)
                got = [p async for _o, p in reader.events(until_tail=True)]
                assert got == evs
                info = await segment_info(conn, SEG)
                assert info.write_offset == len(server.store.segments[SEG].data) and not info.is_sealed
                nursery.cancel_scope.cancel()


async def test_event_writer_reads_its_own_acks_on_one_connection() -> None:
    server = SegmentStoreServer()
    evs = payloads(50)
    with trio.fail_after(20):
        async with running(server) as (host, port):
            await create_segment(host, port, SEG)
            async with EventWriter(host, port, SEG) as writer:
                for e in evs:  # stop-and-wait: one event per write, each read back by the writing task
                    await writer.write([e])
                assert writer.stats["connections"] == 1 and writer.stats["acked"] == 50
            assert stored_events(server) == evs
            plain = EventWriter(host, port, SEG)  # without ``async with``: a connection per flush
            await plain.write([b"x"])
            await plain.write([b"y"])
            assert plain.stats["connections"] == 2
            assert stored_events(server) == [*evs, b"x", b"y"]


async def test_a_cancelled_write_drops_its_connection_and_the_next_stores_each_event_once() -> None:
    server = SegmentStoreServer()
    with trio.fail_after(20):
        async with running(server) as (host, port):
            await create_segment(host, port, SEG)
            async with EventWriter(host, port, SEG) as writer:
                await writer.write([b"first"])
                with trio.move_on_after(0):  # cancelled at its first wait: the append is already sent
                    await writer.write([b"second"])
                assert writer._link is None and writer.session.pending  # not acked, connection dropped
                await writer.write([b"third"])
                assert writer.stats["connections"] == 2 and not writer.session.pending
            assert stored_events(server) == [b"first", b"second", b"third"]


async def test_directory_store_survives_a_restart(tmp_path: Path) -> None:
    evs = payloads(120)
    with trio.fail_after(20):
        server = SegmentStoreServer.open_dir(tmp_path)
        async with running(server) as (host, port):
            await create_segment(host, port, SEG)
            writer = EventWriter(host, port, SEG, writer_id=W)
            await writer.write(evs)
        server2 = SegmentStoreServer.open_dir(tmp_path)
        assert stored_events(server2) == evs
        async with running(server2) as (host, port):
            raw = await RawClient.connect(host, port)
            setup = await setup_writer(raw)
            assert setup.last_event_number == 120
            await raw.aclose()
            # the same writer continues after the restart, numbering on
            writer2 = EventWriter(host, port, SEG, writer_id=W)
            writer2.session.next_number = 121
            await writer2.write([b"after-restart"])
            conn = await PravegaConnection.connect(host, port)
            async with trio.open_nursery() as nursery:
                await nursery.start(conn.run)
                got = [p async for _o, p in SegmentReader(conn, SEG).events(until_tail=True)]
                nursery.cancel_scope.cancel()
        assert got == [*evs, b"after-restart"]


class CutStream(PassThrough):
    """Client stream that sends only ``budget`` bytes, then breaks (mid-frame)."""

    def __init__(self, inner: trio.abc.Stream, budget: int) -> None:
        super().__init__(inner)
        self.budget = budget

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if len(data) > self.budget:
            if self.budget:
                await self.inner.send_all(bytes(data[: self.budget]))
            self.budget = 0
            await trio.aclose_forcefully(self.inner)
            raise trio.BrokenResourceError("cut")
        self.budget -= len(data)
        await self.inner.send_all(data)


@pytest.mark.parametrize("style", ["rust", "java"])
async def test_reconnect_after_a_connection_breaks_mid_stream_stores_no_duplicates(style: str) -> None:
    server = SegmentStoreServer()
    budgets = iter([300, 1234, 77, 5000, 40])
    with trio.fail_after(20):
        async with running(server) as (host, port):
            await create_segment(host, port, SEG)

            async def connect() -> trio.abc.Stream:
                stream = await trio.open_tcp_stream(host, port)
                budget = next(budgets, None)
                return stream if budget is None else CutStream(stream, budget)

            writer = EventWriter(
                host,
                port,
                SEG,
                config=WriterConfig(style=style, backoff=(0.001, 0.01)),  # type: ignore[arg-type]
                connect=connect,
            )
            if style == "java":
                writer.session.java_block_sizes = [40, 90]
            evs = payloads(200)
            await writer.write(evs)
            assert writer.stats["reconnects"] >= 5
            assert stored_events(server) == evs
            assert server.stats["protocol_errors"] >= 1  # the cut frames were seen as truncated


# --------------------------------------------------------------------------- reads at the tail (§6)


async def test_parked_read_is_woken_by_an_append() -> None:
    server = SegmentStoreServer()
    with trio.fail_after(10):
        async with running(server) as (host, port):
            await create_segment(host, port, SEG)
            conn = await PravegaConnection.connect(host, port)
            async with trio.open_nursery() as nursery:
                await nursery.start(conn.run)
                reader = SegmentReader(conn, SEG)
                result: list[SegmentRead] = []

                async def read() -> None:
                    result.append(await reader.read())

                nursery.start_soon(read)
                while server.stats["reads"] < 1:  # the store has the read (and, nothing stored yet, parks it)
                    await trio.sleep(0.01)
                assert not result  # parked
                await EventWriter(host, port, SEG).write([b"wake"])
                while not result:
                    await trio.sleep(0.01)
                r = result[0]
                assert r.offset == 0 and r.at_tail and not r.end_of_segment and r.data == encode_event(b"wake")
                nursery.cancel_scope.cancel()


async def test_tail_wait_gives_an_empty_at_tail_read() -> None:
    server = SegmentStoreServer(config=ServerConfig(tail_wait=0.2))
    with trio.fail_after(10):
        async with running(server) as (host, port):
            await create_segment(host, port, SEG)
            conn = await PravegaConnection.connect(host, port)
            async with trio.open_nursery() as nursery:
                await nursery.start(conn.run)
                t0 = trio.current_time()
                r = await SegmentReader(conn, SEG).read()
                assert trio.current_time() - t0 >= 0.15
                assert (r.offset, r.at_tail, r.end_of_segment, r.data) == (0, True, False, b"")
                nursery.cancel_scope.cancel()


async def test_seal_while_parked_gives_segment_is_sealed() -> None:
    server = SegmentStoreServer()
    with trio.fail_after(10):
        async with running(server) as (host, port):
            await create_segment(host, port, SEG)
            await EventWriter(host, port, SEG).write([b"one"])
            raw = await RawClient.connect(host, port)
            await raw.send(Hello().encode() + ReadSegment(segment=SEG, offset=11, suggested_length=100, request_id=42).encode())
            assert isinstance(await raw.reply(), Hello)
            while server.stats["reads"] < 1:  # the read is parked at the tail before the seal
                await trio.sleep(0.01)
            await seal_segment(host, port, SEG)
            sealed = await raw.reply()
            assert type(sealed).__name__ == "SegmentIsSealed"
            assert (sealed.request_id, sealed.segment, sealed.offset) == (42, SEG, 11)
            await raw.aclose()
            # the client reader maps it to end of segment; a read at the end of a sealed segment is immediate
            conn = await PravegaConnection.connect(host, port)
            async with trio.open_nursery() as nursery:
                await nursery.start(conn.run)
                reader = SegmentReader(conn, SEG)
                assert [p async for _o, p in reader.events()] == [b"one"]
                assert reader.end_of_segment
                nursery.cancel_scope.cancel()


# --------------------------------------------------------------------------- hostile inputs (§1.2, §5.3, §8)

E1 = encode_event(b"hello")


def _abe(data: bytes, last: int, num: int = 1, writer: uuid.UUID = W) -> bytes:
    return AppendBlockEnd(
        writer_id=writer, size_of_whole_events=len(data), data=data, num_events=num, last_event_number=last, request_id=9
    ).encode()


HOSTILE: dict[str, tuple[bool, bytes]] = {
    # name: (needs a setup first, bytes)
    "truncated-frame-then-eof": (False, KeepAlive().encode() + Hello().encode()[:11]),
    "length-past-limit": (False, struct.pack(">ii", 4, 0x7FFFFFFF)),
    "negative-length": (False, struct.pack(">ii", 100, -1)),
    "unknown-type": (False, struct.pack(">ii", 72, 0)),
    "bad-utf8-segment": (
        False,
        bytes.fromhex("0000000100000024000000000000000100112233445566778899aabbccddeeff000873632ff09f9880300000"),
    ),
    "event-across-block-boundary": (True, AppendBlock(writer_id=W, data=E1 + E1[:6]).encode() + _abe(b"", 2, 2)),
    "wrong-writer-id": (
        True,
        # the block end names the writer of the *other* connection (set up there, not here)
        AppendBlock(writer_id=W, data=E1).encode() + _abe(b"", 1, writer=uuid.UUID(int=99)),
    ),
    "append-without-setup": (False, _abe(E1, 1)),
    "event-number-backwards": (True, _abe(E1, 5) + _abe(E1, 3)),
    "top-level-event": (False, E1),
    "num-events-zero": (True, _abe(E1, 1, num=0)),
}


@pytest.mark.parametrize("name", list(HOSTILE))
async def test_hostile_input_closes_only_that_connection(name: str) -> None:
    needs_setup, hostile = HOSTILE[name]
    server = SegmentStoreServer()
    other_writer = uuid.UUID(int=99)
    with trio.fail_after(10):
        async with running(server) as (host, port):
            await create_segment(host, port, SEG)
            good = await RawClient.connect(host, port)
            await setup_writer(good, other_writer)
            await good.send(_abe(E1, 1, writer=other_writer))
            ack = await good.reply()
            assert isinstance(ack, DataAppended) and ack.event_number == 1
            before = bytes(server.store.segments[SEG].data)

            bad = await RawClient.connect(host, port)
            if needs_setup:
                await setup_writer(bad)
            await bad.send(hostile)
            if name == "truncated-frame-then-eof":
                await bad.stream.send_eof()
            assert await bad.closed_by_server()
            await bad.aclose()
            after_bad = bytes(server.store.segments[SEG].data)
            if name == "event-number-backwards":
                assert after_bad == before + E1  # the first append was good and stays
            else:
                assert after_bad == before
            assert server.stats["protocol_errors"] >= 1

            # the other connection still works, its writer continues where it was
            await good.send(KeepAlive().encode() + _abe(E1, 2, writer=other_writer))
            assert await good.reply() == KeepAlive()
            ack2 = await good.reply()
            assert isinstance(ack2, DataAppended) and (ack2.previous_event_number, ack2.event_number) == (1, 2)
            await good.aclose()


# --------------------------------------------------------------------------- tokens (§7.3)


async def test_token_verifier_refuses_with_auth_token_check_failed() -> None:
    def verify(resource: str, token: str, write: bool) -> Any:
        return {"good": "ok", "old": "expired"}.get(token, "invalid")

    server = SegmentStoreServer(config=ServerConfig(verifier=verify))
    with trio.fail_after(10):
        async with running(server) as (host, port):
            server.store.create(SEG)
            raw = await RawClient.connect(host, port)
            await raw.send(SetupAppend(request_id=3, writer_id=W, segment=SEG, delegation_token="bad").encode())
            assert await raw.reply() == AuthTokenCheckFailed(request_id=3, error_code=0)
            # the quirk: a refused read carries the read offset as its requestId (§6)
            await raw.send(
                ReadSegment(segment=SEG, offset=77, suggested_length=10, delegation_token="bad", request_id=4).encode()
            )
            assert await raw.reply() == AuthTokenCheckFailed(request_id=77, error_code=0)
            await raw.send(SetupAppend(request_id=5, writer_id=W, segment=SEG, delegation_token="good").encode())
            setup = await raw.reply()
            assert isinstance(setup, AppendSetup) and setup.last_event_number == NULL_VALUE
            await raw.aclose()
            # an expired token closes the connection after the reply
            raw2 = await RawClient.connect(host, port)
            await raw2.send(SetupAppend(request_id=6, writer_id=W, segment=SEG, delegation_token="old").encode())
            assert await raw2.reply() == AuthTokenCheckFailed(request_id=6, error_code=1)
            assert await raw2.reply() is None
            await raw2.aclose()
            # the writer API surfaces the refusal
            writer = EventWriter(host, port, SEG, config=WriterConfig(token="bad", max_attempts=1))
            with pytest.raises(Exception) as ei:
                await writer.write([b"x"])
            assert isinstance(ei.value, WriteFailed) and isinstance(ei.value.__cause__, RequestFailed)
            assert isinstance(ei.value.__cause__.reply, AuthTokenCheckFailed)


# --------------------------------------------------------------------------- CLI


def _refwire() -> list[str]:
    exe = shutil.which("refwire", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "refwire.cli"]


async def _lines_until(proc: trio.Process, pattern: str, lines: list[str]) -> list[re.Match[str]]:
    """Read the process's stderr until two lines match ``pattern`` (store + controller)."""
    assert proc.stderr is not None
    buf = b""
    found: list[re.Match[str]] = []
    while len(found) < 2:
        chunk = await proc.stderr.receive_some(4096)
        if not chunk:
            raise AssertionError(f"serve exited early: {lines}")
        buf += chunk
        *complete, rest = buf.split(b"\n")
        buf = rest
        for raw in complete:
            line = raw.decode()
            lines.append(line)
            m = re.fullmatch(pattern, line.strip())
            if m:
                found.append(m)
    return found


async def _run(args: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(30):
        return await trio.run_process([*_refwire(), *args], stdin=stdin, capture_stdout=True, capture_stderr=True, check=False)


async def test_cli_serve_send_read() -> None:
    lines: list[str] = []
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            proc: trio.Process = await nursery.start(
                lambda task_status: trio.run_process(
                    [*_refwire(), "serve", "pravega", "--listen", f"{LOCAL}:0", "--controller", f"{LOCAL}:0"],
                    stderr=subprocess.PIPE,
                    check=False,
                    task_status=task_status,
                )
            )
            try:
                found = await _lines_until(proc, r"listening on (\S+):(\d+) \((segment store|controller)\)", lines)
                roles = {m.group(3): (m.group(1), int(m.group(2))) for m in found}
                assert set(roles) == {"segment store", "controller"}
                assert roles["segment store"][1] != roles["controller"][1]
                host, port = roles["segment store"]
                addr = f"{host}:{port}"
                sent = await _run(["send", "pravega", addr, "--segment", SEG, "--create", "--count", "50", "--style", "java"])
                assert sent.returncode == 0, sent.stderr
                assert b"wrote 50 events, all acked" in sent.stderr
                sent2 = await _run(["send", "pravega", addr, "--segment", SEG], stdin=b"line one\nline two\n")
                assert sent2.returncode == 0, sent2.stderr
                read = await _run(["read", "pravega", addr, "--segment", SEG])
                assert read.returncode == 0, read.stderr
                assert read.stdout.split(b"\n")[:-1] == [f"event {i}".encode() for i in range(50)] + [b"line one", b"line two"]
                assert b"read 52 events" in read.stderr
                missing = await _run(["read", "pravega", addr, "--segment", "sc/st/9.#epoch.0"])
                assert missing.returncode == 1 and b"NoSuchSegment" in missing.stderr
                assert b"Traceback" not in missing.stderr
            finally:
                proc.terminate()
                with trio.move_on_after(10):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
                nursery.cancel_scope.cancel()


async def test_writer_reports_a_missing_segment() -> None:
    server = SegmentStoreServer()
    with trio.fail_after(10):
        async with running(server) as (host, port):
            writer = EventWriter(host, port, "sc/st/404.#epoch.0")
            with pytest.raises(Exception, match="does not exist"):
                await writer.write([b"x"])


# --------------------------------------------------------------------------- the writer's ack timeout


class AckingStore:
    """A store over memory streams (``EventWriter(connect=store.connect)``): answers
    Hello and SetupAppend, and acks each AppendBlockEnd after ``delay`` seconds of
    the trio clock, or never (``delay=None``).  ``closed_at`` has the clock time
    each connection was closed by the writer."""

    def __init__(self, nursery: trio.Nursery, delay: float | None) -> None:
        self.nursery = nursery
        self.delay = delay
        self.closed_at: list[float] = []
        self.acked = 0

    async def connect(self) -> trio.abc.Stream:
        client, server = trio.testing.memory_stream_pair()
        self.nursery.start_soon(self._serve, server)
        return client

    async def _serve(self, stream: trio.abc.Stream) -> None:
        dec = CommandDecoder(allow_inner=True)
        last = NULL_VALUE
        while True:
            data = await stream.receive_some(65536)
            if not data:
                self.closed_at.append(trio.current_time())
                return
            dec.feed(data)
            for cmd in dec.commands():
                if isinstance(cmd, Hello):
                    await stream.send_all(Hello().encode())
                elif isinstance(cmd, SetupAppend):
                    setup = AppendSetup(request_id=cmd.request_id, segment=cmd.segment, writer_id=cmd.writer_id, last_event_number=last)
                    await stream.send_all(setup.encode())
                elif isinstance(cmd, AppendBlockEnd) and self.delay is not None:
                    await trio.sleep(self.delay)
                    ack = DataAppended(
                        writer_id=cmd.writer_id,
                        event_number=cmd.last_event_number,
                        previous_event_number=last,
                        request_id=cmd.request_id,
                        current_segment_write_offset=0,
                    )
                    last = cmd.last_event_number
                    self.acked += 1
                    await stream.send_all(ack.encode())


async def test_writer_gives_a_connection_up_at_its_ack_timeout(autojump_clock: trio.abc.Clock) -> None:
    """No ack within ack_timeout: the connection is given up at that moment (the
    pump's watchdog, not a cancel scope per ack), and the writer reconnects."""
    async with trio.open_nursery() as nursery:
        store = AckingStore(nursery, delay=None)
        cfg = WriterConfig(ack_timeout=2.0, max_attempts=2, backoff=(0.25, 0.25))
        writer = EventWriter(LOCAL, 1, SEG, config=cfg, connect=store.connect, rng=random.Random(0))
        with pytest.raises(WriteFailed, match=r"gave up after 2 failed attempts: no reply from the segment store in 2 s; connection given up") as info:
            with trio.fail_after(100):  # (virtual time: a timeout that never fires fails here)
                async with writer:
                    await writer.write([b"never acked"])
        assert isinstance(info.value.__cause__, trio.TooSlowError)
        assert writer.stats["connections"] == 2
        await trio.testing.wait_all_tasks_blocked()
        first, second = store.closed_at
        assert first == 2.0  # the bound, exactly
        assert 2.0 + 0.125 <= second - 2.0 <= 2.0 + 0.375  # a jittered backoff of 0.25 s, then the next bound
        nursery.cancel_scope.cancel()


async def test_writer_ack_timeout_bounds_each_wait_not_the_connection(autojump_clock: trio.abc.Clock) -> None:
    """Acks slower than nothing but within ack_timeout, writes far apart: one connection, no timeout."""
    async with trio.open_nursery() as nursery:
        store = AckingStore(nursery, delay=1.5)
        writer = EventWriter(LOCAL, 1, SEG, config=WriterConfig(ack_timeout=2.0), connect=store.connect)
        with trio.fail_after(100):  # (virtual time)
            async with writer:
                for i in range(3):
                    await writer.write([b"event %d" % i])
                    await trio.sleep(10.0)  # idle far past every bound so far
        assert writer.stats == {"connections": 1, "reconnects": 0, "acked": 3, "protocol_errors": 0}
        assert store.acked == 3 and trio.current_time() == 3 * 11.5
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
