"""The Lumberjack conformance cases' shared expectation helpers give the right
verdict material (specs/lumberjack/README.md):

* :class:`ServerObserver` turns what a server sends into the tokens the server
  cases judge: ``A n`` for a v2 ack, ``1A n`` for a v1 one (§2.5, §3.3), an
  ``A 0`` marked a keepalive with its version byte (§3.4), any other frame as
  version and type, ``invalid <field>`` at the first undecodable byte and
  nothing after it (§4), ``truncated`` for a frame cut by the end of the stream;
  the same tokens however the bytes are split (§1).
* :class:`ClientObserver` turns what a client sends into ``W n`` / ``J seq`` /
  ``D seq`` tokens (``1W``/``1D`` on v1), reads the events inside ``C`` frames
  (§2.4, §3.6: nested at most 4 deep, a ``W`` inside a ``C``), names a bad
  ``C`` payload (a bad zlib stream, an incomplete or bad inner frame) and
  collects complete windows (an empty one too, §3.5) with each event's payload.
* The frame builders write the spec's layouts byte for byte (§2, §2.6) and
  :func:`field_cuts` the field boundaries of §2.
* The server cases' helpers wait for the acks (keepalives not counted, §3.4)
  or the close they need, for exactly the time they say (virtual time).
* :class:`LjState` and :func:`serve`: what refwire, serving a client case,
  acks (``A <seq of event k>``, §3.3; ``A 0`` for ``W 0``, §3.5), how it
  counts resent and resent-acked events across reconnections (§3.7), the facts
  it notes for the verdict (§9: a client claiming success with events
  unacked), how long it waits for connections and windows, and
  :func:`bad_then_normal`'s closed/kept-open facts.

Everything runs in process: recorded bytes fed to the observers, in-memory
stream pairs under trio's autojumping :class:`~trio.testing.MockClock`.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from refwire.conform.cases.lumberjack import CATALOGUE
from refwire.conform.cases.lumberjack._common import (
    KEEPALIVES,
    SPEC,
    C,
    D,
    J,
    ServerObserver,
    W,
    _invalid,
    _send_and_wait_acks,
    _send_and_wait_close,
    field_cuts,
    server_book,
    window,
)
from refwire.conform.cases.lumberjack._serving import (
    CLOSED_ON_BAD,
    NO_BAD_FRAME,
    ClientObserver,
    ClientWindow,
    LjState,
    _delivered,
    bad_then_normal,
    normal,
    serve,
)
from refwire.conform.clients import ClientSession
from refwire.conform.conversation import Conversation
from refwire.conform.model import Verdict, expect
from refwire.conform.runner import RunConfig
from refwire.errors import ProtocolError
from refwire.lumberjack.frames import V1, V2, Ack, Compressed, DataFrame, JsonFrame

Tokens = list[tuple[str, dict[str, Any]]]


def names(found: Tokens) -> list[str]:
    return [t for t, _ in found]


def a(seq: int, v: int = V2) -> bytes:
    return Ack(seq, v).encode()


def nest(inner: bytes, depth: int) -> bytes:
    for _ in range(depth):
        inner = C(inner)
    return inner


# --------------------------------------------------------------------------- frame builders (§2, §2.6)


def test_builders_write_the_spec_s_hex_examples() -> None:
    assert W(2) == bytes.fromhex("325700000002")
    assert W(2, V1) == bytes.fromhex("315700000002")
    assert W(0) == bytes.fromhex("325700000000")
    j = J(1, {"a": 1})
    assert j == bytes.fromhex("324a00000001000000077b2261223a317d")
    # the C of that J at zlib level 6 (the default) and at level 0 (a stored block), §2.6
    assert C(j) == bytes.fromhex("324300000017789c33f2626060600462f66aa544252bc35a00106a028d")
    assert C(j, 0) == bytes.fromhex("32430000001c7801011100eeff") + j + bytes.fromhex("106a028d")
    # level 9 and a v1 C: the header's level class and the version byte
    c9 = C(j, 9, V1)
    assert c9[:2] == b"1C" and c9[6:8] == bytes.fromhex("78da") and zlib.decompress(c9[6:]) == j
    assert int.from_bytes(c9[2:6], "big") == len(c9) - 6


def test_j_and_d_carry_the_event_s_seq_and_a_recognisable_payload() -> None:
    assert J(7) == b'2J\x00\x00\x00\x07\x00\x00\x00\x1d{"message":"event 7","seq":7}'
    assert J(5, {}) == JsonFrame(5, b"{}").encode()  # an empty document is a document, not the default
    assert J(3, {"x": 1}, raw=b"[1]") == JsonFrame(3, b"[1]").encode()  # raw wins
    assert D(1, "hi") == bytes.fromhex("31440000000100000002000000046c696e65000000026869000000037365710000000131")
    assert D(12) == DataFrame(12, ((b"line", b"hello"), (b"seq", b"12"))).encode()


def test_window_is_a_w_then_its_events_j_on_v2_and_d_on_v1() -> None:
    assert window([1, 2]) == W(2) + J(1) + J(2)
    assert window([3, 9], V1) == W(2, V1) + D(3) + D(9)
    assert window([]) == W(0)
    assert window([]) != W(0, V1) and window([], V1) == W(0, V1)


def test_field_cuts_are_every_field_boundary_but_the_end() -> None:
    # W: version | type | count ||  J: version | type | seq | len | json
    assert field_cuts([W(2), J(1), J(2)]) == [1, 2, 6, 7, 8, 12, 16, 45, 46, 47, 51, 55]
    assert field_cuts([W(1)]) == [1, 2]
    assert field_cuts([J(1, {"a": 1})]) == [1, 2, 6, 10]
    assert field_cuts([]) == []


# --------------------------------------------------------------------------- ServerObserver (§2.5, §3.3, §3.4, §4)


def test_acks_are_v2_or_v1_tokens_and_a_0_is_marked_a_keepalive() -> None:
    obs = ServerObserver()
    assert obs.feed(a(2) + a(7, V1) + a(0) + a(0, V1)) == [
        ("A 2", {"type": "A", "version": "2", "seq": 2}),
        ("1A 7", {"type": "A", "version": "1", "seq": 7}),
        ("A 0", {"type": "A", "version": "2", "seq": 0, "keepalive": True}),
        ("1A 0", {"type": "A", "version": "1", "seq": 0, "keepalive": True}),
    ]
    assert obs.feed(a(4294967295)) == [("A 4294967295", {"type": "A", "version": "2", "seq": 4294967295})]
    assert obs.eof() == []


def test_other_frames_from_a_server_are_their_version_and_type() -> None:
    obs = ServerObserver()
    assert obs.feed(W(1) + J(1) + C(J(1)) + D(1) + W(3, V1)) == [
        ("2W", {"type": "Window", "version": "2"}),
        ("2J", {"type": "JsonFrame", "version": "2"}),
        ("2C", {"type": "Compressed", "version": "2"}),
        ("1D", {"type": "DataFrame", "version": "1"}),
        ("1W", {"type": "Window", "version": "1"}),
    ]


def test_invalid_at_the_first_undecodable_byte_then_nothing() -> None:
    obs = ServerObserver()
    assert obs.feed(a(1) + b"3A\x00\x00\x00\x01" + a(2)) == [
        ("A 1", {"type": "A", "version": "2", "seq": 1}),
        (
            "invalid version",
            {
                "type": "invalid",
                "field": "version",
                "frame": None,
                "offset": 6,
                "reason": "bad version byte 0x33 (expected 0x31 '1' or 0x32 '2')",
            },
        ),
    ]
    assert obs.feed(a(3)) == []
    assert obs.feed(b"\x32") == []
    assert obs.eof() == []


def test_invalid_names_the_field_and_frame_it_broke_in() -> None:
    obs = ServerObserver()
    assert obs.feed(a(5) + b"2X\x00\x00\x00\x01") == [
        ("A 5", {"type": "A", "version": "2", "seq": 5}),
        ("invalid type", {"type": "invalid", "field": "type", "frame": None, "offset": 7, "reason": "unknown frame type 0x58"}),
    ]


def j_header(size: int) -> bytes:
    """The first 10 bytes of a J frame of ``size`` bytes in all (§2.3: 10 + len)."""
    return b"2J\x00\x00\x00\x01" + (size - 10).to_bytes(4, "big")


@pytest.mark.parametrize(("observer", "limit"), [(ServerObserver, 1 << 20), (ClientObserver, 64 << 20)])
def test_a_frame_over_the_observer_s_size_limit_is_invalid_at_its_len(observer: Callable[[], Any], limit: int) -> None:
    # a server's frames are small (1 MiB), a client's windows may be large (64 MiB); the
    # length is refused as soon as it is read, the payload never needed
    assert observer().feed(j_header(limit)) == []
    found = observer().feed(j_header(limit + 1))
    assert names(found) == ["invalid len"] and found[0][1]["frame"] == "J" and found[0][1]["offset"] == 6
    assert found[0][1]["reason"] == f"J frame of {limit + 1} bytes exceeds the limit max_frame_size={limit}"


def test_invalid_without_a_field_says_frame_and_override_wins() -> None:
    err = ProtocolError("boom", frame="C", offset=9)
    assert _invalid(err) == ("invalid frame", {"type": "invalid", "field": None, "frame": "C", "offset": 9, "reason": "boom"})
    assert _invalid(err, offset=0, reason="r") == (
        "invalid frame",
        {"type": "invalid", "field": None, "frame": "C", "offset": 0, "reason": "r"},
    )


def test_a_frame_cut_by_the_end_is_truncated_once() -> None:
    obs = ServerObserver()
    assert obs.feed(a(1) + a(2)[:3]) == [("A 1", {"type": "A", "version": "2", "seq": 1})]
    assert obs.eof() == [("truncated", {"type": "truncated", "bytes": 3, "offset": 6})]
    assert obs.eof() == []
    clean = ServerObserver()
    clean.feed(a(1))
    assert clean.eof() == []


server_streams = st.lists(
    st.one_of(st.builds(a, st.integers(0, 3), st.sampled_from([V1, V2])), st.just(W(1)), st.just(b"2X\x00\x00\x00\x00")),
    min_size=1,
    max_size=6,
).map(b"".join)


@settings(max_examples=40, deadline=None)
@given(data=server_streams, cuts=st.lists(st.integers(0, 40), max_size=5))
def test_server_tokens_do_not_depend_on_how_the_bytes_are_split(data: bytes, cuts: list[int]) -> None:
    whole = ServerObserver()
    expected = whole.feed(data) + whole.eof()
    obs = ServerObserver()
    got: Tokens = []
    start = 0
    for end in [*sorted(c for c in cuts if c < len(data)), len(data)]:
        got += obs.feed(data[start:end])
        start = max(start, end)
    assert got + obs.eof() == expected


# --------------------------------------------------------------------------- ClientObserver (§2.1-§2.4, §3.1, §3.5, §3.6)


def test_a_v2_window_is_w_then_j_tokens_and_one_done_window() -> None:
    obs = ClientObserver()
    assert obs.feed(W(2) + J(1) + J(2, {"a": 1})) == [
        ("W 2", {"type": "W", "version": "2", "count": 2}),
        ("J 1", {"type": "J", "version": "2", "seq": 1}),
        ("J 2", {"type": "J", "version": "2", "seq": 2}),
    ]
    assert obs.done == [ClientWindow(V2, 2, [(1, b'{"message":"event 1","seq":1}'), (2, b'{"a":1}')])]
    assert obs.current is None and obs.stray == 0


def test_a_v1_window_is_1w_then_1d_tokens_keyed_by_its_pairs() -> None:
    obs = ClientObserver()
    assert obs.feed(W(2, V1) + D(1, "x") + D(2)) == [
        ("1W 2", {"type": "W", "version": "1", "count": 2}),
        ("1D 1", {"type": "D", "version": "1", "seq": 1}),
        ("1D 2", {"type": "D", "version": "1", "seq": 2}),
    ]
    key1 = repr(((b"line", b"x"), (b"seq", b"1"))).encode()
    key2 = repr(((b"line", b"hello"), (b"seq", b"2"))).encode()
    assert obs.done == [ClientWindow(V1, 2, [(1, key1), (2, key2)])]
    assert all(type(k) is bytes for w in obs.done for _, k in w.events)


def test_a_window_fills_across_feeds_and_an_empty_one_is_done_at_once() -> None:
    obs = ClientObserver()
    assert names(obs.feed(W(3) + J(1))) == ["W 3", "J 1"]
    assert obs.done == [] and obs.current == ClientWindow(V2, 3, [(1, J(1)[10:])])
    assert obs.current is not None and not obs.current.full
    assert names(obs.feed(J(2))) == ["J 2"]
    assert obs.done == [] and obs.current is not None and len(obs.current.events) == 2
    assert names(obs.feed(J(3) + W(0) + W(0, V1))) == ["J 3", "W 0", "1W 0"]
    assert [(w.version, w.count, [s for s, _ in w.events]) for w in obs.done] == [(V2, 3, [1, 2, 3]), (V2, 0, []), (V1, 0, [])]
    assert obs.current is None
    assert names(obs.feed(W(1) + J(4))) == ["W 1", "J 4"] and len(obs.done) == 4


def test_client_window_is_full_at_its_count() -> None:
    w = ClientWindow(V2, 2)
    assert w.events == [] and not w.full
    w.events.append((1, b"a"))
    assert not w.full
    w.events.append((2, b"b"))
    assert w.full
    assert ClientWindow(V2, 0).full
    assert ClientWindow(V2, 1).events is not ClientWindow(V2, 1).events


def test_events_outside_a_window_are_stray_but_still_tokens() -> None:
    obs = ClientObserver()
    assert names(obs.feed(J(1) + W(1) + J(2) + J(3) + D(4))) == ["J 1", "W 1", "J 2", "J 3", "1D 4"]
    assert obs.stray == 3 and [[s for s, _ in w.events] for w in obs.done] == [[2]]


def test_acks_from_a_client_are_their_letter() -> None:
    obs = ClientObserver()
    assert obs.feed(a(3) + a(0, V1)) == [("A", {"type": "Ack"}), ("1A", {"type": "Ack"})]
    assert obs.done == [] and obs.stray == 0


def test_events_inside_c_frames_are_read_as_if_sent_plain() -> None:
    obs = ClientObserver()
    assert obs.feed(W(3) + C(J(1) + C(J(2))) + J(3)) == [
        ("W 3", {"type": "W", "version": "2", "count": 3}),
        ("J 1", {"type": "J", "version": "2", "seq": 1}),
        ("J 2", {"type": "J", "version": "2", "seq": 2}),
        ("J 3", {"type": "J", "version": "2", "seq": 3}),
    ]
    assert [s for s, _ in obs.done[0].events] == [1, 2, 3] and obs.done[0].events[1][1] == J(2)[10:]
    # a W inside a C (§3.6), and a v1 window compressed
    obs = ClientObserver()
    assert names(obs.feed(C(W(2) + J(1) + J(2)) + C(W(1, V1) + D(5), v=V1))) == ["W 2", "J 1", "J 2", "1W 1", "1D 5"]
    assert [(w.version, [s for s, _ in w.events]) for w in obs.done] == [(V2, [1, 2]), (V1, [5])]


def test_c_frames_open_four_deep_and_the_fifth_is_invalid_nesting() -> None:
    obs = ClientObserver()
    assert names(obs.feed(W(1) + nest(J(1), 4))) == ["W 1", "J 1"] and len(obs.done) == 1
    obs = ClientObserver()
    assert obs.feed(W(1) + nest(J(1), 5)) == [
        ("W 1", {"type": "W", "version": "2", "count": 1}),
        ("invalid C nesting", {"type": "invalid", "field": "payload"}),
    ]
    assert obs.feed(W(1)) == [] and obs.eof() == [] and obs.done == []


def test_a_c_whose_zlib_stream_is_bad_is_invalid_payload_at_offset_0() -> None:
    obs = ClientObserver()
    assert obs.feed(W(1) + Compressed(b"\x78\x9cjunk").encode()) == [
        ("W 1", {"type": "W", "version": "2", "count": 1}),
        (
            "invalid payload",
            {"type": "invalid", "field": "payload", "frame": "C", "offset": 0, "reason": "zlib stream is truncated (no end of stream)"},
        ),
    ]
    assert obs.feed(J(1)) == [] and obs.eof() == [] and obs.done == []


BAD_C = Compressed(b"\x78\x9cjunk").encode()


def test_nothing_after_a_bad_c_is_decoded_however_the_bytes_come() -> None:
    """The invalid token is the last: frames after the bad ``C`` -- in the same
    write, in the same ``C`` or around a ``C`` nested too deep -- are no tokens
    and complete no window (serve would otherwise ack events after the error)."""
    for data in (
        W(2) + J(1) + BAD_C + J(2),
        W(2) + C(J(1) + BAD_C + J(2)),
        W(2) + C(J(1) + C(BAD_C + J(2)) + J(2)),
    ):
        obs = ClientObserver()
        assert names(obs.feed(data)) == ["W 2", "J 1", "invalid payload"], data
        assert obs.done == [] and obs.eof() == []
    obs = ClientObserver()
    assert names(obs.feed(W(2) + nest(nest(J(1), 5) + J(2), 1))) == ["W 2", "invalid C nesting"]
    assert obs.done == [] and obs.current is not None and obs.current.events == []


def test_a_c_ending_inside_a_frame_names_where_that_frame_starts() -> None:
    obs = ClientObserver()
    inflated = J(1) + J(2)[:5]  # J(1) is 39 bytes
    assert obs.feed(W(2) + Compressed(zlib.compress(inflated)).encode()) == [
        ("W 2", {"type": "W", "version": "2", "count": 2}),
        (
            "invalid (end)",
            {"type": "invalid", "field": "(end)", "frame": None, "offset": 39, "reason": "5 bytes of an incomplete frame at the end"},
        ),
    ]
    assert obs.done == [] and obs.current is not None and obs.current.events == []
    assert obs.feed(J(1)) == [] and obs.eof() == []


def test_a_bad_frame_inside_a_c_is_invalid_at_its_offset_in_the_inflated_bytes() -> None:
    obs = ClientObserver()
    assert obs.feed(W(2) + C(J(1) + b"3W\x00\x00\x00\x01")) == [
        ("W 2", {"type": "W", "version": "2", "count": 2}),
        (
            "invalid version",
            {
                "type": "invalid",
                "field": "version",
                "frame": None,
                "offset": 39,
                "reason": "bad version byte 0x33 (expected 0x31 '1' or 0x32 '2')",
            },
        ),
    ]
    assert obs.feed(W(0)) == [] and obs.eof() == [] and obs.done == []


def test_client_bytes_that_do_not_decode_are_invalid_then_nothing() -> None:
    obs = ClientObserver()
    assert obs.feed(W(1) + J(1) + b"2Q\x00\x00\x00\x00") == [
        ("W 1", {"type": "W", "version": "2", "count": 1}),
        ("J 1", {"type": "J", "version": "2", "seq": 1}),
        ("invalid type", {"type": "invalid", "field": "type", "frame": None, "offset": 46, "reason": "unknown frame type 0x51"}),
    ]
    assert obs.feed(W(1)) == [] and obs.eof() == [] and len(obs.done) == 1


def test_a_client_frame_cut_by_the_end_is_truncated() -> None:
    obs = ClientObserver()
    assert names(obs.feed(W(1) + J(1)[:12])) == ["W 1"]
    assert obs.eof() == [("truncated", {"type": "truncated", "bytes": 12})]
    assert obs.eof() == []
    clean = ClientObserver()
    clean.feed(W(0))
    assert clean.eof() == []


client_frames = st.one_of(
    st.builds(W, st.integers(0, 2)),
    st.builds(J, st.integers(1, 3)),
    st.builds(lambda s: C(J(s)), st.integers(1, 3)),
    st.builds(lambda s: C(W(1) + J(s), 0), st.integers(1, 3)),
    st.just(a(1)),
    st.just(C(J(1) + b"2X\x00\x00\x00\x00")),
)


@settings(max_examples=40, deadline=None)
@given(frames=st.lists(client_frames, min_size=1, max_size=6), cuts=st.lists(st.integers(0, 200), max_size=5), cut_end=st.booleans())
def test_client_tokens_and_windows_do_not_depend_on_how_the_bytes_are_split(
    frames: list[bytes], cuts: list[int], cut_end: bool
) -> None:
    data = b"".join(frames)
    if cut_end:
        data = data[:-1]
    whole = ClientObserver()
    expected = whole.feed(data) + whole.eof()
    obs = ClientObserver()
    got: Tokens = []
    start = 0
    for end in [*sorted(c for c in cuts if c < len(data)), len(data)]:
        got += obs.feed(data[start:end])
        start = max(start, end)
    assert got + obs.eof() == expected
    assert obs.done == whole.done and obs.stray == whole.stray


# --------------------------------------------------------------------------- the server cases' helpers


def test_server_book_ignores_keepalives_in_its_cases() -> None:
    book = server_book()
    assert book.spec == SPEC and book.cases == []

    @book.server("lj.T1.1", "t", "t", "§3.4", "t", [expect(Verdict.PASS, "*", ["A 1"])])
    async def t(c: Conversation) -> None:  # pragma: no cover - never run
        pass

    (case,) = book.cases
    assert case.requirement.startswith(SPEC)
    assert case.judged(["A 0", "A 1", "1A 0", "1A 2"]) == ("A 1", "1A 2")
    assert KEEPALIVES == ("A 0", "1A 0")


@asynccontextmanager
async def client_conversation() -> AsyncIterator[tuple[Conversation, trio.abc.Stream]]:
    """refwire's client side of a server case (a Conversation reading with the
    server observer) and the scripted testee server's end."""
    mine, testee = trio.testing.memory_stream_pair()
    c = Conversation(mine, ServerObserver(), rng=random.Random(3))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(c.reader)
        yield c, testee
        nursery.cancel_scope.cancel()


