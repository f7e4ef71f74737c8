"""refwire: reference implementations of binary stream protocols on trio, with a
deterministic network simulator (the manual: docs/, built with Sphinx)."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
