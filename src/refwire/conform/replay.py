"""``refwire conform replay``: run one case again from its record and diff.

The case's bytes, splits and gaps come from the run seed and the case id, its
names and markers from the run id (:mod:`refwire.conform.ids`).  A replay runs
under a **fresh** run id by default, so that it meets nothing the recorded run
left on a long-lived testee, and masks both run ids when it compares the bytes;
``--run-id R`` reuses the recorded one against a testee that was reset since.
Every other option the recorded run had -- TLS, ``--declare``, ``--sink``,
``--holds-batches``, ``--time-scale``, ``--timeout``, ``--max-rx-bytes`` -- is
read back from the record's replay line, through the same parser and the same
configuration code as the run itself (``--time-scale`` and ``--server`` may be
overridden).  The testee's timing cannot be replayed, so what is compared is
what was *sent* (chunk by chunk) and what the testee *did* (its frames as
tokens, and how the connection ended).  The first divergence is printed; exit
status 0 when nothing diverged, 1 otherwise, 2 when the case cannot run.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

from ..protocols import descriptor, names
from .ids import mask, new_run_id
from .model import Case
from .options import OptionsError, declared, replay_parser, server_config
from .runner import Catalogue, RunAborted, RunConfig, prepare_run, run_server_case

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


def _script(rec: dict[str, Any], run_ids: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """What a run did: the hex of each chunk written, and what the testee did (a
    token per frame, then how the connection ended).  Kept apart: how the two
    interleave in the log depends on task scheduling, not on the testee.

    The run ids are masked over the bytes written *as one stream*, then cut
    again at the same chunk boundaries: a seeded split may fall inside a name."""
    chunks: list[bytes | str] = []
    rx: list[str] = []
    for e in rec["wire_log"]:
        if e.get("kind") == "tx":
            text = str(e.get("hex"))
            try:
                chunks.append(bytes.fromhex(text))
            except ValueError:
                chunks.append(text)
        elif e.get("kind") == "frame":
            rx.append(str(e.get("token")))
    close = rec.get("close") or {}
    rx.append(f"closed by {close.get('by')} ({close.get('how')})")
    masked = mask(b"".join(c for c in chunks if isinstance(c, bytes)), *run_ids)
    tx: list[str] = []
    at = 0
    for c in chunks:
        if isinstance(c, str):
            tx.append(c)
            continue
        tx.append(masked[at : at + len(c)].hex())
        at += len(c)
    return tx, rx


def recorded_run_id(rec: dict[str, Any]) -> str | None:
    """The run id of a record: its own field, else its replay line's ``--run-id``
    (None: a record from before run ids)."""
    rid = rec.get("run_id")
    if isinstance(rid, str) and rid:
        return rid
    argv = shlex.split(str(rec.get("replay") or ""))
    return argv[argv.index("--run-id") + 1] if "--run-id" in argv[:-1] else None


def _first_difference(a: list[str], b: list[str]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def diff_records(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable differences between two records of the same case (empty:
    none).  The two records' run ids are masked in the bytes sent; a case that
    did not run (UNSUPPORTED, SKIPPED) on one side is said to, with why, instead
    of comparing bytes that were never sent."""
    ran = {"UNSUPPORTED", "SKIPPED"}
    lines: list[str] = []
    if new.get("verdict") in ran and old.get("verdict") not in ran:
        lines.append(f"the case did not run now ({new.get('verdict')}): {new.get('reason') or 'no reason given'}")
    elif old.get("verdict") in ran and new.get("verdict") not in ran:
        lines.append(f"the case did not run in the recorded run ({old.get('verdict')}): {old.get('reason') or 'no reason given'}")
    else:
        ids = tuple(r for r in (recorded_run_id(old), recorded_run_id(new)) if r)
        (tx_a, rx_a), (tx_b, rx_b) = _script(old, ids), _script(new, ids)
        i = _first_difference(tx_a, tx_b)
        if i is not None:
            why = (
                "the recorded run predates run ids, so the names the case sends differ"
                if recorded_run_id(old) is None
                else "same seed and case, run ids masked: what the testee did before it took the case another way"
            )
            lines.append(f"refwire's write {i} differs from the recorded one ({why})")
        i = _first_difference(rx_a, rx_b)
        if i is not None:
            was = repr(rx_a[i][:80]) if i < len(rx_a) else "nothing"
            now = repr(rx_b[i][:80]) if i < len(rx_b) else "nothing"
            lines.append(f"first divergence at testee step {i}: recorded {was}, now {now}")
    if old.get("verdict") != new.get("verdict"):
        why = f" ({new.get('reason')})" if new.get("reason") and new.get("verdict") not in ran else ""
        lines.append(f"verdict: recorded {old.get('verdict')}, now {new.get('verdict')}{why}")
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


