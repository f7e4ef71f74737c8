"""refwire: reference implementations of binary stream protocols on trio, with a
deterministic network simulator (see README.md)."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
