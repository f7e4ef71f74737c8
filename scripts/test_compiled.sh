#!/usr/bin/env bash
# Opt-in: the codec, vector, limits and machine tests on the mypyc-compiled build
# (never part of scripts/test.sh).  Builds the compiled modules in place, checks they
# are the ones imported, runs the tests, and cleans them again unless KEEP=1.
#   bash scripts/test_compiled.sh            # build, the targeted tests (about a minute), clean
#   KEEP=1 bash scripts/test_compiled.sh     # leave the compiled modules in place afterwards
#   FULL=1 bash scripts/test_compiled.sh     # the whole default suite on the compiled build instead
#                                            # (with the pure run of scripts/test.sh: the suite twice)
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}

bash scripts/build_mypyc.sh
[ "${KEEP:-0}" = 1 ] || trap 'bash scripts/build_mypyc.sh --clean >/dev/null' EXIT
# The test below fails unless the compiled modules are the ones imported.
export REFWIRE_EXPECT_COMPILED=1
if [ "${FULL:-0}" = 1 ]; then
    "$PY" -m pytest "$@"
else
    "$PY" -m pytest tests/test_compiled_build.py tests/test_wire.py tests/test_wire_limits.py tests/test_sansio.py \
        tests/test_*_codec.py tests/test_*_vectors.py tests/test_*_limits.py tests/test_*_machines.py \
        tests/test_seastar_fast_response_runs.py tests/test_pravega_fast_block_end_runs.py tests/test_*_differential.py "$@"
fi
