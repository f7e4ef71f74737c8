"""``refwire conform``: test your own implementation of a protocol.

    refwire conform lumberjack --server HOST:PORT [options]     test a server
    refwire conform lumberjack --client [--exec CMD] [options]  test a client (refwire plays the server)
    refwire conform list [PROTOCOL] [--role server|client] [--tags T]
    refwire conform show CASE
    refwire conform replay RECORD.json [--server HOST:PORT] [--run-id R]
    refwire conform matrix DIR/index.json ... --out DIR

Every run has a seed and a run id (printed, and recorded in every replay line and
in index.json): the seed decides each case's random choices, the run id the
names and markers the cases leave on the testee, so runs against one
long-lived testee never meet each other's topics, segments or events
(:mod:`refwire.conform.ids`).  ``--run-id`` reuses one (against a testee that
was reset); by default each run draws a fresh one (``--sim``: the seed's).

Exit status: 0 no FAIL (NON-STRICT allowed unless ``--strict``); 1 a FAIL, a
case whose testee was down, or a regression against ``--baseline``; 2 bad
arguments, a harness error, or a testee that refused the first connection
(client mode: an ``--exec`` that cannot start); 130 interrupted (Ctrl-C: the
cases finished so far are reported, with ``"interrupted": true`` in index.json).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import secrets
import shlex
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from ..cliutil import Commands, UsageError, hostport, sigint_ignored
from ..protocols import descriptor, names
from .console import escape, new_console, print_line, summary
from .ids import natural_key, new_run_id, seed_run_id
from .model import CaseResult
from .options import (
    OptionsError,
    check_selection,
    declared,
    recorded_options,
    run_id_arg,
    run_options,
    scale_arg,
    server_config,
)
from .report import FORMATS, merge_indexes, write_html, write_reports
from .runner import HOLDS_BATCHES, Catalogue, RunAborted, RunConfig, RunResult, run_cases

__all__ = ["register"]


def _catalogue(protocol: str) -> Catalogue:
    try:
        cat: Catalogue = descriptor(protocol, "conform").load("conform")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return cat


def _all_catalogues() -> list[Catalogue]:
    return [_catalogue(n) for n in names("conform")]


def register(cmds: Commands) -> None:
    conform = cmds.top.add_parser(
        "conform",
        help="test your implementation of a protocol against refwire's cases",
        description="Run refwire's conformance cases against your server (refwire plays the client), "
        "list and show the cases, replay one from its record, or merge runs into one matrix.",
    )
    sub = conform.add_subparsers(dest="conform_command", metavar="PROTOCOL|list|show|replay|matrix")
    for proto in names("conform"):
        p = sub.add_parser(proto, help=f"run the {proto} cases against a testee")
        run_options(p)
        p.set_defaults(func=_run_entry, protocol=proto)

    ls = sub.add_parser("list", help="the catalogue: ids, slugs, titles, spec sections, tags")
    ls.add_argument("protocol", nargs="?", help="one protocol (default: all)")
    ls.add_argument("--role", choices=("server", "client"), help="only cases testing this role")
    ls.add_argument("--tags", metavar="T,…", help="only cases with one of these tags")
    ls.add_argument("--json", action="store_true", help="one JSON object per case")
    ls.set_defaults(func=_list)

    show = sub.add_parser("show", help="one case in full")
    show.add_argument("case", help="a case id or slug (lj.S4.4, zlib-bomb)")
    show.set_defaults(func=_show)

    rp = sub.add_parser("replay", help="re-run one case from its record and diff the new trace against it")
    rp.add_argument("record", type=Path, help="DIR/<agent>/<case>.json from an earlier run")
    rp.add_argument(
        "--server", type=hostport, metavar="HOST:PORT", help="the testee (default: the one recorded in the replay command)"
    )
    rp.add_argument(
        "--time-scale", type=scale_arg, default=None, metavar="X", help="multiply every budget and wait by X (default: the recorded one)"
    )
    rp.add_argument(
        "--run-id",
        type=run_id_arg,
        default=None,
        metavar="R",
        help="the run id the case's names carry: the recorded one against a testee that was reset since "
        "(default: a fresh one, masked when the bytes are compared)",
    )
    rp.add_argument(
        "--exec", dest="exec_template", metavar="CMD", help="a client case: the client command (default: the recorded --exec)"
    )
    rp.set_defaults(func=_replay)

    mx = sub.add_parser("matrix", help="merge several runs' index.json into one agent x case matrix")
    mx.add_argument("indexes", nargs="+", type=Path, metavar="INDEX.json", help="the index.json of each report (each run of refwire conform writes one in its --out directory)")
    mx.add_argument("--out", type=Path, required=True, metavar="DIR", help="where index.html and index.json go")
    mx.set_defaults(func=_matrix)


def _formats(text: str) -> list[str]:
    fmts = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in fmts if f not in FORMATS]
    if bad or not fmts:
        raise UsageError(f"--format: unknown format(s) {', '.join(bad) or '(none)'}; choose from {', '.join(FORMATS)}")
    return fmts


@attrs.frozen
class _Common:
    """What every run of cases reads from its arguments the same way."""

    formats: list[str]
    baseline: dict[str, Any] | None
    seed: int
    declared_off: frozenset[str]
    run_id: str


def _common(args: argparse.Namespace, cat: Catalogue, *, role: str = "server") -> _Common:
    """Check ``--profile``, ``--format``, ``--baseline``, ``--declare``,
    ``--cases``, ``--exclude`` and ``--tags``, and draw the run seed and the run
    id when none was given (server, client and ``--sim`` runs alike; ``--sim``
    derives its run id from the seed, so that its trace depends on the seed alone)."""
    if args.profile not in cat.profiles:
        raise UsageError(f"--profile {args.profile!r} is unknown; {cat.protocol} has: {', '.join(cat.profiles)}")
    check_selection(cat, role, args.cases, args.tags, args.exclude)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    run_id = args.run_id or (seed_run_id(seed) if getattr(args, "sim", False) else new_run_id())
    return _Common(
        formats=_formats(args.format),
        baseline=load_index(args.baseline) if args.baseline else None,
        seed=seed,
        declared_off=declared(args.declare, cat),
        run_id=run_id,
    )


def _run_entry(args: argparse.Namespace) -> int:
    """``refwire conform PROTOCOL``: against a real testee under trio, or (``--sim``)
    against refwire's own server in the simulator, which runs its own trio loop.
    An option that cannot be used is a usage error (exit status 2)."""
    try:
        return _run_or_sim(args)
    except OptionsError as exc:
        raise UsageError(str(exc)) from None


def _run_or_sim(args: argparse.Namespace) -> int:
    if args.sim:
        if args.server is not None or args.exec_template or args.listen or args.from_port:
            raise UsageError(
                "--sim tests refwire's own server (or, with --client, its own client) inside the simulator: "
                "leave out --server, --exec, --listen and --from-port"
            )
        return run_sim_command(args)
    return int(trio.run(_run, args))


async def _run(args: argparse.Namespace) -> int:
    cat = _catalogue(args.protocol)
    if args.client:
        return await _run_client(args, cat)
    if args.exec_template or args.listen or args.from_port:
        raise UsageError("--exec, --listen and --from-port need --client")
    if args.server is None:
        raise UsageError("say which server to test: --server HOST:PORT (or test a client: --client [--exec CMD])")
    common = _common(args, cat)
    fmts, baseline, seed = common.formats, common.baseline, common.seed
    host, port = args.server
    cfg = server_config(args, cat, seed=common.seed, run_id=common.run_id, declared_off=common.declared_off)
    agent = cfg.agent
    console = new_console()
    header = (
        f"refwire conform {cat.protocol}: testing the server at {host}:{port} as {agent!r}, profile {args.profile}, "
        f"seed {seed}, run id {cfg.the_run_id}"
    )
    run = RunResult(cat.protocol, cfg)
    argv = sys.argv[1:]
    try:
        await _until_interrupted(
            run,
            lambda: run_cases(
                cat,
                cfg,
                include=args.cases,
                exclude=args.exclude,
                tags=args.tags,
                on_result=None if args.quiet else lambda r: print_line(console, r),
                run=run,
            ),
            lambda: console.print(escape(header)),
        )
    except RunAborted as exc:
        console.print(escape(f"refwire: {exc}"), style="bold red")
        return 2
    except KeyboardInterrupt:
        run.interrupted = True
        raise
    finally:
        run.ended = time.time()
        with sigint_ignored() if run.interrupted else contextlib.nullcontext():
            written = write_reports(run, args.out, fmts, argv) if run.results else []
            if run.interrupted and written:
                console.print(f"interrupted: {len(run.results)} results written to {args.out}")
    with sigint_ignored() if run.interrupted else contextlib.nullcontext():
        status = summary(console, run, args.out, strict=args.strict, baseline=baseline)
    return 130 if run.interrupted else status


async def _until_interrupted(
    run: RunResult, body: Callable[[], Awaitable[object]], started: Callable[[], None] | None = None
) -> None:
    """Await ``body()``; Ctrl-C (SIGINT) cancels it and marks ``run`` interrupted,
    so the results finished so far are still reported.  (A KeyboardInterrupt
    would come out of the runner's nurseries wrapped in an exception group.)
    Once interrupted, a further Ctrl-C is ignored: the command is only writing
    what it has and exiting with status 130, which a traceback would prevent.
    ``started()`` runs once Ctrl-C is handled (the run's first line: whoever
    waits for it may interrupt from then on)."""
    if threading.current_thread() is not threading.main_thread():
        if started is not None:
            started()
        await body()  # signals reach only the main thread
        return
    aborted: list[RunAborted] = []
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for _ in signals:
                    run.interrupted = True
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(watch)
            if started is not None:
                started()
            try:
                await body()
            except RunAborted as exc:  # raised as it is, not inside an exception group
                aborted.append(exc)
            nursery.cancel_scope.cancel()
    if aborted:
        raise aborted[0]


async def _run_client(args: argparse.Namespace, cat: Catalogue) -> int:
    """``--client``: refwire plays the server (:mod:`refwire.conform.clients`)."""
    from .clients import ClientSetup, close_listeners, prepare_listeners, run_client_case
    from .model import select

    if args.server is not None:
        raise UsageError("--client and --server exclude each other")
    if args.holds_batches is not None:
        raise UsageError("--holds-batches describes a server under test; leave it out with --client")
    common = _common(args, cat, role="client")
    fmts, baseline, seed = common.formats, common.baseline, common.seed
    host, port = args.listen or ("127.0.0.1", 0)
    if args.from_port and port:
        raise UsageError("--listen HOST:PORT with a port and --from-port exclude each other")
    agent = args.agent or (args.exec_template.split()[0] if args.exec_template else "client")
    replay = ["refwire", "conform", cat.protocol, "--client", "--agent", agent, "--profile", args.profile]
    if args.exec_template:
        replay += ["--exec", args.exec_template]
    console = new_console()
    setup = ClientSetup(
        exec_template=args.exec_template,
        listen_host=host,
        listen_port=port,
        from_port=args.from_port,
        select=args.select,
        announce=lambda line: print(line, flush=True),
    )
    mine = [c for c in cat.cases if c.role == "client"]
    chosen, _ = select(mine, include=args.cases, exclude=args.exclude, tags=args.tags)
    index = {c.id: i for i, c in enumerate(chosen)}
    manual = args.exec_template is None
    shared_port = bool(port) and not args.from_port
    jobs = len(chosen) if manual and args.select == "port" else (1 if shared_port or args.select == "sequential" else args.jobs)
    cfg = RunConfig(
        role="client",
        host=host,
        port=port,
        agent=agent,
        profile=args.profile,
        declared_off=common.declared_off,
        seed=seed,
        run_id=common.run_id,
        time_scale=args.time_scale,
        timeout=args.timeout,
        jobs=max(1, jobs),
        max_rx_bytes=args.max_rx_bytes,
        replay_base=shlex.join(replay + recorded_options(args)),
    )
    header = (
        f"refwire conform {cat.protocol}: testing a client as {agent!r} ("
        + (f"--exec {args.exec_template}" if args.exec_template else f"connect it by hand, --select {args.select}")
        + f"), profile {args.profile}, seed {seed}, run id {cfg.the_run_id}"
    )
    run = RunResult(cat.protocol, cfg)
    argv = sys.argv[1:]
    cannot_listen: list[str] = []

    async def body() -> None:
        if manual:
            try:
                await prepare_listeners(chosen, setup)
            except OSError as exc:
                cannot_listen.append(f"refwire: cannot listen on {host}: {exc.strerror or exc}")
                return

        async def one(case: Any, first: bool) -> CaseResult:
            return await run_client_case(case, cat, cfg, setup, index.get(case.id, 0))

        await run_cases(
            cat,
            cfg,
            include=args.cases,
            exclude=args.exclude,
            tags=args.tags,
            on_result=None if args.quiet else lambda r: print_line(console, r),
            run=run,
            run_one=one,
        )

    # Ctrl-C cancels the cases (each one's testee process is killed as its case
    # is cancelled; the interrupted case records no verdict) and the run is
    # reported as interrupted, exit status 130 -- as in server mode.
    try:
        await _until_interrupted(run, body, lambda: console.print(escape(header)))
    except KeyboardInterrupt:  # off the main thread, where no signal receiver can be opened
        run.interrupted = True
    finally:
        with trio.CancelScope(shield=True):
            await close_listeners(setup)
        run.ended = time.time()
    if cannot_listen:
        console.print(escape(cannot_listen[0]), style="bold red")
        return 2
    with sigint_ignored() if run.interrupted else contextlib.nullcontext():
        written = write_reports(run, args.out, fmts, argv) if run.results or run.interrupted else []
        if run.interrupted:
            console.print(f"interrupted: {len(run.results)} results written to {args.out}" if written else "interrupted: no results")
        status = summary(console, run, args.out, strict=args.strict, baseline=baseline)
    return 130 if run.interrupted else status


def run_sim_command(args: argparse.Namespace) -> int:
    """The body of ``refwire conform PROTOCOL --sim`` (outside any trio run)."""
    from .simulated import run_clients_in_simulator, run_in_simulator

    cat = _catalogue(args.protocol)
    role = "client" if args.client else "server"
    if (cat.sim_client if args.client else cat.sim_server) is None:
        raise UsageError(f"{cat.protocol} cannot run its {role} cases inside the simulator")
    if args.holds_batches is not None:
        if args.client:
            raise UsageError("--holds-batches describes a server under test; leave it out with --client")
        if cat.sim_server_holding is None:
            raise UsageError(f"{cat.protocol}'s server cannot hold batches inside the simulator (--holds-batches)")
        cat = attrs.evolve(cat, sim_server=cat.sim_server_holding(args.holds_batches))
    common = _common(args, cat, role=role)
    fmts, seed = common.formats, common.seed
    replay = ["refwire", "conform", cat.protocol, "--sim", "--profile", args.profile] + (["--client"] if args.client else [])
    if args.holds_batches is not None:
        replay += ["--holds-batches", f"{args.holds_batches:g}"]
    cfg = RunConfig(
        role=role,
        agent=args.agent or ("refwire-client-sim" if args.client else "refwire-sim"),
        profile=args.profile,
        declared_off=common.declared_off,
        seed=seed,
        run_id=common.run_id,
        time_scale=args.time_scale,
        timeout=args.timeout,
        holds_batches=args.holds_batches,
        replay_base=shlex.join(replay),
    )
    console = new_console()
    console.print(
        escape(
            f"refwire conform {cat.protocol} --sim: refwire's own {role} inside the simulator, profile {args.profile}, "
            f"seed {seed}, run id {cfg.the_run_id}"
        )
    )
    # The server's own warnings (each refused case is one) would bury the verdicts; -v shows them.
    log = logging.getLogger("refwire")
    level = log.level
    if not getattr(args, "verbose", 0):
        log.setLevel(logging.ERROR)
    try:
        sim = (run_clients_in_simulator if args.client else run_in_simulator)(
            cat,
            cfg,
            include=args.cases,
            exclude=args.exclude,
            tags=args.tags,
            on_result=None if args.quiet else lambda r: print_line(console, r),
        )
    finally:
        log.setLevel(level)
    sim.result.ended = time.time()
    write_reports(sim.result, args.out, fmts, sys.argv[1:])
    console.print(f"trace hash {sim.trace_hash}")
    return summary(console, sim.result, args.out, strict=args.strict, baseline=common.baseline)


def load_index(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("agents"), dict):
        raise UsageError(f"{path}: not an index.json written by refwire conform")
    return doc


def _list(args: argparse.Namespace) -> int:
    cats = [_catalogue(args.protocol)] if args.protocol else _all_catalogues()
    want = {t.strip() for t in (args.tags or "").split(",") if t.strip()}
    known = {t for cat in cats for c in cat.cases if not args.role or c.role == args.role for t in c.tags}
    if want - known:
        raise UsageError(f"--tags {', '.join(sorted(want - known))}: no case listed carries it; the tags: {', '.join(sorted(known))}")
    for cat in cats:
        if not args.json:
            print(f"{cat.protocol} ({cat.spec}); profiles: {', '.join(cat.profiles)}")
        for c in sorted(cat.cases, key=lambda c: (c.role != "server", natural_key(c.id))):
            if args.role and c.role != args.role:
                continue
            if want and not (c.tags & want):
                continue
            if args.json:
                print(json.dumps(c.to_json()))
            else:
                tags = f" [{', '.join(sorted(c.tags))}]" if c.tags else ""
                print(f"  {c.id:<9} {c.slug:<36} {c.title} ({c.requirement.split(' ', 1)[-1]}){tags}")
    return 0


def _find_case(case_id: str) -> tuple[Catalogue, Any]:
    for cat in _all_catalogues():
        try:
            return cat, cat.case(case_id)
        except KeyError:
            continue
    raise UsageError(f"no case {case_id!r}; see 'refwire conform list'")


def _show(args: argparse.Namespace) -> int:
    cat, c = _find_case(args.case)
    print(f"{c.id} {c.slug}: {c.title}")
    print(f"  protocol:    {cat.protocol} ({c.role} under test)")
    print(f"  requirement: {c.requirement}")
    print(f"  procedure:   {c.procedure_text}")
    for e in c.expects:
        note = f"  ({e.note})" if e.note else ""
        print(f"  expect:      {e.verdict.value} for {', '.join(sorted(e.profiles))}: {e.describe()}{note}")
    if c.vectors:
        print(f"  vectors:     {', '.join(c.vectors)}")
    if c.tags:
        print(f"  tags:        {', '.join(sorted(c.tags))}")
    if c.features:
        print(f"  features:    {', '.join(c.features)} (--declare can leave them out)")
    if c.needs_sink:
        print("  needs:       --sink (UNSUPPORTED without it)")
    if HOLDS_BATCHES in c.tags:
        print("  needs:       --holds-batches S (UNSUPPORTED without it)")
    print(f"  budget:      {c.budget:g} s")
    return 0


async def _replay(args: argparse.Namespace) -> int:
    from .replay import replay_record

    try:
        return await replay_record(
            args.record, server=args.server, time_scale=args.time_scale, exec_template=args.exec_template, run_id=args.run_id
        )
    except ValueError as exc:  # (OptionsError included)
        raise UsageError(str(exc)) from None


def _matrix(args: argparse.Namespace) -> int:
    indexes = [load_index(p) for p in args.indexes]
    args.out.mkdir(parents=True, exist_ok=True)
    merged = merge_indexes(indexes)
    # Case pages stay where each run wrote them: point the cells there, relative to
    # the matrix (so the folders can be moved or uploaded together).
    out_dir = args.out.resolve()
    for path, idx in zip(args.indexes, indexes, strict=True):
        base = path.resolve().parent
        for agent, cases in idx["agents"].items():
            for cid, entry in cases.items():
                target = merged["agents"][agent].get(cid)
                if target is entry and entry.get("reportfile"):
                    entry["reportfile"] = os.path.relpath(base / entry["reportfile"], out_dir)
    (args.out / "index.json").write_text(json.dumps(merged, indent=1), encoding="utf-8")
    write_html(args.out, [merged])
    print(
        f"{len(merged['agents'])} agents, {len({c for a in merged['agents'].values() for c in a})} cases -> {args.out / 'index.html'}"
    )
    return 0
