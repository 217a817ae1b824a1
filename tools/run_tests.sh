#!/usr/bin/env bash
# make test / make ci: the checks, each step timed, with a summary at the end.
#   usage: run_tests.sh BUILD_DIR BACKEND PYTHON [test|ci|full]
# test (make test, what a student runs, about 10 minutes on 2 cores from a fresh clone):
#   the build, the reference and tool tests, every chapter's solution tests and its skeleton
#   failing, the emulator's tests, the demo and the tour.
# ci (make ci, what CI runs): all of that, then the slower checks: more emulator
#   schedules, checked mode, the planted-bug and exercise-mutant suites, the long
#   random-trace test of chapter 8, the book, its figures and the real-browser check, and
#   nvcc-check. The chapter-by-chapter ones are directed at what the commit changed, plus a
#   rotating share of the rest, each phase capped at its share of CI's budget
#   (tools/ci_select.py, tools/ci_budget.py); what is cut is printed, never counted.
# full (make ci-full): every one of those checks, for every chapter, with no cap.
set -uo pipefail
build=$1 backend=$2 python=$3 scope=${4:-test}
case "$scope" in test|ci|full) ;; *) echo "run_tests.sh: scope must be test, ci or full, not $scope"; exit 2 ;; esac
logs=$build/test-logs
mkdir -p "$logs"
results=()
cut_items=()
n_pass=0 n_fail=0

# Each phase's wall time, for the budget report (tools/ci_budget.py report): .ci/run's set-up
# comes in as PA_CI_SETUP_SECONDS.
phase_times=$logs/phase-times.tsv
: > "$phase_times"
[ -n "${PA_CI_SETUP_SECONDS:-}" ] && printf 'set-up and doctor\t%s\n' "$PA_CI_SETUP_SECONDS" >> "$phase_times"
phase_start=$SECONDS
run_start=$(( $(date +%s) - ${PA_CI_SETUP_SECONDS:-0} ))
phase_end() {
    printf '%s\t%s\n' "$1" $((SECONDS - phase_start)) >> "$phase_times"
    phase_start=$SECONDS
}

# cut NAME: a check the time cap left out. Printed now and in the summary; never counted.
cut() {
    printf '  %-58s cut (time cap: not run)\n' "$1"
    cut_items+=("$1")
}
# report_cut LOG: the items a capped runner (run_mutants.py, nvcc_check.sh) left out.
report_cut() {
    local line
    while IFS= read -r line; do
        cut_items+=("$line")
    done < <(sed -nE 's/^ *(chapter +[0-9]+: [0-9]+ not run: .*)$/mutants of \1/p; s/^ *CUT +(.*)$/nvcc-check: \1 not compiled/p' "$1")
}

# The log of the step named NAME.
log_path() { echo "$logs/$(echo "$1" | tr -c 'A-Za-z0-9' '_').log"; }

# outcome NAME LOG STATUS SECONDS: the end of a step's line (ok or FAIL, its time), the tail
# of its log if it failed, and the tallies.
outcome() {
    local name=$1 log=$2 status=$3 secs=$4
    if [ "$status" = 0 ]; then
        printf 'ok    (%ss)\n' "$secs"
        results+=("ok    $name")
        n_pass=$((n_pass + 1))
    else
        printf 'FAIL  (%ss)\n' "$secs"
        echo "------ last lines of $log"
        tail -n 25 "$log" | sed 's/^/  | /'
        echo "------"
        results+=("FAIL  $name   (log: $log)")
        n_fail=$((n_fail + 1))
    fi
}

# step NAME COMMAND...: runs the command quietly (log in $logs), records pass/fail.
step() {
    local name=$1 start=$SECONDS log status=0
    shift
    log=$(log_path "$name")
    printf '  %-58s ' "$name"
    "$@" > "$log" 2>&1 || status=$?
    outcome "$name" "$log" "$status" $((SECONDS - start))
}

