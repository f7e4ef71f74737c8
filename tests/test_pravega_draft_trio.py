"""Draft dialect over trio loopback (specs/pravega-draft-2017/README.md §6-§9):
writer and reader with the directory log surviving a restart, hostile inputs
from a raw socket closing only their connection, and the CLI as subprocesses.
Every test is bounded by ``trio.fail_after`` and stops what it started."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing
from pravega_draft_harness import level

from refwire.pravega.client import parse_events
from refwire.pravega.draft2017.client import DraftConnection, DraftReader, DraftWriter, DraftWriterConfig
from refwire.pravega.draft2017.frames import (
    BeginAppendBlock,
    EndAppendBlock,
    KeepAlive,
    PartialMessage,
    ReadSegment,
    SetupAppend,
)
from refwire.pravega.draft2017.server import DraftFrontend
from refwire.pravega.server import SegmentStoreServer

LOCAL = "127.0.0.1"
SEG = "draft/stream/0.#epoch.0"
A = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


@asynccontextmanager
async def running(server: SegmentStoreServer) -> AsyncIterator[tuple[str, int, DraftFrontend]]:
    front = DraftFrontend(server)
    listeners = await trio.open_tcp_listeners(0, host=LOCAL)
    host, port = listeners[0].socket.getsockname()[:2]
    async with trio.open_nursery() as nursery:
        await nursery.start(server.sync_forever)
        await nursery.start(front.serve, listeners)
        try:
            yield str(host), int(port), front
        finally:
            with trio.fail_after(10):
                await front.shutdown(grace=1.0)
            nursery.cancel_scope.cancel()


def payloads(n: int, tag: str = "e") -> list[bytes]:
    return [f"{tag}{i:04d}".encode() * (1 + i % 5) for i in range(n)]


def stored(server: SegmentStoreServer) -> list[bytes]:
    data = bytes(server.store.segments[SEG].data)
    events, used = parse_events(data)
    assert used == len(data)
    return [p for _o, p in events]


async def read_all(host: str, port: int) -> bytes:
    conn = DraftConnection(await trio.open_tcp_stream(host, port))
    out = b""
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        reader = DraftReader(conn, SEG, read_size=100)
        while True:
            r = await reader.read(timeout=5)
            out += r.data
            if r.at_tail or r.end_of_segment:
                break
        nursery.cancel_scope.cancel()
    return out


async def test_writer_and_reader_with_the_directory_log_surviving_a_restart(tmp_path: Path) -> None:
    with trio.fail_after(20):
        server = SegmentStoreServer.open_dir(tmp_path)
        server.store.create(SEG)
        evs = payloads(300)
        async with running(server) as (host, port, front):
            writer = DraftWriter(host, port, SEG, connection_id=A)
            level1 = await writer.write(evs)
            assert level1 == len(server.store.segments[SEG].data)
            assert await read_all(host, port) == bytes(server.store.segments[SEG].data)
            assert front.stats["blocks"] >= 1
        server2 = SegmentStoreServer.open_dir(tmp_path)
        assert stored(server2) == evs
        assert level(server2.store, SEG, A) == level1
        assert server2.store.writer_attribute(SEG, A) != level1  # the level is not the current dialect's attribute
        async with running(server2) as (host, port, _front):
            writer2 = DraftWriter(host, port, SEG, connection_id=A)
            writer2.session.next_offset = writer2.session.acked = level1  # the same ConnectionId continues
            level2 = await writer2.write([b"after-restart"])
            assert level2 == level1 + 8 + len(b"after-restart")
        assert stored(server2) == [*evs, b"after-restart"]


async def test_many_blocks_pass_the_flow_control_pause(tmp_path: Path) -> None:
    """More than 128 KiB of blocks in flight: reading pauses and resumes (§6.5)."""
    with trio.fail_after(20):
        server = SegmentStoreServer.open_dir(tmp_path)
        server.store.create(SEG)
        evs = [bytes([i % 251]) * 4000 for i in range(200)]  # ~800 KB
        async with running(server) as (host, port, front):
            await DraftWriter(host, port, SEG, connection_id=A).write(evs)
            assert front.stats["pauses"] >= 1
        assert stored(server) == evs


async def test_flow_control_resumes_without_a_log() -> None:
    """A store without a log is durable at once: its DataAppended leave at once and
    still release the flow-control pause (§6.5); one connection, no ack timeout."""
    with trio.fail_after(20):
        server = SegmentStoreServer()
        server.store.create(SEG)
        evs = [bytes([i % 251]) * 100 for i in range(2000)]  # 4 blocks of 500 events, 54 KB each
        async with running(server) as (host, port, _front):
            writer = DraftWriter(host, port, SEG, connection_id=A, config=DraftWriterConfig(ack_timeout=5.0))
            await writer.write(evs)
            assert writer.stats["connections"] == 1 and writer.stats["reconnects"] == 0
        assert stored(server) == evs


HOSTILE = {
    "unknown-code": b"\x00\x00\x00\x08\x00\x00\x00\x00",
    "interleaved-partials": PartialMessage(part=0, data=b"\x00\x00").encode() * 2,
    "offset-lies": BeginAppendBlock(connection_id=A, connection_offset=5, length=0).encode(),
    "block-length-does-not-add-up": BeginAppendBlock(connection_id=A, connection_offset=0, length=13).encode()
    + b"\x00\x00\x00\x00\x00\x00\x00\x05hello"
    + EndAppendBlock(connection_id=A, connection_offset=12, block_length=12).encode(),
    "read-past-end": ReadSegment(segment=SEG, offset=10_000, suggested_length=10).encode(),
    "missing-segment": SetupAppend(connection_id=A, segment="nope").encode(),
    "trailing-bytes": bytes.fromhex("000000010000001600112233445566778899aabbccddeeff000373656700"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
async def test_hostile_input_closes_only_that_connection(name: str) -> None:
    with trio.fail_after(10):
        server = SegmentStoreServer()
        server.store.create(SEG)
        async with running(server) as (host, port, front):
            writer = DraftWriter(host, port, SEG, connection_id=A, config=DraftWriterConfig(max_attempts=1))
            await writer.write([b"before"])
            before = bytes(server.store.segments[SEG].data)
            good = await trio.open_tcp_stream(host, port)
            await good.send_all(KeepAlive(data=b"ok").encode())
            assert await good.receive_some(100) == KeepAlive(data=b"ok").encode()
            bad = await trio.open_tcp_stream(host, port)
            await bad.send_all(SetupAppend(connection_id=A, segment=SEG).encode() + HOSTILE[name])
            got = b""
            while True:
                try:
                    data = await bad.receive_some(65536)
                except trio.BrokenResourceError:
                    break
                if not data:
                    break
                got += data
            await trio.aclose_forcefully(bad)
            assert front.errors, "closed without a recorded reason"
            assert front.errors[-1].field is not None
            assert bytes(server.store.segments[SEG].data) == before
            await good.send_all(KeepAlive(data=b"still").encode())
            assert await good.receive_some(100) == KeepAlive(data=b"still").encode()
            await trio.aclose_forcefully(good)
            await DraftWriter(host, port, SEG, connection_id=uuid.uuid4()).write([b"after"])
            assert stored(server) == [b"before", b"after"]


# --------------------------------------------------------------------------- CLI


def _refwire() -> list[str]:
    exe = shutil.which("refwire", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "refwire.cli"]


async def _run(args: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(30):
        return await trio.run_process([*_refwire(), *args], stdin=stdin, capture_stdout=True, capture_stderr=True, check=False)


async def test_cli_serve_send_read_draft() -> None:
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            proc: trio.Process = await nursery.start(
                lambda task_status: trio.run_process(
                    [
                        *_refwire(),
                        "serve",
                        "pravega",
                        "--listen",
                        f"{LOCAL}:0",
                        "--no-controller",
                        "--draft-listen",
                        f"{LOCAL}:0",
                    ],
                    stderr=subprocess.PIPE,
                    check=False,
                    task_status=task_status,
                )
            )
            try:
                assert proc.stderr is not None
                buf, roles = b"", {}
                while len(roles) < 2:
                    chunk = await proc.stderr.receive_some(4096)
                    assert chunk, f"serve exited early: {buf!r}"
                    buf += chunk
                    for m in re.finditer(rb"listening on (\S+):(\d+) \((segment store(?:, draft-2017 dialect)?)\)", buf):
                        roles[m.group(3).decode()] = f"{m.group(1).decode()}:{int(m.group(2))}"
                current, draft = roles["segment store"], roles["segment store, draft-2017 dialect"]
                created = await _run(["send", "pravega", current, "--segment", SEG, "--create", "--count", "1"])
                assert created.returncode == 0, created.stderr
                sent = await _run(["send", "pravega", draft, "--segment", SEG, "--dialect", "draft-2017", "--count", "40"])
                assert sent.returncode == 0, sent.stderr
                assert b"wrote 40 events" in sent.stderr
                read = await _run(["read", "pravega", draft, "--segment", SEG, "--dialect", "draft-2017"])
                assert read.returncode == 0, read.stderr
                assert read.stdout.split(b"\n")[:-1] == [b"event 0"] + [f"event {i}".encode() for i in range(40)]
                missing = await _run(["read", "pravega", draft, "--segment", "nope", "--dialect", "draft-2017"])
                assert missing.returncode == 1 and b"Traceback" not in missing.stderr
            finally:
                proc.terminate()
                with trio.move_on_after(10):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
                nursery.cancel_scope.cancel()


async def test_client_keepalive_when_quiet_and_gives_up_after_silence(autojump_clock: trio.testing.MockClock) -> None:
    """Spec §8: an empty KeepAlive after 10 s without a reply; closed after 3 min of silence."""
    from refwire.pravega.draft2017.client import DraftConnection

    ours, theirs = trio.testing.memory_stream_pair()
    conn = DraftConnection(ours)
    sent: list[tuple[float, bytes]] = []

    async def silent_server() -> None:
        while data := await theirs.receive_some():
            sent.append((trio.current_time(), bytes(data)))

    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(silent_server)
            await nursery.start(conn.run)
            await conn.closed.wait()
            nursery.cancel_scope.cancel()
    assert trio.current_time() == pytest.approx(180.0)
    assert [round(t) for t, _ in sent][:3] == [10, 20, 30]
    assert {d for _, d in sent} == {bytes.fromhex("0000006400000000")}
