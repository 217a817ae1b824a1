#!/usr/bin/env bash
# Print the backend to build for: "cuda" or "cpu".
#
#   cuda  when nvcc is found AND `nvidia-smi -L` lists at least one GPU;
#   cpu   otherwise (the CPU emulator; no GPU needed).
#
# BACKEND=cpu or BACKEND=cuda in the environment overrides the detection
# (e.g. `make test BACKEND=cpu` on a GPU machine).
# nvcc is looked for on PATH, then in $CUDA_HOME/bin, then in /usr/local/cuda/bin.
set -euo pipefail

if [ -n "${BACKEND:-}" ]; then
    case "$BACKEND" in
        cpu|cuda) echo "$BACKEND"; exit 0 ;;
        *) echo "detect_backend.sh: BACKEND must be 'cpu' or 'cuda', not '$BACKEND'" >&2; exit 2 ;;
    esac
fi

have_nvcc() {
    command -v nvcc >/dev/null 2>&1 ||
        { [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; } ||
        [ -x /usr/local/cuda/bin/nvcc ]
}

have_gpu() {
    local gpus
    command -v nvidia-smi >/dev/null 2>&1 || return 1
    gpus=$(timeout 20 nvidia-smi -L 2>/dev/null) || return 1
    grep -q '^GPU [0-9]' <<<"$gpus"
}

if have_nvcc && have_gpu; then
    echo cuda
else
    echo cpu
fi
