"""Testing CLIENTS: refwire plays the server (``refwire conform PROTOCOL --client``).

Per case the runner listens on 127.0.0.1 (a port of its own, ``--listen`` or
``--from-port``), then either runs the testee command once (``--exec``) or
prints one line for a person or a script to connect a client by hand.  The
case's procedure gets a :class:`ClientSession`: it accepts the client's
connections (a case may need several: reconnect-and-resend cases), answers on
each through a :class:`~refwire.conform.conversation.Conversation` (misbehaving
on purpose where the case says so) and notes facts.  The client's exit status
is a fact too (``exit 0``: the client believes every event was acked), which
the case compares with what refwire saw.

The testee contract (placeholders, environment, exit statuses) is
``specs/lumberjack/README.md`` §9.  Every wait is bounded by the case budget x
``--time-scale``; the testee process is killed at the budget's end; its
stdout and stderr are kept up to :data:`MAX_OUTPUT` bytes each.  An ``--exec``
that cannot start is a harness fault (ERROR, exit status 2); exit status 127
means the testee does not support the case (UNSUPPORTED).
"""

from __future__ import annotations

import atexit
import math
import os
import random
import shlex
import shutil
import ssl
import subprocess
import tempfile
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from .conversation import Conversation
from .model import Case, CaseResult, Observation, Verdict, case_seed, describe_observed, judge
from .runner import Catalogue, RunConfig, _unsupported_reason

__all__ = [
    "MAX_OUTPUT",
    "PLACEHOLDERS",
    "ClientSession",
    "ClientSetup",
    "TlsMaterial",
    "announce_line",
    "close_listeners",
    "expand_command",
    "open_case_listener",
    "prepare_listeners",
    "run_client_case",
]

#: Bytes of the testee's stdout and of its stderr kept in a case's record.
MAX_OUTPUT = 8192
#: The placeholders ``--exec`` substitutes.
PLACEHOLDERS = ("host", "port", "case", "slug", "events", "seed", "tls_ca", "controller")
#: Exit status meaning "this testee does not support the case".
EXIT_UNSUPPORTED = 127


@attrs.frozen
class TlsMaterial:
    """A CA and a server certificate for 127.0.0.1/localhost, made at run time.

    Made in a temporary directory unless one is given; :meth:`remove` deletes
    that directory (the run's end does, and the interpreter's exit at the latest).
    """

    ca_file: str
    server_context: ssl.SSLContext
    #: The temporary directory this material made (None: the caller's directory).
    temporary: str | None = None

    def remove(self) -> None:
        if self.temporary is not None:
            shutil.rmtree(self.temporary, ignore_errors=True)

    @classmethod
    def create(cls, directory: str | None = None) -> TlsMaterial:
        """Make them with trustme (a runtime dependency for exactly this)."""
        import trustme

        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        temporary = None if directory else tempfile.mkdtemp(prefix="refwire-conform-tls-")
        if temporary is not None:
            atexit.register(shutil.rmtree, temporary, True)
        d = Path(directory or temporary or ".")
        d.mkdir(parents=True, exist_ok=True)
        ca_file = d / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(ctx)
        return cls(str(ca_file), ctx, temporary)


