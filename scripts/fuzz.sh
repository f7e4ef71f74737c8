#!/usr/bin/env bash
# The long fuzz run (docs/guides/fuzzing.rst): every target of tests/fuzz/fuzz_targets.py
# under atheris for SECONDS each (default 60), seeded from specs/*/vectors and the kept
# corpus, growing tests/fuzz/corpus/<target>/; then the corpus is minimised (only inputs
# that reach new code are kept), checked to be at most 5 MiB, replayed under coverage.py
# (line and branch coverage of the fuzzed modules), and the executions are totalled.
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]
#
# A finding stops that target's run: the input is saved under ~/.cache/refwire/fuzz/artifacts/
# and the script exits non-zero at the end.  Replay one with
#   .venv/bin/python tests/fuzz/fuzz_main.py replay TARGET FILE
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
shift || true
PY=${PYTHON:-.venv/bin/python}
WORK=${REFWIRE_FUZZ_WORK:-$HOME/.cache/refwire/fuzz}
CORPUS=tests/fuzz/corpus
mkdir -p "$WORK/artifacts" "$WORK/logs" "$CORPUS"
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    mapfile -t TARGETS < <("$PY" tests/fuzz/fuzz_main.py list)
fi
export PYTHONHASHSEED=0
status=0
total=0
for t in "${TARGETS[@]}"; do
    seeds="$WORK/seeds/$t"
    rm -rf "$seeds"
    mkdir -p "$CORPUS/$t"
    log="$WORK/logs/$t.log"
    "$PY" tests/fuzz/fuzz_main.py fuzz "$t" --seeds "$seeds" -- \
        -max_total_time="$SECONDS_EACH" -use_value_profile=1 -max_len=4096 -timeout=20 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$WORK/artifacts/" "$CORPUS/$t" "$seeds" >"$log" 2>&1
    rc=$?
    runs=$(grep -Eo 'Done [0-9]+ runs' "$log" | grep -Eo '[0-9]+' || true)
    [ -z "$runs" ] && runs=$(grep -Eo '^#[0-9]+' "$log" | tail -1 | tr -d '#')
    total=$((total + ${runs:-0}))
    if [ $rc -ne 0 ]; then
        status=1
        echo "$t: FINDING (exit $rc) after ${runs:-?} executions; see $log"
        grep -A30 'Uncaught Python exception' "$log" | head -40
    else
        echo "$t: ${runs:-?} executions, no finding"
    fi
    "$PY" tests/fuzz/fuzz_main.py minimise "$t" "$CORPUS/$t"
done
echo "executions: $total"
size=$(du -sb "$CORPUS" | cut -f1)
echo "corpus: $size bytes in $(find "$CORPUS" -type f | wc -l) files"
if [ "$size" -gt $((5 * 1024 * 1024)) ]; then
    echo "the corpus is over 5 MiB"
    status=1
fi
# line and branch coverage of the fuzzed modules, from replaying the seeds and the corpus
rm -f "$WORK"/.coverage*
for t in "${TARGETS[@]}"; do
    COVERAGE_FILE="$WORK/.coverage.$t" "$PY" -m coverage run --branch --source=refwire.lumberjack,refwire.pravega,refwire.tank,refwire.seastar_rpc \
        --omit='*/cli.py,*/client.py,*/server.py,*/service.py,*/storage.py,*/store.py,*/disk.py,*/controller.py,*/_grpc.py,*/_protobuf.py,*/demo.py,*/conform_verbs.py,*/describe.py,*/registry.py' \
        tests/fuzz/fuzz_main.py replay "$t" "$CORPUS/$t" "$WORK/seeds/$t" >"$WORK/logs/$t.coverage.log" 2>&1 || { status=1; echo "$t: replay failed, see $WORK/logs/$t.coverage.log"; }
done
COVERAGE_FILE="$WORK/.coverage" "$PY" -m coverage combine -q "$WORK"/.coverage.*
COVERAGE_FILE="$WORK/.coverage" "$PY" -m coverage report --precision=1 | tee "$WORK/coverage.txt" | tail -40
exit $status
