#!/usr/bin/env bash
# make test-chapter-N / test-solution-N: build one chapter's tests and run them with a
# short, friendly summary.   usage: run_chapter.sh BUILD_DIR chapter|solution N
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
# GoogleTest's full output, shown as --gtest_brief=1 would show it (failures and the
# summary), while counting the tests that start, pass, fail and skip: if the program dies
# mid-test (a crash), the summary below still says how far it got and which test it was in.
# (The program's exit status goes through a file: bash's own "Segmentation fault" line for
# it, which would print the whole pipeline, goes to /dev/null.)
{ "$build/$target" 2>&1; echo $? > "$state.status"; } 2>/dev/null | awk -v state="$state" -v results="$results" '
    function record(outcome,   name) {
        name = substr($0, 14)
        sub(/ .*/, "", name)
        sub(/,$/, "", name)
        print outcome " " name > results
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
    /^\[==========\] .* ran\./          { done = 1; show($0); next }
    done && /^\[  SKIPPED \] [0-9]+ tests?, listed below:/ { sub(/, listed below:/, "."); show($0); next }
    done && (/^\[  FAILED  \] / || /^\[  SKIPPED \] / || /^ *[0-9]+ FAILED TESTS?$/) { blank = 0; next }
    { show($0) }
    END { printf "%d %d %d %d %s\n", started, passed, failed, skipped, running > state }
' | tee "$log"
status=$(cat "$state.status" 2>/dev/null || echo 1)
read -r started ok_seen failed_seen skipped_seen running < "$state" 2>/dev/null || started=0
rm -f "$state" "$state.status"
# GoogleTest's closing summary: "[==========] N tests ... ran", "[  PASSED  ] P tests." and
# "[  SKIPPED ] S tests." (the brief form leaves out the FAILED count: it is the rest).
count() { sed -nE "s/^\[  $1 *\] ([0-9]+) tests?[.,].*/\1/p" "$log" | tail -n 1; }
total=$(sed -nE 's/^\[=+\] ([0-9]+) tests? from .* ran.*/\1/p' "$log" | tail -n 1)
finished=$([ -n "$total" ] && echo 1 || echo 0)
passed=$(count PASSED) skipped=$(count SKIPPED)
total=${total:-0} passed=${passed:-0} skipped=${skipped:-0}
failed=$((total - passed - skipped))
skip_note=$([ "$skipped" != 0 ] && echo ", $skipped skipped")
# Core and stretch apart: the chapter is done when every core test passes; the stretch
# exercises (tests in Stretch* suites) are optional. The line goes into the log too, for
# make progress.
split="" stretch_part="" core_ok=1
if [ "$finished" = 1 ]; then
    split=$(python3 tools/progress.py --summarize "$num" "$results")
    core_ok=$?
    stretch_part=$(sed -n 's/^.*; \(stretch: .*\)$/\1/p' <<<"$split")
    echo "== Chapter $((10#$num)): $split" >> "$log"
    # Every core test passed (the stretch ones are optional): the run succeeds.
    [ "$core_ok" = 0 ] && [ -n "$stretch_part" ] && status=0
fi
echo
if [ -n "$stretch_part" ] && [ "$finished" = 1 ]; then
    echo "== Chapter $((10#$num)): $split"
    if [ "$core_ok" = 0 ]; then
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
        if [ "${started:-0}" = 0 ]; then
            echo "== Chapter $((10#$num)): no test ran: the test program stopped ($how_died) before its first test (log: $log)."
        else
            echo "== Chapter $((10#$num)): the test program stopped ($how_died) during ${running:-a test}, its test number $started."
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
