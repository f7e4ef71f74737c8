"""Suite-wide options.  The default run is the CI run; long campaigns are opt-in."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sim-seeds", type=int, default=0, help="also sweep this many extra simulation seeds per protocol")
    parser.addoption("--sim-first-seed", type=int, default=100_000, help="first seed of the --sim-seeds sweep")
