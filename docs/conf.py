"""Sphinx configuration: the manual (tutorials, guides), the CLI reference,
the specs and the API reference (autodoc).

Built warning-free by ``tests/test_docs.py``::

    sphinx-build -W --keep-going -b html docs OUT

No intersphinx (the build needs no network); cross-references resolve inside
refwire only.  ``_ext/refwire_docs.py`` generates the CLI reference from the
parsers and the specs' vector tables; myst-parser reads the specs'
``README.md``; the theme is furo.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))

project = "refwire"
author = "the refwire authors"
copyright = "the refwire authors"
release = "0.1.0"

# napoleon: a few docstrings (the machines' constructors, ProtocolError, the
# simulator's knobs) list their arguments Google-style ("Args:", "Attributes:").
# myst_parser: docs/specs/*.md include the specs' README.md (markdown).
# refwire_docs (docs/_ext/): the CLI reference and the vector tables.
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser", "refwire_docs"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False

exclude_patterns = ["_build", "_ext", "examples", ".gitignore"]

# The docstrings are reST; the signatures carry the types, the descriptions
# stay readable ("ServerConfig" rather than "refwire.lumberjack.server.ServerConfig").
autodoc_default_options = {
    "show-inheritance": True,
}
autodoc_member_order = "bysource"
# refwire.pipeline.datasource subclasses pyspark's Data Source classes at import
# time; pyspark is the optional "spark" extra, so the build mocks it (and never
# needs Spark or Java).  Every other pipeline module imports pyspark lazily.
autodoc_mock_imports = ["pyspark"]
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = False
add_module_names = False
# Docstrings quote wire text and code ("``A 0``", '2A'): keep quotes straight.
smartquotes = False

# The page's own contents list its sections (a module, a command), not every
# class and function autodoc describes: furo rebuilds the site's navigation for
# each page, and with an entry per object that took a third of the build.
toc_object_entries = False

html_theme = "furo"
html_title = "refwire"
html_static_path: list[str] = []


def _drop_foreign_docstrings(app: Any, what: str, name: str, obj: object, options: Any, lines: list[str]) -> None:
    """A method refwire overrides without a docstring of its own would show the
    docstring of the class it overrides; when that class is not refwire's (a
    ``pytest.Item`` hook, a trio ABC method) its text is about that library, in
    that library's markup, so the page shows the bare signature instead."""
    if what not in ("method", "attribute", "property") or getattr(obj, "__doc__", "") is not None:
        return
    owner_name, _, attr = name.rpartition(".")
    module_name, _, cls_name = owner_name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError):
        return
    for base in getattr(cls, "__mro__", ())[1:]:
        if attr in vars(base) and getattr(vars(base)[attr], "__doc__", None):
            if not base.__module__.startswith("refwire"):
                lines[:] = []
            return


def _napoleon_except_attributes(app: Any, what: str, name: str, obj: object, options: Any, lines: list[str]) -> None:
    """napoleon reads the first line of an attribute's docstring as ``type:
    description``, so ``#: server: between batches`` would render "server" as
    the attribute's type.  refwire's attribute docstrings are plain sentences:
    napoleon only sees the others (its "Args:" and "Attributes:" sections)."""
    if what in ("attribute", "data", "property"):
        return
    from sphinx.ext.napoleon import _process_docstring

    _process_docstring(app, what, name, obj, options, lines)


def setup(app: Any) -> None:
    from sphinx.ext.napoleon import _process_docstring

    listeners = app.events.listeners["autodoc-process-docstring"]
    [napoleon] = [listener for listener in listeners if listener.handler is _process_docstring]
    app.disconnect(napoleon.id)
    app.connect("autodoc-process-docstring", _napoleon_except_attributes)
    app.connect("autodoc-process-docstring", _drop_foreign_docstrings)
