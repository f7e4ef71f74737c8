"""refwire.sansio on its own: the NEED_DATA sentinel, closed_inside, to_remote and
the receive side of FrameMachine (EOF, reset, errors after events, transitions)."""

from __future__ import annotations

import enum
from typing import Any, ClassVar

import pytest

from refwire.errors import LimitExceeded, LocalProtocolError, RemoteLimitExceeded, RemoteProtocolError
from refwire.sansio import NEED_DATA, FrameMachine, Machine, NeedData, closed_inside, earliest, to_remote


class S(enum.Enum):
    OPEN = "open"
    BUSY = "busy"
    ERROR = "error"
    FAILED = "failed"
    CLOSED = "closed"


class Toy(FrameMachine):
    """One byte per event: ``o``/``b`` are transitions, ``!`` is a protocol error
    after the events before it, anything else an event of its own."""

    PROTOCOL = "toy"
    TRANSITIONS: ClassVar[dict[Any, Any]] = {
        (S.OPEN, "b"): S.BUSY,
        (S.BUSY, "o"): S.OPEN,
        (S.BUSY, "error"): S.FAILED,  # only BUSY records a failure as a transition
    }
    ERROR_STATE = S.ERROR
    CLOSED_STATE = S.CLOSED

    def __init__(self) -> None:
        super().__init__(S.OPEN)
        self.buf = bytearray()
        self.ended: list[tuple[bool, float]] = []
        self.idle: Any = None
        self.pumps = 0

    def _feed(self, data: bytes | bytearray | memoryview) -> None:
        self.buf += data

    def _pump(self) -> None:
        self.pumps += 1
        while self.buf:
            b = chr(self.buf.pop(0))
            if b == "!":
                raise LocalProtocolError("bang", protocol="toy", frame="Bang", field="byte", offset=7)
            if b == "L":
                raise LimitExceeded("too big", protocol="toy", field="len", offset=8)
            if b in "bo":
                self._transition(b, offset=3, frame="Flip" if b == "o" else None)
            self._events.append(b)

    def _at_eof(self) -> None:
        if self.state is not S.CLOSED:
            self.state = S.CLOSED
            self._events.append(("closed", self._reset, self._now))

    def _input_ended(self) -> None:
        self.ended.append((self._reset, self._now))

    def _idle_event(self) -> Any:
        return self.idle


def drain(m: FrameMachine) -> list[Any]:
    out = []
    while (ev := m.next_event()) is not NEED_DATA:
        out.append(ev)
    return out


def test_need_data_is_one_sentinel() -> None:
    assert NeedData() is NEED_DATA and NeedData() is NeedData()
    assert repr(NEED_DATA) == "NEED_DATA"
    assert isinstance(Toy(), Machine)


def test_closed_inside_message_and_location() -> None:
    err = closed_inside("a frame", protocol="p", frame="F", offset=12, detail="3 of 10 bytes")
    assert type(err) is LocalProtocolError
    assert err.args[0].startswith("connection closed inside a frame (3 of 10 bytes) (")
    assert (err.protocol, err.frame, err.field, err.offset) == ("p", "F", "(eof)", 12)
    err = closed_inside("a batch", protocol="q")
    assert str(err).startswith("connection closed inside a batch (q")
    assert "()" not in str(err)
    assert (err.protocol, err.frame, err.field, err.offset) == ("q", None, "(eof)", None)
    assert closed_inside("x", protocol="q", field="len").field == "len"


def test_to_remote_keeps_location_and_chains() -> None:
    local = LimitExceeded("too big", protocol="p", frame="F", field="len", offset=9)
    remote = to_remote(local)
    assert type(remote) is RemoteLimitExceeded and remote.__cause__ is local
    assert (remote.protocol, remote.frame, remote.field, remote.offset) == ("p", "F", "len", 9)
    already = RemoteProtocolError("x")
    assert to_remote(already) is already and already.__cause__ is None


