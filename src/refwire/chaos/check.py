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

__all__ = ["Checker", "LumberjackChecker", "PravegaChecker", "checker_for"]


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
class _Conn:
    window: int = 0
    received_seqs: set[int] = attrs.Factory(set)
    last_ack: int = 0
    #: what the server acked in this window, as it sent it
    server_acks: set[int] = attrs.Factory(set)
    #: client side: payloads sent in the open window, and how many the client saw acked
    sent_events: list[bytes] = attrs.Factory(list)
    sent_seqs: list[int] = attrs.Factory(list)
    acked_by_client: int = 0


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
                c.sent_events, c.sent_seqs, c.acked_by_client = [], [], 0
            for seq, payload in self._events(frame):
                c.sent_events.append(payload)
                c.sent_seqs.append(seq)
                self._sent_by_conn.setdefault(conn, []).append(payload)
        elif frame.type == "A":  # the server's ack, as it sent it
            seq = int(frame.fields.get("seq", 0))
            if seq == 0:
                return  # a keepalive (§3.4)
            if seq not in c.received_seqs:
                self.violations.append(
                    Violation(
                        "acked-but-not-received",
                        conn,
                        direction,
                        index,
                        f"the server acked seq {seq}, never received in this window",
                    )
                )
            if c.received_seqs and seq in c.received_seqs and c.last_ack and _before(seq, c.last_ack):
                self.violations.append(
                    Violation(
                        "acks-not-cumulative", conn, direction, index, f"ack {seq} after ack {c.last_ack} in the same window"
                    )
                )
            c.last_ack = seq
            c.server_acks.add(seq)

    def received(self, conn: int, direction: str, index: int, frame: Observed) -> None:
        c = self._c(conn)
        if direction == "c2s":
            if frame.type == "W":
                c.window, c.received_seqs, c.last_ack, c.server_acks = int(frame.fields.get("count", 0)), set(), 0, set()
            for seq, _ in self._events(frame):
                c.received_seqs.add(seq)
        elif frame.type == "A":  # what the client saw acked
            seq = int(frame.fields.get("seq", 0))
            if seq and seq not in c.received_seqs and seq not in c.server_acks:
                self.violations.append(
                    Violation(
                        "acked-but-not-received",
                        conn,
                        direction,
                        index,
                        f"the client was told seq {seq} is acked, which the server neither received nor acked (an injected fault)",
                    )
                )
            if seq and seq in c.sent_seqs:
                c.acked_by_client = max(c.acked_by_client, c.sent_seqs.index(seq) + 1)

    def closed(self, conn: int) -> None:
        c = self._conns.get(conn)
        if c is not None and c.acked_by_client < len(c.sent_events):
            self._unacked.append((conn, c.sent_events[c.acked_by_client :]))

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


def checker_for(protocol: str) -> Checker:
    if protocol == "lumberjack":
        return LumberjackChecker()
    if protocol == "pravega":
        return PravegaChecker()
    return Checker()
