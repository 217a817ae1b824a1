#!/usr/bin/env bash
# On the GPU machine: the runs behind the book's chapter 10 and 12 tables, in parts that each
# fit one lent-GPU call (600 s). Results and logs go to $OUT.
#   usage: bash tools/perf/tables_run.sh ours|fi-decode|fi-window|fi-prefill [SECONDS]
#   ours       build bench_ch10 and bench_ch12 (every head size), run both
#   fi-*       bench_flashinfer.py --part decode, window or prefill (needs .whl, carried),
#              under `timeout SECONDS` (default 400); its CSV is written case by case
# Then, on the workstation: bench/compare_ch10.py and bench/compare_ch12.py over the CSVs.
set -uo pipefail
part=$1
limit=${2:-400}
out=${OUT:-build/tables-run}
mkdir -p "$out"
export PATH=$PATH:/usr/local/cuda/bin
build=build/cuda
stamp() { echo "[$(date -u +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$out/times.txt"; }
if [ "$part" = ours ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
    cmake -S . -B $build -G Ninja -DPA_BACKEND=cuda -DCMAKE_CUDA_ARCHITECTURES=90 -DPA_PYTHON=python3 \
        -DCMAKE_BUILD_TYPE=Release > "$out/configure.log" 2>&1
    stamp configured
    cmake --build $build -j 16 --target bench_ch10 bench_ch12 > "$out/build.log" 2>&1 || { stamp build failed; exit 1; }
    stamp built
    $build/bench/bench_ch10 --csv "$out/ch10-varlen.csv" --md "$out/ch10-varlen.md" > "$out/bench_ch10.log" 2>&1
    stamp "bench_ch10 rc $?"
    $build/bench/bench_ch12 --csv "$out/ch12-window.csv" --md "$out/ch12-window.md" > "$out/bench_ch12.log" 2>&1
    stamp "bench_ch12 rc $?"
    exit 0
fi
site=/tmp/flashinfer-site
if [ ! -d $site/flashinfer ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target $site .whl/*.whl > "$out/pip.log" 2>&1
    stamp "pip rc $?"
fi
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
name=${part#fi-}
timeout "$limit" python3 bench/bench_flashinfer.py --part "$name" \
    --csv "$out/flashinfer-$name.csv" --md "$out/flashinfer-$name.md" > "$out/fi-$name.log" 2>&1
stamp "flashinfer $name rc $?"
