"""How refwire serves a Lumberjack client case: :class:`ClientObserver` (what a
client sends, window by window), :class:`LjState` (what was acked and seen
across the case's connections) and :func:`serve`, the loop that hands each
complete window to the case's answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ....describe import Described
from ....errors import ProtocolError
from ....lumberjack.describe import describer
from ....lumberjack.frames import Ack
from ...clients import ClientSession
from ...conversation import Conversation
from ._common import _invalid


@attrs.define
class ClientWindow:
    """One window a client sent: its version, announced count and events (seq, payload key)."""

    version: int
    count: int
    events: list[tuple[int, bytes]] = attrs.field(factory=list)

    @property
    def full(self) -> bool:
        return len(self.events) >= self.count


class ClientObserver:
    """Tokens for what a client sends: ``W n`` (``1W n`` on v1), ``J seq`` /
    ``D seq`` per event (the events inside a ``C`` are inflated and shown the
    same way), ``invalid <field>`` at the first byte that does not decode.
    Complete windows collect in :attr:`done`."""

    def __init__(self) -> None:
        self._describer = describer(64 << 20, "c2s")
        self._broken = False
        self.current: ClientWindow | None = None
        self.done: list[ClientWindow] = []
        self.stray = 0

    def feed(self, data: bytes) -> list[tuple[str, dict[str, Any]]]:
        if self._broken:
            return []
        out: list[tuple[str, dict[str, Any]]] = []
        for d in self._describer.feed(data):
            if self._broken:  # a bad C before it: nothing after the invalid token is decoded
                break
            if d.error is not None:
                self._broken = True
                out.append(_invalid(d.error))
            else:
                self._frame(d, out, 0)
        return out

    def _frame(self, d: Described, out: list[tuple[str, dict[str, Any]]], depth: int) -> None:
        f = d.frame
        version = d.fields["version"]
        v = "" if version == "2" else version
        if d.type == "W":
            self.current = ClientWindow(f.version, f.count)
            out.append((f"{v}W {f.count}", {"type": "W", "version": version, "count": f.count}))
            if f.count == 0:
                self.done.append(self.current)
                self.current = None
        elif d.type in ("J", "D"):
            key = f.payload if d.type == "J" else repr(f.pairs).encode()
            out.append((f"{v}{d.type} {f.seq}", {"type": d.type, "version": version, "seq": f.seq}))
            if self.current is None:
                self.stray += 1
                return
            self.current.events.append((f.seq, bytes(key)))
            if self.current.full:
                self.done.append(self.current)
                self.current = None
        elif d.type == "C":
            if depth >= 4:
                out.append(("invalid C nesting", {"type": "invalid", "field": "payload"}))
                self._broken = True
                return
            err = d.fields.get("inner_error")
            if err is not None:
                self._broken = True
                out.append(_inner_invalid(d, err))
                return
            for g in d.inner:
                if self._broken:
                    return
                self._frame(g, out, depth + 1)
        else:
            out.append((f"{v}{type(f).__name__[0]}", {"type": type(f).__name__}))

    def eof(self) -> list[tuple[str, dict[str, Any]]]:
        if self._broken:
            return []
        return [("truncated", {"type": "truncated", "bytes": len(d.data)}) for d in self._describer.end()]


def _inner_invalid(d: Described, err: ProtocolError) -> tuple[str, dict[str, Any]]:
    """The token of a ``C`` whose payload is no whole frame stream, as this
    observer has always given it: an inflate error at offset 0, an incomplete
    frame at the end as the offset of its first byte in the inflated payload."""
    if "inflated_len" not in d.fields:  # the zlib stream itself
        return _invalid(err, offset=0)
    held = d.fields.get("inner_held")
    if held is not None:
        return _invalid(
            err, frame=None, offset=d.fields["inflated_len"] - held, reason=f"{held} bytes of an incomplete frame at the end"
        )
    return _invalid(err)


#: The client's exit status said "all acked" (or manual mode, where it is unknown).
EXIT_OK = "exit [0u]*"
#: The client reported a failure (or was killed at the budget end).
EXIT_FAILED = "exit [!0u]*"
CLOSED_ON_BAD = "closed the connection after the bad frame"
#: A case's bad frame needs a window the client never sent (lj.C4.2: one of 3 or more events).
NO_BAD_FRAME = "no window could carry the bad frame"


class LjState:
    """What refwire (as the server) acked and saw across a client case's connections."""

    def __init__(self, s: ClientSession) -> None:
        self.s = s
        self.windows = 0
        self.acked: set[bytes] = set()
        self.seen: set[bytes] = set()
        self.resent = 0
        self.resent_acked = 0
        self.bad_sent = False
        #: a window came that the bad frame did not fit (acked normally instead)
        self.bad_withheld = False

    def arrived(self, win: ClientWindow) -> None:
        self.windows += 1
        for _, key in win.events:
            if key in self.seen:
                self.resent += 1
                if key in self.acked:
                    self.resent_acked += 1
            self.seen.add(key)

    async def ack(
        self, c: Conversation, win: ClientWindow, k: int, *, split: Any = "whole", gap: float | None = None, label: str = ""
    ) -> bool:
        """Ack the first ``k`` events of ``win`` the strict way: ``A <seq of event k>``."""
        seq = win.events[k - 1][0] if k else 0
        ok = await c.send(Ack(seq, win.version).encode(), label=label or f"A {seq}", split=split, gap=gap)
        if ok and k:
            self.acked.update(key for _, key in win.events[:k])
        return ok

    def finish(self, s: ClientSession) -> None:
        n = s.events
        got = len(self.acked)
        s.note(f"all {n} events acked" if got >= n else f"{got} of {n} events acked")
        s.note(f"resent {self.resent} event{'s' if self.resent > 1 else ''}" if self.resent else "no event resent")
        s.note("resent an acked event" if self.resent_acked else "no acked event resent")
        if len(s.conversations) > 1:
            s.note("reconnected")
        if self.bad_withheld and not self.bad_sent:
            s.note(NO_BAD_FRAME)
        if s.exit_status == 0 and got < n:
            s.note(f"claims success with {n - got} of {n} events unacked")


