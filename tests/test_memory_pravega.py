"""The Pravega segment store's per-connection memory budget, both dialects, measured as the
server process's RSS.

``--connection-memory`` (``Limits.max_connection_memory``, specs/pravega/README.md §11,
specs/pravega-draft-2017/README.md §11, :mod:`refwire.pravega.budget`): a frame (and the
draft's block and partial message) may take an eighth of it, the replies owed to a client a
quarter (at most 16 MiB), reads parked at the tail an eighth.  One hostile connection may make
the process's peak resident memory grow by at most 1.5 x the budget + 32 MiB
(:func:`support.rss.allowance`), at the default budget (256 MiB) and at 16 MiB, plus what the
store accepted (the store's, not the connection's: :data:`STORE_COST` per byte stored).

Before the budget (the same shapes against the code before it, measured): 400 reads parked at
the tail and woken by 2 MiB of data, the client not reading, took 807 MiB (300: 606 MiB; the
draft's 1000: 2010 MiB, its 300: 607 MiB); a 16 MiB AppendBlock with its AppendBlockEnd 65 MiB; a
client asking for 2 MiB reads and never reading 68 MiB; 1000 parked reads with a 64,000-character
segment name and token 127 MiB; the draft's 8 MiB Event and 16 MiB Event straddling the End 128 MiB.
Every test here failed against that code.  The shapes at the default budget that the old caps already
kept inside the allowance (partial events at the protocol's 16 MiB frames) are checked too.
"""

from __future__ import annotations

import contextlib
import functools
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator

from support.rss import MiB, Served, allowance, needs_proc, serving

from refwire.pravega.draft2017 import frames as draft
from refwire.pravega.draft2017.partial import split_message
from refwire.pravega.frames import (
    CLIENT_LIMITS,
    MAX_WIRECOMMAND_SIZE,
    AppendBlock,
    AppendBlockEnd,
    AppendSetup,
    CreateSegment,
    DataAppended,
    GetStreamSegmentInfo,
    Hello,
    PartialEvent,
    ReadSegment,
    SegmentCreated,
    SetupAppend,
    StreamSegmentInfo,
    encode_event,
)
from refwire.pravega.frames_codec import CommandDecoder

pytestmark = needs_proc

DEFAULT = 256 * MiB
SMALL = 16 * MiB
#: what a byte the store accepted may cost the process at its peak: the segment's bytearray
#: (grown by realloc, which may copy it) -- the store's memory, not the connection's
STORE_COST = 2
HELLO = Hello(high_version=17, low_version=5).encode()
W = uuid.UUID(int=7)
CID = uuid.UUID(int=9)
DRAFT_READY = r"listening on (\S+):(\d+) \(segment store, draft"


# --------------------------------------------------------------------------- helpers


def _store(served: Served) -> tuple[str, int]:
    """The address of today's dialect (the draft tests' way to create and inspect segments)."""
    m = re.search(r"listening on (\S+):(\d+) \(segment store\)", "".join(served.lines))
    assert m is not None
    return m[1], int(m[2])


def _replies(s: socket.socket, n: int) -> list[object]:
    """The next ``n`` replies on ``s`` (bounded by the socket's timeout)."""
    dec = CommandDecoder(CLIENT_LIMITS)
    got: list[object] = []
    while len(got) < n:
        cmd = dec.next_command()
        if cmd is not None:
            got.append(cmd)
            continue
        data = s.recv(1 << 20)
        assert data, f"closed after {got}"
        dec.feed(data)
    return got


def _create(addr: tuple[str, int], segment: str) -> None:
    with socket.create_connection(addr, timeout=30) as s:
        s.sendall(HELLO + CreateSegment(request_id=1, segment=segment).encode())
        assert isinstance(_replies(s, 2)[1], SegmentCreated)


def _length(addr: tuple[str, int], segment: str) -> int:
    with socket.create_connection(addr, timeout=30) as s:
        s.sendall(HELLO + GetStreamSegmentInfo(request_id=1, segment_name=segment).encode())
        info = _replies(s, 2)[1]
        assert isinstance(info, StreamSegmentInfo)
        return info.write_offset