# Steps that may run side by side: queue NAME COMMAND... adds one; run_queue JOBS runs the
# queue, JOBS at a time, each reported as `step` reports it, in the order they end. For
# checked mode's runs: ThreadSanitizer keeps the emulator near one core (user time 0.93 of
# real, alone), so two at a time on CI's 2 cores took 406 s where one at a time had taken
# 490 (each ran about 1.6 times slower beside the other). Bash before 5.1 (no `wait -p`)
# runs them one at a time.
queued_names=()
queued_cmds=()
queue() {
    queued_names+=("$1")
    shift
    queued_cmds+=("$(printf '%q ' "$@")")
}
run_queue() {
    local jobs=$1 deadline=${2:-} i pid done_pid status
    local -A name_of=() start_of=()
    if [ "${BASH_VERSINFO[0]}" -lt 5 ] || { [ "${BASH_VERSINFO[0]}" = 5 ] && [ "${BASH_VERSINFO[1]}" -lt 1 ]; }; then
        jobs=1
    fi
    reap() {  # waits for one of the running steps and reports it
        status=0
        wait -n -p done_pid "${!name_of[@]}" || status=$?
        printf '  %-58s ' "${name_of[$done_pid]}"
        outcome "${name_of[$done_pid]}" "$(log_path "${name_of[$done_pid]}")" "$status" \
            $((SECONDS - start_of[$done_pid]))
        unset "name_of[$done_pid]" "start_of[$done_pid]"
    }
    for i in "${!queued_names[@]}"; do
        # Past DEADLINE (seconds since the epoch) no new item starts; those left are cut.
        if [ -n "$deadline" ] && [ "$(date +%s)" -ge "$deadline" ]; then
            cut "${queued_names[$i]}"
            continue
        fi
        if [ "$jobs" = 1 ]; then
            eval "step \"\${queued_names[$i]}\" ${queued_cmds[$i]}"
            continue
        fi
        while [ "${#name_of[@]}" -ge "$jobs" ]; do reap; done
        if [ -n "$deadline" ] && [ "$(date +%s)" -ge "$deadline" ]; then
            cut "${queued_names[$i]}"
            continue
        fi
        eval "${queued_cmds[$i]}" > "$(log_path "${queued_names[$i]}")" 2>&1 &
        pid=$!
        name_of[$pid]=${queued_names[$i]}
        start_of[$pid]=$SECONDS
    done
    while [ "${#name_of[@]}" -gt 0 ]; do reap; done
    queued_names=()
    queued_cmds=()
}

# The skeleton must build, and its CORE tests must run and FAIL (a stub never passes). The
# tests of stretch exercises (suites named Stretch*, optional) are not what makes it red.
STRETCH_FILTER='Stretch*:*/Stretch*'
skeleton_fails() {
    local bin=$1 out status failed total
    out=$("$bin" --gtest_brief=1 --gtest_filter="-$STRETCH_FILTER" 2>&1)
    status=$?
    echo "$out"
    total=$(sed -nE 's/^\[=+\] ([0-9]+) tests? from .* ran.*/\1/p' <<<"$out" | tail -n 1)
    failed=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' <<<"$out")
    if [ "$status" = 1 ] && [ "${failed:-0}" -gt 0 ]; then
        echo "skeleton: $failed of $total core tests fail, as they must before the exercises are done"
        return 0
    fi
    echo "skeleton: expected failing core tests (exit 1); got exit $status with ${failed:-0} failures"
    return 1
}

# The "core done" student (make ci): for each chapter with stretch exercises, the solution
# with its core regions kept and its stretch regions stubbed (tools/make_skeletons.py
# --core-only, built as test_chNN_core in this build dir). Its core tests must all pass (core
# tests never run stretch code) and every Stretch* suite must fail (its tests see a stub).
core_done() {  # core_done NN...: those chapters (each has stretch exercises)
    local chapters=$* targets n bin out status suites failing passing s bad=0
    targets=$(for n in $chapters; do printf 'test_ch%s_core ' "$n"; done)
    cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target $targets || return 1
    for n in $chapters; do
        bin=$build/test_ch${n}_core
        out=$(PA_EMU_SCHEDULE=forward "$bin" --gtest_brief=1 --gtest_filter="-$STRETCH_FILTER" 2>&1)
        status=$?
        total=$(sed -nE 's/^\[=+\] ([0-9]+) tests? from .* ran.*/\1/p' <<<"$out" | tail -n 1)
        if [ "$status" != 0 ] || [ "${total:-0}" = 0 ]; then
            echo "$out" | tail -n 40
            echo "chapter $n, core done: the core tests must pass with the stretch regions stubbed (exit $status)"
            bad=1
        else
            echo "chapter $n, core done: all $total core tests pass"
        fi
        out=$(PA_EMU_SCHEDULE=forward "$bin" --gtest_filter="$STRETCH_FILTER" 2>&1)
        suites=$("$bin" --gtest_list_tests --gtest_filter="$STRETCH_FILTER" | sed -nE 's|^([^ ].*)\.$|\1|p' | sort -u)
        failing=$(sed -nE 's/^\[  FAILED  \] ([^ .]*)\..* \([0-9]+ ms\)$/\1/p' <<<"$out" | sort -u)
        passing=$(sed -nE 's/^\[       OK \] ([^ .]*)\..*/\1/p' <<<"$out" | sort -u)
        if [ -z "$suites" ]; then
            echo "chapter $n has stretch exercises but no Stretch* test suite"
            bad=1
        fi
        for s in $suites; do
            if grep -qxF "$s" <<<"$failing"; then
                echo "chapter $n, core done: $s fails, as it must while its exercise is a stub"
            elif ! grep -qxF "$s" <<<"$passing"; then
                echo "chapter $n, core done: $s skipped on this backend (GPU-only tests)"
            else
                echo "chapter $n, core done: every test of $s passes with the stretch regions stubbed:"
                echo "  it cannot tell a missing stretch answer"
                bad=1
            fi
        done
    done
    [ "$bad" = 0 ]
}

