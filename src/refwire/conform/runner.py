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
that goes away later makes the cases after it ERROR "testee down".  A testee
whose first bytes cannot begin a frame of the protocol (read by the protocol's
describer, :mod:`refwire.describe`) is no testee of it: the run stops there
(:class:`RunAborted`: "HOST:PORT does not speak ..."); one that only closes is
judged by the cases.  Where what the testee already holds decides a case (a
topic or segment left by an earlier run under the same run id), the case is
ERROR naming the cause (:class:`TesteeState`), never FAIL.

Runs are independent (:mod:`refwire.conform.ids`): every name and marker a case
leaves on the testee carries the run id (``RunConfig.run_id``), recorded beside
the seed in every replay line and in ``index.json``.  Before the first case a
catalogue may check (or make) what its cases need on the testee
(``Catalogue.prepare``), stopping the run with one line saying what to do.
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

from ..errors import LocalProtocolError
from .conversation import Conversation, Observer
from .ids import natural_key, seed_run_id
from .model import Case, CaseResult, Observation, Verdict, case_seed, describe_observed, judge, select

__all__ = [
    "HOLDS_BATCHES",
    "Catalogue",
    "FirstBytes",
    "Prepare",
    "RunAborted",
    "RunConfig",
    "RunResult",
    "TesteeState",
    "run_cases",
    "run_server_case",
]

#: The tag of cases that need a testee holding its batches (``--holds-batches``).
HOLDS_BATCHES = "holds-batches"


class RunAborted(Exception):
    """The run cannot go on (exit status 2): the message says why, in one line."""


class TesteeState(Exception):
    """Raised by a case's procedure when what the testee already holds (not how
    it behaves) decides the outcome -- a topic that exists before the case
    created it, a segment already written: the case is ERROR with this message
    as the cause, never FAIL."""


@attrs.frozen(kw_only=True)
class Prepare:
    """What a catalogue's ``prepare`` step gets before the first server case."""

    #: Opens a connection to the testee (TCP, TLS or the simulator's).
    connect: Callable[[], Awaitable[trio.abc.Stream]]
    #: ``HOST:PORT`` of the testee, for messages.
    address: str
    #: The server cases about to run.
    cases: tuple[Case, ...]
    #: The run's id (the names the cases use carry it).
    run_id: str
    #: Every wait is multiplied by it (``--time-scale``).
    time_scale: float = 1.0


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
    #: ``serve(listener, sink_path, run_id)``: refwire's own server on a listener,
    #: for running the server cases inside the simulator (``--sim``); ``run_id``
    #: names what a server must hold before the run (the 2017 draft's segments).
    sim_server: Callable[[Any, str, str], Awaitable[None]] | None = None
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
    sim_server_holding: Callable[[float], Callable[[Any, str, str], Awaitable[None]]] | None = None
    #: ``prepare(Prepare)``: before the first server case, check (or make, through
    #: the protocol) what the cases need on the testee; :class:`RunAborted` with
    #: one line saying what to do when it is missing.
    prepare: Callable[[Prepare], Awaitable[None]] | None = None

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
    #: The run id the cases' names and markers carry (:mod:`.ids`); None: the one
    #: derived from the seed (:func:`~.ids.seed_run_id`).  ``refwire conform``
    #: draws a fresh one per run unless ``--run-id`` names one.
    run_id: str | None = None
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

    @property
    def the_run_id(self) -> str:
        """The run id in force (:attr:`run_id`, or the seed's)."""
        return self.run_id or seed_run_id(self.seed)

    def replay_line(self, case: Case) -> str:
        """The command that runs ``case`` again exactly (same seed, same run id)."""
        return f"{self.replay_base} --cases {case.id} --seed {self.seed} --run-id {self.the_run_id}".strip()

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
        run_id=cfg.the_run_id,
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


