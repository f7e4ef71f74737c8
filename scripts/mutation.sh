#!/usr/bin/env bash
# Mutation testing of ONE core module against its own unit tests (opt-in; not
# part of the default suite).  Uses mutmut 3 (the `dev` extra) in a scratch copy
# of the project, so the worktree is never modified.
#
#   bash scripts/mutation.sh src/refwire/wire.py
#   JOBS=2 bash scripts/mutation.sh src/refwire/sansio.py
#
#   RERUN=old-output.txt bash scripts/mutation.sh src/refwire/tank/frames.py
#
# RERUN= runs only the mutants a previous run of this script on the same module
# did not kill (its output, saved to a file) and counts the ones it killed as
# still killed: valid while the module is unchanged and tests were only added
# (a changed function renumbers its mutants: add a line "  <function>__mutmut_*: changed"
# to the old output so all of that function's mutants run again).
#
# Prints killed / survived / timeout counts, the kill rate over the
# non-equivalent mutants and the surviving mutants (`mutmut show NAME` in the
# scratch dir prints one's diff).  Mutants listed in tests/mutation/equivalent.txt
# (first word of each non-comment line: the mutant name) are left out of the rate,
# and so are those of EXTRA_EQUIVALENT=FILE (same format: equivalents being drafted).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

MODULE=${1:?usage: scripts/mutation.sh src/refwire/MODULE.py}
JOBS=${JOBS:-1}   # the machine is shared: one worker unless told otherwise

