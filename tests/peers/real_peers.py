"""Helpers of the real-peer tests (tests/peers/): building a peer with
peers/build.sh, running a server in a process group of its own, running
``refwire conform`` and reading its verdicts.  The fixtures are in conftest.py."""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.commands import REFWIRE

from refwire.conform.model import Case, Observation, judge, predict
from refwire.protocols import descriptor

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "peers" / "build.sh"
#: Seconds a first build may take here (apt installs included), per peer.
BUILD_TIMEOUT = {"go-lumber": 600.0, "logstash": 900.0, "tank": 1800.0, "seastar": 3600.0}
#: peers/build.sh's exit status when neither the snapshot nor the clone gives the source.
NO_SOURCE = 3
#: Seconds one ``refwire conform`` run may take.
CONFORM_TIMEOUT = 300.0
#: pytest-timeout for a real-peer test: the first one builds, then runs the peer.
def timeout_for(peer: str) -> float:
    """pytest-timeout for a test of ``peer``: its first build, then three conformance runs."""
    return BUILD_TIMEOUT[peer] + 3 * CONFORM_TIMEOUT


TEST_TIMEOUT = max(timeout_for("go-lumber"), timeout_for("logstash"))
#: How the conformance runs are made: seed 1, every budget and wait doubled (a
#: shared 2-core machine), the slow cases left out (they are not named in --tags).
CONFORM_ARGS = ("--seed", "1", "--time-scale", "2", "--format", "json,html", "--quiet")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


# --------------------------------------------------------------------------- processes


def stop(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """End ``proc``'s process group: SIGTERM, then SIGKILL after ``grace`` s.
    The group is signalled only while its leader is not reaped, so the id is
    still ours."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace if sig == signal.SIGTERM else 10.0)
        except subprocess.TimeoutExpired:
            continue


def run(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` in a process group of its own, its whole group killed at ``timeout``."""
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=None if env is None else {**os.environ, **env},
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(proc, grace=2.0)
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(proc.args, timeout, out, err) from None
    finally:
        stop(proc, grace=2.0)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@contextmanager
def server(
    argv: Sequence[str],
    log: Path,
    *,
    port: int | None = None,
    ready: str | None = None,
    deadline: float = 60.0,
    stdin_open: bool = False,
) -> Iterator[tuple[subprocess.Popen[bytes], re.Match[str] | None]]:
    """Run a server until the block ends.  Ready is the line matching the
    regex ``ready`` on its stdout (stderr goes to ``log``; such a server prints
    nothing more on stdout), or else ``port`` on 127.0.0.1 accepting a
    connection (stdout and stderr go to ``log``), within ``deadline`` s.
    ``stdin_open``: its stdin is a pipe left open until the end (for a server
    that stops at EOF on stdin)."""
    with log.open("wb") as err:
        stdout: Any = subprocess.PIPE if ready is not None else err
        stdin: Any = subprocess.PIPE if stdin_open else subprocess.DEVNULL
        proc = subprocess.Popen(list(argv), stdin=stdin, stdout=stdout, stderr=err, start_new_session=True)
    try:
        end = time.monotonic() + deadline
        match: re.Match[str] | None = None
        if ready is not None:
            assert proc.stdout is not None
            with selectors.DefaultSelector() as sel:
                sel.register(proc.stdout, selectors.EVENT_READ)
                while match is None:
                    left = end - time.monotonic()
                    if left <= 0 or not sel.select(left):
                        why = f"printed no line /{ready}/ within {deadline} s"
                        pytest.fail(f"{argv[0]} {why}:\n{_tail(log.read_text())}", pytrace=False)
                    line = proc.stdout.readline().decode(errors="replace")
                    if not line:
                        pytest.fail(f"{argv[0]} exited ({proc.wait()}) before it was ready:\n{_tail(log.read_text())}", pytrace=False)
                    match = re.search(ready, line)
        else:
            assert port is not None
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"{argv[0]} exited ({proc.returncode}) before it listened:\n{_tail(log.read_text())}", pytrace=False)
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
                    break
                except OSError:
                    if time.monotonic() > end:
                        pytest.fail(f"{argv[0]} did not listen on port {port} within {deadline} s", pytrace=False)
                    time.sleep(0.05)  # the next connection attempt, not a readiness guess
        yield proc, match
    finally:
        stop(proc)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- builds


@dataclass(frozen=True)
class Peer:
    """A peer from peers/build.sh: its build directory, or (CI=true only; else
    the test is skipped) why there is none."""

    name: str
    path: Path | None
    reason: str = ""

    def dir(self) -> Path:
        """The build directory; fails the running test when there is none."""
        if self.path is None:
            pytest.fail(f"real peer {self.name} not built (CI=true): {self.reason}", pytrace=False)
        return self.path


