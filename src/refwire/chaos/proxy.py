"""The fault proxy: between a client and its server, frame-aware and seeded.

Each accepted connection gets a connection to the upstream; each direction is
relayed by its own task, which cuts the bytes into frames with the protocol's
observer (:mod:`refwire.chaos.observe`) and applies the schedule's rules
(:mod:`refwire.chaos.rules`) to frame ``n`` of connection ``c`` in direction
``d``.  What the observer cannot decode passes through untouched.  Every
decision, and every connection's opening and end, is a JSON line in the
record when one is kept (``record``).

Memory: a direction holds at most one incomplete frame (bounded by
``max_frame_size``) and whatever a ``delay`` holds while it sleeps -- one
frame, since a delayed frame holds back the frames after it, as TCP would.
"""

from __future__ import annotations

import itertools
import json
import logging
import socket
import struct
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import IO, Any

import attrs
import trio

from ..drivers import listener_address
from .check import Checker, Violation, checker_for
from .observe import FIELDS, Observed, observer_for
from .rules import Rule, Schedule, rule_rng

__all__ = ["ChaosProxy", "open_chaos", "replay_plan"]

log = logging.getLogger("refwire.chaos")

#: Bytes of a frame kept as hex in a record line (before and after).
RECORD_HEX = 64


@attrs.define
class _RuleState:
    rng: Any
    run: int = 0


class _Closed(Exception):
    """The connection was closed by an action."""