# checked_filter NN: sets filter=(...), the tests checked mode leaves out of chapter NN.
# Chapter 8's long engine runs take minutes under ThreadSanitizer: their kernels are the
# ones of the smaller chapter 8 tests, which run. (The sampling draws are host code: 20,000
# draws a case under ThreadSanitizer are slow and check nothing of a kernel. Chapters
# 10-12's engine tests run kernels their chapters' own tests check here, and were most of
# chapter 11's 8 minutes and chapter 12's 2 in checked mode.)
checked_filter() {
    local num=$1 skip=()
    filter=()
    if [ "$num" = 08 ]; then
        filter=(--gtest_filter=Ch08/*:*Errors*:PrefixCache.AppendAt*:PrefixCache.HashChains*:PrefixCache.Invariants*:PagedVsDense.TheTokens*:PagedVsDense.SameTokensWithChunked*:EngineVariants.Cascade*-Ch08/SamplingGolden.Draws*)
        return
    fi
    [ "$num" -ge 10 ] && skip+=("*InTheEngine*")
    # (Chapter 11's StretchFp8Mla.EqualsThe16BitKernelOnTheHostDequantizedPool, 65 of its
    # 317 s here, runs two launches that other tests run here in the same configuration:
    # the fp8 kernel, one block, unsplit, on each fp8_mla_ case, as MatchesDequantized...
    # does; the 16-bit kernel, one block, unsplit, on the same shapes, as
    # MlaGolden.MatchesReference does on the mla_ cases (same dtype, heads, block size and
    # lengths; the fp16 edge case has one more sequence, of 65 tokens, where mla_'s edges
    # stop at 40: block_size + 1 is there as 17). Its claim, bit for bit equal outputs, is
    # numerical: the plain runs check it.)
    # (And the split and hand-planned runs of its largest case, mla_bf16_h128_bs32_split,
    # 51 s: the same kernel paths run here on mla_fp16_h64_bs16_split (64-row tiles split,
    # chunks ending inside a stage), mla_fp16_h64_bs32_s4 (splits at block size 32) and
    # mla_bf16_h128_bs64_s1 (bf16 splits); the case itself still runs, unsplit in
    # MlaGolden and as items stopping inside a stage in MlaHandPlan.)
    [ "$num" = 11 ] && skip+=("*EqualsThe16BitKernelOnTheHostDequantizedPool*"
        "*StretchMlaSplit.*/mla_bf16_h128_bs32_split" "*StretchMlaHandPlan.*/mla_bf16_h128_bs32_split")
    # (And three more, 107 of chapter 11's remaining 490 s here, each a kernel path that
    # another case runs in this mode: mla_fp16_h128_bs32_s4 is mla_fp16_h64_bs32_s4's dtype,
    # block size and 4 new tokens on twice the 64-row tiles, over 70 keys at most; the fp8
    # 64-row tiles with 4 new tokens run on fp8_mla_fp16_h64_bs16_split (1, 4 and 2 new
    # tokens); the unsplit one-block run of mla_fp16_h64_bs16_split (300 keys: the ring
    # wraps) is mla_bf16_h128_bs32_split's in MlaGolden (bf16, block size 32), fp16 64-row
    # tiles on 16-token blocks run unsplit on mla_fp16_h128_bs16_s2, and its splits still run.)
    [ "$num" = 11 ] && skip+=("*/mla_fp16_h128_bs32_s4" "*StretchFp8Mla*/fp8_mla_fp16_h64_bs32_s4"
        "*MlaGolden.MatchesReference/mla_fp16_h64_bs16_split")
    # (Chapter 10's forced splits of three prefill cases, 76 of its 340 s: the 150-token
    # chunk's case (VarlenGolden still runs it: the only case with 300 keys of prefix), the
    # bf16 D 64 chunks and the three tiles of 160 rows; forced splits of D 64 and D 128 run
    # on six other cases each.)
    [ "$num" = 10 ] && skip+=("*StretchSplitTiles.*/varlen_fp16_d128_bs16_g2_chunked"
        "*StretchSplitTiles.*/varlen_bf16_d64_bs32_g1_chunked" "*StretchSplitTiles.*/varlen_fp16_d128_bs16_g4_tiles160")
    [ "${#skip[@]}" -gt 0 ] && filter=(--gtest_filter=-"$(IFS=:; echo "${skip[*]}")")
    return 0
}
# checked_shards NN: how many GoogleTest shards chapter NN's checked run is cut into (the long
# ones, so that two cores stay busy and a time cap cuts a shard, not a whole chapter: CI's
# times in checked mode, 2026-12-02: 11 1,186 s, 10 639, 09 370, 08 247, the rest 98 or less).
checked_shards() {
    case "$1" in 11) echo 6 ;; 10) echo 4 ;; 09) echo 3 ;; 08) echo 2 ;; *) echo 1 ;; esac
}

