"""refwire.wire edges found by mutation testing: a varint read through a Reader
names the reader's protocol and frame (decode_uvarint alone knows neither)."""

from __future__ import annotations

import pytest

from refwire.errors import LocalProtocolError
from refwire.wire import Reader


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x80", "truncated varint after 1 bytes"),
        (b"\xff" * 6, "varint longer than 5 bytes"),
        (b"\xff\xff\xff\xff\x7f", "overflows u32"),
    ],
)
def test_reader_varint_errors_name_protocol_and_frame(data: bytes, reason: str) -> None:
    r = Reader(b"\x00" + data, base=100, protocol="proto", frame="Frame")
    assert r.u8("first") == 0
    with pytest.raises(LocalProtocolError) as info:
        r.uvarint("count")
    e = info.value
    assert (e.protocol, e.frame, e.field, e.offset) == ("proto", "Frame", "count", 101)
    assert reason in e.reason


def test_reader_varint_at_the_u32_line() -> None:
    assert Reader(b"\xff\xff\xff\xff\x0f").uvarint("v") == 2**32 - 1
    with pytest.raises(LocalProtocolError, match="overflows u32"):
        Reader(b"\x80\x80\x80\x80\x10").uvarint("v")  # 2**32
