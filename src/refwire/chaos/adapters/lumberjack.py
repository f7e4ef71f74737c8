"""Lumberjack in the fault proxy (specs/lumberjack/README.md).

Observed frame by frame as :mod:`refwire.lumberjack.describe` describes them
(§2): ``W``, ``J``, ``D``, ``C`` and ``A``, the rule fields its layout's (``len``
named ``length`` for rules); rules see inside a ``C`` too (its inflated payload, §2.5).

``--check`` (§3): the proxy sees every frame twice, as its sender sent it and
as the other peer received it (after the faults), so a check can tell a peer's
bug from an injected fault:

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

import zlib
from typing import Any

import attrs

from ...describe import Described
from ...lumberjack.describe import LAYOUT, describe_compressed, describer
from ..adapter import Adapter
from ..check import Checker, Violation
from ..observe import Observed, Observer

__all__ = ["ADAPTER", "FIELDS", "LumberjackChecker", "LumberjackObserver", "inner_frames", "rewrap"]

#: The largest frame (and inflated payload) the checker reads events from.
_CHECK_MAX = 64 << 20
#: The names rules give the fields whose spec name differs (§2.3, §2.4: ``len``).
_RULE_NAMES = {"len": "length"}


class LumberjackObserver:
    """Lumberjack v1/v2 frames (§2), as the describer reads them (no JSON validation, either version byte)."""

    def __init__(self, max_frame_size: int) -> None:
        # a C is opened only when a rule looks inside it (inner_frames), not as it passes
        self._describer = describer(max_frame_size, open_compressed=False)

    def held(self) -> int:
        return self._describer.held()

    def feed(self, data: bytes) -> list[Observed]:
        return [_observed(d) for d in self._describer.feed(data)]


#: Per frame type, the described fields rules see (the layout's), under the rules' names.
_RULE_FIELDS: dict[str, dict[str, str]] = {
    t: {name: _RULE_NAMES.get(name, name) for name in layout.spans()} for t, layout in LAYOUT.frames.items()
}


def _observed(d: Described) -> Observed:
    """A described frame as the proxy sees it: its layout's fields under the rules' names."""
    names = _RULE_FIELDS.get(d.type)
    if names is None:  # undecoded bytes
        return Observed(d.type, d.data, d.fields)
    return Observed(d.type, d.data, {names[k]: v for k, v in d.fields.items() if k in names})


def inner_frames(frame: Observed, max_size: int) -> list[Observed] | None:
    """The frames inside a ``C`` (its inflated payload, §2.5), or None when
    ``frame`` is none or does not open (it then passes as it is)."""
    if frame.type != "C":
        return None
    inner, opened = describe_compressed(frame.data[6:], max_size)
    if "inner_error" in opened:
        return None  # not whole frames: leave the envelope alone
    return [_observed(d) for d in inner]


def rewrap(envelope: Observed, inner: list[bytes]) -> bytes:
    """``envelope`` again around the (changed) ``inner`` frames: a ``C`` keeps
    its version byte and compresses them anew (§2.5)."""
    body = zlib.compress(b"".join(inner))
    return envelope.data[:2] + len(body).to_bytes(4, "big") + body


#: Per frame type: each field a rule may match, rewrite or corrupt,
#: as (offset in the frame, size in bytes): the layout's (§2), in the order rules list them.
FIELDS: dict[str, dict[str, tuple[int, int]]] = {
    t: {_RULE_NAMES.get(k, k): span for k, span in LAYOUT.spans(t).items()} for t in ("A", "W", "J", "D", "C")
}


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
        if frame.type in ("J", "D"):
            d = describer(_CHECK_MAX)
            got = d.feed(frame.data)
            if len(got) != 1 or d.held() or got[0].type not in ("J", "D"):  # a corrupted frame the observer still cut
                return []
            return [(got[0].fields["seq"], _payload(got[0].frame))]
        if frame.type == "C":
            inner, _why = describe_compressed(frame.data[6:], _CHECK_MAX)  # no inner frames: no events
            return [(g.fields["seq"], _payload(g.frame)) for g in inner if g.type in ("J", "D")]
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
                # it did send it: when it reaches the client that is no injected fault (reported once, here)
                c.acks_in_flight.append(seq)
                return
            if w.last_ack and w.received.index(seq) < w.received.index(w.last_ack):
                self.violations.append(
                    Violation(
                        "acks-not-cumulative", conn, direction, index, f"ack {seq} after ack {w.last_ack} in the same window"
                    )
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


def _observer(max_frame_size: int, direction: str, session: dict[str, Any]) -> Observer:
    return LumberjackObserver(max_frame_size)


ADAPTER = Adapter(
    observer=_observer,
    fields=FIELDS,
    checker=LumberjackChecker,
    prefix="lj",
    inner_frames=inner_frames,
    rewrap=rewrap,
)
