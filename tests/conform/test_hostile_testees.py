"""Testees that attack the runner: garbage, an instant close, a server that
accepts and hangs, one that floods, one that goes away mid-run, and Ctrl-C.

Each case must end within its budget (x ``--time-scale``) with the right
verdict (FAIL, or ERROR "testee down"), the runner must neither hang nor
crash, memory stays bounded (``max_rx_bytes``, at most ``max_frames`` frames
decoded), and the exit statuses follow the contract of ``refwire conform``
(specs/lumberjack/README.md §4 says what a server must refuse; this file
tests the runner, not the protocol).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from refwire.cli import main
from refwire.conform.cases.lumberjack import CATALOGUE
from refwire.conform.model import CaseResult, Verdict
from refwire.conform.runner import RunAborted, RunConfig, run_cases
from refwire.lumberjack.frames import encode_ack

pytestmark = pytest.mark.timeout(60)

TIME_SCALE = 0.2
#: An ack case, a close case, a case sending 450 KB (blocks on a peer that never reads), and the bomb.
CASES = "lj.S1.1,lj.S6.1,lj.S6.10,lj.S4.4"

Handler = Callable[[trio.SocketStream], Awaitable[None]]


@asynccontextmanager
async def hostile(handler: Handler) -> AsyncIterator[tuple[str, int]]:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def guarded(stream: trio.SocketStream) -> None:
        try:
            await handler(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, guarded, listeners)
        try:
            yield "127.0.0.1", port
        finally:
            nursery.cancel_scope.cancel()


GARBAGE = b"HTTP/1.1 400 Bad Request\r\n\r\n\x00\xff garbage"


async def garbage(stream: trio.SocketStream) -> None:
    """Speaks another protocol: no case runs (the runner stops at its first bytes)."""
    await stream.send_all(GARBAGE)
    await trio.sleep_forever()


async def garbage_after_a_frame(stream: trio.SocketStream) -> None:
    """Speaks Lumberjack (a keepalive), then garbage: the cases judge it."""
    await stream.send_all(encode_ack(0) + GARBAGE)
    await trio.sleep_forever()


async def close_at_once(stream: trio.SocketStream) -> None:
    await stream.aclose()


async def hang(stream: trio.SocketStream) -> None:
    await trio.sleep_forever()  # never reads, never writes


async def flood_bytes(stream: trio.SocketStream) -> None:
    chunk = b"\xee" * 65536
    try:
        await stream.send_all(encode_ack(0))  # a Lumberjack frame first: a testee of the protocol gone wrong
        while True:
            await stream.send_all(chunk)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def flood_keepalives(stream: trio.SocketStream) -> None:
    chunk = encode_ack(0) * 10_000
    try:
        while True:
            await stream.send_all(chunk)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def _run(handler: Handler, cases: str = CASES, **kw: object) -> list[CaseResult]:
    async with hostile(handler) as (host, port):
        cfg = RunConfig(host=host, port=port, seed=1, time_scale=TIME_SCALE, jobs=4, **kw)  # type: ignore[arg-type]
        with trio.fail_after(30):  # the runner never hangs
            run = await run_cases(CATALOGUE, cfg, include=cases)
    return run.results


def _within_budget(results: list[CaseResult]) -> None:
    for r in results:
        budget = r.case.budget * TIME_SCALE
        # the budget, the grace the runner allows past it, and the shielded close
        assert r.duration <= budget + 1.0 * TIME_SCALE + 1.5, (r.case.id, r.duration, budget)


@pytest.mark.parametrize(
    ("handler", "fails"),
    [
        (garbage_after_a_frame, {"lj.S1.1", "lj.S6.1", "lj.S6.10", "lj.S4.4"}),
        # closing at once is right for the cases that expect a close
        (close_at_once, {"lj.S1.1", "lj.S6.10"}),
        (hang, {"lj.S1.1", "lj.S6.1", "lj.S6.10", "lj.S4.4"}),
    ],
    ids=["garbage-after-a-frame", "close-at-once", "accept-and-hang"],
)
async def test_hostile_testee_cases_end_in_budget_with_a_verdict(handler: Handler, fails: set[str]) -> None:
    results = await _run(handler)
    got = {r.case.id: r.verdict for r in results}
    assert {c for c, v in got.items() if v is Verdict.FAIL} == fails, {r.case.id: r.observed for r in results}
    assert all(v is Verdict.PASS for c, v in got.items() if c not in fails), got
    assert not any(r.harness_fault for r in results)
    _within_budget(results)
    for r in results:
        if r.verdict is Verdict.FAIL:
            assert r.expected and r.observed and r.case.requirement.startswith("specs/lumberjack/README.md §")


async def test_a_testee_of_another_protocol_stops_the_run_at_its_first_bytes() -> None:
    """Its first bytes cannot begin a Lumberjack frame (the protocol's describer
    says so): one line, no case judged."""
    aborted: list[BaseException] = []
    try:
        await _run(garbage)
    except* RunAborted as group:  # (through the test server's nursery)
        aborted = _leaves(group)
    (exc,) = aborted
    assert str(exc).endswith("does not speak Lumberjack v1/v2 (Beats, Logstash) (first bytes 48 54 54 50 2f 31 2e 31 …)")
    assert "\n" not in str(exc)


def _leaves(group: BaseException) -> list[BaseException]:
    if isinstance(group, BaseExceptionGroup):
        return [leaf for e in group.exceptions for leaf in _leaves(e)]
    return [group]


@pytest.mark.parametrize("handler", [flood_bytes, flood_keepalives], ids=["bytes", "keepalives"])
async def test_a_flooding_testee_is_cut_off_and_memory_stays_bounded(handler: Handler) -> None:
    limit = 1 << 20
    results = await _run(handler, "lj.S1.1,lj.S2.3", max_rx_bytes=limit)  # S2.3 judges keepalives too
    for r in results:
        assert r.verdict is Verdict.FAIL, (r.case.id, r.observed)
        assert r.observation is not None and "flood" in r.observation.events + r.observation.facts
        rx = sum(e["len"] for e in r.wire_log if e["kind"] == "rx")
        assert rx <= limit + 65536
        assert len(r.frames) <= 256
        assert len(json.dumps(r.to_json())) < 8 * limit  # the record too
    _within_budget(results)


async def test_a_testee_going_down_mid_run_is_error_testee_down_and_exit_1(tmp_path: Path) -> None:
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]

    async def serve_one_then_go_away() -> None:
        stream = await listener.accept()
        await listener.aclose()  # nothing listens on the port any more
        await stream.aclose()

    argv = ["conform", "lumberjack", "--server", f"127.0.0.1:{port}", "--out", str(tmp_path), "--seed", "1"]
    argv += ["--cases", "lj.S1.1,lj.S1.3,lj.S6.1", "--time-scale", str(TIME_SCALE), "--quiet"]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_one_then_go_away)
        with trio.fail_after(30):
            status = await trio.to_thread.run_sync(main, argv)
    assert status == 1
    cases = json.loads((tmp_path / "index.json").read_text())["agents"][f"127.0.0.1:{port}"]
    assert cases["lj.S1.1"]["verdict"] == "FAIL"  # the first case: closed at once, nothing acked
    for cid in ("lj.S1.3", "lj.S6.1"):
        assert cases[cid]["verdict"] == "ERROR" and cases[cid]["reason"].startswith("testee down"), cases[cid]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
async def test_ctrl_c_writes_the_reports_of_the_cases_finished_so_far(tmp_path: Path) -> None:
    async with hostile(hang) as (host, port):
        cmd = [sys.executable, "-m", "refwire.cli", "conform", "lumberjack", "--server", f"{host}:{port}"]
        cmd += ["--out", str(tmp_path), "--seed", "1", "--cases", "lj.S1.*,lj.S2.*", "--time-scale", "0.3", "--jobs", "2"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
        proc = await trio.lowlevel.open_process(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert proc.stdout is not None and proc.stderr is not None
        out = b""
        with trio.fail_after(20):
            while out.count(b"\nFAIL") < 2:  # two cases finished (each waits ~1 s for an ack)
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, out
                out += chunk
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(10):  # stops promptly
            async with proc.stdout:
                while chunk := await proc.stdout.receive_some(4096):
                    out += chunk
            status = await proc.wait()
        err = await proc.stderr.receive_some(65536)
    assert status == 130, (out.decode(), err.decode())
    assert b"Traceback" not in err, err.decode()
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["run"]["interrupted"] is True
    done = index["agents"][f"{host}:{port}"]
    assert 2 <= len(done) < 8 and all(v["verdict"] == "FAIL" for v in done.values()), done
    assert b"interrupted:" in out and (tmp_path / "index.html").exists()
