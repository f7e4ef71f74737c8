"""Running conformance cases against a testee.

``--server HOST:PORT``: refwire plays the client.  Each case gets its own TCP
(or TLS) connection to the testee, its own seed (:func:`~.model.case_seed`)
and its own budget; the case's procedure drives a :class:`~.conversation.
Conversation`, and the observation (what the testee sent, how the connection
ended) is judged against the case's expectations for the chosen profile.

``--client``: refwire plays the server (see :mod:`refwire.conform.clients`).

Harness faults never blame the testee: a procedure that raises, or a testee
that cannot be reached, is ERROR.  A testee that refuses the *first*
connection of a run aborts the run (:class:`RunAborted`, exit status 2); one
that goes away later makes the cases after it ERROR "testee down".
"""

from __future__ import annotations

import functools
import math
import random
import ssl
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import trio

from .conversation import Conversation, Observer
from .model import Case, CaseResult, Observation, Verdict, case_seed, judge, select

__all__ = ["HOLDS_BATCHES", "Catalogue", "RunAborted", "RunConfig", "RunResult", "run_cases", "run_server_case"]

#: The tag of cases that need a testee holding its batches (``--holds-batches``).
HOLDS_BATCHES = "holds-batches"


class RunAborted(Exception):
    """The run cannot go on (exit status 2): the message says why, in one line."""


@attrs.frozen(kw_only=True)
class Catalogue:
    """One protocol's conformance cases and what judging them needs."""

    protocol: str
    #: Id prefix (``"lj"``).
    prefix: str
    cases: tuple[Case, ...]
    #: Profile name -> one line on whose behaviour it is.
    profiles: Mapping[str, str]
    #: Feature name -> what leaving it out means (``--declare``).
    features: Mapping[str, str]
    #: A fresh observer of what a testee *server* sends.
    server_observer: Callable[[], Observer]
    #: A fresh observer of what a testee *client* sends.
    client_observer: Callable[[], Observer] | None = None
    #: The spec file the requirements point into.
    spec: str = ""
    #: ``serve(listener, sink_path)``: refwire's own server on a listener, for
    #: running the server cases inside the simulator (``--sim``).
    sim_server: Callable[[Any, str], Awaitable[None]] | None = None
    #: Builds what the cases cache (large payloads) before a run whose timing
    #: must not depend on it (the simulator: virtual time would jump meanwhile).
    warm: Callable[[], object] | None = None
    #: ``client(connect, values)``: refwire's own client as the testee of the
    #: client cases inside the simulator (``--client --sim``): ``connect()``
    #: opens a connection to the case's server, ``values`` are the ``--exec``
    #: placeholders' values (events, seed, case ...); returns the exit status
    #: the testee contract defines (0: it believes every event was acked).
    sim_client: Callable[[Callable[[], Awaitable[trio.abc.Stream]], Mapping[str, str]], Awaitable[int]] | None = None
    #: ``services(session, host, port) -> placeholder values``: what a client
    #: case's testee needs besides the case's port, started in the session's
    #: nursery before the testee (Pravega: a controller whose answers point at
    #: the case's store, filling ``{controller}``).  Not used inside the simulator.
    client_services: Callable[[Any, str, int], Awaitable[Mapping[str, str]]] | None = None
    #: ``sim_server_holding(S)``: a ``sim_server`` whose application holds each
    #: batch S seconds before it is acked (``--sim --holds-batches S``).
    sim_server_holding: Callable[[float], Callable[[Any, str], Awaitable[None]]] | None = None

    def case(self, case_id: str) -> Case:
        for c in self.cases:
            if case_id in (c.id, c.slug):
                return c
        raise KeyError(case_id)


@attrs.frozen(kw_only=True)
class RunConfig:
    """Everything ``refwire conform`` was told (see its ``--help``)."""

    role: str = "server"
    host: str = "127.0.0.1"
    port: int = 0
    tls: ssl.SSLContext | None = None
    server_hostname: str | None = None
    agent: str = "testee"
    profile: str = "strict"
    #: Features the testee leaves out on purpose (``--declare``).
    declared_off: frozenset[str] = frozenset()
    seed: int = 0
    time_scale: float = 1.0
    #: Per-case budget override in seconds; ``math.inf`` for ``--timeout none``.
    timeout: float | None = None
    jobs: int = 1
    #: A file where the testee writes what its application received (``--sink``).
    sink: str | None = None
    #: Seconds the testee server's application holds each batch before it is
    #: acked (``--holds-batches``): added to every server case's budget and to
    #: each wait for an ack; cases tagged ``holds-batches`` need it.
    holds_batches: float | None = None
    connect_timeout: float = 5.0
    max_rx_bytes: int = 16 << 20
    #: The command line, for replay commands.
    replay_base: str = ""
    #: Opens the connection to the testee instead of TCP (the simulator's network).
    connect: Callable[[], Awaitable[trio.abc.Stream]] | None = None

    def budget(self, case: Case) -> float:
        if self.timeout is not None:
            return self.timeout
        hold = (self.holds_batches or 0.0) if case.role == "server" else 0.0
        return (case.budget + hold) * self.time_scale


