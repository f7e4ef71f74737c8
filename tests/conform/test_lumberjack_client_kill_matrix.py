"""The kill matrix of the Lumberjack client cases (``lj.C…``, the §9 testee
contract of specs/lumberjack/README.md): every case can FAIL.

Each broken client below is refwire's own client (:func:`client_for_simulation`)
with one plausible mistake a real Lumberjack client makes -- its Sans-IO
machine subclassed where the mistake is in how it reads the server (§2.5 the
``A`` frame, §3.3 acks, §3.4 keepalives, §3.7 partial acks and resending, §3.9
the ack timeout, §4 errors), its configuration changed where the mistake is a
setting (§3.2 running sequence numbers, giving up at once).  They run inside
the simulator (virtual time: the 40 s cases ``lj.C2.2`` and ``lj.C3.1`` take
no real time), and the matrix proves:

* refwire's own client, v2 and v1, PASSES every case it can run (a v2 client
  has nothing to show in ``lj.C2.3``: UNSUPPORTED);
* each broken client FAILS every case aimed at it (and the same client without
  its mistake passes them: the FAIL is the mistake's);
* the aimed cases together are every ``lj.C`` case: none is too lenient to
  catch anything;
* no broken testee ever gets an ERROR (that is the runner's own fault).

``lj.C5.1`` (TLS, §1) does not run inside the simulator: it is killed over real
TCP by tests/conform/peers/refwire_client.py's ``plaintext`` mode, a client
that ignores its TLS settings.

Run this file as a
script (``PYTHONPATH=tests python tests/conform/test_lumberjack_client_kill_matrix.py``)
to print the whole matrix: every broken client against every sim case.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import attrs
import pytest
import trio
from support.conform_clients import command
from support.conform_clients import run_lumberjack_client_cases as run_exec

from refwire.conform.cases.lumberjack import CATALOGUE, client_for_simulation
from refwire.conform.model import CaseResult, Verdict
from refwire.conform.runner import RunConfig
from refwire.conform.simulated import run_clients_in_simulator
from refwire.errors import LocalProtocolError
from refwire.lumberjack import client as client_mod
from refwire.lumberjack.connection import ClientConnection, State
from refwire.lumberjack.frames import ACK, PROTOCOL, V1, EncodedWindow

pytestmark = pytest.mark.timeout(120)

SimClient = Callable[[Callable[[], Awaitable[trio.abc.Stream]], Mapping[str, str]], Awaitable[int]]

CLIENT = sorted(c.id for c in CATALOGUE.cases if c.role == "client")
#: What runs inside the simulator: every client case but the TLS one.
SIM = sorted(c.id for c in CATALOGUE.cases if c.role == "client" and "tls" not in c.tags)
TLS = "lj.C5.1"


def refwire_client(machine: type[ClientConnection] = ClientConnection, **config: Any) -> SimClient:
    """refwire's simulator client (windows of 3, at most 5 attempts per window)
    with ``machine`` as its connection's Sans-IO machine and ``config``
    overriding its :class:`~refwire.lumberjack.client.ClientConfig`."""

    async def run(connect: Callable[[], Awaitable[trio.abc.Stream]], values: Mapping[str, str]) -> int:
        base = client_mod.ClientConfig
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(client_mod, "ClientConfig", lambda **kw: base(**{**kw, **config}))
            mp.setattr(client_mod, "ClientConnection", machine)
            return await client_for_simulation(connect, values)

    return run


# --------------------------------------------------------------------------- the mistakes


class KeepaliveIsAck(ClientConnection):
    """Takes any ``A`` for the ack of its whole window, a keepalive ``A 0`` too (§3.4)."""

    def _on_ack(self, ver: int, seq: int, offset: int) -> None:
        w = self._win
        if seq == 0 and w is not None and self.state is State.AWAITING_ACK:
            seq = w.seqs[-1]
        super()._on_ack(ver, seq, offset)


class FirstAckIsWhole(ClientConnection):
    """Takes the first ack naming an event of its window for the ack of the
    whole window: it does not know acks may be partial (§3.3, §3.7)."""

    def _on_ack(self, ver: int, seq: int, offset: int) -> None:
        w = self._win
        if seq != 0 and w is not None and seq in w.seqs:
            seq = w.seqs[-1]
        super()._on_ack(ver, seq, offset)


class ClampsAcks(ClientConnection):
    """Reads an ack as "everything up to there": one beyond its window acks all
    of it, where it names no event and must close the connection (§3.3, §4)."""

    def _on_ack(self, ver: int, seq: int, offset: int) -> None:
        w = self._win
        if w is not None and seq > w.seqs[-1]:
            seq = w.seqs[-1]
        super()._on_ack(ver, seq, offset)


class KeepsHighestAck(ClientConnection):
    """Ignores an ack below one already received instead of closing (go-lumber's
    client: it never checks that acks go forward, §3.3, §4)."""

    def _on_ack(self, ver: int, seq: int, offset: int) -> None:
        w = self._win
        if w is not None and w.index is None and 0 < seq < w.acked:
            self._last_activity = self._now
            return
        super()._on_ack(ver, seq, offset)


class LatestAckWins(ClientConnection):
    """Takes every ack for the window's state, one going backwards too: the
    events it no longer covers are unacked again (and resent); it does not
    close the connection (§3.3, §4)."""

    def _on_ack(self, ver: int, seq: int, offset: int) -> None:
        w = self._win
        if w is not None and w.index is None and 0 < seq < w.acked:
            w.acked = seq
            self._last_activity = self._now
            return
        super()._on_ack(ver, seq, offset)


class IgnoresAckVersion(ClientConnection):
    """Never looks at an ack's version byte (§3.3, §3.10: ``1A`` on a v2 connection is an error)."""

    def _on_ack(self, ver: int, seq: int, offset: int) -> None:
        super()._on_ack(self.version, seq, offset)


