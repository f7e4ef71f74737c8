"""The documentation builds and its examples run.

* ``docs/`` (Sphinx: the API reference from the docstrings, and the guides) builds
  warning-free: ``sphinx-build -W --keep-going -b html docs OUT``.  No network:
  no intersphinx.
* Every Python example of the guides is a file in ``docs/examples/`` included
  with ``literalinclude``, and runs unmodified in its own interpreter, with a
  time limit (as tests/test_readme_examples.py does for the README).

The build runs in a subprocess started when the first test of this module
starts, so it overlaps the examples; the last test waits for it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
# Run by another example, with arguments (conform_client.py runs it once per case).
HELPERS = {"my_client.py"}
RUNNABLE = sorted(p.name for p in EXAMPLES.glob("*.py") if p.name not in HELPERS)


def _env() -> dict[str, str]:
    """The examples call ``refwire`` by name, as a user would: put this
    interpreter's scripts directory first on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@pytest.fixture(scope="module")
def docs_build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    out = tmp_path_factory.mktemp("docs") / "html"
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        yield proc, out
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.fixture(autouse=True)
def _start_the_build(docs_build: tuple[subprocess.Popen[str], Path]) -> None:
    """Every test of this module starts the build (the first one really does)."""


def test_every_example_is_in_a_guide() -> None:
    included = set()
    for page in DOCS.rglob("*.rst"):
        for target in re.findall(r"^\.\. literalinclude:: (\S+)", page.read_text(), re.M):
            path = (page.parent / target).resolve()
            assert path.is_file(), f"{page.relative_to(ROOT)}: {target} does not exist"
            included.add(path.name)
    assert set(RUNNABLE) | HELPERS <= included, sorted((set(RUNNABLE) | HELPERS) - included)
    assert len(RUNNABLE) >= 8


def test_the_guides_have_no_inline_python() -> None:
    """Python in a guide is a file of docs/examples/ (which runs), never a block of text."""
    for page in (DOCS / "guides").glob("*.rst"):
        text = page.read_text()
        assert not re.search(r"^\.\. (code-block|code|sourcecode):: (python|pycon)", text, re.M), page.name


@pytest.mark.parametrize("name", RUNNABLE)
def test_example_runs(name: str, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=_env()
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]


def test_docs_build_without_warnings(docs_build: tuple[subprocess.Popen[str], Path]) -> None:
    proc, out = docs_build
    try:
        log, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, log[-5000:]
    pages = {p.relative_to(out).as_posix() for p in out.rglob("*.html")}
    for page in ("index.html", "api/shared.html", "api/lumberjack.html", "guides/conform.html", "guides/embedding.html"):
        assert page in pages, sorted(pages)
    # autodoc found the modules (a failed import is a warning, but check the output too)
    assert "LumberjackServer" in (out / "api" / "lumberjack.html").read_text()