Answer = Callable[[LjState, Conversation, ClientWindow], Awaitable[None]]


async def normal(st: LjState, c: Conversation, win: ClientWindow) -> None:
    await st.ack(c, win, len(win.events))


def _window_or_close(obs: ClientObserver, k: int) -> Callable[[Conversation], bool]:
    return lambda cv: len(obs.done) > k or cv.closed_by_testee is not None


async def serve(s: ClientSession, answer: Answer) -> None:
    """Accept the client's connections one after the other and answer each
    complete window with ``answer`` (acking is up to it) until the testee
    exits, the budget ends or (manual mode) every event was acked and the
    client closed."""
    st = LjState(s)
    s.after_exit.append(st.finish)
    while True:
        c = await s.accept(10.0 if not s.conversations else 5.0)
        if c is None:
            return
        obs = c.observer
        assert isinstance(obs, ClientObserver)
        k = 0
        while True:
            await c.wait_for(_window_or_close(obs, k), 60.0)
            if len(obs.done) > k:
                win = obs.done[k]
                k += 1
                st.arrived(win)
                if win.events:
                    await answer(st, c, win)
                elif win.count == 0:
                    await c.send(Ack(0, win.version).encode(), split="whole", label="A 0 (empty window)")
                continue
            break
        # Close our side too, at once: a TLS client may wait for our close_notify.
        await c.close("FIN")
        if s.manual and len(st.acked) >= s.events:
            return


async def bad_then_normal(
    st: LjState, c: Conversation, win: ClientWindow, bad: Callable[[ClientWindow], bytes | None], label: str
) -> None:
    """The first window gets ``bad(win)`` (None: not possible for this window,
    ack it normally); the client must close that connection.  Later windows
    are acked normally, so a client that reconnects and resends completes."""
    if st.bad_sent:
        await normal(st, c, win)
        return
    data = bad(win)
    if data is None:
        st.bad_withheld = True
        await normal(st, c, win)
        return
    st.bad_sent = True
    await c.send(data, label=label, split="whole")
    if c.closed_by_testee is not None or await c.wait_close(1.0):
        st.s.note(CLOSED_ON_BAD)
    else:
        st.s.note("kept the connection open after the bad frame")
        await c.close("FIN")


_DELIVERED = ("all {n} events acked", "no acked event resent", EXIT_OK)


def _delivered(n: int, *extra: str) -> tuple[str, ...]:
    return tuple(f.format(n=n) for f in _DELIVERED) + extra
