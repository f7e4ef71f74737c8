"""``mypyc_attr`` for the optional mypyc build (setup.py), without a runtime dependency.

mypyc reads the decorator at compile time (it resolves this re-export to
``mypy_extensions.mypyc_attr``); at run time it does nothing, so a pure-Python
install does not need ``mypy_extensions``.  This module itself is never compiled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["mypyc_attr"]

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr as mypyc_attr
else:
    try:
        from mypy_extensions import mypyc_attr
    except ImportError:  # the pure-Python default install

        def mypyc_attr(*attrs, **kwattrs):
            return lambda x: x
