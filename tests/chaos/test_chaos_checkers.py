"""``refwire chaos --check`` verdicts, in process: recorded pairs of frame streams
(each frame built with the protocol's own codec; the stream as its sender sent
it and as the other peer received it, after the faults) fed through the
protocol adapter's observers and checker exactly as the proxy feeds them
(:meth:`~refwire.chaos.proxy.ChaosProxy._one_frame` calls ``sent`` per frame of
the sent stream, ``_check_delivered`` calls ``received`` per frame of the
delivered stream, each numbered per connection and direction; ``closed`` when a
connection ends, ``finish`` when the run does).  Each planted violation has a
clean twin: the violation is asserted exactly (check, connection, direction,
frame index, message), the twin to yield nothing."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from refwire.chaos.adapter import adapter_for
from refwire.chaos.check import Checker, Violation
from refwire.chaos.observe import Observed

MAX = 1 << 20

Verdict = tuple[str, int, str, int, str]


class Run:
    """One proxy run as the checker sees it: per connection and direction an
    observer of the bytes as sent and one of the bytes as delivered (the two
    directions of a connection share a session per side, as the proxy's do)."""

    def __init__(self, protocol: str) -> None:
        self.adapter = adapter_for(protocol)
        self.checker: Checker = self.adapter.checker()
        self._observers: dict[tuple[int, str, str], Any] = {}
        self._sessions: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        self._index: dict[tuple[int, str, str], int] = {}

    def _feed(self, conn: int, direction: str, side: str, data: bytes) -> list[int]:
        key = (conn, direction, side)
        if key not in self._observers:
            sessions = self._sessions.setdefault(conn, ({}, {}))
            self._observers[key] = self.adapter.observer(MAX, direction, sessions[side == "received"])
        call = self.checker.sent if side == "sent" else self.checker.received
        at = []
        for frame in self._observers[key].feed(data):
            i = self._index.get(key, 0)
            call(conn, direction, i, frame)
            self._index[key] = i + 1
            at.append(i)
        return at

    def send(self, conn: int, direction: str, data: bytes) -> list[int]:
        """``data`` as its sender sent it (the frame indexes it got)."""
        return self._feed(conn, direction, "sent", data)

    def deliver(self, conn: int, direction: str, data: bytes) -> list[int]:
        """``data`` as the other peer received it."""
        return self._feed(conn, direction, "received", data)

    def relay(self, conn: int, direction: str, data: bytes, delivered: bytes | None = None) -> None:
        """Sent as ``data``, delivered as ``delivered`` (unchanged when None)."""
        self.send(conn, direction, data)
        self.deliver(conn, direction, data if delivered is None else delivered)

    def close(self, conn: int) -> None:
        self.checker.closed(conn)

    def verdicts(self) -> list[Verdict]:
        return [(v.check, v.conn, v.direction, v.frame, v.detail) for v in self.checker.finish()]


def test_a_violation_is_recorded_as_a_json_event() -> None:
    v = Violation("reply-twice", 3, "s2c", 7, "a second reply for msg_id 1")
    assert v.to_json() == {
        "event": "violation",
        "check": "reply-twice",
        "conn": 3,
        "direction": "s2c",
        "frame": 7,
        "detail": "a second reply for msg_id 1",
    }
    c = Checker()  # a protocol without invariants: nothing, whatever it sees
    f = Observed("?", b"x")
    c.sent(1, "c2s", 0, f)
    c.received(1, "c2s", 0, f)
    c.closed(1)
    assert c.finish() == [] and c.violations == []
    assert Run("pravega-draft-2017").checker.finish() == []


# --------------------------------------------------------------------------- Lumberjack

from refwire.lumberjack.codec import (  # noqa: E402
    V1,
    V2,
    Compressed,
    DataFrame,
    Window,
    encode_ack,
    encode_data,
    encode_window,
)

TOP = 0xFFFFFFFF  # the highest u32 sequence number; a running counter wraps after it (§3.2)


def ev(seq: int, tag: int | None = None) -> bytes:
    """The JSON payload of event ``tag`` (its identity across resends; default: its seq)."""
    return b'{"e":%d}' % (seq if tag is None else tag)


def window(seqs: list[int], tags: list[int] | None = None, *, compress: int = 0) -> bytes:
    return encode_window(V2, seqs, [ev(s, t) for s, t in zip(seqs, tags or seqs, strict=True)], compression_level=compress)


def acks(*seqs: int) -> bytes:
    return b"".join(encode_ack(s) for s in seqs)


def lj(windows: list[bytes], server_acks: list[int], delivered_acks: list[int] | None = None) -> Run:
    """Connection 1: the client's windows relayed unchanged, then the server's acks
    (as sent; delivered as ``delivered_acks`` when given)."""
    run = Run("lumberjack")
    run.relay(1, "c2s", b"".join(windows))
    sent = acks(*server_acks)
    run.relay(1, "s2c", sent, None if delivered_acks is None else acks(*delivered_acks))
    return run


NEVER_RECEIVED = "the server acked seq {}, never received in the window it acks (the oldest not fully acked)"
INJECTED_ACK = "the client was told seq {} is acked, which the server neither received nor acked (an injected fault)"


@pytest.mark.parametrize("compress", [0, 6], ids=["plain", "in-a-C"])
def test_lj_an_ack_for_an_event_never_received(compress: int) -> None:
    assert lj([window([1, 2], compress=compress)], [2]).verdicts() == []
    assert lj([window([1, 2], compress=compress)], [1, 2]).verdicts() == []
    # the server's bug is reported once, at the ack it sent -- not again as an injected fault when it arrives
    assert lj([window([1, 2], compress=compress)], [3]).verdicts() == [
        ("acked-but-not-received", 1, "s2c", 0, NEVER_RECEIVED.format(3))
    ]


def test_lj_an_ack_is_judged_on_what_the_server_received_not_on_what_was_sent() -> None:
    run = Run("lumberjack")
    sent = window([1, 2])
    run.send(1, "c2s", sent)
    run.deliver(1, "c2s", sent[: -len(encode_data(V2, 2, ev(2)))])  # the proxy dropped J 2
    run.relay(1, "s2c", acks(2))
    assert run.verdicts() == [("acked-but-not-received", 1, "s2c", 0, NEVER_RECEIVED.format(2))]


def test_lj_an_ack_with_no_window_outstanding() -> None:
    run = Run("lumberjack")
    run.relay(1, "s2c", acks(0, 1))  # a keepalive is no ack; A 1 is
    assert run.verdicts() == [("acked-but-not-received", 1, "s2c", 1, NEVER_RECEIVED.format(1))]


def test_lj_keepalives_inside_a_window_are_no_acks() -> None:
    assert lj([window([1, 2, 3])], [0, 1, 0, 0, 3, 0]).verdicts() == []
    # a keepalive leaves the last ack as it was: an ack below it is still caught
    assert lj([window([1, 2, 3])], [2, 0, 1]).verdicts() == [
        ("acks-not-cumulative", 1, "s2c", 2, "ack 1 after ack 2 in the same window")
    ]


def test_lj_acks_going_back_in_one_window() -> None:
    assert lj([window([1, 2, 3])], [1, 2, 2, 3]).verdicts() == []
    assert lj([window([1, 2, 3])], [2, 1, 3]).verdicts() == [
        ("acks-not-cumulative", 1, "s2c", 1, "ack 1 after ack 2 in the same window")
    ]
    # numbered out of order (W3 J5 J3 J4): positions in the window, not magnitudes
    assert lj([window([5, 3, 4])], [5, 4]).verdicts() == []
    assert lj([window([5, 3, 4])], [3, 5]).verdicts() == [
        ("acks-not-cumulative", 1, "s2c", 1, "ack 5 after ack 3 in the same window")
    ]


def test_lj_a_window_is_done_only_at_the_ack_of_its_last_event() -> None:
    # per-window numbering (1..n in each): each window's acks go to that window
    assert lj([window([1, 2]), window([1, 2])], [1, 2, 1, 2]).verdicts() == []
    # running numbering: the second window's acks are not the first's
    assert lj([window([1, 2]), window([3, 4])], [2, 4]).verdicts() == []
    assert lj([window([1, 2]), window([3, 4])], [1, 2, 3, 4]).verdicts() == []
    assert lj([window([1, 2]), window([3, 4])], [3]).verdicts() == [
        ("acked-but-not-received", 1, "s2c", 0, NEVER_RECEIVED.format(3))
    ]


def test_lj_an_ack_of_the_last_event_received_before_the_window_is_whole_does_not_end_it() -> None:
    w = window([1, 2, 3])
    third = encode_data(V2, 3, ev(3))
    for late_ack, verdicts in (
        (3, []),
        (1, [("acks-not-cumulative", 1, "s2c", 1, "ack 1 after ack 2 in the same window")]),
    ):
        run = Run("lumberjack")
        run.relay(1, "c2s", w[: -len(third)])
        run.relay(1, "s2c", acks(2))  # a partial ack: J 3 is still to come
        run.relay(1, "c2s", third)
        run.relay(1, "s2c", acks(late_ack))
        assert run.verdicts() == verdicts


def test_lj_a_running_counter_wrapping_at_2_32() -> None:
    # the window ends exactly at 2^32 - 1; the next one starts again at 1 (refwire, ruby-lumberjack)
    assert lj([window([TOP - 1, TOP]), window([1, 2])], [TOP, 2]).verdicts() == []
    assert lj([window([TOP - 1, TOP]), window([1, 2])], [TOP - 1, TOP, 1, 2]).verdicts() == []
    # one window across the wrap: 2^32 - 1 comes before 1 in it
    assert lj([window([TOP - 1, TOP, 1]), window([2])], [TOP, 1, 2]).verdicts() == []
    assert lj([window([TOP - 1, TOP, 1]), window([2])], [1, 2]).verdicts() == []
    assert lj([window([TOP - 1, TOP, 1]), window([2])], [1, TOP]).verdicts() == [  # A 1 ended the first window
        ("acked-but-not-received", 1, "s2c", 1, NEVER_RECEIVED.format(TOP))
    ]
    assert lj([window([TOP - 1, TOP, 1, 2])], [1, TOP, 2]).verdicts() == [
        ("acks-not-cumulative", 1, "s2c", 1, f"ack {TOP} after ack 1 in the same window")
    ]
    assert lj([window([TOP - 1, TOP, 1])], [TOP, TOP - 1]).verdicts() == [
        ("acks-not-cumulative", 1, "s2c", 1, f"ack {TOP - 1} after ack {TOP} in the same window")
    ]
    # the server acks the seq after the last one (off by one): it wraps to 0, which is a keepalive,
    # so the window stays unacked; one past 2^32 - 1 never received is caught
    assert lj([window([TOP - 1, TOP])], [TOP - 1]).verdicts() == []
    assert lj([window([TOP - 2, TOP - 1])], [TOP]).verdicts() == [("acked-but-not-received", 1, "s2c", 0, NEVER_RECEIVED.format(TOP))]


def test_lj_an_ack_a_fault_rewrote_or_dropped() -> None:
    assert lj([window([1, 2])], [2], [999]).verdicts() == [("acked-but-not-received", 1, "s2c", 0, INJECTED_ACK.format(999))]
    assert lj([window([1, 2])], [2], [0, 2]).verdicts() == []  # an injected keepalive is harmless
    # acks the proxy dropped are skipped: the next one still matches what the server sent
    assert lj([window([1]), window([2])], [1, 2], [2]).verdicts() == []
    assert lj([window([1]), window([2])], [1, 2], [2, 1]).verdicts() == [
        ("acked-but-not-received", 1, "s2c", 1, INJECTED_ACK.format(1))
    ]
    # an ack duplicated by the proxy: the server sent it once
    assert lj([window([1, 2])], [2], [2, 2]).verdicts() == [("acked-but-not-received", 1, "s2c", 1, INJECTED_ACK.format(2))]


def _unacked(n: int, conn: int = 1) -> str:
    return f"{n} event(s) the client sent on connection {conn} and never saw acked were not sent again"


def test_lj_unacked_events_must_be_sent_again_on_a_later_connection() -> None:
    def run(server_acks: list[int], delivered: list[int] | None, resend: list[int] | None) -> list[Verdict]:
        r = lj([window([1, 2, 3])], server_acks, delivered)
        r.close(1)
        if resend is not None:  # renumbered on the new connection: the payload is the identity
            r.relay(2, "c2s", window(list(range(1, len(resend) + 1)), resend))
            r.relay(2, "s2c", acks(len(resend)))
            r.close(2)
        return r.verdicts()

    assert run([3], None, None) == []
    assert run([1], None, [2, 3]) == []
    assert run([3], [], [1, 2, 3]) == []  # the proxy dropped the ack: the client resends
    assert run([1], None, [2]) == [("unacked-not-resent", 1, "c2s", -1, _unacked(1))]
    assert run([1], None, None) == [("unacked-not-resent", 1, "c2s", -1, _unacked(2))]
    assert run([3], [], None) == [("unacked-not-resent", 1, "c2s", -1, _unacked(3))]
    assert run([2], None, [7]) == [("unacked-not-resent", 1, "c2s", -1, _unacked(1))]  # another event is no resend
    assert run([], None, [1, 2, 3]) == []


def test_lj_a_resend_counts_only_on_a_later_connection() -> None:
    r = Run("lumberjack")
    r.relay(1, "c2s", window([1], [5]))
    r.relay(1, "s2c", acks(1))
    r.close(1)
    r.relay(2, "c2s", window([1], [5]))  # sent again, never acked: event 5 was on connection 1, before
    r.close(2)
    r.relay(3, "c2s", window([1], [6]))
    r.relay(3, "s2c", acks(1))
    r.close(3)
    assert r.verdicts() == [("unacked-not-resent", 2, "c2s", -1, _unacked(1, 2))]
    assert len(r.checker.finish()) == 1  # judged once
    r.close(99)  # a connection it never saw: nothing
    assert len(r.checker.finish()) == 1


def test_lj_pipelined_windows_are_acked_oldest_first() -> None:
    def run(delivered: list[int]) -> list[Verdict]:
        r = lj([window([1, 2]), window([1, 2])], [2, 2], delivered)
        r.close(1)
        return r.verdicts()

    assert run([2, 2]) == []
    assert run([1, 2, 2]) == [("acked-but-not-received", 1, "s2c", 0, INJECTED_ACK.format(1))]
    assert run([2]) == [("unacked-not-resent", 1, "c2s", -1, _unacked(2))]  # one window left unacked
    r = lj([window([1, 2, 3])], [1, 3], [1, 3])
    r.close(1)
    assert r.verdicts() == []


def test_lj_v1_data_frames_are_told_apart_by_their_pairs() -> None:
    def d(seq: int, value: bytes) -> bytes:
        return DataFrame(seq, ((b"line", value),)).encode()

    def run(resent: bytes) -> list[Verdict]:
        r = Run("lumberjack")
        r.relay(1, "c2s", Window(2, V1).encode() + d(1, b"a") + d(2, b"b"))
        r.relay(1, "s2c", encode_ack(1, V1))
        r.close(1)
        r.relay(2, "c2s", Window(1, V1).encode() + d(1, resent))
        r.relay(2, "s2c", encode_ack(1, V1))
        return r.verdicts()

    assert run(b"b") == []
    assert run(b"a") == [("unacked-not-resent", 1, "c2s", -1, _unacked(1))]
    in_c = Window(2, V1).encode() + Compressed.wrap(d(1, b"a") + d(2, b"b"), version=V1).encode()
    assert lj([in_c], [2]).verdicts() == []
    assert lj([in_c], [3]).verdicts() == [("acked-but-not-received", 1, "s2c", 0, NEVER_RECEIVED.format(3))]
    assert lj([Window(1, V1).encode() + d(1, b"a")], [2]).verdicts() == [
        ("acked-but-not-received", 1, "s2c", 0, NEVER_RECEIVED.format(2))
    ]


def test_lj_events_in_a_c_count_and_a_c_that_does_not_open_has_none() -> None:
    body = encode_data(V2, 1, ev(1)) + encode_data(V2, 2, ev(2))
    whole = Window(2).encode() + Compressed.wrap(body).encode()
    assert lj([whole], [2]).verdicts() == []
    inner_window = Compressed.wrap(Window(2).encode() + body).encode()
    assert lj([Window(2).encode() + inner_window], [2]).verdicts() == []
    bad = Window(2).encode() + Compressed(b"not zlib").encode()
    assert lj([bad], [1]).verdicts() == [("acked-but-not-received", 1, "s2c", 0, NEVER_RECEIVED.format(1))]


def test_lj_data_before_any_window_and_frames_no_event_comes_from() -> None:
    # no W: the events still form a window (Logstash parks them, §3.1)
    assert lj([encode_data(V2, 1, ev(1)) + encode_data(V2, 2, ev(2))], [1, 2]).verdicts() == []
    j = encode_data(V2, 1, ev(1))
    for data in (j, j[:-1], j + j, encode_ack(1), Window(1).encode()):
        # a J as the observer cut it from a corrupted stream: only a whole J (or D) alone is an event
        for side in ("sent", "received"):
            r = Run("lumberjack")
            r.relay(1, "c2s", Window(1).encode())
            frame = Observed("J", data)
            (r.checker.sent if side == "sent" else r.checker.received)(1, "c2s", 1, frame)
            r.relay(1, "s2c", acks(1))
            r.close(1)
            got = r.verdicts()
            if data == j and side == "received":
                assert got == []  # an event the proxy made up, acked: no invariant of the peers is broken
            elif data == j:
                assert got == [("acked-but-not-received", 1, "s2c", 0, NEVER_RECEIVED.format(1))]  # the server never got it
            else:
                assert got == [("acked-but-not-received", 1, "s2c", 0, NEVER_RECEIVED.format(1))]
    other = Observed("A", encode_ack(1), {"seq": 1})
    r = Run("lumberjack")
    r.relay(1, "c2s", window([1]))
    r.checker.sent(1, "c2s", 2, other)  # an A the client sent: not an ack
    r.checker.received(1, "c2s", 2, other)
    r.relay(1, "s2c", acks(1))
    assert r.verdicts() == []


def test_lj_observer_inner_frames_and_rewrap() -> None:
    from refwire.chaos.adapters.lumberjack import inner_frames, rewrap

    a = adapter_for("lumberjack")
    o = a.observer(MAX, "c2s", {})
    body = encode_data(V2, 7, ev(7))
    c = Compressed.wrap(body).encode()
    stream = Window(1).encode() + c + encode_ack(7)
    got = o.feed(stream[:3]) + o.feed(stream[3:])
    assert [(f.type, f.data) for f in got] == [("W", stream[:6]), ("C", c), ("A", encode_ack(7))]
    assert got[0].fields == {"version": "2", "count": 1}
    assert got[1].fields == {"version": "2", "length": len(c) - 6}
    assert got[2].fields == {"version": "2", "seq": 7}
    assert o.held() == 0 and o.feed(encode_ack(1)[:4]) == [] and o.held() == 4
    [inner] = inner_frames(got[1], MAX) or []
    assert (inner.type, inner.data, inner.fields["seq"], inner.fields["length"]) == ("J", body, 7, len(ev(7)))
    assert inner_frames(got[0], MAX) is None
    assert inner_frames(Observed("C", Compressed(b"junk").encode()), MAX) is None
    again = rewrap(got[1], [body, body])
    assert again[:2] == b"2C" and int.from_bytes(again[2:6], "big") == len(again) - 6
    [twice] = a.observer(MAX, "c2s", {}).feed(again)
    assert [f.data for f in inner_frames(twice, MAX) or []] == [body, body]
    [junk] = a.observer(MAX, "c2s", {}).feed(b"zz")
    assert junk.type == "?" and junk.data == b"zz" and "bad version byte 0x7a" in junk.fields["error"]
    assert a.fields["A"] == {"version": (0, 1), "type": (1, 1), "seq": (2, 4)}
    assert a.fields["J"]["length"] == (6, 4) and a.prefix == "lj" and a.byte_order == "big"


# --------------------------------------------------------------------------- Pravega

from refwire.pravega.frames import (  # noqa: E402
    AppendBlockEnd,
    ConditionalAppend,
    ConditionalBlockEnd,
    DataAppended,
    KeepAlive,
)

W1 = uuid.UUID(int=1)
W2 = uuid.UUID(int=2)


def block_end(n: int, writer: uuid.UUID = W1) -> bytes:
    return AppendBlockEnd(
        writer_id=writer, size_of_whole_events=0, data=b"", num_events=1, last_event_number=n, request_id=n
    ).encode()


def appended(n: int, writer: uuid.UUID = W1) -> bytes:
    return DataAppended(writer_id=writer, event_number=n, previous_event_number=n - 1, request_id=n).encode()


def test_pravega_event_numbers_going_down_on_one_connection() -> None:
    def run(*numbers: int, conn: int = 1) -> list[Verdict]:
        r = Run("pravega")
        r.relay(conn, "c2s", b"".join(block_end(n) for n in numbers))
        return r.verdicts()

    assert run(1, 2, 2, 3) == []
    assert run(3, 2) == [("event-number-backwards", 1, "c2s", 1, f"writer {W1}: event number 2 after 3")]
    assert run(5, 3, 4, 6, conn=4) == [
        ("event-number-backwards", 4, "c2s", 1, f"writer {W1}: event number 3 after 5"),
        ("event-number-backwards", 4, "c2s", 2, f"writer {W1}: event number 4 after 5"),
    ]
    r = Run("pravega")
    cond = ConditionalAppend(writer_id=W1, event_number=4, expected_offset=0, event=b"x").encode()
    cond_block = ConditionalBlockEnd(writer_id=W1, event_number=2, expected_offset=0, data=b"x", request_id=1).encode()
    r.relay(1, "c2s", block_end(3) + cond + cond_block)
    assert r.verdicts() == [("event-number-backwards", 1, "c2s", 2, f"writer {W1}: event number 2 after 4")]


def test_pravega_event_numbers_are_judged_per_writer_and_connection_as_sent() -> None:
    r = Run("pravega")
    r.relay(1, "c2s", block_end(5) + block_end(1, W2))
    r.relay(2, "c2s", block_end(1))  # a new connection starts again
    r.relay(1, "s2c", appended(5))  # replies carry event numbers too: they are no appends
    r.relay(1, "s2c", appended(1, W2))
    assert r.verdicts() == []
    r = Run("pravega")
    r.send(1, "c2s", block_end(5) + block_end(4))  # as the client sent them, whatever the proxy delivered
    r.deliver(1, "c2s", block_end(5))
    assert r.verdicts() == [("event-number-backwards", 1, "c2s", 1, f"writer {W1}: event number 4 after 5")]
    r = Run("pravega")
    r.send(1, "c2s", block_end(5))
    r.deliver(1, "c2s", block_end(5) + block_end(4))  # the proxy's doing: the store closes, no client bug
    r.relay(1, "s2c", block_end(1))  # a frame the other way is no append of the client's
    assert r.verdicts() == []


def _above(n: int, top: int | None, who: str, writer: uuid.UUID = W1) -> str:
    return f"writer {writer}: event {n} acked, the store received up to {top} ({who})"


def test_pravega_an_ack_above_what_the_store_received() -> None:
    def run(sent: list[int], delivered: list[int], acked: list[int], delivered_acks: list[int] | None = None) -> list[Verdict]:
        r = Run("pravega")
        r.send(1, "c2s", b"".join(block_end(n) for n in sent))
        r.deliver(1, "c2s", b"".join(block_end(n) for n in delivered))
        r.send(1, "s2c", b"".join(appended(n) for n in acked))
        r.deliver(1, "s2c", b"".join(appended(n) for n in (acked if delivered_acks is None else delivered_acks)))
        return r.verdicts()

    assert run([1, 2], [1, 2], [1, 2]) == []
    assert run([1, 2], [1, 2], [2]) == []
    assert run([1, 2], [1, 2], [3]) == [("ack-above-sent", 1, "s2c", 0, _above(3, 2, "the store sent it so"))]
    # the proxy dropped the second append: the store acking it is its bug, judged on what it received
    assert run([1, 2], [1], [1, 2]) == [("ack-above-sent", 1, "s2c", 1, _above(2, 1, "the store sent it so"))]
    assert run([1, 2], [1, 2], [1, 2], [1, 9]) == [
        ("ack-above-sent", 1, "s2c", 1, _above(9, 2, "an injected fault changed it"))
    ]
    assert run([], [], [1]) == [("ack-above-sent", 1, "s2c", 0, _above(1, None, "the store sent it so"))]
    # the highest received counts, whatever came after it
    assert run([5, 3], [5, 3], [5]) == [("event-number-backwards", 1, "c2s", 1, f"writer {W1}: event number 3 after 5")]


def test_pravega_acks_are_judged_per_writer_across_connections() -> None:
    r = Run("pravega")
    r.relay(1, "c2s", block_end(4))
    r.relay(2, "s2c", appended(4))  # another connection of the same writer
    assert r.verdicts() == []
    r.relay(2, "s2c", appended(1, W2))  # the other writer sent nothing
    assert r.verdicts() == [("ack-above-sent", 2, "s2c", 1, _above(1, None, "the store sent it so", W2))]
    r = Run("pravega")
    r.relay(1, "c2s", block_end(4, W2))
    r.relay(1, "c2s", appended(9))  # a DataAppended the client sent: not an ack
    r.relay(1, "s2c", KeepAlive().encode())
    assert r.verdicts() == []


def test_pravega_an_ack_the_store_never_sent_for_that_writer_or_number() -> None:
    from refwire.pravega.frames import ConditionalCheckFailed

    r = Run("pravega")
    r.relay(1, "c2s", block_end(4))
    r.send(1, "s2c", appended(4))
    r.deliver(1, "s2c", appended(4, W2))  # the proxy rewrote the writer id
    failed = ConditionalCheckFailed(writer_id=W1, event_number=5, request_id=1).encode()
    r.send(1, "s2c", failed)  # a refusal carrying event number 5 is no ack of it
    r.deliver(1, "s2c", appended(5))
    assert r.verdicts() == [
        ("ack-above-sent", 1, "s2c", 0, _above(4, None, "an injected fault changed it", W2)),
        ("ack-above-sent", 1, "s2c", 1, _above(5, 4, "an injected fault changed it")),
    ]


def test_pravega_rule_fields_come_from_the_layout() -> None:
    from refwire.chaos.adapters.pravega import FIELDS, command_fields
    from refwire.pravega.describe import LAYOUT

    assert command_fields(LAYOUT) == FIELDS
    assert FIELDS["AppendBlockEnd"]["writer_id"] == (8, 16)


def test_pravega_frames_without_an_event_number_are_not_judged() -> None:
    r = Run("pravega")
    for n in ("7", "10"):  # not integers: no event numbers (else "10" < "7")
        r.checker.sent(1, "c2s", 0, Observed("AppendBlockEnd", b"", {"writer_id": str(W1), "last_event_number": n}))
    for direction in ("c2s", "s2c"):
        for frame in (
            Observed("AppendBlockEnd", b"", {"writer_id": str(W1), "last_event_number": "7"}),
            Observed("DataAppended", b"", {"writer_id": str(W1)}),
        ):
            r.checker.sent(1, direction, 0, frame)
            r.checker.received(1, direction, 0, frame)
    assert r.verdicts() == []


def test_pravega_and_draft_observers() -> None:
    from refwire.pravega.draft2017.frames import DataAppended as DraftDataAppended

    o = adapter_for("pravega").observer(1 << 10, "s2c", {})
    data = appended(3)
    [f] = o.feed(data[:5]) + o.feed(data[5:])
    assert (f.type, f.data, f.fields["event_number"], f.fields["writer_id"]) == ("DataAppended", data, 3, str(W1))
    assert o.held() == 0 and o.feed(data[:9]) == [] and o.held() == 9
    [bad] = adapter_for("pravega").observer(1 << 10, "s2c", {}).feed(b"\x7f\x00\x00\x07\x00\x00\x00\x02ab")
    assert (bad.type, bad.fields) == ("?", {"error": "no command starts with byte 0x7f"})
    [big] = adapter_for("pravega").observer(1 << 10, "s2c", {}).feed(b"\x00\x00\x00\x07\x00\x10\x00\x00")
    assert big.fields == {"error": "DataAppended of 1048584 bytes is over max_frame_size=1024"}
    draft = DraftDataAppended(connection_id=W1, ack_level=12).encode()
    od = adapter_for("pravega-draft-2017").observer(1 << 10, "s2c", {})
    [g] = od.feed(draft[:3]) + od.feed(draft[3:])
    assert (g.type, g.data, g.fields["ack_level"]) == ("DataAppended", draft, 12)
    assert od.held() == 0 and od.feed(draft[:4]) == [] and od.held() == 4
    [small] = adapter_for("pravega-draft-2017").observer(8, "s2c", {}).feed(draft)
    assert small.type == "?" and "max_frame_size=8" in small.fields["error"]
    a = adapter_for("pravega-draft-2017")
    assert a.fields["DataAppended"]["ack_level"] == (24, 8) and a.prefix == "pd" and a.byte_order == "big"
    assert a.checker is Checker
    assert adapter_for("pravega").prefix == "pv"


# --------------------------------------------------------------------------- Seastar RPC

from refwire.chaos.adapters.seastar_rpc import SeastarObserver  # noqa: E402
from refwire.seastar_rpc.compression import envelope, make_compressor  # noqa: E402
from refwire.seastar_rpc.frames import Request, Response  # noqa: E402
from refwire.seastar_rpc.negotiation import Feature, Negotiation  # noqa: E402

PLAIN = Negotiation().encode()


def req(mid: int) -> bytes:
    return Request(2, mid, b"p").encode(with_timeout=False)


def rsp(mid: int) -> bytes:
    return Response(mid, b"r").encode(with_duration=False)


def ss(requests: list[int], replies: list[int], delivered: list[int] | None = None, *, reply_conn: int = 1) -> list[Verdict]:
    r = Run("seastar-rpc")
    for conn in {1, reply_conn}:
        r.relay(conn, "c2s", PLAIN)
        r.relay(conn, "s2c", PLAIN)
    r.relay(1, "c2s", b"".join(req(m) for m in requests))
    sent = b"".join(rsp(m) for m in replies)
    r.relay(reply_conn, "s2c", sent, None if delivered is None else b"".join(rsp(m) for m in delivered))
    return r.verdicts()


def _no_request(mid: int, who: str) -> str:
    return f"a reply for msg_id {mid}, never sent on this connection ({who})"


def test_seastar_a_reply_without_a_request() -> None:
    assert ss([1, 2], [2, 1]) == []
    assert ss([1, 2], [-1, -2]) == []  # an exception reply names -msg_id
    # frame 0 is the negotiation; the first reply on the connection is frame 1
    assert ss([1], [3]) == [("reply-without-request", 1, "s2c", 1, _no_request(3, "the server sent it so"))]
    assert ss([1], [1, -3]) == [("reply-without-request", 1, "s2c", 2, _no_request(3, "the server sent it so"))]
    assert ss([1], [1], [99]) == [("reply-without-request", 1, "s2c", 1, _no_request(99, "an injected fault changed it"))]
    assert ss([1], [1], [1, 99]) == [
        ("reply-without-request", 1, "s2c", 2, _no_request(99, "an injected fault changed it"))
    ]
    assert ss([1], [1], reply_conn=2) == [("reply-without-request", 2, "s2c", 1, _no_request(1, "the server sent it so"))]


def test_seastar_a_second_reply_to_one_request() -> None:
    assert ss([1, 2], [1, 2]) == []
    assert ss([1], [1, 1]) == [("reply-twice", 1, "s2c", 2, "a second reply for msg_id 1")]
    assert ss([1], [1, -1]) == [("reply-twice", 1, "s2c", 2, "a second reply for msg_id 1")]
    assert ss([1], [1], [1, 1]) == [("reply-twice", 1, "s2c", 2, "a second reply for msg_id 1")]  # the proxy duplicated it
    assert ss([1], [7, 7]) == [
        ("reply-without-request", 1, "s2c", 1, _no_request(7, "the server sent it so")),
        ("reply-without-request", 1, "s2c", 2, _no_request(7, "the server sent it so")),
    ]
    r = Run("seastar-rpc")
    for conn in (1, 2):
        r.relay(conn, "c2s", PLAIN)
        r.relay(conn, "s2c", PLAIN)
        r.relay(conn, "c2s", req(1))
        r.relay(conn, "s2c", rsp(1))  # the same id on two connections: two requests
    assert r.verdicts() == []


def test_seastar_requests_the_server_sends_and_replies_the_client_sends_are_not_judged() -> None:
    r = Run("seastar-rpc")
    for f in (Observed("response", b"", {"msg_id": 5}), Observed("request", b"", {"msg_id": 5})):
        r.checker.sent(1, "c2s", 0, f)
        r.checker.received(1, "c2s", 0, f)
    r.checker.sent(1, "s2c", 0, Observed("request", b"", {"msg_id": 6}))
    r.checker.received(1, "s2c", 0, Observed("request", b"", {"msg_id": 6}))
    assert r.verdicts() == []
    r.checker.received(1, "s2c", 1, Observed("response", b"", {"msg_id": 6}))
    assert r.verdicts() == [("reply-without-request", 1, "s2c", 1, _no_request(6, "an injected fault changed it"))]


def test_seastar_observer_fields_plain_timed_and_compressed() -> None:
    a = adapter_for("seastar-rpc")
    assert a.prefix == "ss" and a.byte_order == "little"
    assert a.fields["request"] == {"timeout_ms": (0, 8), "verb": (8, 8), "msg_id": (16, 8), "length": (24, 4)}
    assert a.fields["response"] == {"msg_id": (0, 8), "length": (8, 4)}
    assert a.fields["negotiation"] == {} and a.fields["noop"] == {}
    session: dict[str, Any] = {}
    c, s = a.observer(MAX, "c2s", session), a.observer(MAX, "s2c", session)
    offer = Negotiation.from_features({Feature.TIMEOUT: b""}).encode()
    [n] = c.feed(offer)
    assert (n.type, n.fields) == ("negotiation", {"compress": "", "timeout": True})
    [n] = s.feed(offer)
    assert (n.type, n.fields) == ("negotiation", {"compress": "", "timeout": True})
    timed = Request(3, 4, b"xy", 250).encode(with_timeout=True)
    untimed = Request(3, 5, b"", 0).encode(with_timeout=True)
    got = c.feed(timed + untimed)
    assert [(f.type, f.data, f.fields, f.spans) for f in got] == [
        (
            "request",
            timed,
            {"verb": 3, "msg_id": 4, "timeout_ms": 250, "length": 2},
            {"timeout_ms": (0, 8), "verb": (8, 8), "msg_id": (16, 8), "length": (24, 4)},
        ),
        (
            "request",
            untimed,
            {"verb": 3, "msg_id": 5, "timeout_ms": 0, "length": 0},
            {"timeout_ms": (0, 8), "verb": (8, 8), "msg_id": (16, 8), "length": (24, 4)},
        ),
    ]
    assert c.held() == 0 and c.feed(timed[:5]) == [] and c.held() == 5

    session = {}
    c, s = a.observer(MAX, "c2s", session), a.observer(MAX, "s2c", session)
    lz4 = Negotiation.from_features({Feature.COMPRESS: b"LZ4"}).encode()
    c.feed(lz4)
    [n] = s.feed(lz4)
    assert n.fields == {"compress": "LZ4", "timeout": False}
    comp = make_compressor("LZ4")
    sealed = envelope(comp, req(8))
    [f] = c.feed(sealed)
    assert (f.type, f.data, f.fields, f.spans) == ("request", sealed, {"verb": 2, "msg_id": 8, "timeout_ms": 0, "length": 1}, None)
    [noop] = s.feed(b"\x00\x00\x00\x00")
    assert (noop.type, noop.data, noop.fields, noop.spans) == ("noop", b"\x00\x00\x00\x00", {}, {})
    sealed = envelope(comp, rsp(8))
    [f] = s.feed(sealed)
    assert (f.type, f.fields, f.spans) == ("response", {"msg_id": 8, "length": 1}, None)
    # a request before the server's reply is held until the reply configures the client's direction
    session = {}
    c, s = SeastarObserver(MAX, "c2s", session), SeastarObserver(MAX, "s2c", session)
    assert [f.type for f in c.feed(lz4 + envelope(comp, req(8)))] == ["negotiation"]
    s.feed(lz4)
    assert c.unblocked
    c.unblocked = False
    assert not c.unblocked
    assert [f.type for f in c.feed(b"")] == ["request"]
    [junk] = a.observer(MAX, "c2s", {}).feed(b"NOTSEASTAR..")
    assert junk.type == "?" and junk.data == b"NOTSEASTAR.." and "error" in junk.fields


# --------------------------------------------------------------------------- TANK

from refwire.chaos.adapters.tank import TankChecker, TankObserver  # noqa: E402
from refwire.tank.bundles import Message, encode_bundle, encode_entry  # noqa: E402
from refwire.tank.frames import (  # noqa: E402
    ConsumePartition,
    ConsumeRequest,
    ConsumeTopic,
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
)
from refwire.tank.responses import (  # noqa: E402
    ConsumePartitionResult,
    ConsumeResponse,
    ConsumeTopicResult,
    ProduceResponse,
    ProduceResult,
)


def produce(rid: int, *contents: bytes, partition: int = 0, key: bytes | None = None) -> bytes:
    bundle = encode_bundle([Message(c, key=key) for c in contents])
    return ProduceRequest(rid, (ProduceTopic("t", (ProducePartition(partition, bundle),)),)).encode()


def produced(rid: int, error: int = 0, partition: int = 0) -> bytes:
    return ProduceResponse(rid, (ProduceResult("t", partition, error),)).encode()


def consume(rid: int, seq: int, partition: int = 0) -> bytes:
    return ConsumeRequest(rid, (ConsumeTopic("t", (ConsumePartition(partition, seq, 1 << 20),)),)).encode()


def served(rid: int, base: int, hwmark: int, *contents: bytes, partition: int = 0, error: int = 0) -> bytes:
    chunk = encode_entry(encode_bundle([Message(c) for c in contents])) if contents else b""
    result = ConsumePartitionResult(partition, error, base, hwmark, chunk)
    return ConsumeResponse(rid, (ConsumeTopicResult("t", (result,)),)).encode()


def tank_produce(r: Run, conn: int, rid: int, *contents: bytes, error: int = 0, key: bytes | None = None) -> None:
    r.relay(conn, "c2s", produce(rid, *contents, key=key))
    r.relay(conn, "s2c", produced(rid, error))


def _hidden(acked_at: tuple[int, int], n: int, seq: int, hwmark: int, who: str, part: str = "t/0") -> str:
    return (
        f"{part}: a message acked to the producer (conn {acked_at[0]}, frame {acked_at[1]}) is not among the {n} read "
        f"from seq {seq} to the high-water mark {hwmark} ({who})"
    )


NEVER_SERVED = "the broker never served it"
FAULT_HID = "the broker served it; an injected fault hid it"


def test_tank_an_acked_message_missing_from_a_read_to_the_high_water_mark() -> None:
    def run(read: list[bytes], delivered: list[bytes] | None = None) -> list[Verdict]:
        r = Run("tank")
        tank_produce(r, 1, 1, b"a")
        tank_produce(r, 1, 2, b"b")
        r.close(1)
        r.relay(2, "c2s", consume(1, 0))
        shown = read if delivered is None else delivered
        hwmark = len(read)  # the broker's answer ends at the high-water mark it names
        r.relay(2, "s2c", served(1, 1, hwmark, *read), served(1, 1, hwmark, *shown))
        r.close(2)
        return r.verdicts()

    assert run([b"a", b"b"]) == []
    assert run([b"a", b"b", b"a"]) == []  # a duplicate is no violation
    assert run([b"a"]) == [("acked-not-visible", 2, "s2c", 0, _hidden((1, 1), 1, 0, 1, NEVER_SERVED))]
    assert run([b"a", b"x"]) == [("acked-not-visible", 2, "s2c", 0, _hidden((1, 1), 2, 0, 2, NEVER_SERVED))]
    assert run([b"b"]) == [("acked-not-visible", 2, "s2c", 0, _hidden((1, 0), 1, 0, 1, NEVER_SERVED))]
    assert run([b"a", b"b"], []) == [
        ("acked-not-visible", 2, "s2c", 0, _hidden((1, 0), 0, 0, 2, FAULT_HID)),
        ("acked-not-visible", 2, "s2c", 0, _hidden((1, 1), 0, 0, 2, FAULT_HID)),
    ]
    assert run([b"a"], []) == [
        ("acked-not-visible", 2, "s2c", 0, _hidden((1, 0), 0, 0, 1, FAULT_HID)),
        ("acked-not-visible", 2, "s2c", 0, _hidden((1, 1), 0, 0, 1, NEVER_SERVED)),
    ]
    assert run([], []) == [
        ("acked-not-visible", 2, "s2c", 0, _hidden((1, 0), 0, 0, 0, NEVER_SERVED)),
        ("acked-not-visible", 2, "s2c", 0, _hidden((1, 1), 0, 0, 0, NEVER_SERVED)),
    ]


def test_tank_a_message_is_its_key_and_content() -> None:
    r = Run("tank")
    tank_produce(r, 1, 1, b"a", key=b"k")
    r.relay(2, "c2s", consume(1, 0))
    r.relay(2, "s2c", served(1, 1, 1, b"a"))  # the same content without its key: another message
    assert r.verdicts() == [("acked-not-visible", 2, "s2c", 0, _hidden((1, 0), 1, 0, 1, NEVER_SERVED))]
    r = Run("tank")
    tank_produce(r, 1, 1, b"a", key=b"XXXX")
    r.relay(2, "c2s", consume(1, 0))
    r.relay(2, "s2c", served(1, 1, 1, b"a"))  # no key is not any particular key
    assert r.verdicts() == [("acked-not-visible", 2, "s2c", 0, _hidden((1, 0), 1, 0, 1, NEVER_SERVED))]


def test_tank_only_acks_with_error_0_before_the_read_began_are_judged() -> None:
    r = Run("tank")
    tank_produce(r, 1, 1, b"a", error=0x02)  # not acked: an error
    r.relay(1, "c2s", produce(2, b"b"))  # never answered
    r.relay(1, "c2s", produce(3, b"c", partition=1))
    r.relay(1, "s2c", produced(3, 0, partition=2))  # a result for a partition the request had not
    r.relay(2, "c2s", consume(1, 0))
    tank_produce(r, 1, 4, b"d")  # acked after the consumer asked: a later read judges it
    r.relay(2, "s2c", served(1, 1, 0))
    assert r.verdicts() == []
    r.relay(2, "c2s", consume(2, 0))
    r.relay(2, "s2c", served(2, 1, 0))
    assert r.verdicts() == [("acked-not-visible", 2, "s2c", 1, _hidden((1, 2), 0, 0, 0, NEVER_SERVED))]
    r.relay(2, "c2s", consume(3, 0))  # judged once, then forgotten
    r.relay(2, "s2c", served(3, 1, 0))
    assert len(r.verdicts()) == 1


def test_tank_a_read_in_steps_is_one_sweep_until_the_high_water_mark() -> None:
    def run(second_seq: int, second: list[bytes]) -> list[Verdict]:
        r = Run("tank")
        tank_produce(r, 1, 1, b"a", b"b")
        r.relay(2, "c2s", consume(1, 0))
        r.relay(2, "s2c", served(1, 1, 3, b"a"))  # not at the high-water mark yet: the sweep goes on
        assert r.checker.violations == []
        r.relay(2, "c2s", consume(2, second_seq))
        r.relay(2, "s2c", served(2, second_seq, 3, *second))
        return r.verdicts()

    assert run(2, [b"b", b"c"]) == []
    # asked again from 1 (not where the answer ended): a new read, from 1 -- not from the start
    assert run(3, [b"c"]) == []  # from above where this run's messages are: not judged
    assert run(1, [b"a", b"b", b"c"]) == []
    assert run(1, [b"b", b"c", b"d"]) == [("acked-not-visible", 2, "s2c", 1, _hidden((1, 0), 3, 1, 3, FAULT_HID))]  # (an earlier answer held it)
    assert run(2, [b"c", b"d"]) == [("acked-not-visible", 2, "s2c", 1, _hidden((1, 0), 3, 0, 3, NEVER_SERVED))]


def test_tank_the_visibility_floor_lets_a_read_start_where_this_runs_messages_are() -> None:
    def run(start: int, read: list[bytes], earlier: list[tuple[int, list[bytes]]] = ()) -> list[Verdict]:  # type: ignore[assignment]
        r = Run("tank")
        tank_produce(r, 1, 1, b"a", b"b")
        rid = 1
        for at, msgs in earlier:
            r.relay(2, "c2s", consume(rid, at))
            r.relay(2, "s2c", served(rid, at, at + 10, *msgs))  # not up to the high-water mark: not judged
            rid += 1
        r.relay(3, "c2s", consume(rid, start))
        r.relay(3, "s2c", served(rid, start, start + max(len(read), 1) - 1, *read))
        return r.verdicts()

    # the log holds older messages: this run's start at seq 100, seen there by a first read
    assert run(100, [b"a", b"b"]) == []
    assert run(100, [b"a"]) == [("acked-not-visible", 3, "s2c", 0, _hidden((1, 0), 1, 100, 100, NEVER_SERVED))]
    assert run(100, [b"b"], [(100, [b"a"])]) == [
        ("acked-not-visible", 3, "s2c", 0, _hidden((1, 0), 1, 100, 100, FAULT_HID))  # served to the first read
    ]
    # ... from below the floor too
    assert run(99, [b"x", b"a"]) == [("acked-not-visible", 3, "s2c", 0, _hidden((1, 0), 2, 99, 100, NEVER_SERVED))]
    # a read from above the floor cannot miss this run's messages: not judged
    assert run(101, [b"b"], [(100, [b"a"])]) == []
    # no floor (no message of this run seen yet) and not from 0: not judged
    assert run(100, [b"x"]) == []
    # the floor is the lowest seq seen, not the last
    assert run(101, [b"x"], [(100, [b"a"]), (101, [b"b"])]) == []
    assert run(100, [b"b"], [(101, [b"b"]), (100, [b"a"])]) == [
        ("acked-not-visible", 3, "s2c", 0, _hidden((1, 0), 1, 100, 100, FAULT_HID))
    ]


def test_tank_reads_of_other_partitions_or_with_errors_are_not_judged() -> None:
    r = Run("tank")
    tank_produce(r, 1, 1, b"a")
    r.relay(2, "c2s", consume(1, 0, partition=1))
    r.relay(2, "s2c", served(1, 1, 0, partition=1))  # partition 1: nothing of t/0
    r.relay(2, "c2s", consume(2, 0))
    r.relay(2, "s2c", served(2, 1, 0, partition=1))  # an answer for a partition not asked
    r.relay(2, "c2s", consume(3, 0))
    r.relay(2, "s2c", served(3, 1, 0, error=0x02))  # an error: no read
    r.relay(2, "c2s", consume(4, 0))
    r.relay(2, "s2c", served(4, 1, 0, b"a", b"b")[:-1] + b"\x00")  # a chunk that does not decode
    r.relay(2, "c2s", consume(5, 0))
    r.relay(2, "s2c", served(5, 1, 5, b"a"))  # below the high-water mark: the read is not over
    assert r.verdicts() == []
    r.close(2)
    r.relay(3, "c2s", consume(1, 0))
    r.relay(3, "s2c", served(1, 1, 1, b"a"))
    assert r.verdicts() == []


def test_tank_every_partition_of_a_request_and_its_answer_is_read() -> None:
    """A produce and a consume naming two partitions: an error on the first does
    not hide the second (its ack is judged, its messages count as read)."""
    bundle_a, bundle_b = encode_bundle([Message(b"a")]), encode_bundle([Message(b"b")])
    two = (ProduceTopic("t", (ProducePartition(0, bundle_a), ProducePartition(1, bundle_b))),)
    results = (ProduceResult("t", 0, 0x02), ProduceResult("t", 1, 0))  # t/0 refused, t/1 acked

    def read_both(r: Run, rid: int, first_error: int, on_1: list[bytes]) -> None:
        asked = ConsumeTopic("t", (ConsumePartition(0, 0, 1 << 20), ConsumePartition(1, 0, 1 << 20)))
        r.relay(2, "c2s", ConsumeRequest(rid, (asked,)).encode())
        chunk = encode_entry(encode_bundle([Message(c) for c in on_1])) if on_1 else b""
        parts = (ConsumePartitionResult(0, first_error, 1, 0, b""), ConsumePartitionResult(1, 0, 1, len(on_1), chunk))
        r.relay(2, "s2c", ConsumeResponse(rid, (ConsumeTopicResult("t", parts),)).encode())

    for first_error in (0x01, 0xFE):  # an error, and 0xFE (the first bundle whole, §6), which still serves t/1
        r = Run("tank")
        r.relay(1, "c2s", ProduceRequest(1, two).encode())
        r.relay(1, "s2c", ProduceResponse(1, results).encode())
        read_both(r, 1, first_error, [b"b"])
        assert r.verdicts() == [], first_error
    r = Run("tank")
    r.relay(1, "c2s", ProduceRequest(1, two).encode())
    r.relay(1, "s2c", ProduceResponse(1, results).encode())
    read_both(r, 1, 0x01, [])  # t/1's acked b is missing from its read to the high-water mark
    assert r.verdicts() == [("acked-not-visible", 2, "s2c", 0, _hidden((1, 0), 0, 0, 0, NEVER_SERVED, part="t/1"))]


def test_tank_a_consume_sent_again_before_its_answer_continues_the_read_it_began() -> None:
    """Two Consumes from the same seq before the first answer (a client that
    retries, or pipelines): one read, begun at the first; a message acked
    between them is judged by a later read, not this one."""
    r = Run("tank")
    r.relay(2, "c2s", consume(1, 0))
    tank_produce(r, 1, 1, b"a")
    r.relay(2, "c2s", consume(2, 0))
    r.relay(2, "s2c", served(1, 1, 0))  # the first answer: empty, at the high-water mark it had then
    assert r.verdicts() == []


def test_tank_a_read_whose_first_bundle_is_sparse_is_judged_like_any_other() -> None:
    """err 0xfe: the first bundle is sparse and carries its own sequence numbers (§5)."""

    def run(*contents: bytes) -> list[Verdict]:
        r = Run("tank")
        tank_produce(r, 1, 1, b"a")
        r.relay(2, "c2s", consume(1, 0))
        bundle = encode_bundle([Message(c, seq=i + 1) for i, c in enumerate(contents)], sparse=True)
        result = ConsumePartitionResult(0, 0xFE, None, len(contents), encode_entry(bundle))
        r.relay(2, "s2c", ConsumeResponse(1, (ConsumeTopicResult("t", (result,)),)).encode())
        return r.verdicts()

    assert run(b"a") == []
    assert run(b"x") == [("acked-not-visible", 2, "s2c", 0, _hidden((1, 0), 1, 0, 1, NEVER_SERVED))]


def test_tank_a_broker_that_acks_and_serves_nothing_or_a_partition_nobody_wrote_to() -> None:
    r = Run("tank")
    tank_produce(r, 1, 1, b"a")
    r.relay(2, "c2s", consume(1, 0))
    r.relay(2, "s2c", served(1, 1, 0))  # an empty log: the acked message was never served
    assert r.verdicts() == [("acked-not-visible", 2, "s2c", 0, _hidden((1, 0), 0, 0, 0, NEVER_SERVED))]
    r = Run("tank")
    r.relay(2, "c2s", consume(1, 0, partition=3))
    r.relay(2, "s2c", served(1, 1, 1, b"older", partition=3))  # what others wrote there earlier: nothing to judge
    assert r.verdicts() == []


def _unasked(kind: str, rid: int, who: str) -> str:
    return f"a {kind} reply to request {rid}, never sent on this connection ({who})"


def test_tank_a_reply_without_a_request() -> None:
    r = Run("tank")
    r.relay(1, "c2s", produce(1, b"a"))
    r.relay(1, "s2c", produced(1), produced(5))  # the proxy rewrote the reply
    assert r.verdicts() == [("reply-without-request", 1, "s2c", 0, _unasked("Produce", 5, "an injected fault changed the reply"))]
    r = Run("tank")
    r.relay(1, "c2s", consume(1, 0), consume(7, 0))  # the proxy rewrote the request
    r.relay(1, "s2c", served(7, 1, 0))
    assert r.verdicts() == [("reply-without-request", 1, "s2c", 0, _unasked("Consume", 7, "an injected fault changed the request"))]
    r = Run("tank")
    r.relay(1, "c2s", consume(1, 0))
    r.relay(1, "s2c", served(1, 1, 0))
    r.relay(2, "s2c", produced(3))  # on a connection that asked nothing
    r.deliver(3, "s2c", produced(4))  # a reply the broker never sent, on a connection it never answered on
    assert r.verdicts() == [
        ("reply-without-request", 2, "s2c", 0, _unasked("Produce", 3, "the broker sent it so")),
        ("reply-without-request", 3, "s2c", 0, _unasked("Produce", 4, "an injected fault changed the reply")),
    ]
    r = Run("tank")
    r.relay(1, "c2s", consume(1, 0))
    r.relay(1, "s2c", produced(1))  # a Produce answer to a Consume: read as the request asked
    r.relay(1, "c2s", produce(2, b"a"))
    r.relay(1, "s2c", served(2, 1, 0))
    assert r.verdicts() == []


def _twice(kind: str, rid: int, who: str) -> str:
    return f"a second {kind} reply to request {rid} ({who})"


def test_tank_a_second_reply_to_one_request_names_who_duplicated_it() -> None:
    # the proxy duplicated the broker's one answer
    r = Run("tank")
    r.relay(1, "c2s", produce(1, b"a"))
    r.relay(1, "s2c", produced(1), produced(1) + produced(1))
    assert r.verdicts() == [("reply-twice", 1, "s2c", 1, _twice("Produce", 1, "an injected fault duplicated the reply"))]
    # the broker answered one request twice
    r = Run("tank")
    r.relay(1, "c2s", consume(4, 0))
    r.relay(1, "s2c", served(4, 1, 0) + served(4, 1, 0))
    assert r.verdicts() == [("reply-twice", 1, "s2c", 1, _twice("Consume", 4, "the broker answered it twice"))]
    # the proxy duplicated the request, and the broker answered both: the client got two answers to one request
    r = Run("tank")
    r.send(1, "c2s", produce(2, b"a"))
    r.deliver(1, "c2s", produce(2, b"a") + produce(2, b"a"))
    r.relay(1, "s2c", produced(2) + produced(2))
    assert r.verdicts() == [("reply-twice", 1, "s2c", 1, _twice("Produce", 2, "an injected fault duplicated the reply"))]
    # the proxy rewrote the id both ways, then duplicated the reply: the broker never saw the client's id at all
    r = Run("tank")
    r.send(1, "c2s", produce(1, b"a"))
    r.deliver(1, "c2s", produce(9, b"a"))
    r.send(1, "s2c", produced(9))
    r.deliver(1, "s2c", produced(1) + produced(1))
    assert r.verdicts() == [("reply-twice", 1, "s2c", 1, _twice("Produce", 1, "an injected fault duplicated the reply"))]
    # an id the client reuses while it waits is answered once per request: nothing to report
    r = Run("tank")
    r.relay(1, "c2s", produce(3, b"a") + produce(3, b"b"))
    r.relay(1, "s2c", produced(3) + produced(3))
    assert r.verdicts() == []
    # a connection's ids are its own: the same id answered on another connection is no second reply
    r = Run("tank")
    r.relay(1, "c2s", produce(5, b"a"))
    r.relay(1, "s2c", produced(5))
    r.close(1)
    r.relay(2, "c2s", produce(5, b"b"))
    r.relay(2, "s2c", produced(5))
    assert r.verdicts() == []


def test_tank_frames_that_do_not_decode_are_not_judged() -> None:
    r = Run("tank")
    for direction in ("c2s", "s2c"):
        for f in (Observed("?", b"\xee\x00"), Observed("Produce", b"\x01\x00"), Observed("Consume", consume(1, 0)[:9])):
            r.checker.sent(1, direction, 0, f)
            r.checker.received(1, direction, 0, f)
    r.relay(1, "c2s", produce(1, b"a"))
    resp = produced(1)
    r.send(1, "s2c", resp)
    r.checker.received(1, "s2c", 0, Observed("Produce", resp[:6] + b"\xff"))
    r.relay(1, "s2c", b"\x03" + (4).to_bytes(4, "little") + (1).to_bytes(4, "little"))  # a Ping-shaped frame
    assert r.verdicts() == []
    assert Run("tank").adapter.prefix == "tk"


def test_tank_a_closed_connection_leaves_only_its_acks() -> None:
    r = Run("tank")
    tank_produce(r, 1, 1, b"a")
    r.relay(1, "c2s", consume(2, 0))
    r.relay(1, "c2s", produce(3, b"b"))
    r.close(1)
    c = r.checker
    assert isinstance(c, TankChecker)
    assert not any(k[0] == 1 for k in c._requests) and not any(k[0] == 1 for k in c._sweeps)
    assert c._broker_rids == {} and c._asked_rids == {}
    assert len(c._acked[("t", 0)]) == 1
    r.close(5)  # a connection that carried nothing
    assert r.verdicts() == []


def test_tank_observer() -> None:
    a = adapter_for("tank")
    assert a.byte_order == "little"
    o = a.observer(1 << 10, "c2s", {})
    data = consume(9, 0)
    [f] = o.feed(data[:4]) + o.feed(data[4:])
    assert (f.type, f.data, f.fields["request_id"]) == ("Consume", data, 9)
    assert f.spans is not None and f.spans["request_id"] == (7, 4)
    assert o.held() == 0 and o.feed(data[:3]) == [] and o.held() == 3
    [resp] = a.observer(1 << 10, "s2c", {}).feed(served(9, 1, 0))
    assert resp.fields["request_id"] == 9 and resp.spans is not None and resp.spans["request_id"] == (9, 4)
    assert resp.fields["msg_id"] == 2 and resp.spans["msg_id"] == (0, 1)
    [junk] = a.observer(1 << 10, "c2s", {}).feed(b"\xee\x00")
    assert (junk.type, junk.fields) == ("?", {"error": "message id 0xee"})
    [big] = a.observer(1 << 10, "c2s", {}).feed(b"\x01\xff\xff\xff\x0f")
    assert (big.type, big.fields) == ("?", {"error": "Produce of 268435460 bytes is over max_frame_size=1024"})
    # built by hand, an observer reads the client's side unless told otherwise
    [req] = TankObserver(1 << 10).feed(data)
    assert req.fields["request_id"] == 9 and TankObserver(1 << 10, "s2c").feed(data)[0].fields["request_id"] != 9
