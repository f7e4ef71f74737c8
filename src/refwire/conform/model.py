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
(INFO); nothing matching is a FAIL that shows Expected and Observed, and whose
reason names the first thing that differed from the closest expectation
("kept the connection open until the case stopped waiting; expected: closed
(FIN or RST)"): see :func:`explain_mismatch`.

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
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
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
    "describe_observed",
    "explain_mismatch",
    "id_key",
    "judge",
    "predict",
    "select",
    "tail_lines",
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


def describe_observed(obs: Observation, close: Mapping[str, Any] | None = None) -> str:
    """:meth:`Observation.describe`, told apart where refwire ended the connection.

    ``close`` is a result's close record (``{"by": "refwire", "how": "RST"}``).
    An observation whose close is ``open`` means the testee never closed the
    connection; when refwire itself then reset it (a case that resets on
    purpose), that reads ``then open until refwire reset it`` rather than a
    bare ``then open`` that looks like the testee ignored the reset.
    """
    text = obs.describe()
    if obs.close == "open" and close and close.get("by") == "refwire" and close.get("how") == "RST":
        text += " until refwire reset it"
    return text


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def tail_lines(text: str, lines: int = 20) -> tuple[list[str], int]:
    """The last ``lines`` lines of ``text`` (trailing blank lines left out)
    and how many it had, with terminal escape codes dropped and other control
    characters shown as ``?`` (safe in a terminal, in HTML and in XML)."""
    text = _CONTROL.sub("?", _ANSI.sub("", text.replace("\r\n", "\n").replace("\r", "\n")))
    all_lines = text.rstrip().splitlines()
    return all_lines[-lines:] if lines > 0 else [], len(all_lines)


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
            names = ", ".join(v.value for v in Verdict if v in EXPECTABLE)  # in a fixed order, not the set's
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
    #: The run id the case's names and markers carry (``--run-id``); empty when none.
    run_id: str = ""

    def observed_text(self) -> str:
        """What was observed, as reports show it (see :func:`describe_observed`)."""
        if self.observation is None:
            return self.observed
        return describe_observed(self.observation, self.close)

    def testee_process(self) -> dict[str, Any] | None:
        """The testee process's record (client cases run with ``--exec``):
        ``argv``, ``exit`` and its ``stdout``/``stderr`` as kept; None without one."""
        for e in reversed(self.wire_log):
            if e.get("kind") == "process":
                return dict(e)
        return None

    def testee_stderr(self, lines: int = 20) -> tuple[list[str], int]:
        """The last ``lines`` lines of the testee process's stderr (control
        characters and terminal colour codes left out) and how many lines it
        had; ``([], 0)`` without a process or when it wrote nothing there."""
        proc = self.testee_process()
        text = str(proc.get("stderr") or "") if proc else ""
        return tail_lines(text, lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case.to_json(),
            "agent": self.agent,
            "verdict": self.verdict.value,
            "profile": self.profile,
            "matched_profiles": list(self.matched_profiles),
            "case_seed": self.case_seed,
            "run_seed": self.run_seed,
            "run_id": self.run_id,
            "harness_fault": self.harness_fault,
            "expected": self.expected,
            "observed": self.observed_text(),
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
    return Verdict.FAIL, matched, expected, explain_mismatch(case, obs, profile)


def _progress(pattern: Sequence[str], tokens: Sequence[str]) -> tuple[int, str | None]:
    """How far ``tokens`` follow ``pattern`` (see :meth:`Expect.matches`):
    the most leading tokens some prefix of the pattern accounts for, and the
    pattern item wanted next at that point (None: the pattern had ended).
    ``tokens`` match in full when that is ``(len(tokens), None)``."""
    memo: dict[tuple[int, int], tuple[int, str | None]] = {}

    def walk(i: int, j: int) -> tuple[int, str | None]:
        if (i, j) in memo:
            return memo[i, j]
        if j == len(pattern):
            best: tuple[int, str | None] = (i, None)
        elif pattern[j] == "...":
            best = (-1, None)
            for k in range(i, len(tokens) + 1):  # ties: the fewest tokens swallowed
                got = walk(k, j + 1)
                if got[0] > best[0] or (got[0] == best[0] and best[1] is not None and got[1] is None):
                    best = got
        elif i < len(tokens) and fnmatch.fnmatchcase(tokens[i], pattern[j]):
            best = walk(i + 1, j + 1)
        else:
            best = (i, pattern[j])
        memo[i, j] = best
        return best

    return walk(0, 0)


def _agreement(e: Expect, obs: Observation) -> int:
    """How many of ``e``'s facts ``obs`` shows: each leading token in order,
    the whole token list, the close, each required fact."""
    done, want = _progress(e.events, obs.events)
    whole = done == len(obs.events) and want is None
    facts = sum(any(fnmatch.fnmatchcase(o, f) for o in obs.facts) for f in e.facts)
    return done + whole + (obs.close in e.close) + facts


_CLOSE_SEEN = {
    "FIN": "closed the connection (FIN)",
    "RST": "reset the connection (RST)",
    "open": "kept the connection open until the case stopped waiting",
    "refused": "refused the connection",
}

_CLOSE_WANTED = {"FIN": "closed (FIN)", "RST": "reset (RST)", "open": "kept open", "refused": "refused"}


def _wanted_close(closes: frozenset[str]) -> str:
    kinds = [k for k in CLOSE_KINDS if k in closes] + sorted(closes - set(CLOSE_KINDS))
    words = []
    if "FIN" in closes and "RST" in closes:
        words.append("closed (FIN or RST)")
        kinds = [k for k in kinds if k not in ("FIN", "RST")]
    words += [_CLOSE_WANTED.get(k, k) for k in kinds]
    return " or ".join(words)


def _code(items: Iterable[str]) -> str:
    return ", ".join(f"`{t}`" for t in items)


def _first_difference(e: Expect, obs: Observation) -> str | None:
    """The first thing ``obs`` does differently from ``e``: its tokens in
    order, then how the connection ended, then the facts (None: it matches)."""
    tokens = obs.events
    done, want = _progress(e.events, tokens)
    if done < len(tokens) or want is not None:
        after = f" after `{tokens[done - 1]}`" if done else ""
        if done == len(tokens):  # the tokens ran out before the pattern
            return f"sent nothing{after}; expected: `{want}`"
        if want is None:  # the pattern ran out before the tokens
            return f"sent `{tokens[done]}`{after}; expected: nothing" + (" more" if done else "")
        return f"sent `{tokens[done]}`{after or ' first'}; expected: `{want}`"
    if obs.close not in e.close:
        return f"{_CLOSE_SEEN.get(obs.close, obs.close)}; expected: {_wanted_close(e.close)}"
    for f in e.facts:
        if any(fnmatch.fnmatchcase(o, f) for o in obs.facts):
            continue
        # the observed fact that says most about the same thing (shares the most words)
        words = set(f.lower().split())
        spare = [o for o in obs.facts if not any(fnmatch.fnmatchcase(o, g) for g in e.facts)]
        score, near = max(((len(words & set(o.lower().split())), o) for o in spare), default=(0, ""), key=lambda t: t[0])
        if score:
            return f"`{near}`; expected: `{f}`"
        if obs.facts:
            return f"noted {_code(obs.facts)}; expected also: `{f}`"
        return f"noted nothing; expected: `{f}`"
    return None


def explain_mismatch(case: Case, obs: Observation, profile: str) -> str:
    """Why ``obs`` matched none of ``case``'s expectations, in one line: the
    first thing that differed from the closest one ("kept the connection open
    until the case stopped waiting; expected: closed (FIN or RST)").

    The closest is, among the outcomes ``profile`` documents as PASS (else
    any of its outcomes but its documented bugs, else every outcome), the one
    agreeing with the most of what was observed -- the longest run of leading
    tokens, the close, the facts -- the first written on a tie.  When there
    is more than one to choose from, the reason says which it was.
    """
    mine = [e for e in case.expects if e.names(profile)]
    pool = (
        [e for e in mine if e.verdict is Verdict.PASS]
        or [e for e in mine if e.verdict is not Verdict.FAIL]
        or mine
        or list(case.expects)
    )
    if not pool:
        return "no expected outcome matched (the case has none)"
    best = max(pool, key=lambda e: (_agreement(e, obs), -pool.index(e)))
    diff = _first_difference(best, obs)
    if diff is None:  # cannot happen for an observation that matched nothing
        return "no expected outcome matched"
    if len(pool) > 1:
        who = "every profile" if "*" in best.profiles else ", ".join(sorted(best.profiles))
        diff += f" (closest: the {best.verdict.value} outcome for {who})"
    return diff


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
        if e.names(profile) or e.verdict in (Verdict.FAIL, Verdict.INFO):  # as judge(): another profile's UNSUPPORTED is NON-STRICT
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