def _append(addr: tuple[str, int], segment: str, n: int, size: int = MiB) -> None:
    """``n`` appends of ``size`` bytes (a bare AppendBlockEnd each), acked."""
    with socket.create_connection(addr, timeout=30) as s:
        s.sendall(HELLO + SetupAppend(request_id=2, writer_id=uuid.uuid4(), segment=segment).encode())
        setup = _replies(s, 2)[1]
        assert isinstance(setup, AppendSetup), setup
        wid = setup.writer_id
        for k in range(1, n + 1):
            end = AppendBlockEnd(writer_id=wid, size_of_whole_events=0, data=b"x" * size, num_events=1, last_event_number=k, request_id=k)
            s.sendall(end.encode())
        assert all(isinstance(r, DataAppended) for r in _replies(s, n))


def _deaf(served: Served) -> socket.socket:
    """A client that does not read: a small receive buffer, set before connecting."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10)
    s.connect(served.address)
    return s


def _send(s: socket.socket, data: bytes) -> bool:
    """Send; False once the server stops reading (its backpressure) or closes."""
    try:
        s.sendall(data)
    except OSError:
        return False
    return True


@functools.cache
def _partial_cycle(k: int, block_data: int, end_data: int) -> bytes:
    """An AppendBlock of ``block_data`` bytes (a whole Event and a PartialEvent) and the
    AppendBlockEnd of ``end_data`` bytes that completes its second event."""
    e1 = encode_event(b"a" * 1000)
    first = block_data - len(e1) - 8
    ev2 = encode_event(b"b" * (first + end_data - 8))
    block = e1 + PartialEvent(data=ev2[:first]).encode()
    end = AppendBlockEnd(writer_id=W, size_of_whole_events=len(e1), data=ev2[first:], num_events=2, last_event_number=2 * k, request_id=k)
    return AppendBlock(writer_id=W, data=block).encode() + end.encode()


def _partial_events(served: Served, segment: str, n: int, block_data: int, end_data: int) -> bool:
    """``n`` partial-event cycles from one writer; True if all were acked."""
    _create(served.address, segment)
    with socket.create_connection(served.address, timeout=30) as s:
        s.sendall(HELLO + SetupAppend(request_id=2, writer_id=W, segment=segment).encode())
        _replies(s, 2)
        for k in range(1, n + 1):
            if not _send(s, _partial_cycle(k, block_data, end_data)):
                return False
        try:
            return all(isinstance(r, DataAppended) for r in _replies(s, n))
        except (AssertionError, OSError):
            return False


@functools.cache
def _reads(segment: str, n: int, token: str = "") -> bytes:
    return b"".join(
        ReadSegment(segment=segment, offset=0, suggested_length=2 * MiB, delegation_token=token, request_id=10 + i).encode()
        for i in range(n)
    )


@functools.cache
def _draft_reads(segment: str, n: int) -> bytes:
    return b"".join(draft.ReadSegment(segment=segment, offset=0, suggested_length=2 * MiB).encode() for _ in range(n))


@functools.cache
def _draft_straddle(e1_data: int, e2_data: int) -> bytes:
    """SetupAppend, then a block whose second Event begins as a partial message inside it
    and ends after its EndAppendBlock (§6.4)."""
    e1 = draft.Event(data=b"a" * e1_data).encode()
    e2 = draft.Event(data=b"b" * e2_data).encode()
    parts = split_message(e2, [1000, 1000 + (len(e2) - 1000) // 2])
    blen = len(e1) + len(e2)
    return (
        draft.BeginAppendBlock(connection_id=CID, connection_offset=0, length=len(e1) + len(parts[0])).encode()
        + e1
        + parts[0]
        + draft.EndAppendBlock(connection_id=CID, connection_offset=blen, block_length=blen).encode()
        + b"".join(parts[1:])
    )


@functools.cache
def _draft_setup(segment: str) -> bytes:
    return draft.SetupAppend(connection_id=CID, segment=segment).encode()


@contextlib.contextmanager
def _drained(s: socket.socket) -> Iterator[None]:
    """Read and drop what ``s`` receives, in a thread, while the block runs."""
    stop = threading.Event()
    r = s.dup()  # its own timeout: ``s`` keeps its own for sending

    def run() -> None:
        r.settimeout(0.2)
        while not stop.is_set():
            try:
                if not r.recv(1 << 20):
                    return
            except TimeoutError:
                continue
            except OSError:
                return

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(timeout=5)
        r.close()


def _well_behaved(served: Served, segment: str) -> None:
    """Afterwards a writer is served: the hostile connection did not take the server down."""
    _append(_store(served), segment, 1, 1000)
    assert served.alive()


def _within(served: Served, budget: int, stored: int = 0) -> None:
    growth = served.growth()
    print(f"growth {growth / MiB:.1f} MiB (budget {budget / MiB:.0f} MiB, stored {stored / MiB:.1f} MiB)")
    assert growth <= allowance(budget) + STORE_COST * stored, (growth / MiB, allowance(budget) / MiB, stored / MiB)


def _parked_woken(served: Served, segment: str, n: int, *, is_draft: bool = False) -> None:
    """``n`` reads of 2 MiB parked at the tail by a client that does not read, then 2 MiB
    arrive: every read is woken with data (the replies would be ``n`` x 2 MiB)."""
    store = _store(served)
    _create(store, segment)
    s = _deaf(served)
    try:
        if is_draft:
            _send(s, _draft_reads(segment, n))
        else:
            _send(s, HELLO + _reads(segment, n))
        time.sleep(1.0)  # the reads are parked (the peak, measured afterwards, is the assertion)
        _append(store, segment, 2)
        time.sleep(2.0)  # the woken reads answer as far as the budget lets them
    finally:
        s.close()


# --------------------------------------------------------------------------- today's dialect


def test_current_default_budget_parked_reads_woken_and_partial_events() -> None:
    """Default budget: 400 parked reads woken by 2 MiB for a client that does not read (before:
    807 MiB), then two 16 MiB AppendBlocks each completed by an 8 MiB AppendBlockEnd
    (what the protocol's own caps allow; stored, so counted as the store's)."""
    with serving("pravega", "--no-controller") as served:
        _parked_woken(served, "s/parked/0", 400)
        _within(served, DEFAULT, 2 * MiB)
        served.mark()
        block, end = MAX_WIRECOMMAND_SIZE - 24 - 8, 8 * MiB - 64
        assert _partial_events(served, "s/partial/0", 2, block, end)
        _within(served, DEFAULT, 2 * (block + end))
        _well_behaved(served, "s/partial/0")


def test_current_16_mib_refuses_a_large_block_at_its_header_and_takes_one_at_its_share() -> None:
    """16 MiB: a frame may take 2 MiB.  A 16 MiB AppendBlock is refused at its length field
    (before: 65 MiB with its AppendBlockEnd); partial events at the share are acked."""
    with serving("pravega", "--no-controller", "--connection-memory", str(SMALL)) as served:
        assert not _partial_events(served, "s/big/0", 1, MAX_WIRECOMMAND_SIZE - 24 - 8, 8 * MiB - 64)
        assert served.wait_for("AppendBlock frame of 16777207 bytes exceeds the 2097152 bytes the limit max_connection_memory=16777216 allows a frame")
        _within(served, SMALL)
        served.mark()
        share = SMALL // 8
        block, end = share - 24, share - 52  # the AppendBlock frame, and the AppendBlockEnd frame, at the share
        assert _partial_events(served, "s/share/0", 4, block, end)
        _within(served, SMALL, 4 * (block + end))
        assert not _partial_events(served, "s/over/0", 1, block + 1, end)  # one byte past
        _well_behaved(served, "s/share/0")


def test_current_16_mib_parked_reads_woken_and_a_client_that_does_not_read() -> None:
    """16 MiB: 300 parked reads woken with 2 MiB each (before: 606 MiB), then 300 reads
    of 2 MiB asked and never read (before: 68 MiB): at most 4 MiB of replies are owed."""
    with serving("pravega", "--no-controller", "--connection-memory", str(SMALL)) as served:
        _parked_woken(served, "s/parked/0", 300)
        _within(served, SMALL, 2 * MiB)
        served.mark()
        s = _deaf(served)
        try:
            _send(s, HELLO + _reads("s/parked/0", 300))
            time.sleep(1.0)
        finally:
            s.close()
        _within(served, SMALL)
        _well_behaved(served, "s/parked/0")


def test_current_16_mib_parked_reads_with_64_kib_strings() -> None:
    """16 MiB: 1000 reads parked at the tail of a segment with a 64,000-character name, each
    with a 64,000-character token (before: each held about 128 KiB, 127 MiB in all): past the
    parked share (2 MiB) the oldest is answered empty at once."""
    name = "n" * 64_000
    with serving("pravega", "--no-controller", "--connection-memory", str(SMALL)) as served:
        _create(served.address, name)
        served.mark()
        s = served.connect()
        with contextlib.closing(s), _drained(s):
            s.sendall(HELLO + _reads(name, 1000, "t" * 64_000))
            time.sleep(1.0)
        _within(served, SMALL)
        _well_behaved(served, name)


# --------------------------------------------------------------------------- the 2017 draft


def test_draft_default_budget_parked_reads_woken_and_a_straddling_event() -> None:
    """Default budget: 400 parked reads woken by 2 MiB for a client that does not read (before,
    1000 of them: 2010 MiB; 300: 607 MiB), then an 8 MiB Event and a 16 MiB one straddling the EndAppendBlock."""
    args = ("--no-controller", "--draft-listen", "127.0.0.1:0")
    with serving("pravega", *args, ready=DRAFT_READY) as served:
        _parked_woken(served, "s/parked/0", 400, is_draft=True)
        _within(served, DEFAULT, 2 * MiB)
        _create(_store(served), "s/straddle/0")
        served.mark()
        with served.connect() as s:
            s.sendall(_draft_setup("s/straddle/0") + _draft_straddle(8 * MiB, 16 * MiB - 32))
            deadline = time.monotonic() + 30
            while _length(_store(served), "s/straddle/0") == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
        assert _length(_store(served), "s/straddle/0") == 24 * MiB - 32 + 16
        _within(served, DEFAULT, 24 * MiB)
        _well_behaved(served, "s/straddle/0")


def test_draft_16_mib_refuses_a_large_partial_message_and_takes_one_at_its_share() -> None:
    """16 MiB: a frame, a block and a partial message may take 2 MiB each.  The 16 MiB Event
    straddling the End is refused (before: 128 MiB); one at the share is stored."""
    args = ("--no-controller", "--draft-listen", "127.0.0.1:0", "--connection-memory", str(SMALL))
    with serving("pravega", *args, ready=DRAFT_READY) as served:
        _create(_store(served), "s/big/0")
        with served.connect() as s:
            _send(s, _draft_setup("s/big/0") + _draft_straddle(MiB, 16 * MiB - 32))
            assert served.wait_for("max_connection_memory=16777216")
        _within(served, SMALL)
        assert _length(_store(served), "s/big/0") == 0
        served.mark()
        share = SMALL // 8
        _create(_store(served), "s/share/0")
        e2 = share - 8 - 9  # the Event frame is the partial message, at the share
        with served.connect() as s:
            s.sendall(_draft_setup("s/share/0") + _draft_straddle(share // 2, e2))
            deadline = time.monotonic() + 30
            while _length(_store(served), "s/share/0") == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
        assert _length(_store(served), "s/share/0") == share // 2 + e2 + 16
        _within(served, SMALL, share)
        _well_behaved(served, "s/share/0")


def test_draft_16_mib_parked_reads_woken_and_with_long_names() -> None:
    """16 MiB: 300 parked reads woken with 2 MiB each (before: 607 MiB), then 1000 reads
    parked on a segment with a 64,000-character name (before: about 64 MiB)."""
    args = ("--no-controller", "--draft-listen", "127.0.0.1:0", "--connection-memory", str(SMALL))
    with serving("pravega", *args, ready=DRAFT_READY) as served:
        _parked_woken(served, "s/parked/0", 300, is_draft=True)
        _within(served, SMALL, 2 * MiB)
        name = "n" * 64_000
        _create(_store(served), name)
        served.mark()
        s = served.connect()
        with contextlib.closing(s), _drained(s):
            s.sendall(_draft_reads(name, 1000))
            time.sleep(1.0)
        _within(served, SMALL)
        _well_behaved(served, name)

