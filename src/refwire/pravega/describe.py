"""The lenient reading of Pravega traffic (specs/pravega/README.md §1, §2, §4, §5), shared
with the 2017 draft (:mod:`refwire.pravega.draft2017.describe`).

Every frame is a command: an 8-byte header ``i32 type, i32 length`` (big-endian,
§1) and ``length`` payload bytes, decoded by the dialect's own command table
(:mod:`refwire.pravega.frames_codec`, §4).  :data:`LAYOUT` is that table as data:
per command the header and each *leading fixed-width* field (``request_id``,
``writer_id``, ``event_number`` ...) up to the first field of variable width or
the first optional one (§2.4), at its offset from the frame's first byte.

The describer (:func:`describer`, :class:`PravegaDescriber`) cuts a direction
by the header and decodes each whole frame with
:func:`~refwire.pravega.frames_codec.decode_command`; no state is enforced and
inner commands (Event, Padding, PartialEvent, §5.3) are described where they
stand.  A first byte that starts no command (every type code is -127..100, so
its first byte is 0x00 or 0xff), an unknown type code, a negative length and a
frame over ``max_frame_size`` are no frame: the rest of the direction is
undecoded bytes.  A command whose *payload* does not decode is still one frame
(its length is known): its :attr:`~refwire.describe.Described.error` is the
codec's error at its stream offset, ``frame`` is None and ``fields["error"]``
is the codec's text of it with offsets from the frame's first byte.
"""

from __future__ import annotations

import uuid
from typing import Any, Final, Literal

from ..describe import Described, Field, FrameLayout, Layout, LengthFramed
from ..errors import ProtocolError
from .frames_codec import _NO_DEFAULT as REQUIRED  # the codec's mark of a field that is always there
from .frames_codec import BOOL, CURRENT, HEADER, I32, I64, U8, UUID, Dialect, decode_command

__all__ = ["LAYOUT", "NOTES", "PravegaDescriber", "describer", "layout_of"]

#: Wire kind -> (size, :class:`~refwire.describe.Field` kind) of the fixed-width kinds (§2).
_FIXED: Final[dict[str, tuple[int, Literal["uint", "int", "bytes"]]]] = {I32: (4, "int"), I64: (8, "int"), U8: (1, "uint"), BOOL: (1, "uint"), UUID: (16, "bytes")}

NOTES: Final = (
    "Every frame is i32 type, i32 length (big-endian) and length payload bytes (§1); the table gives, per "
    "command, the header and the leading fixed-width fields up to the first variable-width or optional one (§4). "
    "Not in the table: strings are a u16 length and Java modified UTF-8 (§2.3); byte fields are an i32 length "
    "and bytes (AppendBlockEnd and ConditionalBlockEnd read no data for a length <= 0), or run to the end of the "
    "frame; fields added after version 1 are optional and take their default when the payload ends before them, "
    "and bytes after the last known field are ignored (§2.4); ConditionalAppend carries a nested Event frame "
    "(i32 type 0, i32 length, bytes); AppendBlock/AppendBlockEnd data holds Event, Padding and PartialEvent "
    "frames (§5.1, §5.3), which are no top-level commands; table commands carry counted TableKey/TableEntry "
    "lists (§4.5, §9); AuthTokenCheckFailed and ErrorMessage map unknown error codes on decoding (§4.4)."
)


def layout_of(dialect: Dialect, notes: str) -> Layout:
    """``dialect``'s command table as a :class:`~refwire.describe.Layout`: per command
    ``type`` and ``length`` (the header), then each leading fixed-width field up to
    the first of variable width or the first that may be absent (§2.4)."""
    frames: dict[str, FrameLayout] = {}
    for cls in dialect.commands.values():
        fields = [Field("type", 0, 4, "int"), Field("length", 4, 4, "int")]
        pos = HEADER
        for name, kind, optional in cls.LAYOUT:
            fixed = _FIXED.get(kind)
            if fixed is None or optional is not REQUIRED:
                break  # a variable-width field, or a trailing one that may be absent (§2.4)
            fields.append(Field(name, pos, fixed[0], fixed[1]))
            pos += fixed[0]
        frames[cls.NAME] = FrameLayout(cls.NAME, tuple(fields), min_size=pos)
    return Layout("big", frames, notes)


#: Today's commands as data (§1, §4).
LAYOUT: Final = layout_of(CURRENT, NOTES)


class PravegaDescriber(LengthFramed):
    """One direction of Pravega commands (or another dialect's), described frame by
    frame (see the module docstring).  ``allow_inner=False`` makes an inner command
    (Event, PartialEvent) at the top level a frame with an error, as the strict
    codec reports it (§5.3)."""

    HEADER = HEADER

    def __init__(self, max_frame_size: int, dialect: Dialect = CURRENT, *, allow_inner: bool = True) -> None:
        super().__init__(max_frame_size)
        self.dialect = dialect
        self.allow_inner = allow_inner
        self.PROTOCOL = dialect.protocol

    def starts(self, first: int, offset: int) -> ProtocolError | None:
        # every type code is -127..100: its first byte is 0x00 or 0xff (§1)
        if first in (0x00, 0xFF):
            return None
        return ProtocolError(f"no command starts with byte {first:#04x}", protocol=self.PROTOCOL, field="type", offset=offset)

    def header(self, head: bytes, offset: int) -> tuple[str, int] | ProtocolError:
        code = int.from_bytes(head[:4], "big", signed=True)
        n = int.from_bytes(head[4:8], "big", signed=True)
        cls = self.dialect.commands.get(code)
        if cls is None:
            return ProtocolError(f"unknown type {code}/{n}", protocol=self.PROTOCOL, field="type", offset=offset)
        if n < 0:
            return ProtocolError(f"bad length {code}/{n}", protocol=self.PROTOCOL, frame=cls.NAME, field="length", offset=offset + 4)
        return cls.NAME, HEADER + n

    def describe(self, frame_type: str, data: bytes, offset: int) -> Described:
        code = int.from_bytes(data[:4], "big", signed=True)
        fields: dict[str, Any] = {"type": code, "length": len(data) - HEADER}
        try:
            cmd = decode_command(
                code, data, start=HEADER, end=len(data), base=offset + HEADER, allow_inner=self.allow_inner, dialect=self.dialect
            )
        except ProtocolError as exc:
            fields["error"] = self._in_frame(code, data)
            return Described(frame_type, offset, data, fields, error=exc)
        for name, _kind, _opt in cmd.LAYOUT:  # every scalar field, by the spec's name
            value = getattr(cmd, name)
            if isinstance(value, bool | int | str):
                fields[name] = value
            elif isinstance(value, uuid.UUID):
                fields[name] = str(value)
        return Described(frame_type, offset, data, fields, frame=cmd)


    def _in_frame(self, code: int, data: bytes) -> str:
        """The codec's text of why ``data`` does not decode, its offsets counted from the
        frame's first byte.  The codec phrases it again with that base rather than the
        text being rebuilt from the stream's error: the codec's text of an error in a
        length-prefixed field names the offset inside it, where the error's ``offset``
        names the field's first byte."""
        try:
            decode_command(code, data, start=HEADER, end=len(data), base=HEADER, allow_inner=self.allow_inner, dialect=self.dialect)
        except ProtocolError as exc:
            return str(exc)
        raise AssertionError("a frame decoded at one base and not at another")  # pragma: no cover


def describer(max_frame_size: int, direction: str = "c2s", session: dict[str, Any] | None = None) -> PravegaDescriber:
    """A fresh lenient describer of one direction of one Pravega connection (both
    directions share the command table)."""
    return PravegaDescriber(max_frame_size)

