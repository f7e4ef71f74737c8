"""TANK frames and requests the machine tests share (specs/tank/README.md §5, §6): the
captured frames by name, and a one-partition ConsumeRequest."""

from __future__ import annotations

from tank_vectors import load, unhex

from refwire.tank import ConsumePartition, ConsumeRequest, ConsumeTopic

#: The captured frames of ``specs/tank/vectors/frames.json``, by vector name.
FRAMES = {v["name"]: unhex(v["hex"]) for v in load("frames.json")}


def consume(
    rid: int, topic: str, pid: int, seq: int, fetch: int = 0x08000000, wait: int = 0, min_bytes: int = 0
) -> ConsumeRequest:
    """A ConsumeRequest for one partition of one topic, from ``seq``."""
    return ConsumeRequest(rid, (ConsumeTopic(topic, (ConsumePartition(pid, seq, fetch),)),), wait, min_bytes)
