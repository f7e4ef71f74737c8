"""``refwire conform``: conformance cases for other implementations.

:mod:`.model` (cases, expectations, verdicts, profiles), :mod:`.conversation`
(one scripted connection and its wire log), :mod:`.runner` (running cases
against a testee), :mod:`.report` (index.json, per-case records, HTML, JUnit)
and :mod:`.cli`.  Each protocol's cases live beside it
(``refwire.<protocol>.conform``), named by its descriptor.
"""

from __future__ import annotations

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