class FirstBytes:
    """Whether the testee speaks the protocol, judged on the first bytes it sends.

    Until one connection of the run has shown bytes that begin a frame, each
    connection's first bytes go through a fresh describer of the server's
    direction (the protocol's descriptor names it; nothing here knows one
    protocol from another).  When they cannot begin a frame -- the describer
    gives undecoded bytes at stream offset 0 -- :attr:`alien` says so in one
    line and the run stops.  A testee that sends nothing, or only closes,
    decides nothing: the cases judge it."""

    #: Bytes shown in the message.
    SHOWN = 8

    def __init__(self, protocol: str, address: str, max_frame_size: int = 16 << 20) -> None:
        self.protocol = protocol
        self.address = address
        self.max_frame_size = max_frame_size
        #: A connection's first bytes began a frame: nothing is checked any more.
        self.confirmed = False
        #: Why the testee is no testee of the protocol (None: not known to be).
        self.alien: str | None = None
        self.stopped = trio.Event()
        self._make: Callable[..., Any] | None = None
        self._title = protocol
        try:
            from ..protocols import descriptor

            d = descriptor(protocol)
            self._title = d.title
            if d.describer is not None:
                self._make = d.load("describer")
        except (ValueError, LookupError, ImportError):
            self._make = None  # a catalogue without a registered protocol (tests): no check

    def watch(self) -> Callable[[bytes], None] | None:
        """A callback for one connection's received bytes (None: nothing to check)."""
        if self.confirmed or self._make is None:
            return None
        describer = self._make(self.max_frame_size, "s2c")
        seen = bytearray()
        done = False

        def on_rx(data: bytes) -> None:
            nonlocal done
            if done or self.confirmed or self.alien is not None:
                return
            seen.extend(data[: self.SHOWN])
            try:
                found = describer.feed(data)
            except Exception:  # a describer that cannot say: the cases judge
                done = True
                return
            if not found:
                return  # not a whole header yet
            done = True
            first = found[0]
            from ..describe import UNDECODED

            if first.type == UNDECODED and first.offset == 0 and first.error is not None:
                shown = " ".join(f"{b:02x}" for b in bytes(seen[: self.SHOWN]))
                more = " …" if len(seen) > self.SHOWN or len(data) > self.SHOWN else ""
                self.alien = f"{self.address} does not speak {self._title} (first bytes {shown}{more})"
                self.stopped.set()
            else:
                self.confirmed = True

        return on_rx


async def run_server_case(
    case: Case, catalogue: Catalogue, cfg: RunConfig, *, first: bool = False, first_bytes: FirstBytes | None = None
) -> CaseResult:
    """Run one case against the testee server at ``cfg.host:cfg.port``.

    ``first_bytes``: the run's check of the testee's first bytes (a fresh one
    for a ``first`` case when not given); :class:`RunAborted` when they show the
    testee speaks another protocol."""
    seed = case_seed(cfg.seed, case.id)
    result = CaseResult(case=case, agent=cfg.agent, verdict=Verdict.ERROR, case_seed=seed, profile=cfg.profile, run_seed=cfg.seed, run_id=cfg.the_run_id)
    result.replay = cfg.replay_line(case)
    reason = _unsupported_reason(case, cfg)
    if reason is not None:
        result.verdict, result.reason = Verdict.UNSUPPORTED, reason
        return result
    if first_bytes is None and first:
        first_bytes = FirstBytes(catalogue.protocol, f"{cfg.host}:{cfg.port}", cfg.max_rx_bytes)
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
    conv.run_id = cfg.the_run_id
    conv.case_id = case.id
    conv.open_another = functools.partial(_connect, cfg)
    conv.on_rx = first_bytes.watch() if first_bytes is not None else None
    conv.action(f"connected to {cfg.host}:{cfg.port} (case seed {seed}, run id {conv.run_id})")
    crashed: str | None = None
    state: str | None = None
    over_budget = False
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conv.reader)
            with trio.move_on_at(deadline + 1.0 * cfg.time_scale) as scope:
                if first_bytes is not None and conv.on_rx is not None:
                    nursery.start_soon(_stop_when_alien, first_bytes, scope)
                try:
                    await case.run(conv)
                except TesteeState as exc:
                    state = str(exc)
                except LocalProtocolError:
                    # refwire's own machine refuses to go on because the testee closed
                    # or broke the conversation: that is the testee's doing, judged below.
                    if conv.closed_by_testee is None and not _observer_broken(conv):
                        crashed = traceback.format_exc(limit=8)
                    else:
                        conv.action("the case stops: the testee ended the conversation")
                except Exception:  # the harness's own bug: ERROR, never the testee's fault
                    crashed = traceback.format_exc(limit=8)
            over_budget = scope.cancelled_caught and (first_bytes is None or first_bytes.alien is None)
            if over_budget:
                conv.action("case budget ran out")
            nursery.cancel_scope.cancel()
        ended = trio.current_time()
        if first_bytes is not None and conv.on_rx is not None and conv.rx_bytes == 0 and conv.closed_by_testee is None:
            await _answer_to_eof(conv, first_bytes, cfg)
    finally:
        if conv.closed_by_testee is None:
            await conv.close("FIN")
    if first_bytes is not None and first_bytes.alien is not None and conv.on_rx is not None:
        raise RunAborted(first_bytes.alien)
    result.duration = ended - t0
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
    result.observed = describe_observed(obs, result.close)
    if crashed is not None:
        result.verdict, result.reason = Verdict.ERROR, f"harness error: {crashed.strip().splitlines()[-1]}"
        result.harness_fault = True
        result.expected = ""
        result.wire_log.append({"kind": "action", "text": "harness traceback", "traceback": crashed})
        return result
    if state is not None:
        result.verdict, result.reason = Verdict.ERROR, f"testee state decides this case, not its behaviour: {state}"
        conv.action(f"testee state: {state}")
        return result
    verdict, matched, expected, why = judge(case, obs, cfg.profile)
    result.verdict, result.matched_profiles, result.expected = verdict, matched, expected
    result.reason = why + (" (the case's budget ran out)" if over_budget else "")
    return result


