"""Pravega in the fault proxy (specs/pravega/README.md); what it shares with the
2017 draft (:mod:`refwire.chaos.adapters.pravega_draft`).

Every command is observed by name (``DataAppended``, ``AppendBlockEnd`` ...),
split by its 8-byte header and decoded by the dialect's own command table
(§1, §4), with its fixed-width leading fields (``request_id``,
``event_number`` ...) as rule fields.

``--check`` (§5):

* ``event-number-backwards``: on one connection a writer's appends
  (AppendBlockEnd, ConditionalAppend) carry event numbers that go down, as
  the client sent them (the store closes such a connection, §5.3);
* ``ack-above-sent``: a DataAppended (as the client received it) acks an
  event number above the highest the store received from that writer, on
  any connection -- the store's bug when it sent it so, an injected fault
  when the proxy changed it.
"""

from __future__ import annotations

from typing import Any

from ...describe import UNDECODED, Described, Layout
from ...pravega.describe import LAYOUT, PravegaDescriber
from ...pravega.frames_codec import CURRENT, Dialect
from ..adapter import Adapter
from ..check import Checker, Violation
from ..observe import Observed, Observer

__all__ = ["ADAPTER", "FIELDS", "PravegaChecker", "PravegaObserver", "command_fields", "observed"]


def observed(d: Described) -> Observed:
    """A described Pravega frame as the proxy observes it: undecoded bytes carry
    the describer's reason alone as ``error``."""
    if d.type == UNDECODED:
        return Observed(UNDECODED, d.data, {"error": d.error.reason} if d.error is not None else {})
    return Observed(d.type, d.data, d.fields, d.spans)


class PravegaObserver:
    """Pravega commands (or the draft's), as the dialect's describer
    (:class:`~refwire.pravega.describe.PravegaDescriber`) reads them: split by the
    8-byte header and decoded by the dialect's own command table; a command whose
    payload does not decode is still one frame (``fields`` has the error)."""

    def __init__(self, max_frame_size: int, dialect: Dialect = CURRENT) -> None:
        self._describer = PravegaDescriber(max_frame_size, dialect)

    def feed(self, data: bytes) -> list[Observed]:
        return [observed(d) for d in self._describer.feed(data)]

    def held(self) -> int:
        return self._describer.held()


def command_fields(layout: Layout) -> dict[str, dict[str, tuple[int, int]]]:
    """Per command of ``layout``: ``type`` and ``length`` (the header), then each
    leading fixed-width field up to the first of variable width, at its offset."""
    return {name: layout.spans(name) for name in layout.frames}


class PravegaChecker(Checker):
    """See the module docstring."""

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


#: Per command: each field a rule may match, rewrite or corrupt, as (offset, size).
FIELDS = command_fields(LAYOUT)


def _observer(max_frame_size: int, direction: str, session: dict[str, Any]) -> Observer:
    return PravegaObserver(max_frame_size)


ADAPTER = Adapter(observer=_observer, fields=FIELDS, checker=PravegaChecker, prefix="pv")
