"""The optional mypyc build (setup.py, scripts/build_mypyc.sh): cheap checks in the
default suite, the rest only once compiled modules are present.

``scripts/test_compiled.sh`` builds them, sets ``REFWIRE_EXPECT_COMPILED=1`` and runs
the codec, vector, limits and machine tests on them."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import os
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