@attrs.define(kw_only=True)
class ClientSetup:
    """How client cases reach the testee (``--client`` options)."""

    #: The command template (``--exec``); None: manual mode (print the port, wait).
    exec_template: str | None = None
    listen_host: str = "127.0.0.1"
    #: Port of case ``i`` (0 = any free port); ``from_port``: consecutive ports.
    listen_port: int = 0
    from_port: int | None = None
    #: "port" (a port per case) or "sequential" (one port, cases in connection order).
    select: str = "port"
    #: Made on first use by a case tagged ``tls``.
    tls: TlsMaterial | None = None
    #: Manual mode: where the "CASE SLUG HOST:PORT events=N" lines go.
    announce: Callable[[str], None] = print
    #: Listeners opened before the run (manual ``--select port``: all at once), by case id.
    listeners: dict[str, trio.SocketListener] = attrs.field(factory=dict)
    #: One shared listener (``--select sequential``).
    shared: trio.SocketListener | None = None
    #: Opens a case's listener instead of TCP -- the simulator's network:
    #: case -> (listener, host, port).  TLS cases are SKIPPED with it.
    open_listener: Callable[[Case], Awaitable[tuple[trio.abc.Listener[Any], str, int]]] | None = None
    #: Runs the testee in this process instead of ``--exec`` (refwire's own
    #: client inside the simulator): the placeholders' values -> exit status.
    in_process: Callable[[Mapping[str, str]], Awaitable[int]] | None = None
    _next_port: int = 0

    def tls_for(self, case: Case) -> TlsMaterial | None:
        if "tls" not in case.tags:
            return None
        if self.tls is None:
            self.tls = TlsMaterial.create()
        return self.tls

    def port_for(self, index: int) -> int:
        if self.from_port is not None:
            return self.from_port + index
        return self.listen_port


async def open_case_listener(host: str, port: int) -> trio.SocketListener:
    listeners = await trio.open_tcp_listeners(port, host=host)
    return listeners[0]


def _port(listener: trio.SocketListener) -> int:
    return int(listener.socket.getsockname()[1])


def expand_command(template: str, values: dict[str, str]) -> list[str]:
    """``--exec`` -> argv.  The template is split like a shell would
    (:func:`shlex.split`), then each placeholder is replaced inside each word;
    a word that holds whitespace (a script for ``sh -c``) gets the values
    shell-quoted (:func:`shlex.quote`).  No shell runs unless the template
    names one."""
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise ValueError(f"--exec: {exc}") from None
    if not words:
        raise ValueError("--exec: empty command")
    out = []
    for w in words:
        quote = any(ch.isspace() for ch in w)
        for name in PLACEHOLDERS:
            key = "{" + name + "}"
            if key in w:
                w = w.replace(key, shlex.quote(values[name]) if quote else values[name])
        out.append(w)
    return out


