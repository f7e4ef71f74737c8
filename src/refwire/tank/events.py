"""Events of the TANK Sans-IO machines (:mod:`refwire.tank.connection`);
specs/tank/README.md §5, §6.

The machines *produce* these (``next_event()``); they *take* requests and
responses as the frame classes of :mod:`refwire.tank.frames` and
:mod:`refwire.tank.responses`.  The client's answers to produces and consumes
arrive as :class:`~refwire.tank.responses.ProduceResponse` and
:class:`ConsumeResult` (the chunks walked, §5); the broker's requests as the
request frames.
"""

from __future__ import annotations

import attrs

from .bundles import ChunkResult
from .responses import ConsumeResponse, ProduceResponse, Response

__all__ = ["ClientEvent", "Connected", "ConnectionClosed", "ConsumeResult", "IdleTimeout", "PartitionData"]


@attrs.frozen
class Connected:
    """The broker's greeting Ping arrived."""


@attrs.frozen
class ConnectionClosed:
    """The connection ended (``clean``: at a frame boundary, by the peer).  On the
    client, ``unanswered`` lists the request ids still in flight: they have no
    answer and their outcome is unknown (a produce may or may not be stored)."""

    clean: bool
    reason: str = ""
    unanswered: tuple[int, ...] = ()


@attrs.frozen
class IdleTimeout:
    """Broker: nothing happened for ``idle_timeout`` seconds; close the connection."""

    idle_for: float


@attrs.frozen
class PartitionData:
    """One partition of a consume response, with its chunk walked (§5)."""

    topic: str
    partition: int
    error: int
    hwmark: int
    requested_seq: int
    chunk: ChunkResult | None = None  #: for err 0 / 0xfe
    first_avail: int | None = None  #: for err 0x01

    @property
    def messages(self) -> tuple[object, ...]:
        return self.chunk.messages if self.chunk else ()


@attrs.frozen
class ConsumeResult:
    """A Consume response with every partition's chunk walked into messages
    (:class:`PartitionData`), and the topics the broker did not know."""

    request_id: int
    partitions: tuple[PartitionData, ...]
    unknown_topics: tuple[str, ...]
    response: ConsumeResponse = attrs.field(repr=False)


#: What the client machine's ``next_event()`` gives.
ClientEvent = Connected | ConnectionClosed | ProduceResponse | ConsumeResult | Response
