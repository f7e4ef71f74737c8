"""What a conformance case is, what it observed, and how a verdict is reached.

A case is data plus a procedure: an id that is never reused (``lj.S1.1`` tests
a server, ``lj.C1.1`` a client), a slug, a title, the requirement it checks (a
section of ``specs/<protocol>/README.md``), the vectors it uses, tags, the
features it needs, a time budget, and its expected outcomes.

Expected outcomes are data keyed by **verdict** and by **profile**.  A profile
is one documented behaviour: ``strict`` (the spec, which refwire follows) and
the real implementations the spec describes (``go-lumber``, ``logstash`` ...).
The observation of a run is a short list of tokens (``"A 2"``, ``"1A 2"``)
and how the connection ended (``FIN``/``RST`` by the testee, or ``open`` when
the testee kept it open until the case gave up).  :func:`judge` compares it
with every expectation: the first one written for the chosen profile that
matches gives the verdict; an expectation of another profile that matches
makes the case NON-STRICT ("consistent with Logstash's documented behaviour,
not strict") unless it is marked a bug (FAIL) or implementation-defined
(INFO); nothing matching is a FAIL that shows Expected and Observed.

NON-STRICT is therefore always relative to the profile chosen (``--profile``):
an expectation is never NON-STRICT itself.  A profile's documented behaviour
is PASS under that profile and NON-STRICT under any other; its documented
bugs are FAIL under every profile.  :func:`predict` says which verdicts a
testee behaving exactly as one profile documents gets under another.

A matching expectation shows that what was seen is *consistent* with a
profile's documented behaviour, not that the testee is that program: the
report lists every profile consistent with the observation, the chosen one
first.
"""

from __future__ import annotations

import enum
import fnmatch
import hashlib
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import attrs

__all__ = [
    "CLOSE_KINDS",
    "Case",
    "CaseBook",
    "CaseResult",
    "Expect",
    "Observation",
    "Verdict",
    "case_seed",
    "id_key",
    "judge",
    "predict",
    "select",
]


class Verdict(enum.Enum):
    """A case's verdict (worst last in :data:`SEVERITY`)."""

    PASS = "PASS"
    NON_STRICT = "NON-STRICT"
    INFO = "INFO"
    UNSUPPORTED = "UNSUPPORTED"
    SKIPPED = "SKIPPED"
    FAIL = "FAIL"
    ERROR = "ERROR"


#: Worse verdicts have higher numbers (used by ``--baseline``).
SEVERITY: dict[Verdict, int] = {
    Verdict.PASS: 0,
    Verdict.INFO: 0,
    Verdict.SKIPPED: 0,
    Verdict.UNSUPPORTED: 1,
    Verdict.NON_STRICT: 2,
    Verdict.FAIL: 3,
    Verdict.ERROR: 3,
}

#: The verdicts an expectation can carry: PASS (a profile's documented
#: behaviour), FAIL (a documented bug), INFO (implementation-defined) and
#: UNSUPPORTED (the profile documents that the feature is left out).
EXPECTABLE = frozenset({Verdict.PASS, Verdict.FAIL, Verdict.INFO, Verdict.UNSUPPORTED})

#: How a connection can end, as seen by the runner.
#: ``FIN``/``RST``: the testee closed (cleanly / with a reset); ``open``: the
#: testee kept the connection open until the case stopped waiting; ``refused``:
#: the testee never accepted the connection.
CLOSE_KINDS = ("FIN", "RST", "open", "refused")


