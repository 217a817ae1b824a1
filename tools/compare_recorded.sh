#!/usr/bin/env bash
# The book's recorded outputs of the planted bugs (book/src/recorded/mutants/mutant-NAME.txt,
# checked in; `make book` builds from them and runs nothing) against a fresh run's
# (run_mutants.py --record FRESH). What may differ from run to run is left out of the
# comparison: times, addresses, the temporary file of a ThreadSanitizer report, and which
# block met the bug first, with the byte it touched (the emulator's workers take blocks as
# they come). Any other difference (a line number, a wording, a test, a kernel) means the
# page shows what the tests no longer print: refresh the file (below) and reread the page.
#   usage: compare_recorded.sh FRESH_DIR RECORDED_DIR
set -uo pipefail
fresh=$1 recorded=$2
normalize() {
    sed -E 's/[0-9]+ ms( total)?\)/N ms\1)/g; s/0x[0-9a-f]{6,}/0xADDR/g; s|/tmp/pa-emu-[a-z]+\.[0-9]+|/tmp/pa-emu-REPORT|g
            s/block \([0-9]+,[0-9]+,[0-9]+\)/block (B)/g; s/byte [0-9]+ of a/byte N of a/g' "$1"
}
bad=0 n=0
for f in "$fresh"/mutant-*.txt; do
    [ -e "$f" ] || continue
    n=$((n + 1))
    name=$(basename "$f")
    if [ ! -f "$recorded/$name" ]; then
        echo "compare_recorded: $recorded/$name is missing (the book includes it)"
        bad=1
    elif ! diff -u <(normalize "$recorded/$name") <(normalize "$f") > /tmp/compare_recorded.$$ 2>&1; then
        echo "compare_recorded: $recorded/$name is stale: the tests now print (+) where the book shows (-):"
        sed 's/^/  /' /tmp/compare_recorded.$$ | head -n 40
        bad=1
    fi
done
rm -f /tmp/compare_recorded.$$
if [ "$bad" != 0 ]; then
    echo "to refresh: bash tools/run_mutants.sh NAME --record $recorded (then read the page that includes it)"
    exit 1
fi
[ "$n" -gt 0 ] || { echo "compare_recorded: no fresh output in $fresh"; exit 1; }
echo "compare_recorded: $n recorded outputs match a fresh run"
