"""Lumberjack traffic described frame by frame (specs/lumberjack/README.md §2).

The one lenient reading of a Lumberjack connection that the fault proxy, the
conformance runner and the capture pipeline share (:mod:`refwire.describe`),
built on the codec's own :class:`~refwire.lumberjack.frames.FrameDecoder`:

* :data:`LAYOUT` -- the frames as data (§2: the table; §2.1 ``W``, §2.2 ``D``,
  §2.3 ``J``, §2.4 ``C``, §2.5 ``A``): every frame starts ``version:u8 type:u8``
  and its fixed fields are unsigned 32-bit big-endian integers.  The type
  letters and the integer format come from the codec's tables
  (:data:`~refwire.lumberjack.frames.TYPE_NAMES`, :data:`~refwire.wire.U32BE`);
  what a table cannot say is in its ``notes``.
* :func:`describer` -- one direction of one connection: a :class:`Described`
  per frame, type by its letter, ``fields`` by the spec's names (``version`` as
  its character ``"1"``/``"2"``, then ``count``, ``seq``, ``len`` or ``pairs``),
  ``frame`` the codec's object.  Lenient by default: either version byte on any
  frame type, ``J`` payloads not parsed, no state; only ``max_frame_size`` is
  enforced (on frames and on a ``C``'s inflated payload).

A ``C`` frame's payload is inflated and described as its ``inner`` frames
(offsets inside the inflated bytes), nested at most ``max_nesting_depth`` deep
(§3.6).  When it does not open -- the zlib stream is bad or too large, an inner
frame is bad, the inflated bytes end inside a frame, or it is nested too deep --
the ``C`` keeps no inner frames and its fields say why:

* ``inner_error`` -- the :class:`~refwire.errors.ProtocolError` (an inflate error
  at the payload's offset; an inner frame's error at its offset in the inflated
  bytes; the end of the inflated bytes inside a frame, as :meth:`LumberjackDescriber.end`
  says it);
* ``inner_before_error`` -- the inner frames described before it;
* ``inner_held`` -- when the inflated bytes end inside a frame: the bytes of it;

and a ``C`` that inflated has ``inflated_len``.
"""

from __future__ import annotations

from typing import Any, Final

from ..describe import UNDECODED, Described, Field, FrameLayout, Layout
from ..errors import LimitExceeded, ProtocolError
from ..wire import U32BE, Limits
from .frames import (
    DEFAULT_LIMITS,
    MAX_U32,
    PROTOCOL,
    TYPE_NAMES,
    Ack,
    Compressed,
    DataFrame,
    FrameDecoder,
    JsonFrame,
    Window,
    frame_size,
    inflate,
)

__all__ = ["LAYOUT", "LumberjackDescriber", "describe_compressed", "describer"]

# --------------------------------------------------------------------------- layout

#: The u32 fields after ``version`` and ``type``, in wire order, by the spec's names (§2).
_U32_FIELDS: Final = {"W": ("count",), "D": ("seq", "pairs"), "J": ("seq", "len"), "C": ("len",), "A": ("seq",)}
_HEADER: Final = (Field("version", 0, 1, "char"), Field("type", 1, 1, "char"))


def _frame_layout(letter: str) -> FrameLayout:
    size = U32BE.size
    ints = tuple(Field(name, 2 + k * size, size) for k, name in enumerate(_U32_FIELDS[letter]))
    return FrameLayout(letter, _HEADER + ints, min_size=2 + size * len(ints))


#: Lumberjack's frames as data (§2).
LAYOUT: Final = Layout(
    byte_order="big" if U32BE.format.startswith(">") else "little",
    frames={letter: _frame_layout(letter) for letter in TYPE_NAMES.values()},
    notes=(
        "Every frame is version:u8 ('1' 0x31 or '2' 0x32) and type:u8 (an ASCII letter), then its fixed "
        "u32 fields (§2).  After them: J carries json[len] (len >= 1; its size is 10 + len, §2.3); D carries "
        "`pairs` times (klen:u32 key[klen] vlen:u32 value[vlen]) (its size is 10 + sum(8 + klen + vlen), §2.2); "
        "C carries a zlib stream (RFC 1950) of len bytes (its size is 6 + len) that inflates to a whole frame "
        "stream -- W, J, D and further C frames -- described as the C's inner frames, nested at most "
        "max_nesting_depth (4) deep (§2.4, §3.6).  D exists only in version 1 and J only in version 2 (§2.2, "
        "§2.3); the describer takes either version byte on any type unless strict.  W and A are 6 bytes (§2.1, §2.5)."
    ),
)

# --------------------------------------------------------------------------- describer

_LETTERS: Final[dict[type, str]] = {Window: "W", DataFrame: "D", JsonFrame: "J", Compressed: "C", Ack: "A"}