# module -> the unit tests that are meant to pin its behaviour
case "$MODULE" in
    src/refwire/wire.py)   TESTS=(tests/test_wire.py tests/test_wire_limits.py) ;;
    src/refwire/sansio.py) TESTS=(tests/test_sansio.py tests/test_pump.py tests/test_machine_contract.py) ;;
    src/refwire/lumberjack/frames.py|src/refwire/lumberjack/codec.py|src/refwire/lumberjack/compression.py|src/refwire/lumberjack/_fast_frames.py)
        TESTS=(tests/test_lumberjack_codec.py tests/test_lumberjack_vectors.py tests/test_lumberjack_limits.py tests/test_lumberjack_fast_json_runs.py tests/test_lumberjack_encoded_window.py tests/test_lumberjack_differential.py) ;;
    src/refwire/lumberjack/connection.py|src/refwire/lumberjack/writer.py|src/refwire/lumberjack/_fast_connection.py)
        TESTS=(tests/test_lumberjack_machines.py "tests/test_stateful.py::test_client_and_server_over_a_chunked_wire[lumberjack]" tests/test_lumberjack_connection_edges.py tests/test_lumberjack_codec.py tests/test_lumberjack_vectors.py tests/test_lumberjack_limits.py tests/test_lumberjack_fast_json_runs.py tests/test_lumberjack_encoded_window.py tests/test_lumberjack_differential.py) ;;
    src/refwire/pravega/frames_codec.py|src/refwire/pravega/frames.py|src/refwire/pravega/commands.py|src/refwire/pravega/_fast_frames.py)
        TESTS=(tests/test_pravega_codec.py tests/test_pravega_vectors.py tests/test_pravega_server_limits.py tests/test_pravega_limits.py tests/test_pravega_fast_block_end_runs.py tests/test_pravega_differential.py) ;;
    src/refwire/pravega/connection.py|src/refwire/pravega/writer.py|src/refwire/pravega/partial.py|src/refwire/pravega/_fast_connection.py)
        TESTS=(tests/test_pravega_machines.py tests/test_pravega_connection_edges.py tests/test_pravega_codec.py tests/test_pravega_vectors.py tests/test_pravega_server_limits.py tests/test_pravega_limits.py tests/test_pravega_fast_block_end_runs.py tests/test_pravega_differential.py) ;;
    src/refwire/pravega/draft2017/partial.py|src/refwire/pravega/draft2017/frames.py)
        TESTS=(tests/test_pravega_draft_vectors.py tests/test_pravega_draft_machines.py tests/test_pravega_draft_limits.py) ;;
    src/refwire/pravega/draft2017/connection.py|src/refwire/pravega/draft2017/machine.py)
        TESTS=(tests/test_pravega_draft_machines.py tests/test_pravega_draft_vectors.py tests/test_pravega_draft_limits.py tests/test_pravega_draft_connection_edges.py) ;;
    src/refwire/tank/bundles.py|src/refwire/tank/_fast_bundles.py)
        # test_tank_fast_chunk_columns.py and the differential test: the columns path against the plain per-message walk
        TESTS=(tests/test_tank_codec.py tests/test_tank_vectors.py tests/test_tank_limits.py tests/test_tank_fast_chunk_columns.py tests/test_tank_differential.py) ;;
    src/refwire/tank/frames.py)
        TESTS=(tests/test_tank_codec.py tests/test_tank_vectors.py tests/test_tank_limits.py) ;;
    src/refwire/tank/connection.py) TESTS=(tests/test_tank_machines.py tests/test_tank_connection_edges.py tests/test_tank_codec.py tests/test_tank_limits.py tests/test_tank_differential.py) ;;
    src/refwire/seastar_rpc/compression.py|src/refwire/seastar_rpc/frames.py|src/refwire/seastar_rpc/negotiation.py|src/refwire/seastar_rpc/_fast_frames.py|src/refwire/seastar_rpc/_fast_compression.py)
        TESTS=(tests/test_seastar_codec.py tests/test_seastar_vectors.py tests/test_seastar_limits.py tests/test_seastar_fast_lz4.py tests/test_seastar_fast_response_runs.py tests/test_seastar_differential.py) ;;
    src/refwire/seastar_rpc/connection.py|src/refwire/seastar_rpc/machine.py|src/refwire/seastar_rpc/_fast_connection.py)
        TESTS=(tests/test_seastar_machines.py tests/test_seastar_connection_edges.py tests/test_seastar_codec.py tests/test_seastar_limits.py tests/test_seastar_fast_response_runs.py tests/test_seastar_differential.py) ;;
    # the chaos --check verdicts: tests/chaos/test_chaos_checkers.py feeds recorded frame streams through each
    # adapter's observers and checker (in process, fast); plus the few proxy tests that exercise a checker
    src/refwire/chaos/check.py)
        TESTS=(tests/chaos/test_chaos_checkers.py "tests/chaos/test_chaos_inner_frames.py::test_the_lumberjack_check_follows_pipelined_windows"
               "tests/chaos/test_chaos_pravega_tank.py::test_tank_check_tells_a_hidden_message_from_a_broker_bug"
               "tests/chaos/test_chaos_lumberjack.py::test_check_tells_a_servers_bug_from_an_injected_fault") ;;
    src/refwire/chaos/adapters/lumberjack.py)
        TESTS=(tests/chaos/test_chaos_checkers.py tests/chaos/test_chaos_inner_frames.py
               "tests/chaos/test_chaos_lumberjack.py::test_check_tells_a_servers_bug_from_an_injected_fault") ;;
    src/refwire/chaos/adapters/pravega.py|src/refwire/chaos/adapters/pravega_draft.py)
        TESTS=(tests/chaos/test_chaos_checkers.py "tests/chaos/test_chaos_pravega_tank.py::test_pravega_and_tank_fields_come_from_their_codecs"
               "tests/chaos/test_chaos_pravega_tank.py::test_an_observer_splits_any_way_the_same_and_passes_what_it_cannot_decode"
               "tests/chaos/test_chaos_pravega_tank.py::test_check_reports_an_ack_the_proxy_raised_and_nothing_on_clean_traffic") ;;
    src/refwire/chaos/adapters/tank.py)
        TESTS=(tests/chaos/test_chaos_checkers.py "tests/chaos/test_chaos_pravega_tank.py::test_pravega_and_tank_fields_come_from_their_codecs"
               "tests/chaos/test_chaos_pravega_tank.py::test_an_observer_splits_any_way_the_same_and_passes_what_it_cannot_decode"
               "tests/chaos/test_chaos_pravega_tank.py::test_tank_check_is_clean_when_every_acked_message_is_read_back"
               "tests/chaos/test_chaos_pravega_tank.py::test_tank_check_names_an_acked_message_the_broker_never_served"
               "tests/chaos/test_chaos_pravega_tank.py::test_tank_check_tells_a_hidden_message_from_a_broker_bug"
               "tests/chaos/test_chaos_pravega_tank.py::test_tank_check_tells_a_rewritten_request_id_from_a_broker_bug") ;;
    src/refwire/chaos/adapters/seastar_rpc.py)
        TESTS=(tests/chaos/test_chaos_checkers.py tests/chaos/test_chaos_seastar.py) ;;
    # the conformance verdicts: judge / predict / explain_mismatch and the severity ranks the exit status comes from
    src/refwire/conform/model.py)
        # test_report_messages.py by node id: its guide test reads docs/ (not copied) and its pipe test runs a subprocess
        TESTS=(tests/conform/test_model_verdicts.py tests/conform/test_model.py
               "tests/conform/test_report_messages.py::test_a_fail_names_the_first_thing_that_differed"
               "tests/conform/test_report_messages.py::test_the_closest_expectation_is_the_one_agreeing_most_and_the_reason_says_which"
               "tests/conform/test_report_messages.py::test_a_profile_documenting_no_pass_is_explained_against_its_other_outcomes"
               "tests/conform/test_report_messages.py::test_a_connection_refwire_reset_reads_as_refwire_s_reset_not_as_open"
               "tests/conform/test_report_messages.py::test_case_pages_render_backticks_as_code_escaped_and_carry_the_legend"
               "tests/conform/test_report_messages.py::test_matrix_links_are_relative_and_each_run_shows_its_seed_and_run_id"
               "tests/conform/test_report_messages.py::test_merged_indexes_keep_cases_in_natural_order"
               "tests/conform/test_report_messages.py::test_a_single_run_page_shows_its_run_id_when_it_has_one"
               "tests/conform/test_report_messages.py::test_a_testee_that_died_is_said_once_on_the_terminal_and_every_case_is_still_recorded"
               "tests/conform/test_report_messages.py::test_the_summary_lists_cases_in_natural_order"
               "tests/conform/test_report_messages.py::test_a_testee_client_s_stderr_is_on_the_terminal_the_case_page_and_in_junit"
               "tests/conform/test_report_messages.py::test_other_non_pass_verdicts_show_a_process_that_has_something_to_say"
               "tests/conform/test_report_messages.py::test_junit_has_a_system_err_only_for_a_testee_process") ;;
    # the capture pipeline's conformance rules: each rule's planted violation and its clean twin (the pure checks),
    # plus the decoders and the recorded sessions of each protocol.  By node id: the one Spark test of
    # test_rules_verdicts.py (the DataFrame queries) starts a JVM per mutant, which this script cannot afford
    src/refwire/pipeline/rules.py|src/refwire/pipeline/rulekit.py|src/refwire/pipeline/dialects/lumberjack.py|src/refwire/pipeline/dialects/pravega.py|src/refwire/pipeline/dialects/pravega_draft.py|src/refwire/pipeline/dialects/tank.py|src/refwire/pipeline/dialects/seastar_rpc.py)
        TESTS=(tests/pipeline/test_decoders.py tests/pipeline/test_protocol_captures.py
               "tests/pipeline/test_rules_verdicts.py::test_a_planted_violation_is_flagged_by_its_rule_and_its_clean_twin_by_none"
               "tests/pipeline/test_rules_verdicts.py::test_every_rule_with_a_pure_twin_has_a_planted_case"
               "tests/pipeline/test_rules_verdicts.py::test_violations_keep_their_connection_and_protocol_and_come_in_connection_order"
               "tests/pipeline/test_rules_verdicts.py::test_which_protocols_have_rules"
               "tests/pipeline/test_rules_verdicts.py::test_lumberjack_s_pure_rule_flags_an_undecodable_byte_and_nothing_on_a_clean_connection"
               "tests/pipeline/test_rules_verdicts.py::test_lumberjack_acks_pair_with_windows_in_order"
               "tests/pipeline/test_rules_verdicts.py::test_an_ack_after_a_trailing_empty_window_has_no_window_to_close"
               "tests/pipeline/test_rules_verdicts.py::test_the_rule_kit"
               "tests/pipeline/test_rules_verdicts.py::test_lumberjack_synthetic_captures_plant_the_fault_they_name"
               "tests/pipeline/test_rules_verdicts.py::test_a_client_whose_first_bytes_do_not_decode_is_flagged_once_by_the_decoding_rule") ;;
    # the conformance cases' shared expectation helpers (observers, frame builders, the facts a case judges):
    # fed recorded bytes and driven against scripted conversations in process, one test file per protocol
    src/refwire/conform/cases/lumberjack/_common.py|src/refwire/conform/cases/lumberjack/_serving.py)
        TESTS=(tests/conform/test_case_helpers_lumberjack.py) ;;
    src/refwire/conform/cases/pravega/_common.py)
        TESTS=(tests/conform/test_case_helpers_pravega.py) ;;
    src/refwire/conform/cases/pravega_draft/_common.py)
        TESTS=(tests/conform/test_case_helpers_pravega_draft.py) ;;
    src/refwire/conform/cases/tank/_common.py)
        TESTS=(tests/conform/test_case_helpers_tank.py) ;;
    src/refwire/conform/cases/seastar_rpc/_common.py)
        TESTS=(tests/conform/test_case_helpers_seastar_rpc.py) ;;
    *) echo "no unit-test mapping for $MODULE (add one in $0)" >&2; exit 2 ;;
