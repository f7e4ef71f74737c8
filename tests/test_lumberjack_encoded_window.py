"""A window encoded once (``EncodedWindow``): the bytes it sends are those of
``encode_window``, a resend sends the unacked events' bytes again renumbered,
and an event that cannot be encoded fails before anything is sent
(specs/lumberjack/README.md §2.2, §2.3, §3.1, §3.2)."""

from __future__ import annotations

import zlib
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from refwire.errors import LocalProtocolError
from refwire.lumberjack import Ack, ClientConnection, SendWindow
from refwire.lumberjack.client import ClientConfig, LumberjackClient
from refwire.lumberjack.frames import (
    V1,
    V2,
    EncodedWindow,
    decode_all,
    encode_event,
    encode_events,
    encode_window,
    window_bytes,
)

EVENTS: list[Any] = [{"a": 1}, b'{"b":2}', "{}", {1: 2**70}, {"k": [1, "x"]}]
V1_EVENTS: list[Any] = ["line", {"k": b"v", "n": 3}, b"raw"]


@pytest.mark.parametrize(("version", "events"), [(V2, EVENTS), (V1, V1_EVENTS)])
@pytest.mark.parametrize("level", [0, 3])
def test_the_bytes_are_encode_windows(version: int, events: list[Any], level: int) -> None:
    seqs = [7, 8, 9, 10, 11][: len(events)]
    ew = encode_events(version, events, seqs)
    expected = encode_window(version, seqs, [encode_event(e, version) for e in events], compression_level=level)
    assert window_bytes(version, len(events), ew.body, level) == expected
    assert len(ew) == len(events) and ew.seqs == seqs
    assert ew.payloads() == [encode_event(e, version) for e in events]
    frames = decode_all(bytes(ew.body))
    assert [f.seq for f in frames] == seqs  # type: ignore[union-attr]
    assert [ew.starts[i] for i in range(len(events))] == [sum(len(f.encode()) for f in frames[:i]) for i in range(len(events))]


def test_default_numbering_is_the_window_numbering() -> None:
    assert encode_events(V2, [{"a": 1}, {"b": 2}]).seqs == [1, 2]


def test_renumber_rewrites_only_the_seq_fields() -> None:
    ew = encode_events(V2, EVENTS)
    before = bytes(ew.body)
    ew.renumber([1, 2, 3, 4, 5])  # unchanged numbers: nothing to do
    assert bytes(ew.body) == before
    ew.renumber([2**32 - 2, 2**32 - 1, 1, 2, 3])
    assert [f.seq for f in decode_all(bytes(ew.body))] == [2**32 - 2, 2**32 - 1, 1, 2, 3]  # type: ignore[union-attr]
    assert ew.payloads() == [encode_event(e, V2) for e in EVENTS]
    assert ew.seqs == [2**32 - 2, 2**32 - 1, 1, 2, 3]
    with pytest.raises(ValueError, match="4 sequence numbers for 5 events"):
        ew.renumber([1, 2, 3, 4])


@given(
    st.lists(st.dictionaries(st.text(max_size=3), st.integers() | st.text(max_size=5), max_size=3), min_size=1, max_size=6),
    st.data(),
)
def test_tail_is_the_last_events_as_a_window(events: list[dict[str, Any]], data: st.DataObject) -> None:
    ew = encode_events(V2, events)
    k = data.draw(st.integers(0, len(events)))
    tail = ew.tail(k)
    assert len(tail) == k and tail.seqs == ew.seqs[len(events) - k :]
    assert tail.payloads() == [encode_event(e, V2) for e in events[len(events) - k :]]
    tail.renumber(list(range(1, k + 1)))
    assert bytes(tail.body) == bytes(encode_events(V2, events[len(events) - k :]).body)
    assert ew.payloads() == [encode_event(e, V2) for e in events]  # the tail is a copy


def test_tail_out_of_range() -> None:
    ew = encode_events(V2, [{"a": 1}])
    with pytest.raises(ValueError, match="a tail of 2 events of a window of 1"):
        ew.tail(2)
    with pytest.raises(ValueError, match="a tail of -1 events"):
        ew.tail(-1)


