"""Keepalives in ``refwire conform lumberjack`` (spec §3.4): the cases lj.S5.4
and lj.S5.5 against refwire's own server holding each batch (``--holds-batches``,
``--ack-delay``) inside the simulator -- virtual time, so a 7 s hold takes no
real time and no verdict depends on the scheduler -- and against refwire's
server with a wrong keepalive (each FAILs a case); the keepalive record in
the case's JSON and HTML; and the waits for an ack that restart on keepalives.
"""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from refwire.cli import main
from refwire.conform.cases.lumberjack import CATALOGUE, ServerObserver
from refwire.conform.cases.lumberjack._common import KEEPALIVES
from refwire.conform.cases.lumberjack.server_timing import fits
from refwire.conform.cases.lumberjack.simulation import serve_for_simulation
from refwire.conform.conversation import Conversation
from refwire.conform.ids import seed_run_id
from refwire.conform.model import CaseResult, Verdict
from refwire.conform.runner import RunConfig
from refwire.conform.simulated import run_in_simulator
from refwire.lumberjack.server import ServerConfig

pytestmark = pytest.mark.timeout(120)

KEEPALIVE_CASES = "lj.S5.4,lj.S5.5"
HOLD = 7.0


def _sim(
    config: ServerConfig | None = None, *, hold: float | None = HOLD, profile: str = "strict", include: str = KEEPALIVE_CASES
) -> dict[str, CaseResult]:
    """The cases against refwire's server holding each batch ``HOLD`` s, in the simulator."""
    serve = functools.partial(serve_for_simulation, ack_delay=HOLD, config=config)
    cat = attrs.evolve(CATALOGUE, sim_server=serve)
    run = run_in_simulator(cat, RunConfig(seed=4, profile=profile, holds_batches=hold), include=include)
    return {r.case.id: r for r in run.result.results}


def test_refwire_holding_batches_passes_the_keepalive_cases_and_the_long_waits() -> None:
    results = _sim(include=f"{KEEPALIVE_CASES},lj.S1.1,lj.S1.2,lj.S5.3")
    bad = {cid: (r.observed, r.reason) for cid, r in results.items() if r.verdict is not Verdict.PASS}
    assert not bad
    v2, v1 = results["lj.S5.4"], results["lj.S5.5"]
    assert v2.observation is not None and v1.observation is not None
    assert v2.observation.facts == ("keepalive version 2", "keepalive period fits 5 s")
    assert v1.observation.facts == ("keepalive version 1", "keepalive period fits 5 s")
    # the keepalive tokens stay out of the judged events, as in every other case
    assert v2.observation.events == ("A 1",) and v1.observation.events == ("1A 1",)
    # recorded: version byte and time since the batch, in the record and the wire log
    (ka,) = v1.keepalives
    assert (ka["token"], ka["version"], ka["covers"]) == ("1A 0", "1", "1W1 1D1")
    assert ka["since_batch_s"] == pytest.approx(5.0, abs=0.1)
    assert any(e["kind"] == "frame" and e.get("keepalive") and "since_batch_s" in e for e in v1.wire_log)
    # lj.S1.1 waited through the hold: its wait lasted 3 s + the declared 7 s
    s1 = results["lj.S1.1"]
    assert s1.keepalives and s1.duration > HOLD
    assert any("wait up to 10s for 1 frame" in str(e.get("text")) for e in s1.wire_log)


def test_without_holds_batches_the_keepalive_cases_are_unsupported() -> None:
    results = _sim(hold=None)
    for cid in ("lj.S5.4", "lj.S5.5"):
        assert results[cid].verdict is Verdict.UNSUPPORTED, results[cid].reason
        assert results[cid].reason.startswith("needs --holds-batches S")
        assert not results[cid].wire_log  # never connected


def test_a_hold_too_short_to_owe_a_keepalive_is_unsupported() -> None:
    results = _sim(hold=3.0)
    for r in results.values():
        assert r.verdict is Verdict.UNSUPPORTED and "owes a keepalive under every profile" in r.reason, r.reason


def test_a_testee_that_acks_sooner_than_declared_is_not_judged() -> None:
    results = _sim(hold=10.0)  # the server holds 7 s only
    for r in results.values():
        assert r.verdict is Verdict.INFO and "held the batch less than --holds-batches" in r.reason, (r.observed, r.reason)


