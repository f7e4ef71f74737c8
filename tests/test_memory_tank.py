"""The TANK broker's per-connection memory budget, measured as the server process's RSS.

``--connection-memory`` (``Limits.max_connection_memory``, specs/tank/README.md §6, limits):
a request may take a third of it (a request byte costs about 3x: received bytes, payload,
the validated messages), one answer's chunks a third, a connection's parked long polls a
quarter and its unread answers a sixteenth.  One hostile connection may make the process's
peak resident memory grow by at most 1.5 x the budget + 32 MiB (:func:`support.rss.allowance`),
at the default budget (256 MiB) and at 16 MiB.  What a produce stores is the store's, not the
connection's, but the RSS counts it: the produce shapes store at most one bundle.

Before the budget (the same shapes): 100 polls woken by one 8 MiB produce took 1624 MiB, one
consume naming a stored 8 MiB bundle 1020 times 1823 MiB, 200 pipelined consumes of it by a
client that reads nothing 280 MiB, and a 16 MiB produce 48 MiB (a 16 MiB budget allows 56).
"""

from __future__ import annotations

import functools
import socket
import struct
import time

from support.rss import MiB, Served, allowance, needs_proc, serving

from refwire.tank.bundles import Message, encode_bundle
from refwire.tank.frames import ConsumePartition, ConsumeRequest, ConsumeTopic, ProducePartition, ProduceRequest, ProduceTopic
from refwire.wire import encode_uvarint

pytestmark = needs_proc

DEFAULT = 256 * MiB
SMALL = 16 * MiB
TAIL = 2**64 - 1


@functools.cache
def _produce(size: int, rid: int = 1) -> bytes:
    bundle = encode_bundle([Message(b"a" * size, ts=1)], compress=False)
    return ProduceRequest(rid, (ProduceTopic("t", (ProducePartition(0, bundle),)),)).encode()


def _consume(rid: int, layout: list[tuple[str, list[tuple[int, int]]]], *, max_wait: int = 0, min_bytes: int = 0) -> bytes:
    topics = tuple(ConsumeTopic(n, tuple(ConsumePartition(p, s, 64 * MiB) for p, s in ps)) for n, ps in layout)
    return ConsumeRequest(rid, topics, max_wait, min_bytes).encode()