def test_count_mismatch() -> None:
    with pytest.raises(ValueError, match="1 sequence numbers for 2 events"):
        encode_events(V2, [{}, {}], [1])


def test_the_machine_resends_the_unacked_bytes_renumbered() -> None:
    events = [{"n": i, "pad": "x" * i} for i in range(5)]
    first = ClientConnection(compression_level=0, sequence="running", first_seq=2**32 - 2)
    first.send_window(events, now=0.0)
    sent = first.data_to_send()
    assert sent[6:] == bytes(encode_events(V2, events, [2**32 - 2, 2**32 - 1, 1, 2, 3]).body)
    first.receive_data(Ack(2**32 - 1).encode(), now=1.0)  # two acked
    first.next_event()
    first.send_failed(now=2.0)
    again = first.unacked_encoded()
    assert first.unacked() == events[2:] and len(again) == 3
    second = ClientConnection(compression_level=6)
    second.send(SendWindow(first.unacked(), again), now=3.0)
    fresh = encode_window(V2, [1, 2, 3], [encode_event(e, V2) for e in events[2:]], compression_level=6)
    assert second.data_to_send() == fresh
    assert second.unacked_encoded().payloads() == again.payloads()


def test_unacked_encoded_before_any_window() -> None:
    assert len(ClientConnection().unacked_encoded()) == 0


def test_a_list_of_encoded_events_is_still_taken() -> None:
    c = ClientConnection(compression_level=0)
    c.send(SendWindow([{"x": 1}, {"y": 2}], [b'{"x":1}', b'{"y":2}']), now=0.0)
    assert c.data_to_send() == encode_window(V2, [1, 2], [b'{"x":1}', b'{"y":2}'])
    assert c.unacked_encoded().payloads() == [b'{"x":1}', b'{"y":2}']


@pytest.mark.parametrize(
    ("encoded", "why"),
    [
        (encode_events(V2, [{}]), "holds 1 version '2' events, not 2 version '2' ones"),
        (encode_events(V1, [{}, {}]), "holds 2 version '1' events, not 2 version '2' ones"),
    ],
)
def test_an_encoded_window_that_does_not_fit_is_refused(encoded: EncodedWindow, why: str) -> None:
    c = ClientConnection()
    with pytest.raises(LocalProtocolError, match=why):
        c.send(SendWindow([{}, {}], encoded), now=0.0)
    assert c.data_to_send() == b"" and c.unacked() == []


def test_an_event_that_cannot_be_encoded_sends_nothing_and_keeps_the_numbering() -> None:
    c = ClientConnection(sequence="running", first_seq=5)
    with pytest.raises(TypeError):
        c.send_window([{"a": 1}, {"b": {1, 2}}], now=0.0)  # a set is not JSON
    assert c.data_to_send() == b"" and c.next_seq == 5
    c.send_window([{"a": 1}], now=0.0)
    frames = decode_all(zlib.decompress(c.data_to_send()[12:]))
    assert frames[0].seq == 5 and c.next_seq == 6  # type: ignore[union-attr]


async def test_the_trio_client_refuses_a_bad_event_before_it_connects() -> None:
    connects = 0

    async def connect() -> trio.abc.Stream:
        nonlocal connects
        connects += 1
        raise AssertionError("must not connect")

    client = LumberjackClient(connect, config=ClientConfig(window_size=1, max_attempts=1))
    with trio.fail_after(5), pytest.raises(TypeError):
        await client.send([{"a": 1}, {"b": {1}}])
    assert connects == 0 and client.stats["windows"] == 0


def test_a_mapping_that_is_not_a_dict_is_encoded_as_json() -> None:
    from collections import OrderedDict
    from types import MappingProxyType

    assert encode_event(OrderedDict(a=1), V2) == b'{"a":1}'
    assert encode_event(MappingProxyType({"b": [2]}), V2) == b'{"b":[2]}'
    assert encode_events(V2, [MappingProxyType({"a": 1})]).payloads() == [b'{"a":1}']


@pytest.mark.parametrize("version", [V1, V2])
def test_an_empty_tail_keeps_the_windows_version(version: int) -> None:
    empty = encode_events(version, ["x"]).tail(0)
    assert (empty.version, empty.body, empty.starts, empty.seqs) == (version, bytearray(), [], [])