# The property tests' rotating seeds come from the commit (tests/common/commit_seed.h).
export PA_COMMIT=${PA_COMMIT:-$(git rev-parse HEAD 2> /dev/null || true)}
echo "== make $scope ($backend backend, build in $build)"
step "build everything" cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)"
phase_end "build"
step "reference self-tests (pytest reference/)" \
    bash -c "cd reference && '$python' -m pytest -q -p no:cacheprovider"
step "skeleton generator, book listings, progress, book-numbers, mutant-runner, A/B-table, CI-selector and GPU-hazard-table tests (pytest tools/)" \
    "$python" -m pytest -q -p no:cacheprovider tools/test_make_skeletons.py tools/test_book_listings.py \
    tools/test_progress.py tools/test_check_book_numbers.py tools/test_run_mutants.py tools/test_ab_table.py \
    tools/test_ci_select.py tools/test_book_path.py tools/test_book_words.py tools/test_check_book_refs.py \
    tools/test_gpu_hazards.py
step "the benchmarks' GPU-free parts: case files, comparisons, plots (pytest bench/)" \
    "$python" -m pytest -q -p no:cacheprovider bench/
step "chapters/ is generated from solutions/ and current" \
    "$python" tools/make_skeletons.py --check
step "the book's recorded outputs cite current source lines" \
    "$python" tools/check_cited_lines.py
step "the book's typed measurements are in the files they name" \
    "$python" tools/check_book_numbers.py
step "the tests, files, functions and make commands the book names exist" \
    "$python" tools/check_book_refs.py
step "golden-case reader, PA_TODO and error messages (test_common)" "$build/test_common"
if [ "$backend" = cpu ]; then
    step "emulator tests, schedule forward" env PA_EMU_SCHEDULE=forward "$build/tests/emu/test_emu"
    step "chapter 13's pipeline, the host of its planted bugs, right in five schedule orders" \
        "$build/tests/emu/test_emu_pipeline"
else
    step "emulator semantics tests on the GPU" "$build/tests/emu/test_emu"
    step "Hopper semantics tests on the GPU (sm_90a; they skip on older GPUs)" "$build/tests/emu/test_emu_hopper"