class ChaosProxy:
    """See the module docstring.  ``await nursery.start(proxy.serve, listeners)``."""

    def __init__(
        self,
        protocol: str,
        upstream: tuple[str, int],
        schedule: Schedule,
        *,
        record: IO[str] | None = None,
        max_frame_size: int = 64 * 1024 * 1024,
        connect_timeout: float = 10.0,
        replay: Mapping[tuple[int, str, int], Sequence[Rule]] | None = None,
        check: bool = False,
    ) -> None:
        #: the protocol's invariants on the traffic (``--check``), or None
        self.checker: Checker | None = checker_for(protocol) if check else None
        #: recorded decisions to apply instead of the schedule's draws, by
        #: (connection, direction, frame index) (``refwire chaos replay``)
        self.replay = replay
        self.protocol = protocol
        self.upstream = upstream
        self.schedule = schedule
        self.record_to = record
        self.max_frame_size = max_frame_size
        self.connect_timeout = connect_timeout
        self.addresses: list[str] = []
        #: every decision taken, as the record has it (also without a record file)
        self.decisions: list[dict[str, Any]] = []
        self.stats = {"connections": 0, "frames": 0, "actions": 0, "upstream_down": 0}
        self._ids = itertools.count(1)
        self._fired: dict[str, int] = {}
        self._t0 = 0.0
        self._extra: list[Rule] = []
        self._delivered: dict[tuple[int, str], tuple[Any, list[int]]] = {}
        self._violations_written = 0

    # ------------------------------------------------------------------ api

    @asynccontextmanager
    async def rule(self, **spec: Any) -> AsyncIterator[Rule]:
        """A rule added for the ``async with`` block (after the schedule's rules)."""
        from .rules import rules_from

        (added,) = rules_from([spec], self.protocol).rules
        self._extra.append(added)
        try:
            yield added
        finally:
            self._extra.remove(added)

    async def serve(
        self,
        listeners: Sequence[trio.SocketListener],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        self._t0 = trio.current_time()
        self.addresses = [listener_address(lst) for lst in listeners]
        self._write(
            {
                "event": "start",
                "protocol": self.protocol,
                "seed": self.schedule.seed,
                "upstream": f"{self.upstream[0]}:{self.upstream[1]}",
            }
        )
        async with trio.open_nursery() as nursery:
            for lst in listeners:
                nursery.start_soon(self._accept_loop, lst, nursery)
            task_status.started()

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return
            nursery.start_soon(self._handle, stream)

    # ------------------------------------------------------------------ one connection

    async def _handle(self, client: trio.SocketStream) -> None:
        conn = next(self._ids)
        self.stats["connections"] += 1
        try:
            with trio.fail_after(self.connect_timeout):
                upstream = await trio.open_tcp_stream(*self.upstream)
        except (OSError, trio.TooSlowError) as exc:
            self.stats["upstream_down"] += 1
            why = "timed out" if isinstance(exc, trio.TooSlowError) else (exc.strerror or str(exc))
            log.warning(
                "chaos: connection %d: the upstream %s:%d is down (%s); closing the client's connection",
                conn,
                *self.upstream,
                why,
            )
            self._write({"event": "upstream-down", "conn": conn, "reason": why})
            await trio.aclose_forcefully(client)
            return
        self._write({"event": "open", "conn": conn})
        ends: dict[str, str] = {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._relay, client, upstream, "c2s", conn, ends, nursery.cancel_scope)
            nursery.start_soon(self._relay, upstream, client, "s2c", conn, ends, nursery.cancel_scope)
        await trio.aclose_forcefully(client)
        await trio.aclose_forcefully(upstream)
        self._write({"event": "close", "conn": conn, **ends})
        if self.checker is not None:
            self.checker.closed(conn)

    def finish(self) -> list[Violation]:
        """The run is over: the checks that need its end, and every violation (each also recorded)."""
        if self.checker is None:
            return []
        found = self.checker.finish()
        for v in found[self._violations_written :]:
            self._write(v.to_json())
        self._violations_written = len(found)
        return found

    async def _relay(
        self,
        src: trio.SocketStream,
        dst: trio.SocketStream,
        direction: str,
        conn: int,
        ends: dict[str, str],
        scope: trio.CancelScope,
    ) -> None:
        observer = observer_for(self.protocol, self.max_frame_size)
        delivered = observer_for(self.protocol, self.max_frame_size) if self.checker is not None else None
        self._delivered[(conn, direction)] = (delivered, [0])
        states: dict[str, _RuleState] = {}
        index = 0
        try:
            while True:
                try:
                    data = await src.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    ends[direction] = "RST"
                    await _reset(dst)
                    scope.cancel()
                    return
                if not data:
                    ends[direction] = "FIN"
                    try:
                        await dst.send_eof()
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        pass
                    return
                for frame in observer.feed(data):
                    await self._one_frame(frame, direction, conn, index, states, dst, src, scope)
                    index += 1
        except _Closed:
            ends[direction] = "closed by a rule"
            scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            ends.setdefault(direction, "write failed")
            scope.cancel()

    async def _one_frame(
        self,
        frame: Observed,
        direction: str,
        conn: int,
        index: int,
        states: dict[str, _RuleState],
        dst: trio.SocketStream,
        src: trio.SocketStream,
        scope: trio.CancelScope,
    ) -> None:
        self.stats["frames"] += 1
        if self.checker is not None:
            self.checker.sent(conn, direction, index, frame)
        t = trio.current_time() - self._t0
        data = frame.data
        writes: list[tuple[bytes, float]] = [(data, 0.0)]  # (bytes, seconds to wait before them)
        end: str | None = None
        replayed = None if self.replay is None else self.replay.get((conn, direction, index), ())
        for rule in (*self.schedule.rules, *self._extra) if replayed is None else replayed:
            draw = 0.0
            if replayed is None:
                if not rule.matches_frame(direction, frame.type, frame.fields, conn, index, t):
                    continue
                if rule.count is not None and self._fired.get(rule.name, 0) >= rule.count:
                    continue
                st = states.get(rule.name)
                if st is None:
                    st = states[rule.name] = _RuleState(rule_rng(self.schedule.seed, rule.name, conn, direction))
                draw = st.rng.random() if rule.probability < 1.0 else 0.0
                if draw >= rule.probability or (rule.burst is not None and st.run >= rule.burst):
                    st.run = 0
                    continue
                st.run += 1
            self._fired[rule.name] = self._fired.get(rule.name, 0) + 1
            before = b"".join(w for w, _ in writes)
            writes, end = self._apply(rule, frame, writes, end)
            after = b"".join(w for w, _ in writes)
            self.stats["actions"] += 1
            self._write(
                {
                    "event": "action",
                    "t": round(t, 6),
                    "conn": conn,
                    "dir": direction,
                    "frame": index,
                    "type": frame.type,
                    "fields": frame.fields,
                    "rule": rule.name,
                    "action": rule.action,
                    "params": _params(rule),
                    "draw": round(draw, 6),
                    "before": before[:RECORD_HEX].hex(),
                    "after": after[:RECORD_HEX].hex(),
                    "size_before": len(before),
                    "size_after": len(after),
                }
            )
        for chunk, wait in writes:
            if wait > 0:
                await trio.sleep(wait)
            if chunk:
                await dst.send_all(chunk)
                self._check_delivered(conn, direction, chunk)
        if end == "close":
            raise _Closed
        if end == "reset":
            await _reset(dst)
            await _reset(src)
            raise _Closed
        if end == "stall":
            await trio.sleep_forever()

    def _check_delivered(self, conn: int, direction: str, chunk: bytes) -> None:
        observer, counter = self._delivered.get((conn, direction), (None, [0]))
        if observer is None or self.checker is None:
            return
        for frame in observer.feed(chunk):
            self.checker.received(conn, direction, counter[0], frame)
            counter[0] += 1
        new = self.checker.violations[self._violations_written :]
        for v in new:
            self._write(v.to_json())
        self._violations_written += len(new)

    def _apply(
        self, rule: Rule, frame: Observed, writes: list[tuple[bytes, float]], end: str | None
    ) -> tuple[list[tuple[bytes, float]], str | None]:
        data = b"".join(w for w, _ in writes)
        a = rule.action
        if a == "drop":
            return [], end
        if a == "delay":
            return [(data, rule.seconds)], end
        if a == "duplicate":
            return [(data, 0.0), (data, 0.0)], end
        if a in ("split", "truncate"):
            span = self._field_span(frame.type, rule.field)
            if rule.at is None and span is None:
                return writes, end  # this frame type has no such field
            at = rule.at if rule.at is not None else span[0] if span is not None else 0
            at = max(0, min(at, len(data)))
            if a == "split":
                return [(data[:at], 0.0), (data[at:], rule.gap)], end
            return [(data[:at], 0.0)], rule.then
        if a in ("corrupt", "rewrite"):
            span = self._field_span(frame.type, rule.field)
            if span is None or span[0] + span[1] > len(data):
                return writes, end
            start, size = span
            b = bytearray(data)
            if a == "corrupt":
                for i in range(start, start + size):
                    b[i] ^= 0xFF
            else:
                assert rule.value is not None
                b[start : start + size] = (rule.value % (1 << (8 * size))).to_bytes(size, "big")
            return [(bytes(b), 0.0)], end
        if a in ("close", "reset"):
            return writes, a
        return writes, end

    def _field_span(self, ftype: str, field: str | None) -> tuple[int, int] | None:
        """Where ``field`` lies in a frame of type ``ftype`` (None: that type has no such field)."""
        if field is None:
            return None
        spans: Mapping[str, tuple[int, int]] = FIELDS.get(self.protocol, {}).get(ftype, {})
        return spans.get(field)

    def _write(self, entry: dict[str, Any]) -> None:
        if entry.get("event") == "action":
            self.decisions.append(entry)
        if self.record_to is not None:
            self.record_to.write(json.dumps(entry, sort_keys=True) + "\n")
            self.record_to.flush()


def _params(rule: Rule) -> dict[str, Any]:
    """What an action needs to be applied again (``refwire chaos replay``)."""
    return {k: getattr(rule, k) for k in ("seconds", "field", "value", "at", "gap", "then")}


def replay_plan(lines: Sequence[str]) -> dict[tuple[int, str, int], list[Rule]]:
    """A record's decisions, by (connection, direction, frame index), as rules to apply again."""
    plan: dict[tuple[int, str, int], list[Rule]] = {}
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
        plan.setdefault((int(entry["conn"]), str(entry["dir"]), int(entry["frame"])), []).append(rule)
    return plan


async def _reset(stream: trio.SocketStream) -> None:
    """Close with an RST (SO_LINGER 0)."""
    try:
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    await trio.aclose_forcefully(stream)


@asynccontextmanager
async def open_chaos(
    protocol: str,
    *,
    upstream: tuple[str, int],
    schedule: Schedule | None = None,
    listen: tuple[str, int] = ("127.0.0.1", 0),
    record: IO[str] | None = None,
    max_frame_size: int = 64 * 1024 * 1024,
    replay: Mapping[tuple[int, str, int], Sequence[Rule]] | None = None,
    check: bool = False,
) -> AsyncIterator[ChaosProxy]:
    """A proxy on ``listen`` (port 0: any) for the ``async with`` block::

    async with open_chaos("lumberjack", upstream=("127.0.0.1", 5044), schedule=s) as proxy:
        ...  # clients connect to proxy.addresses[0]
        async with proxy.rule(name="drop-acks", type="A", direction="s2c", action="drop"):
            ...
    """
    proxy = ChaosProxy(
        protocol,
        upstream,
        schedule or Schedule(protocol, ()),
        record=record,
        max_frame_size=max_frame_size,
        replay=replay,
        check=check,
    )
    listeners = await trio.open_tcp_listeners(listen[1], host=listen[0])
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve, listeners)
        try:
            yield proxy
        finally:
            nursery.cancel_scope.cancel()
    proxy.finish()
