"""Toxics: faults added to a running proxy, in toxiproxy's shape.

A toxic is ``{name, type, stream, toxicity, attributes}`` as toxiproxy's HTTP
API has it (:mod:`refwire.chaos.control`), so its client libraries drive
refwire's proxy unchanged.  ``stream`` ``upstream`` is the client -> server
direction (``c2s``), ``downstream`` the server -> client one (``s2c``).

The byte toxics carry toxiproxy's names and attribute names and units:

================  ==========================================  =====================================
type              attributes                                  what it does to a direction
================  ==========================================  =====================================
``latency``       ``latency``, ``jitter`` (ms)                each chunk is passed on ``latency``
                                                              +/- ``jitter`` ms after it arrived
``bandwidth``     ``rate`` (KB/s, 1 KB = 1000 bytes)          at most ``rate`` KB per second
``slow_close``    ``delay`` (ms)                              the end (FIN) is passed on ``delay``
                                                              ms late
``timeout``       ``timeout`` (ms)                            nothing gets through; the connection
                                                              is closed after ``timeout`` ms (0:
                                                              never, until the toxic is removed,
                                                              which then closes it)
``reset_peer``    ``timeout`` (ms)                            at the first data, ``timeout`` ms
                                                              later both ends get an RST
``slicer``        ``average_size``, ``size_variation``        each chunk cut into pieces of about
                  (bytes), ``delay`` (microseconds)           ``average_size`` bytes, ``delay``
                                                              between them
``limit_data``    ``bytes``                                   after ``bytes`` bytes the connection
                                                              is closed
================  ==========================================  =====================================

refwire's own type ``frame`` is a schedule rule (:mod:`refwire.chaos.rules`):
its ``attributes`` are the rule's keys (``type``, ``where``, ``nth``,
``action``, ...) but ``name`` and ``direction``, which come from the toxic.

``toxicity`` is, as in toxiproxy, the probability that the toxic applies to a
connection (each direction of it); unlike toxiproxy the draw, and every other
draw of the toxic (jitter, slice sizes), comes from the random stream of
(toxic, connection, direction) derived from the run's seed, so the seed
decides which connections a toxic hits.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

from .rule import Rule, ScheduleError, parse_rules, rule_rng

__all__ = ["STREAMS", "TOXIC_TYPES", "LinkClosed", "Toxic", "ToxicError", "ToxicState", "parse_toxic", "pipe", "update_toxic"]

#: Each byte toxic type and its attributes with their defaults (toxiproxy's names).
TOXIC_TYPES: dict[str, dict[str, int]] = {
    "latency": {"latency": 0, "jitter": 0},
    "bandwidth": {"rate": 0},
    "slow_close": {"delay": 0},
    "timeout": {"timeout": 0},
    "reset_peer": {"timeout": 0},
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},
    "limit_data": {"bytes": 0},
}
#: refwire's toxic type for a frame rule.
FRAME = "frame"
#: toxiproxy's stream names and refwire's directions.
STREAMS = {"upstream": "c2s", "downstream": "s2c"}


class ToxicError(ValueError):
    """A toxic body that cannot be used; ``status`` is the HTTP status toxiproxy answers with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class LinkClosed(Exception):
    """A toxic ended the connection: ``how`` is ``close`` (FIN) or ``reset`` (RST)."""

    def __init__(self, toxic: Toxic, how: str) -> None:
        super().__init__(f"{toxic.type} toxic {toxic.name!r}: {how}")
        self.toxic = toxic
        self.how = how


@attrs.define(eq=False)
class Toxic:
    """One toxic on one proxy (see the module docstring)."""

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, Any]
    #: the rule of a ``frame`` toxic
    rule: Rule | None = None
    #: tells a re-added toxic of the same name from the one removed (per-connection state is by serial)
    serial: int = 0

    @property
    def direction(self) -> str:
        """``c2s`` (``upstream``) or ``s2c`` (``downstream``)."""
        return STREAMS[self.stream]

    def to_json(self) -> dict[str, Any]:
        """The toxic as toxiproxy's API shows it."""
        return {
            "attributes": dict(self.attributes),
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
        }


@attrs.define
class ToxicState:
    """A toxic on one direction of one connection: its random stream and what it has done."""

    rng: random.Random
    #: the first draw of the stream: the toxic applies while ``draw < toxicity``
    draw: float
    #: trio time the toxic was first seen on this connection (``timeout`` counts from it)
    since: float
    sent: int = 0
    next_free: float = 0.0

    def armed(self, toxic: Toxic) -> bool:
        """Whether ``toxic`` applies to this connection (its toxicity against the stored draw)."""
        return self.draw < toxic.toxicity


def new_state(seed: int, toxic: Toxic, conn: int, direction: str) -> ToxicState:
    """The state of ``toxic`` on (``conn``, ``direction``): the toxicity draw is the stream's first."""
    rng = rule_rng(seed, f"toxic\x00{toxic.name}", conn, direction)
    return ToxicState(rng=rng, draw=rng.random(), since=trio.current_time())