def _catalogue_of(path: Path, case_id: str) -> Catalogue:
    for name in names("conform"):
        candidate: Catalogue = descriptor(name).load("conform")
        if any(c.id == case_id for c in candidate.cases):
            return candidate
    raise ValueError(f"{path}: case {case_id} is not in any catalogue")


def recorded_options(path: Path, rec: dict[str, Any], cat: Catalogue) -> argparse.Namespace:
    """The options of the recorded run, parsed from its replay line by the
    parser of ``refwire conform PROTOCOL`` itself."""
    argv = shlex.split(str(rec.get("replay") or ""))
    if argv[:2] != ["refwire", "conform"] or len(argv) < 3:
        raise ValueError(f"{path}: the record's replay line is not a refwire conform command: {rec.get('replay')!r}")
    try:
        args: argparse.Namespace = replay_parser().parse_args(argv[3:])
        return args
    except ValueError as exc:
        raise ValueError(f"{path}: the record's replay line cannot be read ({exc}): {rec.get('replay')!r}") from None


async def replay_record(
    path: Path,
    *,
    server: tuple[str, int] | None = None,
    time_scale: float | None = None,
    exec_template: str | None = None,
    run_id: str | None = None,
) -> int:
    """Run the recorded case again (a server case against ``server`` or the
    recorded one; a client case with ``exec_template`` or the recorded
    ``--exec``, or, with neither, by announcing its port and waiting) under
    every recorded option (``time_scale``: the recorded one unless given), with
    ``run_id`` or a fresh one, and diff."""
    rec = _load(path)
    case_id = rec["case"]["id"]
    cat = _catalogue_of(path, case_id)
    case = cat.case(case_id)
    args = recorded_options(path, rec, cat)
    if time_scale is not None:
        args.time_scale = time_scale
    seed = args.seed if args.seed is not None else int(rec.get("run_seed", 0))
    run_id = run_id or new_run_id()
    try:
        declared_off = declared(args.declare, cat)
    except OptionsError as exc:
        raise OptionsError(f"the recorded run's {exc}") from None
    again = " (the recorded one)" if run_id == recorded_run_id(rec) else ""
    print(f"{case.id} {case.slug}: replaying with seed {seed}, run id {run_id}{again}")
    if case.role == "client":
        new = await _replay_client(rec, case, cat, args, seed=seed, run_id=run_id, declared_off=declared_off, exec_template=exec_template)
        return _report(rec, new, case.id, case.slug)
    if server is not None:
        args.server = server
    if args.server is None:
        raise ValueError(f"{path}: the record names no server; pass --server HOST:PORT")
    cfg = server_config(args, cat, seed=seed, run_id=run_id, declared_off=declared_off)
    try:
        await prepare_run(cat, cfg, [case])
        result = await run_server_case(case, cat, cfg, first=True)
    except RunAborted as exc:
        print(f"refwire: {exc}")
        return 2
    return _report(rec, result.to_json(), case_id, case.slug)


async def _replay_client(
    rec: dict[str, Any],
    case: Case,
    cat: Catalogue,
    args: argparse.Namespace,
    *,
    seed: int,
    run_id: str,
    declared_off: frozenset[str],
    exec_template: str | None,
) -> dict[str, Any]:
    from .clients import ClientSetup, close_listeners, run_client_case

    cfg = RunConfig(
        role="client",
        agent=str(rec.get("agent", "testee")),
        profile=args.profile,
        declared_off=declared_off,
        seed=seed,
        run_id=run_id,
        time_scale=args.time_scale,
        timeout=args.timeout,
        max_rx_bytes=args.max_rx_bytes,
        replay_base=str(rec.get("replay", "")).split(" --cases ", 1)[0],
    )
    setup = ClientSetup(exec_template=exec_template or args.exec_template, announce=lambda line: print(line, flush=True))
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
