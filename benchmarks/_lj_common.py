"""Shared by the Lumberjack benchmark workers: the event shape and how a worker
reports back to the orchestrator.  Stdlib only (the load generator imports it).

Workers print one line ``PORT <n>`` (servers, once listening) and one line
``RESULT <json>`` (everyone, at the end) on stdout; everything else goes to
stderr.
"""

from __future__ import annotations

import json
import sys
from typing import Any

HOST = "127.0.0.1"
TIMESTAMP = "2025-11-21T21:50:00.000Z"


def make_event(i: int) -> dict[str, Any]:
    """One event as in perf-baseline-lumberjack.md: 108-112 B as ``json.dumps``."""
    return {"@timestamp": TIMESTAMP, "host": "bench", "seq": i, "message": f"event {i:06d} lorem ip"}


def make_events(n: int) -> list[dict[str, Any]]:
    return [make_event(i) for i in range(n)]


def event_payloads(n: int) -> list[bytes]:
    """The events as JSON bytes, ``json.dumps`` default separators (as pylogbeat)."""
    return [json.dumps(make_event(i)).encode("utf-8") for i in range(n)]


def announce_port(port: int) -> None:
    sys.stdout.write(f"PORT {port}\n")
    sys.stdout.flush()


def report(result: dict[str, Any]) -> None:
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


def fail(message: str) -> None:
    sys.stderr.write(f"{sys.argv[0]}: {message}\n")
    sys.stderr.flush()
    raise SystemExit(2)
