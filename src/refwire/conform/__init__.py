"""``refwire conform``: conformance cases for other implementations.

:mod:`.model` (cases, expectations, verdicts, profiles), :mod:`.conversation`
(one scripted connection and its wire log), :mod:`.runner` (running cases
against a testee), :mod:`.report` (index.json, per-case records, HTML, JUnit)
and :mod:`.cli`.  Each protocol's cases are one module of :mod:`.cases`
(``refwire.conform.cases.<protocol>``), found through its descriptor.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import Case, CaseResult, Expect, Observation, Verdict, case_seed, judge, select
    from .runner import Catalogue, RunAborted, RunConfig, RunResult, run_cases, run_server_case

__all__ = [
    "Case",
    "CaseResult",
    "Catalogue",
    "Expect",
    "Observation",
    "RunAborted",
    "RunConfig",
    "RunResult",
    "Verdict",
    "case_seed",
    "judge",
    "run_cases",
    "run_server_case",
    "select",
]

_RUNNER = {"Catalogue", "RunAborted", "RunConfig", "RunResult", "run_cases", "run_server_case"}


def __getattr__(name: str) -> Any:
    """Names load on first use, so importing :mod:`.pytest_plugin` (a pytest11
    plugin every ``pytest`` run loads) costs no trio import."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(".runner" if name in _RUNNER else ".model", __name__), name)
    globals()[name] = value
    return value
