// Chapter 13's pipeline (hopper_pipeline.cuh) once on an sm_90 GPU, for compute-sanitizer:
// tools/gpu_hazards.sh builds it with each planted bug of tests/mutants/13-* and runs it
// plain and under memcheck, racecheck and synccheck. Exit status: 0 the output is right,
// 1 it is wrong, 2 a CUDA error or a refusal on the host (pa::Error), 3 no sm_90 GPU.
// A planted hang (an expect_tx that never completes, a wrong parity) never returns: the
// script's `timeout` ends it.
#include <cstdio>
#include <exception>

#include "hopper_pipeline.cuh"

int main() {
  namespace hp = pa::hopper_pipeline;
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess || p.major < 9) {
    std::printf("hopper pipeline: needs an sm_90 GPU\n");
    return 3;
  }
  try {
    const hp::Inputs in = hp::make_inputs();
    const std::string diff = hp::first_difference(hp::run(in), hp::expected(in));
    if (!diff.empty()) {
      std::printf("hopper pipeline: WRONG: %s\n", diff.c_str());
      return 1;
    }
  } catch (const std::exception& e) {
    std::printf("hopper pipeline: ERROR: %s\n", e.what());
    return 2;
  }
  std::printf("hopper pipeline: right (64 x 32 outputs equal the host's)\n");
  return 0;
}
