"""Fault rules: what to match and what to do, as data (a TOML or JSON schedule).

A rule matches frame ``n`` of connection ``c`` in direction ``d`` -- never a
TCP segment -- by direction, frame type, field values, connection ordinal,
position (``nth``, ``every``, ``first``, ``after``), a fire count, a seeded
probability with a burst cap, and a time window.  Every rule that matches a
frame applies, in schedule order.  Draws come from one random stream per
(rule, connection, direction), derived from the run seed with a stable digest,
so adding a rule or a connection shifts no other rule's draws.

A schedule::

    seed = 7
    [[rule]]
    name = "drop-first-ack"
    direction = "s2c"
    type = "A"
    nth = 1
    action = "drop"

    [[rule]]
    name = "keepalive-instead"          # Logstash's A 0 while a batch is held
    direction = "s2c"
    type = "A"
    where = { seq = ">0" }
    probability = 0.5
    action = "rewrite"
    field = "seq"
    value = 0

Actions: ``drop``, ``delay`` (``seconds``), ``duplicate``, ``split`` (at a
named ``field``'s start or at byte ``at``, with a ``gap`` in seconds),
``truncate`` (keep ``at`` bytes, then ``then`` = ``close`` | ``reset`` |
``stall``), ``corrupt`` (flip the bits of one named ``field``),
``rewrite`` (set one named ``field`` to ``value``), ``reorder`` (hold this
frame and pass it on right after the next frame of its direction; at the end of
the direction, before the end), ``inject`` (the bytes of a vector from
``specs/<protocol>/vectors`` named by ``vector`` -- ``"window-count-2"`` or
``"frames/window-count-2"`` -- passed on ``place = "before"`` (default) or
``"after"`` this frame), ``close`` / ``reset`` (after this frame is passed on).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from .rule import ACTIONS, Rule, ScheduleError, _fail, parse_rules, rule_rng
from .toxics import ToxicError, parse_toxic

__all__ = ["ACTIONS", "Rule", "Schedule", "ScheduleError", "load_schedule", "rule_rng"]


@attrs.frozen
class Schedule:
    protocol: str
    rules: tuple[Rule, ...]
    seed: int = 0
    #: byte-level toxics to add at start (toxiproxy-shaped bodies, ``[[toxic]]`` in the file)
    toxics: tuple[Mapping[str, Any], ...] = ()


#: ``[[toxic]]`` types under the simulator's knob names -> (toxiproxy type, default attributes).
KNOB_TOXICS: dict[str, tuple[str, dict[str, int]]] = {
    "trickle": ("slicer", {"average_size": 1, "size_variation": 0, "delay": 1000}),
    "partial_read": ("slicer", {"average_size": 64, "size_variation": 32, "delay": 0}),
    "stall": ("latency", {"latency": 2000, "jitter": 0}),
    "blackhole": ("timeout", {"timeout": 0}),
    "reset": ("reset_peer", {"timeout": 0}),
    "torn_write": ("limit_data", {"bytes": 1}),
}


def _toxics(raw: Any, protocol: str) -> tuple[Mapping[str, Any], ...]:
    """The ``[[toxic]]`` tables as toxiproxy bodies, each checked (an unknown type or
    attribute is refused naming the toxic)."""
    if not isinstance(raw, list):
        raise _fail("toxic", "must be a list of tables ([[toxic]])")
    out = []
    for i, t in enumerate(raw, 1):
        if not isinstance(t, Mapping):
            raise _fail(f"toxic {i}", "must be a table/object")
        body = dict(t)
        kind = body.get("type")
        if kind in KNOB_TOXICS:
            real, defaults = KNOB_TOXICS[str(kind)]
            body["type"] = real
            body["attributes"] = {**defaults, **dict(body.get("attributes") or {})}
            body.setdefault("name", f"{kind}_{body.get('stream', 'downstream')}")
        try:
            parse_toxic(body, protocol)
        except ToxicError as exc:
            raise _fail(f"toxic {i} ({body.get('name') or kind})", f"{exc} (knob names too: {', '.join(KNOB_TOXICS)})") from None
        out.append(body)
    return tuple(out)


def parse_schedule(doc: Mapping[str, Any], protocol: str) -> Schedule:
    """A schedule document (as TOML or JSON parses it), checked: an unknown key,
    direction, frame type, field or action is refused naming it."""
    if not isinstance(doc, Mapping):
        raise _fail("top level", "must be a table/object")
    unknown = sorted(set(doc) - {"seed", "rule", "protocol", "toxic"})
    if unknown:
        raise _fail("top level", f"unknown key(s) {', '.join(unknown)} (known: seed, protocol, rule, toxic)")
    raw_rules = doc.get("rule", [])
    if not isinstance(raw_rules, list):
        raise _fail("rule", "must be a list of tables ([[rule]])")
    rules = parse_rules(raw_rules, protocol)
    seed = doc.get("seed", 0)
    if not isinstance(seed, int):
        raise _fail("seed", "must be an integer")
    return Schedule(protocol, rules, seed, _toxics(doc.get("toxic", []), protocol))


def load_schedule(path: str | Path, protocol: str) -> Schedule:
    """A schedule file: TOML (``.toml``) or JSON (anything else)."""
    p = Path(path)
    try:
        text = p.read_bytes()
    except OSError as exc:
        raise ScheduleError(f"schedule: cannot read {p}: {exc.strerror or exc}") from None
    try:
        doc = tomllib.loads(text.decode()) if p.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ScheduleError(f"schedule: {p} does not parse: {exc}") from None
    return parse_schedule(doc, protocol)


def rules_from(items: Sequence[Mapping[str, Any]], protocol: str, seed: int = 0) -> Schedule:
    """A schedule from rule dicts (the Python API's shorthand)."""
    return parse_schedule({"seed": seed, "rule": list(items)}, protocol)
