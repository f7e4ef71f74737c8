"""The segments a server testee must hold before a run (§13), the check the
runner makes of them before the first case (:func:`check_segments`, the
catalogue's ``prepare``), and the pre-create step that makes them on refwire's
store (``python -m refwire.conform.cases.pravega_draft [--run-id R] HOST:PORT``,
:mod:`.__main__`).

The draft has no CreateSegment (§6.2, D16): the runner cannot make its segments
through the protocol.  Each run's segments carry its run id
(:func:`~._common.segment_of`), so one store serves any number of runs, each
with segments of its own, made beforehand for that run id.
"""

from __future__ import annotations

import random
import sys
import uuid

import trio

from ....pravega.draft2017.frames import ReadSegment, SetupAppend
from ...conversation import Conversation
from ...ids import RunIdError, check_run_id, new_run_id
from ...runner import Prepare, RunAborted
from . import server
from ._common import ServerObserver, segment_of

#: The command that makes a run's segments on refwire's store (§13).
PRECREATE = "python -m refwire.conform.cases.pravega_draft"


def server_segments(run_id: str = "") -> list[str]:
    """The segments a server testee must hold, empty, before run ``run_id`` (§13)."""
    return [segment_of(c.id, run_id) for c in server.BOOK.cases]


async def precreate(host: str, port: int, run_id: str = "") -> int:
    """§13's pre-create step for refwire's store: create every case segment of run
    ``run_id`` through the **current** dialect's CreateSegment at ``host:port``
    (the store's ``--listen``, not its draft listener).  Returns how many were new."""
    from ....pravega.client import create_segment

    made = 0
    for name in server_segments(run_id):
        made += bool(await create_segment(host, port, name))
    return made


async def check_segments(p: Prepare) -> None:
    """The runner's check before the first case (§13): every chosen case's
    segment of this run exists and is empty.  Per segment, one connection:
    SetupAppend under a fresh ConnectionId, then ReadSegment from offset 1.  A
    store closes the connection at once at a missing segment (§6.2, §9: before
    the AppendSetup) and at a read beyond an empty segment's end (§7: after
    it); it answers the read only when the segment holds data -- from an
    earlier run under this run id.  Nothing here waits for a silence: a store
    that does none of these within the wait is left to the cases.
    :class:`RunAborted`, one line saying what to do, otherwise."""
    for case in p.cases:
        name = segment_of(case.id, p.run_id)
        state = await _probe(p, name)
        if state == "missing":
            raise RunAborted(
                f"{p.address} holds no segment {name}, which this run (run id {p.run_id}) writes to: the 2017 draft "
                f"cannot create segments (§13); create this run's segments first, {_todo(p.run_id)}"
            )
        if state == "written":
            fresh = new_run_id()
            raise RunAborted(
                f"{p.address}: segment {name} already holds data, from an earlier run with run id {p.run_id} (§13 wants "
                f"it empty); use a fresh run id: create its segments, {_todo(fresh)}"
            )


def _todo(run_id: str) -> str:
    return (
        f"then run with --run-id {run_id} (refwire's store: {PRECREATE} --run-id {run_id} HOST:PORT, on its "
        f"current-dialect --listen address; another store: create the names {PRECREATE} --list --run-id {run_id} prints)"
    )


async def _probe(p: Prepare, name: str) -> str:
    """``"missing"``, ``"written"``, ``"empty"``, or ``"unknown"`` (no answer in time)."""
    stream = await p.connect()
    conv = Conversation(stream, ServerObserver(), rng=random.Random(0), time_scale=p.time_scale)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conv.reader)
        probe = SetupAppend(connection_id=uuid.uuid4(), segment=name).encode()
        probe += ReadSegment(segment=name, offset=1, suggested_length=8).encode()
        await conv.send(probe, split="whole")
        await conv.wait_for(_decided, 3.0)
        nursery.cancel_scope.cancel()
    if conv.closed_by_testee is None:
        await conv.close("FIN")
    if any(t.startswith("read ") for t in conv.tokens):
        return "written"
    if conv.closed_by_testee is not None:
        return "empty" if any(t.startswith("setup ") for t in conv.tokens) else "missing"
    return "unknown"


def _decided(c: Conversation) -> bool:
    return c.closed_by_testee is not None or any(t.startswith("read ") for t in c.tokens)


def _usage() -> int:
    print(f"usage: {PRECREATE} [--run-id R] HOST:PORT | --list [--run-id R]", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    """``python -m refwire.conform.cases.pravega_draft [--run-id R] HOST:PORT``: the
    §13 pre-create step against refwire's store (its current-dialect ``--listen``
    address), for run id R (default: a fresh one, printed with the command that
    uses it); ``--list [--run-id R]`` prints the segment names instead."""
    args = list(sys.argv[1:] if argv is None else argv)
    run_id: str | None = None
    if "--run-id" in args:
        i = args.index("--run-id")
        if i + 1 >= len(args):
            return _usage()
        try:
            run_id = check_run_id(args[i + 1])
        except RunIdError as exc:
            print(f"{PRECREATE}: --run-id {exc}", file=sys.stderr)
            return 2
        del args[i : i + 2]
    if args == ["--list"]:
        print("\n".join(server_segments(run_id or "")))
        return 0
    if len(args) != 1 or ":" not in args[0]:
        return _usage()
    host, _, port = args[0].rpartition(":")
    if not port.isdigit():
        return _usage()
    run_id = run_id or new_run_id()
    try:
        made = trio.run(precreate, host, int(port), run_id)
    except OSError as exc:
        print(f"{PRECREATE}: cannot reach {args[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"{made} of {len(server_segments(run_id))} case segments created for run id {run_id}")
    print(f"then: refwire conform pravega-draft-2017 --server DRAFT-HOST:PORT --run-id {run_id}")
    return 0