async def read_exactly(stream: trio.abc.Stream, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = await stream.receive_some()
        if not chunk:
            break
        got += chunk
    return got


async def test_send_and_wait_acks_waits_past_keepalives_for_the_acks(autojump_clock: trio.testing.MockClock) -> None:
    data = window([1, 2])
    async with client_conversation() as (c, testee):
        t0 = trio.current_time()

        async def server() -> None:
            assert await read_exactly(testee, len(data)) == data
            await trio.sleep(1.0)
            await testee.send_all(a(0))
            await trio.sleep(1.0)
            await testee.send_all(a(0, V1))
            await trio.sleep(1.0)
            await testee.send_all(a(2))

        async with trio.open_nursery() as n:
            n.start_soon(server)
            await _send_and_wait_acks(c, data, 1, label="W2 J1 J2")
        # the keepalives at 1 s and 2 s did not end the wait: the ack at 3 s did, then 0.3 s settle
        assert trio.current_time() - t0 == pytest.approx(3.3)
        assert c.tokens == ["A 0", "1A 0", "A 2"]
        assert [k["covers"] for k in c.keepalives] == ["W2 J1 J2", "W2 J1 J2"]
        assert [k["since_batch_s"] for k in c.keepalives] == [pytest.approx(1.0), pytest.approx(2.0)]
        assert any(e["kind"] == "action" and e["text"].startswith("send W2 J1 J2 (") for e in c.log)


async def test_send_and_wait_acks_gives_up_after_wait_seconds(autojump_clock: trio.testing.MockClock) -> None:
    async with client_conversation() as (c, testee):
        t0 = trio.current_time()
        await _send_and_wait_acks(c, W(1) + J(1), 1, label="first", split="whole")
        assert trio.current_time() - t0 == pytest.approx(3.0)
        await _send_and_wait_acks(c, W(1) + J(2), 1, label="second", split="whole", wait=5.0)
        assert trio.current_time() - t0 == pytest.approx(8.0)
        # both writes still owe their ack: a keepalive now covers the oldest one
        await testee.send_all(a(0))
        await c.wait_for(lambda cv: bool(cv.keepalives), 1.0)
        assert c.keepalives[0]["covers"] == "first" and c.keepalives[0]["since_batch_s"] == pytest.approx(8.0)


async def test_send_and_wait_acks_splits_as_told(autojump_clock: trio.testing.MockClock) -> None:
    data = W(1) + J(1)
    async with client_conversation() as (c, testee):
        t0 = trio.current_time()
        await _send_and_wait_acks(c, data, 0, label="x", split=[2, 6], gap=0.25, wait=0.5)
        tx = [e for e in c.log if e["kind"] == "tx"]
        assert [e["len"] for e in tx] == [2, 4, len(data) - 6]
        assert [e["t"] for e in tx] == [pytest.approx(0.0), pytest.approx(0.25), pytest.approx(0.5)]
        # zero answers asked: none awaited (the wait holds at once), then the settle
        assert trio.current_time() - t0 == pytest.approx(0.8)
        assert await read_exactly(testee, len(data)) == data


async def test_send_and_wait_acks_does_not_wait_when_the_write_fails(autojump_clock: trio.testing.MockClock) -> None:
    async with client_conversation() as (c, _testee):
        await c.close("FIN")
        t0 = trio.current_time()
        await _send_and_wait_acks(c, W(1) + J(1), 1, label="x")
        await _send_and_wait_close(c, W(1) + J(1), label="y")
        assert trio.current_time() == t0


async def test_send_and_wait_close_waits_for_the_testee_to_close(autojump_clock: trio.testing.MockClock) -> None:
    async with client_conversation() as (c, testee):
        t0 = trio.current_time()
        await _send_and_wait_close(c, b"2X", label="bad")
        assert trio.current_time() - t0 == pytest.approx(3.0) and c.closed_by_testee is None
        assert any(e["kind"] == "action" and e["text"].startswith("send bad (2 bytes") for e in c.log)

        async def server() -> None:
            await trio.sleep(1.5)
            await testee.aclose()

        async with trio.open_nursery() as n:
            n.start_soon(server)
            t1 = trio.current_time()
            await _send_and_wait_close(c, b"2X", label="bad again", wait=10.0)
            assert trio.current_time() - t1 == pytest.approx(1.5)
        assert c.closed_by_testee == "FIN"


# --------------------------------------------------------------------------- LjState (§3.3, §3.7)


def win(version: int, *events: tuple[int, bytes]) -> ClientWindow:
    return ClientWindow(version, len(events), list(events))


async def test_arrived_counts_windows_resent_and_resent_acked_events() -> None:
    s = await make_session(events=3)
    st_ = LjState(s)
    assert (st_.windows, st_.resent, st_.resent_acked, st_.seen, st_.acked, st_.bad_sent) == (0, 0, 0, set(), set(), False)
    st_.arrived(win(V2, (1, b"a"), (2, b"b")))
    assert (st_.windows, st_.resent, st_.resent_acked, st_.seen) == (1, 0, 0, {b"a", b"b"})
    st_.acked.add(b"a")
    st_.arrived(win(V2, (1, b"a"), (2, b"b"), (3, b"c")))  # renumbered or not: known by payload
    assert (st_.windows, st_.resent, st_.resent_acked, st_.seen) == (2, 2, 1, {b"a", b"b", b"c"})
    st_.arrived(ClientWindow(V2, 0))
    assert (st_.windows, st_.resent, st_.resent_acked) == (3, 2, 1)
    st_.acked.add(b"c")
    st_.arrived(win(V2, (1, b"c"), (2, b"a"), (3, b"d")))
    assert (st_.windows, st_.resent, st_.resent_acked, len(st_.seen)) == (4, 4, 3, 4)


async def test_ack_sends_the_seq_of_event_k_in_the_window_s_version(autojump_clock: trio.testing.MockClock) -> None:
    s = await make_session(events=3)
    st_ = LjState(s)
    mine, peer = trio.testing.memory_stream_pair()
    c = Conversation(mine, ClientObserver(), rng=random.Random(0))
    w = win(V1, (7, b"a"), (8, b"b"), (9, b"c"))
    assert await st_.ack(c, w, 2) is True
    assert await read_exactly(peer, 6) == a(8, V1) and st_.acked == {b"a", b"b"}
    assert await st_.ack(c, win(V2, (4, b"d")), 0) is True  # k = 0: an A 0, nothing acked
    assert await read_exactly(peer, 6) == a(0) and st_.acked == {b"a", b"b"}
    assert await st_.ack(c, w, 3, label="all three") is True
    assert await read_exactly(peer, 6) == a(9, V1) and st_.acked == {b"a", b"b", b"c"}
    sends = [e["text"] for e in c.log if e["kind"] == "action"]
    assert sends == ["send A 8 (6 bytes)", "send A 0 (6 bytes)", "send all three (6 bytes)"]
    assert [e["len"] for e in c.log if e["kind"] == "tx"] == [6, 6, 6]  # whole by default

    t0 = trio.current_time()
    assert await st_.ack(c, win(V2, (5, b"e")), 1, split="bytes", gap=0.1) is True
    assert await read_exactly(peer, 6) == a(5)
    assert trio.current_time() - t0 == pytest.approx(0.5)
    assert [e["len"] for e in c.log if e["kind"] == "tx"][3:] == [1] * 6

    await peer.aclose()
    assert await st_.ack(c, win(V2, (6, b"f")), 1) is False  # the client is gone: not acked
    assert b"f" not in st_.acked


async def test_finish_notes_what_was_acked_and_resent() -> None:
    s = await make_session(events=3)
    st_ = LjState(s)
    st_.finish(s)
    assert s.facts == ["0 of 3 events acked", "no event resent", "no acked event resent"]

    s = await make_session(events=3)
    st_ = LjState(s)
    st_.acked = {b"a", b"b", b"c"}
    st_.resent, st_.resent_acked = 1, 1
    s.exit_status = 0
    st_.finish(s)
    assert s.facts == ["all 3 events acked", "resent 1 event", "resent an acked event"]

    s = await make_session(events=3)
    st_ = LjState(s)
    st_.acked = {b"a", b"b", b"c", b"d"}  # more than asked for
    st_.resent = 2
    st_.finish(s)
    assert s.facts == ["all 3 events acked", "resent 2 events", "no acked event resent"]

    s = await make_session(events=3)
    st_ = LjState(s)
    st_.acked = {b"a"}
    s.exit_status = 0
    st_.finish(s)
    assert s.facts == ["1 of 3 events acked", "no event resent", "no acked event resent", "claims success with 2 of 3 events unacked"]
    s = await make_session(events=3)
    s.exit_status = 1
    LjState(s).finish(s)
    assert not any(f.startswith("claims") for f in s.facts)


def test_delivered_is_the_facts_of_a_complete_delivery() -> None:
    assert _delivered(4) == ("all 4 events acked", "no acked event resent", "exit [0u]*")
    assert _delivered(2, "no event resent", "reconnected") == (
        "all 2 events acked",
        "no acked event resent",
        "exit [0u]*",
        "no event resent",
        "reconnected",
    )


# --------------------------------------------------------------------------- serve (§3.3, §3.5, §3.7, §9)


class _Listener(trio.abc.Listener[trio.abc.Stream]):
    def __init__(self, incoming: trio.MemoryReceiveChannel[trio.abc.Stream]) -> None:
        self._incoming = incoming

    async def accept(self) -> trio.abc.Stream:
        return await self._incoming.receive()

    async def aclose(self) -> None:
        await self._incoming.aclose()


class Net:
    """The listener of a client case; the test's scripted clients connect to it in memory."""

    def __init__(self) -> None:
        self._send, recv = trio.open_memory_channel[trio.abc.Stream](math.inf)
        self.listener = _Listener(recv)

    def connect(self) -> trio.abc.Stream:
        client, server = trio.testing.memory_stream_pair()
        self._send.send_nowait(server)
        return client


async def make_session(
    *, events: int, manual: bool = False, net: Net | None = None, nursery: trio.Nursery | None = None, seed: int = 1
) -> ClientSession:
    case = attrs.evolve(CATALOGUE.case("lj.C1.2"), events=events)
    listener: trio.abc.Listener[Any] = (net or Net()).listener
    return ClientSession(
        case,
        CATALOGUE,
        RunConfig(role="client"),
        listener,
        nursery,  # type: ignore[arg-type]  # only serve() uses it: those tests pass one
        seed=seed,
        deadline=math.inf,
        manual=manual,
    )


async def acks(stream: trio.abc.Stream, n: int) -> list[str]:
    """The next ``n`` tokens refwire (the server) sends, fewer if it closes."""
    obs = ServerObserver()
    got: list[str] = []
    while len(got) < n:
        data = await stream.receive_some()
        if not data:
            break
        got += names(obs.feed(bytes(data)))
    return got


Answer = Callable[[LjState, Conversation, ClientWindow], Awaitable[None]]


async def run_serve(
    client: Callable[[Net], Awaitable[None]], *, events: int, answer: Answer = normal, manual: bool = False, seed: int = 1
) -> tuple[ClientSession, float]:
    """serve() against the scripted ``client``; the session and the virtual
    time serve() took.  ``finish`` (registered by serve) is run after it."""
    net = Net()
    async with trio.open_nursery() as nursery:
        s = await make_session(events=events, manual=manual, net=net, nursery=nursery, seed=seed)
        nursery.start_soon(client, net)
        t0 = trio.current_time()
        await serve(s, answer)
        took = trio.current_time() - t0
        nursery.cancel_scope.cancel()
    for f in s.after_exit:
        f(s)
    return s, took


async def test_serve_acks_each_window_and_stops_5_s_after_the_last_connection(autojump_clock: trio.testing.MockClock) -> None:
    got: list[list[str]] = []
    closed_at: list[float] = []

    async def client(net: Net) -> None:
        t0 = trio.current_time()
        cl = net.connect()
        await cl.send_all(window([1, 2]))
        got.append(await acks(cl, 1))
        await cl.send_all(W(2) + J(3) + C(J(4)))
        got.append(await acks(cl, 1))
        await trio.sleep(2.0)
        await cl.aclose()
        closed_at.append(trio.current_time() - t0)

    s, took = await run_serve(client, events=4)
    assert got == [["A 2"], ["A 4"]]
    assert closed_at == [pytest.approx(2.0)] and took == pytest.approx(2.0 + 5.0)
    (conv,) = s.conversations
    assert conv.tokens == ["W 2", "J 1", "J 2", "W 2", "J 3", "J 4"]
    assert conv.closed_by_testee == "FIN" and conv.closed_by_runner == "FIN"
    assert s.facts == ["all 4 events acked", "no event resent", "no acked event resent"]


async def test_serve_waits_10_s_for_a_first_connection(autojump_clock: trio.testing.MockClock) -> None:
    async def nobody(net: Net) -> None:
        pass

    s, took = await run_serve(nobody, events=2)
    assert took == pytest.approx(10.0) and s.conversations == []
    assert s.facts == ["0 of 2 events acked", "no event resent", "no acked event resent"]

    async def late(net: Net) -> None:
        await trio.sleep(9.5)
        cl = net.connect()
        await cl.send_all(window([1]))
        await acks(cl, 1)
        await cl.aclose()

    s, took = await run_serve(late, events=1)
    assert len(s.conversations) == 1 and took == pytest.approx(9.5 + 5.0)
    assert s.facts[0] == "all 1 events acked"


async def test_serve_answers_an_empty_window_with_a_0_in_its_version(autojump_clock: trio.testing.MockClock) -> None:
    got: list[bytes] = []
    answered: list[ClientWindow] = []

    async def client(net: Net) -> None:
        cl = net.connect()
        await cl.send_all(W(0))
        got.append(await read_exactly(cl, 6))
        await cl.send_all(W(0, V1))
        got.append(await read_exactly(cl, 6))
        await cl.send_all(window([1]))
        got.append(await read_exactly(cl, 6))
        await cl.aclose()

    async def answer(st_: LjState, c: Conversation, w: ClientWindow) -> None:
        answered.append(w)
        await normal(st_, c, w)

    s, _ = await run_serve(client, events=1, answer=answer)
    assert got == [a(0), a(0, V1), a(1)]
    assert [w.count for w in answered] == [1]  # the empty windows are not the case's to answer
    labels = [e["text"] for e in s.conversations[0].log if e["kind"] == "action" and e["text"].startswith("send")]
    assert labels == ["send A 0 (empty window) (6 bytes)", "send A 0 (empty window) (6 bytes)", "send A 1 (6 bytes)"]



async def test_serve_writes_each_empty_window_s_ack_whole(autojump_clock: trio.testing.MockClock) -> None:
    async def client(net: Net) -> None:
        cl = net.connect()
        for _ in range(8):
            await cl.send_all(W(0))
            assert await read_exactly(cl, 6) == a(0)
        await cl.aclose()

    async def answer(st_: LjState, c: Conversation, w: ClientWindow) -> None:
        raise AssertionError("an empty window is not the case's to answer")

    s, _ = await run_serve(client, events=1, answer=answer)
    assert [e["len"] for e in s.conversations[0].log if e["kind"] == "tx"] == [6] * 8  # never split


async def test_serve_answers_pipelined_windows_even_after_the_client_s_fin(autojump_clock: trio.testing.MockClock) -> None:
    got: list[list[str]] = []

    async def client(net: Net) -> None:
        cl = net.connect()
        assert isinstance(cl, trio.StapledStream)
        await cl.send_all(window([1]) + window([2]) + W(0))
        await cl.send_eof()
        got.append(await acks(cl, 4))

    s, _ = await run_serve(client, events=2)
    assert got == [["A 1", "A 2", "A 0"]]
    assert s.facts[0] == "all 2 events acked" and s.conversations[0].closed_by_testee == "FIN"


async def test_serve_closes_a_silent_client_after_60_s(autojump_clock: trio.testing.MockClock) -> None:
    eof_at: list[float] = []

    async def client(net: Net) -> None:
        t0 = trio.current_time()
        cl = net.connect()
        await cl.send_all(W(2) + J(1))
        assert await cl.receive_some() == b""
        eof_at.append(trio.current_time() - t0)

    s, took = await run_serve(client, events=2)
    assert eof_at == [pytest.approx(60.0)] and took == pytest.approx(65.0)
    conv = s.conversations[0]
    assert conv.closed_by_runner == "FIN" and conv.closed_by_testee is None
    assert s.facts[0] == "0 of 2 events acked"


async def test_serve_takes_a_reconnecting_client_and_counts_what_it_resends(autojump_clock: trio.testing.MockClock) -> None:
    got: list[list[str]] = []

    async def client(net: Net) -> None:
        cl = net.connect()
        await cl.send_all(window([1, 2]))
        got.append(await acks(cl, 1))
        await cl.send_all(W(2) + J(3) + J(4))
        await cl.aclose()  # gone before the ack: J3 and J4 stay unacked
        await trio.sleep(4.0)
        cl = net.connect()
        await cl.send_all(W(3) + J(1) + J(3) + J(4))  # renumbered or not, an event is its payload
        got.append(await acks(cl, 1))
        await cl.aclose()

    s, took = await run_serve(client, events=4)
    assert got == [["A 2"], ["A 4"]]
    assert len(s.conversations) == 2 and took == pytest.approx(4.0 + 5.0)
    assert s.tokens()[:8] == ("connect", "W 2", "J 1", "J 2", "W 2", "J 3", "J 4", "FIN")
    assert s.facts == ["all 4 events acked", "resent 3 events", "resent an acked event", "reconnected"]


async def test_serve_counts_a_client_claiming_success_with_events_unacked(autojump_clock: trio.testing.MockClock) -> None:
    async def client(net: Net) -> None:
        cl = net.connect()
        await cl.send_all(window([1, 2]))
        await acks(cl, 1)
        await cl.aclose()

    net = Net()
    async with trio.open_nursery() as nursery:
        s = await make_session(events=3, net=net, nursery=nursery)
        nursery.start_soon(client, net)
        await serve(s, normal)
        nursery.cancel_scope.cancel()
    s.exit_status = 0
    (finish,) = s.after_exit
    finish(s)
    assert s.facts == ["2 of 3 events acked", "no event resent", "no acked event resent", "claims success with 1 of 3 events unacked"]


async def test_manual_mode_ends_once_every_event_was_acked(autojump_clock: trio.testing.MockClock) -> None:
    async def two_clients(net: Net) -> None:
        cl = net.connect()
        net.connect()  # a second connection waits in the backlog
        await cl.send_all(window([1, 2]))
        await acks(cl, 1)
        await cl.aclose()

    s, took = await run_serve(two_clients, events=2, manual=True)
    assert len(s.conversations) == 1 and took == pytest.approx(0.0)
    s, _ = await run_serve(two_clients, events=2, manual=False)
    assert len(s.conversations) == 2
    s, _ = await run_serve(two_clients, events=3, manual=True)  # one event short: the next connection is taken
    assert len(s.conversations) == 2


# --------------------------------------------------------------------------- bad_then_normal (§3.7)


def bad_ack(w: ClientWindow) -> bytes:
    return a(99, w.version)


def bad_answer(bad: Callable[[ClientWindow], bytes | None]) -> Answer:
    async def answer(st_: LjState, c: Conversation, w: ClientWindow) -> None:
        await bad_then_normal(st_, c, w, bad, "A 99 (bad)")

    return answer


async def test_bad_then_normal_a_client_that_closes_and_resends(autojump_clock: trio.testing.MockClock) -> None:
    got: list[list[str]] = []

    async def client(net: Net) -> None:
        cl = net.connect()
        await cl.send_all(window([1, 2]))
        got.append(await acks(cl, 1))
        await trio.sleep(0.9)  # within the second refwire waits
        await cl.aclose()
        cl = net.connect()
        await cl.send_all(window([1, 2]))
        got.append(await acks(cl, 1))
        await cl.send_all(window([3]))
        got.append(await acks(cl, 1))
        await cl.aclose()

    # seed 9: a seeded split would cut the bad frame in three (it goes whole)
    s, _ = await run_serve(client, events=3, answer=bad_answer(bad_ack), seed=9)
    assert got == [["A 99"], ["A 2"], ["A 3"]]  # one bad frame per case, then normal acks
    assert s.facts == [CLOSED_ON_BAD, "all 3 events acked", "resent 2 events", "no acked event resent", "reconnected"]
    first = s.conversations[0]
    assert [e["len"] for e in first.log if e["kind"] == "tx"] == [6]
    assert any(e["kind"] == "action" and e["text"] == "send A 99 (bad) (6 bytes)" for e in first.log)


async def test_bad_then_normal_closes_a_client_that_keeps_the_connection_open(autojump_clock: trio.testing.MockClock) -> None:
    eof_after: list[float] = []

    async def client(net: Net) -> None:
        cl = net.connect()
        await cl.send_all(window([1]))
        assert await acks(cl, 1) == ["A 99"]
        t0 = trio.current_time()
        assert await cl.receive_some() == b""
        eof_after.append(trio.current_time() - t0)

    s, _ = await run_serve(client, events=1, answer=bad_answer(bad_ack))
    assert eof_after == [pytest.approx(1.0)]
    assert s.facts[0] == "kept the connection open after the bad frame" and CLOSED_ON_BAD not in s.facts
    assert s.conversations[0].closed_by_runner == "FIN"
    assert [e["text"] for e in s.conversations[0].log if e["kind"] == "action" and e["text"].startswith("close")] == ["close FIN"]


async def test_bad_then_normal_acks_a_window_the_bad_frame_cannot_be_made_for(autojump_clock: trio.testing.MockClock) -> None:
    got: list[list[str]] = []

    async def client(net: Net) -> None:
        cl = net.connect()
        await cl.send_all(window([1], V1))
        got.append(await acks(cl, 1))
        await cl.send_all(window([2], V1))
        got.append(await acks(cl, 1))
        await cl.aclose()

    def only_for_the_second(w: ClientWindow) -> bytes | None:
        return None if w.events[0][0] == 1 else bad_ack(w)

    s, _ = await run_serve(client, events=2, answer=bad_answer(only_for_the_second))
    assert got == [["1A 1"], ["1A 99"]]
    assert s.facts[:2] == [CLOSED_ON_BAD, "1 of 2 events acked"]
    assert NO_BAD_FRAME not in s.facts  # a window took the bad frame in the end


async def test_bad_then_normal_notes_when_no_window_could_carry_the_bad_frame(autojump_clock: trio.testing.MockClock) -> None:
    async def client(net: Net) -> None:
        cl = net.connect()
        for seq in (1, 2):
            await cl.send_all(window([seq]))
            assert await acks(cl, 1) == [f"A {seq}"]
        await cl.aclose()

    s, _ = await run_serve(client, events=2, answer=bad_answer(lambda w: None))
    assert s.facts == ["all 2 events acked", "no event resent", "no acked event resent", NO_BAD_FRAME]


async def test_bad_then_normal_a_client_gone_before_the_bad_frame_closed_on_it(autojump_clock: trio.testing.MockClock) -> None:
    async def client(net: Net) -> None:
        cl = net.connect()
        await cl.send_all(window([1]))
        await cl.aclose()

    s, took = await run_serve(client, events=1, answer=bad_answer(bad_ack))
    assert s.facts[:2] == [CLOSED_ON_BAD, "0 of 1 events acked"] and took == pytest.approx(5.0)
