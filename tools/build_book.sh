#!/usr/bin/env bash
# make book: regenerate the outputs the book shows from what make test built (the chapters'
# red runs, the tour, the demos), then build it; the planted bugs' outputs are checked in.
#   usage: build_book.sh BUILD_DIR PYTHON
set -euo pipefail
build=$1 python=$2
gen=book/src/generated
mkdir -p "$gen"
# The introduction's list of chapters and appendices, from SUMMARY.md and book/path.toml.
"$python" tools/book_path.py "$gen/path.md"
here="$(pwd)/"

# The exact red output of the untouched chapter 1 skeleton: its first failure and the
# closing summary. If chapters/01-*/ is untouched it is built where it is; if you have
# worked on it, from a fresh copy of the skeleton in a scratch tree (your files are left
# alone; the first time takes a few minutes).
cmake --build "$build" --target tour > /dev/null
if python3 tools/make_skeletons.py --check --chapter 01 > /dev/null; then
    cmake --build "$build" --target test_ch01_chapter > /dev/null
    red=$(PA_NO_PROGRESS=1 bash tools/run_chapter.sh "$build" chapter 1 2>&1 || true)
    strip="$here"
else
    scratch="$(pwd)/$build/book-skeleton"
    echo "build_book.sh: chapters/01-* has your work in it; building the book's red example from"
    echo "  an untouched skeleton in $scratch"
    mkdir -p "$scratch/src"
    tar -c --exclude=./build --exclude=./.venv --exclude=./.git --exclude=./.hints \
        --exclude=./book/book . | tar -x -C "$scratch/src"
    python3 tools/make_skeletons.py --root "$scratch/src" --chapter 01 > /dev/null
    backend=$(sed -nE 's/^PA_BACKEND:[A-Z]+=(.*)/\1/p' "$build/CMakeCache.txt")
    cmake -S "$scratch/src" -B "$scratch/src/build" -DPA_BACKEND="${backend:-cpu}" \
        -DPA_PYTHON="$python" -DCMAKE_BUILD_TYPE=Release > "$scratch/configure.log" 2>&1 ||
        { cat "$scratch/configure.log"; exit 1; }
    red=$(cd "$scratch/src" && PA_NO_PROGRESS=1 bash tools/run_chapter.sh build chapter 1 2>&1 || true)
    strip="$scratch/src/"
fi
{
    echo "\$ make test-chapter-1"
    head -n 9 <<<"$red"
    echo "[... one such report per failing test ...]"
    sed -n '/^\[=*\] [0-9]* tests\{0,1\} from .* ran/,$p' <<<"$red"
} | sed "s|$strip||g" > "$gen/ch01-red.txt"

# Chapter 10's red output, the same way, when chapters/10-*/ is untouched (otherwise a
# line says how to see it).
if python3 tools/make_skeletons.py --check --chapter 10 > /dev/null; then
    cmake --build "$build" --target test_ch10_chapter > /dev/null
    red=$(PA_NO_PROGRESS=1 bash tools/run_chapter.sh "$build" chapter 10 2>&1 || true)
    {
        echo "\$ make test-chapter-10"
        head -n 6 <<<"$red"
        echo "[... one such report per failing test ...]"
        sed -n '/^\[=*\] [0-9]* tests\{0,1\} from .* ran/,$p' <<<"$red"
    } | sed "s|$here||g" > "$gen/ch10-red.txt"
else
    echo "(chapters/10-varlen-attention has your work in it: make book on an untouched skeleton shows the red output here)" > "$gen/ch10-red.txt"
fi

# Chapter 13's red output, the same way, when chapters/13-*/ is untouched.
if python3 tools/make_skeletons.py --check --chapter 13 > /dev/null; then
    cmake --build "$build" --target test_ch13_chapter > /dev/null
    red=$(PA_NO_PROGRESS=1 bash tools/run_chapter.sh "$build" chapter 13 2>&1 || true)
    {
        echo "\$ make test-chapter-13"
        head -n 6 <<<"$red"
        echo "[... one such report per failing test ...]"
        sed -n '/^\[=*\] [0-9]* tests\{0,1\} from .* ran/,$p' <<<"$red"
    } | sed "s|$here||g" > "$gen/ch13-red.txt"
else
    echo "(chapters/13-hopper-async has your work in it: make book on an untouched skeleton shows the red output here)" > "$gen/ch13-red.txt"
fi

