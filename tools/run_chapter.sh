#!/usr/bin/env bash
# make test-chapter-N / test-solution-N / test-mine-N: build one chapter's tests and run them
# with a short, friendly summary.   usage: run_chapter.sh BUILD_DIR chapter|solution|mine N
# Exit status: the student's code (chapter, mine) succeeds when every core test passes (the
# Stretch* tests are optional); the reference solution only when every test passes.
set -uo pipefail
build=$1 flavor=$2 n=$3
num=$(printf '%02d' "$((10#$n))" 2>/dev/null) || { echo "not a chapter number: $n"; exit 2; }
dir=$(ls -d solutions/"$num"-*/ 2>/dev/null | head -n 1)
if [ -z "$dir" ]; then
    echo "There is no chapter $n yet. Chapters: $(ls solutions | tr '\n' ' ')"
    exit 2
fi
slug=$(basename "$dir")
target=test_ch${num}_${flavor}
src=$([ "$flavor" = solution ] && echo "solutions/$slug" || echo "chapters/$slug")

# The emulator's schedule: check it before anything runs, so that a typo is one clear
# error, not every test failing under the "red is expected" banner.
backend=$(basename "$build")
schedule=${PA_EMU_SCHEDULE:-forward}
if [ "$backend" != cuda ]; then
    case "$schedule" in
        forward|reverse|greedy|random) ;;
        random:*[!0-9]*|random:) bad=1 ;;
        random:*) ;;
        *) bad=1 ;;
    esac
    if [ "${bad:-0}" = 1 ]; then
        echo "PA_EMU_SCHEDULE=$schedule is not a schedule the emulator knows."
        echo "Use one of: forward (the default), reverse, greedy, random, or random:SEED with SEED"
        echo "a number, for example: PA_EMU_SCHEDULE=random:7 make test-chapter-$((10#$num))"
        exit 2
    fi
    how="backend $backend, PA_EMU_SCHEDULE=$schedule"
    if [ "${PA_CHECKED:-0}" = 1 ]; then
        how="$how, checked mode: races, out-of-bounds accesses, uninitialised shared reads and shuffle call sites are named; about 20x slower"
    fi
else
    how="backend cuda"
fi

case "$flavor" in
    chapter) whose="your code in $src (earlier chapters: the reference's)" ;;
    mine) whose="your code in chapters/, this chapter and every one before it" ;;
    *) whose="the reference solution in $src" ;;
esac
echo "== Chapter $((10#$num)) ($slug): $whose [$how]"
if [ "$flavor" = chapter ]; then
    echo "   Red is expected until you finish the TODO($(echo "ch$num")) exercises; each failure says what is missing."
elif [ "$flavor" = mine ]; then
    echo "   Green once every chapter up to this one passes its own tests (make test-chapter-N): a"
    echo "   failure here that test-chapter-$((10#$num)) does not show is in an earlier chapter of yours."
fi
if ! cmake --build "$build" --target "$target" > "$build/$target.build.log" 2>&1; then
    grep -E "error|Error" "$build/$target.build.log" | head -n 30
    echo "== The build failed (full log: $build/$target.build.log)."
    exit 1
fi

log="$build/$target.log"
state="$build/$target.state"
# Each test's outcome ("OK name", "FAILED name", "SKIPPED name"): core and stretch tests
# (suites named Stretch*) are counted apart by tools/progress.py --summarize.
results="$build/$target.results"
: > "$results"
: > "$log"

# Which tests, in which order.
# - The student's chapter runs its core tests only while every stretch region is as the
#   skeleton has it (tools/make_skeletons.py --stretch-untouched): a stretch test can only fail
#   on a stub, and chapter 11's took half of a core-only rerun. Edit one, and they all run.
# - The chapter's first suites (tools/first_suites.txt: the kernel's own golden and
#   hand-planned tests) run before the rest, in a run of their own: GoogleTest runs every TEST
#   before any TEST_P, and a kernel bug must first show where a test names its row and element,
#   not in an engine test's "other greedy tokens".
stretch_filter=""
stretch_note=""
if [ "$flavor" = chapter ] && grep -qs "TODO(ch$num, stretch)" "$src"/*; then
    if python3 tools/make_skeletons.py --stretch-untouched --chapter "$num" > /dev/null 2>&1; then
        stretch_filter='Stretch*:*/Stretch*'
        stretch_note="   Core tests only: your stretch exercises are untouched (edit one, and every test runs)."
    fi
