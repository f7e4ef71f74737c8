"""The layering rules, checked on the source: a protocol's Sans-IO core imports
only the shared primitives and its own core (no I/O, no clock, no randomness, no
hidden ids), drivers import no CLI, the simulator imports no pipeline, and the
pipeline decodes with cores.  A failure names the file, the line and the import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "refwire"
SIM = SRC / "sim"

#: Module names that are a protocol's Sans-IO core wherever they appear.
CORE_NAMES = {
    "frames", "codec", "commands", "events", "connection", "partial", "bundles",
    "responses", "compression", "writer", "frames_codec", "service", "store", "storage",
}
#: Cores by full name, where the stem is not yet a core everywhere (``storage``:
#: Pravega's is a core; another protocol's module of that name may still do I/O).
#: What a core may never import (top-level module names).
FORBIDDEN_IN_CORE = {"trio", "socket", "ssl", "os", "time", "random", "asyncio", "selectors", "threading", "logging"}
#: Shared primitives every core may use; plus its own package's core modules.
#: (``refwire._mypyc``: the run-time no-op ``mypyc_attr`` of the optional compiled build.)
SHARED = {"refwire.wire", "refwire.errors", "refwire.sansio", "refwire._mypyc"}


def _module_name(path: Path) -> str:
    if path.is_relative_to(SIM):
        return ".".join(("refwire", "sim", *path.relative_to(SIM).with_suffix("").parts))
    rel = path.relative_to(SRC.parent).with_suffix("")
    return ".".join(rel.parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    package = _module_name(path).rsplit(".", 1)[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if node.module is None or (node.level and not node.module):
                out.extend((node.lineno, f"{mod}.{alias.name}") for alias in node.names)
            else:
                out.append((node.lineno, mod))
    return out


def _core_files() -> list[Path]:
    files = [SRC / "wire.py", SRC / "errors.py", SRC / "sansio.py"]
    for path in sorted(SRC.rglob("*.py")):
        if path.stem in CORE_NAMES and "pipeline" not in path.parts:
            files.append(path)
    return files


def _is_core_module(name: str) -> bool:
    return name in SHARED or (name.rsplit(".", 1)[-1] in CORE_NAMES and name.startswith("refwire.") and ".pipeline." not in name)


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_cores_import_only_shared_primitives_and_their_own_core(path: Path) -> None:
    bad = []
    for line, mod in _imports(path):
        top = mod.split(".")[0]
        if top in FORBIDDEN_IN_CORE:
            bad.append(f"{path.relative_to(SRC.parent)}:{line} imports {mod} (a core does no I/O, reads no clock, draws no randomness)")
        elif top == "refwire" and not _is_core_module(mod) and mod not in {"refwire"}:
            bad.append(f"{path.relative_to(SRC.parent)}:{line} imports {mod}, which is not a core module")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("path", _core_files(), ids=lambda p: str(p.relative_to(SRC)))
def test_cores_draw_no_hidden_ids(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    calls = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Attribute) and node.func.attr in {"uuid4", "uuid1", "urandom", "token_bytes"})
            or (isinstance(node.func, ast.Name) and node.func.id in {"uuid4", "uuid1", "urandom", "token_bytes"})
        )
    ]
    assert not calls, f"{path.relative_to(SRC.parent)} draws ids on lines {calls}: take them as constructor arguments"


def _non_cli_files() -> list[Path]:
    return [p for p in sorted(SRC.rglob("*.py")) if p.stem not in {"cli", "cliutil"}]


def test_drivers_import_no_cli() -> None:
    bad = [
        f"{p.relative_to(SRC.parent)}:{line} imports {mod}"
        for p in _non_cli_files()
        for line, mod in _imports(p)
        if mod.rsplit(".", 1)[-1] in {"cli", "cliutil"} or ".cli." in mod
    ]
    assert not bad, "\n".join(bad)


def test_the_simulator_imports_no_pipeline() -> None:
    bad = []
    for p in sorted(SIM.rglob("*.py")):
        for line, mod in _imports(p):
            if mod.startswith("refwire.pipeline") or mod.split(".")[0] in {"pyspark", "pyarrow", "pandas"}:
                bad.append(f"src/refwire/sim/{p.relative_to(SIM)}:{line} imports {mod}")
    assert not bad, "\n".join(bad)


def test_the_pipeline_decodes_with_cores() -> None:
    """The pipeline reads captures with codecs and machines; the only driver it owns
    is its recording tap (record.py).  It imports no protocol's client or server."""
    drivers = {"client", "server", "broker"}
    bad = [
        f"{p.relative_to(SRC.parent)}:{line} imports {mod}"
        for p in sorted((SRC / "pipeline").rglob("*.py"))
        for line, mod in _imports(p)
        if mod.startswith("refwire.") and mod.rsplit(".", 1)[-1] in drivers
    ]
    assert not bad, "\n".join(bad)
