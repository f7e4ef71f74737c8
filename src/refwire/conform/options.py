"""The options of a ``refwire conform`` run, shared by the command line, its
``replay`` and the pytest plugin: the run options' parser, the checks of
``--declare``, ``--cases``/``--exclude``/``--tags`` (a name that matches
nothing is refused with the known ones listed), and the :class:`RunConfig` of
a server run with the replay line that repeats every option the cases depend
on (``replay`` reads that line back through the same parser).

Errors are :class:`OptionsError`, one line each; the command line turns them
into usage errors (exit status 2), the plugin into pytest usage errors.
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import shlex
import ssl
import tomllib
from pathlib import Path
from typing import NoReturn

from ..argtypes import hostport, positive_int
from ..protocols import names
from .ids import RunIdError, check_run_id, natural_key
from .runner import Catalogue, RunConfig

__all__ = [
    "OptionsError",
    "check_selection",
    "declared",
    "recorded_options",
    "replay_parser",
    "hold_arg",
    "run_id_arg",
    "run_options",
    "scale_arg",
    "server_config",
    "timeout_arg",
    "tls_context",
]


class OptionsError(ValueError):
    """A run option that cannot be used (exit status 2): the message says why."""




def timeout_arg(text: str) -> float:
    if text.lower() == "none":
        return math.inf
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds or 'none'") from None
    if v <= 0:
        raise argparse.ArgumentTypeError("the timeout must be positive (or 'none' to wait forever)")
    return v


def scale_arg(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.01 <= v <= 1000:
        raise argparse.ArgumentTypeError("--time-scale must be between 0.01 and 1000")
    return v


def hold_arg(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < v <= 3600 or not math.isfinite(v):
        raise argparse.ArgumentTypeError("--holds-batches must be a positive number of seconds (at most 3600)")
    return v


def run_id_arg(text: str) -> str:
    try:
        return check_run_id(text)
    except RunIdError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run_options(p: argparse.ArgumentParser) -> None:
    """Add the options of ``refwire conform PROTOCOL`` to ``p``."""
    p.add_argument("--server", type=hostport, metavar="HOST:PORT", help="the server under test (refwire plays the client)")
    p.add_argument(
        "--sim",
        action="store_true",
        help="run the cases inside the deterministic simulator against refwire's own server (with --client: refwire's own client "
        "as the testee); virtual time, prints the trace hash",
    )
    p.add_argument(
        "--client",
        action="store_true",
        help="test a CLIENT: refwire plays the server (with --exec, or print a port per case and wait)",
    )
    p.add_argument(
        "--exec",
        dest="exec_template",
        metavar="CMD",
        help="client mode: run CMD once per case; placeholders {host} {port} {case} {slug} {events} {seed} {tls_ca} {controller} (Pravega: the controller the runner serves for the case)",
    )
    p.add_argument("--listen", type=hostport, metavar="HOST:PORT", help="client mode: listen here (default 127.0.0.1:0)")
    p.add_argument("--from-port", type=positive_int, metavar="N", help="client mode: case i listens on port N+i")
    p.add_argument(
        "--select",
        choices=("port", "sequential"),
        default="port",
        help="client mode without --exec: a port per case, all listening at once (default), or one port, cases in connection order",
    )
    p.add_argument("--tls", action="store_true", help="connect with TLS")
    p.add_argument("--tls-ca", metavar="FILE", help="CA bundle to verify the server's certificate (default: system CAs)")
    p.add_argument("--tls-insecure", action="store_true", help="do not verify the server's certificate")
    p.add_argument("--server-name", metavar="NAME", help="TLS server name (default: the host)")
    p.add_argument("--agent", default=None, metavar="NAME", help="the testee's name in reports (default: HOST:PORT)")
    p.add_argument("--cases", metavar="PATTERNS", help="only these ids or slugs (comma-separated; * and ? wildcards)")
    p.add_argument("--exclude", metavar="PATTERNS", help="skip these ids or slugs (reported as SKIPPED)")
    p.add_argument("--tags", metavar="TAGS", help="only cases with one of these tags; 'slow' cases run only when named here")
    p.add_argument(
        "--profile",
        default="strict",
        metavar="NAME",
        help="the behaviour a PASS is judged against (default strict; see 'conform list')",
    )
    p.add_argument(
        "--declare", type=Path, metavar="FILE", help='TOML listing features left out on purpose: unsupported = ["v1", …]'
    )
    p.add_argument(
        "--sink", metavar="FILE", help="a file where the testee writes each event its application received (JSON lines)"
    )
    p.add_argument(
        "--holds-batches",
        type=hold_arg,
        default=None,
        metavar="S",
        help="the testee server's application holds each batch at least S seconds before the ack: every wait for an ack and "
        "every case's budget grow by S, and the keepalive cases (tagged holds-batches) can run; with --sim, refwire's own "
        "server holds each batch S seconds",
    )
    p.add_argument("--seed", type=int, default=None, metavar="N", help="run seed (default: drawn and printed)")
    p.add_argument(
        "--run-id",
        type=run_id_arg,
        default=None,
        metavar="R",
        help="run id: 8 hex digits every name and marker the cases leave on the testee carries (default: a fresh one per "
        "run, printed; with --sim, the seed's); reuse one only against a testee reset since",
    )
    p.add_argument("--time-scale", type=scale_arg, default=1.0, metavar="X", help="multiply every budget and wait by X (default 1)")
    p.add_argument(
        "--timeout",
        type=timeout_arg,
        default=None,
        metavar="S|none",
        help="per-case budget in seconds, overriding the cases' own; 'none' waits forever (debuggers)",
    )
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        metavar="N",
        help="run up to N cases at once (cases tagged serial run alone; default 1)",
    )
    p.add_argument(
        "--max-rx-bytes",
        type=positive_int,
        default=16 << 20,
        metavar="N",
        help="read at most N bytes from the testee per case (default 16 MiB)",
    )
    p.add_argument(
        "--out", type=Path, default=Path("conform-report"), metavar="DIR", help="report directory (default ./conform-report)"
    )
    p.add_argument("--format", default="json,html,junit", metavar="F,…", help="report formats: json, html, junit (default all)")
    p.add_argument(
        "--baseline", type=Path, metavar="FILE", help="an earlier index.json: exit 1 when any case's verdict got worse"
    )
    p.add_argument("--strict", action="store_true", help="NON-STRICT verdicts fail the run too")
    p.add_argument("--quiet", action="store_true", help="no line per case, only the summary")


def tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    if not args.tls:
        if args.tls_ca or args.tls_insecure:
            raise OptionsError("--tls-ca and --tls-insecure need --tls")
        return None
    ctx = ssl.create_default_context(cafile=args.tls_ca) if args.tls_ca else ssl.create_default_context()
    if args.tls_insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def declared(path: Path | None, cat: Catalogue) -> frozenset[str]:
    """The features a ``--declare`` file leaves out: ``unsupported = [...]`` at the
    top, or in a table named after the protocol.  A key refwire does not know (a
    misspelling would otherwise leave every feature declared) is refused, with
    the known ones listed."""
    if path is None:
        return frozenset()
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise OptionsError(f"--declare {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise OptionsError(f"--declare {path}: not valid TOML: {exc}") from None
    protocols = names("conform")
    top = sorted(k for k in doc if k != "unsupported" and k not in protocols)
    if top:
        raise OptionsError(
            f"--declare {path}: unknown key(s) {', '.join(top)}; known: unsupported, or a table per protocol "
            f"({', '.join(protocols)}) holding unsupported"
        )
    section = doc.get(cat.protocol, doc)
    if not isinstance(section, dict):
        raise OptionsError(f"--declare {path}: [{cat.protocol}] must be a table holding unsupported = [...]")
    if section is not doc:
        inner = sorted(k for k in section if k != "unsupported")
        if inner:
            raise OptionsError(f"--declare {path}: unknown key(s) in [{cat.protocol}]: {', '.join(inner)}; known: unsupported")
    items = section.get("unsupported", [])
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise OptionsError(f"--declare {path}: 'unsupported' must be a list of feature names")
    unknown = sorted(set(items) - set(cat.features))
    if unknown:
        raise OptionsError(
            f"--declare {path}: unknown feature(s) {', '.join(unknown)}; {cat.protocol} has: "
            + (", ".join(sorted(cat.features)) or "none")
        )
    return frozenset(items)


def _patterns(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def check_selection(cat: Catalogue, role: str, cases: str | None, tags: str | None, exclude: str | None = None) -> None:
    """Refuse (:class:`UsageError`, exit status 2) a ``--cases``/``--exclude``
    pattern that matches none of ``cat``'s ``role`` cases, and a ``--tags`` tag
    none of them carries, listing the known ids and tags: a misspelling would
    otherwise run nothing and succeed."""
    mine = sorted((c for c in cat.cases if c.role == role), key=lambda c: natural_key(c.id))
    for option, text in (("--cases", cases), ("--exclude", exclude)):
        for pattern in _patterns(text):
            if not any(fnmatch.fnmatchcase(n, pattern) for c in mine for n in (c.id, c.slug)):
                raise OptionsError(
                    f"{option} {pattern!r} matches no {cat.protocol} {role} case; the ids (or slugs): "
                    + ", ".join(c.id for c in mine)
                )
    known = sorted({t for c in mine for t in c.tags} | {"slow"})
    unknown = [t for t in _patterns(tags) if t not in known]
    if unknown:
        raise OptionsError(
            f"--tags {', '.join(unknown)}: no {cat.protocol} {role} case carries it; the tags: {', '.join(known)}"
        )


def recorded_options(args: argparse.Namespace) -> list[str]:
    """The options besides the testee's address that a replay must repeat: how
    to reach the testee (TLS), what it declared, where its sink is, how it holds
    batches, and the timing and limits the cases ran under."""
    words: list[str] = []
    if getattr(args, "tls", False):
        words.append("--tls")
    if getattr(args, "tls_ca", None):
        words += ["--tls-ca", args.tls_ca]
    if getattr(args, "tls_insecure", False):
        words.append("--tls-insecure")
    if getattr(args, "server_name", None):
        words += ["--server-name", args.server_name]
    if args.declare is not None:
        words += ["--declare", str(args.declare)]
    if getattr(args, "sink", None):
        words += ["--sink", args.sink]
    if getattr(args, "holds_batches", None) is not None:
        words += ["--holds-batches", f"{args.holds_batches:g}"]
    if args.time_scale != 1.0:
        words += ["--time-scale", f"{args.time_scale:g}"]
    if args.timeout is not None:
        words += ["--timeout", "none" if math.isinf(args.timeout) else f"{args.timeout:g}"]
    if args.max_rx_bytes != 16 << 20:
        words += ["--max-rx-bytes", str(args.max_rx_bytes)]
    return words


def server_config(
    args: argparse.Namespace, cat: Catalogue, *, seed: int, run_id: str, declared_off: frozenset[str]
) -> RunConfig:
    """The :class:`RunConfig` of a server run (``--server``), with the replay line
    that repeats every option the cases depend on; ``refwire conform replay``
    builds its configuration here too, from that line."""
    host, port = args.server
    agent = args.agent or f"{host}:{port}"
    replay = ["refwire", "conform", cat.protocol, "--server", f"{host}:{port}", "--agent", agent, "--profile", args.profile]
    return RunConfig(
        role="server",
        host=host,
        port=port,
        tls=tls_context(args),
        server_hostname=args.server_name,
        agent=agent,
        profile=args.profile,
        declared_off=declared_off,
        seed=seed,
        run_id=run_id,
        time_scale=args.time_scale,
        timeout=args.timeout,
        jobs=args.jobs,
        sink=args.sink,
        holds_batches=args.holds_batches,
        max_rx_bytes=args.max_rx_bytes,
        replay_base=shlex.join(replay + recorded_options(args)),
    )


def replay_parser() -> argparse.ArgumentParser:
    """A parser of the options of a recorded replay line (after ``refwire conform PROTOCOL``)."""
    p = _QuietParser(prog="refwire conform PROTOCOL", add_help=False)
    run_options(p)
    return p


class _QuietParser(argparse.ArgumentParser):
    """Raises :class:`ValueError` instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)
