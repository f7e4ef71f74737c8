"""Partial messages of the 2017 draft dialect (specs/pravega-draft-2017/README.md §5):
cutting a message into Begin/Middle/End parts, and reassembling one with the
checks of rule 4 made as soon as the bytes they need are in."""

from __future__ import annotations

from collections.abc import Callable

from ...errors import LimitExceeded, LocalProtocolError, ProtocolError
from ...wire import check_limit
from ..frames import HEADER
from .frames import DRAFT, PROTOCOL, Part, PartialMessage

__all__ = ["Reassembly", "command_name", "error", "split_message", "split_reply", "wrap_inner"]


def split_message(frame: bytes, cuts: list[int]) -> list[bytes]:
    """``frame`` (one serialized message) as PartialMessage frames cut at ``cuts``
    (offsets inside the frame, sorted; repeats give empty parts).  No cuts gives
    a Begin with everything and an empty End (§5 rule 1)."""
    points = [0, *sorted(min(max(c, 0), len(frame)) for c in cuts), len(frame)]
    slices = [frame[points[i] : points[i + 1]] for i in range(len(points) - 1)]
    if len(slices) == 1:
        slices.append(b"")
    last = len(slices) - 1
    return [
        PartialMessage(part=int(Part.BEGIN if i == 0 else Part.END if i == last else Part.MIDDLE), data=piece).encode()
        for i, piece in enumerate(slices)
    ]


def split_reply(frame: bytes, part_size: int) -> bytes:
    """§5 "Sending": ``frame`` whole if it is at most ``part_size`` bytes, else
    parts of exactly ``part_size`` data bytes, the last carrying the rest (never empty)."""
    if len(frame) <= part_size:
        return frame
    return b"".join(split_message(frame, list(range(part_size, len(frame), part_size))))


def error(reason: str, frame: str | None, field: str, offset: int | None) -> LocalProtocolError:
    return LocalProtocolError(reason, protocol=PROTOCOL, frame=frame, field=field, offset=offset)


def wrap_inner(exc: ProtocolError, data_at: int) -> LocalProtocolError:
    """§5 rule 5: an error about a reassembled message, on the part that revealed it."""
    cls = LimitExceeded if isinstance(exc, LimitExceeded) else LocalProtocolError
    if exc.protocol is None:
        exc.protocol = PROTOCOL
    return cls(
        f"reassembled message: {exc.reason}", protocol=PROTOCOL, frame="PartialMessage", field="data", offset=data_at, inner=exc
    )


def command_name(code: int) -> str | None:
    cls = DRAFT.commands.get(code)
    return None if cls is None else cls.NAME


class Reassembly:
    """One partial message in progress (§5), checked as its bytes arrive (rule 4)."""

    def __init__(self, limit: int, *, budget: int | None = None) -> None:
        """``budget``: the server's ``max_connection_memory`` when it made ``limit`` its share (§11)."""
        self.limit = limit
        self.budget = budget
        self.buf: bytearray | None = None
        self.started_at = 0  #: stream offset of the Begin part's frame
        self.in_block = False  #: began inside an append block
        self.code: int | None = None
        self.total: int | None = None  #: 8 + the announced length

    @property
    def active(self) -> bool:
        return self.buf is not None

    def begin(self, offset: int, *, in_block: bool) -> None:
        self.buf = bytearray()
        self.started_at = offset
        self.in_block = in_block
        self.code = self.total = None

    def add(self, data: bytes, data_at: int, check_type: Callable[[int], None]) -> None:
        buf = self.buf
        assert buf is not None
        have, total = len(buf), len(buf) + len(data)
        if have < HEADER and total >= 4:
            head = (bytes(buf[:HEADER]) + data[:HEADER])[:HEADER]
            if have < 4:
                code = int.from_bytes(head[:4], "big", signed=True)
                try:
                    check_type(code)
                except ProtocolError as exc:
                    raise wrap_inner(exc, data_at) from None
                self.code = code
            if total >= HEADER:
                n = int.from_bytes(head[4:8], "big", signed=True)
                name = command_name(self.code) if self.code is not None else None
                if n < 0:
                    raise wrap_inner(error(f"negative length {n}", name, "length", 4), data_at)
                try:
                    if self.budget is not None and HEADER + n > self.limit:
                        raise LimitExceeded(
                            f"length {HEADER + n} exceeds the {self.limit} bytes the limit max_connection_memory="
                            f"{self.budget} allows (max_partial_size is {self.limit} under it)",
                            protocol=PROTOCOL,
                            frame=name,
                            field="length",
                            offset=4,
                        )
                    check_limit(
                        HEADER + n, self.limit, name="max_partial_size", field="length", frame=name, offset=4, protocol=PROTOCOL
                    )
                except LimitExceeded as exc:
                    raise wrap_inner(exc, data_at) from None
                self.total = HEADER + n
        if self.total is not None and total > self.total:
            name = command_name(self.code) if self.code is not None else None
            raise wrap_inner(
                error(f"the parts carry {total - self.total} bytes more than the message", name, "(trailing)", self.total),
                data_at,
            )
        buf += data

    def finish(self, data_at: int) -> bytes:
        """The complete message at its End part (rule 4: not shorter than announced)."""
        buf = self.buf
        assert buf is not None
        if self.total is None or len(buf) < self.total:
            name = command_name(self.code) if self.code is not None else None
            raise wrap_inner(error(f"End part after {len(buf)} bytes of the message", name, "(eof)", 0), data_at)
        self.buf = None
        return bytes(buf)
