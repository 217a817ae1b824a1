#!/usr/bin/env bash
# make watch-N: run chapter N's tests (as make test-chapter-N does), then again each time a
# file under chapters/NN-*/ changes. Ctrl-C stops it.
#   usage: watch_chapter.sh BUILD_DIR N   (WATCH_INTERVAL=seconds between looks, default 1)
# It polls the files' times and sizes with stat: no inotify, nothing to install.
set -uo pipefail
build=$1 n=$2
num=$(printf '%02d' "$((10#$n))" 2>/dev/null) || { echo "not a chapter number: $n"; exit 2; }
dir=$(ls -d chapters/"$num"-*/ 2>/dev/null | head -n 1)
[ -n "$dir" ] || { echo "There is no chapters/$num-*/ directory. Chapters: $(ls chapters | tr '\n' ' ')"; exit 2; }
interval=${WATCH_INTERVAL:-1}

# One line per file: name, modification time, size. GNU stat first, then BSD (macOS).
snapshot() {
    find "$dir" -type f ! -name '*.swp' ! -name '*~' ! -name '.#*' -print0 | sort -z |
        { xargs -0 stat -c '%n %Y %s' 2>/dev/null || find "$dir" -type f -print0 | sort -z |
          xargs -0 stat -f '%N %m %z'; }
}

trap 'echo; echo "Stopped watching $dir."; exit 0' INT TERM
while true; do
    bash tools/run_chapter.sh "$build" chapter "$n"
    echo
    echo "== Watching $dir: the tests run again when you save a file there (Ctrl-C stops)."
    before=$(snapshot)
    while [ "$(snapshot)" = "$before" ]; do sleep "$interval"; done
    sleep 0.3  # let an editor finish writing
    echo
    echo "== $(date +%H:%M:%S) a file changed in $dir; running the tests again."
done
