"""Hypothesis strategies and helpers for the Pravega tests (specs/pravega/README.md
§2, §4): a value strategy per wire field kind, a command strategy per class of
``refwire.pravega.frames.COMMANDS`` built from its ``LAYOUT``, and byte helpers."""

from __future__ import annotations

import itertools
import struct
import uuid
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from refwire.pravega.frames import COMMANDS, NO_VERSION, Command, TableEntry, TableKey
from refwire.wire import encode_mutf8

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
#: the values of §2.2 that mean something, mixed into the long fields
special_i64 = st.sampled_from([-(2**63), -1, 0, 1, 2**63 - 1, 2**32])
longs = st.one_of(special_i64, i64)


def java_normalize(s: str) -> str:
    """What a Java String holding the same UTF-16 units reads back as in Python: a
    high+low surrogate pair becomes one supplementary character (README §2.3)."""
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


#: any code point incl. NUL, lone surrogates and non-BMP characters
_chars = st.one_of(
    st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()),
    st.sampled_from(["\x00", "\ud83d", "\ude00", "\U0001f600", "\uffff", "\u07ff", "\u0800", "é", "/"]),
)
texts = st.text(alphabet=_chars, max_size=12).map(java_normalize)
ascii_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789/.#", min_size=1, max_size=24)

table_keys = st.one_of(
    st.builds(TableKey, st.binary(min_size=1, max_size=8), longs),
    st.just(TableKey(b"", NO_VERSION)),  # Java writes and reads no version for an empty key (§4.5)
)
table_entries = st.builds(TableEntry, table_keys, st.binary(max_size=8))

KIND_STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "i32": i32,
    "i64": longs,
    "i64_any": longs,
    "u8": st.integers(0, 255),
    "bool": st.booleans(),
    "uuid": st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1)),
    "utf": texts,
    "blob32": st.binary(max_size=24),
    "opt_blob32": st.binary(max_size=12),
    "rest": st.binary(max_size=24),
    "event": st.binary(max_size=24),
    "entries": st.lists(table_entries, max_size=3).map(tuple),
    "keys": st.lists(table_keys, max_size=3).map(tuple),
    "longs": st.lists(longs, max_size=4).map(tuple),
}


def command_strategy(cls: type[Command]) -> st.SearchStrategy[Command]:
    """Every field of ``cls`` drawn from its wire kind."""
    if cls.NAME == "Padding":
        return st.builds(cls, length=st.integers(0, 64))
    fields = {name: KIND_STRATEGIES[kind] for name, kind, _opt in cls.LAYOUT}
    if cls.NAME in ERROR_CODES:  # Java maps other codes on decode (README §4.4)
        fields["error_code"] = st.sampled_from(ERROR_CODES[cls.NAME])
    return st.builds(cls, **fields)


#: the error codes each command defines; decoding maps any other value (README §4.4)
ERROR_CODES: dict[str, list[int]] = {"AuthTokenCheckFailed": [-1, 0, 1], "ErrorMessage": [-1, 0]}


#: codes in a stable order (Hypothesis shrinks towards the first)
CODES = sorted(COMMANDS)
TOP_LEVEL_CODES = [c for c in CODES if COMMANDS[c].DIRECTION != "inner" or c == -1]
INNER_CODES = [c for c in CODES if COMMANDS[c].DIRECTION == "inner"]
REQUEST_CODES = [c for c in CODES if COMMANDS[c].DIRECTION in ("request", "both")]

any_command = st.sampled_from(CODES).flatmap(lambda c: command_strategy(COMMANDS[c]))
top_level_command = st.sampled_from(TOP_LEVEL_CODES).flatmap(lambda c: command_strategy(COMMANDS[c]))


# --------------------------------------------------------------------------- bytes


def field_size(kind: str, value: Any) -> int:
    """Bytes a field takes on the wire (README §2, §4.5), computed independently of the codec."""
    fixed = {"i32": 4, "i64": 8, "i64_any": 8, "u8": 1, "bool": 1, "uuid": 16}
    if kind in fixed:
        return fixed[kind]
    if kind == "utf":
        return 2 + len(encode_mutf8(value))
    if kind in ("blob32", "opt_blob32"):
        return 4 + len(value)
    if kind == "rest":
        return value if isinstance(value, int) else len(value)
    if kind == "event":
        return 8 + len(value)
    if kind == "longs":
        return 4 + 8 * len(value)

    def key_size(k: TableKey) -> int:
        return 8 + len(k.data) + (8 if k.data else 0)

    if kind == "keys":
        return 4 + sum(key_size(k) for k in value)
    if kind == "entries":
        return 4 + sum(key_size(e.key) + 8 + len(e.value) for e in value)
    raise AssertionError(kind)


def field_boundaries(cmd: Command) -> list[int]:
    """Payload offsets after each field: ``[end of field 0, end of field 1, ...]``."""
    out, pos = [], 0
    for name, kind, _opt in cmd.LAYOUT:
        pos += field_size(kind, getattr(cmd, name))
        out.append(pos)
    return out


def reframe(frame: bytes, payload_len: int) -> bytes:
    """``frame`` cut to ``payload_len`` payload bytes, its header saying so."""
    code, _ = struct.unpack_from(">ii", frame)
    return struct.pack(">ii", code, payload_len) + frame[8 : 8 + payload_len]


def split(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    """``data`` cut at the (sorted, de-duplicated, clamped) positions ``cuts``."""
    points = sorted({min(max(c, 0), len(data)) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


def optional_defaults(cls: type[Command]) -> dict[str, Any]:
    """Field -> decode default, for the optional trailing fields of ``cls``."""
    return {name: opt for name, _kind, opt in cls.LAYOUT if not _is_missing(opt)}


def _is_missing(opt: Any) -> bool:
    # codec.f() marks "not optional" with a private sentinel object
    return type(opt) is object


def first_optional_index(cls: type[Command]) -> int | None:
    for i, (_name, _kind, opt) in enumerate(cls.LAYOUT):
        if not _is_missing(opt):
            return i
    return None


__all__ = [
    "CODES",
    "INNER_CODES",
    "KIND_STRATEGIES",
    "REQUEST_CODES",
    "TOP_LEVEL_CODES",
    "any_command",
    "ascii_names",
    "command_strategy",
    "field_boundaries",
    "field_size",
    "first_optional_index",
    "java_normalize",
    "optional_defaults",
    "reframe",
    "split",
    "texts",
    "top_level_command",
]
