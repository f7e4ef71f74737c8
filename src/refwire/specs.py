"""The specs and language-neutral vectors, shipped inside the package.

A port author who ``pip install refwire`` has every protocol's normalized spec
(``README.md``) and its vector files without a clone of the repository::

    import refwire.specs
    refwire.specs.protocols()                      # ['lumberjack', 'pravega', ...]
    refwire.specs.path("lumberjack")               # the folder: README.md, vectors/
    refwire.specs.vector_files("tank")             # {'frames': Path(...), ...}
    refwire.specs.load_vectors("lumberjack", "frames")   # the parsed JSON

In a source checkout the same calls read ``specs/`` at the repository's top.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["load_vectors", "path", "protocols", "root", "vector_files"]


def root() -> Path:
    """The folder that holds one sub-folder per protocol."""
    base = resources.files("refwire._specs")
    # An installed wheel and an editable install both give a real directory.
    return Path(str(base))


def protocols() -> list[str]:
    """The protocols that have a spec (their folder names, as ``refwire sim`` names them)."""
    return sorted(p.name for p in root().iterdir() if (p / "README.md").is_file())


def path(protocol: str) -> Path:
    """``protocol``'s spec folder (``README.md`` and ``vectors/``)."""
    folder = root() / protocol
    if not (folder / "README.md").is_file():
        raise KeyError(f"no spec for {protocol!r}; known: {', '.join(protocols())}")
    return folder


def vector_files(protocol: str) -> dict[str, Path]:
    """``protocol``'s vector files by name (``frames``, ``errors``, ...)."""
    return {p.stem: p for p in sorted((path(protocol) / "vectors").glob("*.json"))}


def load_vectors(protocol: str, name: str) -> Any:
    """The parsed JSON of one vector file of ``protocol``."""
    files = vector_files(protocol)
    if name not in files:
        raise KeyError(f"{protocol} has no vector file {name!r}; it has: {', '.join(files)}")
    return json.loads(files[name].read_text(encoding="utf-8"))