def test_initial_state_and_defaults() -> None:
    m = Toy()
    assert (m.state, m.transitions_seen, m._now, m._eof, m._reset, m._error) == (S.OPEN, set(), 0.0, False, False, None)
    assert m.data_to_send() == b"" and m.next_deadline() is None
    m.handle_timer(now=4.5)
    assert m._now == 4.5 and m.data_to_send() == b""
    with pytest.raises(NotImplementedError):
        m.send("x", now=0.0)
    with pytest.raises(NotImplementedError):
        FrameMachine._feed(m, b"x")
    with pytest.raises(NotImplementedError):
        FrameMachine._pump(m)
    with pytest.raises(NotImplementedError):
        FrameMachine._at_eof(m)
    assert FrameMachine._idle_event(m) is None and FrameMachine._input_ended(m) is None


def test_data_to_send_once() -> None:
    m = Toy()
    m._out += b"echo"
    out = m.data_to_send()
    assert type(out) is bytes and out == b"echo" and m.data_to_send() == b""


def test_events_in_order_then_eof_with_time() -> None:
    m = Toy()
    m.receive_data(b"xy", now=1.0)
    assert m._now == 1.0
    m.receive_data(bytearray(b"z"), now=2.0)
    assert drain(m) == ["x", "y", "z"]
    m.receive_data(b"", now=3.0)  # EOF
    assert m.ended == [(False, 3.0)]
    assert drain(m) == [("closed", False, 3.0)]
    m.receive_data(b"", now=4.0)  # a second EOF is harmless and ends nothing again
    assert m.ended == [(False, 3.0)] and m._now == 4.0
    with pytest.raises(RuntimeError, match=r"^receive_data after EOF$"):
        m.receive_data(b"more", now=5.0)
    assert m.buf == bytearray()


def test_eof_waits_for_buffered_events() -> None:
    m = Toy()
    m.receive_data(b"ab", now=0.0)
    m.receive_data(memoryview(b""), now=1.0)
    assert m.next_event() == "a"  # the EOF event comes only after what was buffered
    assert m.next_event() == "b"
    assert m.next_event() == ("closed", False, 1.0)
    assert m.next_event() is NEED_DATA


def test_connection_lost_once() -> None:
    m = Toy()
    m.connection_lost(now=2.0)
    assert (m._eof, m._reset, m._now, m.ended) == (True, True, 2.0, [(True, 2.0)])
    m.connection_lost(now=3.0)
    assert m.ended == [(True, 2.0)] and m._now == 3.0
    assert drain(m) == [("closed", True, 3.0)]
    m.receive_data(b"", now=4.0)  # EOF after a reset: nothing more
    assert m.ended == [(True, 2.0)]


def test_reset_after_eof_still_counts_as_a_reset() -> None:
    m = Toy()
    m.receive_data(b"", now=1.0)
    m.connection_lost(now=2.0)
    assert m.ended == [(False, 1.0), (True, 2.0)] and m._reset


def test_send_failed_drops_unwritten_bytes_and_resets() -> None:
    m = Toy()
    m._out += b"unwritten"
    m.send_failed(now=6.0)
    assert m.data_to_send() == b""
    assert (m._reset, m._eof, m.ended) == (True, True, [(True, 6.0)])
    assert drain(m) == [("closed", True, 6.0)]


def test_transitions_are_recorded_and_refused_with_location() -> None:
    m = Toy()
    m.receive_data(b"bo", now=0.0)
    assert drain(m) == ["b", "o"]
    assert m.state is S.OPEN
    assert m.transitions_seen == {("open", "b", "busy"), ("busy", "o", "open")}
    m.receive_data(b"o", now=0.0)  # "o" is not allowed in OPEN
    with pytest.raises(RemoteProtocolError) as info:
        m.next_event()
    err = info.value
    assert str(err).startswith("Flip is not allowed in state open (")
    assert (err.protocol, err.frame, err.field, err.offset) == ("toy", "Flip", "type", 3)
    assert type(err.__cause__) is LocalProtocolError
    assert m.state is S.ERROR  # no ("open", "error") row: the ERROR_STATE
    assert ("open", "error", "error") not in m.transitions_seen
    m2 = Toy()
    m2.receive_data(b"bb", now=0.0)
    assert m2.next_event() == "b"
    with pytest.raises(RemoteProtocolError) as info:
        m2.next_event()
    assert str(info.value).startswith("b is not allowed in state busy (")
    assert (info.value.frame, info.value.field, info.value.offset) == (None, "type", 3)
    assert m2.state is S.FAILED  # the table's ("busy", "error") row
    assert ("busy", "error", "failed") in m2.transitions_seen


