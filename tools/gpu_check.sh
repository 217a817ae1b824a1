#!/usr/bin/env bash
# On a GPU machine: build the CUDA backend, run every test, compute-sanitizer memcheck and
# racecheck, the tour and the benchmarks. Results go to $OUT (default: build/gpu-check):
# summary.txt, the benchmarks' bench_*.md/csv in results.tgz, every log in logs.tgz.
#   usage: bash tools/gpu_check.sh [ARCH] [PART]   (ARCH default 90; PART all, tests,
#          sanitize, bench or ch10: a lent GPU limits one command's time, so the parts can
#          run apart; each builds first, which is quick once the build exists; ch10 is
#          bench_ch10 and bench_ch12 (the book's chapter 10 and 12 tables) and the FlashInfer
#          baselines alone, which bench also runs; ch08 is
#          chapters 3, 7 and 8 alone: tests, sanitizers, the demo, bench_cascade, and the
#          engine on chapter 10's kernel: its test and bench_engine; ch11 and ch12 are one
#          chapter's tests, sanitizers and benchmark, ch11 with FlashInfer's MLA decode beside it;
#          ch13 is chapter 13's tests under memcheck, racecheck, synccheck and initcheck, the
#          planted Hopper hazards under the GPU's tools, and the prefill chunks, ch13 beside ch10)
# The FlashInfer baselines need .whl/ from tools/fetch_flashinfer.sh (run where PyPI is
# reachable; carry .whl to the GPU machine); without it they skip and say so.
set -uo pipefail
arch=${1:-90}
part=${2:-all}
top=${OUT:-build/gpu-check}
out=$top/logs
results=$top/results
mkdir -p "$out" "$results"
build=build/cuda
export PATH=$PATH:/usr/local/cuda/bin
summary=()
run() {  # run NAME COMMAND...: log to $out/NAME.log, remember pass/fail
    local name=$1 start=$SECONDS
    shift
    if "$@" > "$out/$name.log" 2>&1; then r=ok; else r=FAIL; fi
    summary+=("$(printf '%-5s %-28s %4ss' "$r" "$name" $((SECONDS - start)))")
    echo "${summary[-1]}"
}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
run configure cmake -S . -B $build -G Ninja -DPA_BACKEND=cuda -DCMAKE_CUDA_ARCHITECTURES=$arch \
    -DPA_PYTHON=python3 -DCMAKE_BUILD_TYPE=Release
targets=()
[ "$part" = ch10 ] && targets=(--target bench_ch10 bench_ch12)  # the ch10 part needs only the benches
[ "$part" = ch08 ] && targets=(--target test_ch03_solution test_ch07_solution test_ch08_solution
                               test_ch08_chapter serve bench_cascade test_ch10_solution bench_engine)
[ "$part" = ch11 ] && targets=(--target test_ch11_solution test_ch11_chapter bench_ch11 serve_mla)
[ "$part" = ch12 ] && targets=(--target test_ch12_solution test_ch12_chapter test_ch10_solution bench_ch12)
[ "$part" = ch13 ] && targets=(--target test_ch13_solution test_ch13_chapter test_emu_hopper bench_ch10)
run build cmake --build $build -j 16 ${targets[@]+"${targets[@]}"}
if [ "$part" = all ] || [ "$part" = tests ]; then
run test_common $build/test_common
run test_emu $build/tests/emu/test_emu
for t in $build/test_ch*_solution; do run "$(basename "$t")" "$t"; done
for t in $build/test_ch*_chapter; do
    name=$(basename "$t")
    if "$t" --gtest_brief=1 > "$out/$name.log" 2>&1; then
        summary+=("FAIL  $name (the skeleton passed!)")
    else
        summary+=("ok    $name fails, as a skeleton must")
    fi
done
fi
if [ "$part" = all ] || [ "$part" = sanitize ]; then
for t in $build/test_ch*_solution $build/tests/emu/test_emu; do
    n=$(basename "$t")
    # Chapter 8's GPU-only engine runs (*Large*) take minutes under racecheck; memcheck
    # runs them, and racecheck runs every kernel of theirs on the smaller cases.
    filter=()
    [ "$n" = test_ch08_solution ] && filter=(--gtest_filter=-*Large*)
    run "memcheck_$n" compute-sanitizer --tool memcheck --error-exitcode 1 "$t"
    run "racecheck_$n" compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 1 "$t" "${filter[@]}"
