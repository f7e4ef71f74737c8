"""The errors live with their protocol, and their old names keep working.

``refwire.errors`` holds only the shared base (it names no protocol and imports
none); each protocol's own errors are in ``refwire.<protocol>.errors``.  The old
spelling ``from refwire.errors import StoreError`` still works, through the
module's ``__getattr__`` (PEP 562), and gives the very same class.
``StreamClosed`` (the server end's name for a closed stream) is a deprecated alias
of ``StreamClosedError``.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import refwire.errors
from refwire.errors import (  # the old spellings, statically: mypy --strict accepts them too
    AckWaitExpired,
    BadArguments,
    ConnectionLost,
    DraftWriteFailed,
    RequestFailed,
    RpcError,
    StoreError,
    TruncatedBundle,
)
from refwire.protocols import PACKAGES

SRC = Path(refwire.errors.__file__).resolve().parent

#: The shared base: what refwire.errors defines (and lists in ``__all__``).
SHARED = {
    "CorruptLog",
    "LimitExceeded",
    "LocalProtocolError",
    "ProtocolError",
    "RefwireError",
    "RemoteLimitExceeded",
    "RemoteProtocolError",
}

#: Every name that moved, and its new home.
MOVED = {
    **dict.fromkeys(["AckWaitExpired", "SendFailed", "WindowNotAcked"], "refwire.lumberjack.errors"),
    **dict.fromkeys(
        [
            "BadAttributeError",
            "BadKeyVersionError",
            "BadOffsetError",
            "GrpcError",
            "IllegalArgumentError",
            "KeyDoesNotExistError",
            "NoSuchSegmentError",
            "RequestFailed",
            "SegmentExistsError",
            "SegmentSealedError",
            "SegmentTruncatedError",
            "StoreError",
            "TableNotEmptyError",
            "WriteFailed",
        ],
        "refwire.pravega.errors",
    ),
    "DraftWriteFailed": "refwire.pravega.draft2017.errors",
    **dict.fromkeys(["ConnectionLost", "ConsumeError", "TankError", "TruncatedBundle"], "refwire.tank.errors"),
    **dict.fromkeys(
        [
            "BadArguments",
            "CallTimeout",
            "RemoteVerbError",
            "RpcConnectionError",
            "RpcError",
            "StreamClosedError",
            "StreamingNotSupported",
            "UnknownExceptionError",
            "UnknownVerbError",
        ],
        "refwire.seastar_rpc.errors",
    ),
}


def _protocol_errors_modules() -> dict[str, str]:
    """package -> its errors module, for every registered package that has one."""
    return {p: f"{p}.errors" for p in PACKAGES if (SRC.parent / Path(*p.split(".")) / "errors.py").is_file()}


# --------------------------------------------------------------------------- the old names


@pytest.mark.parametrize("name", sorted(MOVED))
def test_an_old_name_is_the_class_in_its_new_home(name: str) -> None:
    home = importlib.import_module(MOVED[name])
    cls = getattr(refwire.errors, name)
    assert cls is getattr(home, name)
    assert cls.__module__ == MOVED[name]
    assert issubclass(cls, refwire.errors.RefwireError)
    namespace: dict[str, object] = {}
    exec(f"from refwire.errors import {name}", namespace)
    assert namespace[name] is cls


def test_the_static_imports_are_the_new_classes() -> None:
    from refwire.lumberjack.errors import AckWaitExpired as lumberjack_ack
    from refwire.pravega.draft2017.errors import DraftWriteFailed as draft_failed
    from refwire.pravega.errors import RequestFailed as pravega_failed
    from refwire.pravega.errors import StoreError as pravega_store
    from refwire.seastar_rpc.errors import BadArguments as seastar_bad
    from refwire.seastar_rpc.errors import RpcError as seastar_rpc
    from refwire.tank.errors import ConnectionLost as tank_lost
    from refwire.tank.errors import TruncatedBundle as tank_truncated

    assert AckWaitExpired is lumberjack_ack
    assert DraftWriteFailed is draft_failed
    assert RequestFailed is pravega_failed
    assert StoreError is pravega_store
    assert BadArguments is seastar_bad
    assert RpcError is seastar_rpc
    assert ConnectionLost is tank_lost
    assert TruncatedBundle is tank_truncated
    assert issubclass(TruncatedBundle, refwire.errors.LocalProtocolError)


def test_the_moved_names_are_every_protocol_error() -> None:
    """MOVED lists exactly what the protocols' errors modules define, nothing twice."""
    found: dict[str, str] = {}
    for module_name in _protocol_errors_modules().values():
        module = importlib.import_module(module_name)
        for name in module.__all__:
            assert name not in found, f"{name} is in {found[name]} and {module_name}"
            assert name not in SHARED, f"{module_name} redefines the shared {name}"
            found[name] = module_name
            assert vars(module)[name].__module__ == module_name, f"{module_name} re-exports {name}"
    assert found == MOVED