fi
first=$(sed -nE "s/^$((10#$num)):[[:space:]]*//p; s/^$num:[[:space:]]*//p" tools/first_suites.txt 2>/dev/null | head -n 1)
first_filter=""
for s in $first; do first_filter="$first_filter:$s.*:*/$s.*"; done
first_filter=${first_filter#:}
passes=()
if [ -n "$first_filter" ]; then
    passes+=("$first_filter${stretch_filter:+-$stretch_filter}")
    passes+=("*-$first_filter${stretch_filter:+:$stretch_filter}")
else
    passes+=("*${stretch_filter:+-$stretch_filter}")
fi
[ -n "$stretch_note" ] && echo "$stretch_note"

# One run of the test program (run_pass FILTER INDEX), shown as --gtest_brief=1 would show it
# (failures and the summary), while counting the tests that start, pass, fail and skip: if
# the program dies mid-test (a crash), the summary below still says how far it got and which
# test it was in. (The program's exit status goes through a file: bash's own "Segmentation
# fault" line for it, which would print the whole pipeline, goes to /dev/null.) Sets
# pass_status, pass_total, pass_passed, pass_skipped, pass_finished and the counts seen.
run_pass() {
    local pass_log="$log.pass"
    { "$build/$target" --gtest_filter="$1" 2>&1; echo $? > "$state.status"; } 2>/dev/null |
        awk -v state="$state" -v results="$results" -v later="$2" '
    function record(outcome,   name) {
        name = substr($0, 14)
        sub(/ .*/, "", name)
        sub(/,$/, "", name)
        print outcome " " name >> results
    }
    function show(line) {
        if (blank) print ""
        blank = 0
        print line
        fflush()
    }
    # A skipped test says why ("file:line: Skipped", then its reason): counted, not shown.
    /^\[/                               { skipping = 0 }
    !done && /: Skipped$/               { skipping = 1; next }
    skipping                            { next }
    /^$/                                { blank = 1; next }
    /^\[ RUN      \] /                  { running = substr($0, 14); started++; blank = 0; next }
    /^\[       OK \] /                  { passed++; record("OK"); running = ""; blank = 0; next }
    !done && /^\[  SKIPPED \] /          { skipped++; record("SKIPPED"); running = ""; blank = 0; next }
    !done && /^\[  FAILED  \] /          { failed++; record("FAILED"); running = ""; show($0); next }
    /^\[----------\]/ || /^\[==========\] Running / || /^\[ DISABLED \] / { blank = 0; next }
    /^Note: Google Test filter = / || (later && /^Running main\(\) from /) { blank = 0; next }
    /^\[==========\] .* ran\./          { done = 1; show($0); next }
    done && /^\[  SKIPPED \] [0-9]+ tests?, listed below:/ { sub(/, listed below:/, "."); show($0); next }
    done && (/^\[  FAILED  \] / || /^\[  SKIPPED \] / || /^ *[0-9]+ FAILED TESTS?$/) { blank = 0; next }
    { show($0) }
    END { printf "%d %d %d %d %s\n", started, passed, failed, skipped, running > state }
' | tee "$pass_log"
    cat "$pass_log" >> "$log"
    pass_status=$(cat "$state.status" 2>/dev/null || echo 1)
    read -r pass_started pass_ok_seen pass_failed_seen pass_skipped_seen pass_running < "$state" 2>/dev/null || pass_started=0
    rm -f "$state" "$state.status"
    # GoogleTest's closing summary: "[==========] N tests ... ran", "[  PASSED  ] P tests." and
    # "[  SKIPPED ] S tests." (the brief form leaves out the FAILED count: it is the rest).
    count() { sed -nE "s/^\[  $1 *\] ([0-9]+) tests?[.,].*/\1/p" "$pass_log" | tail -n 1; }
    pass_total=$(sed -nE 's/^\[=+\] ([0-9]+) tests? from .* ran.*/\1/p' "$pass_log" | tail -n 1)
    pass_finished=$([ -n "$pass_total" ] && echo 1 || echo 0)
    pass_passed=$(count PASSED) pass_skipped=$(count SKIPPED)
    pass_total=${pass_total:-0} pass_passed=${pass_passed:-0} pass_skipped=${pass_skipped:-0}
    rm -f "$pass_log"
}

status=0 total=0 passed=0 skipped=0 finished=1
started=0 ok_seen=0 failed_seen=0 skipped_seen=0 running=""
for i in "${!passes[@]}"; do
    if [ "${#passes[@]}" -gt 1 ]; then
        if [ "$i" = 0 ]; then
            echo "-- First the kernel's own tests ($(echo $first | sed 's/ /, /g')): their failures name the row and the element."
        else
            echo "-- Then the rest (the engine's tests among them)."
        fi
    fi
    run_pass "${passes[$i]}" "$i"
    [ "$pass_status" != 0 ] && [ "$status" = 0 ] && status=$pass_status
    total=$((total + pass_total)) passed=$((passed + pass_passed)) skipped=$((skipped + pass_skipped))
    started=$((started + pass_started)) ok_seen=$((ok_seen + pass_ok_seen))
    failed_seen=$((failed_seen + pass_failed_seen)) skipped_seen=$((skipped_seen + pass_skipped_seen))
    running=$pass_running
    if [ "$pass_finished" != 1 ]; then
        finished=0
        status=$pass_status
        [ "$status" = 0 ] && status=1
        break  # the program died: what ran after it would say less than its crash
    fi
done
failed=$((total - passed - skipped))
skip_note=$([ "$skipped" != 0 ] && echo ", $skipped skipped")
# Core and stretch apart: the student's chapter is done when every core test passes; the
# stretch exercises (tests in Stretch* suites) are optional. The line goes into the log too,
# for make progress. The reference solution (test-solution-N) must pass every test, its
# Stretch ones too: its exit status is the test program's.
split="" stretch_part="" core_ok=1
if [ "$finished" = 1 ]; then
    split=$(python3 tools/progress.py --summarize "$num" "$results" ${stretch_filter:+--stretch-not-run})
    core_ok=$?
    stretch_part=$(sed -n 's/^.*; \(stretch: .*\)$/\1/p' <<<"$split")
    echo "== Chapter $((10#$num)): $split" >> "$log"
    # A student's chapter (chapter, mine) whose core tests all pass succeeds, whatever the
    # stretch tests say.
    [ "$flavor" != solution ] && [ "$core_ok" = 0 ] && [ -n "$stretch_part" ] && status=0
fi
echo
if [ -n "$stretch_part" ] && [ "$finished" = 1 ]; then
    echo "== Chapter $((10#$num)): $split"
    if [ "$flavor" = solution ]; then
        [ "$status" != 0 ] && echo "   The reference solution must pass every test, the Stretch ones too: $failed of $total fail."
    elif [ "$core_ok" = 0 ]; then
        [ "$flavor" = chapter ] && echo "   Well done: on to the next chapter! (Or try a stretch exercise: make hint-$((10#$num)) LIST=1.)"
    else
        [ "$flavor" = chapter ] && echo "   (Red is expected until the core exercises are done.)"
    fi
elif [ "$status" = 0 ]; then
    if [ "$skipped" = 0 ]; then
        echo "== Chapter $((10#$num)): all $total tests pass. $([ "$flavor" = chapter ] && echo 'Well done: on to the next chapter!')"
    else
        echo "== Chapter $((10#$num)): $passed of $total tests pass$skip_note, none fail."
    fi
else
    if [ "$finished" = 1 ]; then
        echo "== Chapter $((10#$num)): $passed of $total tests pass, $failed fail$skip_note.$([ "$flavor" = chapter ] && echo ' (Red is expected until the exercises are done.)')"
    else
        # No summary: the program died (a crash, a kill) or was interrupted mid-run.
        how_died="exit status $status"
        [ "$status" -gt 128 ] && how_died="signal $(kill -l $((status - 128)) 2>/dev/null || echo $((status - 128)))"
        # (Into the log as well: make progress reads it, and must not count the runs before it.)
        if [ "${started:-0}" = 0 ]; then
            echo "== Chapter $((10#$num)): no test ran: the test program stopped ($how_died) before its first test (log: $log)." | tee -a "$log"
        else
            echo "== Chapter $((10#$num)): the test program stopped ($how_died) during ${running:-a test}, its test number $started." | tee -a "$log"
            echo "   Before it, $ok_seen passed and $failed_seen failed$([ "${skipped_seen:-0}" != 0 ] && echo " ($skipped_seen skipped)"); the tests after it did not run."
            echo "   What it printed last is above (log: $log). That test alone:"
            echo "     $build/$target --gtest_filter='${running:-*}'"
        fi
    fi
fi
if [ "$status" != 0 ]; then
    if [ "$flavor" = mine ]; then
        echo "   make test-chapter-N for each earlier chapter says which one is not done yet."
    fi
    if [ "$flavor" = chapter ]; then
        echo "   Your exercises (TODO(ch$num) markers):"
        grep -n "TODO(ch$num)" "$src"/* | sed 's/^/     /; s/:[[:space:]]*\/\/ */: /'
        if grep -q "TODO(ch$num, stretch)" "$src"/*; then
            echo "   Stretch exercises (optional; their tests are the Stretch* suites):"
            grep -n "TODO(ch$num, stretch)" "$src"/* | sed 's/^/     /; s/:[[:space:]]*\/\/ */: /'
        fi
        echo "   Stuck? make hint-$((10#$num)) shows a hint, one level at a time. The book's chapter page"
        echo "   explains each exercise: make book."
    fi
fi
if [ "$flavor" = chapter ] && [ -z "${PA_NO_PROGRESS:-}" ]; then
    # Every build's last run counts (plain, checked, cuda): the newest log decides.
    top=$(dirname "$build")
    python3 tools/progress.py "$build" "$top/cpu" "$top/cuda" "$top/cpu-check" || true
fi
exit "$status"