def test_error_comes_after_the_events_before_it_and_stays() -> None:
    m = Toy()
    m.receive_data(b"xy!z", now=0.0)
    assert m.next_event() == "x"
    assert m.next_event() == "y"
    with pytest.raises(RemoteProtocolError) as info:
        m.next_event()
    err = info.value
    assert type(err) is RemoteProtocolError and type(err.__cause__) is LocalProtocolError
    assert (err.protocol, err.frame, err.field, err.offset) == ("toy", "Bang", "byte", 7)
    assert m.state is S.ERROR
    pumps = m.pumps
    for _ in range(2):  # raised again, without decoding anything more
        with pytest.raises(RemoteProtocolError) as again:
            m.next_event()
        assert again.value is err
    assert m.pumps == pumps and m.buf == bytearray(b"z")


def test_limit_errors_become_remote_limit_errors() -> None:
    m = Toy()
    m.receive_data(b"bL", now=0.0)
    assert m.next_event() == "b"
    with pytest.raises(RemoteLimitExceeded) as info:
        m.next_event()
    assert (info.value.field, info.value.offset) == ("len", 8)
    assert m.state is S.FAILED


def test_error_at_eof_is_raised_after_events() -> None:
    class EofError(Toy):
        def _at_eof(self) -> None:
            raise closed_inside("a frame", protocol="toy", offset=1)

    m = EofError()
    m.receive_data(b"a", now=0.0)
    m.receive_data(b"", now=0.0)
    assert m.next_event() == "a"
    with pytest.raises(RemoteProtocolError) as info:
        m.next_event()
    assert (info.value.field, info.value.offset) == ("(eof)", 1) and m.state is S.ERROR


def test_no_eof_event_before_eof_and_idle_event() -> None:
    m = Toy()
    assert m.next_event() is NEED_DATA and m.pumps == 1
    m.idle = "idle"
    m.receive_data(b"a", now=0.0)
    assert m.next_event() == "idle" and m.pumps == 1  # idle: nothing decoded
    m.idle = None
    assert m.next_event() == "a"


def test_idle_timeout_counts_from_the_accept_then_from_each_input() -> None:
    """``set_idle_timeout``: the deadline is the latest input + the timeout; at it
    (not before) the connection fails with a limit error on field ``(idle)``, as a
    transition where the state has one; after EOF, or with None, no timer."""
    m = Toy()
    assert m.idle_timeout is None
    m.set_idle_timeout(0.5, now=10.0)
    assert m.next_deadline() == 10.5
    m.receive_data(b"a", now=10.3)
    assert drain(m) == ["a"] and m.next_deadline() == 10.8
    m.handle_timer(now=10.79)
    assert m.next_event() is NEED_DATA and m.next_deadline() == 10.8
    m.receive_data(b"b", now=10.8)  # now BUSY, whose error is a transition
    assert drain(m) == ["b"] and m.next_deadline() == 11.3
    m.handle_timer(now=11.3)
    with pytest.raises(RemoteLimitExceeded) as info:
        m.next_event()
    assert info.value.field == "(idle)" and "no byte received for 0.5s: the limit idle_timeout=0.5s" in str(info.value)
    assert info.value.protocol == "toy"
    assert m.state is S.FAILED and (S.BUSY.value, "error", S.FAILED.value) in m.transitions_seen
    assert m.next_deadline() is None  # failed: no timer
    quiet = Toy()
    quiet.set_idle_timeout(1.0, now=0.0)
    quiet.handle_timer(now=1.0)  # exactly at the deadline: due
    with pytest.raises(RemoteLimitExceeded):
        quiet.next_event()
    assert quiet.state is S.ERROR  # OPEN has no error transition
    ended = Toy()
    ended.set_idle_timeout(1.0, now=0.0)
    ended.receive_data(b"", now=0.2)
    assert ended.next_deadline() is None
    ended.handle_timer(now=5.0)
    assert drain(ended) == [("closed", False, 5.0)]  # the plain EOF event, no idle error
    off = Toy()
    off.set_idle_timeout(None, now=0.0)
    off.receive_data(b"x", now=1.0)
    assert off.next_deadline() is None
    off.handle_timer(now=1e9)
    assert drain(off) == ["x"]


