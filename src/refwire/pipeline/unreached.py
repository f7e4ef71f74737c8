"""Transitions a default campaign cannot reach, and why (``unreached.toml``).

The simulator's swarm (well-behaved clients and servers, hostile and misfit
peers) reaches most of each machine's transitions.  The rest need a peer the
swarm does not have -- a server that misbehaves towards our client, or input
only another implementation sends -- and ``unreached.toml`` says so, one line
per transition::

    [lumberjack]
    "client:idle-keepalive->idle" = "refwire's server sends A 0 only while a batch waits ..."

The campaign report (:func:`coverage_lines`, both the Spark and the local
runners) lists every never-reached transition with its reason and flags one
without a reason; :func:`stale_reasons` finds entries naming no transition of
the catalogue (a renamed state, a removed input).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources

from .machines import catalog

__all__ = ["NO_REASON", "REASON_WIDTH", "coverage_lines", "details", "never_reached_lines", "reached_by_protocol", "reasons", "stale_reasons"]

#: What the report prints for a never-reached transition nobody explained.
NO_REASON = "not explained yet"

#: The longest one-line ``reason`` (the report prints it after the transition).
REASON_WIDTH = 100


@cache
def _entries() -> dict[str, dict[str, tuple[str, str]]]:
    """``{protocol: {transition: (reason, detail)}}`` from ``unreached.toml`` (a
    plain string is both the reason and the detail)."""
    text = resources.files(__package__).joinpath("unreached.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for p, table in data.items():
        for k, v in table.items():
            if isinstance(v, dict):
                reason, detail = str(v.get("reason", "")), str(v.get("detail", v.get("reason", "")))
            else:
                reason = detail = str(v)
            out.setdefault(str(p), {})[str(k)] = (reason, detail)
    return out


def reasons() -> dict[str, dict[str, str]]:
    """``{protocol: {"machine:state-input->state": reason}}``: the one-line reasons."""
    return {p: {k: r for k, (r, _) in table.items()} for p, table in _entries().items()}


def details() -> dict[str, dict[str, str]]:
    """``{protocol: {"machine:state-input->state": detail}}``: the full accounts."""
    return {p: {k: d for k, (_, d) in table.items()} for p, table in _entries().items()}


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= REASON_WIDTH else line[: REASON_WIDTH - 3].rstrip() + "..."


def never_reached_lines(never: Iterable[tuple[str, str]], details_at: str = "refwire/pipeline/unreached.toml") -> list[str]:
    """The report's "never reached" section: one line per ``(protocol, transition)``,
    with its one-line reason (or :data:`NO_REASON`); nothing when there is none.
    ``details_at`` says where the full reasons are."""
    items = list(never)
    if not items:
        return []
    why = reasons()
    lines = [f"never reached ({len(items)} transitions; reasons in full: {details_at}):"]
    lines.extend(f"  {p} {k}: {_one_line(why.get(p, {}).get(k, NO_REASON))}" for p, k in items)
    return lines


def stale_reasons() -> list[str]:
    """``protocol transition`` of every reason naming no transition of its protocol's catalogue."""
    out: list[str] = []
    for protocol, table in sorted(reasons().items()):
        known = {t.key for t in catalog(protocol) or ()}
        out.extend(f"{protocol} {key}" for key in sorted(table) if key not in known)
    return out


def reached_by_protocol(rows: Iterable[Mapping[str, object]]) -> dict[str, set[str]]:
    """The union of every row's ``transitions``, per ``protocol`` (campaign rows)."""
    out: dict[str, set[str]] = {}
    for row in rows:
        seen = out.setdefault(str(row["protocol"]), set())
        transitions = row.get("transitions") or ()
        assert isinstance(transitions, Iterable)
        seen.update(str(t) for t in transitions)
    return out


def coverage_lines(reached: Mapping[str, Iterable[str]], details_at: str = "refwire/pipeline/unreached.toml") -> list[str]:
    """The report's coverage lines: per protocol ``reached/total transitions``, then
    every never-reached transition on one line with its reason (or :data:`NO_REASON`)."""
    lines = []
    never: list[tuple[str, str, str]] = []
    for protocol in sorted(reached):
        table = catalog(protocol)
        if not table:
            lines.append(f"  {protocol}: {len(set(reached[protocol]))} transitions seen (no machine table)")
            continue
        seen = set(reached[protocol])
        keys = [t.key for t in table]
        why = reasons().get(protocol, {})
        missing = [k for k in keys if k not in seen]
        explained = sum(1 for k in missing if k in why)
        rest = f", {explained} of the {len(missing)} others explained" if missing else ""
        lines.append(f"  {protocol}: {len(keys) - len(missing)}/{len(keys)} transitions reached{rest}")
        never.extend((protocol, k, why.get(k, NO_REASON)) for k in missing)
    lines.extend(never_reached_lines(((p, k) for p, k, _ in never), details_at))
    return lines
