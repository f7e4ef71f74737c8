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

import uuid
from typing import Any, cast

import attrs

from ...errors import ProtocolError
from ...pravega.frames_codec import _NO_DEFAULT as REQUIRED  # the codec's mark of a field that is always there
from ...pravega.frames_codec import BOOL, CURRENT, I32, I64, U8, UUID, Dialect, decode_command
from ..adapter import Adapter
from ..check import Checker, Violation
from ..observe import LengthFramed, Observed, Observer

__all__ = ["ADAPTER", "FIELDS", "PravegaChecker", "PravegaObserver", "command_fields"]


class PravegaObserver(LengthFramed):
    """Pravega commands (or the draft's), split by the 8-byte header and decoded
    by the dialect's own command table; a command whose payload does not decode
    is still one frame (``fields`` has the error), since its length is known."""

    HEADER = 8

    def __init__(self, max_frame_size: int, dialect: Dialect = CURRENT) -> None:
        super().__init__(max_frame_size)
        self._dialect = dialect

    def _starts(self, first: int) -> str | None:
        # every type code is -127..100: its first byte is 0x00 or 0xff
        return None if first in (0x00, 0xFF) else f"no command starts with byte {first:#04x}"

    def _header(self, head: bytes) -> tuple[str, int] | str:
        code = int.from_bytes(head[:4], "big", signed=True)
        n = int.from_bytes(head[4:8], "big", signed=True)
        cls = self._dialect.commands.get(code)
        if cls is None or n < 0:
            return f"{'unknown type' if cls is None else 'bad length'} {code}/{n}"
        return cls.NAME, 8 + n

    def _observe(self, name: str, raw: bytes) -> Observed:
        code = int.from_bytes(raw[:4], "big", signed=True)
        fields: dict[str, Any] = {"type": code, "length": len(raw) - 8}
        try:
            cmd = decode_command(code, raw, start=8, end=len(raw), base=8, allow_inner=True, dialect=self._dialect)
            for a in attrs.fields(cast(Any, type(cmd))):  # every scalar field (rules may corrupt those with a span)
                value = getattr(cmd, a.name)
                if isinstance(value, bool | int | str):
                    fields[a.name] = value
                elif isinstance(value, uuid.UUID):
                    fields[a.name] = str(value)
        except ProtocolError as exc:
            fields["error"] = str(exc)
        return Observed(name, raw, fields)


def command_fields(dialect: Dialect) -> dict[str, dict[str, tuple[int, int]]]:
    """Per command of ``dialect``: ``type`` and ``length`` (the header), then each
    leading fixed-width field up to the first of variable width, at its offset."""
    sizes = {I32: 4, I64: 8, U8: 1, BOOL: 1, UUID: 16}
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for cls in dialect.commands.values():
        spans = {"type": (0, 4), "length": (4, 4)}
        pos = 8
        for a in attrs.fields(cast(Any, cls)):
            size = sizes.get(a.metadata.get("kind", ""))
            if size is None or a.metadata.get("optional") is not REQUIRED:
                break  # a variable-width field, or a trailing one that may be absent (§2.4)
            spans[a.name] = (pos, size)
            pos += size
        out[cls.NAME] = spans
    return out


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
FIELDS = command_fields(CURRENT)


def _observer(max_frame_size: int, direction: str, session: dict[str, Any]) -> Observer:
    return PravegaObserver(max_frame_size)


ADAPTER = Adapter(observer=_observer, fields=FIELDS, checker=PravegaChecker, prefix="pv")
