"""Suite-wide options.  The default run is the CI run; long campaigns are opt-in."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sim-seeds", type=int, default=0, help="also sweep this many extra simulation seeds per protocol")
    parser.addoption("--sim-first-seed", type=int, default=100_000, help="first seed of the --sim-seeds sweep")
    parser.addoption("--run-slow", action="store_true", help="also run the tests marked slow (long campaigns, real clusters)")


#: Tests that share a session fixture worth starting once (a Spark session, the
#: real peers' builds and runs), by path -> group: under pytest-xdist's loadgroup
#: (scripts/test.sh) each group runs on one worker.  By path, not by marker: with
#: pytest 9 the node-id suffix that xdist_group marks rely on is lost (pytest-xdist
#: 3.8 sets ``item._nodeid``, which pytest 9 no longer reads), so the scheduler
#: below groups what the controller can see, the node ids.
ONE_WORKER = {
    "tests/peers/": "peers",
    "tests/pipeline/test_spark.py": "spark",
    "tests/pipeline/test_spark_standalone.py": "spark",
}
#: The longest tests (minutes), started first so that no worker is left running one
#: alone at the end of a parallel run.
LONG_FIRST = ("tests/test_compiled_build.py::test_the_codec_and_machine_tests_pass_compiled",)


@pytest.hookimpl(trylast=True)  # (after the folders' conftests have marked their tests)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` are skipped unless ``--run-slow`` is given; the
    :data:`LONG_FIRST` tests go first."""
    items.sort(key=lambda item: item.nodeid not in LONG_FIRST)  # (a stable sort: the rest keep their order)
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: opt-in with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _sigint_as_it_was() -> Iterator[None]:
    """A test that leaves SIGINT's handler changed fails (and it is put back): a
    command run in-process that ignores Ctrl-C for good would make every later
    test's Ctrl-C in that worker vanish."""
    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"the test left SIGINT's handler changed: {before!r} -> {after!r}")


@pytest.fixture(autouse=True)
def _fresh_log_limits() -> None:
    """Each test starts with no log kind rate-limited (refwire.logs.limited keeps
    one line per kind per 10 s process-wide, so a test asserting a log line
    must not depend on which test logged that kind last)."""
    from refwire.logs import reset

    reset()


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``: xdist's group scheduling, the groups being
    :data:`ONE_WORKER`'s paths (every other test is a group of its own)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class OneWorkerGroups(LoadGroupScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            for prefix, group in ONE_WORKER.items():
                if nodeid.startswith(prefix):
                    return group
            return str(super()._split_scope(nodeid))

    return OneWorkerGroups(config, log)
