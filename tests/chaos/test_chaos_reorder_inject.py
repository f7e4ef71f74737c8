"""``reorder`` (a frame passed on after the next one of its direction) and
``inject`` (a vector from specs/<protocol>/vectors put before or after a frame),
seen byte for byte at an upstream that records what it receives, and replayed
from the record."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import trio

from refwire.chaos import ScheduleError, open_chaos, rules_from
from refwire.chaos.proxy import replay_plan
from refwire.specs import load_vectors

pytestmark = pytest.mark.timeout(30)


def tank_frame(body: bytes) -> bytes:
    """A TANK Produce frame (msgId 0x01, payloadLen u32le, specs/tank/README.md §2): the observer cuts it by its header."""
    return b"\x01" + len(body).to_bytes(4, "little") + body


A, B, C = tank_frame(b"aaaa"), tank_frame(b"bbbbbb"), tank_frame(b"cc")
VECTOR = next(v for v in load_vectors("tank", "frames")["vectors"] if v["name"] == "produce-1-message")


async def through(
    rules: list[dict[str, Any]] | None, frames: list[bytes], replay: Any = None
) -> tuple[bytes, list[dict[str, Any]]]:
    """Send ``frames`` one write each, then FIN; what the upstream received, and the decisions."""
    got = bytearray()
    done = trio.Event()

    async def upstream(stream: trio.SocketStream) -> None:
        while data := await stream.receive_some(65536):
            got.extend(data)
        done.set()

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        nursery.start_soon(trio.serve_listeners, upstream, listeners)
        schedule = None if rules is None else rules_from(rules, "tank", 4)
        address = ("127.0.0.1", listeners[0].socket.getsockname()[1])
        async with open_chaos("tank", upstream=address, schedule=schedule, record=io.StringIO(), replay=replay) as proxy:
            host, port = proxy.addresses[0].rsplit(":", 1)
            client = await trio.open_tcp_stream(host, int(port))
            for f in frames:
                await client.send_all(f)
                await trio.sleep(0.05)  # one frame per read: the order is the proxy's doing
            await client.send_eof()
            with trio.fail_after(10):
                await done.wait()
            await client.aclose()
        nursery.cancel_scope.cancel()
    return bytes(got), proxy.decisions


async def test_reorder_passes_a_frame_after_the_next_one() -> None:
    got, decisions = await through([{"name": "swap", "direction": "c2s", "nth": 1, "action": "reorder"}], [A, B, C])
    assert got == B + A + C
    assert [(d["rule"], d["frame"]) for d in decisions] == [("swap", 0)]


async def test_a_reordered_last_frame_goes_out_before_the_end() -> None:
    got, _ = await through([{"name": "swap-last", "direction": "c2s", "nth": 3, "action": "reorder"}], [A, B, C])
    assert got == A + B + C  # no next frame came: held until the FIN, then passed on before it


@pytest.mark.parametrize(
    ("place", "expected"),
    [("before", A + bytes.fromhex(VECTOR["hex"]) + B + C), ("after", A + B + bytes.fromhex(VECTOR["hex"]) + C)],
)
async def test_inject_puts_a_spec_vector_before_or_after_a_frame(place: str, expected: bytes) -> None:
    rule = {"name": "inj", "direction": "c2s", "nth": 2, "action": "inject", "vector": "frames/produce-1-message", "place": place}
    got, decisions = await through([rule], [A, B, C])
    assert got == expected
    [d] = decisions
    assert d["params"]["vector"] == "frames/produce-1-message" and d["params"]["payload"] == VECTOR["hex"]


async def test_replay_reorders_and_injects_at_the_same_frames() -> None:
    rules = [
        {"name": "swap", "direction": "c2s", "nth": 2, "action": "reorder"},
        {"name": "inj", "direction": "c2s", "nth": 1, "action": "inject", "vector": "produce-1-message"},
    ]
    first, decisions = await through(rules, [A, B, C])
    again, redone = await through(None, [A, B, C], replay=replay_plan([json.dumps(d) for d in decisions]))
    assert again == first == bytes.fromhex(VECTOR["hex"]) + A + C + B
    assert [(d["rule"], d["frame"], d["action"]) for d in redone] == [(d["rule"], d["frame"], d["action"]) for d in decisions]


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"action": "inject"}, "action 'inject' needs a vector"),
        ({"action": "inject", "vector": "no-such-vector"}, "no vector 'no-such-vector' in specs/tank/vectors (e.g. "),
        ({"action": "inject", "vector": "bundles/produce-1-message"}, "no vector 'bundles/produce-1-message'"),
        ({"action": "inject", "vector": "produce-1-message", "place": "middle"}, "unknown place 'middle' (known: before, after)"),
        (
            {"action": "shuffle"},
            "unknown action 'shuffle' (known: drop, delay, duplicate, reorder, split, truncate, corrupt, rewrite, inject,",
        ),
    ],
)
def test_a_bad_reorder_or_inject_rule_is_refused_naming_it(rule: dict[str, Any], message: str) -> None:
    with pytest.raises(ScheduleError, match=r"^schedule: rule 1 \(r\): ") as info:
        rules_from([{"name": "r", **rule}], "tank")
    assert message in str(info.value)