#: Seconds (scaled) a testee that sent nothing in a case is given to answer refwire's FIN.
EOF_ANSWER_WAIT = 0.3


async def _answer_to_eof(conv: Conversation, first_bytes: FirstBytes, cfg: RunConfig) -> None:
    """The case is over, judged on what was seen, and the testee has sent nothing
    yet: half-close and read its answer for a moment, for the first-bytes check
    alone (it is in no observation).  A server of a line-based protocol (HTTP)
    waits silently for a newline no frame of ours may hold, and answers at EOF."""
    send_eof = getattr(conv.stream, "send_eof", None)
    if send_eof is None or first_bytes.confirmed or first_bytes.alien is not None:
        return
    check = conv.on_rx
    assert check is not None
    with trio.move_on_after(EOF_ANSWER_WAIT * cfg.time_scale):
        try:
            await send_eof()
            data = bytes(await conv.stream.receive_some(4096))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return
        if data:
            conv.action(f"after the case, the testee answered refwire's FIN with {len(data)} bytes (for the first-bytes check)")
            check(data)


async def _stop_when_alien(first_bytes: FirstBytes, scope: trio.CancelScope) -> None:
    await first_bytes.stopped.wait()
    scope.cancel()


def _observer_broken(conv: Conversation) -> bool:
    """The observer stopped decoding (the testee sent what is no frame)."""
    return bool(getattr(conv.observer, "broken", False)) or conv.flooded


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

    first_bytes = FirstBytes(catalogue.protocol, f"{cfg.host}:{cfg.port}", cfg.max_rx_bytes)

    async def one(case: Case, first: bool) -> CaseResult:
        if run_one is not None:
            return await run_one(case, first)
        return await run_server_case(case, catalogue, cfg, first=first, first_bytes=first_bytes)

    # Server role: the catalogue's preparation, then the first case runs alone (a
    # testee that is not there aborts the run).  Client role: refwire listens,
    # so no case is special.
    rest = chosen
    if cfg.role != "client":
        if run_one is None:
            await prepare_run(catalogue, cfg, chosen)
        _done(run, await one(chosen[0], True), on_result)
        rest = chosen[1:]
    parallel = [c for c in rest if "serial" not in c.tags]
    serial = [c for c in rest if "serial" in c.tags]
    if cfg.jobs <= 1:
        for case in parallel + serial:
            _done(run, await one(case, False), on_result)
    else:
        limiter = trio.CapacityLimiter(cfg.jobs)
        aborted: list[RunAborted] = []

        async def worker(case: Case, cancel: trio.CancelScope) -> None:
            async with limiter:
                try:
                    result = await one(case, False)
                except RunAborted as exc:  # stop every case, raise it once, outside the nursery
                    aborted.append(exc)
                    cancel.cancel()
                    return
                _done(run, result, on_result)

        async with trio.open_nursery() as nursery:
            for case in parallel:
                nursery.start_soon(worker, case, nursery.cancel_scope)
        if aborted:
            raise aborted[0]
        for case in serial:
            _done(run, await one(case, False), on_result)
    for case, why in skipped:
        _done(run, _skip(case, cfg, Verdict.SKIPPED, why), on_result)
    return run


async def prepare_run(catalogue: Catalogue, cfg: RunConfig, cases: Sequence[Case]) -> None:
    """The catalogue's ``prepare`` step before the first server case (see
    :class:`Catalogue`); :class:`RunAborted` when the testee cannot be reached
    or lacks what the cases need."""
    if catalogue.prepare is None:
        return
    mine = tuple(c for c in cases if c.role == "server" and _unsupported_reason(c, cfg) is None)
    if not mine:
        return

    async def connect() -> trio.abc.Stream:
        try:
            return await _connect(cfg)
        except (OSError, trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError) as exc:
            raise RunAborted(
                f"could not open the first connection of the run (cannot connect to {cfg.host}:{cfg.port}: {_why(exc)})"
            ) from None

    await catalogue.prepare(
        Prepare(connect=connect, address=f"{cfg.host}:{cfg.port}", cases=mine, run_id=cfg.the_run_id, time_scale=cfg.time_scale)
    )


def _done(run: RunResult, result: CaseResult, on_result: Callable[[CaseResult], None] | None) -> None:
    run.results.append(result)
    if on_result is not None:
        on_result(result)


def sort_results(results: Iterable[CaseResult]) -> list[CaseResult]:
    """Results in natural case-id order (:func:`~.ids.natural_key`)."""
    return sorted(results, key=lambda r: natural_key(r.case.id))


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
            "run_id": cfg.the_run_id,
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