fi
# make test runs them one after another, in chapter order, as a student reads them. make ci
# runs the same ones two at a time, the longest first: a test run keeps about 1.4 of the two
# cores busy (chapter 11's 36.7 s: 51.4 s of CPU), so side by side they take about a quarter
# less (the order of their lines is the order they end).
run_or_queue() { if [ "$scope" = test ]; then step "$@"; else queue "$@"; fi; }
chapter_dirs=(solutions/[0-9][0-9]-*/)
[ "$scope" = test ] || chapter_dirs=(solutions/{08,11,12}-*/ $(printf '%s\n' "${chapter_dirs[@]}" | grep -vE '/(08|11|12)-'))
for dir in "${chapter_dirs[@]}"; do
    slug=$(basename "$dir")
    num=${slug%%-*}
    if [ "$backend" = cpu ]; then
        # (The JSON report's times order the exercise mutants' runs below: cheap tests first.)
        run_or_queue "chapter $num solution tests, schedule forward" \
            env PA_EMU_SCHEDULE=forward "$build/test_ch${num}_solution" \
            --gtest_output="json:$logs/test_ch${num}_solution.json"
    else
        run_or_queue "chapter $num solution tests" "$build/test_ch${num}_solution"
    fi
    run_or_queue "chapter $num skeleton compiles and fails its tests" skeleton_fails "$build/test_ch${num}_chapter"
done
run_or_queue "chapter 10's decode cases equal chapter 9's kernels (test_ch10_vs_ch09_solution)" \
    env PA_EMU_SCHEDULE=forward "$build/test_ch10_vs_ch09_solution"
[ "$scope" = test ] || run_queue 2
step "the serving demo runs (make demo)" "$build/demo/serve" --quiet
step "the tour runs (make tour)" "$build/demo/tour"

if [ "$scope" != test ]; then
# make ci and make ci-full: the slower checks. make ci-full runs every one of them whole;
# make ci directs them at what this commit changed and samples the rest (issue 58), each
# capped phase stopping at its share of CI's budget (tools/ci_budget.py), and says what it
# cut. Nothing cut is counted as passed.
phase_end "make test's runs"
echo "== make $scope: the slower checks"
budget() { "$python" tools/ci_budget.py "$@"; }
if [ "$backend" = cpu ]; then
    # This machine's speed against the slow machine the budget is written for (skipped when
    # .ci/run or the caller already measured it: PA_CI_SPEED).
    if [ -z "${PA_CI_SPEED:-}" ]; then
        PA_CI_SPEED=$(budget calibrate "$build" 2> "$logs/calibration.log") || PA_CI_SPEED=1
        export PA_CI_SPEED
    fi
    echo "  $(cat "$logs/calibration.log" 2> /dev/null || echo "speed factor $PA_CI_SPEED (PA_CI_SPEED)")"
    phase_end "calibration"
    all_chapters=$(for d in solutions/[0-9][0-9]-*/; do n=$(basename "$d"); echo "${n%%-*}"; done)
    if [ "$scope" = full ]; then
        directed=$(echo $all_chapters) rotating=""
        echo "  make ci-full: every chapter, every check, no time caps"
    else
        sel=$("$python" tools/ci_select.py chapters --build "$build") || { echo "ci_select failed"; exit 1; }
        directed=$(sed -n 1p <<<"$sel") rotating=$(sed -n 2p <<<"$sel")
        "$python" tools/ci_select.py explain --build "$build" | sed 's/^/  /'
        echo "  directed (changed since ${PA_CI_BASE:-HEAD~1}): ${directed:-none}; rotating: ${rotating:-none}; the other chapters' checked mode, greedy runs, core done and mutants run in make ci-full and on the commits they rotate to"
    fi
    selected=$(echo $directed $rotating)
    rotate=$(git rev-list --count HEAD 2> /dev/null || echo 0)
    # cap PHASE: the phase's deadline (seconds since the epoch), or empty for make ci-full.
    cap() { [ "$scope" = full ] || echo $(($(date +%s) + $(budget cap "$1"))); }

fi

step "the book's figures are drawn from the reference (pytest book/figures)" \
    "$python" -m pytest -q -p no:cacheprovider book/figures
step "the book builds (mdbook)" bash tools/build_book.sh "$build" "$python"
# After the build, whose generated includes it reads: every measured number of every page
# names its source, is derived, or is marked a prediction or a claim (issue 27).
step "every measured number in the book names its source (check_book_numbers --todo --all)" \
    "$python" tools/check_book_numbers.py --todo --all
# Every page in headless Chromium (Debian's, driven by Playwright): console errors, links
# and anchors, images, wide tables and listings, includes; screenshots in build/.
step "the book renders in a real browser (Chromium)" \
    "$python" tools/check_book.py book/book --screenshots build/book-screenshots
step "the book check finds planted problems (pytest tools/test_check_book.py)" \
    "$python" -m pytest -q -p no:cacheprovider tools/test_check_book.py
phase_end "book"

