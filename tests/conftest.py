"""Suite-wide options.  The default run is the CI run; long campaigns are opt-in."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sim-seeds", type=int, default=0, help="also sweep this many extra simulation seeds per protocol")
    parser.addoption("--sim-first-seed", type=int, default=100_000, help="first seed of the --sim-seeds sweep")
    parser.addoption("--run-slow", action="store_true", help="also run the tests marked slow (long campaigns, real clusters)")


#: Markers whose tests share a session fixture worth starting once (a Spark session,
#: the real peers' builds): under pytest-xdist (scripts/test.sh) each runs on one worker.
ONE_WORKER = ("spark", "peers")
#: The longest tests (minutes), started first so that no worker is left running one
#: alone at the end of a parallel run.
LONG_FIRST = ("tests/test_compiled_build.py::test_the_codec_and_machine_tests_pass_compiled",)


@pytest.hookimpl(trylast=True)  # (after the folders' conftests have marked their tests)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` are skipped unless ``--run-slow`` is given; the
    tests of each :data:`ONE_WORKER` marker form one ``xdist_group``; the
    :data:`LONG_FIRST` tests go first."""
    for item in items:
        for marker in ONE_WORKER:
            if marker in item.keywords:
                item.add_marker(pytest.mark.xdist_group(marker))
                break
    items.sort(key=lambda item: item.nodeid not in LONG_FIRST)  # (a stable sort: the rest keep their order)
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: opt-in with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_log_limits() -> None:
    """Each test starts with no log kind rate-limited (refwire.logs.limited keeps
    one line per kind per 10 s process-wide, so a test asserting a log line
    must not depend on which test logged that kind last)."""
    from refwire.logs import reset

    reset()