def _exchange(served: Served, data: bytes, *, read: bool = True) -> bytes:
    """Send ``data``, then (with ``read``) read until the broker closes (it answers what it read,
    then closes) or 30 s pass without bytes: a bound 10x what a loaded machine takes, not a wait."""
    s = served.connect(timeout=30)
    got = b""
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)  # the broker answers what it read, then closes
        if read:
            while chunk := s.recv(1 << 20):
                got += chunk
    except (TimeoutError, ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()
    return got


def _well_behaved(served: Served) -> None:
    """A small produce is answered (0x01, request id 9, err 0): the broker survived."""
    got = _exchange(served, _produce(100, rid=9))
    assert b"\x01\x05\x00\x00\x00\x09\x00\x00\x00\x00" in got, got[:64]
    assert served.alive()


def _serve(budget: int) -> tuple[str, ...]:
    return ("--topic", "t:255", "--connection-memory", str(budget))


def test_a_64_mib_produce_is_stored_within_the_default_budget() -> None:
    """The largest request (one 64 MiB bundle) is taken; the peak counts the stored copy too."""
    with serving("tank", *_serve(DEFAULT)) as served:
        got = _exchange(served, _produce(64 * MiB - 100))
        assert b"\x01\x05\x00\x00\x00\x01\x00\x00\x00\x00" in got
        assert served.growth() <= allowance(DEFAULT), served.growth() / MiB


def test_a_16_mib_budget_refuses_a_6_mib_produce_at_its_header() -> None:
    """16 MiB: a request may take 5.3 MiB; one of 6 MiB closes the connection from its header."""
    with serving("tank", *_serve(SMALL)) as served:
        assert b"\x01\x05\x00\x00\x00" not in _exchange(served, _produce(6 * MiB))  # no answer: closed
        assert served.growth() <= allowance(SMALL), served.growth() / MiB
        assert served.wait_for("max_connection_memory=16777216"), "".join(served.lines)[-2000:]
        _well_behaved(served)


def test_a_16_mib_budget_takes_a_5_mib_produce() -> None:
    with serving("tank", *_serve(SMALL)) as served:
        got = _exchange(served, _produce(5 * MiB))
        assert b"\x01\x05\x00\x00\x00\x01\x00\x00\x00\x00" in got
        assert served.growth() <= allowance(SMALL), served.growth() / MiB


def test_a_request_trickled_towards_the_limit_holds_what_was_received() -> None:
    """A header announcing 64 MiB + 60 KiB, then 48 MiB of it, never completed."""
    with serving("tank", *_serve(DEFAULT)) as served:
        s = served.connect()
        s.sendall(struct.pack("<BI", 1, 64 * MiB + 60 * 1024 - 5))
        block = b"x" * MiB
        for _ in range(48):
            s.sendall(block)
        time.sleep(0.5)
        assert served.growth() <= allowance(DEFAULT), served.growth() / MiB
        s.close()
        _well_behaved(served)


def _woken(budget: int, size: int, polls: int) -> None:
    """``polls`` polls parked on t/0 by a client that reads nothing, then one produce of ``size`` wakes them."""
    with serving("tank", *_serve(budget)) as served:
        poller = served.connect()
        poller.sendall(b"".join(_consume(i + 1, [("t", [(0, TAIL)])], max_wait=3_600_000, min_bytes=1) for i in range(polls)))
        time.sleep(0.5)
        assert b"\x01\x05\x00\x00\x00\x01\x00\x00\x00\x00" in _exchange(served, _produce(size))
        time.sleep(1.0)
        assert served.growth() <= allowance(budget), served.growth() / MiB
        poller.close()
        _well_behaved(served)


def test_polls_woken_by_a_large_produce_stay_within_the_default_budget() -> None:
    _woken(DEFAULT, 32 * MiB, 100)


def test_polls_woken_by_a_produce_stay_within_a_16_mib_budget() -> None:
    _woken(SMALL, 4 * MiB, 100)


def _fanout(budget: int, size: int, namings: int) -> None:
    """``size`` stored, then one consume naming it ``namings`` times (4 topic entries)."""
    with serving("tank", *_serve(budget)) as served:
        _exchange(served, _produce(size))
        served.mark()
        got = _exchange(served, _consume(1, [("t", [(0, 1)] * (namings // 4))] * 4))
        assert served.growth() <= allowance(budget), served.growth() / MiB
        assert len(got) < budget // 3 + MiB
        _well_behaved(served)


def test_one_consume_naming_a_bundle_many_times_stays_within_the_default_budget() -> None:
    _fanout(DEFAULT, 8 * MiB, 1020)


def test_one_consume_naming_a_bundle_many_times_stays_within_a_16_mib_budget() -> None:
    _fanout(SMALL, 4 * MiB, 1020)


def _unread(budget: int, size: int) -> None:
    """``size`` stored, then 200 pipelined consumes of it by a client that reads nothing."""
    with serving("tank", *_serve(budget)) as served:
        _exchange(served, _produce(size))
        served.mark()
        _exchange(served, b"".join(_consume(i + 1, [("t", [(0, 1)])]) for i in range(200)), read=False)
        time.sleep(2.0)
        assert served.growth() <= allowance(budget), served.growth() / MiB
        _well_behaved(served)


def test_answers_a_client_does_not_read_stay_within_the_default_budget() -> None:
    _unread(DEFAULT, 8 * MiB)


def test_answers_a_client_does_not_read_stay_within_a_16_mib_budget() -> None:
    _unread(SMALL, 4 * MiB)


def test_parked_polls_naming_many_partitions_stay_within_a_16_mib_budget() -> None:
    """300 polls each naming 2 x 255 partitions at their end: the connection's share
    (4 MiB at 256 B a naming) answers the oldest early; what is parked stays bounded."""
    with serving("tank", *_serve(SMALL)) as served:
        s = served.connect()
        layout = [("t", [(p, TAIL) for p in range(255)])] * 2
        try:
            s.sendall(b"".join(_consume(i + 1, layout, max_wait=3_600_000, min_bytes=1) for i in range(300)))
        except (ConnectionResetError, BrokenPipeError):
            pass
        time.sleep(1.0)
        assert served.growth() <= allowance(SMALL), served.growth() / MiB
        s.close()
        _well_behaved(served)


def _tiny_messages(n: int) -> bytes:
    """A produce of one bundle of ``n`` 2-byte messages (empty, the timestamp repeated):
    what costs a broker most per byte sent -- each decoded message's objects, not its bytes."""
    body = b"\x00" + b"\x00" * 8 + b"\x00" + b"\x02\x00" * (n - 1)
    bundle = b"\x00" + encode_uvarint(n) + body
    return ProduceRequest(1, (ProduceTopic("t", (ProducePartition(0, bundle),)),)).encode()


def test_a_bundle_of_millions_of_tiny_messages_is_refused_from_its_count_at_16_mib() -> None:
    """2.8 million 2-byte messages fit a 16 MiB budget's request share (5.3 MiB) but were held
    as 306 MiB (about 110 bytes a message); the count is now refused from the bundle's header,
    each message counted as 128 bytes at least (found by a review, not by the first tests)."""
    with serving("tank", *_serve(SMALL)) as served:
        _exchange(served, _tiny_messages(2_796_000))
        assert served.growth() <= allowance(SMALL), served.growth() / MiB
        assert served.wait_for("messages: each is held as 128 bytes or more"), "".join(served.lines)[-2000:]
        _well_behaved(served)
