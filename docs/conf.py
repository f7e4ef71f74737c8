"""Sphinx configuration: the API reference (autodoc) and the guides.

Built warning-free by ``tests/test_docs.py``::

    sphinx-build -W --keep-going -b html docs docs/_build/html

No intersphinx (the build needs no network); cross-references resolve inside
refwire only.
"""

from __future__ import annotations

import importlib
from typing import Any

project = "refwire"
author = "the refwire authors"
copyright = "the refwire authors"
release = "0.1.0"

# napoleon: a few docstrings (the machines' constructors, ProtocolError, the
# simulator's knobs) list their arguments Google-style ("Args:", "Attributes:").
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False

exclude_patterns = ["_build", "examples", ".gitignore"]

# The docstrings are reST; the signatures carry the types, the descriptions
# stay readable ("ServerConfig" rather than "refwire.lumberjack.server.ServerConfig").
autodoc_default_options = {
    "show-inheritance": True,
}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = False
add_module_names = False
# Docstrings quote wire text and code ("``A 0``", '2A'): keep quotes straight.
smartquotes = False

html_theme = "alabaster"
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
