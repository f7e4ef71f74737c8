"""Logging a hostile peer cannot turn against the server: per-kind rate limits
(a flood of bad connections costs a line, not a line each) and a stderr handler
that never blocks its caller when nobody reads the stream."""

from __future__ import annotations

import io
import logging
import threading
import time
from typing import Any

import pytest
import trio

from refwire.logs import BackgroundStderr, limited

pytestmark = pytest.mark.timeout(30)


def test_one_line_per_kind_per_interval_then_the_count(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("refwire.test-logs")
    now = [100.0]
    with caplog.at_level(logging.WARNING, logger="refwire.test-logs"):
        logged = [limited(log, "bad", "bad frame %d", i, clock=lambda: now[0]) for i in range(500)]
        assert logged.count(True) == 1 and logged[0]
        limited(log, "other", "another kind", clock=lambda: now[0])  # kinds are counted apart
        now[0] += 9.999
        assert not limited(log, "bad", "bad frame %d", 500, clock=lambda: now[0])
        now[0] += 0.001
        assert limited(log, "bad", "bad frame %d", 501, clock=lambda: now[0])
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["bad frame 0", "another kind", "bad frame 501 (and 500 more like it in the last 10s)"]


def test_a_disabled_level_costs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("refwire.test-logs-quiet")
    with caplog.at_level(logging.WARNING, logger="refwire.test-logs-quiet"):
        assert not limited(log, "x", "debug only", level=logging.DEBUG)
    assert not caplog.records


class _Stuck(io.StringIO):
    """A stream nobody reads: every write blocks until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def write(self, s: str) -> int:
        self.release.wait()
        return super().write(s)


def test_a_stream_nobody_reads_never_blocks_the_logger() -> None:
    stream = _Stuck()
    handler = BackgroundStderr(stream, capacity=100)
    log = logging.getLogger("refwire.test-logs-stuck")
    log.addHandler(handler)
    log.propagate = False
    try:
        t0 = time.monotonic()
        for i in range(20_000):
            log.warning("line %d", i)
        assert time.monotonic() - t0 < 5.0  # the caller never waited for the stream
        assert handler.dropped >= 20_000 - 101
        stream.release.set()  # someone reads again: what was queued goes out, and how much was dropped
        handler.close(timeout=5.0)
        text = stream.getvalue()
        assert "line 0\n" in text and "log line(s) dropped: the log was not being read" in text
    finally:
        log.removeHandler(handler)
        log.propagate = True


async def test_a_flood_of_hostile_connections_is_a_few_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    """300 connections that each send garbage to the Lumberjack server: each is
    closed with a protocol error, and the log holds one such line, not 300."""
    from refwire.lumberjack.server import LumberjackServer

    async def handler(batch: Any) -> None:
        pass

    server = LumberjackServer(handler)
    with caplog.at_level(logging.INFO), trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            await nursery.start(server.serve, listeners)
            port = listeners[0].socket.getsockname()[1]

            async def hostile() -> None:
                s = await trio.open_tcp_stream("127.0.0.1", port)
                await s.send_all(b"3Xgarbage")
                while await s.receive_some(100):
                    pass
                await s.aclose()

            async with trio.open_nursery() as flood:
                for _ in range(300):
                    flood.start_soon(hostile)
            assert server.stats["protocol_errors"] == 300
            await server.shutdown(grace=1.0)
    lines = [r.getMessage() for r in caplog.records if "lumberjack: connection" in r.getMessage() and "closing" in r.getMessage()]
    assert 1 <= len(lines) <= 2, lines
