"""TANK in the fault proxy (specs/tank/README.md).

Every frame (``msgId:u8 payloadLen:u32le``, §2) is observed by message name
(``Produce``, ``Consume``, ``Ping`` ...), with the ``request_id`` of a request
and of a response (§3) as a rule field; integers are little-endian.

``--check`` (§5, §6): see :class:`TankChecker`.
"""

from __future__ import annotations

import hashlib
from typing import Any

import attrs

from ...describe import UNDECODED, Described
from ...errors import ProtocolError
from ...tank.bundles import decode_bundle, read_chunk
from ...tank.describe import LAYOUT, describer
from ...tank.frames import ConsumeRequest, ProduceRequest, decode_request
from ...tank.responses import ConsumeResponse, RawProduceResponse, decode_produce_response, decode_response
from ..adapter import Adapter
from ..check import Checker, Violation
from ..observe import Observed, Observer

__all__ = ["ADAPTER", "FIELDS", "TankChecker", "TankObserver"]


class TankObserver:
    """TANK frames as the fault proxy sees them: :mod:`refwire.tank.describe`'s
    frames (named by message id, with the ``request_id`` of each request and
    response where its direction puts it, §3) as :class:`Observed` ones."""

    def __init__(self, max_frame_size: int, direction: str = "c2s") -> None:
        self._describer = describer(max_frame_size, direction)

    def held(self) -> int:
        return self._describer.held()

    def feed(self, data: bytes) -> list[Observed]:
        return [Observed(d.type, d.data, self._fields(d), d.spans) for d in self._describer.feed(data)]

    def _fields(self, d: Described) -> dict[str, Any]:
        if d.type != UNDECODED:
            return dict(d.fields)
        if d.error is None:
            return {}
        if d.error.field == "msgId":  # the proxy's own words for the first byte that is no frame
            return {"error": f"message id {d.data[0]:#04x}"}
        return {"error": d.error.reason}


#: The fields rules may name per TANK frame type (a frame's own spans say where, by direction).
FIELDS = {name: layout.spans() for name, layout in LAYOUT.frames.items()}


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
      request id the client never sent on that connection;
    * ``reply-twice``: a second response (as the client received it) to one
      request -- the broker's bug when it answered that request twice, an
      injected fault when the proxy duplicated its one answer.

    Judged on what each client sent and received (after the faults), decoded
    with the client's own request (§3: a produce answer has no layout of its own).
    Duplicates are not violations: TANK has no dedup, a resent produce is
    stored twice (at-least-once).  The order of the broker's own sends is not
    judged: it answers a woken long poll before the produce that woke it (§6)."""

    def __init__(self) -> None:
        super().__init__()
        self._order = 0
        #: (conn, side, request id) -> the requests as the client sent them / the broker received them, not yet
        #: answered, oldest first (an id a client reuses while it waits is answered in order)
        self._requests: dict[tuple[int, str, int], list[Any]] = {}
        #: per connection, how often the broker answered each request id / received a request with it
        self._broker_rids: dict[int, dict[int, int]] = {}
        self._asked_rids: dict[int, dict[int, int]] = {}
        #: per connection, the request ids the client sent
        self._client_rids: dict[int, set[int]] = {}
        self._acked: dict[tuple[str, int], list[_Acked]] = {}
        self._sweeps: dict[tuple[int, str, int], _Sweep] = {}
        self._served: dict[tuple[str, int], set[bytes]] = {}
        #: the lowest sequence number a message of this run was seen at, per partition
        self._floor: dict[tuple[str, int], int] = {}
        self._produced: dict[tuple[str, int], set[bytes]] = {}

    @staticmethod
    def _decode(frame: Observed, request: bool) -> Any:
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
        self._order += 1
        if direction == "c2s":
            req = self._decode(frame, request=True)
            if isinstance(req, ProduceRequest | ConsumeRequest):
                self._requests.setdefault((conn, "client", req.request_id), []).append(req)
                self._client_rids.setdefault(conn, set()).add(req.request_id)
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
        answers = self._broker_rids.setdefault(conn, {})
        answers[rid] = answers.get(rid, 0) + 1
        req = self._answer((conn, "broker", rid))
        if isinstance(resp, ConsumeResponse) and isinstance(req, ConsumeRequest):
            for topic, pid, _, msgs in self._messages(resp, req):
                self._served.setdefault((topic, pid), set()).update(_identity(m) for m in msgs)

    def received(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        self._order += 1
        if direction == "c2s":
            req = self._decode(frame, request=True)
            if isinstance(req, ProduceRequest | ConsumeRequest):
                self._requests.setdefault((conn, "broker", req.request_id), []).append(req)
                asked = self._asked_rids.setdefault(conn, {})
                asked[req.request_id] = asked.get(req.request_id, 0) + 1
            return
        resp = self._decode(frame, request=False)
        rid = getattr(resp, "request_id", None)
        if rid is None:
            return
        req = self._answer((conn, "client", rid))
        if req is None:
            if frame.type in ("Produce", "Consume"):
                self.violations.append(self._stray_reply(conn, index, frame.type, rid))
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

    def _answer(self, key: tuple[int, str, int]) -> Any:
        """The oldest request waiting under ``key`` (connection, side, request id), now answered; None if none waits."""
        waiting = self._requests.get(key)
        if not waiting:
            return None
        req = waiting.pop(0)
        if not waiting:
            del self._requests[key]
        return req

    def _stray_reply(self, conn: int, index: int, kind: str, rid: int) -> Violation:
        """A reply the client received with no request of its own waiting for it,
        and who made it so: the broker answered twice or to an id nobody sent,
        or the proxy duplicated a reply or rewrote a reply's or a request's id."""
        answers = self._broker_rids.get(conn, {}).get(rid, 0)
        asked = self._asked_rids.get(conn, {}).get(rid, 0)
        if rid in self._client_rids.get(conn, set()):
            # the client sent it and its answer came: one more answer than requests
            who = "the broker answered it twice" if answers > asked else "an injected fault duplicated the reply"
            return Violation("reply-twice", conn, "s2c", index, f"a second {kind} reply to request {rid} ({who})")
        if answers == 0:
            who = "an injected fault changed the reply"
        elif asked:
            who = "an injected fault changed the request"
        else:
            who = "the broker sent it so"
        return Violation(
            "reply-without-request", conn, "s2c", index, f"a {kind} reply to request {rid}, never sent on this connection ({who})"
        )

    def closed(self, conn: int) -> None:
        """What one connection's requests and reads held is dropped with it (acks stay until judged)."""
        for per_conn in (self._broker_rids, self._asked_rids, self._client_rids):
            per_conn.pop(conn, None)
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


def _observer(max_frame_size: int, direction: str, session: dict[str, Any]) -> Observer:
    return TankObserver(max_frame_size, direction)


ADAPTER = Adapter(observer=_observer, fields=FIELDS, byte_order="little", checker=TankChecker, prefix="tk")
