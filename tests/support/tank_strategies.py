"""Hypothesis strategies of TANK messages and chunks (specs/tank/README.md §4, §5)."""

from __future__ import annotations

import attrs
from hypothesis import strategies as st

from refwire.tank import Message
from refwire.tank.bundles import U64_MAX, encode_bundle, encode_entry

#: One to forty messages, without sequence numbers.
messages_st = st.lists(
    st.builds(
        Message, st.binary(max_size=40), st.sampled_from([0, 7, 1795295236637, 2**64 - 1]), st.none() | st.binary(max_size=255)
    ),
    min_size=1,
    max_size=40,
)

#: Message contents: short, or long enough for a two-byte length.
contents_st = st.one_of(st.binary(max_size=24), st.binary(min_size=126, max_size=200))
#: A message with any timestamp (up to the largest) and maybe a key.
message_st = st.builds(
    Message,
    contents_st,
    st.sampled_from([0, 0, 7, 1_700_000_000_000, U64_MAX]),
    st.none() | st.none() | st.binary(max_size=4),
)


@st.composite
def chunks(draw: st.DrawFn) -> tuple[bytes, int | None]:
    """A chunk of 1-5 entries, plain or Snappy, dense or sparse, then maybe cut and corrupted."""
    base_seq = draw(st.none() | st.integers(1, 50))
    running = base_seq if base_seq is not None else draw(st.integers(1, 50))
    entries: list[bytes] = []
    for i in range(draw(st.integers(1, 5))):
        msgs = draw(st.lists(message_st, min_size=1, max_size=12))
        sparse = draw(st.booleans()) or (i == 0 and base_seq is None)
        compress = draw(st.booleans())
        if sparse:
            seq = running + draw(st.integers(0, 3))
            numbered = []
            for m in msgs:
                numbered.append(attrs.evolve(m, seq=seq))
                seq += 1 + draw(st.integers(0, 2))
            msgs = numbered
            running = seq
        else:
            running += len(msgs)
        entries.append(encode_entry(encode_bundle(msgs, compress=compress, sparse=sparse)))
    chunk = bytearray(b"".join(entries))
    if draw(st.booleans()):
        del chunk[draw(st.integers(0, len(chunk))) :]
    for _ in range(draw(st.integers(0, 3))):
        if chunk:
            chunk[draw(st.integers(0, len(chunk) - 1))] ^= draw(st.integers(1, 255))
    return bytes(chunk), base_seq
