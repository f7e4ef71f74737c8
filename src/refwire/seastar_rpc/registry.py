"""The verb registry of a Seastar RPC server: verb number -> async handler
(specs/seastar-rpc/README.md §3).

Which verbs exist and which of them are one-way is the application's choice, not
on the wire; :class:`~refwire.seastar_rpc.server.SeastarServer` dispatches each
call through a :class:`VerbRegistry` (an unknown verb gets UNKNOWN_VERB).  This
module imports no trio: a registry can be built, inspected and tested without a
server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs

__all__ = ["Handler", "Verb", "VerbRegistry"]

#: ``async def handler(ctx, payload) -> bytes | None``: returning sends the reply
#: (``None`` = empty data); see :mod:`refwire.seastar_rpc.server` for what raising does.
#: ``ctx`` is the server's :class:`~refwire.seastar_rpc.server.CallContext` (annotate it
#: so in a handler); it is ``Any`` here because the server imports this module, never
#: the other way round.
Handler = Callable[[Any, bytes], Awaitable[bytes | None]]


@attrs.frozen
class Verb:
    """One registered verb."""

    handler: Handler
    one_way: bool
    name: str


class VerbRegistry:
    """Verb number -> async handler."""

    def __init__(self) -> None:
        self._verbs: dict[int, Verb] = {}

    def register(self, verb: int, handler: Handler, *, one_way: bool = False, name: str = "") -> None:
        """Serve ``verb`` (a u64) with ``handler``; a ``one_way`` verb never
        replies.  ``name`` (default: the handler's) is for logs and listings."""
        if not 0 <= verb < 2**64:
            raise ValueError("a verb is a u64")
        self._verbs[verb] = Verb(handler, one_way, name or getattr(handler, "__name__", str(verb)))

    def unregister(self, verb: int) -> None:
        """Stop serving ``verb`` (calls to it then get UNKNOWN_VERB)."""
        self._verbs.pop(verb, None)

    def get(self, verb: int) -> Verb | None:
        """The registered verb, or None."""
        return self._verbs.get(verb)

    def names(self) -> dict[int, str]:
        """Verb number -> name, in number order."""
        return {k: v.name for k, v in sorted(self._verbs.items())}
