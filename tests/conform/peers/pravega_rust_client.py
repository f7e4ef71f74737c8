"""A client testee for ``refwire conform pravega --client --exec``: the real
Pravega client (PyPI ``pravega==0.3.8``, Rust core, wire v15) following the
testee contract (specs/pravega/README.md §14) through the case's controller.

    python pravega_rust_client.py CONTROLLER_URI SLUG EVENTS SEED

It creates scope ``conform`` and stream ``SLUG`` (one fixed segment), writes
EVENTS events, flushes, reads them back with a reader group and exits 0 only
when each came back exactly once, in order; 1 when the client raised.  The
Rust client retries some failures forever: the runner kills it at the case's
budget (``exit killed``).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys

import pravega_client


async def read_n(reader: pravega_client.StreamReader, n: int) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < n:
        sl = await reader.get_segment_slice_async()
        for ev in sl:
            got.append(bytes(ev.data()))
        reader.release_segment(sl)
    return got


def main() -> int:
    uri, slug, events, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    sent = [f"{rng.getrandbits(64):016x} {i}".encode() for i in range(events)]
    try:
        mgr = pravega_client.StreamManager(uri)
        mgr.create_scope("conform")
        mgr.create_stream("conform", slug, 1)
        w = mgr.create_writer("conform", slug)
        for ev in sent:
            w.write_event_bytes(ev)
        w.flush()
        rg = mgr.create_reader_group(f"rg{seed % 100000}", "conform", slug)
        r = rg.create_reader("r1")
        got = asyncio.run(asyncio.wait_for(read_n(r, events), 20))
        r.reader_offline()
    except Exception as exc:  # the client's own failure: the contract's exit 1
        print(f"pravega client failed: {exc}", file=sys.stderr)
        return 1
    return 0 if got == sent else 1


if __name__ == "__main__":
    status = main()
    # The Rust core's threads may still call into Python while the interpreter
    # finalizes (SIGABRT at exit): leave without finalizing, with the contract's status.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
