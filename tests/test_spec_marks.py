"""Every claim the specs make about a real implementation says how it is known.

A paragraph (or table row) of ``specs/<protocol>/README.md`` that names one of
the real programs carries a mark:

- ``[checked: <case id> <profile>]``: the conformance case checks the claim
  against the program, whose profile that is.  The case must exist, must
  document an outcome for that profile, and must be in that program's column
  of the compatibility matrix (docs/guides/compatibility.rst, written from the
  real programs' runs by scripts/compat-matrix.sh) with a verdict, not
  SKIPPED, so the claim is measured every time the real-peer tests run.
- ``[not run here]`` or ``[not run here: why]``: the claim is about a
  program, version or setting the tests do not run (the Pravega segment store;
  libbeat around go-lumber's client; Logstash's Ruby side), or it is one no
  case can check against the program (one that would crash the broker the
  other cases share; a recording's provenance), and the reason says which.

A table's header row is not a claim.

Several marks may follow one another: ``[checked: lj.S3.2 logstash] [checked:
lj.S3.6 logstash]``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from refwire.conform.model import Case
from refwire.protocols import descriptor

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "docs" / "guides" / "compatibility.rst"

#: spec -> (conform protocol, the names of real programs a paragraph may mention).
SPECS: dict[str, tuple[str, re.Pattern[str]]] = {
    "lumberjack": ("lumberjack", re.compile(r"go-lumber|Logstash|logstash-input-beats")),
    "tank": ("tank", re.compile(r"real broker|TANK broker|tank-cli|real TANK")),
    "seastar-rpc": ("seastar-rpc", re.compile(r"\bSeastar\b(?![ -]RPC\b)|rpc_demo")),
    "pravega": ("pravega", re.compile(r"Java server|Java segment store|Pravega's (own )?segment store")),
}

CHECKED = re.compile(r"\[checked: ([a-z]+\.[SC][0-9]+\.[0-9]+) ([a-z0-9-]+)\]")
NOT_RUN = re.compile(r"\[not run here(: [^\]]+)?\]")


def _paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each paragraph; a table row or list item is one each."""
    out: list[tuple[int, str]] = []
    block: list[str] = []
    start = 0
    fenced = False
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if line.startswith("|") and n < len(lines) and re.fullmatch(r"\|[-:| ]+\|", lines[n].strip()):
            continue  # a table's header row (the next line is its separator)
        if re.fullmatch(r"\|[-:| ]+\|", line.strip()):
            continue
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        one_line = line.startswith("|") or re.match(r"\s*([*-]|\d+\.) ", line)
        if not line.strip() or line.startswith("#") or one_line:
            if block:
                out.append((start, " ".join(block)))
                block = []
            if one_line:
                start = n
                block = [line]
            continue
        if not block:
            start = n
        block.append(line.strip())
    if block:
        out.append((start, " ".join(block)))
    return out


def _matrix_columns() -> dict[str, set[str]]:
    """profile -> the case ids the compatibility matrix shows a verdict for, under a program of that profile."""
    text = MATRIX.read_text(encoding="utf-8")
    got: dict[str, set[str]] = {}
    for table in re.split(r"\n\.\. list-table::", text)[1:]:
        rows = re.split(r"\n   \* - ", table)[1:]
        if not rows:
            continue
        header = [c.strip() for c in re.split(r"\n     - ", rows[0])]
        profiles = [m[1] if (m := re.search(r"profile ([a-z0-9-]+)$", h)) else None for h in header]
        for row in rows[1:]:
            cells = [c.strip() for c in re.split(r"\n     - ", row)]
            m = re.fullmatch(r"``([a-z]+\.[SC][0-9]+\.[0-9]+)``", cells[0])
            if not m:
                continue
            for profile, cell in zip(profiles, cells, strict=False):
                if profile and cell not in ("--", "SKIPPED"):  # a case left out measures nothing
                    got.setdefault(profile, set()).add(m[1])
    return got


def _cases(protocol: str) -> dict[str, Case]:
    return {c.id: c for c in descriptor(protocol, "conform").load("conform").cases}


@pytest.mark.parametrize("spec", sorted(SPECS))
def test_every_paragraph_naming_a_real_program_is_marked(spec: str) -> None:
    _, names = SPECS[spec]
    text = (ROOT / "specs" / spec / "README.md").read_text(encoding="utf-8")
    unmarked = [
        f"specs/{spec}/README.md:{line}: {para[:110]}"
        for line, para in _paragraphs(text)
        if names.search(para) and not CHECKED.search(para) and not NOT_RUN.search(para)
    ]
    assert not unmarked, "paragraphs naming a real program with no [checked: …] or [not run here]:\n" + "\n".join(unmarked)


@pytest.mark.parametrize("spec", sorted(SPECS))
def test_every_checked_mark_names_a_case_the_matrix_runs_against_that_program(spec: str) -> None:
    protocol, _ = SPECS[spec]
    cases = _cases(protocol)
    matrix = _matrix_columns()
    text = (ROOT / "specs" / spec / "README.md").read_text(encoding="utf-8")
    wrong = []
    for cid, profile in CHECKED.findall(text):
        if cid not in cases:
            wrong.append(f"[checked: {cid} {profile}]: no case {cid}")
        elif not any(e.names(profile) for e in cases[cid].expects):
            wrong.append(f"[checked: {cid} {profile}]: the case documents no outcome for {profile}")
        elif cid not in matrix.get(profile, set()):
            wrong.append(f"[checked: {cid} {profile}]: not in the compatibility matrix under a {profile} program")
    assert not wrong, "\n".join(wrong)


def test_the_paragraph_splitter_sees_rows_items_and_paragraphs() -> None:
    text = (
        "# T\n\nOne go-lumber\nclaim.\n\n| h | Logstash |\n|---|---|\n| a | go-lumber |\n| b | c |\n\n"
        "* item Logstash\n  more\n\n```\nLogstash\n```\n"
    )
    paras = _paragraphs(text)
    assert (3, "One go-lumber claim.") in paras
    assert (8, "| a | go-lumber |") in paras and (9, "| b | c |") in paras
    assert not any("| h |" in p or "---" in p for _, p in paras)  # a header row and its separator are no claims
    assert (11, "* item Logstash more") in paras
    assert NOT_RUN.search("x [not run here] y") and NOT_RUN.search("x [not run here: it crashes the broker] y")
    assert not any("```" in p or p == "Logstash" for _, p in paras)
