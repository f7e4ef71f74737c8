"""What the schedule's rules decide on a frame: whether a rule fires (its
position, fields, fire count, then its seeded draw), what its action makes of
the frame's bytes, and each decision as the record has it -- from which
``refwire chaos replay`` applies the same decisions again (:func:`replay_plan`).

Fields are found where the protocol's adapter says they are
(:mod:`refwire.chaos.adapter`), integers written in its byte order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .adapter import Adapter
from .observe import Observed
from .rule import Rule, rule_rng

__all__ = ["INNER_ACTIONS", "RECORD_HEX", "RuleState", "action_entry", "apply_rule", "field_span", "fires", "replay_plan"]

#: Bytes of a frame kept as hex in a record line (before and after).
RECORD_HEX = 64
#: What a rule may do to a frame inside an envelope (the others act on whole frames only).
INNER_ACTIONS = frozenset({"drop", "duplicate", "corrupt", "rewrite"})


@attrs.define
class RuleState:
    """A rule on one direction of one connection: its random stream, and how many
    frames in a row it has fired on (its ``burst``)."""

    rng: Any
    run: int = 0


def fires(
    rule: Rule,
    frame: Observed,
    conn: int,
    direction: str,
    index: int,
    t: float,
    states: dict[str, RuleState],
    seed: int,
    fired: Mapping[str, int],
) -> tuple[bool, float]:
    """Whether ``rule`` fires on ``frame`` (its position, fields, count -- ``fired``
    says how often each rule has -- then its draw, from the run's ``seed``)."""
    if not rule.matches_frame(direction, frame.type, frame.fields, conn, index, t):
        return False, 0.0
    if rule.count is not None and fired.get(rule.name, 0) >= rule.count:
        return False, 0.0
    st = states.get(rule.name)
    if st is None:
        st = states[rule.name] = RuleState(rule_rng(seed, rule.name, conn, direction))
    draw = st.rng.random() if rule.probability < 1.0 else 0.0
    if draw >= rule.probability or (rule.burst is not None and st.run >= rule.burst):
        st.run = 0
        return False, draw
    st.run += 1
    return True, draw


def action_entry(
    rule: Rule,
    frame: Observed,
    conn: int,
    direction: str,
    index: int,
    t: float,
    draw: float,
    before: bytes,
    after: bytes,
    inner: int | None = None,
) -> dict[str, Any]:
    """One decision as the record has it (``event`` ``action``)."""
    entry: dict[str, Any] = {
        "event": "action",
        "t": round(t, 6),
        "conn": conn,
        "dir": direction,
        "frame": index,
        "type": frame.type,
        "fields": frame.fields,
        "rule": rule.name,
        "action": rule.action,
        "params": action_params(rule),
        "draw": round(draw, 6),
        "before": before[:RECORD_HEX].hex(),
        "after": after[:RECORD_HEX].hex(),
        "size_before": len(before),
        "size_after": len(after),
    }
    if inner is not None:
        entry["inner"] = inner  # the frame's place inside its envelope
    return entry


def apply_rule(
    rule: Rule, frame: Observed, writes: list[tuple[bytes, float]], end: str | None, adapter: Adapter
) -> tuple[list[tuple[bytes, float]], str | None]:
    """What ``rule`` makes of ``frame``, whose bytes are now ``writes`` ((bytes,
    seconds to wait before them), after the rules before it), and how the
    direction goes on after it (``end``: None, ``hold``, ``close``, ``reset``, ``stall``)."""
    data = b"".join(w for w, _ in writes)
    a = rule.action
    if a == "drop":
        return [], end
    if a == "delay":
        return [(data, rule.seconds)], end
    if a == "duplicate":
        return [(data, 0.0), (data, 0.0)], end
    if a == "reorder":
        return writes, "hold"
    if a == "inject":
        extra = (bytes.fromhex(rule.payload or ""), 0.0)
        return ([extra, *writes] if rule.place == "before" else [*writes, extra]), end
    if a in ("split", "truncate"):
        span = field_span(frame, rule.field, adapter)
        if rule.at is None and span is None:
            return writes, end  # this frame type has no such field
        at = rule.at if rule.at is not None else span[0] if span is not None else 0
        at = max(0, min(at, len(data)))
        if a == "split":
            return [(data[:at], 0.0), (data[at:], rule.gap)], end
        return [(data[:at], 0.0)], rule.then
    if a in ("corrupt", "rewrite"):
        span = field_span(frame, rule.field, adapter)
        if span is None or span[0] + span[1] > len(data):
            return writes, end
        start, size = span
        b = bytearray(data)
        if a == "corrupt":
            for i in range(start, start + size):
                b[i] ^= 0xFF
        else:
            assert rule.value is not None
            b[start : start + size] = (rule.value % (1 << (8 * size))).to_bytes(size, adapter.byte_order)
        return [(bytes(b), 0.0)], end
    if a in ("close", "reset"):
        return writes, a
    return writes, end


def field_span(frame: Observed, field: str | None, adapter: Adapter) -> tuple[int, int] | None:
    """Where ``field`` lies in ``frame`` (None: its type has no such field)."""
    if field is None:
        return None
    spans: Mapping[str, tuple[int, int]] = frame.spans if frame.spans is not None else adapter.fields.get(frame.type, {})
    return spans.get(field)


def action_params(rule: Rule) -> dict[str, Any]:
    """What an action needs to be applied again (``refwire chaos replay``)."""
    return {k: getattr(rule, k) for k in ("seconds", "field", "value", "at", "gap", "then", "vector", "payload", "place")}


def replay_plan(lines: Sequence[str]) -> dict[tuple[int | str, ...], list[Rule]]:
    """A record's decisions, by (connection, direction, frame index), as rules to apply again."""
    plan: dict[tuple[int | str, ...], list[Rule]] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"record line {n} is not JSON: {exc}") from None
        if entry.get("event") != "action":
            continue
        params = entry.get("params", {})
        rule = Rule(name=str(entry["rule"]), action=str(entry["action"]), **params)
        key: tuple[int, ...] = (int(entry["conn"]), int(entry["frame"]))
        where = (key[0], str(entry["dir"]), key[1], *((int(entry["inner"]),) if "inner" in entry else ()))
        plan.setdefault(where, []).append(rule)
    return plan
