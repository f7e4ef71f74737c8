"""Suite-wide options.  The default run is the CI run; long campaigns are opt-in."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sim-seeds", type=int, default=0, help="also sweep this many extra simulation seeds per protocol")
    parser.addoption("--sim-first-seed", type=int, default=100_000, help="first seed of the --sim-seeds sweep")
    parser.addoption("--run-slow", action="store_true", help="also run the tests marked slow (long campaigns, real clusters)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` are skipped unless ``--run-slow`` is given."""
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