esac
# A plain module (the reference path) is mutated with every speed path off, so the
# tests exercise it rather than the speed path beside it (see src/refwire/speed.py);
# a speed module (_fast*) runs as the tests select (the default: on).
case "$(basename "$MODULE")" in
    _fast*) ;;
    *) export REFWIRE_REFERENCE=1 ;;
esac
[ -f "$MODULE" ] || { echo "$MODULE: no such file" >&2; exit 2; }
# a mapped test file that does not exist (yet) is skipped (a test named by its node id: its file)
EXISTING=(); for t in "${TESTS[@]}"; do [ -f "${t%%::*}" ] && EXISTING+=("$t"); done; TESTS=("${EXISTING[@]}")
[ ${#TESTS[@]} -gt 0 ] || { echo "none of the tests mapped to $MODULE exists: mutmut would run the whole suite" >&2; exit 2; }

NAME=$(echo "${MODULE#src/refwire/}" | sed 's/\.py$//; s#/#-#g')
WORK=${MUTATION_DIR:-/tmp/refwire-mutation-$NAME-$$}
if [ -n "${RESUME:-}" ] && [ -d "$WORK/mutants" ]; then
    # RESUME=1 with MUTATION_DIR=<a stopped run's scratch dir>: mutmut continues where it stopped
    sed -i '/^timeout_multiplier/d' "$WORK/pyproject.toml"; echo 'timeout_multiplier = 1.0' >> "$WORK/pyproject.toml"
else
    rm -rf "$WORK"
    mkdir -p "$WORK"
    cp -r pyproject.toml src specs tests "$WORK"/
    rm -rf "$WORK"/tests/.hypothesis
    {
        echo
        echo "[tool.mutmut]"
        echo 'source_paths = ["src"]'
        echo 'also_copy = ["specs"]'
        echo "only_mutate = [\"$MODULE\"]"
        printf 'pytest_add_cli_args_test_selection = ['; printf '"%s", ' "${TESTS[@]}"; echo ']'
        echo 'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"]'
        # a mutant that makes a decoder spin is cut off after 2 x (its tests' time + 1 s)
        # of CPU, not mutmut's default 30 x: each one would otherwise cost minutes
        echo 'timeout_multiplier = 1.0'
    } >> "$WORK/pyproject.toml"
fi

MUTMUT="$ROOT/.venv/bin/mutmut"
NAMES=()
if [ -n "${RERUN:-}" ]; then
    mapfile -t NAMES < <(sed -n 's/^  \([^ ]*__mutmut_[0-9*]*\): .*/\1/p' "$RERUN")
    [ ${#NAMES[@]} -gt 0 ] || { echo "$RERUN lists no surviving mutants: nothing to rerun" >&2; exit 0; }
fi
(cd "$WORK" && "$MUTMUT" run --max-children "$JOBS" "${NAMES[@]}" >"$WORK/run.log" 2>&1) || {
    echo "mutmut run failed; see $WORK/run.log" >&2; tail -30 "$WORK/run.log" >&2; exit 1; }
(cd "$WORK" && "$MUTMUT" results --all true) >"$WORK/results.txt" 2>&1

"$ROOT/.venv/bin/python" - "$WORK/results.txt" "$ROOT/tests/mutation/equivalent.txt" "$WORK" "${RERUN:-}" "${EXTRA_EQUIVALENT:-}" <<'EOF'
import re, sys
results, eq_file, work, rerun, extra_eq = sys.argv[1:6]
status = {}
for line in open(results):
    m = re.match(r"\s*([\w.]+__mutmut_\d+): (.+)$", line)
    if m:
        status[m.group(1)] = m.group(2).strip()
if rerun:
    # mutants the previous run killed were not run again: they stay killed
    import fnmatch
    again = set(re.findall(r"^  ([^ ]+__mutmut_[\d*]+): ", open(rerun).read(), re.M))
    for k, v in status.items():
        if v == "not checked" and not any(fnmatch.fnmatchcase(k, pat) for pat in again):
            status[k] = "killed"
    print(f"rerun of the {len(again)} mutants {rerun} did not kill; the others count as killed")
equivalent = {}
for path in [eq_file] + ([extra_eq] if extra_eq else []):
  try:
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, why = line.partition(" ")
            equivalent[name] = why.strip()
  except FileNotFoundError:
    pass
mine = {k: v for k, v in status.items() if k not in equivalent}
eq_here = sorted(k for k in status if k in equivalent)
counts = {}
for v in mine.values():
    counts[v] = counts.get(v, 0) + 1
killed = counts.get("killed", 0)
survived = counts.get("survived", 0)
timeout = counts.get("timeout", 0)
other = sum(n for k, n in counts.items() if k not in ("killed", "survived", "timeout"))
denominator = killed + survived + timeout + other
rate = 100.0 * (killed + timeout) / denominator if denominator else 100.0
print(f"mutants: {len(status)}  equivalent (excluded): {len(eq_here)}")
print(f"killed: {killed}  survived: {survived}  timeout: {timeout}  other: {other} {sorted(set(counts) - {'killed', 'survived', 'timeout'})}")
print(f"kill rate (killed+timeout over non-equivalent): {rate:.1f} %")
surv = sorted(k for k, v in mine.items() if v != "killed" and v != "timeout")
if surv:
    print(f"not killed (see: cd {work} && {sys.prefix}/bin/mutmut show NAME):")
    for k in surv:
        print(f"  {k}: {mine[k]}")
stale = sorted(set(equivalent) - set(status))
if stale:
    prefix = {k.rsplit(".", 1)[0] for k in status}
    stale = [k for k in stale if any(k.startswith(p + ".") for p in prefix)]
    for k in stale:
        print(f"  stale entry in equivalent.txt (no such mutant now): {k}")
EOF
