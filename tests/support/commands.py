"""How tests start the ``refwire`` console script: the one installed beside this
interpreter, else ``python -m refwire.cli``."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def refwire_command() -> list[str]:
    """The argv prefix that runs ``refwire`` from this interpreter's environment."""
    exe = shutil.which("refwire", path=str(Path(sys.executable).parent)) or shutil.which("refwire")
    return [exe] if exe else [sys.executable, "-m", "refwire.cli"]


REFWIRE = refwire_command()
