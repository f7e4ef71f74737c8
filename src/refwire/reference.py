"""refwire's own servers, run for someone else's tests.

A protocol's descriptor names ``reference_server``: an ``async serve_reference(nursery, config, workdir)``
that starts the protocol's server on 127.0.0.1 and a free port inside ``nursery`` and returns a
:class:`RunningServer`.  :func:`serve_in_thread` runs one on a trio loop in a thread of its own, so sync,
trio and asyncio tests can all talk to it; the pytest plugin (:mod:`refwire.conform.pytest_plugin`) makes a
fixture of each.  Nothing here names a protocol.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["RunningServer", "serve_in_thread"]


class RunningServer:
    """A refwire server running for a test: where it listens and what it received."""

    def __init__(self, host: str, port: int, sink: Path) -> None:
        self.host = host
        self.port = port
        #: a JSON-lines file holding every event, written before its batch is acked
        #: (``--refwire-sink`` / ``refwire conform --sink`` can judge delivery with it);
        #: an empty file for a protocol whose server receives no events.
        self.sink = sink
        #: every event the application received, in order (JSON objects; Lumberjack v1 key/value pairs as dicts).
        self.events: list[Any] = []
        #: every batch, as its list of events.
        self.batches: list[list[Any]] = []
        #: the server object itself (stats, transitions, storage), once started.
        self.server: Any = None
        #: Pravega: the controller's URI (``tcp://HOST:PORT``) pointing at this store; "" otherwise.
        self.controller = ""
        #: called on the server's loop when it stops (after its tasks are cancelled).
        self.on_close: Callable[[], None] = lambda: None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __repr__(self) -> str:
        return f"<refwire server at {self.address}: {len(self.events)} events>"


T = TypeVar("T")


@contextlib.contextmanager
def serve_in_thread(
    name: str, start: Callable[[Any], Awaitable[T]], close: Callable[[], None] = lambda: None, *, timeout: float = 10.0
) -> Iterator[T]:
    """Run a refwire server on a trio loop in a thread of its own for the
    ``with`` block: ``start(nursery)`` starts it (``nursery.start`` its serving
    task) and returns what the block gets; leaving the block cancels the
    loop, calls ``close()`` in it and joins the thread (within ``timeout``)."""
    import trio

    started = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        try:
            async with trio.open_nursery() as nursery:
                state["value"] = await start(nursery)
                state["token"] = trio.lowlevel.current_trio_token()
                state["scope"] = nursery.cancel_scope
                started.set()
        finally:
            started.set()
            close()

    def thread_main() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # reported to the caller below
            state["error"] = exc

    thread = threading.Thread(target=thread_main, name=f"refwire-{name.lower()}-server", daemon=True)
    thread.start()
    if not started.wait(timeout) or "scope" not in state:
        thread.join(timeout)
        raise RuntimeError(f"refwire's {name} server did not start: {state.get('error')!r}")
    try:
        yield state["value"]
    finally:
        trio.from_thread.run_sync(state["scope"].cancel, trio_token=state["token"])
        thread.join(timeout)
