"""``refwire conform replay``: run one case again from its record and diff.

The case's bytes, splits and gaps come from the run seed and the case id, so
the same seed sends the same script; the testee's timing cannot be replayed,
so what is compared is what was *sent* (chunk by chunk) and what the testee
*did* (its frames as tokens, and how the connection ended).  The first
divergence is printed; exit status 0 when nothing diverged, 1 otherwise.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ..drivers import parse_hostport
from ..protocols import descriptor, names
from .runner import Catalogue, RunConfig, run_server_case

__all__ = ["diff_records", "replay_record"]


def _load(path: Path) -> dict[str, Any]:
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(rec, dict) or "case" not in rec or "wire_log" not in rec:
        raise ValueError(f"{path}: not a case record written by refwire conform")
    return rec


def _script(rec: dict[str, Any]) -> tuple[list[str], list[str]]:
    """What a run did: the hex of each chunk written, and what the testee did (a
    token per frame, then how the connection ended).  Kept apart: how the two
    interleave in the log depends on task scheduling, not on the testee."""
    tx: list[str] = []
    rx: list[str] = []
    for e in rec["wire_log"]:
        if e.get("kind") == "tx":
            tx.append(str(e.get("hex")))
        elif e.get("kind") == "frame":
            rx.append(str(e.get("token")))
    close = rec.get("close") or {}
    rx.append(f"closed by {close.get('by')} ({close.get('how')})")
    return tx, rx


def _first_difference(a: list[str], b: list[str]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def diff_records(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable differences between two records of the same case (empty: none)."""
    (tx_a, rx_a), (tx_b, rx_b) = _script(old), _script(new)
    lines = []
    i = _first_difference(tx_a, tx_b)
    if i is not None:
        lines.append(f"refwire sent different bytes (was the same seed used?): write {i} differs")
    i = _first_difference(rx_a, rx_b)
    if i is not None:
        was = repr(rx_a[i][:80]) if i < len(rx_a) else "nothing"
        now = repr(rx_b[i][:80]) if i < len(rx_b) else "nothing"
        lines.append(f"first divergence at testee step {i}: recorded {was}, now {now}")
    if old.get("verdict") != new.get("verdict"):
        lines.append(f"verdict: recorded {old.get('verdict')}, now {new.get('verdict')}")
    return lines


def recorded_hold(argv: list[str]) -> float | None:
    """The run's declared batch hold (``--holds-batches S``), from its replay line's words."""
    if "--holds-batches" not in argv[:-1]:
        return None
    value = argv[argv.index("--holds-batches") + 1]
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"the record's replay line has --holds-batches {value!r}, not a number of seconds") from None


async def replay_record(
    path: Path, *, server: tuple[str, int] | None = None, time_scale: float = 1.0, exec_template: str | None = None
) -> int:
    """Run the recorded case again (a server case against ``server`` or the
    recorded one; a client case with ``exec_template`` or the recorded
    ``--exec``, or, with neither, by announcing its port and waiting) and diff."""
    rec = _load(path)
    case_id = rec["case"]["id"]
    cat: Catalogue | None = None
    for name in names("conform"):
        candidate: Catalogue = descriptor(name).load("conform")
        if any(c.id == case_id for c in candidate.cases):
            cat = candidate
    if cat is None:
        raise ValueError(f"{path}: case {case_id} is not in any catalogue")
    case = cat.case(case_id)
    if case.role == "client":
        new = await _replay_client(rec, case, cat, time_scale=time_scale, exec_template=exec_template)
        return _report(rec, new, case.id, case.slug)
    argv = shlex.split(rec.get("replay") or "")
    if server is None:
        if "--server" not in argv:
            raise ValueError(f"{path}: the record names no server; pass --server HOST:PORT")
        server = parse_hostport(argv[argv.index("--server") + 1])
    holds = recorded_hold(argv)
    cfg = RunConfig(
        host=server[0],
        port=server[1],
        agent=str(rec.get("agent", "testee")),
        profile=str(rec.get("profile", "strict")),
        seed=int(rec.get("run_seed", 0)),
        time_scale=time_scale,
        replay_base=str(rec.get("replay", "")),
        holds_batches=holds,
    )
    result = await run_server_case(case, cat, cfg, first=False)
    return _report(rec, result.to_json(), case_id, case.slug)


async def _replay_client(
    rec: dict[str, Any], case: Any, cat: Catalogue, *, time_scale: float, exec_template: str | None
) -> dict[str, Any]:
    from .clients import ClientSetup, close_listeners, run_client_case

    argv = shlex.split(rec.get("replay") or "")
    if exec_template is None and "--exec" in argv:
        exec_template = argv[argv.index("--exec") + 1]
    cfg = RunConfig(
        role="client",
        agent=str(rec.get("agent", "testee")),
        profile=str(rec.get("profile", "strict")),
        seed=int(rec.get("run_seed", 0)),
        time_scale=time_scale,
        replay_base=str(rec.get("replay", "")),
    )
    setup = ClientSetup(exec_template=exec_template, announce=lambda line: print(line, flush=True))
    try:
        result = await run_client_case(case, cat, cfg, setup, 0)
    finally:
        await close_listeners(setup)
    return result.to_json()


def _report(rec: dict[str, Any], new: dict[str, Any], case_id: str, slug: str) -> int:
    lines = diff_records(rec, new)
    print(f"{case_id} {slug}: recorded {rec.get('verdict')}, now {new['verdict']}")
    for line in lines:
        print(f"  {line}")
    if not lines:
        print("  same bytes sent, same frames and close observed")
    return 1 if lines else 0