done
fi
if [ "$part" = all ] || [ "$part" = tests ]; then
run tour $build/demo/tour
# The debugging appendix's failures, recorded as they happen (they are meant to fail).
record() {  # record NAME COMMAND...: keep the output and the exit status, judge nothing
    local name=$1
    shift
    { echo "\$ ${*#"$build/"}"; "$@" 2>&1; echo "(exit status $?)"; } > "$out/$name.txt" 2>&1
}
lying=$build/demo/lying_block_table
record appendix_checked $lying checked
record appendix_out_of_range $lying out-of-range
record appendix_out_of_range_memcheck compute-sanitizer --tool memcheck $lying out-of-range
record appendix_stale $lying stale
record appendix_stale_memcheck compute-sanitizer --tool memcheck $lying stale
fi
if [ "$part" = all ] || [ "$part" = bench ]; then
run serve $build/demo/serve  # chapter 8's engines on the GPU's default trace, with tokens/s
for b in $build/bench/bench_ch*; do
    n=$(basename "$b")
    run "$n" "$b" --csv "$results/$n.csv" --md "$results/$n.md"
done
# The PyTorch baselines of chapter 9 (SDPA on a dense cache, FlexAttention paged); the
# script skips, and says so, where torch or CUDA is missing.
run bench_torch_selftest python3 bench/bench_torch.py --self-test
run bench_torch python3 bench/bench_torch.py --csv "$results/bench_torch.csv" --md "$results/bench_torch.md"
fi
if [ "$part" = ch08 ]; then
for t in $build/test_ch03_solution $build/test_ch07_solution $build/test_ch08_solution; do
    n=$(basename "$t")
    run "$n" "$t"
    filter=()
    [ "$n" = test_ch08_solution ] && filter=(--gtest_filter=-*Large*)
    run "memcheck_$n" compute-sanitizer --tool memcheck --error-exitcode 1 "$t" "${filter[@]}"
    run "racecheck_$n" compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 1 "$t" "${filter[@]}"
done
if $build/test_ch08_chapter --gtest_brief=1 > "$out/test_ch08_chapter.log" 2>&1; then
    summary+=("FAIL  test_ch08_chapter (the skeleton passed!)")
else
    summary+=("ok    test_ch08_chapter fails, as a skeleton must")
fi
# Chapter 10's kernel inside chapter 8's engine.
run test_ch10_engine $build/test_ch10_solution --gtest_filter='VarlenInTheEngine*'
run memcheck_ch10_engine compute-sanitizer --tool memcheck --error-exitcode 1 $build/test_ch10_solution \
    --gtest_filter='VarlenInTheEngine*'