# What the tour prints for each chapter on this machine (chapters 2 and 3 share a section).
"$build/demo/tour" --chapter 1 > "$gen/ch01-tour.txt"
"$build/demo/tour" --chapter 2 > "$gen/ch02-tour.txt"
"$build/demo/tour" --chapter 6 > "$gen/ch06-tour.txt"
"$build/demo/tour" --chapter 7 > "$gen/ch07-tour.txt"
"$build/demo/tour" --chapter 10 > "$gen/ch10-tour.txt"
sed -n '/^The planner alone/,$p' "$gen/ch10-tour.txt" > "$gen/ch10-worked-example.txt"

# Chapter 8: the serving demo's comparison of the dense and paged policies on one trace
# and one KV budget (make demo's default run on this backend, without the progress lines).
cmake --build "$build" --target serve > /dev/null
"$build/demo/serve" --quiet > "$gen/ch08-serve.txt"
# Chapter 11: the same trace at one KV byte budget, GQA against MLA (the latent cache).
cmake --build "$build" --target serve_mla > /dev/null
"$build/demo/serve_mla" --quiet > "$gen/ch11-serve-mla.txt"
# Chapter 12: a Gemma-3-like model at one KV budget, every block kept against windows that
# free theirs, with the closed form of the blocks held beside the manager's count.
cmake --build "$build" --target serve_hybrid > /dev/null
"$build/demo/serve_hybrid" --quiet > "$gen/ch12-serve-hybrid.txt"

# The explanatory figures (layouts, block tables, lane maps, schedules), drawn from the
# reference's own index functions (book/figures/figures.py). Their test first: it checks
# each figure's highlighted cells against pa_ref's offsets, so a drifted figure stops here.
"$python" -m pytest -q -p no:cacheprovider book/figures > "$build/figures-test.log" 2>&1 ||
    { cat "$build/figures-test.log"; echo "build_book.sh: book/figures/test_figures.py failed"; exit 1; }
"$python" book/figures/figures.py "$gen/figures"

# The decode-kernel plot, drawn from the CSV files the H100 benchmarks wrote.
"$python" bench/plot.py "$gen/decode-bench.svg" bench/results/ch01-dense.csv \
    bench/results/ch04-paged-attention.csv
# Chapter 9: the ladder of versions beside the PyTorch baselines (each CSV carries its own
# run's ceiling; every bar is against its own run's).
"$python" bench/plot.py "$gen/ch09-bench.svg" bench/results/ch09-fast-decode.csv bench/results/torch-baselines.csv
# Chapter 10: the varlen kernel beside chapter 9 and FlashInfer (decode-like batches, % of
# each run's read ceiling), and its prefill chunks in TFLOP/s.
"$python" bench/plot_ch10.py "$gen/ch10-bench" bench/results/ch10-varlen.csv bench/results/flashinfer-baselines.csv
# Chapters 11 and 12: each beside its baselines, from the CSV files of one call; every bar
# against the read ceiling our benchmark measured in that call, so the bars compare times.
"$python" bench/plot_ch11.py "$gen/ch11-bench" bench/results/ch11-sweep-3way.csv \
    bench/results/flashinfer-mla-sweep-3way.csv bench/results/flashmla-sweep.csv
"$python" bench/plot_ch12.py "$gen/ch12-bench.svg" bench/results/ch12-window-floor.csv \
    bench/results/flashinfer-window-floor.csv

# Appendix B: the emulator's report of a block table that points outside the pool (the
# program is meant to crash; the GPU's side of the story is in book/src/recorded/).
cmake --build "$build" --target lying_block_table > /dev/null
echo "build_book.sh: running demo/lying_block_table for appendix B. It crashes ON PURPOSE (a block"
echo "  table that points outside the pool): a 'Segmentation fault' line below is expected."
{ echo "\$ demo/lying_block_table out-of-range"; "$build/demo/lying_block_table" out-of-range 2>&1; echo "(exit status $?)"; } \
    > "$gen/emulator-out-of-range.txt" || true

# What the tests print for the planted bugs of tests/mutants/ (appendix A and each
# chapter's "What you will see") is checked in, book/src/recorded/mutants/: make book runs
# none of them; make ci runs them and fails if a page shows what the tests no longer print
# (tools/compare_recorded.sh).
for f in $(grep -oh 'recorded/mutants/mutant-[A-Za-z0-9_-]*\.txt' book/src/*.md | sort -u); do
    [ -f "book/src/$f" ] || { echo "build_book.sh: book/src/$f is missing (refresh: bash tools/run_mutants.sh NAME --record book/src/recorded/mutants)"; exit 1; }
done

mdbook="$(dirname "$python")/mdbook"
[ -x "$mdbook" ] || mdbook=$(command -v mdbook) || { echo "mdbook not found: run tools/setup.sh"; exit 1; }
"$mdbook" build book
