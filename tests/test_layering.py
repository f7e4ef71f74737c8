"""The layering rules, checked on the import graph of ``src/refwire``.

Every import counts: at the top of a module, inside a function, under
``TYPE_CHECKING``, and ``importlib.import_module`` of a constant name.  Each
module has a layer, from the bottom up:

* **ground**: the byte primitives, the error base, the Sans-IO contract, the
  registry (``wire``, ``errors``, ``sansio``, ``protocols``, ``specs``, ``_mypyc``);
* **drivers**: the shared trio pump and servers, logs, the capture tap and pcapng writer, the
  reference-server runner, the CLI helpers;
* **protocols**: one package per protocol (codec, events, machines, services,
  storage, trio client and server, its CLI, its descriptor);
* **simulator**: ``refwire.sim`` (it runs the protocols' drivers; tools may run it);
* **tools**: ``conform``, ``chaos``, ``pipeline``;
* **CLI**: the ``refwire`` command.

Asserted: no import cycle; no import from a lower layer to a higher one; the
ground names no protocol; a protocol imports no tool and no other protocol; a
protocol's Sans-IO core imports only its own protocol's core and the shared
base (no I/O, clock or randomness); no tool imports another tool; no module
outside a protocol's package names a protocol (as a string, or by importing
it) except each tool's per-protocol part, which lives in that tool's one folder
for them and is found through the descriptors.  A failure names the file, the
line and the import.  There is no exception list.

The tests follow one rule of their own: no test module imports another (what
they share lives in ``tests/support``).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from refwire.protocols import PACKAGES, registry

SRC = Path(__file__).resolve().parent.parent / "src" / "refwire"

LAYERS = ("ground", "drivers", "protocols", "simulator", "tools", "cli")
GROUND = {
    "refwire", "refwire.wire", "refwire.errors", "refwire.sansio", "refwire.describe", "refwire.protocols", "refwire.specs",
    "refwire._mypyc", "refwire.speed",
}
DRIVERS = {"refwire.drivers", "refwire.admission", "refwire.transport", "refwire.logs", "refwire.tap", "refwire.pcap", "refwire.reference", "refwire.cliutil", "refwire.interrupts", "refwire.argtypes"}
TOOLS = ("refwire.conform", "refwire.chaos", "refwire.pipeline", "refwire.dissector")
#: Each tool's (and the simulator's) one folder of per-protocol parts.  A tool whose parts
#: lie in its own folder (the dissector's ``refwire/dissector/<protocol>.py``): its parts are
#: the modules descriptors name there, and its other modules are its generic part.
PART_FOLDERS = {
    "refwire.dissector": "refwire.dissector",
    "refwire.conform": "refwire.conform.cases",
    "refwire.chaos": "refwire.chaos.adapters",
    "refwire.pipeline": "refwire.pipeline.dialects",
    "refwire.sim": "refwire.sim.scenarios",
}
#: Descriptor piece -> the folder its module must live in (``None``: inside the protocol's package).
PIECE_FOLDERS = {
    "cli": None,
    "describer": None,
    "layout": None,
    "reference_server": None,
    "scenario": "refwire.sim.scenarios",
    "decoder": "refwire.pipeline.dialects",
    "rules": "refwire.pipeline.dialects",
    "conform": "refwire.conform.cases",
    "chaos": "refwire.chaos.adapters",
    "dissector": "refwire.dissector",
}
#: The protocol families: a subpackage (the 2017 Pravega draft) belongs to its parent's family.
FAMILIES = tuple(sorted({".".join(p.split(".")[:2]) for p in PACKAGES}))

#: Module stems that are a protocol's Sans-IO core.
CORE_NAMES = {
    "frames", "codec", "commands", "events", "connection", "partial", "bundles", "responses",
    "compression", "writer", "frames_codec", "service", "store", "storage", "errors", "describe",
    "machine", "negotiation", "budget",
}
#: What a core may never import (top-level module names).
FORBIDDEN_IN_CORE = {"trio", "socket", "ssl", "os", "time", "random", "asyncio", "selectors", "threading", "logging"}
#: The shared base every core may use.
SHARED_BASE = {"refwire.wire", "refwire.errors", "refwire.sansio", "refwire.describe", "refwire._mypyc", "refwire.speed"}
#: The one module of the shared base that reads the environment: the switch
#: between the reference paths and the speed paths (``REFWIRE_REFERENCE``, read once
#: at import).  It may import ``os`` for that and for nothing else.
SWITCH = "refwire.speed"
#: What the shared base may also read: the registry, whose list of packages is how
#: ``refwire.errors`` finds, on first use, the errors that live with their protocol
#: (their old names there).  The registry imports no protocol and does no I/O.
SHARED_BASE_READS = {"refwire.protocols"}


# --------------------------------------------------------------------------- the graph


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


@functools.cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import in ``path``, wherever it stands."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    modules = _modules()
    out: list[tuple[int, str]] = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                out.append((node.lineno, sub if sub in modules else mod))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            out.append((node.lineno, node.args[0].value))
    return sorted(set(out))


def _internal(mod: str) -> str | None:
    """The refwire module ``mod`` names (a name inside a module counts as the module)."""
    modules = _modules()
    while mod and mod not in modules:
        mod = mod.rpartition(".")[0]
    return mod or None


@functools.cache
def _graph() -> dict[str, list[tuple[int, str]]]:
    graph: dict[str, list[tuple[int, str]]] = {}
    for name, path in _modules().items():
        edges = []
        for line, mod in _imports(path):
            if mod.split(".")[0] == "refwire":
                target = _internal(mod)
                if target is not None and target != name:
                    edges.append((line, target))
        graph[name] = edges
    return graph


def _family(name: str) -> str | None:
    return next((f for f in FAMILIES if name == f or name.startswith(f + ".")), None)


def _tool(name: str) -> str | None:
    return next((t for t in TOOLS if name == t or name.startswith(t + ".")), None)


def _layer(name: str) -> str:
    if name in GROUND:
        return "ground"
    if name in DRIVERS:
        return "drivers"
    if _family(name):
        return "protocols"
    if name == "refwire.sim" or name.startswith("refwire.sim."):
        return "simulator"
    if _tool(name):
        return "tools"
    if name in ("refwire.cli", "refwire._entry"):  # the command, and its entry point
        return "cli"
    raise AssertionError(f"{name} has no layer: name it in tests/test_layering.py")


def _is_core(name: str) -> bool:
    """A protocol's Sans-IO core: a module named in CORE_NAMES, or a speed path
    beside one (``_fast`` or ``_fast_<core>``)."""
    stem = name.rsplit(".", 1)[-1]
    if stem == "_fast" or stem.startswith("_fast_"):
        return _family(name) is not None
    return _family(name) is not None and stem in CORE_NAMES


def _where(name: str, line: int) -> str:
    return f"{_modules()[name].relative_to(SRC.parent.parent)}:{line}"


@functools.cache
def _named_parts() -> frozenset[str]:
    """The modules a descriptor names as a piece that lives in a tool's folder."""
    return frozenset(
        ref.partition(":")[0]
        for d in registry().values()
        for piece, folder in PIECE_FOLDERS.items()
        if folder is not None and (ref := getattr(d, piece)) is not None
    )


