"""Rules see the frames inside a Lumberjack ``C`` (specs/lumberjack/README.md §2.5):
an action on an inner ``J`` re-encodes its envelope around the changed frames,
and an envelope no rule touches passes byte for byte."""

from __future__ import annotations

import io
import json
import zlib
from typing import Any

import pytest
import trio

from refwire.chaos import open_chaos, rules_from
from refwire.chaos.adapter import inner_frames, observer_for, rewrap
from refwire.chaos.proxy import replay_plan
from refwire.lumberjack.frames import encode_event, encode_window

pytestmark = pytest.mark.timeout(60)


def _c_window(seqs: list[int]) -> bytes:
    payloads = [encode_event({"i": s}, 0x32) for s in seqs]
    return encode_window(0x32, seqs, payloads, compression_level=6)


def test_inner_frames_and_rewrap_round_trip() -> None:
    data = _c_window([1, 2, 3])
    o = observer_for("lumberjack", 1 << 20)
    frames = o.feed(data)
    c = next(f for f in frames if f.type == "C")
    inner = inner_frames("lumberjack", c, 1 << 20)
    assert inner is not None and [(f.type, f.fields["seq"]) for f in inner] == [("J", 1), ("J", 2), ("J", 3)]
    again = rewrap("lumberjack", c, [f.data for f in inner])
    assert again[:2] == c.data[:2] and zlib.decompress(again[6:]) == zlib.decompress(c.data[6:])
    assert inner_frames("lumberjack", frames[0], 1 << 20) is None  # the W is no envelope


async def _run(rules: list[dict[str, Any]], replay: Any = None) -> tuple[list[int], str]:
    """Send one C window of seqs 1..5 through the proxy to a raw listener; the bytes it got, as seqs."""
    got = bytearray()
    record = io.StringIO()
    done = trio.Event()

    async def sink(stream: trio.SocketStream) -> None:
        async for chunk in stream:
            got.extend(chunk)
        done.set()

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        nursery.start_soon(trio.serve_listeners, sink, listeners)
        port = listeners[0].socket.getsockname()[1]
        async with open_chaos(
            "lumberjack", upstream=("127.0.0.1", port), schedule=rules_from(rules, "lumberjack", 9), record=record, replay=replay
        ) as proxy:
            host, pport = proxy.addresses[0].rsplit(":", 1)
            s = await trio.open_tcp_stream(host, int(pport))
            await s.send_all(_c_window([1, 2, 3, 4, 5]))
            await s.send_eof()
            with trio.fail_after(5):
                await done.wait()
            await s.aclose()
        nursery.cancel_scope.cancel()
    o = observer_for("lumberjack", 1 << 20)
    seqs = []
    for f in o.feed(bytes(got)):
        inner = inner_frames("lumberjack", f, 1 << 20)
        seqs += [g.fields["seq"] for g in inner or []]
    return seqs, record.getvalue()


async def test_a_rule_drops_a_j_inside_a_c_and_replay_does_it_again() -> None:
    rules = [{"name": "drop-3", "direction": "c2s", "type": "lj:J", "where": {"seq": 3}, "action": "drop"}]
    with trio.fail_after(20):
        seqs, record = await _run(rules)
    assert seqs == [1, 2, 4, 5]
    [action] = [json.loads(ln) for ln in record.splitlines() if '"action"' in ln and '"event": "action"' in ln]
    assert action["type"] == "J" and action["inner"] == 2 and action["fields"]["seq"] == 3
    with trio.fail_after(20):
        again, _ = await _run([], replay=replay_plan(record.splitlines()))
    assert again == [1, 2, 4, 5]


async def test_an_envelope_no_rule_touches_passes_byte_for_byte() -> None:
    rules = [{"name": "other", "direction": "c2s", "type": "lj:J", "where": {"seq": 99}, "action": "drop"}]
    with trio.fail_after(20):
        seqs, record = await _run(rules)
    assert seqs == [1, 2, 3, 4, 5] and '"event": "action"' not in record


def test_the_lumberjack_check_follows_pipelined_windows() -> None:
    """Windows sent back to back before their acks (the npm client does it, seq 1 in
    each): acks apply to the oldest window not fully acked, so nothing is flagged;
    an ack the server never sent is still an injected fault."""
    from refwire.chaos.adapters.lumberjack import LumberjackChecker
    from refwire.lumberjack.frames import encode_ack

    ch = LumberjackChecker()
    o = observer_for("lumberjack", 1 << 20)
    c2s = [f for data in (_c_window([1]), _c_window([1]), _c_window([1])) for f in o.feed(data)]
    for i, f in enumerate(c2s):
        ch.sent(1, "c2s", i, f)
        ch.received(1, "c2s", i, f)
    acks = observer_for("lumberjack", 1 << 20).feed(encode_ack(1) * 3)
    for i, a in enumerate(acks):
        ch.sent(1, "s2c", i, a)
        ch.received(1, "s2c", i, a)
    ch.closed(1)
    assert ch.finish() == []
    [forged] = observer_for("lumberjack", 1 << 20).feed(encode_ack(7))
    ch.received(2, "s2c", 0, forged)
    assert [v.check for v in ch.finish()] == ["acked-but-not-received"]


async def test_a_schedule_file_adds_byte_level_toxics_under_the_simulators_knob_names() -> None:
    """``[[toxic]]`` tables in a schedule: toxiproxy's types, or the simulator's knob
    names (``torn_write`` -> limit_data here); an unknown one is refused naming it."""
    from refwire.chaos import ScheduleError, parse_schedule

    with pytest.raises(ScheduleError, match=r"toxic 1 \(x\).*invalid toxic type"):
        parse_schedule({"toxic": [{"name": "x", "type": "wobble"}]}, "lumberjack")
    schedule = parse_schedule({"toxic": [{"type": "torn_write", "stream": "upstream", "attributes": {"bytes": 5}}]}, "lumberjack")
    assert schedule.toxics[0]["type"] == "limit_data"
    got = bytearray()
    done = trio.Event()

    async def sink(stream: trio.SocketStream) -> None:
        async for chunk in stream:
            got.extend(chunk)
        done.set()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            nursery.start_soon(trio.serve_listeners, sink, listeners)
            port = listeners[0].socket.getsockname()[1]
            async with open_chaos("tcp", upstream=("127.0.0.1", port), schedule=schedule) as proxy:
                host, pport = proxy.addresses[0].rsplit(":", 1)
                s = await trio.open_tcp_stream(host, int(pport))
                try:
                    await s.send_all(b"0123456789")
                except trio.BrokenResourceError:
                    pass
                await done.wait()
                await trio.aclose_forcefully(s)
            nursery.cancel_scope.cancel()
    assert bytes(got) == b"01234"  # the torn write: 5 bytes, then the connection closes