def case_seed(run_seed: int, case_id: str) -> int:
    """A case's seed: a stable digest of the run seed and the case id.

    Never Python's salted ``hash()``, and independent of the case's position,
    so adding or filtering cases changes no other case's bytes.
    """
    digest = hashlib.blake2b(f"{run_seed}\x00{case_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def id_key(case_id: str) -> tuple[Any, ...]:
    """Sort key for ids like ``lj.S10.2`` (numbers compared as numbers)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", case_id))


@attrs.frozen(kw_only=True)
class Observation:
    """What the testee did during one case."""

    #: The testee's frames (and anything else it did) as tokens, in order.
    events: tuple[str, ...] = ()
    #: How the connection ended: one of :data:`CLOSE_KINDS`.
    close: str = "open"
    #: Extra facts a case checks (e.g. ``{"sink": "missing 2 events"}``); tokens too.
    facts: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = list(self.events) + list(self.facts)
        return f"[{', '.join(parts)}] then {self.close}"


def _fs(items: Iterable[str]) -> frozenset[str]:
    return frozenset(items)


def _tp(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(items)


@attrs.frozen(kw_only=True)
class Expect:
    """One acceptable (or documented) outcome.

    ``events``: the tokens expected, in order; a token may be an ``fnmatch``
    pattern (``"A *"``), and ``"..."`` matches any run of tokens.  ``close``:
    the acceptable ways the connection ends; ``facts``: facts that must have
    been noted (``fnmatch`` patterns too: ``"exit [!0]*"``).  ``profiles``: the behaviours
    this outcome belongs to (``"*"``: every profile).  ``verdict``: what
    matching it means for those profiles; FAIL marks a documented bug, INFO an
    implementation-defined choice.
    """

    verdict: Verdict
    profiles: frozenset[str] = attrs.field(converter=_fs)
    events: tuple[str, ...] = attrs.field(converter=_tp, default=())
    close: frozenset[str] = attrs.field(converter=_fs, default=frozenset({"FIN", "RST", "open"}))
    facts: tuple[str, ...] = attrs.field(converter=_tp, default=())
    note: str = ""

    def __attrs_post_init__(self) -> None:
        if self.verdict not in EXPECTABLE:
            names = ", ".join(v.value for v in EXPECTABLE)
            raise ValueError(f"an expectation's verdict is one of {names}, not {self.verdict.value} (NON-STRICT is relative to --profile)")
        if not self.profiles:
            raise ValueError("an expectation names at least one profile (or '*')")

    def names(self, profile: str) -> bool:
        """Whether this outcome is documented for ``profile``."""
        return profile in self.profiles or "*" in self.profiles

    def matches(self, obs: Observation) -> bool:
        return (
            obs.close in self.close
            and _match(self.events, obs.events)
            and all(any(fnmatch.fnmatchcase(o, f) for o in obs.facts) for f in self.facts)
        )

    def describe(self) -> str:
        ev = ", ".join(self.events) if self.events else "nothing"
        closes = " or ".join(sorted(self.close))
        text = f"[{ev}] then {closes}"
        if self.facts:
            text += f" ({'; '.join(self.facts)})"
        return text


def _match(pattern: Sequence[str], tokens: Sequence[str]) -> bool:
    if not pattern:
        return not tokens
    head, rest = pattern[0], pattern[1:]
    if head == "...":
        return any(_match(rest, tokens[i:]) for i in range(len(tokens) + 1))
    return bool(tokens) and fnmatch.fnmatchcase(tokens[0], head) and _match(rest, tokens[1:])


def expect(
    verdict: Verdict,
    profiles: str | Iterable[str],
    events: Iterable[str] = (),
    close: str | Iterable[str] = ("FIN", "RST", "open"),
    **kw: Any,
) -> Expect:
    """Shorthand: ``expect(PASS, "strict logstash", ["A 2"], close="open")``."""
    profs = profiles.split() if isinstance(profiles, str) else list(profiles)
    closes = close.split() if isinstance(close, str) else list(close)
    return Expect(verdict=verdict, profiles=frozenset(profs), events=tuple(events), close=frozenset(closes), **kw)


#: A case's procedure: drives a :class:`~refwire.conform.conversation.Conversation`
#: (server cases) or a client session (client cases) and returns nothing; the
#: conversation records what the testee did.
Procedure = Callable[[Any], Awaitable[None]]


@attrs.frozen(kw_only=True)
class Case:
    """One conformance case (see the module docstring)."""

    id: str
    slug: str
    title: str
    #: The role under test: "server" (refwire plays the client) or "client".
    role: str
    requirement: str
    procedure_text: str
    expects: tuple[Expect, ...]
    run: Procedure
    vectors: tuple[str, ...] = ()
    tags: frozenset[str] = frozenset()
    #: Features the testee must have (``--declare`` can leave them out: UNSUPPORTED).
    features: tuple[str, ...] = ()
    #: Seconds the case may take at ``--time-scale 1``.
    budget: float = 5.0
    #: Needs an observation hook on the testee (``--sink``): UNSUPPORTED without one.
    needs_sink: bool = False
    #: Client cases: how many events the testee client is asked to send.
    events: int = 0
    #: Tokens left out of the judged events (``fnmatch`` patterns), e.g. the
    #: keepalives a server may send at any time; they stay in the wire log.
    ignore: tuple[str, ...] = ()

    def judged(self, tokens: Iterable[str]) -> tuple[str, ...]:
        return tuple(t for t in tokens if not any(fnmatch.fnmatchcase(t, p) for p in self.ignore))

    @property
    def category(self) -> str:
        """``lj.S1.1`` -> ``lj.S1``."""
        return self.id.rsplit(".", 1)[0]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "slug": self.slug,
            "title": self.title,
            "role": self.role,
            "requirement": self.requirement,
            "procedure": self.procedure_text,
            "vectors": list(self.vectors),
            "tags": sorted(self.tags),
            "features": list(self.features),
            "budget_s": self.budget,
            "needs_sink": self.needs_sink,
            "events": self.events,
            "expects": [
                {"verdict": e.verdict.value, "profiles": sorted(e.profiles), "outcome": e.describe(), "note": e.note}
                for e in self.expects
            ],
        }


class CaseBook:
    """One protocol's cases, registered by decorating their procedures.

    Every catalogue builds its cases the same way::

        BOOK = CaseBook("specs/tank/README.md", server_ignore=("ping",))

        @BOOK.server("tk.S1.1", "ping-on-accept", "The broker pings first", "§3.1",
                     "Connect and wait.", [expect(PASS, "*", ["ping"], "open")])
        async def s1_1(c: Conversation) -> None: ...

    ``section`` is joined to the spec path into the case's requirement.
    ``client_wrap`` turns a client case's decorated function into the
    procedure the runner calls with a
    :class:`~refwire.conform.clients.ClientSession` (Lumberjack wraps an
    answering function in its serving loop); without it the function is the
    procedure.  An id or slug registered twice is a programming error.
    """

    def __init__(
        self,
        spec: str,
        *,
        server_ignore: Sequence[str] = (),
        server_budget: float = 5.0,
        client_budget: float = 15.0,
        client_wrap: Callable[[Any], Procedure] | None = None,
    ) -> None:
        self.spec = spec
        self.server_ignore = tuple(server_ignore)
        self.server_budget = server_budget
        self.client_budget = client_budget
        self.client_wrap = client_wrap
        self.cases: list[Case] = []
        self._names: set[str] = set()

    def add(self, case: Case) -> Case:
        for name in (case.id, case.slug):
            if name in self._names:
                raise ValueError(f"conformance case {name!r} registered twice")
            self._names.add(name)
        self.cases.append(case)
        return case

    def server(
        self,
        id: str,
        slug: str,
        title: str,
        section: str,
        procedure: str,
        expects: Sequence[Expect],
        *,
        vectors: Sequence[str] = (),
        tags: Sequence[str] = (),
        features: Sequence[str] = (),
        budget: float | None = None,
        ignore: Sequence[str] | None = None,
        needs_sink: bool = False,
    ) -> Callable[[Procedure], Procedure]:
        """Register the decorated procedure as a server case (refwire plays the client)."""

        def register(fn: Procedure) -> Procedure:
            self.add(
                Case(
                    id=id,
                    slug=slug,
                    title=title,
                    role="server",
                    requirement=f"{self.spec} {section}",
                    procedure_text=procedure,
                    expects=tuple(expects),
                    run=fn,
                    vectors=tuple(vectors),
                    tags=frozenset(tags),
                    features=tuple(features),
                    budget=self.server_budget if budget is None else budget,
                    ignore=self.server_ignore if ignore is None else tuple(ignore),
                    needs_sink=needs_sink,
                )
            )
            return fn

        return register

    def client(
        self,
        id: str,
        slug: str,
        title: str,
        section: str,
        procedure: str,
        expects: Sequence[Expect],
        *,
        events: int,
        vectors: Sequence[str] = (),
        tags: Sequence[str] = (),
        features: Sequence[str] = (),
        budget: float | None = None,
        ignore: Sequence[str] = (),
    ) -> Callable[[Any], Any]:
        """Register the decorated function as a client case (refwire plays the server)."""

        def register(fn: Any) -> Any:
            run: Procedure = self.client_wrap(fn) if self.client_wrap is not None else fn
            self.add(
                Case(
                    id=id,
                    slug=slug,
                    title=title,
                    role="client",
                    requirement=f"{self.spec} {section}",
                    procedure_text=procedure,
                    expects=tuple(expects),
                    run=run,
                    vectors=tuple(vectors),
                    tags=frozenset(tags),
                    features=tuple(features),
                    budget=self.client_budget if budget is None else budget,
                    events=events,
                    ignore=tuple(ignore),
                )
            )
            return fn

        return register


@attrs.define(kw_only=True)
class CaseResult:
    """The record of one case run against one agent."""

    case: Case
    agent: str
    verdict: Verdict
    case_seed: int
    profile: str
    matched_profiles: tuple[str, ...] = ()
    observation: Observation | None = None
    close: dict[str, Any] = attrs.field(factory=dict)
    expected: str = ""
    observed: str = ""
    reason: str = ""
    duration: float = 0.0
    wire_log: list[dict[str, Any]] = attrs.field(factory=list)
    frames: list[dict[str, Any]] = attrs.field(factory=list)
    #: Every keepalive the testee sent (server cases): ``t``, ``token``, ``version``,
    #: ``since_batch_s`` (since the batch it covers was sent), ``covers``.
    keepalives: list[dict[str, Any]] = attrs.field(factory=list)
    replay: str = ""
    exit_status: int | None = None
    #: The ERROR is the runner's own fault (exit status 2), not the testee's.
    harness_fault: bool = False
    run_seed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case.to_json(),
            "agent": self.agent,
            "verdict": self.verdict.value,
            "profile": self.profile,
            "matched_profiles": list(self.matched_profiles),
            "case_seed": self.case_seed,
            "run_seed": self.run_seed,
            "harness_fault": self.harness_fault,
            "expected": self.expected,
            "observed": self.observed,
            "observation": None if self.observation is None else attrs.asdict(self.observation),
            "close": self.close,
            "reason": self.reason,
            "duration_s": round(self.duration, 3),
            "exit_status": self.exit_status,
            "replay": self.replay,
            "frames": self.frames,
            "keepalives": self.keepalives,
            "wire_log": self.wire_log,
        }


def judge(case: Case, obs: Observation, profile: str) -> tuple[Verdict, tuple[str, ...], str, str]:
    """-> (verdict, profiles consistent with what was seen, expected text, reason).

    See the module docstring for the rule.  The profiles are every profile
    one of whose expectations matched, ``profile`` first when it is among
    them, then the rest by name.
    """
    matching = [e for e in case.expects if e.matches(obs)]
    seen = {p for e in matching for p in e.profiles if p != "*"}
    if any("*" in e.profiles for e in matching):
        seen.add(profile)  # an outcome every profile documents is the chosen one's too
    matched = tuple(sorted(seen, key=lambda p: (p != profile, p)))
    mine = [e for e in case.expects if e.names(profile)]
    expected = " | ".join(f"{e.verdict.value}: {e.describe()}" for e in (mine or case.expects))
    for e in matching:
        if e.names(profile):
            return e.verdict, matched, expected, e.note
    if matching:
        e = matching[0]
        if e.verdict in (Verdict.FAIL, Verdict.INFO):
            return e.verdict, matched, expected, e.note
        who = ", ".join(p for p in matched if p != profile)
        why = f"consistent with {who}'s documented behaviour, not {profile}'s"
        return Verdict.NON_STRICT, matched, expected, why + (f": {e.note}" if e.note else "")
    return Verdict.FAIL, matched, expected, "no expected outcome matched"


def predict(case: Case, behaves_as: str, profile: str) -> frozenset[Verdict]:
    """The verdicts a testee behaving exactly as ``behaves_as`` documents for
    ``case`` gets under ``--profile profile``: for each of its expectations,
    the verdict :func:`judge` gives an observation that matches it alone --
    its own verdict when it is ``profile``'s too, else FAIL for a bug, INFO
    for an implementation-defined choice and NON-STRICT for documented
    behaviour.  Empty when the profile documents nothing for the case."""
    out: set[Verdict] = set()
    for e in case.expects:
        if not e.names(behaves_as):
            continue
        if e.names(profile) or e.verdict in (Verdict.FAIL, Verdict.INFO, Verdict.UNSUPPORTED):
            out.add(e.verdict)
        else:
            out.add(Verdict.NON_STRICT)
    return frozenset(out)


def _patterns(spec: str | Sequence[str] | None) -> list[str]:
    if spec is None:
        return []
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    return [p.strip() for p in items if p.strip()]


def select(
    cases: Iterable[Case],
    *,
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
    tags: str | Sequence[str] | None = None,
) -> tuple[list[Case], list[tuple[Case, str]]]:
    """Cases to run, and cases skipped with the reason (``--cases``, ``--exclude``, ``--tags``).

    Patterns match the id or the slug (``fnmatch``: ``lj.S4.*``, ``*bomb*``).
    Cases tagged ``slow`` run only when ``slow`` is among ``tags``; with
    ``tags`` or are named exactly by ``include``; with other ``tags``, only
    cases carrying one of them run.
    """
    inc, exc, want = _patterns(include), _patterns(exclude), set(_patterns(tags))
    run: list[Case] = []
    skipped: list[tuple[Case, str]] = []
    for c in sorted(cases, key=lambda c: id_key(c.id)):
        names = (c.id, c.slug)
        if inc and not any(fnmatch.fnmatchcase(n, p) for p in inc for n in names):
            continue  # not selected: not reported at all
        if any(fnmatch.fnmatchcase(n, p) for p in exc for n in names):
            skipped.append((c, "excluded by --exclude"))
        elif "slow" in c.tags and "slow" not in want and not any(p in names for p in inc):
            skipped.append((c, "tagged slow (run with --tags slow)"))
        elif want - {"slow"} and not (c.tags & want):
            skipped.append((c, f"not tagged {', '.join(sorted(want))}"))
        else:
            run.append(c)
    return run, skipped
