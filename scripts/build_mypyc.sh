#!/usr/bin/env bash
# The optional mypyc build of the codec cores (setup.py's MYPYC_MODULES), compiled in
# place: each module's .so lands next to its .py under src/refwire/, and Python
# imports the .so first.  The default install stays pure Python; this is opt-in.
#   bash scripts/build_mypyc.sh           # compile (needs the dev extra: mypy/mypyc, and gcc)
#   bash scripts/build_mypyc.sh --clean   # remove every compiled module: pure Python again
#   bash scripts/build_mypyc.sh --status  # say which refwire modules are compiled
# While the .so files are there, an edit to a compiled module's .py has no effect
# until you build again (or clean).  .gitignore keeps the .so files out of git.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}

case "${1:-}" in
--clean)
    find src -name '*.so' -print -delete
    rm -rf build/mypyc
    exit 0
    ;;
--status)
    found=$(find src -name '*.so' | sort)
    if [ -z "$found" ]; then echo "pure Python (no compiled modules)"; else echo "$found"; fi
    exit 0
    ;;
"") ;;
*)
    echo "usage: $0 [--clean|--status]" >&2
    exit 2
    ;;
esac

# pyproject.toml's license field needs setuptools >= 77 when setup.py runs directly.
"$PY" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 77)' \
    || "$PY" -m pip install --quiet "setuptools>=77"
REFWIRE_MYPYC=1 "$PY" setup.py --quiet build_ext --inplace
# The build is now current with every source, but it does not rewrite what did not
# change: mypyc skips a module whose content is the same (a touched or checked-out
# file), and setuptools does not copy again a module's small import stub, whose C
# never changes (the code is in the shared _codec__mypyc library).  Mark them all
# built now, so tests/test_compiled_build.py's "older than its source" check only
# fires for an edit made after the last build.
find src -name '*.so' -exec touch {} +
echo "compiled:"
find src -name '*.so' | sort
