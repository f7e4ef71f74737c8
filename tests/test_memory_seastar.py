"""The Seastar RPC server's per-connection memory budget, measured as the server process's RSS.

``--connection-memory`` (``Limits.max_connection_memory``, specs/seastar-rpc/README.md §6):
a frame of an RPC connection may take a quarter of it; the data of its requests in
flight a sixteenth (a second admission beside ``--max-memory``'s, which keeps its
meaning) and its unwritten replies as much; it parents at most 4 streams, each of
whose messages, and queue, may take a 32nd.  One hostile connection (with its streams)
may make the process's peak resident memory grow by at most 1.5 x the budget + 32 MiB
(:func:`support.rss.allowance`), at the default budget (256 MiB) and at 16 MiB; what it
sends past the budget is refused with the limit named, and the server goes on serving.

Before the budget (measured on the same shapes, spec §6): 4 streams each sent two 60 MiB
messages took 601 MiB; 8 ``sleep`` calls of 60 MiB under ``--max-memory 1 GiB`` about
500 MiB; and with a 16 MiB budget asked for (ignored then) 16 MiB requests 96 MiB and LZ4
envelopes inflating to 64 MiB 129 MiB.
"""

from __future__ import annotations

import functools
import socket
import struct
import time

from support.rss import MiB, Served, allowance, needs_proc, serving

from refwire.sansio import NEED_DATA
from refwire.seastar_rpc.compression import make_compressor
from refwire.seastar_rpc.connection import ClientConnection, Negotiated, Reply
from refwire.seastar_rpc.frames import Request, StreamMessage

pytestmark = needs_proc

DEFAULT = 256 * MiB
SMALL = ("--connection-memory", str(16 * MiB))
ECHO, SLEEP = 2, 5


def _client(served: Served, *, lz4: bool = False, parent: int | None = None) -> tuple[socket.socket, ClientConnection, Negotiated]:
    """A connection after the negotiation (an RPC connection, or a stream of ``parent``)."""
    s = served.connect()
    c = ClientConnection(compressors=("LZ4",) if lz4 else (), stream_parent=parent)
    c.initiate(now=0.0)
    s.sendall(c.data_to_send())
    while True:
        data = s.recv(65536)
        c.receive_data(data, now=0.0)
        ev = c.next_event()
        if isinstance(ev, Negotiated):
            return s, c, ev
        assert data, "closed during the negotiation"


def _negotiate(served: Served, *, lz4: bool = False, parent: int | None = None) -> tuple[socket.socket, Negotiated]:
    s, _, ev = _client(served, lz4=lz4, parent=parent)
    return s, ev


@functools.cache
def _request(msg_id: int, size: int, verb: int = ECHO) -> bytes:
    """A request of ``size`` data bytes (``sleep``: the first four say 3000 ms)."""
    payload = struct.pack("<i", 3000) + b"x" * (size - 4) if verb == SLEEP else b"x" * size
    return Request(verb, msg_id, payload, 0).encode(with_timeout=True)


@functools.cache
def _lz4(msg_id: int, size: int) -> bytes:
    """An LZ4 envelope (a few KB) inflating to an echo request of ``size`` zero bytes."""
    inner = make_compressor("LZ4").compress(Request(ECHO, msg_id, bytes(size), 0).encode(with_timeout=True))
    return len(inner).to_bytes(4, "little") + inner


@functools.cache
def _message(size: int) -> bytes:
    return StreamMessage(b"s" * size).encode()


def _send(s: socket.socket, *chunks: bytes) -> None:
    """Send what the server takes (it may close, or stop reading: the socket's timeout)."""
    try:
        for chunk in chunks:
            s.sendall(chunk)
    except (ConnectionResetError, BrokenPipeError, TimeoutError):
        pass


def _closed(s: socket.socket) -> bool:
    """Whether the server closed ``s`` (within its timeout; a reset is a close with our bytes unread)."""
    try:
        while s.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def _well_behaved(served: Served) -> None:
    """A fresh connection's echo is answered: the server survives the hostile one."""
    s, c, _ = _client(served)
    c.call(ECHO, b"ping", now=0.0)
    s.sendall(c.data_to_send())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        c.receive_data(s.recv(65536), now=0.0)
        ev = c.next_event()
        if ev is not NEED_DATA:
            assert isinstance(ev, Reply) and ev.payload == b"ping", ev
            break
    s.close()
    assert served.alive()


def _within(served: Served, budget: int) -> None:
    print(f"growth {served.growth() / MiB:.0f} MiB, allowance {allowance(budget) / MiB:.0f} MiB")  # (shown with -s)
    assert served.growth() <= allowance(budget), f"{served.growth() / MiB:.0f} MiB > {allowance(budget) / MiB:.0f} MiB"