def test_refwire_errors_lists_only_what_it_defines() -> None:
    assert set(refwire.errors.__all__) == SHARED
    for name in refwire.errors.__all__:
        assert name in vars(refwire.errors)
        assert vars(refwire.errors)[name].__module__ == "refwire.errors"
    for name in MOVED:
        assert name not in vars(refwire.errors), f"{name} is defined (or cached) in refwire.errors itself"


def test_dir_lists_the_moved_names_but_no_deprecated_one() -> None:
    listed = dir(refwire.errors)
    assert SHARED <= set(listed)
    assert set(MOVED) <= set(listed)
    assert "StreamClosed" not in listed
    assert listed == sorted(listed)


def test_an_unknown_name_is_still_an_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchError"):
        _ = refwire.errors.NoSuchError
    with pytest.raises(ImportError):
        exec("from refwire.errors import NoSuchError", {})
    with pytest.raises(AttributeError):
        _ = refwire.errors.__wrapped__  # a dunder is never looked up in the protocols


# --------------------------------------------------------------------------- the deprecated alias


def test_stream_closed_is_a_deprecated_alias_of_stream_closed_error() -> None:
    from refwire.seastar_rpc import errors as seastar_errors
    from refwire.seastar_rpc import server as seastar_server

    current = seastar_errors.StreamClosedError
    for module in (refwire.errors, seastar_errors, seastar_server):
        for _ in range(2):  # every access warns (nothing cached under the old name)
            with pytest.warns(DeprecationWarning, match=r"StreamClosed is deprecated; use .*StreamClosedError"):
                alias = module.StreamClosed
            assert alias is current
    with pytest.warns(DeprecationWarning, match="StreamClosedError") as record:
        exec("from refwire.errors import StreamClosed", {})
    assert record[0].filename == "<string>"  # the warning points at the importer


def test_the_current_names_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from refwire.errors import StreamClosedError
        from refwire.seastar_rpc.server import StreamClosedError as server_name

        assert server_name is StreamClosedError


# --------------------------------------------------------------------------- the ground names no protocol


def _imported_modules(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``, wherever it stands, and
    of every ``import_module`` call with a constant name."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.extend((node.lineno, mod if node.module else f"{mod}.{alias.name}") for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            out.append((node.lineno, str(node.args[0].value)))
    return out


def _protocol_words() -> set[str]:
    words: set[str] = set()
    for package in PACKAGES:
        words.update(part for part in package.split(".")[1:])
        words.update(part for part in package.split(".")[-1].split("_") if len(part) > 3)
    from refwire.protocols import registry

    for name in registry():
        words.update(part for part in name.split("-") if len(part) > 3)
    return words


def test_refwire_errors_imports_no_protocol() -> None:
    path = SRC / "errors.py"
    imports = _imported_modules(path, "refwire")
    assert imports, "the AST walk found no import at all"
    bad = [f"errors.py:{line} imports {mod}" for line, mod in imports if any(mod == p or mod.startswith(p + ".") for p in PACKAGES)]
    assert not bad, "\n".join(bad)


def test_refwire_errors_names_no_protocol() -> None:
    text = (SRC / "errors.py").read_text()
    words = _protocol_words()
    assert {"lumberjack", "pravega", "tank", "seastar"} <= words
    hits = [
        f"errors.py:{number}: {word!r} in {line.strip()!r}"
        for number, line in enumerate(text.splitlines(), 1)
        for word in sorted(words)
        if re.search(rf"(?<![a-z0-9]){re.escape(word)}(?![a-z])", line, re.IGNORECASE)
    ]
    assert not hits, "\n".join(hits)


def test_importing_refwire_errors_imports_no_protocol() -> None:
    code = (
        "import sys, refwire.errors\n"
        f"print([m for m in sys.modules if m.startswith({tuple(PACKAGES)!r})])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("package", sorted(_protocol_errors_modules()))
def test_a_protocols_errors_import_only_the_base_and_their_own_core(package: str) -> None:
    """A protocol's errors module imports refwire.errors, refwire.wire and its own
    package's core modules only (no driver, no other protocol)."""
    path = SRC.parent / Path(*package.split(".")) / "errors.py"
    core = {"frames", "frames_codec", "events", "connection", "bundles", "compression"}
    bad = []
    for line, mod in _imported_modules(path, package):
        if mod.split(".")[0] != "refwire":
            continue
        rest = mod.removeprefix(package + ".")
        if mod in {"refwire.errors", "refwire.wire"} or (rest != mod and rest.split(".")[0] in core):
            continue
        bad.append(f"{path.relative_to(SRC.parent)}:{line} imports {mod}")
    assert not bad, "\n".join(bad)
