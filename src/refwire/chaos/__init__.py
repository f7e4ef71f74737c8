"""``refwire chaos``: a frame-aware, seeded fault proxy between two real peers.

Between your client and your server it cuts each direction into frames with
refwire's own codecs (leniently: it never breaks traffic it does not
understand) and applies rules to frame ``n`` of connection ``c`` in direction
``d`` -- drop, delay, duplicate, split at a field, truncate, corrupt or
rewrite one field, close or reset -- with one random stream per (rule,
connection, direction) drawn from the run's seed, and records every decision.
"""

from __future__ import annotations

from .adapter import observer_for
from .observe import Observed
from .proxy import ChaosProxy, open_chaos
from .rules import ACTIONS, Rule, Schedule, ScheduleError, load_schedule, parse_schedule, rules_from

__all__ = [
    "ACTIONS",
    "ChaosProxy",
    "Observed",
    "Rule",
    "Schedule",
    "ScheduleError",
    "load_schedule",
    "observer_for",
    "open_chaos",
    "parse_schedule",
    "rules_from",
]