def build_peer(peer: str) -> Peer:
    """``peers/build.sh PEER``; skip the test when it cannot be built, except
    with CI=true: then the tests using it fail (in their call phase)."""
    reason: str
    try:
        done = run(["bash", str(BUILD), peer], BUILD_TIMEOUT[peer])
    except subprocess.TimeoutExpired as exc:
        reason = f"peers/build.sh {peer} took more than {exc.timeout:g} s:\n{_tail(str(exc.stderr or ''))}"
    except OSError as exc:
        reason = f"cannot run peers/build.sh: {exc}"
    else:
        lines = done.stdout.strip().splitlines()
        if done.returncode == 0 and lines and Path(lines[-1]).is_dir():
            return Peer(peer, Path(lines[-1]))
        reason = f"peers/build.sh {peer} exited {done.returncode}:\n{_tail(done.stderr)}"
        if done.returncode == NO_SOURCE:
            # (even with CI=true: a machine that has neither the snapshot nor the network
            # cannot run these tests, and says so; a build that fails is a failure)
            pytest.skip(f"real peer {peer}: no source here: {_tail(done.stderr, 2)}")
    if not in_ci():
        pytest.skip(f"real peer {peer} not built: {reason}")
    return Peer(peer, None, reason)


# --------------------------------------------------------------------------- conformance runs


@dataclass(frozen=True)
class Verdicts:
    """One agent's cases from ``refwire conform``'s index.json: id -> entry;
    or, when the peer could not be built (CI=true), the reason, which fails
    every test asking for a verdict."""

    cases: Mapping[str, Mapping[str, Any]]
    unavailable: str | None = None
    #: The report directory each case's record is in.
    out: Mapping[str, Path] | None = None

    @classmethod
    def of(cls, peer: Peer) -> Verdicts | None:
        """None when ``peer`` was built, else the Verdicts that fail with its reason."""
        if peer.path is not None:
            return None
        return cls({}, f"real peer {peer.name} not built (CI=true): {peer.reason}")

    def entry(self, case: str) -> Mapping[str, Any]:
        if self.unavailable is not None:
            pytest.fail(self.unavailable, pytrace=False)
        return self.cases[case]

    def verdict(self, case: str) -> str:
        return str(self.entry(case)["verdict"])

    def matched(self, case: str) -> list[str]:
        return list(self.entry(case).get("matched_profiles") or [])

    def observation(self, case: str) -> Observation:
        """What the testee did in ``case``, from its record (``<agent>/<case>.json``)."""
        e = self.entry(case)
        assert self.out is not None and "reportfile" in e, f"{case}: no record"
        rec = json.loads((self.out[case] / str(e["reportfile"])).read_text())
        o = rec["observation"]
        assert o is not None, f"{case}: {e['verdict']} with no observation ({e.get('reason', '')})"
        return Observation(events=tuple(o["events"]), close=str(o["close"]), facts=tuple(o["facts"]))

    def describe(self, case: str) -> str:
        e = self.entry(case)
        return f"{case}: {e['verdict']} (consistent with {', '.join(self.matched(case)) or 'no profile'}) {e.get('reason', '')}".strip()


@dataclass(frozen=True)
class PeerRun:
    """One real program's conformance run, as the compatibility matrix shows it."""

    #: The peer's name in peers/ (the build), and the program run.
    peer: str
    program: str
    role: str
    protocol: str
    #: The profile the run was judged against: the peer's own.
    profile: str
    verdicts: Verdicts
    #: How the program was run, for the matrix page.
    how: str = ""
    #: The program's log, when a test reads it.
    log: str = ""


def conform(args: Sequence[str], out: Path, protocol: str = "lumberjack", env: Mapping[str, str] | None = None) -> Verdicts:
    """``refwire conform PROTOCOL ARGS`` with the common options, reports in
    ``out``; ``env``: added to the environment (an ``--exec`` testee inherits it)."""
    argv = [*REFWIRE, "conform", protocol, *args, *CONFORM_ARGS, "--out", str(out)]
    done = run(argv, CONFORM_TIMEOUT, env)
    # 0: all passed, 1: some case did not; anything else is the harness's fault.
    if done.returncode not in (0, 1):
        pytest.fail(f"{' '.join(argv)} exited {done.returncode}:\n{_tail(done.stdout + done.stderr, 30)}", pytrace=False)
    index = json.loads((out / "index.json").read_text())
    (agent,) = index["agents"].values()
    return Verdicts(agent, out={cid: out for cid in agent})


