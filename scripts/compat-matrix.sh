#!/usr/bin/env bash
# Rewrite docs/guides/compatibility.rst from a run of the real peers: builds them
# (peers/build.sh, cached), runs every fast conformance case against each program
# in each role, and writes the page (tests/peers/test_peer_matrix.py compares it
# on every other run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
REFWIRE_WRITE_MATRIX=1 exec "$PY" -m pytest -p no:cacheprovider -q -n 0 tests/peers/test_peer_matrix.py "$@"