def _six_byte_frames(buf: bytes | bytearray, base: int) -> Iterator[tuple[int, int, int]]:
    """The server's stream as 6-byte frames, any not of type ``A`` skipped."""
    for pos in range(0, len(buf) - 5, 6):
        if buf[pos + 1] == ACK:
            yield buf[pos], int.from_bytes(buf[pos + 2 : pos + 6], "big"), pos


class SkipsUnknownFrames(ClientConnection):
    """Reads the server's stream as 6-byte frames and skips a type it does not
    know instead of closing (§2: a server sends only ``A``; §4)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._scan_acks = _six_byte_frames


class KeepaliveDoesNotRearm(ClientConnection):
    """Counts its 30 s ack timeout from the window's send: keepalives do not re-arm it (§3.4, §3.9)."""

    def _on_ack(self, ver: int, seq: int, offset: int) -> None:
        armed = self._last_activity
        super()._on_ack(ver, seq, offset)
        if seq == 0:
            self._last_activity = armed


class ForgetsPartialAcks(ClientConnection):
    """After a failure resends its whole window, the events a partial ack
    covered too (go-lumber's client, §3.7)."""

    def unacked(self) -> list[Any]:
        w = self._win
        return [] if w is None else list(w.events)

    def unacked_encoded(self) -> EncodedWindow:
        w = self._win
        return super().unacked_encoded() if w is None else w.encoded.tail(len(w.events))


class StaleAcksIgnored(ClientConnection):
    """With a running counter (``sequence="running"``), takes an ack below its
    window for a stale duplicate, as TCP would, and waits on (§3.2, §3.3: it
    names no event of the window -- go-lumber's count ack -- and must close)."""

    def _on_ack(self, ver: int, seq: int, offset: int) -> None:
        w = self._win
        if seq != 0 and w is not None and w.index is not None and seq not in w.index and seq < w.seqs[0]:
            return
        super()._on_ack(ver, seq, offset)


