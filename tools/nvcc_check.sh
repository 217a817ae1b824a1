#!/usr/bin/env bash
# make nvcc-check: every solution and skeleton .cu must compile with nvcc for sm_90 (Hopper
# files for sm_90a)
# (CI has nvcc but no GPU; this proves the kernels are real CUDA, not just emulator C++).
set -uo pipefail
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "nvcc not found: install the CUDA toolkit (make doctor)"; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Earlier chapters' device headers (.cuh) come from their solutions, as in CMakeLists.txt.
deps=()
for d in solutions/*/; do deps+=("-I$d"); done
# Device code unoptimised (-Xcicc -O0 -Xptxas -O0): every phase still runs (the front end
# instantiates every template, cicc emits the PTX, ptxas assembles every kernel and its inline
# PTX for sm_90, g++ compiles the host side), but NVVM's optimiser, 70% of a heavy file's
# time (chapter 10's varlen_attention.cu: 233 s -> 57 s), does not. What this check does not
# prove: that the optimised build compiles (an optimiser crash or time-out); the GPU build
# (CMake, make test on a GPU) compiles optimised.
# One compile per file, as many at once as there are cores (the chapter 9 files take
# minutes each); results are printed in file order.
# CMAKE_CUDA_COMPILER_LAUNCHER (.ci/run sets it to ccache, which knows nvcc): a compile whose
# source, headers and flags are unchanged since an earlier run is served from the cache.
read -r -a launcher <<< "${CMAKE_CUDA_COMPILER_LAUNCHER:-}"
# Hopper files (their wgmma and setmaxnreg exist only on the sm_90a target) compile for
# sm_90a, written in the -gencode form (HOPPER.md: the -arch=sm_90a shorthand of some nvcc
# versions also runs a plain sm_90 pass, which rejects them); the others for sm_90.
arch_of() {
    case "$1" in
        *hopper*|*/13-*) echo "-gencode=arch=compute_90a,code=sm_90a" ;;
        *) echo "-arch=sm_90" ;;
    esac
}
check_one() {  # check_one FILE RESULT_DIR INDEX
    local f=$1 res=$2/$3
    # NVVM unoptimised is the fast path, but its PTX for a warp-specialized kernel holds the
    # consumers' accumulators in more registers than setmaxnreg's 232 (ptxas -O0 then fails
    # register allocation): Hopper files keep NVVM's optimiser (3.7 s for chapter 13's).
    local cicc=(-Xcicc -O0)
    case "$f" in *hopper*|*/13-*) cicc=() ;; esac
    if ${launcher[@]+"${launcher[@]}"} "$nvcc" -std=c++17 $(arch_of "$f") "${cicc[@]}" -Xptxas -O0 -Iinclude "${deps[@]}" -c "$f" \
        -o "$res.o" 2> "$res.err"; then
        echo "  ok    $f" > "$res.txt"
    else
        { echo "  FAIL  $f"; sed 's/^/        /' "$res.err" | head -n 20; } > "$res.txt"
    fi
    rm -f "$res.o"
}
# Arguments: the files to compile (make ci: those tools/ci_select.py nvcc selects; --none:
# no file), in the order given; none: every .cu. NVCC_CHECK_BUDGET=SECONDS: no compile starts
# after that many seconds; the files left are listed as CUT (not compiled), never as ok.
files=()
if [ "$#" -gt 0 ]; then
    [ "$1" = --none ] || files=("$@")
else
    for f in solutions/*/*.cu chapters/*/*.cu tests/emu/test_semantics.cu tests/emu/test_hopper_semantics.cu \
             tests/emu/hopper_hazard_driver.cu; do
        [ -e "$f" ] && files+=("$f")
    done
fi
budget=${NVCC_CHECK_BUDGET:-}
deadline=
[ -n "$budget" ] && deadline=$(($(date +%s) + budget))
jobs=$(nproc 2>/dev/null || echo 2)
# Started the later chapters first (their kernels, chapter 9's above all, compile longest),
# so that no long compile runs alone at the end while the other cores wait.
# (Files given: in their order, which puts what a change reaches before the rotation.)
start_order=$(for i in "${!files[@]}"; do
    n=$(sed -nE 's|^[a-z]+/([0-9][0-9])-.*|\1|p' <<<"${files[$i]}")
    [ "$#" -gt 0 ] && n=00
    echo "${n:-00} $i"
done | sort -k1,1r -k2,2n -s | cut -d' ' -f2)
for i in $start_order; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    if [ -n "$deadline" ] && [ "$(date +%s)" -ge "$deadline" ]; then
        echo "  CUT   ${files[$i]} (time cap: ${budget}s)" > "$out/$i.txt"
        continue
    fi
    check_one "${files[$i]}" "$out" "$i" &
done
wait
fails=0 cuts=0
for i in "${!files[@]}"; do
    cat "$out/$i.txt"
    grep -q '^  FAIL' "$out/$i.txt" && fails=$((fails + 1))
    grep -q '^  CUT' "$out/$i.txt" && cuts=$((cuts + 1))
done
count=${#files[@]}
[ "$count" = 0 ] && echo "  no .cu file selected"
echo "nvcc-check: $((count - fails - cuts)) passed, $fails failed$([ "$cuts" = 0 ] || echo ", $cuts skipped")"
[ "$fails" = 0 ]
