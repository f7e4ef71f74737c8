"""The fault proxy: between a client and its server, frame-aware and seeded.

Each accepted connection gets a connection to the upstream; each direction is
relayed by its own task, which cuts the bytes into frames with the protocol's
observer (:mod:`refwire.chaos.observe`, the protocol's adapter
:mod:`refwire.chaos.adapter` makes it) and applies the schedule's rules
(:mod:`refwire.chaos.rules`; what a rule decides and does:
:mod:`refwire.chaos.actions`) to frame ``n`` of connection ``c`` in direction
``d``.  What the observer cannot decode passes through untouched.  Every
decision, and every connection's opening and end, is a JSON line in the
record when one is kept (``record``).

Toxics (:mod:`refwire.chaos.toxics`, toxiproxy's shape, added and removed
while connections run, e.g. by the control API of :mod:`refwire.chaos.control`)
act on the bytes a direction passes on after the rules, in the order they were
added; a ``frame`` toxic is one more rule.

With a :class:`~refwire.pcap.PcapWriter` (``--pcap FILE``) each proxied
connection is two TCP conversations of the pcapng file, with their real
addresses: client <-> proxy and proxy <-> upstream, each carrying the bytes as
they crossed that socket -- what a peer sent, on its own conversation, and
what the proxy passed on after the faults, on the other peer's -- so Wireshark
shows a fault as the difference between the two.

Transport: by default the proxy listens on TCP and connects to the upstream
over TCP.  A caller may give it any ``trio.abc.Listener`` to serve on and any
``connect_upstream`` (an async callable returning a ``trio.abc.Stream``), e.g.
memory streams under a virtual clock; what needs a socket then falls back: a
peer without an address is ``?`` in the logs and the record, and a pcap
conversation without one gets :meth:`~refwire.pcap.PcapWriter.connection`'s
stand-in addresses.

Memory: a direction holds at most one incomplete frame (bounded by
``max_frame_size``) and whatever a ``delay`` holds while it sleeps -- one
frame, since a delayed frame holds back the frames after it, as TCP would --
plus the one frame a ``reorder`` holds until the next has passed.
Each direction also reads up to ``RELAY_QUEUE`` chunks of 64 KiB ahead of what
it has passed on (so a ``latency`` toxic delays each chunk from its own
arrival); past that it stops reading, and TCP pushes back on the sender.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import math
import os
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import trio

from ..drivers import listener_address
from ..logs import limited
from ..pcap import PcapWriter, TcpConversation
from ..tap import CaptureFiles, socket_address
from .actions import INNER_ACTIONS, RuleState, action_entry, apply_rule, fires, replay_plan
from .adapter import Adapter, adapter_for
from .check import Checker, Violation
from .link import OTHER, WAKE, Link, Wake, read_chunks, reset_stream
from .observe import Observed
from .rules import Rule, Schedule
from .toxics import FRAME, LinkClosed, Toxic, ToxicError, ToxicState, new_state, parse_toxic, pipe, update_toxic

__all__ = ["ChaosProxy", "UpstreamConnector", "open_chaos", "replay_plan"]

log = logging.getLogger("refwire.chaos")

#: Chunks (of up to 64 KiB) a direction reads ahead of what it has passed on.
RELAY_QUEUE = 16


#: How the proxy opens a connection to its upstream: an async callable returning the stream.
UpstreamConnector = Callable[[], Awaitable[trio.abc.Stream]]


class _Closed(Exception):
    """The connection was closed by an action."""


class ChaosProxy:
    """See the module docstring.  ``await nursery.start(proxy.serve, listeners)``.

    ``upstream`` is the (host, port) each connection is relayed to over TCP; with
    ``connect_upstream`` each connection's upstream is what it returns instead, and
    ``upstream`` (may be None) only names it in the logs and the record.
    """

    def __init__(
        self,
        protocol: str,
        upstream: tuple[str, int] | None,
        schedule: Schedule,
        *,
        record: IO[str] | None = None,
        max_frame_size: int = 64 * 1024 * 1024,
        connect_timeout: float = 10.0,
        replay: Mapping[tuple[int | str, ...], Sequence[Rule]] | None = None,
        check: bool = False,
        on_entry: Callable[[dict[str, Any]], None] | None = None,
        capture: str | os.PathLike[str] | None = None,
        tls: ssl.SSLContext | None = None,
        upstream_tls: ssl.SSLContext | None = None,
        upstream_hostname: str | None = None,
        handshake_timeout: float = 10.0,
        pcap: PcapWriter | None = None,
        connect_upstream: UpstreamConnector | None = None,
    ) -> None:
        if upstream is None and connect_upstream is None:
            raise ValueError("ChaosProxy needs an upstream address or a connect_upstream")
        #: TLS: ``tls`` terminates the clients' TLS (the proxy's certificate),
        #: ``upstream_tls`` originates TLS to the upstream (checked against
        #: ``upstream_hostname``, default the upstream host), so a TLS deployment
        #: is faulted frame by frame; without them TLS bytes pass as they are.
        self.tls, self.upstream_tls = tls, upstream_tls
        self.upstream_hostname = upstream_hostname
        self.handshake_timeout = handshake_timeout
        #: ``--capture DIR``: each connection written twice in ``refwire record``'s
        #: format, ``DIR/sent`` as each peer sent it and ``DIR/delivered`` as the
        #: other peer received it (after the faults), so ``refwire decode`` and
        #: ``analyze`` can tell a peer's bug from an injected fault.
        self.capture = None if capture is None else Path(capture)
        if self.capture is not None:
            for sub in ("sent", "delivered"):
                (self.capture / sub).mkdir(parents=True, exist_ok=True)
        #: what the protocol gives the proxy: its observers, fields and checks (:mod:`refwire.chaos.adapter`)
        self.adapter: Adapter = adapter_for(protocol)
        #: the protocol's invariants on the traffic (``--check``), or None
        self.checker: Checker | None = self.adapter.checker() if check else None
        #: recorded decisions to apply instead of the schedule's draws, by
        #: (connection, direction, frame index) (``refwire chaos replay``)
        self.replay = replay
        self.protocol = protocol
        self.upstream = upstream
        #: the upstream as the logs and the record name it: ``HOST:PORT``, ``?`` when only a connector is known
        self.upstream_name = "?" if upstream is None else "{}:{}".format(*upstream)
        #: opens one connection to the upstream (default: TCP to ``upstream``)
        self.connect_upstream: UpstreamConnector = connect_upstream or self._open_tcp_upstream
        self.schedule = schedule
        self.record_to = record
        self.max_frame_size = max_frame_size
        self.connect_timeout = connect_timeout
        self.addresses: list[str] = []
        #: every decision taken, as the record has it (also without a record file)
        self.decisions: list[dict[str, Any]] = []
        self.stats = {"connections": 0, "frames": 0, "actions": 0, "upstream_down": 0}
        self._captures: dict[int, dict[str, CaptureFiles]] = {}
        #: ``--pcap FILE``: where every connection goes as two TCP conversations (the caller closes it)
        self.pcap = pcap
        #: per live connection, its conversations by side: "client" (client <-> proxy), "upstream" (proxy <-> upstream)
        self._wires: dict[int, dict[str, TcpConversation]] = {}
        #: per connection, what its two directions' observers share (as sent, as delivered)
        self._sessions: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._fired: dict[str, int] = {}
        self._t0 = 0.0
        self._extra: list[Rule] = []
        self._delivered: dict[tuple[int, str], tuple[Any, list[int]]] = {}
        self._violations_written = 0
        #: called with every record entry (the control API's log)
        self.on_entry = on_entry
        #: the toxics, in the order they were added (see :meth:`add_toxic`)
        self.toxics: list[Toxic] = []
        self._toxic_serials = itertools.count(1)
        self._links: dict[tuple[int, str], Link] = {}
        self._changed = trio.Event()
        for body in schedule.toxics:  # the schedule file's [[toxic]] tables
            self.add_toxic(body)

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

    def add_toxic(self, body: Mapping[str, Any]) -> Toxic:
        """Add a toxic from its toxiproxy-shaped body (it applies to live connections
        too); :class:`~refwire.chaos.toxics.ToxicError` says what is wrong."""
        toxic = parse_toxic(body, self.protocol, next(self._toxic_serials))
        if self.get_toxic(toxic.name) is not None:
            raise ToxicError("toxic already exists", 409)
        if toxic.type == FRAME and any(r.name == toxic.name for r in self.schedule.rules):
            raise ToxicError(f"toxic already exists: the schedule has a rule named {toxic.name!r}", 409)
        self._fired.pop(toxic.name, None)
        self.toxics.append(toxic)
        self._toxics_changed()
        return toxic

    def get_toxic(self, name: str) -> Toxic | None:
        """The toxic called ``name``, or None."""
        return next((t for t in self.toxics if t.name == name), None)

    def update_toxic(self, name: str, body: Mapping[str, Any]) -> Toxic:
        """Change a toxic's attributes or toxicity (404 :class:`ToxicError` if there is none)."""
        toxic = self.get_toxic(name)
        if toxic is None:
            raise ToxicError("toxic not found", 404)
        update_toxic(toxic, body, self.protocol)
        self._toxics_changed()
        return toxic

    def remove_toxic(self, name: str) -> None:
        """Remove a toxic (404 :class:`ToxicError` if there is none)."""
        toxic = self.get_toxic(name)
        if toxic is None:
            raise ToxicError("toxic not found", 404)
        self.toxics.remove(toxic)
        self._toxics_changed()

    def reset_toxics(self) -> None:
        """Remove every toxic."""
        self.toxics.clear()
        self._toxics_changed()

    def toxics_json(self) -> list[dict[str, Any]]:
        """The toxics as toxiproxy lists them: the upstream ones, then the downstream ones."""
        return [t.to_json() for stream in ("upstream", "downstream") for t in self.toxics if t.stream == stream]

    def connections(self) -> list[dict[str, Any]]:
        """The live connections: per direction its frames so far and what is armed on it
        (the schedule's rules that can match it, and the toxics its draws let apply)."""
        out: dict[int, dict[str, Any]] = {}
        for (conn, direction), link in sorted(self._links.items()):
            entry = out.setdefault(conn, {"conn": conn, "client": link.peer, "directions": {}})
            rules = [
                r.name
                for r in (*self.schedule.rules, *self._extra)
                if r.direction in ("both", direction) and r.connection in (None, conn)
            ]
            armed = [t.name for t in self.toxics if t.direction == direction and self._toxic_state(link, t).armed(t)]
            idle = [t.name for t in self.toxics if t.direction == direction and t.name not in armed]
            entry["directions"][direction] = {"frames": link.frames, "rules": rules, "toxics": armed, "not_armed": idle}
        return list(out.values())

    def _toxics_changed(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _toxic_state(self, link: Link, toxic: Toxic) -> ToxicState:
        st = link.toxics.get(toxic.serial)
        if st is None:
            st = link.toxics[toxic.serial] = new_state(self.schedule.seed, toxic, link.conn, link.direction)
            self._write(
                {
                    "event": "arm",
                    "conn": link.conn,
                    "dir": link.direction,
                    "toxic": toxic.name,
                    "type": toxic.type,
                    "toxicity": toxic.toxicity,
                    "draw": round(st.draw, 6),
                    "armed": st.armed(toxic),
                }
            )
        return st

    async def _open_tcp_upstream(self) -> trio.abc.Stream:
        """The default :attr:`connect_upstream`: a TCP connection to ``upstream``."""
        assert self.upstream is not None
        return await trio.open_tcp_stream(*self.upstream)

    async def serve(
        self,
        listeners: Sequence[trio.abc.Listener[trio.abc.Stream]],
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
                "upstream": self.upstream_name,
            }
        )
        async with trio.open_nursery() as nursery:
            for lst in listeners:
                nursery.start_soon(self._accept_loop, lst, nursery)
            task_status.started()

    async def _accept_loop(self, listener: trio.abc.Listener[trio.abc.Stream], nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return
            nursery.start_soon(self._handle, stream)

    # ------------------------------------------------------------------ one connection

    async def _handle(self, tcp_client: trio.abc.Stream) -> None:
        """One accepted connection (``tcp_client``: as accepted, under any TLS the proxy terminates)."""
        conn = next(self._ids)
        self.stats["connections"] += 1
        client: trio.abc.Stream = tcp_client
        if self.tls is not None:
            tls_client = trio.SSLStream(tcp_client, self.tls, server_side=True)
            try:
                with trio.fail_after(self.handshake_timeout):
                    await tls_client.do_handshake()
            except (trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
                limited(log, f"tls-in:{id(self)}", "chaos: connection %d: the client's TLS handshake failed: %s", conn, exc or type(exc).__name__)
                self._write({"event": "tls-failed", "conn": conn, "side": "client", "reason": str(exc)})
                self._wire_refused(tcp_client)
                await trio.aclose_forcefully(tcp_client)
                return
            client = tls_client
        upstream: trio.abc.Stream
        try:
            with trio.fail_after(self.connect_timeout):
                upstream = await self.connect_upstream()
                if self.upstream_tls is not None:
                    hostname = self.upstream_hostname or (None if self.upstream is None else self.upstream[0])
                    tls_up = trio.SSLStream(upstream, self.upstream_tls, server_hostname=hostname)
                    try:
                        await tls_up.do_handshake()
                    except BaseException:
                        await trio.aclose_forcefully(upstream)
                        raise
                    upstream = tls_up
        except (OSError, trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError) as exc:
            self.stats["upstream_down"] += 1
            why = "timed out" if isinstance(exc, trio.TooSlowError) else (getattr(exc, "strerror", None) or str(exc) or type(exc).__name__)
            log.warning(
                "chaos: connection %d: the upstream %s is down (%s); closing the client's connection",
                conn,
                self.upstream_name,
                why,
            )
            self._write({"event": "upstream-down", "conn": conn, "reason": why})
            self._wire_refused(tcp_client)
            await trio.aclose_forcefully(client)
            return
        self._write({"event": "open", "conn": conn})
        ends: dict[str, str] = {}
        address = socket_address(tcp_client, "peer")
        peer = "?" if address is None else "{}:{}".format(*address)
        links = {
            "c2s": Link(conn, "c2s", client, upstream, peer),
            "s2c": Link(conn, "s2c", upstream, client, peer),
        }
        captures: dict[str, CaptureFiles] = {}
        if self.capture is not None:
            meta = {"client": peer, "server": self.upstream_name, "started": time.time(), "protocol": self.protocol}
            captures = {sub: CaptureFiles(self.capture / sub, f"conn{conn:05d}", meta) for sub in ("sent", "delivered")}
            self._captures[conn] = captures
        for d, link in links.items():
            self._links[(conn, d)] = link
        if self.pcap is not None:
            tcp_up = upstream.transport_stream if isinstance(upstream, trio.SSLStream) else upstream
            self._wires[conn] = {
                "client": self.pcap.connection(
                    socket_address(tcp_client, "peer"), socket_address(tcp_client, "local"), time.time()
                ),
                "upstream": self.pcap.connection(socket_address(tcp_up, "local"), socket_address(tcp_up, "peer"), time.time()),
            }
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch, links, ends, nursery.cancel_scope)
                async with trio.open_nursery() as relays:
                    for link in links.values():
                        relays.start_soon(self._relay, link, ends, nursery.cancel_scope)
                nursery.cancel_scope.cancel()
        finally:
            for d in links:
                self._links.pop((conn, d), None)
                self._delivered.pop((conn, d), None)
            await trio.aclose_forcefully(client)
            await trio.aclose_forcefully(upstream)
            self._sessions.pop(conn, None)
            for files in self._captures.pop(conn, {}).values():
                files.close(ended=time.time(), ends=ends)
            wires = self._wires.pop(conn, {})
            if "client" in wires:  # the proxy closed both sockets: its FIN on each (a no-op after a reset)
                wires["client"].fin("s2c", time.time())
            if "upstream" in wires:
                wires["upstream"].fin("c2s", time.time())
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

    async def _watch(self, links: Mapping[str, Link], ends: dict[str, str], scope: trio.CancelScope) -> None:
        """Arm the toxics on a connection as they come and close it when a ``timeout``
        toxic says so: after its timeout, or when one with timeout 0 is removed."""
        holding: dict[int, Toxic] = {}  # timeout toxics armed on this connection
        while True:
            changed = self._changed
            gone = [t for t in holding.values() if t not in self.toxics]
            if gone:
                self._toxic_close(links, ends, scope, gone[0], "removed")
                return
            deadline, due = math.inf, None
            for toxic in self.toxics:
                link = links[toxic.direction]
                st = self._toxic_state(link, toxic)
                if toxic.type != "timeout" or not st.armed(toxic):
                    continue
                holding[toxic.serial] = toxic
                if toxic.attributes["timeout"] > 0 and st.since + toxic.attributes["timeout"] / 1000 < deadline:
                    deadline, due = st.since + toxic.attributes["timeout"] / 1000, toxic
            with trio.move_on_at(deadline) as cs:
                await changed.wait()
            if cs.cancelled_caught and due is not None:
                self._toxic_close(links, ends, scope, due, "timed out")
                return

    def _toxic_close(
        self, links: Mapping[str, Link], ends: dict[str, str], scope: trio.CancelScope, toxic: Toxic, why: str
    ) -> None:
        link = links[toxic.direction]
        ends.setdefault(link.direction, f"closed by toxic {toxic.name}")
        self._write(
            {
                "event": "toxic",
                "conn": link.conn,
                "dir": link.direction,
                "toxic": toxic.name,
                "type": toxic.type,
                "action": "close",
                "why": why,
            }
        )
        scope.cancel()

    async def _relay(self, link: Link, ends: dict[str, str], scope: trio.CancelScope) -> None:
        """One direction: a reader task stamps each chunk with the time it arrived (a
        ``latency`` toxic counts from it, so chunks wait side by side, not one after
        another) while this task decides on the frames and passes them on."""
        send_ch, recv_ch = trio.open_memory_channel[tuple[float, bytes | Wake | None]](RELAY_QUEUE)

        def wake() -> None:
            try:
                send_ch.send_nowait((trio.current_time(), WAKE))
            except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                pass  # a full queue has bytes coming: feeding them decodes what is held too

        link.wake = wake
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_chunks, link.src, send_ch)
            await self._pass_on(link, recv_ch, ends, scope)
            nursery.cancel_scope.cancel()

    async def _pass_on(
        self,
        link: Link,
        chunks: trio.MemoryReceiveChannel[tuple[float, bytes | Wake | None]],
        ends: dict[str, str],
        scope: trio.CancelScope,
    ) -> None:
        src, dst, direction, conn = link.src, link.dst, link.direction, link.conn
        sessions = self._sessions.setdefault(conn, ({}, {}))  # (as sent, as delivered): both directions share each
        observer = self.adapter.observer(self.max_frame_size, direction, sessions[0])
        delivered = self.adapter.observer(self.max_frame_size, direction, sessions[1]) if self.checker is not None else None
        self._delivered[(conn, direction)] = (delivered, [0])
        link.observer = observer
        states: dict[str, RuleState] = {}
        index = 0
        other = self._links.get((conn, OTHER[direction]))
        try:
            while True:
                arrived, data = await chunks.receive()
                if isinstance(data, Wake):
                    for frame in observer.feed(b""):
                        await self._one_frame(frame, link, index, states)
                        index += 1
                        link.frames = index
                    continue
                link.arrived = arrived
                if data is None:
                    ends[direction] = "RST"
                    self._wire_end(conn, direction, "src", "reset")
                    self._wire_end(conn, direction, "dst", "reset")
                    await reset_stream(dst)
                    scope.cancel()
                    return
                if not data:
                    if link.held:  # a reorder with no next frame: the held frame goes before the end
                        held, link.held = link.held, []
                        await self._pass_writes(link, held)
                    ends[direction] = "FIN"
                    self._wire_end(conn, direction, "src", "fin")
                    slow = [
                        t.attributes["delay"]
                        for t in self.toxics
                        if t.type == "slow_close" and t.direction == direction and self._toxic_state(link, t).armed(t)
                    ]
                    if slow:
                        await trio.sleep(max(slow) / 1000)
                    try:
                        if isinstance(dst, trio.abc.HalfCloseableStream):
                            await dst.send_eof()
                            self._wire_end(conn, direction, "dst", "fin")
                        else:  # TLS has no half-close: the end of one direction ends the connection
                            scope.cancel()
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        pass
                    return
                sent = self._captures.get(conn, {}).get("sent")
                if sent is not None:
                    sent.write(direction, data)
                if self.pcap is not None:
                    self._wire_send(conn, direction, "src", data)
                for frame in observer.feed(data):
                    await self._one_frame(frame, link, index, states)
                    index += 1
                    link.frames = index
                    if other is not None and other.wake is not None and getattr(other.observer, "unblocked", False):
                        other.observer.unblocked = False  # this frame let the other direction's held bytes decode
                        other.wake()
        except _Closed:
            ends[direction] = "closed by a rule"
            scope.cancel()
        except LinkClosed as exc:
            ends[direction] = f"{'RST' if exc.how == 'reset' else 'closed'} by toxic {exc.toxic.name}"
            self._write(
                {
                    "event": "toxic",
                    "conn": conn,
                    "dir": direction,
                    "toxic": exc.toxic.name,
                    "type": exc.toxic.type,
                    "action": exc.how,
                }
            )
            if exc.how == "reset":
                self._wire_reset_by_proxy(conn)
                await reset_stream(dst)
                await reset_stream(src)
            scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            ends.setdefault(direction, "write failed")
            self._wire_end(conn, OTHER[direction], "src", "reset")  # the receiving peer reset its connection
            scope.cancel()

    def _inside(self, frame: Observed, link: Link, index: int, states: dict[str, RuleState], t: float) -> Observed:
        """Rules on the frames inside an envelope (a Lumberjack ``C``): each inner
        frame may be dropped, duplicated, corrupted or rewritten; if any was, the
        envelope is encoded again around them (else it passes byte for byte)."""
        direction, conn = link.direction, link.conn
        # Only rules that name an inner frame's type look inside (a "*" rule acts on the envelope), and
        # only then is the envelope opened: an envelope no such rule exists for costs nothing more.
        wanted = [r for r in self._candidates(direction, link) if r.action in INNER_ACTIONS and r.type not in ("*", frame.type)]
        replaying = self.replay is not None and any(k[:3] == (conn, direction, index) and len(k) == 4 for k in self.replay)
        if not wanted and not replaying:
            return frame
        opener, closer = self.adapter.inner_frames, self.adapter.rewrap
        inner = None if opener is None or closer is None else opener(frame, self.max_frame_size)
        if not inner or closer is None:
            return frame
        out: list[bytes] = []
        changed = False
        for k, f in enumerate(inner):
            writes: list[tuple[bytes, float]] = [(f.data, 0.0)]
            replayed = None if self.replay is None else self.replay.get((conn, direction, index, k), ())
            for rule in wanted if replayed is None else replayed:
                if rule.action not in INNER_ACTIONS:
                    continue
                draw = 0.0
                if replayed is None:
                    hit, draw = fires(rule, f, conn, direction, link.inner_frames, t, states, self.schedule.seed, self._fired)
                    if not hit:
                        continue
                before = b"".join(w for w, _ in writes)
                writes, _ = self._apply(rule, f, writes, None)
                after = b"".join(w for w, _ in writes)
                changed = changed or after != before
                self._fired[rule.name] = self._fired.get(rule.name, 0) + 1
                self.stats["actions"] += 1
                self._write(action_entry(rule, f, conn, direction, index, t, draw, before, after, inner=k))
            out.extend(w for w, _ in writes)
            link.inner_frames += 1
        if not changed:
            return frame
        return Observed(frame.type, closer(frame, out), frame.fields)

    def _candidates(self, direction: str, link: Link) -> list[Rule]:
        toxic_rules = [
            t.rule for t in self.toxics if t.rule is not None and t.direction == direction and self._toxic_state(link, t).armed(t)
        ]
        return [*self.schedule.rules, *self._extra, *toxic_rules]

    async def _one_frame(self, frame: Observed, link: Link, index: int, states: dict[str, RuleState]) -> None:
        direction, conn, src, dst = link.direction, link.conn, link.src, link.dst
        self.stats["frames"] += 1
        if self.checker is not None:
            self.checker.sent(conn, direction, index, frame)
        t = trio.current_time() - self._t0
        frame = self._inside(frame, link, index, states, t)
        data = frame.data
        writes: list[tuple[bytes, float]] = [(data, 0.0)]  # (bytes, seconds to wait before them)
        end: str | None = None
        replayed = None if self.replay is None else self.replay.get((conn, direction, index), ())
        for rule in self._candidates(direction, link) if replayed is None else replayed:
            draw = 0.0
            if replayed is None:
                hit, draw = fires(rule, frame, conn, direction, index, t, states, self.schedule.seed, self._fired)
                if not hit:
                    continue
            self._fired[rule.name] = self._fired.get(rule.name, 0) + 1
            before = b"".join(w for w, _ in writes)
            writes, end = self._apply(rule, frame, writes, end)
            after = b"".join(w for w, _ in writes)
            self.stats["actions"] += 1
            self._write(action_entry(rule, frame, conn, direction, index, t, draw, before, after))
        if end == "hold":  # reorder: this frame goes after the next one
            link.held.extend(writes)
            return
        writes, link.held = [*writes, *link.held], []
        await self._pass_writes(link, writes)
        if end == "close":
            raise _Closed
        if end == "reset":
            self._wire_reset_by_proxy(conn)
            await reset_stream(dst)
            await reset_stream(src)
            raise _Closed
        if end == "stall":
            await trio.sleep_forever()

    async def _pass_writes(self, link: Link, writes: Sequence[tuple[bytes, float]]) -> None:
        """Each (bytes, seconds to wait before them) through the byte toxics to the peer."""
        chain = [t for t in self.toxics if t.rule is None and t.direction == link.direction]
        for chunk, wait in writes:
            if wait > 0:
                await trio.sleep(wait)
            if chunk:
                await self._through_toxics(link, chain, 0, chunk)

    async def _through_toxics(self, link: Link, chain: Sequence[Toxic], i: int, chunk: bytes) -> None:
        """Pass ``chunk`` through the byte toxics ``chain[i:]`` armed on ``link``, then to its peer."""
        while i < len(chain) and not self._toxic_state(link, chain[i]).armed(chain[i]):
            i += 1
        if i == len(chain):
            await link.dst.send_all(chunk)
            delivered = self._captures.get(link.conn, {}).get("delivered")
            if delivered is not None:
                delivered.write(link.direction, chunk)
            if self.pcap is not None:
                self._wire_send(link.conn, link.direction, "dst", chunk)
            self._check_delivered(link.conn, link.direction, chunk)
            return
        toxic = chain[i]
        await pipe(
            toxic,
            self._toxic_state(link, toxic),
            chunk,
            link.arrived,
            functools.partial(self._through_toxics, link, chain, i + 1),
        )

    def _check_delivered(self, conn: int, direction: str, chunk: bytes) -> None:
        observer, counter = self._delivered.get((conn, direction), (None, [0]))
        if observer is None or self.checker is None:
            return
        for frame in observer.feed(chunk):
            self.checker.received(conn, direction, counter[0], frame)
            counter[0] += 1
        other, other_counter = self._delivered.get((conn, OTHER[direction]), (None, [0]))
        if other is not None and getattr(other, "unblocked", False):
            other.unblocked = False  # what this direction delivered lets the other's held bytes decode
            for frame in other.feed(b""):
                self.checker.received(conn, OTHER[direction], other_counter[0], frame)
                other_counter[0] += 1
        new = self.checker.violations[self._violations_written :]
        for v in new:
            self._write(v.to_json())
        self._violations_written += len(new)

    # ------------------------------------------------------------------ --pcap

    def _wire(self, conn: int, direction: str, end: str) -> TcpConversation | None:
        """The conversation of ``direction``'s sender (``end`` "src": the peer's own) or
        of its receiver ("dst": the one the proxy passes the bytes on)."""
        side = "client" if (direction == "c2s") == (end == "src") else "upstream"
        return self._wires.get(conn, {}).get(side)

    def _wire_send(self, conn: int, direction: str, end: str, data: bytes) -> None:
        wire = self._wire(conn, direction, end)
        if wire is not None:
            wire.send(direction, data, time.time())

    def _wire_end(self, conn: int, direction: str, end: str, how: str) -> None:
        """A FIN or RST in ``direction`` on the ``end`` ("src"/"dst") conversation; the
        RST on the receiver's conversation comes from the proxy."""
        wire = self._wire(conn, direction, end)
        if wire is None:
            return
        if how == "fin":
            wire.fin(direction, time.time())
        else:
            wire.reset(direction, time.time())

    def _wire_reset_by_proxy(self, conn: int) -> None:
        """The proxy resets both sockets of ``conn`` (a rule's or a toxic's reset)."""
        wires = self._wires.get(conn, {})
        if "client" in wires:
            wires["client"].reset("s2c", time.time())
        if "upstream" in wires:
            wires["upstream"].reset("c2s", time.time())

    def _wire_refused(self, tcp_client: trio.abc.Stream) -> None:
        """A client the proxy accepted and closed at once (its TLS failed, the upstream is down)."""
        if self.pcap is not None:
            wire = self.pcap.connection(socket_address(tcp_client, "peer"), socket_address(tcp_client, "local"), time.time())
            wire.fin("s2c", time.time())

    def _apply(
        self, rule: Rule, frame: Observed, writes: list[tuple[bytes, float]], end: str | None
    ) -> tuple[list[tuple[bytes, float]], str | None]:
        """:func:`~refwire.chaos.actions.apply_rule` with this proxy's protocol."""
        return apply_rule(rule, frame, writes, end, self.adapter)

    def _write(self, entry: dict[str, Any]) -> None:
        if entry.get("event") == "action":
            self.decisions.append(entry)
        if self.on_entry is not None:
            self.on_entry(entry)
        if self.record_to is not None:
            self.record_to.write(json.dumps(entry, sort_keys=True) + "\n")
            self.record_to.flush()