class WholeAcksPerRead(ClientConnection):
    """Expects every read to hold whole acks (``recv(6)`` then decode): a
    read holding part of one is garbage (§1, §2.5: TCP is a byte stream)."""

    def _pump(self) -> None:
        super()._pump()
        if self._buf:
            raise LocalProtocolError(f"a read of {len(self._buf)} bytes is no ack", protocol=PROTOCOL, frame="A")


class VersionFirst(ClientConnection):
    """Checks every ack's version byte before anything else, keepalives
    included: chokes on Logstash's ``2A 0`` on a v1 connection (§3.4)."""

    def _on_ack(self, ver: int, seq: int, offset: int) -> None:
        if ver != self.version:
            raise LocalProtocolError(f"ack with version byte {chr(ver)!r}", protocol=PROTOCOL, frame="A", field="version")
        super()._on_ack(ver, seq, offset)


#: refwire's own client, as it is: v2 (the catalogue's) and v1.
GOOD: dict[str, SimClient] = {"refwire-v2": refwire_client(), "refwire-v1": refwire_client(version=V1)}

#: name -> (the mistake, the broken client, the cases that must FAIL it).
BROKEN: dict[str, tuple[str, SimClient, set[str]]] = {
    "keepalive-is-ack": ("takes A 0 for the window's ack", refwire_client(KeepaliveIsAck), {"lj.C2.1", "lj.C2.2"}),
    "first-ack-is-whole": (
        "takes the first partial ack for the whole window",
        refwire_client(FirstAckIsWhole),
        {"lj.C1.2", "lj.C3.2"},
    ),
    "clamps-acks": ("takes an ack beyond its window for the whole window", refwire_client(ClampsAcks), {"lj.C4.1"}),
    "latest-ack-wins": ("takes an ack going backwards for the truth", refwire_client(LatestAckWins), {"lj.C4.2"}),
    "keeps-highest-ack": (
        "ignores an ack going backwards (go-lumber's client)",
        refwire_client(KeepsHighestAck),
        {"lj.C4.2"},
    ),
    "ignores-ack-version": ("takes an ack with the other version byte", refwire_client(IgnoresAckVersion), {"lj.C4.3"}),
    "skips-unknown-frames": ("skips an unknown frame type", refwire_client(SkipsUnknownFrames), {"lj.C4.4"}),
    "keepalive-does-not-rearm": (
        "keepalives do not re-arm its 30 s ack timeout",
        refwire_client(KeepaliveDoesNotRearm),
        {"lj.C2.2"},
    ),
    "gives-up-at-once": (
        "never reconnects: gives up at the first failure",
        refwire_client(max_attempts=1),
        {"lj.C3.1", "lj.C3.2"},
    ),
    # (on lj.C3.2 this is go-lumber's documented behaviour: NON-STRICT, see below)
    "forgets-partial-acks": ("resends acked events after a failure", refwire_client(ForgetsPartialAcks), {"lj.C4.2"}),
    "running-counter": (
        "numbers a running counter, ignores an ack below its window",
        refwire_client(StaleAcksIgnored, sequence="running"),
        {"lj.C1.1"},
    ),
    "whole-acks-per-read": ("cannot reassemble an ack split across reads", refwire_client(WholeAcksPerRead), {"lj.C1.3"}),
    "v1-chokes-on-2A0": ("v1: closes on Logstash's 2A 0 keepalive", refwire_client(VersionFirst, version=V1), {"lj.C2.3"}),
}


def run_sim(client: SimClient, include: list[str] | None = None, profile: str = "strict") -> dict[str, CaseResult]:
    """The sim cases (``include``, else all of them, the slow ones too) against ``client``."""
    run = run_clients_in_simulator(
        attrs.evolve(CATALOGUE, sim_client=client),
        RunConfig(seed=5, role="client", profile=profile),
        include=include or SIM,
    )
    return {r.case.id: r for r in run.result.results}


