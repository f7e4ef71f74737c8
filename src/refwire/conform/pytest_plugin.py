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
        [--refwire-profile P] [--refwire-cases PATTERNS] [--refwire-sink FILE] [--refwire-run-id R]

collects one item per case of that role, named by its id and slug; the
verdict is the outcome: PASS and INFO pass, FAIL and ERROR fail (the message
holds Expected, Observed, the requirement and the replay command),
UNSUPPORTED and SKIPPED skip, NON-STRICT is an xfail.  A testee that refuses
the first connection, speaks another protocol, or lacks what the cases need
(the 2017 draft's segments) ends the session (exit status 2).  A pattern of
``--refwire-cases`` that matches no case is a usage error.  Each session has a
run id (``--refwire-run-id``, default a fresh one; printed in the header and in
every replay line) that the names and markers the cases leave on the testee
carry, so sessions against one long-lived server stay apart
(:mod:`refwire.conform.ids`).

Without ``--refwire-conform`` the plugin collects nothing, and loading it
imports neither trio nor the runner.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from ..reference import RunningServer, serve_in_thread

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
    group.addoption(
        "--refwire-run-id",
        metavar="R",
        default=None,
        help="run id the cases' names and markers carry (8 hex digits; default: a fresh one per session)",
    )
    group.addoption("--refwire-time-scale", metavar="X", type=float, default=1.0, help="multiply every budget and wait by X")


# --------------------------------------------------------------------------- conformance items


class _Run:
    """What every item of one session shares."""

    def __init__(self, catalogue: Catalogue, cfg: RunConfig) -> None:
        from .runner import FirstBytes

        self.catalogue = catalogue
        self.cfg = cfg
        self.first = True
        self.first_bytes = FirstBytes(catalogue.protocol, f"{cfg.host}:{cfg.port}", cfg.max_rx_bytes)
        #: The server cases of the session (the catalogue's preparation checks theirs).
        self.cases: list[Case] = []


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
        from .runner import RunAborted, prepare_run, run_server_case

        run = self.conform_run
        first, run.first = run.first, False

        async def one() -> CaseResult:
            if first:
                await prepare_run(run.catalogue, run.cfg, run.cases)
            return await run_server_case(self.case, run.catalogue, run.cfg, first=first, first_bytes=run.first_bytes)

        try:
            result = trio.run(one)
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


def pytest_report_header(config: pytest.Config) -> str | None:
    """The session's seed and run id, beside each other (a replay needs both)."""
    run_id = getattr(config, "_refwire_run_id", None)
    if run_id is None:
        return None
    return f"refwire conform {config.getoption('refwire_conform')}: seed {config.getoption('refwire_seed')}, run id {run_id}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "refwire_conform: a refwire conformance case (added by --refwire-conform)")
    if not config.getoption("refwire_conform"):
        return
    if not config.getoption("refwire_server"):
        raise pytest.UsageError("--refwire-conform needs the server under test: --refwire-server HOST:PORT")
    from .ids import RunIdError, check_run_id, new_run_id

    given = config.getoption("refwire_run_id")
    try:
        config._refwire_run_id = check_run_id(given) if given else new_run_id()  # type: ignore[attr-defined]
    except RunIdError as exc:
        raise pytest.UsageError(f"--refwire-run-id: {exc}") from None


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    protocol = config.getoption("refwire_conform")
    if not protocol:
        return
    from ..drivers import parse_hostport
    from ..protocols import descriptor
    from .model import select

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
    cfg = _conform_config(config, protocol, host, port)
    run = _Run(catalogue, cfg)
    name = f"refwire-conform-{protocol}"
    parent = ConformCatalogue.from_parent(session, name=name, nodeid=name)
    from .options import OptionsError, check_selection

    try:
        check_selection(catalogue, "server", config.getoption("refwire_cases"), None)
    except OptionsError as exc:
        raise pytest.UsageError(str(exc).replace("--cases", "--refwire-cases", 1)) from None
    chosen, _skipped = select(
        [c for c in catalogue.cases if c.role == "server"], include=config.getoption("refwire_cases"), tags=None
    )
    run.cases = chosen
    skipped = {c.id: why.replace("run with --tags slow", "name it in --refwire-cases to run it") for c, why in _skipped}
    for case in sorted([*chosen, *(c for c, _ in _skipped)], key=lambda c: _id_key(c.id)):
        item = ConformItem.from_parent(parent, name=f"{case.id} {case.slug}", case=case, run=run)
        if case.id in skipped:
            item.add_marker(pytest.mark.skip(reason=f"SKIPPED: {skipped[case.id]}"))
        items.append(item)


def _id_key(case_id: str) -> tuple[Any, ...]:
    from .ids import natural_key

    return natural_key(case_id)


def _conform_config(config: pytest.Config, protocol: str, host: str, port: int) -> RunConfig:
    """The session's :class:`RunConfig`: the replay line repeats every option the cases depend on."""
    from .runner import RunConfig

    profile = config.getoption("refwire_profile")
    seed = config.getoption("refwire_seed")
    sink = config.getoption("refwire_sink")
    run_id = str(config._refwire_run_id)  # type: ignore[attr-defined]
    time_scale = config.getoption("refwire_time_scale")
    replay = f"refwire conform {protocol} --server {host}:{port} --agent {host}:{port} --profile {profile}"
    replay += (f" --sink {sink}" if sink else "") + (f" --time-scale {time_scale:g}" if time_scale != 1.0 else "")
    cfg = RunConfig(
        host=host,
        port=port,
        agent=f"{host}:{port}",
        profile=profile,
        seed=seed,
        run_id=run_id,
        sink=sink,
        time_scale=time_scale,
        replay_base=replay,
    )
    return cfg


# --------------------------------------------------------------------------- fixtures
#
# One fixture per protocol whose descriptor names a ``reference_server`` (and the fixture's
# name): ``lumberjack_server``, ``pravega_store``, ``tank_broker``, ``seastar_server``.  Each
# has a ``<name>_config`` fixture (None: the server's defaults) that a test module or a
# conftest overrides to configure it.  They are made from the registry when the plugin
# loads, which imports only the descriptors (no server, no trio).


def _reference_fixtures(protocol: str, name: str, title: str) -> tuple[Any, Any]:
    def config() -> Any:
        return None

    config.__doc__ = f"The configuration of ``{name}`` (None: the server's defaults); override it to configure the server."

    def fixture(tmp_path_factory: pytest.TempPathFactory, **configs: Any) -> Iterator[RunningServer]:
        from ..protocols import descriptor

        serve = descriptor(protocol, "reference_server").load("reference_server")
        cfg = configs[f"{name}_config"]
        workdir = tmp_path_factory.mktemp(name.replace("_", "-"))
        box: list[RunningServer] = []

        async def start(nursery: Any) -> RunningServer:
            box.append(await serve(nursery, cfg, workdir))
            return box[0]

        def close() -> None:
            if box:
                box[0].on_close()

        with serve_in_thread(protocol, start, close) as running:
            yield running

    fixture.__doc__ = (
        f"refwire's {title} server on 127.0.0.1 (a free port), in a thread of its own; stopped at teardown. "
        f"``.address``, ``.server``, ``.events``, ``.sink``: see :class:`refwire.reference.RunningServer` "
        f"and the protocol's ``serve_reference``."
    )
    # pytest reads a fixture's dependencies from its signature: name the config fixture there,
    # so a test can also parametrize it (``indirect=True``).
    params = inspect.signature(fixture).parameters
    fixture.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [params["tmp_path_factory"], inspect.Parameter(f"{name}_config", inspect.Parameter.KEYWORD_ONLY)]
    )
    return pytest.fixture(name=f"{name}_config")(config), pytest.fixture(name=name)(fixture)


def _add_reference_fixtures() -> None:
    from ..protocols import registry

    for d in registry().values():
        if d.reference_server is not None and d.fixture is not None:
            config, fixture = _reference_fixtures(d.name, d.fixture, d.title)
            globals()[f"_{d.fixture}_config"] = config
            globals()[f"_{d.fixture}"] = fixture


_add_reference_fixtures()
