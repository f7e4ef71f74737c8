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

__all__ = ["Checker", "LumberjackChecker", "PravegaChecker", "SeastarChecker", "checker_for"]


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


def checker_for(protocol: str) -> Checker:
    if protocol == "lumberjack":
        return LumberjackChecker()
    if protocol == "pravega":
        return PravegaChecker()
    if protocol == "seastar-rpc":
        return SeastarChecker()
    return Checker()