def _toxicity(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToxicError(f"bad request body: toxicity must be a number, got {value!r}")
    if not 0.0 <= float(value) <= 1.0:
        raise ToxicError(f"bad request body: toxicity {value} is not between 0 and 1")
    return float(value)


def _attributes(ttype: str, given: Any, base: Mapping[str, Any]) -> dict[str, Any]:
    if given is None:
        return dict(base)
    if not isinstance(given, Mapping):
        raise ToxicError("bad request body: attributes must be an object")
    known = TOXIC_TYPES[ttype]
    out = dict(base)
    for key, value in given.items():
        if key not in known:
            raise ToxicError(f"bad request body: {ttype} has no attribute {key!r} (known: {', '.join(known)})")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ToxicError(f"bad request body: attribute {key!r} must be an integer, got {value!r}")
        if value < 0:
            raise ToxicError(f"bad request body: attribute {key!r} must not be negative, got {value}")
        out[key] = value
    return out


def _frame_rule(name: str, direction: str, given: Any, protocol: str) -> tuple[dict[str, Any], Rule]:
    if not isinstance(given, Mapping):
        raise ToxicError("bad request body: a frame toxic needs attributes (a rule: type, action, ...)")
    clash = sorted({"name", "direction"} & set(given))
    if clash:
        raise ToxicError(f"bad request body: a frame toxic takes {' and '.join(clash)} from the toxic, not its attributes")
    try:
        (rule,) = parse_rules([{**given, "name": name, "direction": direction}], protocol)
    except ScheduleError as exc:
        raise ToxicError(f"bad request body: {exc}") from None
    return dict(given), rule


def parse_toxic(body: Any, protocol: str, serial: int = 0) -> Toxic:
    """A new toxic from its JSON body, with toxiproxy's defaults (``downstream``,
    toxicity 1, name ``<type>_<stream>``); :class:`ToxicError` names what is wrong."""
    if not isinstance(body, Mapping):
        raise ToxicError("bad request body: a toxic is a JSON object")
    stream = body.get("stream", "downstream")
    if stream not in STREAMS:
        raise ToxicError("stream was invalid, can be either upstream or downstream")
    ttype = body.get("type")
    name = body.get("name") or f"{ttype}_{stream}"
    if not isinstance(name, str):
        raise ToxicError(f"bad request body: name must be a string, got {name!r}")
    if ttype != FRAME and ttype not in TOXIC_TYPES:
        raise ToxicError(f"invalid toxic type: {ttype!r} (known: {', '.join((*TOXIC_TYPES, FRAME))})")
    toxicity = _toxicity(body.get("toxicity", 1.0))
    if ttype == FRAME:
        attributes, rule = _frame_rule(name, STREAMS[stream], body.get("attributes"), protocol)
        return Toxic(name, FRAME, stream, toxicity, attributes, rule, serial)
    return Toxic(name, ttype, stream, toxicity, _attributes(ttype, body.get("attributes"), TOXIC_TYPES[ttype]), None, serial)


def update_toxic(toxic: Toxic, body: Any, protocol: str) -> None:
    """Apply an update body (``attributes`` merged into the toxic's, ``toxicity``), as toxiproxy does."""
    if not isinstance(body, Mapping):
        raise ToxicError("bad request body: a toxic update is a JSON object")
    toxicity = _toxicity(body["toxicity"]) if "toxicity" in body else toxic.toxicity
    if toxic.type == FRAME:
        given = body.get("attributes")
        if given is not None:
            if not isinstance(given, Mapping):
                raise ToxicError("bad request body: attributes must be an object")
            toxic.attributes, toxic.rule = _frame_rule(toxic.name, toxic.direction, {**toxic.attributes, **given}, protocol)
    else:
        toxic.attributes = _attributes(toxic.type, body.get("attributes"), toxic.attributes)
    toxic.toxicity = toxicity


def slices(rng: random.Random, start: int, end: int, average: int, variation: int) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` in halves, each moved by up to ``variation`` bytes, until
    every piece is at most ``average + variation`` bytes (toxiproxy's slicer)."""
    if (end - start) - average <= variation:
        return [(start, end)]
    mid = start + (end - start) // 2
    if variation > 0:
        mid += rng.randrange(-variation, variation)
    mid = max(start + 1, min(mid, end - 1))
    return slices(rng, start, mid, average, variation) + slices(rng, mid, end, average, variation)


async def pipe(toxic: Toxic, state: ToxicState, chunk: bytes, arrived: float, send: Callable[[bytes], Awaitable[None]]) -> None:
    """Pass ``chunk`` (which reached the proxy at trio time ``arrived``) through one
    byte toxic, calling ``send`` for what goes on; raises :class:`LinkClosed`
    when the toxic ends the connection."""
    a = toxic.attributes
    t = toxic.type
    if t == "latency":
        jitter = int(a["jitter"])
        delay = int(a["latency"]) + (state.rng.randrange(-jitter, jitter) if jitter > 0 else 0)
        await trio.sleep_until(arrived + max(0, delay) / 1000)
        await send(chunk)
    elif t == "bandwidth":
        rate = int(a["rate"])
        if rate <= 0:
            await send(chunk)
            return
        piece = rate * 100  # bytes in 100 ms
        for i in range(0, len(chunk), piece):
            part = chunk[i : i + piece]
            state.next_free = max(state.next_free, trio.current_time()) + len(part) / (rate * 1000)
            await trio.sleep_until(state.next_free)
            await send(part)
    elif t == "slicer":
        cuts = slices(state.rng, 0, len(chunk), max(1, int(a["average_size"])), int(a["size_variation"]))
        for n, (lo, hi) in enumerate(cuts):
            if n and a["delay"]:
                await trio.sleep(int(a["delay"]) / 1_000_000)
            await send(chunk[lo:hi])
    elif t == "limit_data":
        limit = int(a["bytes"])
        part = chunk[: max(0, limit - state.sent)]
        if part:
            await send(part)
            state.sent += len(part)
        if state.sent >= limit:
            raise LinkClosed(toxic, "close")
    elif t == "reset_peer":
        await trio.sleep(int(a["timeout"]) / 1000)
        raise LinkClosed(toxic, "reset")
    elif t == "timeout":
        return  # nothing gets through; the connection's watcher closes it after the timeout
    else:  # slow_close acts at the end of the stream; frame toxics act on frames
        await send(chunk)
