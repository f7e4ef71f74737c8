"""What frames are these bytes: the one lenient reading of a protocol's traffic.

Every tool that looks at traffic it does not drive -- ``refwire conform``
watching a testee, ``refwire chaos`` cutting a connection into frames it may
fault, the pipeline decoding a capture, ``refwire decode`` -- reads it through
its protocol's *describer* (named by the descriptor's ``describer``): bytes in,
:class:`Described` frames out, each with its exact bytes, its stream offset and
its fields by the spec's names.  A describer is lenient where a machine is
strict: it enforces no state (a proxy must pass on what a conformant machine
would refuse) and only the limits it is given; at the first byte that is no
frame it says why (a :class:`~refwire.errors.ProtocolError` naming field and
offset) and hands the rest of the direction back as bytes (type ``"?"``).

Where the format allows, a protocol also gives its frames as data, a
:class:`Layout`: per frame type the fixed-position fields (name, offset, size,
byte order), so that other tools (a rule that rewrites a field, a Wireshark
dissector) read the same table the describer and the codec follow.

This module names no protocol and does no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

import attrs

from .errors import ProtocolError

__all__ = ["Described", "Describer", "Field", "FrameLayout", "Layout", "LengthFramed", "UNDECODED"]

#: The type of a run of bytes that is no frame (after the first error, or unframed traffic).
UNDECODED = "?"

ByteOrder = Literal["big", "little"]


@attrs.frozen
class Field:
    """One fixed-position field of a frame: ``size`` bytes at ``offset`` from the frame's first byte."""

    name: str
    offset: int
    size: int
    #: an unsigned integer (``"uint"``), a signed one (``"int"``), a character (``"char"``), or raw ``"bytes"``
    kind: Literal["uint", "int", "char", "bytes"] = "uint"

    def read(self, frame: bytes, order: ByteOrder) -> Any:
        """This field's value in ``frame`` (which must hold it)."""
        raw = frame[self.offset : self.offset + self.size]
        if self.kind == "bytes":
            return bytes(raw)
        if self.kind == "char":
            return raw.decode("latin-1")
        return int.from_bytes(raw, order, signed=self.kind == "int")


@attrs.frozen
class FrameLayout:
    """A frame type's fixed-position fields, in wire order."""

    type: str
    fields: tuple[Field, ...] = ()
    #: the smallest frame of this type (its fixed part), in bytes
    min_size: int = 0

    def spans(self) -> dict[str, tuple[int, int]]:
        """``name -> (offset, size)`` of every field."""
        return {f.name: (f.offset, f.size) for f in self.fields}


@attrs.frozen
class Layout:
    """A protocol's frames as data (what of them a table can say)."""

    #: how its integer fields are written
    byte_order: ByteOrder
    #: frame type -> its fixed fields
    frames: Mapping[str, FrameLayout]
    #: what the table cannot say, in words (varints, nested frames, ...), for a reader of it
    notes: str = ""

    def spans(self, frame_type: str) -> dict[str, tuple[int, int]]:
        """The field spans of ``frame_type`` (empty for a type the table does not know)."""
        layout = self.frames.get(frame_type)
        return layout.spans() if layout is not None else {}

    def read(self, frame_type: str, frame: bytes) -> dict[str, Any]:
        """Every fixed field of ``frame`` (a whole frame of ``frame_type``) by name."""
        layout = self.frames.get(frame_type)
        if layout is None:
            return {}
        return {f.name: f.read(frame, self.byte_order) for f in layout.fields if f.offset + f.size <= len(frame)}


@attrs.define(eq=True, slots=True)
class Described:
    """One frame of a direction of traffic, or the bytes from the first error on.

    A record that no one changes once described (not frozen only because a
    frozen class costs every frame an ``object.__setattr__`` per field)."""

    #: the frame type by the spec's name (``"W"``, ``"DataAppended"``, ``"Produce"``,
    #: ``"request"``), or :data:`UNDECODED`
    type: str
    #: where its first byte lies in the direction's stream (of the envelope's payload, for an inner frame)
    offset: int
    #: its exact bytes
    data: bytes
    #: its fields by the spec's names
    fields: dict[str, Any] = attrs.field(factory=dict)
    #: the codec's own object for it (None for undecoded bytes)
    frame: Any = None
    #: where its fields lie (offset in :attr:`data`, size), when the layout's per-type spans
    #: do not say it (None: see :meth:`Layout.spans`; ``{}``: no field is at a fixed place,
    #: e.g. a frame read out of a compressed envelope)
    spans: dict[str, tuple[int, int]] | None = None
    #: the frames inside it (a compressed envelope's), when it has and they decode
    inner: tuple[Described, ...] = ()
    #: why these bytes are no frame (undecoded bytes); or, on a frame whose header sized it
    #: but whose body does not decode (:attr:`frame` is then None), why the body does not --
    #: the describer goes on with the next frame
    error: ProtocolError | None = None


