"""The shared describer base (refwire.describe): layouts read fields where the
table says, and LengthFramed cuts a stream the same at any split, stops at the
first byte that is no frame with an error naming field and offset, and reports
what is held at the end."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from refwire.describe import UNDECODED, Described, Field, FrameLayout, Layout, LengthFramed
from refwire.errors import ProtocolError

# A toy format: [kind: 1 byte 'a' or 'b'][length of the body: u16 big-endian][body]
TOY = Layout(
    byte_order="big",
    frames={
        "a": FrameLayout("a", (Field("kind", 0, 1, "char"), Field("length", 1, 2)), min_size=3),
        "b": FrameLayout("b", (Field("kind", 0, 1, "char"), Field("length", 1, 2), Field("first", 3, 1, "int")), min_size=4),
    },
)


class Toy(LengthFramed):
    HEADER = 3
    PROTOCOL = "toy"

    def starts(self, first: int, offset: int) -> ProtocolError | None:
        if first in b"ab":
            return None
        return ProtocolError(f"no frame starts with {first:#x}", protocol="toy", field="kind", offset=offset)

    def header(self, head: bytes, offset: int) -> tuple[str, int] | ProtocolError:
        size = 3 + int.from_bytes(head[1:3], "big")
        if head[:1] == b"b" and size < 4:
            return ProtocolError("a b frame has a body", protocol="toy", frame="b", field="length", offset=offset + 1)
        return chr(head[0]), size

    def describe(self, frame_type: str, data: bytes, offset: int) -> Described:
        return Described(frame_type, offset, data, TOY.read(frame_type, data), frame=data)


def frame(kind: bytes, body: bytes) -> bytes:
    return kind + len(body).to_bytes(2, "big") + body


STREAM = frame(b"a", b"") + frame(b"b", b"\xff\x01") + frame(b"a", b"hello")


def describe_all(chunks: list[bytes], max_frame_size: int = 64) -> list[Described]:
    d = Toy(max_frame_size)
    out: list[Described] = []
    for c in chunks:
        out += d.feed(c)
    return out + d.end()


def test_fields_read_by_kind_and_order() -> None:
    data = bytes([0x41, 0xFF, 0xFE, 0x01, 0x02])
    assert Field("c", 0, 1, "char").read(data, "big") == "A"
    assert Field("u", 1, 2).read(data, "big") == 0xFFFE
    assert Field("u", 1, 2).read(data, "little") == 0xFEFF
    assert Field("i", 1, 2, "int").read(data, "big") == -2
    assert Field("b", 3, 2, "bytes").read(data, "big") == b"\x01\x02"


def test_layout_spans_and_reads() -> None:
    assert TOY.spans("b") == {"kind": (0, 1), "length": (1, 2), "first": (3, 1)}
    assert TOY.spans("nope") == {}
    assert TOY.read("nope", b"abc") == {}
    b = frame(b"b", b"\xff\x01")
    assert TOY.read("b", b) == {"kind": "b", "length": 2, "first": -1}
    assert TOY.read("b", b[:3]) == {"kind": "b", "length": 2}  # a field past the bytes is left out


def test_frames_with_their_offsets_and_bytes() -> None:
    out = describe_all([STREAM])
    assert [(d.type, d.offset, d.data) for d in out] == [
        ("a", 0, frame(b"a", b"")),
        ("b", 3, frame(b"b", b"\xff\x01")),
        ("a", 8, frame(b"a", b"hello")),
    ]
    assert out[1].fields == {"kind": "b", "length": 2, "first": -1}


@given(st.lists(st.integers(0, len(STREAM)), max_size=8))
def test_any_split_describes_the_same(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    chunks = [STREAM[a:b] for a, b in zip([0, *points], [*points, len(STREAM)], strict=True)]
    assert describe_all(chunks) == describe_all([STREAM])


def test_the_first_byte_that_is_no_frame_ends_framing() -> None:
    d = Toy(64)
    out = d.feed(frame(b"a", b"x") + b"Zrest")
    assert [o.type for o in out] == ["a", UNDECODED]
    bad = out[1]
    assert bad.offset == 4 and bad.data == b"Zrest"
    assert bad.error is not None and (bad.error.field, bad.error.offset) == ("kind", 4)
    assert bad.fields == {"error": str(bad.error)}
    # everything after is bytes, at its stream offset, with no error of its own
    later = d.feed(frame(b"a", b""))
    assert [(o.type, o.offset, o.error) for o in later] == [(UNDECODED, 9, None)]
    assert d.feed(b"") == []
    assert d.end() == []


def test_a_header_that_is_no_header() -> None:
    out = describe_all([frame(b"a", b"") + frame(b"b", b"")])
    assert [o.type for o in out] == ["a", UNDECODED]
    assert out[1].error is not None and (out[1].error.frame, out[1].error.field, out[1].error.offset) == ("b", "length", 4)


def test_max_frame_size_at_the_line_and_one_past() -> None:
    at = frame(b"a", b"x" * 7)  # 10 bytes
    assert [o.type for o in describe_all([at], max_frame_size=10)] == ["a"]
    out = describe_all([at], max_frame_size=9)
    assert [o.type for o in out] == [UNDECODED]
    err = out[0].error
    assert err is not None and (err.frame, err.field, err.offset) == ("a", "length", 0)
    assert "a of 10 bytes is over max_frame_size=9" in err.reason


def test_held_bytes_and_the_end() -> None:
    d = Toy(64)
    assert d.feed(frame(b"a", b"") + b"a\x00") == [Described("a", 0, frame(b"a", b""), {"kind": "a", "length": 0}, frame=frame(b"a", b""))]
    assert d.held() == 2  # a header not yet whole: nothing decided
    assert d.feed(b"\x05ab") == []
    assert d.held() == 5
    (end,) = d.end()
    assert (end.type, end.offset, end.data) == (UNDECODED, 3, b"a\x00\x05ab")
    assert end.error is not None and (end.error.field, end.error.offset) == ("(end)", 8)
    assert d.held() == 0 and d.end() == []
