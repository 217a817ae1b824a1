#!/usr/bin/env bash
# A/B of two source trees on the GPU machine, in one device call (NOTES.md, session 54).
# For one tree's whole verification (every test, both sanitizers, the benchmarks) use
# tools/gpu_check.sh; this script is only the A/B: two trees built side by side, cut to D 128.
#
# Here, before the call (build/pin is ignored by git; carry it):
#   mkdir -p build/pin && git archive --format=tar.gz -o build/pin/A.tgz HEAD
#   git ls-files -co --exclude-standard | grep -v '^build/' | tar -czf build/pin/B.tgz -T -
# There (the device tool's command, carry ["build/pin"]):
#   bash tools/perf/gpu_ab.sh build bench tests san
# Stages, in the order given:
#   build   unpack A and B into /tmp/ab, cut chapter 10's head sizes to D 128 (CUT=0: keep all),
#           configure the CUDA backend for sm_90 and build bench_ch10 (both) and
#           test_ch10_solution (B), A and B side by side. B_FLAGS: extra CUDA flags for B.
#   bench   bench_ch10 A B A B (ONLY=text,... passes --only), CSVs in $OUT/logs.
#           BENCHES="bench_ch10 bench_ch12 bench_ch11" builds and runs those instead (ONLY
#           applies to bench_ch10 alone); each CSV is named bench_<name>_<tree><round>.
#   tests   B's test_ch10_solution (a cut build fails its 102 cut-size tests, and only those).
#   san     memcheck and racecheck on B's D 128 golden, split, chunk-end and MQA tests.
#   ncu     one launch of varlen_kernel under ncu for A and B on NCU_CASE (default: the
#           2,048-token chunk over 16K): instructions, shared-memory wavefronts, tensor pipe.
# Everything lands in $OUT/logs and, packed, $OUT/r.tgz (a call returns 8 files at most).
# Never a bare `wait` here: it waits on the device tool's own processes too (NOTES.md, session 46).
set -u
PIN=$PWD/build/pin
OUT=${OUT:-/tmp/out}
L=$OUT/logs
W=/tmp/ab
mkdir -p "$L"
ts() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$L/steps.txt"; }
cut128() {  # marks.edit stops the script if the five other head sizes are not found exactly once
  [ "${CUT:-1}" = 0 ] && return 0
  python3 -c 'import sys; sys.path.insert(0, "tools/perf"); import marks
marks.edit(sys.argv[1], "solutions/10-varlen-attention/launch_varlen.cuh", [],
           regex=[(r"\n *case (64|80|96|112|256): return f\(.*?\);", "", 5)], tool="gpu_ab")' "$1"
}
prep() {  # NAME [CUDA flags]
  rm -rf "${W:?}/$1" && mkdir -p "$W/$1" && tar -xzf "$PIN/$1.tgz" -C "$W/$1" && cut128 "$W/$1"
  cmake -S "$W/$1" -B "$W/$1/b" -G Ninja -DPA_BACKEND=cuda -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_BUILD_TYPE=Release -DPA_PYTHON=python3 "-DCMAKE_CUDA_FLAGS=${2:-}" > "$L/cfg_$1.log" 2>&1
}
only=()
[ -n "${ONLY:-}" ] && only=(--only "$ONLY")
for stage in "$@"; do
  case $stage in
    build)
      ts build; nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > "$L/gpu.txt"
      prep A & p1=$!; prep B "${B_FLAGS:-}" & p2=$!; wait $p1 $p2
      (ninja -C "$W/A/b" -j 8 ${BENCHES:-bench_ch10} > "$L/build_A.log" 2>&1; echo "A build rc $?" >> "$L/steps.txt") & p1=$!
      (ninja -C "$W/B/b" -j 8 ${BENCHES:-bench_ch10} test_ch10_solution > "$L/build_B.log" 2>&1; echo "B build rc $?" >> "$L/steps.txt") & p2=$!
      wait $p1 $p2; ts built;;
    bench)
      for round in 1 2; do for v in A B; do for b in ${BENCHES:-bench_ch10}; do
        ts "$b $v $round"
        args=()
        [ "$b" = bench_ch10 ] && args=(${only[@]+"${only[@]}"})
        f=$L/$([ -z "${BENCHES:-}" ] && echo "bench_$v$round" || echo "${b}_$v$round")
        timeout 200 "$W/$v/b/bench/$b" ${args[@]+"${args[@]}"} --csv "$f.csv" > "$f.txt" 2>&1
        echo "rc $?" >> "$f.txt"
      done; done; done;;
    tests)
      ts tests
      (cd "$W/B/b" && timeout 150 ./test_ch10_solution > "$L/test_B.txt" 2>&1; echo "rc $?" >> "$L/test_B.txt")
      grep -E "PASSED|FAILED  \] [0-9]" "$L/test_B.txt" | tail -2 >> "$L/steps.txt";;
    san)
      F='Ch10/VarlenGolden.*d128*:Ch10/StretchSplitTiles.*d128*:Ch10/VarlenItemEnds.*d128*:*d128*mqa*'
      for tool in memcheck racecheck; do
        ts "$tool"
        (cd "$W/B/b" && timeout 150 compute-sanitizer --tool $tool ./test_ch10_solution --gtest_filter="$F" > "$L/${tool}_B.txt" 2>&1
         echo "rc $?" >> "$L/${tool}_B.txt")
        grep -E "Running [0-9]+ tests|SUMMARY" "$L/${tool}_B.txt" >> "$L/steps.txt"
      done;;
    ncu)
      M=gpu__time_duration.sum,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
      for v in A B; do
        ts "ncu $v"
        timeout 150 ncu -k regex:varlen_kernel -c 1 --metrics "$M" "$W/$v/b/bench/bench_ch10" \
          --only "${NCU_CASE:-chunk 2048 ctx 16384}" > "$L/ncu_$v.txt" 2>&1
      done;;
    *) echo "gpu_ab.sh: unknown stage $stage" | tee -a "$L/steps.txt";;
  esac
done
ts "all done"
tar -czf "$OUT/r.tgz" -C "$OUT" logs