def merge(*runs: Verdicts) -> Verdicts:
    """Later runs' cases replace earlier ones' (a case left out of a run is SKIPPED there)."""
    cases: dict[str, Mapping[str, Any]] = {}
    outs: dict[str, Path] = {}
    for r in runs:
        for cid, e in r.cases.items():
            if e["verdict"] != "SKIPPED" or cid not in cases:
                cases[cid] = e
                if r.out is not None:
                    outs[cid] = r.out[cid]
    return Verdicts(cases, out=outs)


def want(case: str, verdict: str, *, xfail: str | None = None) -> Any:
    """A parameter of the per-case tests: the case and its right verdict;
    ``xfail``: why the runner does not give that verdict yet (strict: the day
    it does, the test turns red and the mark comes off)."""
    marks = [pytest.mark.xfail(strict=True, raises=AssertionError, reason=xfail)] if xfail else []
    return pytest.param(case, verdict, marks=marks, id=case)


def attributed(cases: Sequence[Any], missing: Mapping[str, str], skip: Sequence[str] = ()) -> list[Any]:
    """The ids of ``cases`` (:func:`want` parameters) for a "behaves like <the
    peer's profile>" test; those in ``missing`` a strict xfail with its reason."""
    out = []
    for p in cases:
        case = p.values[0]
        if case in skip:
            continue
        marks = [pytest.mark.xfail(strict=True, raises=AssertionError, reason=missing[case])] if case in missing else []
        out.append(pytest.param(case, marks=marks, id=case))
    return out


# --------------------------------------------------------------------------- verdicts derived from the case data


def catalogue_cases(protocol: str) -> dict[str, Case]:
    """``protocol``'s conformance cases by id (its descriptor's catalogue)."""
    return {c.id: c for c in descriptor(protocol, "conform").load("conform").cases}


def derived(
    protocol: str,
    role: str,
    *,
    leave_out: Sequence[str] = (),
    known: Mapping[str, str] | None = None,
    slow: bool = False,
) -> list[Any]:
    """Every ``role`` case of ``protocol`` (no ``slow`` one unless ``slow``) as
    a test parameter, but those in ``leave_out``; a case in ``known`` is a
    strict xfail with that reason (a runner or profile defect not fixed yet:
    the day it is, the test turns red and the entry goes)."""
    known = known or {}
    params = []
    for cid, c in catalogue_cases(protocol).items():
        if c.role != role or cid in leave_out or ("slow" in c.tags and not slow):
            continue
        marks = [pytest.mark.xfail(strict=True, raises=AssertionError, reason=known[cid])] if cid in known else []
        params.append(pytest.param(cid, marks=marks, id=cid))
    unknown = set(known) - {p.values[0] for p in params}
    assert not unknown, f"known defects name cases that are not run: {sorted(unknown)}"
    return params


def assert_as_predicted(verdicts: Verdicts, protocol: str, case_id: str, peer_profile: str) -> None:
    """The run was made with ``--profile peer_profile`` against the real peer:
    its verdict is one the profile predicts for the case (PASS, FAIL where the
    profile names a bug, INFO where the choice is the implementation's,
    UNSUPPORTED where it documents a left-out feature), what was seen is
    consistent with that profile, and judged under ``strict`` the same
    observation gets what the profile predicts there (PASS where its
    behaviour is strict's, NON-STRICT where it documents another, FAIL for a
    bug).  So a wrong sentence in a profile fails here."""
    case = catalogue_cases(protocol)[case_id]
    verdict = verdicts.verdict(case_id)
    if verdict == "UNSUPPORTED" and str(verdicts.entry(case_id).get("reason", "")).startswith("declared unsupported"):
        return  # the run declared a feature of the case left out (--declare)
    own = {v.value for v in predict(case, peer_profile, peer_profile)}
    assert own, f"{case_id}: the {peer_profile} profile documents no outcome for this case; {verdicts.describe(case_id)}"
    assert verdict in own, f"{case_id}: {peer_profile} predicts {sorted(own)}; {verdicts.describe(case_id)}"
    if verdict == "UNSUPPORTED":
        return
    assert peer_profile in verdicts.matched(case_id), f"{case_id}: not consistent with {peer_profile}; {verdicts.describe(case_id)}"
    obs = verdicts.observation(case_id)
    strict, _, _, why = judge(case, obs, "strict")
    under_strict = {v.value for v in predict(case, peer_profile, "strict")}
    assert strict.value in under_strict, (
        f"{case_id}: under --profile strict, {peer_profile} predicts {sorted(under_strict)}, the observation "
        f"{obs.describe()} gets {strict.value} ({why})"
    )