def _part_folder(name: str) -> str | None:
    for f in PART_FOLDERS.values():
        if name == f or name.startswith(f + "."):
            if f in TOOLS:  # the tool's own folder: only what a descriptor names is a part
                return f if any(name == m or name.startswith(m + ".") for m in _named_parts()) else None
            return f
    return None


# --------------------------------------------------------------------------- the rules


def test_every_module_has_a_layer() -> None:
    for name in _modules():
        assert _layer(name) in LAYERS


def _cycles() -> Iterator[list[str]]:
    """Tarjan's strongly connected components of more than one module (or a self-import)."""
    graph = {n: sorted({t for _, t in e}) for n, e in _graph().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    yield from out


def test_no_import_cycle() -> None:
    found = []
    for comp in _cycles():
        members = set(comp)
        edges = [f"  {_where(n, line)} {n} -> {t}" for n in comp for line, t in _graph()[n] if t in members]
        found.append(" <-> ".join(comp) + "\n" + "\n".join(edges))
    assert not found, "import cycles:\n" + "\n".join(found)


def test_no_import_runs_up_a_layer() -> None:
    bad = [
        f"{_where(n, line)} {n} ({_layer(n)}) imports {t} ({_layer(t)})"
        for n, edges in _graph().items()
        for line, t in edges
        if LAYERS.index(_layer(t)) > LAYERS.index(_layer(n))
    ]
    assert not bad, "\n".join(bad)


def test_a_protocol_imports_no_tool_and_no_other_protocol() -> None:
    bad = []
    for n, edges in _graph().items():
        family = _family(n)
        if family is None:
            continue
        for line, t in edges:
            other = _family(t)
            if _layer(t) not in {"ground", "drivers"} and other != family:
                bad.append(f"{_where(n, line)} {n} imports {t}")
    assert not bad, "\n".join(bad)


def test_no_tool_imports_another_tool() -> None:
    bad = [
        f"{_where(n, line)} {n} imports {t}"
        for n, edges in _graph().items()
        for line, t in edges
        if _tool(n) and _tool(t) and _tool(n) != _tool(t)
    ]
    assert not bad, "\n".join(bad)


def _core_modules() -> list[str]:
    return sorted([*SHARED_BASE, *(n for n in _modules() if _is_core(n))])


@pytest.mark.parametrize("name", _core_modules())
def test_a_core_imports_only_its_own_core_and_the_shared_base(name: str) -> None:
    path = _modules()[name]
    bad = []
    for line, mod in _imports(path):
        top = mod.split(".")[0]
        if top in FORBIDDEN_IN_CORE and not (name == SWITCH and mod == "os"):
            bad.append(f"{_where(name, line)} imports {mod} (a core does no I/O, reads no clock, draws no randomness)")
        elif top == "refwire":
            target = _internal(mod)
            own = target is not None and _is_core(target) and _family(target) == _family(name)
            if name in SHARED_BASE and target in SHARED_BASE_READS:
                continue
            if target not in SHARED_BASE and target != "refwire" and not own:
                bad.append(f"{_where(name, line)} imports {mod}: neither the shared base nor {_family(name) or name}'s own core")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", _core_modules())
def test_cores_draw_no_hidden_ids(name: str) -> None:
    ids = {"uuid4", "uuid1", "urandom", "token_bytes"}
    calls = [
        node.lineno
        for node in ast.walk(_tree(_modules()[name]))
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Attribute) and node.func.attr in ids)
            or (isinstance(node.func, ast.Name) and node.func.id in ids)
        )
    ]
    assert not calls, f"{name} draws ids on lines {calls}: take them as constructor arguments"