@asynccontextmanager
async def open_chaos(
    protocol: str,
    *,
    upstream: tuple[str, int] | None = None,
    schedule: Schedule | None = None,
    listen: tuple[str, int] = ("127.0.0.1", 0),
    record: IO[str] | None = None,
    max_frame_size: int = 64 * 1024 * 1024,
    replay: Mapping[tuple[int | str, ...], Sequence[Rule]] | None = None,
    check: bool = False,
    capture: str | os.PathLike[str] | None = None,
    tls: ssl.SSLContext | None = None,
    upstream_tls: ssl.SSLContext | None = None,
    upstream_hostname: str | None = None,
    pcap: PcapWriter | None = None,
    listeners: Sequence[trio.abc.Listener[trio.abc.Stream]] | None = None,
    connect: UpstreamConnector | None = None,
) -> AsyncIterator[ChaosProxy]:
    """A proxy on ``listen`` (port 0: any) for the ``async with`` block::

        async with open_chaos("lumberjack", upstream=("127.0.0.1", 5044), schedule=s) as proxy:
            ...  # clients connect to proxy.addresses[0]
            async with proxy.rule(name="drop-acks", type="A", direction="s2c", action="drop"):
                ...

    Another transport: ``listeners`` to serve on instead of TCP on ``listen``, ``connect`` to open each upstream
    connection instead of TCP to ``upstream`` (see :class:`ChaosProxy`)::

        async with open_chaos("lumberjack", listeners=[front], connect=back.connect) as proxy:
            ...  # clients connect with front.connect (memory listeners, virtual time)
    """
    proxy = ChaosProxy(
        protocol,
        upstream,
        schedule or Schedule(protocol, ()),
        record=record,
        max_frame_size=max_frame_size,
        replay=replay,
        check=check,
        capture=capture,
        tls=tls,
        upstream_tls=upstream_tls,
        upstream_hostname=upstream_hostname,
        pcap=pcap,
        connect_upstream=connect,
    )
    if listeners is None:
        listeners = await trio.open_tcp_listeners(listen[1], host=listen[0])
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve, listeners)
        try:
            yield proxy
        finally:
            nursery.cancel_scope.cancel()
    proxy.finish()