class LumberjackDescriber:
    """One direction of one Lumberjack connection, described frame by frame (see the module docstring).

    ``strict``: the codec's checks a conformant peer makes besides the framing --
    a ``J`` payload must be a JSON object, ``D`` only on version 1 and ``J`` only
    on version 2 (§2.2, §2.3) -- also end the frames (the capture pipeline reports them).
    """

    def __init__(
        self,
        max_frame_size: int,
        *,
        strict: bool = False,
        max_nesting_depth: int = DEFAULT_LIMITS.max_nesting_depth,
        depth: int = 0,
        open_compressed: bool = True,
    ) -> None:
        self.max_frame_size = max_frame_size
        self.strict = strict
        #: whether a ``C`` is inflated as it passes (a tool that opens one only on demand
        #: -- the fault proxy -- turns it off, and a ``C`` then carries just ``version`` and ``len``)
        self.open_compressed = open_compressed
        self.max_nesting_depth = max_nesting_depth
        #: how many ``C`` frames this stream is inside
        self.depth = depth
        limits = Limits(max_window=MAX_U32, max_frame_size=max_frame_size, max_buffered=max_frame_size)
        self._dec = FrameDecoder(limits, validate_json=strict, strict_versions=strict)
        self._pending = bytearray()
        self._offset = 0  # the stream offset of _pending[0]
        self._broken = False

    def held(self) -> int:
        return len(self._pending)

    def feed(self, data: bytes) -> list[Described]:
        if self._broken:
            return [self._undecoded(bytes(data), None)] if data else []
        self._pending += data
        self._dec.feed(data)
        frames, err = self._dec.frames_before_error()
        out: list[Described] = []
        for f in frames:
            size = frame_size(f)
            raw = bytes(self._pending[:size])
            del self._pending[:size]
            out.append(self._describe(f, raw))
            self._offset += size
        if err is not None:
            self._broken = True
            if self._pending:
                out.append(self._undecoded(bytes(self._pending), err))
            self._pending.clear()
        return out

    def end(self) -> list[Described]:
        if not self._pending:
            return []
        held = bytes(self._pending)
        name = self._dec.pending_frame_name()
        self._pending.clear()
        self._broken = True
        err = ProtocolError(
            f"the stream ended inside {f'a {name} frame' if name else 'a frame'} ({len(held)} bytes held)",
            protocol=PROTOCOL,
            frame=name,
            field="(end)",
            offset=self._offset + len(held),
        )
        return [self._undecoded(held, err)]

    def _undecoded(self, data: bytes, error: ProtocolError | None) -> Described:
        out = Described(UNDECODED, self._offset, data, {"error": str(error)} if error is not None else {}, error=error)
        self._offset += len(data)
        return out

    def _describe(self, f: Any, raw: bytes) -> Described:
        letter = _LETTERS[type(f)]
        fields: dict[str, Any] = {"version": chr(f.version)}
        inner: tuple[Described, ...] = ()
        if letter == "W":
            fields["count"] = f.count
        elif letter == "A":
            fields["seq"] = f.seq
        elif letter == "J":
            fields["seq"] = f.seq
            fields["len"] = len(f.payload)
        elif letter == "D":
            fields["seq"] = f.seq
            fields["pairs"] = len(f.pairs)
        elif not self.open_compressed:
            fields["len"] = len(f.payload)
        else:
            fields["len"] = len(f.payload)
            inner, opened = describe_compressed(
                f.payload,
                self.max_frame_size,
                offset=self._offset + 6,
                strict=self.strict,
                depth=self.depth,
                max_nesting_depth=self.max_nesting_depth,
            )
            fields.update(opened)
        return Described(letter, self._offset, raw, fields, frame=f, inner=inner)


def describe_compressed(
    payload: bytes,
    max_frame_size: int,
    *,
    offset: int = 0,
    strict: bool = False,
    depth: int = 0,
    max_nesting_depth: int = DEFAULT_LIMITS.max_nesting_depth,
) -> tuple[tuple[Described, ...], dict[str, Any]]:
    """The frames inside a ``C`` payload (§2.4) whose first byte is at ``offset``,
    for a ``C`` inside ``depth`` others: ``(inner frames, fields)`` -- the inner
    frames and ``inflated_len``, or no frames and why (see the module docstring)."""
    if depth >= max_nesting_depth:
        err: ProtocolError = LimitExceeded(
            f"C frames nested deeper than the limit max_nesting_depth={max_nesting_depth}",
            protocol=PROTOCOL,
            frame="C",
            field="payload",
            offset=offset,
        )
        return (), {"inner_error": err, "inner_before_error": ()}
    try:
        raw = inflate(payload, max_size=max_frame_size, offset=offset)
    except ProtocolError as exc:
        return (), {"inner_error": exc, "inner_before_error": ()}
    sub = LumberjackDescriber(max_frame_size, strict=strict, max_nesting_depth=max_nesting_depth, depth=depth + 1)
    frames = sub.feed(raw)
    fields: dict[str, Any] = {"inflated_len": len(raw)}
    if frames and frames[-1].type == UNDECODED:
        fields["inner_error"] = frames[-1].error
        fields["inner_before_error"] = tuple(frames[:-1])
    elif sub.held():
        fields["inner_held"] = sub.held()
        fields["inner_error"] = sub.end()[0].error
        fields["inner_before_error"] = tuple(frames)
    else:
        return tuple(frames), fields
    return (), fields


def describer(
    max_frame_size: int,
    direction: str = "c2s",
    session: dict[str, Any] | None = None,
    *,
    strict: bool = False,
    max_nesting_depth: int = DEFAULT_LIMITS.max_nesting_depth,
    open_compressed: bool = True,
) -> LumberjackDescriber:
    """A fresh describer of one direction of one connection (both directions read
    the same frames; the client's and the server's are told apart by their types)."""
    return LumberjackDescriber(
        max_frame_size, strict=strict, max_nesting_depth=max_nesting_depth, open_compressed=open_compressed
    )