@attrs.define
class RunResult:
    """The results of one run, in case-id order, and how it ended."""

    protocol: str
    config: RunConfig
    results: list[CaseResult] = attrs.field(factory=list)
    started: float = attrs.field(factory=time.time)
    ended: float | None = None
    interrupted: bool = False

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.results:
            out[r.verdict.value] = out.get(r.verdict.value, 0) + 1
        return out


def _skip(case: Case, cfg: RunConfig, verdict: Verdict, reason: str) -> CaseResult:
    return CaseResult(
        case=case,
        agent=cfg.agent,
        verdict=verdict,
        case_seed=case_seed(cfg.seed, case.id),
        profile=cfg.profile,
        reason=reason,
        run_seed=cfg.seed,
    )


def _unsupported_reason(case: Case, cfg: RunConfig) -> str | None:
    off = [f for f in case.features if f in cfg.declared_off]
    if off:
        return f"declared unsupported: {', '.join(off)}"
    if case.needs_sink and not cfg.sink:
        return "needs --sink (an observation hook on the testee) to be judged"
    if HOLDS_BATCHES in case.tags and cfg.holds_batches is None:
        return "needs --holds-batches S (a testee whose application holds each batch at least S seconds before the ack)"
    return None


async def _connect(cfg: RunConfig) -> trio.abc.Stream:
    if cfg.connect is not None:
        with trio.fail_after(cfg.connect_timeout * cfg.time_scale):
            return await cfg.connect()
    with trio.fail_after(cfg.connect_timeout * cfg.time_scale):
        tcp = await trio.open_tcp_stream(cfg.host, cfg.port)
    if cfg.tls is None:
        return tcp
    stream = trio.SSLStream(tcp, cfg.tls, server_hostname=cfg.server_hostname or cfg.host)
    with trio.fail_after(cfg.connect_timeout * cfg.time_scale):
        await stream.do_handshake()
    return stream


async def run_server_case(case: Case, catalogue: Catalogue, cfg: RunConfig, *, first: bool = False) -> CaseResult:
    """Run one case against the testee server at ``cfg.host:cfg.port``."""
    seed = case_seed(cfg.seed, case.id)
    result = CaseResult(case=case, agent=cfg.agent, verdict=Verdict.ERROR, case_seed=seed, profile=cfg.profile, run_seed=cfg.seed)
    result.replay = f"{cfg.replay_base} --cases {case.id} --seed {cfg.seed}".strip()
    reason = _unsupported_reason(case, cfg)
    if reason is not None:
        result.verdict, result.reason = Verdict.UNSUPPORTED, reason
        return result
    t0 = trio.current_time()
    try:
        stream = await _connect(cfg)
    except (OSError, trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError) as exc:
        text = f"cannot connect to {cfg.host}:{cfg.port}: {_why(exc)}"
        if first:
            raise RunAborted(f"could not open the first connection of the run ({text})") from None
        result.reason = f"testee down ({text})"
        result.close = {"by": "none", "how": "refused"}
        return result
    budget = cfg.budget(case)
    deadline = t0 + budget if math.isfinite(budget) else math.inf
    conv = Conversation(
        stream,
        catalogue.server_observer(),
        rng=random.Random(seed),
        time_scale=cfg.time_scale,
        deadline=deadline,
        max_rx_bytes=cfg.max_rx_bytes,
    )
    conv.sink = cfg.sink
    conv.holds_batches = cfg.holds_batches
    conv.open_another = functools.partial(_connect, cfg)
    conv.action(f"connected to {cfg.host}:{cfg.port} (case seed {seed})")
    crashed: str | None = None
    over_budget = False
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conv.reader)
            with trio.move_on_at(deadline + 1.0 * cfg.time_scale) as scope:
                try:
                    await case.run(conv)
                except Exception:  # the harness's own bug: ERROR, never the testee's fault
                    crashed = traceback.format_exc(limit=8)
            over_budget = scope.cancelled_caught
            if over_budget:
                conv.action("case budget ran out")
            nursery.cancel_scope.cancel()
    finally:
        if conv.closed_by_testee is None:
            await conv.close("FIN")
    result.duration = trio.current_time() - t0
    result.wire_log = conv.log
    result.frames = conv.frames
    result.keepalives = conv.keepalives
    close_how = conv.closed_by_testee or "open"
    last = len(conv.frames)
    result.close = {
        "by": "testee" if conv.closed_by_testee else "refwire",
        "how": conv.closed_by_testee or (conv.closed_by_runner or "FIN"),
        "after_frame": last,
        "after_bytes_sent": conv.tx_bytes,
        "at_s": round(result.duration, 3),
    }
    obs = Observation(events=case.judged(conv.tokens), close=close_how, facts=tuple(conv.facts))
    result.observation = obs
    result.observed = obs.describe()
    if crashed is not None:
        result.verdict, result.reason = Verdict.ERROR, f"harness error: {crashed.strip().splitlines()[-1]}"
        result.harness_fault = True
        result.expected = ""
        result.wire_log.append({"kind": "action", "text": "harness traceback", "traceback": crashed})
        return result
    verdict, matched, expected, why = judge(case, obs, cfg.profile)
    result.verdict, result.matched_profiles, result.expected = verdict, matched, expected
    result.reason = why + (" (the case's budget ran out)" if over_budget else "")
    return result


