"""One fault rule: what it matches and what it does (see :mod:`refwire.chaos.rules`
for the schedule that holds rules, and its format), and how one is read from
its table, checked against what the protocol's adapter
(:mod:`refwire.chaos.adapter`) says its frames and fields are.

Both a schedule (:mod:`refwire.chaos.rules`) and a ``frame`` toxic
(:mod:`refwire.chaos.toxics`) are made of these rules.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..errors import RefwireError
from .adapter import adapter_for, observed_types

__all__ = ["ACTIONS", "DIRECTIONS", "Rule", "ScheduleError", "parse_rules", "rule_rng"]

ACTIONS = ("drop", "delay", "duplicate", "reorder", "split", "truncate", "corrupt", "rewrite", "inject", "close", "reset")
DIRECTIONS = ("c2s", "s2c", "both")
_KEYS = {
    "name", "direction", "type", "where", "connection", "nth", "every", "first", "after", "count",
    "probability", "burst", "window", "action", "seconds", "field", "value", "at", "gap", "then", "vector", "place",
}  # fmt: skip


class ScheduleError(RefwireError):
    """A schedule that cannot run: the message names the rule and what is wrong."""


@attrs.frozen(kw_only=True)
class Rule:
    """One rule (see :mod:`refwire.chaos.rules`)."""

    name: str
    action: str
    direction: str = "both"
    type: str = "*"
    where: Mapping[str, Any] = attrs.field(factory=dict)
    connection: int | None = None
    nth: int | None = None
    every: int | None = None
    first: int | None = None
    after: int | None = None
    count: int | None = None
    probability: float = 1.0
    burst: int | None = None
    window: tuple[float, float] | None = None
    seconds: float = 0.0
    field: str | None = None
    value: int | None = None
    at: int | None = None
    gap: float = 0.0
    then: str = "close"
    #: ``inject``: the vector's name, its bytes (hex, so a record replays them as they were) and where they go
    vector: str | None = None
    payload: str | None = None
    place: str = "before"

    def matches_frame(self, direction: str, ftype: str, fields: Mapping[str, Any], conn: int, index: int, t: float) -> bool:
        """The deterministic part of matching (position, fields, time); draws come after."""
        if self.direction != "both" and self.direction != direction:
            return False
        if self.type != "*" and self.type != ftype:
            return False
        if self.connection is not None and self.connection != conn:
            return False
        n = index + 1  # 1-based position of the frame in its direction
        if self.nth is not None and n != self.nth:
            return False
        if self.every is not None and n % self.every:
            return False
        if self.first is not None and n > self.first:
            return False
        if self.after is not None and n <= self.after:
            return False
        if self.window is not None and not self.window[0] <= t < self.window[1]:
            return False
        return all(_field_matches(fields.get(k), cond) for k, cond in self.where.items())


def _field_matches(value: Any, cond: Any) -> bool:
    if isinstance(cond, str) and cond[:2] in (">=", "<=") and value is not None:
        return bool(value >= float(cond[2:]) if cond[0] == ">" else value <= float(cond[2:]))
    if isinstance(cond, str) and cond[:1] in (">", "<") and value is not None:
        return bool(value > float(cond[1:]) if cond[0] == ">" else value < float(cond[1:]))
    return bool(value == cond)


def rule_rng(seed: int, rule: str, conn: int, direction: str) -> random.Random:
    """The random stream of one (rule, connection, direction): a stable digest of
    the run seed and the three, never Python's salted ``hash()``."""
    digest = hashlib.blake2b(f"{seed}\x00{rule}\x00{conn}\x00{direction}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def _fail(where: str, text: str) -> ScheduleError:
    return ScheduleError(f"schedule: {where}: {text}")


def parse_rules(raw_rules: Sequence[Any], protocol: str) -> tuple[Rule, ...]:
    """The ``[[rule]]`` tables (as TOML or JSON parses them), checked: an unknown
    key, direction, frame type, field or action is refused naming it."""
    types = observed_types(protocol)
    adapter = adapter_for(protocol)
    fields_of = adapter.fields
    rules: list[Rule] = []
    names: set[str] = set()
    for i, raw in enumerate(raw_rules, 1):
        if not isinstance(raw, Mapping):
            raise _fail(f"rule {i}", "must be a table/object")
        name = str(raw.get("name") or f"rule{i}")
        where = f"rule {i} ({name})"
        bad = sorted(set(raw) - _KEYS)
        if bad:
            raise _fail(where, f"unknown key(s) {', '.join(bad)}")
        if name in names:
            raise _fail(where, "a rule of that name exists already")
        names.add(name)
        action = raw.get("action")
        if action not in ACTIONS:
            raise _fail(where, f"unknown action {action!r} (known: {', '.join(ACTIONS)})")
        direction = raw.get("direction", "both")
        if direction not in DIRECTIONS:
            raise _fail(where, f"unknown direction {direction!r} (known: {', '.join(DIRECTIONS)})")
        ftype = str(raw.get("type", "*")).removeprefix(adapter.prefix + ":")
        if ftype != "*" and ftype not in types:
            raise _fail(where, f"unknown frame type {raw.get('type')!r} for {protocol} (known: {', '.join(types)})")
        field = raw.get("field")
        wanted = set(raw.get("where", {})) | ({field} if field else set())
        known_fields = set(fields_of.get(ftype, {})) if ftype != "*" else {f for fs in fields_of.values() for f in fs}
        if action in ("corrupt", "rewrite") and not field:
            raise _fail(where, f"action {action!r} needs a field")
        if action == "rewrite" and raw.get("value") is None:
            raise _fail(where, "action 'rewrite' needs a value")
        for f in sorted(wanted):
            if f not in known_fields:
                raise _fail(
                    where,
                    f"unknown field {f!r} for frame type {ftype!r} of {protocol} (known: {', '.join(sorted(known_fields)) or 'none'})",
                )
        try:
            window = raw.get("window")
            rule = Rule(
                name=name,
                action=action,
                direction=direction,
                type=ftype,
                where=dict(raw.get("where", {})),
                connection=_opt_int(raw, "connection"),
                nth=_opt_int(raw, "nth"),
                every=_opt_int(raw, "every"),
                first=_opt_int(raw, "first"),
                after=_opt_int(raw, "after"),
                count=_opt_int(raw, "count"),
                probability=float(raw.get("probability", 1.0)),
                burst=_opt_int(raw, "burst"),
                window=None if window is None else (float(window[0]), float(window[1])),
                seconds=float(raw.get("seconds", 0.0)),
                field=field,
                value=_opt_int(raw, "value"),
                at=_opt_int(raw, "at"),
                gap=float(raw.get("gap", 0.0)),
                then=str(raw.get("then", "close")),
                vector=None if raw.get("vector") is None else str(raw["vector"]),
                place=str(raw.get("place", "before")),
            )
        except (TypeError, ValueError, IndexError) as exc:
            raise _fail(where, f"bad value: {exc}") from None
        if not 0.0 <= rule.probability <= 1.0:
            raise _fail(where, f"probability {rule.probability} is not between 0 and 1")
        if rule.then not in ("close", "reset", "stall"):
            raise _fail(where, f"unknown 'then' {rule.then!r} (known: close, reset, stall)")
        if action in ("split", "truncate") and rule.at is None and not field:
            raise _fail(where, f"action {action!r} needs 'at' (a byte offset) or a field")
        if rule.place not in ("before", "after"):
            raise _fail(where, f"unknown place {rule.place!r} (known: before, after)")
        if action == "inject":
            if not rule.vector:
                raise _fail(where, "action 'inject' needs a vector (a name from specs/<protocol>/vectors)")
            rule = attrs.evolve(rule, payload=_vector_hex(protocol, rule.vector, where))
        rules.append(rule)
    return tuple(rules)


def _vector_hex(protocol: str, name: str, where: str) -> str:
    """The hex of the vector ``name`` (``"NAME"`` or ``"FILE/NAME"``) of ``protocol``'s spec."""
    from .. import specs

    try:
        files = specs.vector_files(protocol)
    except KeyError:
        raise _fail(where, f"{protocol} has no vectors to inject") from None
    stem, _, vname = name.rpartition("/")
    found: list[tuple[str, str]] = []
    known: list[str] = []
    for fstem, fpath in files.items():
        if stem and fstem != stem:
            continue
        for v in json.loads(fpath.read_text(encoding="utf-8")).get("vectors", []):
            if isinstance(v, Mapping) and isinstance(v.get("hex"), str) and "name" in v:
                known.append(f"{fstem}/{v['name']}")
                if v["name"] == vname:
                    found.append((f"{fstem}/{v['name']}", v["hex"]))
    if not found:
        some = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
        raise _fail(where, f"no vector {name!r} in specs/{protocol}/vectors (e.g. {some})")
    if len(found) > 1:
        raise _fail(where, f"vector {name!r} is in more than one file ({', '.join(k for k, _ in found)}): name one")
    return found[0][1]


def _opt_int(raw: Mapping[str, Any], key: str) -> int | None:
    v = raw.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{key} must be an integer, got {v!r}")
    return v
