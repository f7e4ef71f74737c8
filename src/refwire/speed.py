"""The one switch between each protocol's reference path and its speed paths.

Every codec and machine in refwire has a **plain path** that follows its spec's
sections (``specs/<protocol>/README.md``) and is what a port author reads.  Where
speed mattered, a faster path doing the same work lives beside it in the
protocol's own ``_fast*`` modules (``lumberjack/_fast_frames.py``, ...): columns
instead of objects, runs of frames decoded at once, inline LZ4, local aliasing.
A differential test per protocol (``tests/test_<protocol>_differential.py``)
feeds every vector, the hypothesis strategies and random splits through both and
asserts the same events, the same bytes out and the same errors at the same
offsets.

Which path runs is decided here, once per process:

* ``REFWIRE_REFERENCE=1`` in the environment when refwire is first imported
  turns every speed path off: every codec and machine takes its plain path (for
  a debugger, a port author stepping through the spec, or a test run of the
  reference itself).  Unset, empty or ``0`` leaves them on (the default).
* A codec or machine built with ``fast=True`` or ``fast=False`` takes that path
  whatever the switch says; ``fast=None`` (the default) follows the switch.  Tests
  of a speed path select it this way.

The switch is read once, at import: changing the environment afterwards changes
nothing.  This module is part of the shared base; it reads the environment and
does nothing else.
"""

from __future__ import annotations

import os
from typing import Final

__all__ = ["ENVIRONMENT_VARIABLE", "REFERENCE", "use_fast"]

#: The environment variable that turns every speed path off.
ENVIRONMENT_VARIABLE: Final = "REFWIRE_REFERENCE"

_OFF: Final = frozenset({"", "0", "false", "no", "off"})

#: True when ``REFWIRE_REFERENCE`` was set (to anything but ``0``, ``false``,
#: ``no``, ``off`` or nothing) at import: every codec and machine built without
#: an explicit ``fast=`` takes its plain path.
REFERENCE: Final[bool] = os.environ.get(ENVIRONMENT_VARIABLE, "").strip().lower() not in _OFF


def use_fast(fast: bool | None = None) -> bool:
    """Whether something built with ``fast`` takes its speed path.

    ``fast`` when it is given (a test or a caller choosing a path), else the
    process-wide switch: the speed path unless ``REFWIRE_REFERENCE`` is set.
    """
    if fast is None:
        return not REFERENCE
    return bool(fast)
