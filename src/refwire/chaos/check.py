"""``--check``: a protocol's invariants on the traffic through the proxy.

The proxy sees every frame twice: as its sender sent it and as the other peer
received it (after the faults).  So a check can tell a peer's bug from an
injected fault: the server is judged on what it *received*, the client on what
it *received*.

Lumberjack (specs/lumberjack/README.md §3):

* ``acked-but-not-received``: the server acks a sequence number it never
  received in the current window (with per-window or running numbers alike;
  a server acking counts, as go-lumber does, shows here too), or the client is
  told so after a fault rewrote an ack;
* ``acks-not-cumulative``: an ack below an earlier ack of the same window;
* ``unacked-not-resent``: events the client sent on a connection that ended
  before their ack reached it, never sent again on a later connection
  (at-least-once, §3.7).  Judged when the run ends.
"""

from __future__ import annotations

from typing import Any

import attrs

from .observe import Observed

__all__ = ["Checker", "LumberjackChecker", "PravegaChecker", "SeastarChecker", "TankChecker", "checker_for"]


@attrs.frozen
class Violation:
    check: str
    conn: int
    direction: str
    frame: int
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"event": "violation", **attrs.asdict(self)}


class Checker:
    """No invariants known for the protocol: records nothing."""

    def __init__(self) -> None:
        self.violations: list[Violation] = []

    def sent(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        """A frame as its sender sent it."""

    def received(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        """A frame as the other peer received it (after the faults)."""

    def closed(self, conn: int) -> None:
        """The connection ended."""

    def finish(self) -> list[Violation]:
        """What the end of the run reveals; returns every violation."""
        return self.violations


@attrs.define
class _ServerWindow:
    """One window as the server received it (windows may be pipelined, §3.5)."""

    count: int
    received: list[int] = attrs.Factory(list)  #: seqs, in order
    last_ack: int = 0


@attrs.define
class _ClientWindow:
    """One window as the client sent it."""

    events: list[bytes] = attrs.Factory(list)
    seqs: list[int] = attrs.Factory(list)
    acked: int = 0  #: how many of its events the client saw acked


@attrs.define
class _Conn:
    #: windows the server has received and not fully acked, oldest first (acks leave in window order)
    server_windows: list[_ServerWindow] = attrs.Factory(list)
    #: acks the server sent and the client has not seen yet, in order
    acks_in_flight: list[int] = attrs.Factory(list)
    #: windows the client has sent and not seen fully acked, oldest first
    client_windows: list[_ClientWindow] = attrs.Factory(list)


class LumberjackChecker(Checker):
    """See the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self._conns: dict[int, _Conn] = {}
        #: (conn, payloads never acked) of connections that ended, in order
        self._unacked: list[tuple[int, list[bytes]]] = []
        #: every payload the client sent, by connection (for resend checks)
        self._sent_by_conn: dict[int, list[bytes]] = {}

    def _c(self, conn: int) -> _Conn:
        return self._conns.setdefault(conn, _Conn())

    @staticmethod
    def _events(frame: Observed) -> list[tuple[int, bytes]]:
        """(seq, payload) of the events a J, D or C frame carries (a C leniently inflated)."""
        from ..lumberjack.frames import DataFrame, JsonFrame, decode_all, inflate

        if frame.type in ("J", "D"):
            try:
                (f,) = decode_all(frame.data, validate_json=False, strict_versions=False)
            except Exception:  # a corrupted frame the observer still cut: no events
                return []
            return [(f.seq, _payload(f))] if isinstance(f, (JsonFrame, DataFrame)) else []
        if frame.type == "C":
            try:
                inner = decode_all(inflate(frame.data[6:], max_size=64 << 20), validate_json=False, strict_versions=False)
            except Exception:
                return []
            out: list[tuple[int, bytes]] = []
            for f in inner:
                if isinstance(f, (JsonFrame, DataFrame)):
                    out.append((f.seq, _payload(f)))
            return out
        return []

    def sent(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        c = self._c(conn)
        if direction == "c2s":
            if frame.type == "W":
                c.client_windows.append(_ClientWindow())
            for seq, payload in self._events(frame):
                if not c.client_windows:
                    c.client_windows.append(_ClientWindow())
                c.client_windows[-1].events.append(payload)
                c.client_windows[-1].seqs.append(seq)
                self._sent_by_conn.setdefault(conn, []).append(payload)
        elif frame.type == "A":  # the server's ack, as it sent it
            seq = int(frame.fields.get("seq", 0))
            if seq == 0:
                return  # a keepalive (§3.4)
            w = c.server_windows[0] if c.server_windows else None
            if w is None or seq not in w.received:
                self.violations.append(
                    Violation(
                        "acked-but-not-received",
                        conn,
                        direction,
                        index,
                        f"the server acked seq {seq}, never received in the window it acks (the oldest not fully acked)",
                    )
                )
                return
            if w.last_ack and w.received.index(seq) < w.received.index(w.last_ack):
                self.violations.append(
                    Violation("acks-not-cumulative", conn, direction, index, f"ack {seq} after ack {w.last_ack} in the same window")
                )
            w.last_ack = seq
            c.acks_in_flight.append(seq)
            if len(w.received) >= w.count and seq == w.received[-1]:
                c.server_windows.pop(0)  # fully acked: the next ack is for the next window

    def received(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        c = self._c(conn)
        if direction == "c2s":
            if frame.type == "W":
                c.server_windows.append(_ServerWindow(int(frame.fields.get("count", 0))))
            for seq, _ in self._events(frame):
                if not c.server_windows:
                    c.server_windows.append(_ServerWindow(0))
                c.server_windows[-1].received.append(seq)
        elif frame.type == "A":  # what the client saw acked
            seq = int(frame.fields.get("seq", 0))
            if not seq:
                return
            if seq in c.acks_in_flight:
                del c.acks_in_flight[: c.acks_in_flight.index(seq) + 1]  # acks the proxy dropped are skipped
            else:
                self.violations.append(
                    Violation(
                        "acked-but-not-received",
                        conn,
                        direction,
                        index,
                        f"the client was told seq {seq} is acked, which the server neither received nor acked (an injected fault)",
                    )
                )
                return
            for w in c.client_windows:  # the oldest window not seen fully acked that holds this seq
                if seq in w.seqs:
                    w.acked = max(w.acked, w.seqs.index(seq) + 1)
                    break
            while c.client_windows and c.client_windows[0].seqs and c.client_windows[0].acked == len(c.client_windows[0].seqs):
                c.client_windows.pop(0)

    def closed(self, conn: int) -> None:
        c = self._conns.get(conn)
        if c is None:
            return
        left = [p for w in c.client_windows for p in w.events[w.acked :]]
        if left:
            self._unacked.append((conn, left))

    def finish(self) -> list[Violation]:
        for conn, payloads in self._unacked:
            later = [p for other, ps in self._sent_by_conn.items() if other > conn for p in ps]
            missing = [p for p in payloads if p not in later]
            if missing:
                self.violations.append(
                    Violation(
                        "unacked-not-resent",
                        conn,
                        "c2s",
                        -1,
                        f"{len(missing)} event(s) the client sent on connection {conn} and never saw acked were not sent again",
                    )
                )
        self._unacked.clear()
        return self.violations


def _payload(f: Any) -> bytes:
    """An event's identity across resends: its payload, whatever seq it is renumbered to."""
    payload = getattr(f, "payload", None)
    return bytes(payload) if payload is not None else repr(f.pairs).encode()


def _before(a: int, b: int) -> bool:
    """``a`` comes before ``b`` in u32 sequence order (rollover at 2^32, §3.2)."""
    return a != b and ((b - a) & 0xFFFFFFFF) < 0x80000000


class PravegaChecker(Checker):
    """Pravega (specs/pravega/README.md §5):

    * ``event-number-backwards``: on one connection a writer's appends
      (AppendBlockEnd, ConditionalAppend) carry event numbers that go down, as
      the client sent them (the store closes such a connection, §5.3);
    * ``ack-above-sent``: a DataAppended (as the client received it) acks an
      event number above the highest the store received from that writer, on
      any connection -- the store's bug when it sent it so, an injected fault
      when the proxy changed it.
    """

    _APPENDS = ("AppendBlockEnd", "ConditionalAppend", "ConditionalBlockEnd")

    def __init__(self) -> None:
        super().__init__()
        self._last_sent: dict[tuple[int, str], int] = {}
        self._received_max: dict[str, int] = {}
        self._acks_sent: dict[str, set[int]] = {}

    @staticmethod
    def _number(frame: Observed) -> int | None:
        n = frame.fields.get("last_event_number", frame.fields.get("event_number"))
        return n if isinstance(n, int) else None

    def sent(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        writer = str(frame.fields.get("writer_id", ""))
        n = self._number(frame)
        if direction == "c2s" and frame.type in self._APPENDS and n is not None:
            last = self._last_sent.get((conn, writer))
            if last is not None and n < last:
                self.violations.append(
                    Violation("event-number-backwards", conn, direction, index, f"writer {writer}: event number {n} after {last}")
                )
            self._last_sent[(conn, writer)] = n if last is None else max(last, n)
        elif direction == "s2c" and frame.type == "DataAppended" and n is not None:
            self._acks_sent.setdefault(writer, set()).add(n)

    def received(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        writer = str(frame.fields.get("writer_id", ""))
        n = self._number(frame)
        if n is None:
            return
        if direction == "c2s" and frame.type in self._APPENDS:
            self._received_max[writer] = max(self._received_max.get(writer, n), n)
        elif direction == "s2c" and frame.type == "DataAppended":
            top = self._received_max.get(writer)
            if top is None or n > top:
                who = "the store sent it so" if n in self._acks_sent.get(writer, set()) else "an injected fault changed it"
                self.violations.append(
                    Violation(
                        "ack-above-sent",
                        conn,
                        direction,
                        index,
                        f"writer {writer}: event {n} acked, the store received up to {top} ({who})",
                    )
                )


class SeastarChecker(Checker):
    """Seastar RPC (specs/seastar-rpc/README.md §3): ``reply-without-request``, a
    response (as the client received it) for a message id the client never sent
    on that connection -- the server's bug when it sent it so, an injected fault
    when the proxy changed it; ``reply-twice``, a second response to one id."""

    def __init__(self) -> None:
        super().__init__()
        self._issued: dict[int, set[int]] = {}
        self._server_sent: dict[int, set[int]] = {}
        self._answered: dict[int, set[int]] = {}

    def sent(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        if direction == "c2s" and frame.type == "request":
            self._issued.setdefault(conn, set()).add(abs(int(frame.fields["msg_id"])))
        elif direction == "s2c" and frame.type == "response":
            self._server_sent.setdefault(conn, set()).add(abs(int(frame.fields["msg_id"])))

    def received(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        if direction != "s2c" or frame.type != "response":
            return
        mid = abs(int(frame.fields["msg_id"]))
        if mid not in self._issued.get(conn, set()):
            who = "the server sent it so" if mid in self._server_sent.get(conn, set()) else "an injected fault changed it"
            self.violations.append(
                Violation("reply-without-request", conn, direction, index, f"a reply for msg_id {mid}, never sent on this connection ({who})")
            )
        elif mid in self._answered.setdefault(conn, set()):
            self.violations.append(Violation("reply-twice", conn, direction, index, f"a second reply for msg_id {mid}"))
        self._answered[conn].add(mid)


@attrs.define
class _Sweep:
    """One consumer reading one partition forward: each Consume asks for the
    sequence number the previous answer ended at (§5), until an answer reaches
    the high-water mark."""

    start_seq: int
    start_order: int
    next_seq: int
    delivered: set[bytes] = attrs.field(factory=set)
    done: bool = False


@attrs.define
class _Acked:
    key: bytes  #: the message's identity (a digest of its key and content)
    order: int  #: when the producer received the ack
    conn: int
    frame: int


def _identity(m: Any) -> bytes:
    """A message's identity across resends and duplicates: its key and content
    (16-byte digest, so the check holds 16 bytes per acked message, not the message)."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    key = m.key or b""
    h.update(len(key).to_bytes(2, "little") + key + m.content)
    return h.digest()


class TankChecker(Checker):
    """TANK (specs/tank/README.md §5, §6): a produce acknowledged to its client
    is visible to consumers from then on.

    * ``acked-not-visible``: a consumer read a partition from its start (seq 0,
      or at or below the lowest sequence number any message of this run was
      seen at) through to the high-water mark, with Consumes it sent after a
      producer received an ack (error 0) for messages of that partition, and
      one of those messages was not among what it read -- the broker's bug
      when it never served it, an injected fault when the proxy hid it;
    * ``reply-without-request``: a response (as the client received it) to a
      request id the client never sent on that connection.

    Judged on what each client sent and received (after the faults), decoded
    with the client's own request (§3: a produce answer has no layout of its own).
    Duplicates are not violations: TANK has no dedup, a resent produce is
    stored twice (at-least-once).  The order of the broker's own sends is not
    judged: it answers a woken long poll before the produce that woke it (§6)."""

    def __init__(self) -> None:
        super().__init__()
        self._order = 0
        #: (conn, side, request id) -> the request as the client sent it / the broker received it
        self._requests: dict[tuple[int, str, int], Any] = {}
        self._broker_rids: dict[int, set[int]] = {}  #: request ids the broker answered, per connection
        self._asked_rids: dict[int, set[int]] = {}  #: request ids the broker received, per connection
        self._acked: dict[tuple[str, int], list[_Acked]] = {}
        self._sweeps: dict[tuple[int, str, int], _Sweep] = {}
        self._served: dict[tuple[str, int], set[bytes]] = {}
        #: the lowest sequence number a message of this run was seen at, per partition
        self._floor: dict[tuple[str, int], int] = {}
        self._produced: dict[tuple[str, int], set[bytes]] = {}

    @staticmethod
    def _decode(frame: Observed, request: bool) -> Any:
        from ..errors import ProtocolError
        from ..tank.frames import decode_request
        from ..tank.responses import decode_response

        raw = frame.data
        if frame.type == "?" or len(raw) < 5:
            return None
        try:
            if request:
                return decode_request(raw[0], raw[5:], offset=5)
            return decode_response(raw[0], raw[5:], offset=5)
        except ProtocolError:
            return None  # a frame a fault (or a peer) made undecodable: nothing to judge

    @staticmethod
    def _messages(response: Any, request: Any) -> list[tuple[str, int, Any, list[Any]]]:
        """(topic, partition, entry, messages) of a consume response, read as the client reads it (§5)."""
        from ..errors import ProtocolError
        from ..tank.bundles import read_chunk

        asked = {(t.name, p.partition): p.seq for t in request.topics for p in t.partitions}
        out = []
        for t in response.topics:
            for p in t.partitions:
                if p.error not in (0x00, 0xFE) or (t.name, p.partition) not in asked:
                    continue
                seq = asked[(t.name, p.partition)]
                try:
                    res = read_chunk(p.chunk, base_seq=p.base_seq, hwmark=p.hwmark, requested_seq=seq)
                except ProtocolError:
                    continue
                out.append((t.name, p.partition, (p, res), list(res.messages)))
        return out

    def sent(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        from ..tank.frames import ConsumeRequest, ProduceRequest
        from ..tank.responses import ConsumeResponse

        self._order += 1
        if direction == "c2s":
            req = self._decode(frame, request=True)
            if isinstance(req, ProduceRequest | ConsumeRequest):
                self._requests[(conn, "client", req.request_id)] = req
            if isinstance(req, ConsumeRequest):
                for t in req.topics:
                    for p in t.partitions:
                        key = (conn, t.name, p.partition)
                        sweep = self._sweeps.get(key)
                        if sweep is None or sweep.done or sweep.next_seq != p.seq:
                            self._sweeps[key] = _Sweep(p.seq, self._order, p.seq)
            return
        resp = self._decode(frame, request=False)
        rid = getattr(resp, "request_id", None)
        if rid is None:
            return
        self._broker_rids.setdefault(conn, set()).add(rid)
        req = self._requests.pop((conn, "broker", rid), None)
        if isinstance(resp, ConsumeResponse) and isinstance(req, ConsumeRequest):
            for topic, pid, _, msgs in self._messages(resp, req):
                self._served.setdefault((topic, pid), set()).update(_identity(m) for m in msgs)

    def received(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        from ..errors import ProtocolError
        from ..tank.bundles import decode_bundle
        from ..tank.frames import ConsumeRequest, ProduceRequest
        from ..tank.responses import ConsumeResponse, RawProduceResponse, decode_produce_response

        self._order += 1
        if direction == "c2s":
            req = self._decode(frame, request=True)
            if isinstance(req, ProduceRequest | ConsumeRequest):
                self._requests[(conn, "broker", req.request_id)] = req
                self._asked_rids.setdefault(conn, set()).add(req.request_id)
            return
        resp = self._decode(frame, request=False)
        rid = getattr(resp, "request_id", None)
        if rid is None:
            return
        req = self._requests.pop((conn, "client", rid), None)
        if req is None:
            if frame.type in ("Produce", "Consume"):
                if rid not in self._broker_rids.get(conn, set()):
                    who = "an injected fault changed the reply"
                elif rid in self._asked_rids.get(conn, set()):
                    who = "an injected fault changed the request"
                else:
                    who = "the broker sent it so"
                self.violations.append(
                    Violation("reply-without-request", conn, direction, index, f"a {frame.type} reply to request {rid}, never sent on this connection ({who})")
                )
            return
        if isinstance(resp, RawProduceResponse) and isinstance(req, ProduceRequest):
            try:
                results = decode_produce_response(resp, req.layout()).results
            except ProtocolError:
                return
            bundles = {(t.name, p.partition): p for t in req.topics for p in t.partitions}
            for r in results:
                body = bundles.get((r.topic, r.partition))
                if r.error != 0 or body is None:
                    continue
                try:
                    _, msgs = decode_bundle(body.bundle)
                except ProtocolError:
                    continue
                keys = [_identity(m) for m in msgs]
                self._produced.setdefault((r.topic, r.partition), set()).update(keys)
                self._acked.setdefault((r.topic, r.partition), []).extend(_Acked(k, self._order, conn, index) for k in keys)
        elif isinstance(resp, ConsumeResponse) and isinstance(req, ConsumeRequest):
            for topic, pid, (entry, res), msgs in self._messages(resp, req):
                part = (topic, pid)
                sweep = self._sweeps.get((conn, topic, pid))
                if sweep is None or sweep.done:
                    continue
                produced = self._produced.get(part, set())
                for m in msgs:
                    k = _identity(m)
                    sweep.delivered.add(k)
                    if k in produced and m.seq is not None and m.seq < self._floor.get(part, m.seq + 1):
                        self._floor[part] = m.seq
                sweep.next_seq = res.next_seq
                if res.drained or (msgs and msgs[-1].seq is not None and msgs[-1].seq >= entry.hwmark):
                    sweep.done = True
                    self._judge(conn, index, part, sweep, entry.hwmark)

    def closed(self, conn: int) -> None:
        """What one connection's requests and reads held is dropped with it (acks stay until judged)."""
        self._broker_rids.pop(conn, None)
        self._asked_rids.pop(conn, None)
        for key in [k for k in self._requests if k[0] == conn]:
            del self._requests[key]
        for key in [k for k in self._sweeps if k[0] == conn]:
            del self._sweeps[key]

    def _judge(self, conn: int, index: int, part: tuple[str, int], sweep: _Sweep, hwmark: int) -> None:
        floor = self._floor.get(part)
        if not (sweep.start_seq == 0 or (floor is not None and sweep.start_seq <= floor)):
            return  # it did not start where this run's messages are: it cannot miss them
        keep: list[_Acked] = []
        for a in self._acked.get(part, []):
            if a.order >= sweep.start_order:
                keep.append(a)  # acked after this read began: a later read judges it
            elif a.key not in sweep.delivered:
                who = (
                    "the broker served it; an injected fault hid it"
                    if a.key in self._served.get(part, set())
                    else "the broker never served it"
                )
                self.violations.append(
                    Violation(
                        "acked-not-visible",
                        conn,
                        "s2c",
                        index,
                        f"{part[0]}/{part[1]}: a message acked to the producer (conn {a.conn}, frame {a.frame}) is not "
                        f"among the {len(sweep.delivered)} read from seq {sweep.start_seq} to the high-water mark {hwmark} ({who})",
                    )
                )
            # else: visible; judged once, then forgotten (the check's memory stays per unjudged message)
        self._acked[part] = keep
        sweep.delivered.clear()


def checker_for(protocol: str) -> Checker:
    if protocol == "lumberjack":
        return LumberjackChecker()
    if protocol == "tank":
        return TankChecker()
    if protocol == "pravega":
        return PravegaChecker()
    if protocol == "seastar-rpc":
        return SeastarChecker()
    return Checker()
