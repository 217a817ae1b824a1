#!/usr/bin/env bash
# make nvcc-check: every solution and skeleton .cu must compile with nvcc for sm_90
# (CI has nvcc but no GPU; this proves the kernels are real CUDA, not just emulator C++).
set -uo pipefail
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "nvcc not found: install the CUDA toolkit (make doctor)"; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Earlier chapters' device headers (.cuh) come from their solutions, as in CMakeLists.txt.
deps=()
for d in solutions/*/; do deps+=("-I$d"); done
fails=0 count=0
for f in solutions/*/*.cu chapters/*/*.cu tests/emu/test_semantics.cu; do
    [ -e "$f" ] || continue
    count=$((count + 1))
    if "$nvcc" -std=c++17 -arch=sm_90 -Iinclude "${deps[@]}" -c "$f" -o "$out/k.o" 2> "$out/err"; then
        echo "  ok    $f"
    else
        echo "  FAIL  $f"; sed 's/^/        /' "$out/err" | head -n 20
        fails=$((fails + 1))
    fi
done
echo "nvcc-check: $((count - fails)) passed, $fails failed"
[ "$fails" = 0 ]
