"""The Lumberjack server's per-connection memory budget, measured as the server process's RSS.

``--connection-memory`` (``Limits.max_connection_memory``, specs/lumberjack/README.md §4):
a frame may take a quarter of it and a batch's events, with those of the batches awaiting
their ack, a quarter (an event costs about four times its bytes: the frame it is cut from,
its payload, the JSON check and the line written).  One hostile connection may make the
process's peak resident memory grow by at most 1.5 x the budget + 32 MiB
(:func:`support.rss.allowance`), at the default budget (256 MiB) and at 16 MiB; the
connection is refused with the limit named, and the server goes on serving.

Before the budget, the shapes here took 480 MiB (four ``C`` frames inflating to 60 MiB
each) and 441 MiB (two 63 MiB ``J`` frames; 378 MiB with the budget) of a server with the default limits.
"""

from __future__ import annotations

import functools
import json
import socket
import struct
import zlib

from support.rss import MiB, Served, allowance, needs_proc, serving

from refwire.lumberjack.frames import Ack, Compressed, JsonFrame, Window

pytestmark = needs_proc

DEFAULT = 256 * MiB


def _event(size: int, seq: int) -> bytes:
    """A ``J`` frame whose JSON payload is ``size`` bytes."""
    pad = size - len(json.dumps({"m": ""}))
    return JsonFrame(seq, json.dumps({"m": "a" * pad}).encode()).encode()


@functools.cache
def _bomb(size: int, seq: int = 1) -> bytes:
    """A ``C`` frame (zlib level 9) whose payload inflates to one ``J`` of ``size`` bytes."""
    return Compressed(zlib.compress(_event(size, seq), 9)).encode()


def _send(served: Served, *chunks: bytes) -> bytes:
    """Send the chunks (stopping if the server closes), then read until it closes or acks."""
    s = served.connect()
    got = b""
    try:
        for chunk in chunks:
            s.sendall(chunk)
        s.shutdown(socket.SHUT_WR)
        while data := s.recv(65536):
            got += data
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()
    return got


def _well_behaved(served: Served) -> None:
    """A small window afterwards is acked: the refusal closed only the hostile connection."""
    got = _send(served, Window(2).encode() + _event(100, 1) + _event(100, 2))
    assert Ack(2).encode() in got
    assert served.alive()


def _refused(served: Served) -> str:
    """The server's log names the limit (it may write the line just after it closed)."""
    assert served.wait_for("max_connection_memory="), "".join(served.lines)[-2000:]
    return "".join(served.lines)


def test_c_frames_inflating_to_60_mib_each_stay_within_the_default_budget() -> None:
    """``W 8`` then 8 ``C`` frames of about 61 KB that each inflate to one 60 MiB event
    (one frame, sent 8 times: the sequence numbers do not matter to the limit)."""
    n = 8
    frames = [_bomb(60 * MiB)] * n
    assert len(frames[0]) < 100_000
    with serving("lumberjack", "--out", "/dev/null") as served:
        _send(served, Window(n).encode(), *frames)
        assert served.growth() <= allowance(DEFAULT), served.growth() / MiB
        _refused(served)
        _well_behaved(served)


def test_two_63_mib_j_frames_stay_within_the_default_budget() -> None:
    """Each frame is under the 64 MiB frame cap; both together are over the batch's share."""
    with serving("lumberjack", "--out", "/dev/null") as served:
        _send(served, Window(2).encode(), _event(63 * MiB, 1), _event(63 * MiB, 2))
        assert served.growth() <= allowance(DEFAULT), served.growth() / MiB
        text = _refused(served)
        assert "the batch's events exceed the 67108864 bytes the limit max_connection_memory=268435456" in text
        _well_behaved(served)


def test_a_60_mib_event_is_accepted_at_the_default_budget_and_the_peak_is_within_it() -> None:
    """What fits is taken: one 60 MiB event in a C is acked (and costs about 5x itself)."""
    with serving("lumberjack", "--out", "/dev/null") as served:
        got = _send(served, Window(1).encode(), _bomb(60 * MiB))
        assert Ack(1).encode() in got
        assert served.growth() <= allowance(DEFAULT), served.growth() / MiB


def test_a_16_mib_budget_bounds_c_windows() -> None:
    """16 MiB: a batch may hold 4 MiB; the second 3 MiB event is refused, the first never acked."""
    frames = [_bomb(3 * MiB)] * 8
    with serving("lumberjack", "--out", "/dev/null", "--connection-memory", str(16 * MiB)) as served:
        got = _send(served, Window(8).encode(), *frames)
        assert got == b""  # nothing acked
        assert served.growth() <= allowance(16 * MiB), served.growth() / MiB
        _refused(served)
        _well_behaved(served)


def test_a_16_mib_budget_refuses_a_large_frame_at_its_header() -> None:
    """A ``J`` claiming 60 MiB is refused at its length field, before its body is read:
    the frame may take 4 MiB (a quarter of the budget)."""
    header = struct.pack(">BBII", 0x32, 0x4A, 1, 60 * MiB)
    with serving("lumberjack", "--out", "/dev/null", "--connection-memory", str(16 * MiB)) as served:
        _send(served, Window(1).encode(), header, b"{" * (8 * MiB))
        assert served.growth() <= allowance(16 * MiB), served.growth() / MiB
        text = _refused(served)
        assert "J frame of 62914570 bytes exceeds the 4194304 bytes the limit max_connection_memory=16777216 allows a frame" in text
        _well_behaved(served)


def test_at_16_mib_an_event_at_the_batch_share_is_acked_and_one_byte_more_is_not() -> None:
    """The line: a batch of events totalling exactly 4 MiB is acked; 4 MiB + 1 is refused."""
    share = 16 * MiB // 4
    with serving("lumberjack", "--out", "/dev/null", "--connection-memory", str(16 * MiB)) as served:
        first = _event(share // 2, 1)
        second = _event(share - share // 2, 2)
        got = _send(served, Window(2).encode(), first, second)
        assert Ack(2).encode() in got
        got = _send(served, Window(2).encode(), first, _event(share - share // 2 + 1, 2))
        assert got == b""
        _refused(served)


def test_d_frames_of_empty_pairs_stay_within_a_16_mib_budget() -> None:
    """v1 ``D`` frames at the 4 MiB frame cap whose pairs are all empty (8 bytes each on the
    wire) were counted as 0 bytes of events and held as 38 MiB each (153 MiB for four); a
    pair now counts 32 bytes more than its key and value, so such a frame is refused from
    its header (found by a review, not by the first tests)."""
    pairs = (4 * MiB - 10) // 8
    frame = b"1D" + struct.pack(">II", 1, pairs) + b"\x00" * (8 * pairs)
    with serving("lumberjack", "--out", "/dev/null", "--connection-memory", str(16 * MiB)) as served:
        _send(served, Window(4).encode(), *[frame] * 4)
        assert served.growth() <= allowance(16 * MiB), served.growth() / MiB
        assert served.wait_for(f"D frame with {pairs} pairs cannot fit the 4194304 bytes the limit max_connection_memory")
        _well_behaved(served)
