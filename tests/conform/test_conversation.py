"""The scripted connection: write splits, the wire log, and its bounds."""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from refwire.conform.cases.lumberjack import ServerObserver
from refwire.conform.conversation import Conversation

pytestmark = pytest.mark.timeout(30)


def _pair() -> tuple[trio.abc.Stream, trio.abc.Stream]:
    a, b = trio.testing.memory_stream_pair()
    return a, b


@pytest.mark.parametrize(("split", "writes"), [("whole", 1), ("bytes", 12), ([3, 7], 3), ([0, 99, 5], 2)])
async def test_send_splits(split: object, writes: int) -> None:
    ours, _theirs = _pair()
    conv = Conversation(ours, ServerObserver(), rng=random.Random(1))
    assert await conv.send(b"x" * 12, label="twelve", split=split)  # type: ignore[arg-type]
    tx = [e for e in conv.log if e["kind"] == "tx"]
    assert len(tx) == writes and "".join(e["hex"] for e in tx) == (b"x" * 12).hex()
    assert conv.log[0]["kind"] == "action" and "twelve" in conv.log[0]["text"]


async def test_seeded_splits_depend_only_on_the_rng() -> None:
    async def cuts(seed: int) -> list[int]:
        ours, _ = _pair()
        conv = Conversation(ours, ServerObserver(), rng=random.Random(seed))
        await conv.send(bytes(100), split="seeded")
        return [e["len"] for e in conv.log if e["kind"] == "tx"]

    assert await cuts(4) == await cuts(4)
    assert {tuple(await cuts(s)) for s in range(12)} != {(100,)}  # some seeds do split


async def test_a_trickling_flood_is_bounded() -> None:
    ours, theirs = _pair()
    conv = Conversation(ours, ServerObserver(), rng=random.Random(1), max_log_entries=30, max_frames=50)
    ack = b"2A\x00\x00\x00\x01"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conv.reader)

        async def flood() -> None:
            while True:
                await theirs.send_all(ack)
                await trio.sleep(0)

        nursery.start_soon(flood)
        assert await conv.wait_for(lambda c: c.flooded, 10.0)
        nursery.cancel_scope.cancel()
    assert conv.tokens[-1] == "flood" and len(conv.tokens) == 51
    assert len(conv.log) <= 31 and conv.log_dropped > 0
    assert any("flood: more than 50 frames" in f for f in conv.facts)


async def test_testee_close_is_seen() -> None:
    ours, theirs = _pair()
    conv = Conversation(ours, ServerObserver(), rng=random.Random(1))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conv.reader)
        await theirs.send_all(b"2A\x00\x00\x00\x02")
        await theirs.aclose()
        assert await conv.wait_close(5.0)
    assert conv.tokens == ["A 2"] and conv.closed_by_testee == "FIN"