class _Output:
    """The first and last bytes of a stream, at most :data:`MAX_OUTPUT` in all."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = MAX_OUTPUT // 2 - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        del self.tail[: max(0, len(self.tail) - MAX_OUTPUT // 2)]

    def text(self) -> str:
        skipped = self.total - len(self.head) - len(self.tail)
        mid = f"\n[... {skipped} bytes left out ...]\n" if skipped > 0 else ""
        return self.head.decode(errors="replace") + mid + self.tail.decode(errors="replace")


class ClientSession:
    """What a client case's procedure drives: the listener, the client's
    connections, facts, and (``--exec``) the testee process."""

    def __init__(
        self,
        case: Case,
        catalogue: Catalogue,
        cfg: RunConfig,
        listener: trio.abc.Listener[Any],
        nursery: trio.Nursery,
        *,
        seed: int,
        deadline: float,
        manual: bool,
    ) -> None:
        self.case = case
        self.catalogue = catalogue
        self.events = case.events
        self.rng = random.Random(seed)
        self.time_scale = cfg.time_scale
        self.max_rx_bytes = cfg.max_rx_bytes
        self.deadline = deadline
        self.budget = cfg.budget(case)
        self.manual = manual
        self.conversations: list[Conversation] = []
        self.facts: list[str] = []
        self.log: list[dict[str, Any]] = []
        #: Set by the runner: the testee process ended (``exit_status`` None: killed).
        self.exited = trio.Event()
        self.exit_status: int | None = None
        #: Called after the process ended (or the case ended, manual mode) to add facts.
        self.after_exit: list[Callable[[ClientSession], None]] = []
        self._listener = listener
        self._nursery = nursery
        self._t0 = trio.current_time()
        self._offsets: list[float] = []
        self._connected = trio.Event()

    @property
    def nursery(self) -> trio.Nursery:
        """Where a case starts what must run beside it (it ends with the case)."""
        return self._nursery

    def now(self) -> float:
        return trio.current_time() - self._t0

    def action(self, text: str, **extra: Any) -> None:
        self.log.append({"t": round(self.now(), 6), "kind": "action", "text": text, **extra})

    def note(self, fact: str) -> None:
        if fact not in self.facts:
            self.facts.append(fact)
            self.action(f"fact: {fact}")

    async def accept(self, timeout: float) -> Conversation | None:
        """The client's next connection (within ``timeout`` s, scaled, capped by
        the budget; in manual mode the first one may take the whole budget), or
        None.  Its reader runs until the case ends."""
        scaled = timeout * self.time_scale
        if self.manual and not self.conversations:
            scaled = self.budget
        end = min(trio.current_time() + scaled, self.deadline)
        self.action(f"wait up to {max(0.0, end - trio.current_time()):g}s for connection {len(self.conversations) + 1}")
        stream: trio.abc.Stream | None = None
        with trio.move_on_at(end):
            while stream is None:
                if self.exited.is_set() and not self.manual:
                    # The process is gone: a connection it made may still wait in the backlog.
                    with trio.move_on_after(0.05):
                        stream = await self._listener.accept()
                    break
                async with trio.open_nursery() as n:

                    async def take() -> None:
                        nonlocal stream
                        stream = await self._listener.accept()
                        n.cancel_scope.cancel()

                    async def gone() -> None:
                        await self.exited.wait()
                        n.cancel_scope.cancel()

                    n.start_soon(take)
                    n.start_soon(gone)
        if stream is None:
            self.action("no connection")
            return None
        if self.manual and not self.conversations and math.isfinite(self.budget):
            self.deadline = trio.current_time() + self.budget  # the budget starts at the first connection
        conv = Conversation(
            stream,
            self.catalogue.client_observer() if self.catalogue.client_observer else _NullObserver(),
            rng=self.rng,
            time_scale=self.time_scale,
            deadline=self.deadline,
            max_rx_bytes=self.max_rx_bytes,
        )
        self._offsets.append(self.now())
        self.conversations.append(conv)
        conv.action(f"connection {len(self.conversations)} accepted")
        self._nursery.start_soon(conv.reader)
        self._connected.set()
        return conv

    async def stop_listening(self) -> None:
        """Refuse further connections (a retrying client then fails fast)."""
        with trio.move_on_after(1.0) as scope:
            scope.shield = True
            await self._listener.aclose()

    async def wait_exit(self, timeout: float) -> bool:
        """Wait (scaled, capped by the budget) for the testee process to end;
        in manual mode, for the last connection to close.  Returns whether it did."""
        end = min(trio.current_time() + timeout * self.time_scale, self.deadline)
        with trio.move_on_at(end):
            if self.manual:
                if self.conversations:
                    await self.conversations[-1].wait_close(math.inf)
            else:
                await self.exited.wait()
            return True
        return False

    # ----------------------------------------------------------------- results

    def tokens(self) -> tuple[str, ...]:
        """``connect``, then each connection's tokens; how every connection but
        the last ended (``FIN``/``RST`` by the client, ``closed by refwire``)."""
        out: list[str] = []
        for i, conv in enumerate(self.conversations):
            out.append("connect")
            out.extend(conv.tokens)
            if i < len(self.conversations) - 1:
                out.append(conv.closed_by_testee or f"closed by refwire ({conv.closed_by_runner or 'FIN'})")
        return tuple(out)

    def close_kind(self) -> str:
        if not self.conversations:
            return "open"
        return self.conversations[-1].closed_by_testee or "open"

    def wire_log(self) -> list[dict[str, Any]]:
        entries = list(self.log)
        for i, (conv, offset) in enumerate(zip(self.conversations, self._offsets, strict=True), start=1):
            for e in conv.log:
                e2 = dict(e, conn=i)
                if "t" in e2:
                    e2["t"] = round(e2["t"] + offset, 6)
                entries.append(e2)
        entries.sort(key=lambda e: e.get("t", 0.0))
        return entries

    def frames(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i, (conv, offset) in enumerate(zip(self.conversations, self._offsets, strict=True), start=1):
            out.extend(dict(f, conn=i, t=round(f.get("t", 0.0) + offset, 6)) for f in conv.frames)
        return out

    def all_facts(self) -> tuple[str, ...]:
        facts = list(self.facts)
        for conv in self.conversations:
            facts.extend(f for f in conv.facts if f not in facts)
        return tuple(facts)


class _NullObserver:
    def feed(self, data: bytes) -> list[tuple[str, dict[str, Any]]]:
        return []

    def eof(self) -> list[tuple[str, dict[str, Any]]]:
        return []


async def _pump_output(stream: trio.abc.ReceiveStream | None, out: _Output, done: trio.Event) -> None:
    try:
        while stream is not None:
            data = await stream.receive_some(65536)
            if not data:
                return
            out.add(bytes(data))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return
    finally:
        done.set()


async def _kill(proc: trio.Process) -> None:
    """Terminate the process group, then kill it (never a hang)."""
    if proc.returncode is not None:
        return
    for sig in ("SIGTERM", "SIGKILL"):
        try:
            os.killpg(proc.pid, getattr(__import__("signal"), sig))
        except (ProcessLookupError, PermissionError, OSError):
            try:
                proc.kill()
            except OSError:
                pass
        with trio.move_on_after(1.0) as scope:
            scope.shield = True
            await proc.wait()
        if proc.returncode is not None:
            return


async def _run_in_process(
    testee: Callable[[Mapping[str, str]], Awaitable[int]], values: Mapping[str, str], s: ClientSession, scope: trio.CancelScope
) -> None:
    """The testee as a task of this process: its return value is its exit
    status; an exception is exit status 1 (noted in the log); cancelled at the
    budget's end like a killed process."""
    status: int | None = None
    with scope:
        s.action("started refwire's own client in this process")
        try:
            status = await testee(values)
        except Exception as exc:
            s.action(f"the in-process testee raised {type(exc).__name__}: {exc}")
            status = 1
    if status is None:
        return  # cancelled: the caller notes "exit killed"
    s.exit_status = status
    s.action(f"the testee exited with status {status}")
    s.exited.set()


