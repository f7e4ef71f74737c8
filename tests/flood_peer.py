"""A flood of idle connections, from a process of its own (for test_flood.py).

    python flood_peer.py HOST PORT N

Opens N TCP connections to HOST:PORT as fast as it can and holds them, idle;
prints ``open K refused R`` (refused: the server closed it or the connect
failed), then waits until stdin closes.
"""

from __future__ import annotations

import resource
import select
import socket
import sys
import time


def main() -> int:
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, n + 100)), hard))
    socks: list[socket.socket] = []
    refused = 0
    for _ in range(n):
        try:
            socks.append(socket.create_connection((host, port), timeout=5))
        except OSError:
            refused += 1
    # a connection the server closed at once (past its limit) reads EOF; give it a second to do so
    time.sleep(1.0)
    for s in _poll(socks):
        try:
            data = s.recv(64, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:
            data = b""
        if not data:
            refused += 1
    print(f"open {n - refused} refused {refused}", flush=True)
    sys.stdin.read()
    return 0


def _poll(socks: list[socket.socket]) -> list[socket.socket]:
    p = select.poll()
    by_fd = {s.fileno(): s for s in socks}
    for fd in by_fd:
        p.register(fd, select.POLLIN)
    return [by_fd[fd] for fd, _ in p.poll(0)]


if __name__ == "__main__":
    sys.exit(main())