@pytest.mark.parametrize(
    ("config", "profile", "want"),
    [
        # Logstash's bug: '2A' 0 on a v1 connection
        (ServerConfig(keepalive_version="v2"), "strict", {"lj.S5.4": Verdict.PASS, "lj.S5.5": Verdict.FAIL}),
        (ServerConfig(keepalive_version="v2"), "logstash", {"lj.S5.4": Verdict.PASS, "lj.S5.5": Verdict.FAIL}),
        # no keepalive at all: v2 FAILs; on v1 that is go-lumber's documented behaviour
        (ServerConfig(keepalive_interval=None), "strict", {"lj.S5.4": Verdict.FAIL, "lj.S5.5": Verdict.NON_STRICT}),
        (ServerConfig(keepalive_interval=None), "go-lumber", {"lj.S5.4": Verdict.FAIL, "lj.S5.5": Verdict.PASS}),
        # too slow: 7 s with no keepalive; too often: every second
        (ServerConfig(keepalive_interval=8.0), "strict", {"lj.S5.4": Verdict.FAIL, "lj.S5.5": Verdict.NON_STRICT}),
        (ServerConfig(keepalive_interval=1.0), "strict", {"lj.S5.4": Verdict.FAIL, "lj.S5.5": Verdict.FAIL}),
        # go-lumber's 3 s: strict, and go-lumber's period; 5 s is not
        (ServerConfig(keepalive_interval=3.0), "go-lumber", {"lj.S5.4": Verdict.PASS, "lj.S5.5": Verdict.NON_STRICT}),
        (ServerConfig(keepalive_interval=3.0), "strict", {"lj.S5.4": Verdict.PASS, "lj.S5.5": Verdict.PASS}),
        (ServerConfig(), "go-lumber", {"lj.S5.4": Verdict.NON_STRICT, "lj.S5.5": Verdict.NON_STRICT}),
    ],
    ids=["v2-on-v1", "v2-on-v1-logstash", "none", "none-go-lumber", "too-slow", "too-often", "3s-go-lumber", "3s", "5s-go-lumber"],
)
def test_a_wrong_keepalive_is_caught(config: ServerConfig, profile: str, want: dict[str, Verdict]) -> None:
    results = _sim(config, profile=profile)
    assert {cid: r.verdict for cid, r in results.items()} == want, {cid: (r.observed, r.reason) for cid, r in results.items()}


def test_a_keepalive_with_the_wrong_version_on_v2_fails() -> None:
    """A server sending '1A' 0 on a v2 connection (a machine that forgets the version)."""
    from refwire.lumberjack.connection import ServerConnection

    class V1Keepalives(ServerConnection):
        def _emit(self, data: bytes) -> None:
            if data == b"2A\x00\x00\x00\x00":
                data = b"1A\x00\x00\x00\x00"
            super()._emit(data)

    @attrs.frozen(kw_only=True)
    class Faulty(ServerConfig):
        def machine(self, *, now: float) -> ServerConnection:
            conn = super().machine(now=now)
            conn.__class__ = V1Keepalives
            return conn

    results = _sim(Faulty(), include="lj.S5.4")
    r = results["lj.S5.4"]
    assert r.verdict is Verdict.FAIL and r.observation is not None, r.reason
    assert "keepalive version 1" in r.observation.facts


@pytest.mark.parametrize(
    ("intervals", "tail", "period", "ok"),
    [
        ([3.0, 3.0], 1.0, 3.0, True),
        ([5.0], 2.0, 3.0, False),  # 5 s is late for 3 s (> 3 + 1.5)
        ([5.0], 2.0, 5.0, True),
        ([3.0, 3.0], 1.0, 5.0, True),  # a faster keepalive owes nothing more
        ([1.0], 2.0, 3.0, False),  # too early (< 0.5 x 3)
        ([], 7.0, 5.0, False),  # none
        ([5.0], 6.6, 5.0, False),  # silent too long before the end
        ([6.5], 0.5, 5.0, True),  # the margin's edge
    ],
)
def test_the_period_margins(intervals: list[float], tail: float, period: float, ok: bool) -> None:
    assert fits(intervals, tail, period) is ok