if [ "$backend" = cpu ]; then
    # Planted classic bugs (tests/mutants/): each must make its chapter's tests fail AND be
    # named in their output. The ones the book shows always run, and what they print must
    # be what the book has recorded (book/src/recorded/mutants/): a stale page fails here.
    shown=$(grep -oh 'recorded/mutants/mutant-[A-Za-z0-9_-]*\.txt' book/src/*.md | sort -u |
            sed -E 's|.*/mutant-(.*)\.txt|\1|')
    # Those of chapters 9 and later in checked mode need a ThreadSanitizer build of a large
    # chapter (minutes on 2 cores): they run below, with the planted bugs of the selected
    # chapters (directed there by a change to their chapter or to the emulator), and are
    # compared with the book there.
    shown_late=$("$python" tools/run_mutants.py --list |
                 awk -v shown=" $(echo $shown) " 'index(shown, " " $1 " ") && $4 == "check" && substr($2, 3) + 0 >= 9 { print $1 }')
    shown=$(grep -vxF -f <(echo "$shown_late") <<<"$shown")
    fresh=$build/recorded-mutants
    rm -rf "$fresh"
    step "planted bugs the book shows: caught, named, and printed as the book records them" \
        bash -c "bash tools/run_mutants.sh $(echo $shown) --jobs $(nproc 2>/dev/null || echo 2) --record '$fresh' &&
                 bash tools/compare_recorded.sh '$fresh' book/src/recorded/mutants"
    phase_end "planted bugs the book shows"

    # The capped phases share what is left of the run's budget (tools/ci_budget.py): the cold
    # one (60 slow-machine minutes) when the build compiled, the warm one (30) when the
    # compiler cache served it; counted from the run's start (.ci/run's set-up included).
    export PA_CI_START=${PA_CI_START:-$run_start}
    PA_CI_TARGET=$(budget target "$(sed -nE 's/^build\t//p' "$phase_times")")
    export PA_CI_TARGET
    [ "$scope" = full ] || echo "  budget: $((PA_CI_TARGET / 60)) slow-machine minutes, $(awk -v t="$PA_CI_TARGET" -v f="$PA_CI_SPEED" 'BEGIN { printf "%.1f", t * f / 60 }') here ($([ "$PA_CI_TARGET" -ge 3600 ] && echo "cold: the build compiled" || echo "warm: the build came from the compiler cache")); the capped phases share what is left of it"
    # Most valuable first: in every phase the chapters whose own files changed come first
    # (tools/ci_select.py), and the phases go from what proves a change most directly (its .cu
    # files compile, the exercises' wrong answers still fail, the kernels are silent in checked
    # mode) to what samples more widely (other planted bugs, core done, schedules, traces).
    # Every solution and skeleton .cu compiles with nvcc for sm_90 (the kernels are real
    # CUDA): the files a change reaches (through their #include lines; nvcc never reads
    # emu/) and a rotating share, until the phase's cap; make ci-full: all of them.
    if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
        if [ "$scope" = full ]; then
            files=()
        else
            nsel=$("$python" tools/ci_select.py nvcc)
            read -r -a files <<<"$(echo $nsel)"
            [ "${#files[@]}" -gt 0 ] || files=(--none)
        fi
        step "every selected .cu compiles with nvcc for sm_90 (make nvcc-check)" \
            env NVCC_CHECK_BUDGET="$([ "$scope" = full ] || budget cap "nvcc-check")" bash tools/nvcc_check.sh "${files[@]}"
        report_cut "$(log_path "every selected .cu compiles with nvcc for sm_90 (make nvcc-check)")"
    else
        echo "  nvcc not found: make nvcc-check did not run (install the CUDA toolkit: make doctor)"
        results+=("CUT   nvcc-check: nvcc not found")
    fi
    phase_end "nvcc-check"

    # Wrong-but-plausible answers to the exercises (tests/exercise_mutants/): each must fail
    # its chapter's plain tests; the runner prints the kill rate per chapter.
    names=$(for m in $("$python" tools/run_mutants.py --suite exercise --list | awk '{print $1}'); do
                grep -qw "${m:0:2}" <<<"$selected" && echo "$m"; done)
    budget_args=()
    [ "$scope" = full ] || budget_args=(--budget "$(budget cap "exercise mutants")" --rotate "$rotate" --order "$selected")
    if [ -n "$names" ]; then
        step "exercise mutants of the selected chapters: every wrong answer fails its chapter's tests" \
            "$python" tools/run_mutants.py --suite exercise --jobs "$(nproc 2>/dev/null || echo 2)" \
            --python "$python" --test-times "$logs" "${budget_args[@]}" $(echo $names)
        report_cut "$(log_path "exercise mutants of the selected chapters: every wrong answer fails its chapter's tests")"
    fi
    phase_end "exercise mutants"

    # Checked mode (make check-chapter-N): the emulator as a CPU compute-sanitizer. Its
    # diagnoses are proven by test_emu; every selected chapter's solution must be silent in it
    # (no false positive, no race, out-of-bounds or uninitialised read in the kernels). The
    # long chapters run in GoogleTest shards, so the cap cuts shards, not whole chapters.
    deadline=$(cap "checked mode")
    check=build/cpu-check
    step "checked mode: configure and build the emulator's tests (ThreadSanitizer)" bash -c \
        "make --no-print-directory check-configure SKIP_SETUP=1 PYTHON='$python' &&
         cmake --build $check -j $(nproc 2>/dev/null || echo 2) --target test_emu test_emu_pipeline"
    for order in forward greedy; do
        step "checked mode: emulator diagnoses, schedule $order" \
            env PA_EMU_SCHEDULE=$order "$check/tests/emu/test_emu"
    done
    step "checked mode: chapter 13's pipeline is silent (five schedule orders)" "$check/tests/emu/test_emu_pipeline"
    # The chapters' builds: directed first, in order, until 45% of the phase's share is gone.
    build_deadline=
    [ -n "$deadline" ] && build_deadline=$((deadline - ($(budget cap "checked mode") * 55 / 100)))
    built=()
    for num in $selected; do
        if [ -n "$build_deadline" ] && [ "$(date +%s)" -ge "$build_deadline" ]; then
            cut "checked mode, chapter $num (its build)"
            continue
        fi
        rm -f "$check/test_ch${num}_solution.ok"
        step "checked mode: build chapter $num's tests" bash -c "cmake --build $check -j $(nproc 2>/dev/null || echo 2) \
            --target test_ch${num}_solution && touch $check/test_ch${num}_solution.ok"
        [ -f "$check/test_ch${num}_solution.ok" ] && built+=("$num")
    done
    for num in "${built[@]}"; do
        checked_filter "$num"
        shards=$(checked_shards "$num")
        for ((i = 0; i < shards; i++)); do
            part=""
            [ "$shards" -gt 1 ] && part=" (shard $((i + 1)) of $shards)"
            queue "checked mode: chapter $num solution is silent$part" \
                env PA_EMU_SCHEDULE=forward GTEST_TOTAL_SHARDS="$shards" GTEST_SHARD_INDEX="$i" \
                "$check/test_ch${num}_solution" "${filter[@]}"
        done
    done
    run_queue 2 "$deadline"
    phase_end "checked mode"

    late=$(for m in $shown_late; do grep -qw "${m:0:2}" <<<"$selected" && echo "$m"; done)
    if [ -n "$late" ]; then
        budget_args=()
        [ "$scope" = full ] || budget_args=(--budget "$(budget cap "planted bugs, the rest")" --rotate "$rotate" --order "$selected")
        rm -rf "$fresh-late"
        step "planted bugs the book shows (checked mode, chapters 9+): caught, named, and printed as recorded" \
            bash -c "bash tools/run_mutants.sh $(echo $late) --jobs $(nproc 2>/dev/null || echo 2) --record '$fresh-late' $(printf '%q ' "${budget_args[@]}"); rc=\$?
                     if ls '$fresh-late'/mutant-*.txt > /dev/null 2>&1; then
                         bash tools/compare_recorded.sh '$fresh-late' book/src/recorded/mutants || exit 1
                     fi
                     exit \$rc"
        report_cut "$(log_path "planted bugs the book shows (checked mode, chapters 9+): caught, named, and printed as recorded")"
    fi
    # The planted bugs that run a test program of the emulator's own (a `target:`: chapter 13's
    # pipeline) belong to a chapter with no solution yet: selected apart, by what that program
    # is built from (tools/ci_select.py targets), the rest of them rotating likewise.
    if [ "$scope" = full ]; then
        emu_chapters=$(grep -l '^target:' tests/mutants/*.mutant | sed -E 's|.*/([0-9][0-9])-.*|\1|' |
                       sort -u | tr '\n' ' ')
    else
        emu_chapters=$("$python" tools/ci_select.py targets --build "$build" | tr '\n' ' ')
    fi
    others=$(for m in $("$python" tools/run_mutants.py --list | awk '{print $1}'); do
                 grep -qxF "$m" <<<"$shown" || grep -qxF "$m" <<<"$shown_late" ||
                     { grep -qw "${m:0:2}" <<<"$selected $emu_chapters" && echo "$m"; }; done)
    if [ -n "$others" ]; then
        budget_args=()
        [ "$scope" = full ] || budget_args=(--budget "$(budget cap "planted bugs, the rest")" --rotate "$rotate" --order "$selected")
        step "planted bugs of the selected chapters: caught and named" \
            bash tools/run_mutants.sh $(echo $others) --jobs "$(nproc 2>/dev/null || echo 2)" "${budget_args[@]}"
        report_cut "$(log_path "planted bugs of the selected chapters: caught and named")"
    fi
    phase_end "planted bugs, the rest"

    # Core and stretch apart: the "core done" tree of each selected chapter with stretch
    # exercises, built and run one chapter at a time until the phase's cap.
    stretchy=$("$python" tools/make_skeletons.py --list-stretch)
    deadline=$(cap "core done")
    for num in $selected; do
        grep -qw "$num" <<<"$stretchy" || continue
        if [ -n "$deadline" ] && [ "$(date +%s)" -ge "$deadline" ]; then cut "core done, chapter $num"; continue; fi
        step "core done, chapter $num: core tests pass with every stretch exercise a stub, Stretch suites fail" \
            core_done "$num"
    done
    phase_end "core done"

    for order in reverse greedy random:1; do
        step "emulator tests, schedule $order" env PA_EMU_SCHEDULE=$order "$build/tests/emu/test_emu"
    done
    # (Not chapter 8's random traces under memory pressure, 29 of its 44 s, nor chapters
    # 10-12's engine tests: host code around kernels whose own tests run here. The traces
    # run again below, 400 of them.)
    for num in $selected; do
        filter=()
        [ "$num" = 08 ] && filter=(--gtest_filter=-PressureProperty.*)
        [ "$num" -ge 10 ] && filter=(--gtest_filter=-*InTheEngine*)
        queue "chapter $num solution tests, schedule greedy" \
            env PA_EMU_SCHEDULE=greedy "$build/test_ch${num}_solution" "${filter[@]}"
    done
    # Chapter 8's random traces, many more than the chapter's own run of them (its forward
    # run above: 150 with a fixed seed, 50 with the commit's), when chapter 8 is selected.
    if grep -qw 08 <<<"$selected"; then
        queue "chapter 08: 400 random traces under memory pressure (PA_PRESSURE_TRACES=400)" \
            env PA_PRESSURE_TRACES=400 PA_EMU_SCHEDULE=forward "$build/test_ch08_solution" \
            --gtest_filter='PressureProperty.*'
    fi
    # Chapters 11 and 12's engines on more random traces than their own runs (issue 59's
    # property tests: make test runs 30 + 10 hybrid traces, 10 with prefix caching, and 6 + 2 MLA ones).
    if grep -qw 12 <<<"$selected"; then
        queue "chapter 12: 300 random hybrid-engine traces (PA_HYBRID_TRACES=300)" \
            env PA_HYBRID_TRACES=300 PA_EMU_SCHEDULE=forward "$build/test_ch12_solution" \
            --gtest_filter='HybridTracesInTheEngine.*:StretchPrefixHitInTheEngine.RandomTraces*'
    fi
    if grep -qw 11 <<<"$selected"; then
        queue "chapter 11: 48 random MLA-engine traces (PA_MLA_TRACES=48)" \
            env PA_MLA_TRACES=48 PA_EMU_SCHEDULE=forward "$build/test_ch11_solution" \
            --gtest_filter='MlaTracesInTheEngine.*'
    fi
    run_queue 1 "$(cap "greedy schedule and traces")"
    phase_end "greedy schedule and traces"

    echo
    budget report "$phase_times"
fi
fi

echo
echo "== Summary"
printf '  %s\n' "${results[@]}"
if [ "${#cut_items[@]}" -gt 0 ]; then
    echo
    echo "  cut by CI's time caps (NOT RUN on this commit; make ci-full runs them):"
    printf '    %s\n' "${cut_items[@]}"
fi
echo
echo "$n_pass passed, $n_fail failed"
[ "$n_fail" = 0 ]
