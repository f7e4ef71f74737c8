"""The compatibility matrix page (docs/guides/compatibility.rst), made from the
real peers' conformance runs: one table of programs, then one table per
protocol and role, a case per row and a program per column.

Every cell is the verdict under the program's own profile and, when it
differs, the verdict the same observation gets under ``strict``
(:func:`refwire.conform.model.judge` again: no second run).  Nothing in the
page depends on timing: a run gives the same page as long as the programs and
the case data behave the same, which test_peer_matrix.py checks.  A program
whose answer depends on something no run controls (memory nobody wrote) is
listed in :data:`VARIES`: its cell gives every verdict it can get, and a run
whose verdict is outside that set changes the page.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from real_peers import PeerRun, catalogue_cases

from refwire.conform.model import judge

#: The order verdicts are counted in.
ORDER = ("PASS", "NON-STRICT", "INFO", "UNSUPPORTED", "SKIPPED", "FAIL", "ERROR")

#: Programs the specs describe that cannot run here, and why.
NOT_RUN_HERE = (
    (
        "Pravega's segment store (Java)",
        "pravega",
        "needs Pravega's Java server with ZooKeeper and BookKeeper; the specs' claims about it come from its source "
        "and are marked ``[not run here]``",
    ),
)

#: Cells whose verdict under ``strict`` depends on something no run controls:
#: (peer, case id) -> (the strict verdicts it can get, why).  The cell shows them
#: all as long as the run's strict verdict is one of them.
VARIES: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    ("seastar", "ss.S5.3"): (
        ("PASS", "NON-STRICT"),
        "Seastar reads the 4-byte STREAM_PARENT record as 8 bytes, the last 3 being bytes of its string's buffer "
        "that nothing wrote: when they are zero it finds the parent and accepts the stream (NON-STRICT), else it "
        "closes (PASS). Which one, changes from connection to connection on the same server "
        "(specs/seastar-rpc/README.md §2)",
    ),
}

HEADER = """\
Compatibility with the real implementations
===========================================

.. This page is generated: run ``bash scripts/compat-matrix.sh`` to rewrite it.
   tests/peers/test_peer_matrix.py fails when it differs from what the runs give.

What the real programs do under ``refwire conform``.  Each is built from its
pinned source by ``peers/build.sh`` (``peers/README.md``), started on
127.0.0.1, and put through every fast case of its role with seed 1 and
``--time-scale 2`` (a slow case too where it overlaps the rest; the keepalive
cases against servers that hold each batch 7 s, with ``--holds-batches 7``),
judged against its own profile.  The PyPI and npm peers have no profile of
their own: strict judges them.  A cell gives that
verdict and, where it differs, what the same observation gets under
``--profile strict``: PASS where the program does what the spec asks,
NON-STRICT where it does what its profile documents instead, FAIL for a
documented bug.  Where a program's answer depends on memory nobody wrote,
the cell gives every verdict it can get and a note under its table says why.
The tests (``tests/peers/``) assert every verdict to be what
the program's profile predicts, so a wrong sentence in a profile fails them.

To reproduce it (the first run builds the programs: minutes; later runs take
the builds from ``~/.cache/refwire/peers``)::

    bash scripts/compat-matrix.sh

or run one program yourself, e.g. go-lumber's server::

    bash peers/build.sh go-lumber     # prints the build directory, DIR
    DIR/bin/ljserver -bind 127.0.0.1:5044 -out /tmp/sink.jsonl &
    refwire conform lumberjack --server 127.0.0.1:5044 --profile go-lumber --sink /tmp/sink.jsonl
"""


def _strict(run: PeerRun, cid: str) -> str:
    """The verdict the case's observation gets under strict (its own verdict when there is none)."""
    own = run.verdicts.verdict(cid)
    if own in ("UNSUPPORTED", "SKIPPED", "ERROR"):
        return own
    case = catalogue_cases(run.protocol)[cid]
    return judge(case, run.verdicts.observation(cid), "strict")[0].value


def _varies(run: PeerRun, cid: str) -> tuple[str, ...] | None:
    """The strict verdicts ``cid`` can get from ``run``'s program when it is one
    whose answer varies and this run's is among them; None otherwise (a verdict
    outside the set shows as it is, so the page changes)."""
    entry = VARIES.get((run.peer, cid))
    if entry is None or _strict(run, cid) not in entry[0]:
        return None
    return entry[0]


def _counts(verdicts: Sequence[str]) -> str:
    c = Counter(verdicts)
    known = [f"{c[v]} {v}" for v in ORDER if c[v]]
    return ", ".join(known + [f"{n} {v}" for v, n in sorted(c.items()) if v not in ORDER])


def _table(title: str, widths: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = [f".. list-table:: {title}", "   :header-rows: 1", f"   :widths: {widths}", ""]
    for row in [header, *rows]:
        for i, cell in enumerate(row):
            out.append(f"   {'* -' if i == 0 else '  -'} {cell}")
    out.append("")
    return out


def _column(run: PeerRun) -> str:
    return f"{run.program} ({run.peer})"


def render(runs: Sequence[PeerRun]) -> str:
    """The page for ``runs`` (each a program in one role)."""
    lines = [HEADER, "Programs", "--------", ""]
    rows = []
    for run in runs:
        ids = sorted(run.verdicts.cases, key=_id_key)
        own = [run.verdicts.verdict(c) for c in ids]
        strict = [" or ".join(_varies(run, c) or (_strict(run, c),)) for c in ids]
        rows.append([f"``{run.program}``", run.peer, f"{run.protocol} {run.role}", run.profile, _counts(own), _counts(strict)])
    lines += _table(
        "The programs run here, their roles and their verdicts",
        "18 12 16 10 22 22",
        ["program", "peer", "protocol, role", "profile", "under its profile", "under strict"],
        rows,
    )
    lines += ["Not run here:", ""]
    lines += [f"* **{name}** ({proto}): {why}." for name, proto, why in NOT_RUN_HERE]
    lines.append("")
    groups: dict[tuple[str, str], list[PeerRun]] = {}
    for run in runs:
        groups.setdefault((run.protocol, run.role), []).append(run)
    for (protocol, role), group in groups.items():
        title = f"{protocol}: {role}s"
        lines += [title, "-" * len(title), ""]
        cases = catalogue_cases(protocol)
        ids = sorted({c for run in group for c in run.verdicts.cases}, key=_id_key)
        rows = []
        varying: list[str] = []
        for cid in ids:
            cells = []
            for run in group:
                if cid not in run.verdicts.cases:
                    cells.append("--")
                    continue
                own, strict = run.verdicts.verdict(cid), _strict(run, cid)
                can = _varies(run, cid)
                if can is not None:
                    cells.append(f"{own} (strict: {' or '.join(can)}: varies, see below)")
                    varying.append(f"* ``{cid}``, ``{run.program}``: {VARIES[(run.peer, cid)][1]}.")
                else:
                    cells.append(own if own == strict else f"{own} (strict: {strict})")
            rows.append([f"``{cid}``", cases[cid].title.replace("`", "``") if cid in cases else "", *cells])
        lines += _table(
            f"{protocol} {role} cases",
            " ".join(["12", "40", *(["24"] * len(group))]),
            ["case", "title", *(_column(r) + f", profile {r.profile}" for r in group)],
            rows,
        )
        if varying:
            lines += ["Verdicts that vary from run to run:", "", *varying, ""]
    return "\n".join(lines).rstrip() + "\n"


def _id_key(cid: str) -> tuple[object, ...]:
    from refwire.conform.model import id_key

    return id_key(cid)