async def run_client_case(case: Case, catalogue: Catalogue, cfg: RunConfig, setup: ClientSetup, index: int) -> CaseResult:
    """Run one client case: listen, start the testee (or announce the port),
    run the procedure on the client's connections, judge."""
    seed = case_seed(cfg.seed, case.id)
    result = CaseResult(case=case, agent=cfg.agent, verdict=Verdict.ERROR, case_seed=seed, profile=cfg.profile, run_seed=cfg.seed, run_id=cfg.the_run_id)
    result.replay = cfg.replay_line(case)
    reason = _unsupported_reason(case, cfg)
    if reason is not None:
        result.verdict, result.reason = Verdict.UNSUPPORTED, reason
        return result
    if setup.open_listener is not None and "tls" in case.tags:
        result.verdict, result.reason = Verdict.SKIPPED, "TLS cases do not run inside the simulator"
        return result
    manual = setup.exec_template is None and setup.in_process is None
    t0 = trio.current_time()
    budget = cfg.budget(case)
    deadline = t0 + budget if math.isfinite(budget) else math.inf
    own_listener = announced = False
    listener: trio.abc.Listener[Any]
    try:
        if setup.open_listener is not None:
            listener, host, port = await setup.open_listener(case)
            own_listener = True
        elif setup.select == "sequential" and setup.shared is not None:
            listener = setup.shared
        elif case.id in setup.listeners:
            listener = setup.listeners.pop(case.id)
            own_listener = announced = True
        else:
            listener = await open_case_listener(setup.listen_host, setup.port_for(index))
            own_listener = True
        if setup.open_listener is None:
            assert isinstance(listener, trio.SocketListener)
            host, port = setup.listen_host, _port(listener)
        tls = setup.tls_for(case)
    except OSError as exc:
        result.reason, result.harness_fault = f"harness error: cannot listen: {exc.strerror or exc}", True
        return result
    wrapped: trio.abc.Listener[Any] = listener if tls is None else trio.SSLListener(listener, tls.server_context)
    values = {
        "host": host,
        "port": str(port),
        "case": case.id,
        "slug": case.slug,
        "events": str(case.events),
        "seed": str(seed),
        "tls_ca": tls.ca_file if tls else "",
        "controller": "",
    }
    argv: list[str] = []
    if setup.exec_template is not None:
        try:
            argv = expand_command(setup.exec_template or "", values)
        except ValueError as exc:
            result.reason, result.harness_fault = f"harness error: {exc}", True
            if own_listener:
                await listener.aclose()
            return result
    stdout, stderr = _Output(), _Output()
    drained = (trio.Event(), trio.Event())
    crashed: str | None = None
    session: ClientSession | None = None
    proc: trio.Process | None = None
    in_process = trio.CancelScope()
    try:
        async with trio.open_nursery() as nursery:
            session = ClientSession(case, catalogue, cfg, wrapped, nursery, seed=seed, deadline=deadline, manual=manual)
            session.action(f"listening on {host}:{port}" + (" (TLS)" if tls else "") + f" (case seed {seed})")
            if catalogue.client_services is not None and setup.open_listener is None:
                try:
                    values.update(await catalogue.client_services(session, host, port))
                except OSError as exc:
                    result.reason, result.harness_fault = f"harness error: cannot start the case's services: {exc.strerror or exc}", True
                    nursery.cancel_scope.cancel()
                    return result
                if setup.exec_template is not None:
                    argv = expand_command(setup.exec_template, values)
            if manual:
                if not announced:
                    extra = f" controller={values['controller']}" if values["controller"] else ""
                    setup.announce(announce_line(case, host, port) + extra)
            elif setup.in_process is not None:
                nursery.start_soon(_run_in_process, setup.in_process, values, session, in_process)
            else:
                env = dict(
                    os.environ,
                    REFWIRE_CASE=case.id,
                    REFWIRE_PORT=str(port),
                    REFWIRE_SEED=str(seed),
                    REFWIRE_EVENTS=str(case.events),
                    REFWIRE_TLS_CA=values["tls_ca"],
                    REFWIRE_CONTROLLER=values["controller"],
                )
                try:
                    proc = await trio.lowlevel.open_process(
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        env=env,
                        start_new_session=True,
                    )
                except OSError as exc:
                    result.reason = f"harness error: --exec cannot start {argv[0]!r}: {exc.strerror or exc}"
                    result.harness_fault = True
                    nursery.cancel_scope.cancel()
                    return result
                session.action(f"started {shlex.join(argv)} (pid {proc.pid})")
                nursery.start_soon(_pump_output, proc.stdout, stdout, drained[0])
                nursery.start_soon(_pump_output, proc.stderr, stderr, drained[1])

                async def watch(p: trio.Process, s: ClientSession) -> None:
                    await p.wait()
                    s.exit_status = p.returncode
                    s.action(f"the testee exited with status {p.returncode}")
                    s.exited.set()

                nursery.start_soon(watch, proc, session)
            with trio.move_on_at(deadline + 1.0 * cfg.time_scale) as scope:
                try:
                    await case.run(session)
                except Exception:  # the harness's own bug: ERROR, never the testee's fault
                    crashed = traceback.format_exc(limit=8)
            if scope.cancelled_caught:
                session.action("case budget ran out")
            if own_listener:
                await session.stop_listening()
            if not manual:
                with trio.move_on_at(deadline):
                    await session.exited.wait()
                if not session.exited.is_set():
                    session.action("the budget ran out: killing the testee")
                    if proc is not None:
                        await _kill(proc)
                    in_process.cancel()
                    session.note("exit killed (still running at the budget end)")
                    session.exited.set()
                # Let the output pumps drain what the process wrote.
                with trio.move_on_after(0.5):
                    for ev in drained:
                        await ev.wait()
            for conv in session.conversations:
                if conv.closed_by_testee is None:
                    await conv.close("FIN")
            nursery.cancel_scope.cancel()
    finally:
        if proc is not None and proc.returncode is None:
            with trio.CancelScope(shield=True):
                await _kill(proc)
    assert session is not None
    result.duration = trio.current_time() - t0
    exit_status = proc.returncode if proc is not None else session.exit_status
    if not manual and exit_status is not None and not any(f.startswith("exit killed") for f in session.facts):
        session.note(f"exit {exit_status}")
    elif manual:
        session.note("exit unknown (no --exec)")
    if crashed is None:
        for hook in session.after_exit:
            try:
                hook(session)
            except Exception:
                crashed = traceback.format_exc(limit=8)
    result.exit_status = exit_status
    result.wire_log = session.wire_log()
    if proc is not None:
        result.wire_log.append(
            {
                "kind": "process",
                "argv": argv,
                "exit": exit_status,
                "stdout": stdout.text(),
                "stderr": stderr.text(),
            }
        )
    result.frames = session.frames()
    last = session.conversations[-1] if session.conversations else None
    result.close = {
        "by": "testee" if last is not None and last.closed_by_testee else ("none" if last is None else "refwire"),
        "how": (last.closed_by_testee or last.closed_by_runner or "FIN") if last is not None else "no connection",
        "connections": len(session.conversations),
        "at_s": round(result.duration, 3),
    }
    obs = Observation(events=case.judged(session.tokens()), close=session.close_kind(), facts=session.all_facts())
    result.observation = obs
    result.observed = describe_observed(obs, result.close)
    if crashed is not None:
        result.verdict, result.reason = Verdict.ERROR, f"harness error: {crashed.strip().splitlines()[-1]}"
        result.harness_fault = True
        result.wire_log.append({"kind": "action", "text": "harness traceback", "traceback": crashed})
        return result
    if exit_status == EXIT_UNSUPPORTED:
        result.verdict, result.reason = Verdict.UNSUPPORTED, "the testee exited with status 127 (does not support this case)"
        return result
    verdict, matched, expected, why = judge(case, obs, cfg.profile)
    result.verdict, result.matched_profiles, result.expected = verdict, matched, expected
    result.reason = why
    return result


