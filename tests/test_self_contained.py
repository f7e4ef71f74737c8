"""The repository stands on its own: no file cites material users do not have.

Users get this repository and nothing else, so no source, test, benchmark, spec,
vector or script may point at the project's internal research notes, its design
notes, the sibling ``shared`` folder, or an issue number of our tracker.  Cite a
section of ``specs/<protocol>/README.md``, the docs of ``refwire.sansio`` /
``refwire.errors``, or state the fact in place.

One exception: ``../shared/peer-sources/``, where the real peers' build scripts
(``peers/``) look for offline snapshots of the public sources before they clone
them; it holds only those public archives, and every script works without it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The forbidden citations.  Written so that this file does not match itself.
PATTERN = re.compile(
    r"(^|[^A-Za-z_])research/[a-z0-9_-]+\.md"  # a research note by file name
    r"|research[ ]\u00a7"  # a research note by section
    r"|DESIGN\.md"  # the design notes
    r"|\.\./shared(?!/peer-sources)"  # the sibling shared folder (its peer sources excepted: see below)
    r"|[Ii]ssue #?[0-9]+"  # an issue of our tracker
)
SUFFIXES = {".py", ".md", ".json", ".toml", ".sh"}
SKIPPED_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".ruff_cache", ".pytest_cache"}


def _files() -> list[Path]:
    """The project's files: what git tracks plus what it would (not what it
    ignores: build output, caches); every file below the root without git."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT, capture_output=True, check=True,
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        out = ""
    if out:
        paths = [ROOT / name for name in out.split("\0") if name]
        return sorted(p for p in paths if p.suffix in SUFFIXES and p.is_file() and not SKIPPED_DIRS & set(p.parts))
    found = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if any(part in SKIPPED_DIRS for part in rel.parts):
            continue
        if path.suffix in SUFFIXES and path.is_file():
            found.append(path)
    return sorted(found)


def test_the_search_covers_the_repository() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _files()}
    assert "README.md" in names
    assert "src/refwire/sansio.py" in names
    assert any(n.startswith("specs/") and n.endswith(".json") for n in names)


def test_no_file_cites_internal_material() -> None:
    hits = []
    for path in _files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if PATTERN.search(line):
                hits.append(f"{path.relative_to(ROOT).as_posix()}:{number}: {line.strip()[:160]}")
    assert not hits, "internal citations left:\n" + "\n".join(hits)
