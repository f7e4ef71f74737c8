#!/usr/bin/env bash
# Install everything the test suite needs into .venv (Python packages and the
# npm interop peers, pinned), then run the whole default suite.
#   bash scripts/test.sh            # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[dev,interop]"
# Third-party Lumberjack peer(s) from npm, versions pinned by the lock file.
npm ci --prefix tests/interop/node --no-audit --no-fund --loglevel=error

.venv/bin/python -m pytest "$@"