def announce_line(case: Case, host: str, port: int) -> str:
    """Manual mode's line for one case: ``CASE-ID SLUG HOST:PORT events=N``."""
    return f"{case.id} {case.slug} {host}:{port} events={case.events}" + (" tls" if "tls" in case.tags else "")


async def prepare_listeners(cases: Sequence[Case], setup: ClientSetup) -> None:
    """Manual mode: open every case's listener and announce it (``--select
    port``: all listening at once), or open the one shared listener
    (``sequential``: each case is announced when it starts)."""
    if setup.select == "sequential":
        setup.shared = await open_case_listener(setup.listen_host, setup.port_for(0))
        return
    for i, case in enumerate(cases):
        lst = await open_case_listener(setup.listen_host, setup.port_for(i))
        setup.listeners[case.id] = lst
        setup.announce(announce_line(case, setup.listen_host, _port(lst)))


async def close_listeners(setup: ClientSetup) -> None:
    """Close every listener the setup opened and remove its TLS material."""
    if setup.tls is not None:
        setup.tls.remove()
        setup.tls = None
    for lst in list(setup.listeners.values()) + ([setup.shared] if setup.shared else []):
        with trio.move_on_after(1.0) as scope:
            scope.shield = True
            await lst.aclose()
    setup.listeners.clear()
    setup.shared = None
