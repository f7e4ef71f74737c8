"""A client testee for ``refwire conform pravega-draft-2017 --client --exec``:
refwire's own draft client following the testee contract
(specs/pravega-draft-2017/README.md §13).

    python refwire_draft_client.py HOST PORT SLUG EVENTS SEED
"""

from __future__ import annotations

import sys

import trio

from refwire.conform.cases.pravega_draft import client_for_simulation


def main() -> int:
    host, port, slug, events, seed = sys.argv[1:6]
    values = {"slug": slug, "events": events, "seed": seed}
    return trio.run(client_for_simulation, lambda: trio.open_tcp_stream(host, int(port)), values)


if __name__ == "__main__":
    sys.exit(main())
