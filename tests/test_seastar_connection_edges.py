"""Seastar RPC machines at their edges: exact events, error texts and locations,
time limits at the line and one past it, and the clock each call passes."""

from __future__ import annotations

from test_seastar_machines import events, pair


def test_a_cancelled_call_leaves_no_timer_on_any_clock() -> None:
    """``now`` may have any origin: a call cancelled with its deadline at -1.0 still
    disarms its timer (a default of -1.0 once matched it: a stale deadline, then a KeyError)."""
    client, _ = pair()
    mid = client.call(1, b"", now=-2.0, timeout=1.0)
    client.cancel(mid)
    assert client.next_deadline() is None
    client.handle_timer(now=0.0)
    assert events(client) == []
