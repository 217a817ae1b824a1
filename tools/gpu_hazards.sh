#!/usr/bin/env bash
# Chapter 13's planted bugs on an sm_90 GPU under compute-sanitizer (memcheck, racecheck,
# synccheck, initcheck): which hazards NVIDIA's tools catch. Writes OUT/gpu-hazards.md.
#   bash tools/gpu_hazards.sh OUT [--build build/cuda] [--timeout S] [--repeat N] [NAME...]
# after: cmake -S . -B build/cuda -G Ninja -DPA_BACKEND=cuda -DCMAKE_CUDA_ARCHITECTURES=90 \
#          -DPA_PYTHON=python3 -DCMAKE_BUILD_TYPE=Release
export PATH="$PATH:/usr/local/cuda/bin"
exec python3 "$(dirname "$0")/gpu_hazards.py" "$@"