def test_streams_at_the_default_budget() -> None:
    """4 streams each sending 8 MiB messages (their cap) that nothing takes hold their
    queues; a fifth stream is refused; a 9 MiB message closes its stream."""
    with serving("seastar-rpc") as served:
        rpc, neg = _negotiate(served)
        streams = []
        for _ in range(4):
            st, _ = _negotiate(served, parent=neg.connection_id)
            st.settimeout(1)  # the server stops reading at its cap: a second is enough to find out
            _send(st, *[_message(8 * MiB)] * 4)
            streams.append(st)
        fifth = served.connect(timeout=30)
        c = ClientConnection(stream_parent=neg.connection_id)
        c.initiate(now=0.0)
        fifth.sendall(c.data_to_send())
        assert _closed(fifth)  # refused: closed without a reply
        assert served.wait_for("max_connection_memory=268435456")
        _within(served, DEFAULT)
        for st in streams:
            st.close()
        rpc.close()
        _well_behaved(served)


def test_a_stream_message_over_its_share_is_refused_at_its_length() -> None:
    with serving("seastar-rpc", *SMALL) as served:
        rpc, neg = _negotiate(served)
        st, _ = _negotiate(served, parent=neg.connection_id)
        _send(st, struct.pack("<I", 512 * 1024 + 1), b"s" * MiB)
        assert _closed(st)
        assert served.wait_for("len 524289 exceeds the 524288 bytes the limit max_connection_memory=16777216 allows a frame")
        rpc.close()
        _well_behaved(served)


def test_streams_at_16_mib() -> None:
    """At 16 MiB a stream's message and queue may take 512 KiB each."""
    with serving("seastar-rpc", *SMALL) as served:
        rpc, neg = _negotiate(served)
        streams = []
        for _ in range(4):
            st, _ = _negotiate(served, parent=neg.connection_id)
            st.settimeout(1)  # the server stops reading at its cap: a second is enough to find out
            _send(st, *[_message(512 * 1024)] * 40)
            streams.append(st)
        _within(served, 16 * MiB)
        for st in streams:
            st.close()
        rpc.close()
        _well_behaved(served)


def test_requests_held_in_flight_under_a_large_max_memory_stay_within_the_default_budget() -> None:
    """``--max-memory 1 GiB`` (the server's admission) no longer lets one connection hold
    8 requests of 60 MiB: past its share (16 MiB) each gets the USER exception, unread."""
    with serving("seastar-rpc", "--max-memory", str(1 << 30)) as served:
        s, _ = _negotiate(served)
        s.settimeout(10)
        _send(s, *(_request(i, 60 * MiB, SLEEP) for i in range(1, 9)))
        _within(served, DEFAULT)
        assert served.wait_for("the limit max_connection_memory=268435456 allows a connection's requests")
        s.close()
        _well_behaved(served)


def test_large_requests_at_16_mib() -> None:
    """At 16 MiB requests over the connection's 1 MiB share (under ``--max-memory``'s 16 MiB)
    are answered with the exception, unread; 1 MiB requests pipelined and never read are
    served; a request over the 4 MiB frame cap (16 MiB: ``--max-memory``'s line) closes."""
    with serving("seastar-rpc", *SMALL) as served:
        s, _ = _negotiate(served)
        s.settimeout(5)
        _send(
            s,
            *(_request(i, 3 * MiB, SLEEP) for i in range(1, 9)),
            *(_request(i, MiB) for i in range(9, 60)),
            _request(60, 16 * MiB - 64),
        )
        _within(served, 16 * MiB)
        assert served.wait_for("the limit max_connection_memory=16777216 allows a connection's requests")
        s.close()
        _well_behaved(served)


def test_a_request_over_the_frame_cap_at_16_mib_closes() -> None:
    with serving("seastar-rpc", *SMALL) as served:
        s, _ = _negotiate(served)
        _send(s, _request(1, 4 * MiB + 1))
        assert _closed(s)
        assert served.wait_for("len 4194305 exceeds the 4194304 bytes the limit max_connection_memory=16777216 allows a frame")
        _well_behaved(served)


def test_lz4_envelopes_inflating_at_16_mib() -> None:
    """Envelopes of a few KB inflating to 3.9 MiB requests (under the 4 MiB frame cap:
    answered with the exception), then one inflating to 16 MiB: refused at its size."""
    with serving("seastar-rpc", *SMALL) as served:
        s, _ = _negotiate(served, lz4=True)
        s.settimeout(5)
        _send(s, *(_lz4(i, 4 * MiB - 100_000) for i in range(1, 17)), _lz4(17, 16 * MiB))
        _within(served, 16 * MiB)
        assert served.wait_for("allows a frame")
        s.close()
        _well_behaved(served)


def test_lz4_envelopes_inflating_at_the_default_budget() -> None:
    """Envelopes inflating to 63 MiB requests (each skipped: over ``--max-memory``)."""
    with serving("seastar-rpc") as served:
        s, _ = _negotiate(served, lz4=True)
        s.settimeout(5)
        _send(s, *(_lz4(i, 63 * MiB) for i in range(1, 9)), *(_request(i, 16 * MiB - 64) for i in range(9, 13)))
        _within(served, DEFAULT)
        s.close()
        _well_behaved(served)