run serve $build/demo/serve
run bench_cascade $build/bench/bench_cascade --csv "$results/bench_cascade.csv" --md "$results/bench_cascade.md"
run bench_engine $build/bench/bench_engine --md "$results/bench_engine.md"
fi
if [ "$part" = ch11 ] || [ "$part" = ch12 ]; then
ch=${part#ch}
tests=($build/test_ch${ch}_solution)
[ "$part" = ch12 ] && tests+=($build/test_ch10_solution)  # chapter 12 changed chapter 10's kernel
for t in "${tests[@]}"; do
    n=$(basename "$t")
    run "$n" "$t"
    run "memcheck_$n" compute-sanitizer --tool memcheck --error-exitcode 1 "$t"
    run "racecheck_$n" compute-sanitizer --tool racecheck --racecheck-report all --error-exitcode 1 "$t"
done
if $build/test_ch${ch}_chapter --gtest_brief=1 > "$out/test_ch${ch}_chapter.log" 2>&1; then
    summary+=("FAIL  test_ch${ch}_chapter (the skeleton passed!)")
else
    summary+=("ok    test_ch${ch}_chapter fails, as a skeleton must")
fi
run "bench_$part" $build/bench/bench_$part --csv "$results/bench_$part.csv" --md "$results/bench_$part.md"
[ "$part" = ch11 ] && run serve_mla $build/demo/serve_mla --quiet
fi
if [ "$part" = ch13 ]; then
# Chapter 13 (sm_90a): its tests and the Hopper semantics under every sanitizer, the skeleton
# red, the planted Hopper hazards under the GPU's tools (tools/gpu_hazards.sh), and the
# prefill chunks of bench_ch10 with chapter 13's kernel beside chapter 10's. FLASHINFER_PART=
# prefill (below, with part ch10's FlashInfer run) adds fa3 in the same call.
for t in $build/test_ch13_solution $build/tests/emu/test_emu_hopper; do
    n=$(basename "$t")
    run "$n" "$t"
    for tool in memcheck racecheck synccheck initcheck; do
        extra=()
        [ "$tool" = racecheck ] && extra=(--racecheck-report all)
        run "${tool}_$n" compute-sanitizer --tool $tool ${extra[@]+"${extra[@]}"} --error-exitcode 1 "$t"
    done
done
if $build/test_ch13_chapter --gtest_brief=1 > "$out/test_ch13_chapter.log" 2>&1; then
    summary+=("FAIL  test_ch13_chapter (the skeleton passed!)")
else
    summary+=("ok    test_ch13_chapter fails, as a skeleton must")
fi
run gpu_hazards bash tools/gpu_hazards.sh "$results"
run bench_ch10_chunks $build/bench/bench_ch10 --only chunk --csv "$results/bench_ch13.csv" --md "$results/bench_ch13.md"
fi
if [ "$part" = ch11 ] && ls .whl/flashinfer_python-*.whl > /dev/null 2>&1; then
run flashinfer_install python3 -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/flashinfer-site .whl/*.whl
PYTHONPATH=/tmp/flashinfer-site${PYTHONPATH:+:$PYTHONPATH} run bench_flashinfer_mla python3 bench/bench_flashinfer_mla.py \
    --md "$results/bench_flashinfer_mla.md" --csv "$results/bench_flashinfer_mla.csv"
PYTHONPATH=/tmp/flashinfer-site${PYTHONPATH:+:$PYTHONPATH} run bench_flashmla python3 bench/bench_flashmla.py \
    --md "$results/bench_flashmla.md" --csv "$results/bench_flashmla.csv"
fi
if [ "$part" = ch10 ] && [ "${BENCH_OURS:-1}" != 0 ]; then
run bench_ch10 $build/bench/bench_ch10 --csv "$results/bench_ch10.csv" --md "$results/bench_ch10.md"
run bench_ch12 $build/bench/bench_ch12 --csv "$results/bench_ch12.csv" --md "$results/bench_ch12.md"
fi
if { [ "$part" = all ] || [ "$part" = bench ] || [ "$part" = ch10 ] ||
     { [ "$part" = ch13 ] && [ -n "${FLASHINFER_PART:-}" ]; }; } && [ "${FLASHINFER_PART:-all}" != none ]; then
# FlashInfer's baselines of chapter 10 (its decode and prefill wrappers, SDPA's causal
# prefill, FlexAttention paged decode), from the offline wheels in .whl/ if they are there;
# FlashInfer compiles its kernels with this machine's nvcc at first use (a few minutes).
if ls .whl/flashinfer_python-*.whl > /dev/null 2>&1; then
    run flashinfer_install python3 -m pip install -q --no-index --no-deps --no-compile \
        --no-cache-dir --upgrade --target /tmp/flashinfer-site .whl/*.whl
    export PYTHONPATH=/tmp/flashinfer-site${PYTHONPATH:+:$PYTHONPATH}
fi
# FLASHINFER_PART=decode, prefill, flex or window (chapter 12's cases) runs one part, none
# skips FlashInfer (default all: over 10 minutes on a fresh machine, most of it FlashInfer's
# JIT; decode and prefill took about 230 s each on an H200, window over 330). A lent GPU's
# call is 600 s: run the parts in calls of their own (BENCH_OURS=0 skips bench_ch10 and
# bench_ch12 in the calls after the first), with FLASHINFER_TIMEOUT=SECONDS so that a part
# that runs long still leaves results.tgz (its CSV is written case by case). The self-test
# runs second: its tiny FlashInfer runs reuse the modules the benchmark built.
# FLASHINFER_ONLY=TEXT[,TEXT...] runs the cases whose names contain one (ch13: chunk).
run bench_flashinfer ${FLASHINFER_TIMEOUT:+timeout "$FLASHINFER_TIMEOUT"} \
    python3 bench/bench_flashinfer.py --part "${FLASHINFER_PART:-all}" ${FLASHINFER_ONLY:+--only "$FLASHINFER_ONLY"} \
    --csv "$results/bench_flashinfer.csv" --md "$results/bench_flashinfer.md"
run bench_flashinfer_selftest python3 bench/bench_flashinfer.py --self-test
fi
echo
printf '%s\n' "${summary[@]}" | tee "$top/summary.txt"
# At most a few files come back from a lent GPU: pack the logs into one.
tar -czf "$top/logs.tgz" -C "$top" logs && rm -rf "$out"
tar -czf "$top/results.tgz" -C "$top" results && rm -rf "$results"