def test_nothing_but_the_command_line_imports_a_cli_module() -> None:
    """A protocol's ``cli.py`` is read by ``refwire.cli`` only (through the descriptor)."""
    bad = [
        f"{_where(n, line)} imports {t}"
        for n, edges in _graph().items()
        if n.rsplit(".", 1)[-1] not in {"cli", "cliutil"} and n != "refwire._entry"
        for line, t in edges
        if t.rsplit(".", 1)[-1] in {"cli", "cliutil"}
    ]
    assert not bad, "\n".join(bad)


def test_the_simulator_imports_no_pipeline_and_no_spark() -> None:
    bad = [
        f"{_where(n, line)} imports {mod}"
        for n, path in _modules().items()
        if _layer(n) == "simulator"
        for line, mod in _imports(path)
        if mod.startswith("refwire.pipeline") or mod.split(".")[0] in {"pyspark", "pyarrow", "pandas"}
    ]
    assert not bad, "\n".join(bad)


def test_the_pipeline_decodes_with_cores() -> None:
    """The pipeline reads captures with codecs and machines: it imports no protocol's client or server."""
    drivers = {"client", "server", "broker"}
    bad = [
        f"{_where(n, line)} imports {t}"
        for n, edges in _graph().items()
        if _tool(n) == "refwire.pipeline"
        for line, t in edges
        if _family(t) and t.rsplit(".", 1)[-1] in drivers
    ]
    assert not bad, "\n".join(bad)


