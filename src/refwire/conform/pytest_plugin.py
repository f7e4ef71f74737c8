"""pytest plugin (entry point ``pytest11``: ``pip install refwire`` enables it).

Fixtures for your own tests: ``lumberjack_server`` starts refwire's Lumberjack
server (specs/lumberjack/README.md §3) in-process, on 127.0.0.1 and a free
port, in a thread of its own (so sync, trio and asyncio tests can all talk to
it), and stops it at teardown::

    def test_my_shipper(lumberjack_server):
        ship(["hello"], to=lumberjack_server.address)
        assert lumberjack_server.events == [{"message": "hello"}]

``.sink`` is a JSON-lines file of the same events, each written before its
batch is acked.  Override the ``lumberjack_server_config`` fixture to return a
:class:`~refwire.lumberjack.server.ServerConfig` (``ack_mode="count"`` to
behave like go-lumber, ...).

Conformance cases as test items::

    pytest --refwire-conform lumberjack --refwire-server HOST:PORT \\
        [--refwire-profile P] [--refwire-cases PATTERNS] [--refwire-sink FILE]

collects one item per case of that role, named by its id and slug; the
verdict is the outcome: PASS and INFO pass, FAIL and ERROR fail (the message
holds Expected, Observed, the requirement and the replay command),
UNSUPPORTED and SKIPPED skip, NON-STRICT is an xfail.  A testee that refuses
the first connection ends the session (exit status 2).

Without ``--refwire-conform`` the plugin collects nothing, and loading it
imports neither trio nor the runner.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

if TYPE_CHECKING:
    from .model import Case, CaseResult
    from .runner import Catalogue, RunConfig

__all__ = ["ConformCatalogue", "ConformItem", "RunningServer"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("refwire", "refwire conformance cases (refwire conform)")
    group.addoption(
        "--refwire-conform", metavar="PROTOCOL", default=None, help="run refwire's conformance cases for PROTOCOL as test items"
    )
    group.addoption("--refwire-server", metavar="HOST:PORT", default=None, help="the server under test")
    group.addoption("--refwire-profile", metavar="NAME", default="strict", help="the behaviour a PASS is judged against")
    group.addoption("--refwire-cases", metavar="PATTERNS", default=None, help="only these case ids or slugs (comma-separated)")
    group.addoption("--refwire-sink", metavar="FILE", default=None, help="where the testee writes the events it received")
    group.addoption("--refwire-seed", metavar="N", type=int, default=0, help="run seed (default 0)")
    group.addoption("--refwire-time-scale", metavar="X", type=float, default=1.0, help="multiply every budget and wait by X")


# --------------------------------------------------------------------------- conformance items


class _Run:
    """What every item of one session shares."""

    def __init__(self, catalogue: Catalogue, cfg: RunConfig) -> None:
        self.catalogue = catalogue
        self.cfg = cfg
        self.first = True


class ConformItem(pytest.Item):
    """One conformance case; its verdict is the outcome."""

    def __init__(self, *, case: Case, run: _Run, **kw: Any) -> None:
        super().__init__(**kw)
        self.case = case
        self.conform_run = run
        self.result: CaseResult | None = None
        self.add_marker(pytest.mark.refwire_conform)

    def runtest(self) -> None:
        import trio

        from .model import Verdict
        from .runner import RunAborted, run_server_case

        first, self.conform_run.first = self.conform_run.first, False
        try:
            result = trio.run(
                functools.partial(run_server_case, self.case, self.conform_run.catalogue, self.conform_run.cfg, first=first)
            )
        except RunAborted as exc:
            pytest.exit(f"refwire: {exc}", returncode=2)
        self.result = result
        self.user_properties += [("verdict", result.verdict.value), ("requirement", self.case.requirement)]
        v = result.verdict
        if v in (Verdict.PASS, Verdict.INFO):
            return
        if v in (Verdict.UNSUPPORTED, Verdict.SKIPPED):
            pytest.skip(f"{v.value}: {result.reason}")
        if v is Verdict.NON_STRICT:
            pytest.xfail(f"NON-STRICT: {result.reason}")
        pytest.fail(self._message(result), pytrace=False)

    def _message(self, r: CaseResult) -> str:
        lines = [f"{r.verdict.value} {self.case.id} {self.case.slug}: {self.case.title}"]
        lines.append(f"  Requirement: {self.case.requirement}")
        if r.expected:
            lines.append(f"  Expected:    {r.expected}")
        if r.observed:
            lines.append(f"  Observed:    {r.observed}")
        if r.reason:
            lines.append(f"  Why:         {r.reason}")
        lines.append(f"  Replay:      {r.replay}")
        return "\n".join(lines)

    def reportinfo(self) -> tuple[str, int, str]:
        # (not the node's name as the domain: pytest would print its dots as "::")
        return self.case.requirement, 0, f"{self.case.id} {self.case.slug}: {self.case.title}"


class ConformCatalogue(pytest.Collector):
    """The parent of one protocol's case items (``refwire-conform-lumberjack::lj.S1.1 v2-single-window``)."""

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        return []  # the items are added by pytest_collection_modifyitems


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "refwire_conform: a refwire conformance case (added by --refwire-conform)")
    if config.getoption("refwire_conform") and not config.getoption("refwire_server"):
        raise pytest.UsageError("--refwire-conform needs the server under test: --refwire-server HOST:PORT")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    protocol = config.getoption("refwire_conform")
    if not protocol:
        return
    from ..drivers import parse_hostport
    from ..protocols import descriptor
    from .model import select
    from .runner import RunConfig

    try:
        catalogue: Catalogue = descriptor(protocol, "conform").load("conform")
    except ValueError as exc:
        raise pytest.UsageError(f"--refwire-conform: {exc}") from None
    profile = config.getoption("refwire_profile")
    if profile not in catalogue.profiles:
        raise pytest.UsageError(f"--refwire-profile {profile!r} is unknown; {protocol} has: {', '.join(catalogue.profiles)}")
    try:
        host, port = parse_hostport(config.getoption("refwire_server"))
    except ValueError as exc:
        raise pytest.UsageError(f"--refwire-server: {exc}") from None
    seed = config.getoption("refwire_seed")
    sink = config.getoption("refwire_sink")
    replay = f"refwire conform {protocol} --server {host}:{port} --profile {profile}" + (f" --sink {sink}" if sink else "")
    cfg = RunConfig(
        host=host,
        port=port,
        agent=f"{host}:{port}",
        profile=profile,
        seed=seed,
        sink=sink,
        time_scale=config.getoption("refwire_time_scale"),
        replay_base=replay,
    )
    run = _Run(catalogue, cfg)
    name = f"refwire-conform-{protocol}"
    parent = ConformCatalogue.from_parent(session, name=name, nodeid=name)
    chosen, _skipped = select(
        [c for c in catalogue.cases if c.role == "server"], include=config.getoption("refwire_cases"), tags=None
    )
    skipped = {c.id: why.replace("run with --tags slow", "name it in --refwire-cases to run it") for c, why in _skipped}
    for case in sorted([*chosen, *(c for c, _ in _skipped)], key=lambda c: _id_key(c.id)):
        item = ConformItem.from_parent(parent, name=f"{case.id} {case.slug}", case=case, run=run)
        if case.id in skipped:
            item.add_marker(pytest.mark.skip(reason=f"SKIPPED: {skipped[case.id]}"))
        items.append(item)


