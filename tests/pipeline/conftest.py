"""Fixtures for the pipeline tests: ONE local Spark session for the whole run
(a session takes about 5 s to start and ~1 GiB; never one per test).

Every test that uses the ``spark`` fixture is marked ``spark`` here, so
``pytest -m 'not spark'`` deselects them locally; by default they run.  Without
Java (or pyspark) they FAIL when ``CI`` is set -- scripts/test.sh installs both
-- and skip with the reason otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


def _missing() -> str | None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return 'pyspark is not installed (pip install -e ".[spark]")'
    from refwire.pipeline.session import java_problem

    return java_problem()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    missing = _missing()
    if missing is not None:
        if os.environ.get("CI"):
            pytest.fail(f"Spark tests cannot run in CI: {missing}", pytrace=False)
        pytest.skip(missing)
    from refwire.pipeline.session import local_spark

    session = local_spark("refwire-tests", cores=2)
    yield session
    session.stop()