# --------------------------------------------------------------------------- protocols named only where they live


def _protocol_names() -> set[str]:
    return set(registry())


def test_no_module_outside_a_protocol_names_one() -> None:
    """Outside the protocols' packages and the tools' per-protocol folders, no
    module compares with, keys a dict by, or otherwise spells a protocol's name as
    a string, and none imports a protocol package (the registry's list of packages,
    :data:`refwire.protocols.PACKAGES`, is the one place that names them)."""
    names = _protocol_names()
    bad = []
    for n, path in _modules().items():
        if _family(n) or _part_folder(n):
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                bad.append(f"{_where(n, node.lineno)} spells {node.value!r}")
        for line, t in _graph()[n]:
            if _family(t):
                bad.append(f"{_where(n, line)} imports {t}")
    assert not bad, "\n".join(bad)


def test_per_protocol_parts_live_in_their_tools_folder() -> None:
    """A tool's per-protocol folder holds parts only: each module there is named by
    a descriptor (or lies inside a part that is a package), or is private to those
    (``_name.py``), or is the folder's package itself."""
    named = {
        ref.partition(":")[0]
        for d in registry().values()
        for piece in PIECE_FOLDERS
        if (ref := getattr(d, piece)) is not None
    }
    bad = [
        n
        for n in _modules()
        if (folder := _part_folder(n))
        and n != folder
        and not any(n == m or n.startswith(m + ".") for m in named)
        and not n.rsplit(".", 1)[-1].startswith("_")
    ]
    assert not bad, f"modules in a per-protocol folder that no descriptor names: {bad}"


@pytest.mark.parametrize("protocol", sorted(registry()))
def test_every_descriptor_names_its_pieces_where_they_belong(protocol: str) -> None:
    d = registry()[protocol]
    for piece, folder in PIECE_FOLDERS.items():
        ref = getattr(d, piece)
        if ref is None:
            continue
        module = ref.partition(":")[0]
        if folder is None:
            assert module == d.package or module.startswith(d.package + "."), f"{protocol}.{piece} = {ref} lies outside {d.package}"
        else:
            assert module.startswith(folder + "."), f"{protocol}.{piece} = {ref} lies outside {folder}"
        assert module in _modules(), f"{protocol}.{piece} = {ref}: no such module"
    # every tool finds every protocol: each names its describer and frame layout, a conformance
    # catalogue, a fault-proxy adapter, a capture decoder and a simulator scenario (rules,
    # commands and a reference server are optional)
    for piece in ("describer", "layout", "conform", "chaos", "decoder", "scenario"):
        assert getattr(d, piece) is not None, f"{protocol} names no {piece}"
    assert (d.fixture is None) == (d.reference_server is None), f"{protocol}: a fixture needs a reference server and back"


# --------------------------------------------------------------------------- the tests themselves

TESTS = Path(__file__).resolve().parent


def _imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every module an import in ``path`` may load, wherever it
    stands: ``import a.b``; ``from a import b`` gives ``a`` and ``a.b`` (``b`` may be a
    module); a relative one keeps its dots; ``import_module``/``__import__`` of a constant."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            if node.module:
                yield node.lineno, base
            for alias in node.names:
                if alias.name != "*":
                    yield node.lineno, f"{base}.{alias.name}" if node.module else base + alias.name
        elif (
            isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))
            )
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def test_no_test_module_imports_another_test_module() -> None:
    """pytest collects a test module; nothing imports it.  What test modules share
    lives in ``tests/support`` (imported as ``support.<module>``).  Every import in
    every file under ``tests/`` counts, inside functions too, absolute or relative."""
    bad = [
        f"{path.relative_to(TESTS.parent)}:{line}: imports {mod}"
        for path in sorted(TESTS.rglob("*.py"))
        for line, mod in _imported_modules(path)
        if mod.rsplit(".", 1)[-1].startswith("test_")
    ]
    assert not bad, "a test module imports a test module (move what they share to tests/support):\n" + "\n".join(bad)