class Describer(Protocol):
    """One direction of one connection, described frame by frame.

    A describer whose protocol makes one direction wait on the other (Seastar RPC:
    the server's negotiation reply decides how the client's frames are read) holds
    the waiting direction's bytes and may say when it stops waiting with an
    ``unblocked`` attribute, which the fault proxy reads."""

    def feed(self, data: bytes) -> list[Described]:
        """The frames the new bytes complete (an incomplete frame is held); after the
        first error, every chunk comes back as undecoded bytes."""
        ...

    def held(self) -> int:
        """Bytes held for an incomplete frame."""
        ...

    def end(self) -> list[Described]:
        """The direction ended: what is held, as undecoded bytes with a truncation error (or nothing)."""
        ...


class LengthFramed:
    """A describer for frames a fixed-size header sizes (the shared cut).

    A subclass says whether a first byte can start a frame (:meth:`starts`), reads
    a header (:meth:`header`: the frame's type and whole size, or a
    :class:`ProtocolError`) and describes a whole frame (:meth:`describe`).  At
    the first byte that fits no frame, the rest of the direction is undecoded bytes.
    """

    #: the header's size in bytes
    HEADER: int
    #: the protocol's name in errors
    PROTOCOL: str = ""

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self._pending = bytearray()
        self._offset = 0
        self._broken = False

    def held(self) -> int:
        return len(self._pending)

    def starts(self, first: int, offset: int) -> ProtocolError | None:
        """Why no frame starts with byte ``first`` at stream ``offset`` (None: one may)."""
        return None

    def header(self, head: bytes, offset: int) -> tuple[str, int] | ProtocolError:
        """(type, whole frame size) from the header bytes at stream ``offset``, or why they are no header."""
        raise NotImplementedError

    def describe(self, frame_type: str, data: bytes, offset: int) -> Described:
        """A whole frame of ``frame_type`` at stream ``offset``."""
        raise NotImplementedError

    def _undecoded(self, data: bytes, error: ProtocolError | None) -> Described:
        out = Described(UNDECODED, self._offset, data, {"error": str(error)} if error is not None else {}, error=error)
        self._offset += len(data)
        return out

    def feed(self, data: bytes) -> list[Described]:
        if self._broken:
            return [self._undecoded(bytes(data), None)] if data else []
        self._pending += data
        out: list[Described] = []
        buf = self._pending
        while buf:
            why = self.starts(buf[0], self._offset)  # known from the first byte: nothing is held for it
            head: tuple[str, int] | ProtocolError | None = None
            if why is None and len(buf) >= self.HEADER:
                head = self.header(bytes(buf[: self.HEADER]), self._offset)
                if isinstance(head, ProtocolError):
                    why = head
                elif head[1] > self.max_frame_size:
                    why = ProtocolError(
                        f"{head[0]} of {head[1]} bytes is over max_frame_size={self.max_frame_size}",
                        protocol=self.PROTOCOL,
                        frame=head[0],
                        field="length",
                        offset=self._offset,
                    )
            if why is not None:
                self._broken = True
                out.append(self._undecoded(bytes(buf), why))
                buf.clear()
                break
            if head is None or isinstance(head, ProtocolError):
                break  # not a whole header yet
            frame_type, size = head
            if len(buf) < size:
                break
            raw = bytes(buf[:size])
            del buf[:size]
            out.append(self.describe(frame_type, raw, self._offset))
            self._offset += size
        return out

    def end(self) -> list[Described]:
        if not self._pending:
            return []
        held = bytes(self._pending)
        self._pending.clear()
        self._broken = True
        err = ProtocolError(
            f"the stream ended inside a frame ({len(held)} bytes held)",
            protocol=self.PROTOCOL,
            field="(end)",
            offset=self._offset + len(held),
        )
        return [self._undecoded(held, err)]
