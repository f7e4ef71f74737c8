"""Seastar RPC's negotiation frame (specs/seastar-rpc/README.md §2, "the spec" below).

``"SSTARRPC" len:u32 {feature:u32 flen:u32 data[flen]}*``, little-endian: the first
frame each side sends.  :class:`Negotiation` is the frame as it is on the wire
(records in wire order, duplicates kept); :class:`Features` is what it says, one
attribute per feature of the spec's table.  The receiving side's checks (magic,
``len`` within ``Limits.max_string_size``) are :class:`~refwire.seastar_rpc.frames.FrameDecoder`'s;
:func:`decode_negotiation_records` parses the records behind them.

Also here, below every other frame module: the helpers every Seastar codec
module raises and range-checks with.  :mod:`refwire.seastar_rpc.frames`
re-exports this module's public names.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from typing import Final

import attrs

from ..errors import LocalProtocolError
from .compression import PROTOCOL

__all__ = [
    "MAGIC",
    "MAX_U32",
    "MAX_U64",
    "Feature",
    "Features",
    "Negotiation",
    "decode_negotiation_records",
]

MAGIC: Final = b"SSTARRPC"
MAX_U32: Final = 0xFFFFFFFF
MAX_U64: Final = 0xFFFFFFFFFFFFFFFF

_U64: Final = struct.Struct("<Q")
#: the header: magic and ``len``
_HDR12: Final = struct.Struct("<8sI")
#: a record's header: ``feature`` and ``flen``
_REC: Final = struct.Struct("<II")


class Feature(enum.IntEnum):
    """Negotiation feature numbers (spec §2)."""

    COMPRESS = 0
    TIMEOUT = 1
    CONNECTION_ID = 2
    STREAM_PARENT = 3
    ISOLATION = 4
    HANDLER_DURATION = 5


def _err(reason: str, frame: str, field: str, offset: int | None) -> LocalProtocolError:
    return LocalProtocolError(reason, protocol=PROTOCOL, frame=frame, field=field, offset=offset)


def _check_range(name: str, value: int, lo: int, hi: int, frame: str) -> None:
    if not (isinstance(value, int) and lo <= value <= hi):
        raise _err(f"{name} {value!r} is out of range {lo}..{hi}", frame, name, None)


# --------------------------------------------------------------------------- negotiation


@attrs.frozen
class Negotiation:
    """The raw negotiation frame: feature records in wire order (duplicates kept).

    Seastar builds the list from a ``std::map``, so it always sends the records
    sorted by feature number (:meth:`from_features`); receivers keep the first
    record of a repeated number and ignore the rest (spec §2).
    """

    records: tuple[tuple[int, bytes], ...] = ()

    @classmethod
    def from_features(cls, features: Mapping[int, bytes]) -> Negotiation:
        return cls(tuple(sorted((int(k), bytes(v)) for k, v in features.items())))

    def features(self) -> dict[int, bytes]:
        """Feature number -> data, the first record of each number winning."""
        out: dict[int, bytes] = {}
        for number, data in self.records:
            out.setdefault(number, data)
        return out

    def encode(self) -> bytes:
        parts = []
        for number, data in self.records:
            _check_range("feature_number", number, 0, MAX_U32, "negotiation")
            parts.append(_REC.pack(number, len(data)))
            parts.append(data)
        body = b"".join(parts)
        return _HDR12.pack(MAGIC, len(body)) + body


def decode_negotiation_records(body: bytes, *, base: int = 12) -> Negotiation:
    """Parse the records of a negotiation frame whose 12-byte header is already read.

    ``base`` is the stream offset of ``body[0]``.  Errors are Seastar's (spec §2):
    fewer than 8 bytes for a record header, or a ``flen`` past the end.
    """
    records = []
    pos = 0
    n = len(body)
    while pos < n:
        if n - pos < 8:
            raise _err(
                f"bad feature data format in negotiation frame: {n - pos} bytes left for an 8-byte record header",
                "negotiation",
                "feature_number",
                base + pos,
            )
        number, flen = _REC.unpack_from(body, pos)
        if flen > n - pos - 8:
            raise _err(
                f"buffer underflow in feature data in negotiation frame: feature {number} claims {flen} bytes, "
                f"{n - pos - 8} left",
                "negotiation",
                "flen",
                base + pos + 4,
            )
        records.append((number, bytes(body[pos + 8 : pos + 8 + flen])))
        pos += 8 + flen
    return Negotiation(tuple(records))


@attrs.frozen(kw_only=True)
class Features:
    """What one side's negotiation frame says, per feature (spec §2).

    Client -> server: ``compress`` is the offered list (``"LZ4,LZ4_FRAGMENTED"``),
    ``stream_parent`` marks a stream connection.  Server -> client: ``compress`` is
    the one chosen name, ``connection_id`` the id of this connection.  ``timeout``,
    ``handler_duration`` and ``isolation`` are present/echoed in both directions.
    ``unknown`` keeps feature numbers no-one knows (ignored, never echoed).
    """

    compress: str | None = None
    timeout: bool = False
    connection_id: int | None = None
    stream_parent: int | None = None
    isolation: bytes | None = None
    handler_duration: bool = False
    unknown: tuple[tuple[int, bytes], ...] = ()

    def compress_names(self) -> tuple[str, ...]:
        """The comma-separated compressor names (client order), empty if none."""
        return tuple(self.compress.split(",")) if self.compress is not None else ()

    def to_negotiation(self) -> Negotiation:
        f: dict[int, bytes] = {}
        if self.compress is not None:
            f[Feature.COMPRESS] = self.compress.encode("latin-1")
        if self.timeout:
            f[Feature.TIMEOUT] = b""
        if self.connection_id is not None:
            _check_range("connection_id", self.connection_id, 0, MAX_U64, "negotiation")
            f[Feature.CONNECTION_ID] = _U64.pack(self.connection_id)
        if self.stream_parent is not None:
            _check_range("stream_parent", self.stream_parent, 0, MAX_U64, "negotiation")
            f[Feature.STREAM_PARENT] = _U64.pack(self.stream_parent)
        if self.isolation is not None:
            f[Feature.ISOLATION] = bytes(self.isolation)
        if self.handler_duration:
            f[Feature.HANDLER_DURATION] = b""
        for number, data in self.unknown:
            f.setdefault(number, data)
        return Negotiation.from_features(f)

    def encode(self) -> bytes:
        return self.to_negotiation().encode()

    @classmethod
    def from_negotiation(cls, neg: Negotiation, *, base: int = 12) -> Features:
        """Interpret ``neg`` (first record wins).  A CONNECTION_ID or STREAM_PARENT
        whose data is not exactly 8 bytes is refused (Seastar reads 8 bytes
        unchecked; spec §6)."""
        seen: dict[int, bytes] = {}
        offsets: dict[int, int] = {}
        pos = base
        for number, data in neg.records:
            if number not in seen:
                seen[number] = data
                offsets[number] = pos
            pos += 8 + len(data)
        compress = seen.get(Feature.COMPRESS)
        return cls(
            compress=None if compress is None else compress.decode("latin-1"),
            timeout=Feature.TIMEOUT in seen,
            connection_id=_feature_u64(seen, offsets, Feature.CONNECTION_ID),
            stream_parent=_feature_u64(seen, offsets, Feature.STREAM_PARENT),
            isolation=seen.get(Feature.ISOLATION),
            handler_duration=Feature.HANDLER_DURATION in seen,
            unknown=tuple((k, v) for k, v in seen.items() if k not in Feature._value2member_map_),
        )


def _feature_u64(seen: dict[int, bytes], offsets: dict[int, int], feature: Feature) -> int | None:
    """The u64 of a CONNECTION_ID or STREAM_PARENT record, if present (a module
    function, not a closure: mypyc cannot compile a closure in an attrs class's method)."""
    data = seen.get(feature)
    if data is None:
        return None
    if len(data) != 8:
        raise _err(
            f"{feature.name} must carry 8 bytes, got {len(data)}", "negotiation", feature.name.lower(), offsets[feature] + 4
        )
    return int(_U64.unpack(data)[0])