def row(results: Mapping[str, CaseResult]) -> str:
    """One line per case: the verdict, what was observed and why."""
    return "\n".join(f"  {cid} {r.verdict.value}: {r.observed} -- {r.reason}" for cid, r in sorted(results.items()))


def verdicts(results: Mapping[str, CaseResult]) -> dict[str, Verdict]:
    return {cid: r.verdict for cid, r in results.items()}


@pytest.mark.parametrize("name", sorted(GOOD))
def test_refwire_passes_every_case_it_can_run(name: str) -> None:
    got = run_sim(GOOD[name])
    want = dict.fromkeys(SIM, Verdict.PASS)
    if name == "refwire-v2":
        want["lj.C2.3"] = Verdict.UNSUPPORTED  # the case needs a v1 client
    assert verdicts(got) == want, f"{name}:\n{row(got)}"


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_clients_fail_the_cases_aimed_at_them(name: str) -> None:
    what, client, aimed = BROKEN[name]
    got = run_sim(client)  # every sim case: no ERROR anywhere, and the whole row when it fails
    failed = {cid for cid, r in got.items() if r.verdict is Verdict.FAIL}
    assert failed >= aimed, f"{name} ({what}) is not caught by {sorted(aimed - failed)}:\n{row(got)}"
    assert all(r.verdict is not Verdict.ERROR for r in got.values()), f"{name}:\n{row(got)}"


def test_every_client_case_is_killed() -> None:
    assert set(CLIENT) == set(SIM) | {TLS}
    assert set(SIM) <= set().union(*(aimed for _, _, aimed in BROKEN.values()))


def test_a_client_whose_windows_are_too_small_for_the_backwards_ack_is_unsupported_not_judged() -> None:
    """lj.C4.2 needs a window of 3 events for ``A 2, A 1``: a client sending
    windows of 2 is acked normally and the case has nothing to judge -- whatever
    it would do with a backwards ack (go-lumber's client would keep the connection)."""
    for client in (refwire_client(window_size=2), refwire_client(KeepsHighestAck, window_size=2)):
        got = run_sim(client, ["lj.C4.2"])
        assert verdicts(got) == {"lj.C4.2": Verdict.UNSUPPORTED}, row(got)
        assert "no window could carry the bad frame" in got["lj.C4.2"].observed, row(got)


def test_forgetting_a_partial_ack_is_go_lumbers_behaviour_on_a_reset() -> None:
    """At-least-once allows the resend (§3.7): lj.C3.2 documents it as go-lumber's
    client does it -- PASS under that profile, NON-STRICT under strict, not FAIL."""
    client = BROKEN["forgets-partial-acks"][1]
    for profile, want in (("strict", Verdict.NON_STRICT), ("go-lumber", Verdict.PASS)):
        got = run_sim(client, ["lj.C3.2"], profile)
        assert verdicts(got) == {"lj.C3.2": want}, f"{profile}:\n{row(got)}"
        assert "resent an acked event" in got["lj.C3.2"].observed, row(got)


async def test_a_client_ignoring_its_tls_settings_fails_the_tls_case() -> None:
    run = await run_exec(command("--mode plaintext"), include=TLS)
    got = {r.case.id: r for r in run.results}
    assert verdicts(got) == {TLS: Verdict.FAIL}, row(got)


def matrix() -> str:
    """Every broken client against every sim case: the whole matrix, for a person."""
    lines = []
    for name, (what, client, aimed) in sorted(BROKEN.items()):
        got = run_sim(client)
        failed = sorted(cid for cid, r in got.items() if r.verdict is Verdict.FAIL)
        others = sorted(f"{cid}={r.verdict.value}" for cid, r in got.items() if r.verdict not in (Verdict.PASS, Verdict.FAIL))
        lines.append(f"{name}: {what}\n  aimed {sorted(aimed)}\n  FAIL  {failed}\n  other {others}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(matrix())
