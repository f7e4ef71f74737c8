"""``refwire sim``: a batch of seeds (or one replayed seed) as a person reads it,
and how it stops on Ctrl-C (:class:`refwire.interrupts.OneInterrupt`).

* One line per seed (a failing seed adds its detail and its replay command),
  then one summary line per protocol (runs, passed, failed) and the total.
* Ctrl-C stops at once: the interrupted seed gets no verdict (no line, no
  row), ``interrupted after N seeds`` goes to stderr, exit status 130.  A
  second Ctrl-C while the command winds down changes nothing.
* ``--shrink`` prints each step in words (``k=v``), never a Python dict.
* ``--pcap FILE`` writes each run's connections as pcapng at virtual time
  (the same seed, the same file): FILE itself for one run, else one file per
  run with the seed (and, with several protocols, the protocol) inserted
  before the suffix: ``run.pcapng`` -> ``run-7.pcapng``, ``run-tank-7.pcapng``.

:func:`planted_bugs_epilog` is the text ``refwire sim --help`` ends with.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "add_sim_arguments",
    "planted_bugs",
    "planted_bugs_epilog",
    "run_sim",
]


def planted_bugs() -> list[tuple[str, str, str]]:
    """``(protocol, bug, what it breaks)`` for every planted bug a scenario knows."""
    from .scenarios import scenario, scenario_names

    out = []
    for protocol in scenario_names():
        found = scenario(protocol)
        notes: Mapping[str, str] = getattr(found, "BUG_NOTES", {})
        for bug in getattr(found, "BUGS", ()):
            out.append((protocol, str(bug), notes.get(bug, "")))
    return out


def planted_bugs_epilog() -> str:
    """The end of ``refwire sim --help``: each planted bug, one line each."""
    bugs = planted_bugs()
    if not bugs:
        return ""
    width = max(len(f"{p} {b}") for p, b, _ in bugs) + 2
    lines = ['planted bugs (plant one with --knobs \'{"workload": {"bug": NAME}}\'; the run must fail):']
    lines += [f"  {f'{p} {b}':<{width}}{note}" for p, b, note in bugs]
    return "\n".join(lines)


def add_sim_arguments(sim: argparse.ArgumentParser, protocols: tuple[str, ...]) -> None:
    """The options of ``refwire sim`` (and its epilog: the planted bugs)."""
    from ..cliutil import positive_int

    sim.formatter_class = argparse.RawDescriptionHelpFormatter
    plain_help = sim.format_help

    def format_help() -> str:  # the epilog loads every scenario: only when help is shown
        if sim.epilog is None:
            sim.epilog = planted_bugs_epilog()
        return plain_help()

    sim.format_help = format_help  # type: ignore[method-assign]
    sim.add_argument("protocol", nargs="?", default="all", help=f"one of: {', '.join(protocols)}, or all (default)")
    sim.add_argument("--seeds", type=positive_int, default=20, metavar="N", help="run N seeds (default 20)")
    sim.add_argument("--first-seed", type=int, default=0, metavar="K", help="first seed of the batch (default 0)")
    sim.add_argument("--seed", type=int, metavar="S", help="replay this one seed")
    sim.add_argument("--knobs", metavar="JSON", help='override fault knobs / workload: {"faults": {...}, "workload": {...}}')
    sim.add_argument("--shrink", action="store_true", help="shrink every failing seed and print its minimal replay command")
    sim.add_argument("--json", action="store_true", help="print one JSON object per run instead of text")
    sim.add_argument("--trace", action="store_true", help="print the last trace lines of failing runs")
    sim.add_argument(
        "--pcap",
        metavar="FILE",
        help="write each run's connections to FILE as pcapng for Wireshark, at virtual time (the same seed gives the "
        "same file); with several seeds or protocols, one file per run: the seed (and protocol) inserted before "
        "the suffix, e.g. run-7.pcapng",
    )


def run_sim(args: argparse.Namespace, protocols: list[str]) -> int:
    """Run ``refwire sim`` for checked ``protocols``; the exit status (0, 1, or 130 on Ctrl-C).

    Raises:
        UsageError: ``--knobs`` is not valid.
    """
    from ..cliutil import UsageError
    from ..interrupts import OneInterrupt
    from ..pcap import PcapPathError, PcapWriter, numbered_path
    from .faults import Faults
    from .runner import SimResult, check_workload, describe_knobs, run_seed, shrink

    faults = None
    workload = None
    if args.knobs:
        try:
            knobs = json.loads(args.knobs)
            if not isinstance(knobs, dict):
                raise ValueError('give a JSON object: {"faults": {...}, "workload": {...}}')
            if "faults" in knobs:
                faults = Faults.from_dict(knobs["faults"])
            workload = knobs.get("workload")
            if workload is not None:
                if not isinstance(workload, dict):
                    raise ValueError("the workload must be a JSON object")
                for proto in protocols:
                    check_workload(proto, workload)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise UsageError(f"--knobs is not valid: {exc}") from None
    seeds = [args.seed] if args.seed is not None else list(range(args.first_seed, args.first_seed + args.seeds))
    pcap = getattr(args, "pcap", None)

    def pcap_file(proto: str, seed: int) -> Path | None:
        if not pcap:
            return None
        return numbered_path(pcap, *([proto] if len(protocols) > 1 else []), *([seed] if len(seeds) > 1 else []))

    if pcap:  # an unwritable path is refused before any seed runs
        first = pcap_file(protocols[0], seeds[0])
        assert first is not None
        try:
            PcapWriter(first).close()
        except PcapPathError as exc:
            raise UsageError(f"--pcap: {exc}") from None
    out = sys.stderr if args.json else sys.stdout
    seeds_text = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}..{seeds[-1]}"
    results: dict[str, list[SimResult]] = {p: [] for p in protocols}
    t0 = time.perf_counter()
    with OneInterrupt() as ctrl_c:
        try:
            with ctrl_c.deferred():
                where = ""
                if pcap:
                    many = len(protocols) * len(seeds) > 1
                    where = f", pcapng one file per run ({pcap_file(protocols[0], seeds[0])}, ...)" if many else f", pcapng {pcap}"
                print(f"sim {', '.join(protocols)}: {seeds_text}{where}", file=sys.stderr, flush=True)
            for proto in protocols:
                for seed in seeds:
                    try:
                        r = run_seed(proto, seed, faults=faults, workload=workload, pcap=pcap_file(proto, seed))
                    except PcapPathError as exc:
                        raise UsageError(f"--pcap: {exc}") from None
                    with ctrl_c.deferred():  # a seed is counted exactly when its verdict is printed
                        results[proto].append(r)
                        _show(r, args)
                    if not r.ok and args.shrink:
                        log = None if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
                        small = shrink(r, log=log)
                        print(f"     shrunk to {describe_knobs(small.faults, small.workload)}", file=out, flush=True)
                        print(f"     shrunk: {small.replay()}", flush=True)
        except KeyboardInterrupt:
            done = sum(len(rs) for rs in results.values())
            print(f"interrupted after {done} seeds", file=sys.stderr, flush=True)
            return 130
    dt = time.perf_counter() - t0
    total = sum(len(rs) for rs in results.values())
    failed = sum(1 for rs in results.values() for r in rs if not r.ok)
    width = max(len(p) for p in protocols) + 1
    for proto, rs in results.items():
        bad = sum(1 for r in rs if not r.ok)
        print(f"{proto + ':':<{width}}  {len(rs)} runs, {len(rs) - bad} passed, {bad} failed", file=out)
    print(f"{total} runs, {total - failed} passed, {failed} failed ({dt:.1f}s)", file=out)
    return 1 if failed else 0


def _show(r: Any, args: argparse.Namespace) -> None:
    """One line for a seed (a failing one adds its detail, replay and, with ``--trace``, its trace)."""
    from .faults import Faults

    if args.json:
        print(json.dumps(r.to_row(), sort_keys=True), flush=True)
        return
    status = "ok  " if r.ok else "FAIL"
    kinds = ",".join(Faults.from_dict(r.faults).enabled_kinds()) or "none"
    print(
        f"{status} {r.protocol} seed={r.seed} outcome={r.outcome}{':' + r.violation if r.violation else ''} "
        f"trace={r.trace_hash} t={r.sim_time:.1f}s events={r.counts.get('events_total', 0)} "
        f"deliveries={r.counts.get('deliveries', 0)} reconnects={r.counts.get('client_reconnects', 0)} faults={kinds}",
        flush=True,
    )
    if r.ok:
        return
    print(f"     {r.detail}")
    print(f"     replay: {r.replay()}", flush=True)
    if args.trace:
        for line in r.trace_tail:
            print(f"       | {line}")
