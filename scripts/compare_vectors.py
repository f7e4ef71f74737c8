"""Compare every vector file with its version at a git revision, ignoring only the
``layer`` key of error expectations (the one field added to the vectors by hand):
any other difference, a byte of hex included, is reported and the exit status is 1.

    python scripts/compare_vectors.py HEAD~1
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def strip_layer(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: strip_layer(v) for k, v in obj.items() if k != "layer"}
    if isinstance(obj, list):
        return [strip_layer(x) for x in obj]
    return obj


def main(rev: str) -> int:
    bad = 0
    for path in sorted(ROOT.glob("specs/*/vectors/*.json")):
        rel = path.relative_to(ROOT).as_posix()
        old_text = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        old, new = json.loads(old_text), json.loads(path.read_text(encoding="utf-8"))
        if strip_layer(old) != strip_layer(new) or "layer" in json.dumps(strip_layer(old)):
            print(f"{rel}: differs from {rev} beyond the layer field")
            bad += 1
        else:
            print(f"{rel}: unchanged apart from layer")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "HEAD"))
