"""What the describer tests share: Described records compared by value, and a
stream's records in the form any split of it must give (refwire.describe)."""

from __future__ import annotations

from typing import Any

from refwire.describe import UNDECODED, Described
from refwire.errors import ProtocolError


def comparable(x: Any) -> Any:
    """``x`` (a Described, its fields, its inner frames) by value: a ProtocolError
    compares by class, words, field, offset and frame, not by identity."""
    if isinstance(x, Described):
        return (x.type, x.offset, x.data, comparable(x.fields), x.frame, x.spans, comparable(x.inner), comparable(x.error))
    if isinstance(x, ProtocolError):
        return (type(x).__name__, str(x), x.field, x.offset, x.frame)
    if isinstance(x, dict):
        return {k: comparable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [comparable(v) for v in x]
    return x


def split_invariant(ds: list[Described]) -> list[Any]:
    """The frames, then the undecoded bytes as one record with the first one's
    error: after the first error each chunk comes back as it arrived, which is
    all a split may change.  Asserts the undecoded records are the last ones and
    only the first carries an error."""
    framed = [comparable(d) for d in ds if d.type != UNDECODED]
    rest = [d for d in ds if d.type == UNDECODED]
    if not rest:
        return framed
    assert ds[-len(rest) :] == rest and all(d.error is None for d in rest[1:]), "undecoded bytes before a frame"
    first = rest[0]
    return [*framed, comparable(Described(UNDECODED, first.offset, b"".join(d.data for d in rest), first.fields, error=first.error))]