def _id_key(case_id: str) -> tuple[Any, ...]:
    from .model import id_key

    return id_key(case_id)


# --------------------------------------------------------------------------- fixtures


class RunningServer:
    """A refwire server running in a thread of its own (see the module docstring)."""

    def __init__(self, host: str, port: int, sink: Path) -> None:
        self.host = host
        self.port = port
        #: a JSON-lines file holding every event, written before its batch is acked
        #: (``--refwire-sink`` / ``refwire conform --sink`` can judge delivery with it).
        self.sink = sink
        #: every event the application received, in order (JSON objects; v1 key/value pairs as dicts).
        self.events: list[Any] = []
        #: every batch, as its list of events.
        self.batches: list[list[Any]] = []
        #: the server object itself (stats, transitions), once started.
        self.server: Any = None
        #: Pravega: the controller's URI (``tcp://HOST:PORT``) pointing at this store; "" otherwise.
        self.controller = ""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __repr__(self) -> str:
        return f"<refwire server at {self.address}: {len(self.events)} events>"


@pytest.fixture
def lumberjack_server_config() -> Any:
    """The :class:`~refwire.lumberjack.server.ServerConfig` of ``lumberjack_server`` (None: the defaults)."""
    return None


@pytest.fixture
def lumberjack_server(lumberjack_server_config: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """refwire's Lumberjack server on 127.0.0.1 (a free port); events land in ``.events``
    before the batch is acked; stopped at teardown."""
    from ..drivers import parse_hostport
    from ..lumberjack.server import LumberjackServer, ServerConfig

    config = lumberjack_server_config or ServerConfig()
    box: list[RunningServer] = []

    sink = tmp_path_factory.mktemp("lumberjack-server") / "events.jsonl"
    sink.touch()

    async def handler(batch: Any, info: Any) -> None:
        events = [ev.fields() for ev in batch.events]
        with sink.open("a", encoding="utf-8") as f:
            f.writelines(json.dumps(ev) + "\n" for ev in events)
        box[0].batches.append(events)
        box[0].events.extend(events)

    async def start(nursery: Any) -> RunningServer:
        server = LumberjackServer(handler, config=config)
        addresses = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        host, port = parse_hostport(addresses[0])
        box.append(RunningServer(host, port, sink))
        box[0].server = server
        return box[0]

    def close() -> None:
        for listener in box[0].server.listeners if box else ():  # a cancelled server leaves them open
            listener.socket.close()

    with serve_in_thread("Lumberjack", start, close) as running:
        yield running


T = TypeVar("T")


@contextlib.contextmanager
def serve_in_thread(
    name: str, start: Callable[[Any], Awaitable[T]], close: Callable[[], None] = lambda: None, *, timeout: float = 10.0
) -> Iterator[T]:
    """Run a refwire server on a trio loop in a thread of its own for the
    ``with`` block: ``start(nursery)`` starts it (``nursery.start`` its serving
    task) and returns what the fixture yields; leaving the block cancels the
    loop, calls ``close()`` in it and joins the thread (within ``timeout``)."""
    import trio

    started = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        try:
            async with trio.open_nursery() as nursery:
                state["value"] = await start(nursery)
                state["token"] = trio.lowlevel.current_trio_token()
                state["scope"] = nursery.cancel_scope
                started.set()
        finally:
            started.set()
            close()

    def thread_main() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # reported to the test below
            state["error"] = exc

    thread = threading.Thread(target=thread_main, name=f"refwire-{name.lower()}-server", daemon=True)
    thread.start()
    if not started.wait(timeout) or "scope" not in state:
        thread.join(timeout)
        raise RuntimeError(f"refwire's {name} server did not start: {state.get('error')!r}")
    try:
        yield state["value"]
    finally:
        trio.from_thread.run_sync(state["scope"].cancel, trio_token=state["token"])
        thread.join(timeout)


@pytest.fixture
def tank_broker() -> Iterator[RunningServer]:
    """refwire's TANK broker (specs/tank/README.md §6) on 127.0.0.1 (a free port),
    in memory; ``.server`` is the :class:`~refwire.tank.server.TankBroker`
    (``.server.storage.topics`` holds what was produced); stopped at teardown."""
    from ..tank.server import TankBroker

    async def start(nursery: Any) -> RunningServer:
        import trio

        broker = TankBroker()
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(broker.serve, listeners)
        running = RunningServer("127.0.0.1", listeners[0].socket.getsockname()[1], Path(""))
        running.server = broker
        return running

    with serve_in_thread("TANK", start) as running:
        yield running


@pytest.fixture
def pravega_store() -> Iterator[RunningServer]:
    """refwire's Pravega segment store (specs/pravega/README.md) and a controller
    pointing at it, on 127.0.0.1 (free ports), in memory, in a thread of their
    own: ``.address`` is the store, ``.controller`` the controller's
    ``tcp://HOST:PORT`` (what a real client such as the PyPI ``pravega`` package
    is given); ``.server`` is the :class:`~refwire.pravega.server.SegmentStoreServer`
    (``.server.store.segments`` holds what was written); stopped at teardown."""
    from ..pravega.controller import PravegaController
    from ..pravega.server import SegmentStoreServer

    async def start(nursery: Any) -> RunningServer:
        import trio

        store = SegmentStoreServer()
        store_l = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(store.serve, store_l)
        port = store_l[0].socket.getsockname()[1]
        ctl = PravegaController(store.admin, ("127.0.0.1", port))
        ctl_l = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(ctl.serve, ctl_l)
        running = RunningServer("127.0.0.1", port, Path(""))
        running.server = store
        running.controller = f"tcp://127.0.0.1:{ctl_l[0].socket.getsockname()[1]}"
        return running

    with serve_in_thread("Pravega", start) as running:
        yield running


@pytest.fixture
def seastar_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """refwire's Seastar RPC server (demo verbs and the conformance verbs of
    specs/seastar-rpc/README.md §11) on 127.0.0.1 (a free port), in a thread of
    its own; ``.address``, ``.server`` (stats); stopped at teardown.  ``.sink``
    is an empty file and ``.events`` stays empty (RPC calls are no events)."""
    from ..drivers import parse_hostport
    from ..seastar_rpc.conform_verbs import add_conformance_verbs
    from ..seastar_rpc.demo import demo_registry
    from ..seastar_rpc.server import SeastarServer

    sink = tmp_path_factory.mktemp("seastar-server") / "unused.jsonl"
    sink.touch()

    async def start(nursery: Any) -> RunningServer:
        server = SeastarServer(add_conformance_verbs(demo_registry()))
        addresses = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        running = RunningServer(*parse_hostport(addresses[0]), sink)
        running.server = server
        return running

    with serve_in_thread("Seastar", start) as running:
        yield running
