"""The optional mypyc build (setup.py, scripts/build_mypyc.sh): cheap checks in the
default suite, the rest only once compiled modules are present.

``scripts/test_compiled.sh`` builds them, sets ``REFWIRE_EXPECT_COMPILED=1`` and runs
the codec, vector, limits and machine tests on them.  The default suite runs that
script once, on a copy of the checkout (:func:`test_the_codec_and_machine_tests_pass_compiled`),
so the pure build's tests and the compiled build's both run wherever the suite does."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _mypyc_modules() -> list[str]:
    """setup.py's MYPYC_MODULES, read without running setup.py."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "MYPYC_MODULES" for t in node.targets):
            value = ast.literal_eval(node.value)
            assert isinstance(value, list)
            return [str(v) for v in value]
    raise AssertionError("setup.py has no MYPYC_MODULES")


def _module_name(path: str) -> str:
    return "refwire." + path.removeprefix("src/refwire/").removesuffix(".py").replace("/", ".")


def _compiled_files() -> list[Path]:
    return sorted((ROOT / "src").rglob("*.so"))


def test_the_compiled_modules_exist() -> None:
    paths = _mypyc_modules()
    assert paths and len(set(paths)) == len(paths)
    for path in paths:
        assert (ROOT / path).is_file(), path
        assert path.startswith("src/refwire/"), path


def test_compiled_modules_are_all_imported_and_current() -> None:
    """Compiled, every listed module is imported from its .so (no partial build), and
    none is older than its .py (an edit the .so does not have: build again or clean)."""
    expect = os.environ.get("REFWIRE_EXPECT_COMPILED") == "1"
    if not expect and not _compiled_files():
        pytest.skip("pure-Python build (no compiled modules); scripts/test_compiled.sh runs this compiled")
    for path in _mypyc_modules():
        module = importlib.import_module(_module_name(path))
        # (the loader, not __file__: mypyc may set a compiled module's __file__ to a path that does not exist)
        assert isinstance(module.__loader__, importlib.machinery.ExtensionFileLoader), f"{module.__name__} is not compiled"
        source = ROOT / path
        built = sorted(source.parent.glob(source.stem + ".*.so"))
        assert len(built) == 1, built
        assert built[0].stat().st_mtime >= source.stat().st_mtime, (
            f"{built[0].name} is older than {path}: run `bash scripts/build_mypyc.sh` (or --clean)"
        )


#: What a fresh clone does not have (the .gitignore's entries): never copied.
_NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "*.egg-info", ".hypothesis", ".pytest_cache", ".mypy_cache", ".ruff_cache",
    "node_modules", "build", "dist", "out", "campaigns", "refwire-campaigns", "mutants", "*.so",
)  # fmt: skip


@pytest.mark.timeout(900)
def test_the_codec_and_machine_tests_pass_compiled(tmp_path: Path) -> None:
    """``scripts/test_compiled.sh`` on a copy of the checkout: the mypyc build of
    setup.py's modules, then the codec, vector, limits and machine tests on it
    (the same files the pure build runs in this suite).  On a copy, so the
    checkout never holds a ``.so`` that would shadow an edit.  About a minute
    (most of it the C compiler); ``REFWIRE_SKIP_COMPILED=1`` leaves it out."""
    if os.environ.get("REFWIRE_EXPECT_COMPILED") == "1":
        pytest.skip("this run is the compiled one (scripts/test_compiled.sh)")
    if os.environ.get("REFWIRE_SKIP_COMPILED") == "1":
        pytest.skip("REFWIRE_SKIP_COMPILED=1")
    if importlib.util.find_spec("mypyc") is None:
        pytest.skip("mypyc is not installed (the dev extra's mypy brings it)")
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler (cc or gcc) for the mypyc build")
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT, copy, ignore=_NOT_COPIED)
    # The copy's sources first on the path, before the editable install's mapping to this checkout.
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(copy / "src"))
    proc = subprocess.run(
        ["bash", "scripts/test_compiled.sh", "-q", "-p", "no:cacheprovider"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    summary = out.strip().splitlines()[-1]
    assert re.search(r"\b[1-9]\d* passed\b", summary) and "failed" not in summary and "error" not in summary, summary
    assert "refwire/_codec__mypyc" in out, out[-3000:]  # the build happened, in the copy
