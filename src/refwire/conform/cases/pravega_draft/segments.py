"""The segments a server testee must hold before a run (§13), and the pre-create
step that makes them on refwire's store
(``python -m refwire.conform.cases.pravega_draft HOST:PORT``, :mod:`.__main__`).
"""

from __future__ import annotations

import sys

import trio

from . import server
from ._common import segment_of


def server_segments() -> list[str]:
    """The segments a server testee must hold, empty, before a run (§13)."""
    return [segment_of(c.id) for c in server.BOOK.cases]


async def precreate(host: str, port: int) -> int:
    """§13's pre-create step for refwire's store: create every case segment through
    the **current** dialect's CreateSegment at ``host:port`` (the store's
    ``--listen``, not its draft listener).  Returns how many were new."""
    from ....pravega.client import create_segment

    made = 0
    for name in server_segments():
        made += bool(await create_segment(host, port, name))
    return made


def main(argv: list[str] | None = None) -> int:
    """``python -m refwire.conform.cases.pravega_draft HOST:PORT``: the §13 pre-create
    step against refwire's store (its current-dialect ``--listen`` address);
    ``--list`` prints the segment names instead."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--list"]:
        print("\n".join(server_segments()))
        return 0
    if len(args) != 1 or ":" not in args[0]:
        print("usage: python -m refwire.conform.cases.pravega_draft HOST:PORT | --list", file=sys.stderr)
        return 2
    host, _, port = args[0].rpartition(":")
    made = trio.run(precreate, host, int(port))
    print(f"{made} of {len(server_segments())} case segments created")
    return 0
