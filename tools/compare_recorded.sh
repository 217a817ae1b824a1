#!/usr/bin/env bash
# The book's recorded outputs of the planted bugs (book/src/recorded/mutants/mutant-NAME.txt,
# checked in; `make book` builds from them and runs nothing) against a fresh run's
# (run_mutants.py --record FRESH): the report's words, kinds, kernels, tests and order must be
# what the book shows. Numbers are left out of the comparison: which block and which pair of
# threads meet a bug first, the bytes they touch and how many more reads are like it vary from
# run to run (the emulator's two workers take blocks as they come), and so do times, addresses
# and the temporary file of a ThreadSanitizer report. The source lines a recorded output cites
# are checked apart, against the source's text (tools/check_cited_lines.py, make test), and a
# leading ../../ on a path is left out (a build through ccache names its sources relative to the
# build directory, CCACHE_BASEDIR; one without, absolutely). A difference means the page shows
# what the tests no longer print: refresh the file (below) and reread the page.
#   usage: compare_recorded.sh FRESH_DIR RECORDED_DIR
set -uo pipefail
fresh=$1 recorded=$2
normalize() {
    sed -E 's#(^|[ (])(\.\./)+#\1#g; s/[0-9]+/N/g' "$1"
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
