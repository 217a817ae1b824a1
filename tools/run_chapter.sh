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
src=$([ "$flavor" = chapter ] && echo "chapters/$slug" || echo "solutions/$slug")

echo "== Chapter $((10#$num)) ($slug): $([ "$flavor" = chapter ] && echo 'your code' || echo 'the reference solution') in $src"
if [ "$flavor" = chapter ]; then
    echo "   Red is expected until you finish the TODO($(echo "ch$num")) exercises; each failure says what is missing."
fi
if ! cmake --build "$build" --target "$target" > "$build/$target.build.log" 2>&1; then
    grep -E "error|Error" "$build/$target.build.log" | head -n 30
    echo "== The build failed (full log: $build/$target.build.log)."
    exit 1
fi

log="$build/$target.log"
"$build/$target" --gtest_brief=1 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
total=$(sed -nE 's/^\[=+\] ([0-9]+) tests? from .* ran.*/\1/p' "$log" | tail -n 1)
failed=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$log" || true)
total=${total:-0}
passed=$((total - failed))
echo
if [ "$status" = 0 ]; then
    echo "== Chapter $((10#$num)): all $total tests pass. $([ "$flavor" = chapter ] && echo 'Well done: on to the next chapter!')"
else
    echo "== Chapter $((10#$num)): $passed of $total tests pass, $failed fail.$([ "$flavor" = chapter ] && echo ' (Red is expected until the exercises are done.)')"
    [ "$total" = 0 ] && echo "   No test ran: the test program crashed or was interrupted (log: $log)."
    if [ "$flavor" = chapter ]; then
        echo "   Your exercises (TODO(ch$num) markers):"
        grep -n "TODO(ch$num)" "$src"/* | sed 's/^/     /; s/:[[:space:]]*\/\/ */: /'
        echo "   The book's chapter page explains each one: make book."
    fi
fi
exit "$status"