def _why(exc: BaseException) -> str:
    if isinstance(exc, trio.TooSlowError):
        return "timed out"
    if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ is not None:
        cause = exc.__cause__
        if isinstance(cause, ssl.SSLError):
            return f"TLS handshake failed: {getattr(cause, 'verify_message', None) or cause.reason or cause}"
        return _why(cause)
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed: {exc.reason or exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


RunOne = Callable[[Case, bool], Awaitable[CaseResult]]


async def run_cases(
    catalogue: Catalogue,
    cfg: RunConfig,
    *,
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
    tags: str | Sequence[str] | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
    run: RunResult | None = None,
    run_one: RunOne | None = None,
) -> RunResult:
    """Run the selected cases of ``cfg.role``; results land in ``run`` as they
    finish (so an interrupted run keeps them).  ``--jobs N`` runs up to N cases
    at once; cases tagged ``serial`` run alone, after the others."""
    run = run if run is not None else RunResult(catalogue.protocol, cfg)
    mine = [c for c in catalogue.cases if c.role == cfg.role]
    chosen, skipped = select(mine, include=include, exclude=exclude, tags=tags)
    if not chosen:
        for case, why in skipped:
            _done(run, _skip(case, cfg, Verdict.SKIPPED, why), on_result)
        return run

    async def one(case: Case, first: bool) -> CaseResult:
        if run_one is not None:
            return await run_one(case, first)
        return await run_server_case(case, catalogue, cfg, first=first)

    # Server role: the first case runs alone (a testee that is not there aborts
    # the run).  Client role: refwire listens, so no case is special.
    rest = chosen
    if cfg.role != "client":
        _done(run, await one(chosen[0], True), on_result)
        rest = chosen[1:]
    parallel = [c for c in rest if "serial" not in c.tags]
    serial = [c for c in rest if "serial" in c.tags]
    if cfg.jobs <= 1:
        for case in parallel + serial:
            _done(run, await one(case, False), on_result)
    else:
        limiter = trio.CapacityLimiter(cfg.jobs)

        async def worker(case: Case) -> None:
            async with limiter:
                _done(run, await one(case, False), on_result)

        async with trio.open_nursery() as nursery:
            for case in parallel:
                nursery.start_soon(worker, case)
        for case in serial:
            _done(run, await one(case, False), on_result)
    for case, why in skipped:
        _done(run, _skip(case, cfg, Verdict.SKIPPED, why), on_result)
    return run


def _done(run: RunResult, result: CaseResult, on_result: Callable[[CaseResult], None] | None) -> None:
    run.results.append(result)
    if on_result is not None:
        on_result(result)


def sort_results(results: Iterable[CaseResult]) -> list[CaseResult]:
    from .model import id_key

    return sorted(results, key=lambda r: id_key(r.case.id))


def to_index(run: RunResult, argv: Sequence[str] = ()) -> dict[str, Any]:
    """The ``index.json`` document of one run."""
    import refwire

    cfg = run.config
    cases: dict[str, Any] = {}
    for r in sort_results(run.results):
        cases[r.case.id] = {
            "verdict": r.verdict.value,
            "slug": r.case.slug,
            "title": r.case.title,
            "close": r.close,
            "matched_profiles": list(r.matched_profiles),
            "duration_s": round(r.duration, 3),
            "case_seed": r.case_seed,
            "reason": r.reason,
            "reportfile": f"{cfg.agent}/{r.case.id}.json",
            "replay": r.replay,
        }
    return {
        "run": {
            "refwire_version": getattr(refwire, "__version__", "0"),
            "protocol": run.protocol,
            "role": cfg.role,
            "seed": cfg.seed,
            "profile": cfg.profile,
            "time_scale": cfg.time_scale,
            "holds_batches": cfg.holds_batches,
            "started": run.started,
            "ended": run.ended,
            "interrupted": run.interrupted,
            "argv": list(argv),
            "counts": run.counts(),
        },
        "agents": {cfg.agent: cases},
    }