def test_the_keepalives_are_in_the_report(tmp_path: Path) -> None:
    assert main(["conform", "lumberjack", "--sim", "--holds-batches", "7", "--seed", "2", "--quiet", "--cases", "lj.S5.5", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "refwire-sim" / "lj.S5.5.json").read_text())
    assert [(k["token"], k["version"]) for k in record["keepalives"]] == [("1A 0", "1")]
    # --sim: the run id is the seed's (the simulator's trace depends on the seed alone)
    assert record["replay"].endswith(f"--holds-batches 7 --cases lj.S5.5 --seed 2 --run-id {seed_run_id(2)}")
    page = (tmp_path / "refwire-sim" / "lj.S5.5.html").read_text()
    assert "<th>Keepalives</th>" in page and "1A 0 (version byte '1')" in page and "s after 1W1 1D1" in page
    index = json.loads((tmp_path / "index.json").read_text())
    assert index["run"]["holds_batches"] == 7.0


def test_cli_holds_batches_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:  # argparse refuses it
        main(["conform", "lumberjack", "--server", "127.0.0.1:1", "--holds-batches", "0"])
    assert exited.value.code == 2
    assert "--holds-batches must be a positive number" in capsys.readouterr().err
    assert main(["conform", "lumberjack", "--client", "--holds-batches", "7"]) == 2
    assert "describes a server under test" in capsys.readouterr().err
    assert main(["conform", "show", "lj.S5.4"]) == 0
    assert "--holds-batches S (UNSUPPORTED without it)" in capsys.readouterr().out


def test_serve_lumberjack_has_ack_delay() -> None:
    from refwire.cli import build_parser

    args = build_parser().parse_args(["serve", "lumberjack", "--ack-delay", "7"])
    assert args.ack_delay == 7.0


# --------------------------------------------------------------------------- the waits


async def _conversation(
    theirs_script: list[tuple[float, bytes]], *, timeout: float, deadline: float = float("inf"), hold: float | None = None
) -> tuple[bool, Conversation]:
    ours, theirs = trio.testing.memory_stream_pair()
    conv = Conversation(ours, ServerObserver(), rng=random.Random(1), deadline=trio.current_time() + deadline)
    conv.holds_batches = hold

    async def testee() -> None:
        for at, frame in theirs_script:
            await trio.sleep_until(conv._t0 + at)
            await theirs.send_all(frame)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(conv.reader)
        nursery.start_soon(testee)
        assert await conv.send(b"2W\x00\x00\x00\x01", label="W1", answers=1)
        ok = await conv.wait_tokens(1, timeout, settle=0.0, ignore=KEEPALIVES)
        nursery.cancel_scope.cancel()
    return ok, conv


KA = b"2A\x00\x00\x00\x00"
ACK = b"2A\x00\x00\x00\x01"


async def test_a_wait_for_an_ack_restarts_on_each_keepalive(autojump_clock: trio.testing.MockClock) -> None:
    ok, conv = await _conversation([(2.5, KA), (5.0, KA), (7.0, ACK)], timeout=3.0)
    assert ok and conv.tokens == ["A 0", "A 0", "A 1"]
    assert [k["since_batch_s"] for k in conv.keepalives] == [2.5, 5.0]
    assert sum("keepalive: the wait restarts" in str(e.get("text")) for e in conv.log) == 2


async def test_without_keepalives_the_wait_ends(autojump_clock: trio.testing.MockClock) -> None:
    ok, _ = await _conversation([(7.0, ACK)], timeout=3.0)
    assert not ok


async def test_the_budget_stays_the_hard_cap(autojump_clock: trio.testing.MockClock) -> None:
    ok, _ = await _conversation([(2.5, KA), (5.0, KA), (7.0, ACK)], timeout=3.0, deadline=6.0)
    assert not ok


async def test_a_declared_hold_lengthens_the_wait(autojump_clock: trio.testing.MockClock) -> None:
    ok, _ = await _conversation([(7.0, ACK)], timeout=3.0, hold=5.0)
    assert ok


async def test_other_waits_do_not_restart(autojump_clock: trio.testing.MockClock) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    conv = Conversation(ours, ServerObserver(), rng=random.Random(1))

    async def testee() -> None:
        await trio.sleep(1.0)
        await theirs.send_all(KA)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(conv.reader)
        nursery.start_soon(testee)
        t0 = trio.current_time()
        await conv.wait_close(2.0)
        assert trio.current_time() - t0 == pytest.approx(2.0)
        nursery.cancel_scope.cancel()
    assert conv.keepalives[0]["covers"] == "the start of the connection"