def test_earliest_takes_the_smallest_set_deadline() -> None:
    assert earliest() is None and earliest(None, None) is None
    assert earliest(3.0, None, 1.0) == 1.0 and earliest(None, 2.5) == 2.5 and earliest(0.0, 4.0) == 0.0


class Framed(Toy):
    """A toy whose receive progress (bytes of an incomplete frame, the frame's stream
    offset) and pending frame name the test sets, for the frame timer."""

    def __init__(self) -> None:
        super().__init__()
        self.progress: tuple[int, int] | None = None
        self.pending: str | None = None

    def _receive_progress(self) -> tuple[int, int] | None:
        return self.progress

    def _pending_frame_name(self) -> str | None:
        return self.pending


def test_frame_timer_counts_from_when_the_incomplete_frame_began() -> None:
    """The deadline is when the frame now incomplete began + ``frame_timeout``: more
    bytes of the same frame keep it, a new frame (another offset) restarts it,
    none pending clears it; at it (not before) the connection fails with a limit
    error on ``(timeout)`` naming the frame, its bytes and its offset."""
    m = Framed()
    assert (m.frame_timeout, m._partial_since, m._partial_at, m.idle_timeout, m._last_input) == (None, None, -1, None, None)
    m.progress = (5, 100)
    m.receive_data(b"a", now=1.0)
    assert drain(m) == ["a"] and m.next_deadline() is None  # no frame_timeout: never
    m.frame_timeout = 2.0
    m.receive_data(b"a", now=1.5)
    assert drain(m) == ["a"] and m.next_deadline() == 3.5
    m.progress = (7, 100)  # more of the same frame: the deadline stays
    m.receive_data(b"a", now=2.0)
    assert drain(m) == ["a"] and m.next_deadline() == 3.5
    m.progress = (3, 150)  # that frame completed, another began
    m.receive_data(b"a", now=2.5)
    assert drain(m) == ["a"] and m.next_deadline() == 4.5
    m.frame_timeout = None  # switched off while a frame is pending: no timer
    assert m.next_deadline() is None
    m.frame_timeout = 2.0
    m.progress = (0, 160)  # nothing pending: no timer
    m.receive_data(b"a", now=2.6)
    assert drain(m) == ["a"] and m.next_deadline() is None
    m.progress, m.pending = (3, 170), "Big"
    m.receive_data(b"b", now=3.0)  # BUSY: its error is a transition
    assert drain(m) == ["b"] and m.next_deadline() == 5.0
    m.handle_timer(now=4.99)
    assert m.next_event() is NEED_DATA and m.next_deadline() == 5.0
    m.handle_timer(now=5.0)
    assert m.next_deadline() is None and m._partial_since is None
    with pytest.raises(RemoteLimitExceeded) as info:
        m.next_event()
    e = info.value
    assert (e.field, e.frame, e.offset, e.protocol) == ("(timeout)", "Big", 170, "toy")
    assert "a frame begun 2.0s ago is still incomplete (3 bytes of it received): the limit frame_timeout=2s" in str(e)
    assert m.state is S.FAILED and (S.BUSY.value, "error", S.FAILED.value) in m.transitions_seen


def test_frame_timer_without_progress_names_the_offset_it_noted_and_no_bytes() -> None:
    m = Framed()
    m.frame_timeout = 1.0
    m.progress = (4, 40)
    m.receive_data(b"a", now=0.0)
    drain(m)
    m.progress = None  # the machine stopped tracking (it decodes nothing more)
    m.handle_timer(now=1.0)
    with pytest.raises(RemoteLimitExceeded) as info:
        m.next_event()
    assert info.value.offset == 40 and "(0 bytes of it received)" in str(info.value) and info.value.frame is None
    assert m.state is S.ERROR  # OPEN has no error transition
    assert m.handle_timer(now=9.0) is None and m.next_deadline() is None  # failed: no second error, no timer
