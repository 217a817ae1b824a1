// Chapter 8's engine on the GPU, one trace, five ways: the model's attention as the first
// version (chapter 5's decode + chapter 8's prefill kernel, fp32 and fp16 caches), with
// CUDA graphs for the decode-only steps, and as chapter 10's single varlen launch per
// layer. Every way must give the same greedy tokens per cache type; tokens/s is wall clock.
//   usage: bench_engine [--requests N] [--md FILE]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "pa/ch08_engine.h"
#include "pa/ch10_varlen.h"
#include "pa/trace.h"

namespace {

struct Way {
  const char* name;
  pa::DType kv;
  bool graphs, varlen;
};

struct Result {
  double seconds;
  pa::ch08::EngineStats stats;
  std::map<int, std::vector<int>> outputs;
};

Result serve(const Way& w, const std::vector<pa::ch08::EngineRequest>& requests) {
  pa::ch08::ModelConfig mc;
  mc.kv_dtype = w.kv;
  pa::ch08::TinyModel model(mc);
  if (w.varlen) model.set_step_attention(std::make_shared<pa::ch10::VarlenStepAttention>());
  pa::ch08::EngineConfig cfg;
  cfg.num_blocks = 240;
  cfg.max_seq_len = 384;
  cfg.max_num_seqs = 64;
  cfg.max_tokens_per_step = 512;
  cfg.num_swap_blocks = 240;
  cfg.preemption = pa::ch08::Preemption::swap;
  cfg.cuda_graphs = w.graphs;
  // Once to load every kernel (and capture the graphs), then timed.
  for (int pass = 0; pass < 2; ++pass) {
    pa::ch08::Engine engine(model, cfg);
    for (const auto& r : requests) engine.add_request(r);
    PA_CUDA_CHECK(cudaDeviceSynchronize());
    const auto start = std::chrono::steady_clock::now();
    engine.run();
    PA_CUDA_CHECK(cudaDeviceSynchronize());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (pass == 1) return {s, engine.stats(), engine.outputs()};
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) try {
  int n = 256;
  std::string md_path;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--requests") && i + 1 < argc) n = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--md") && i + 1 < argc) md_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_engine [--requests N] [--md FILE]\n");
      return 2;
    }
  }
  const auto trace = pa::synthetic_trace(pa::kDefaultTraceSeed, n);
  const auto requests = pa::ch08::trace_workload(trace, 4, 128, 2, 32, 2);
  const Way ways[] = {{"chapters 5 + 8, fp32 cache", pa::DType::fp32, false, false},
                      {"chapters 5 + 8, fp32 cache, CUDA graphs", pa::DType::fp32, true, false},
                      {"chapters 5 + 8, fp16 cache", pa::DType::fp16, false, false},
                      {"chapters 5 + 8, fp16 cache, CUDA graphs", pa::DType::fp16, true, false},
                      {"chapter 10 varlen, fp16 cache", pa::DType::fp16, false, true}};
  std::string table = "| engine attention (" + std::to_string(n) +
                      " requests, lengths / 4) | steps | graph steps | generated tokens/s | requests with the first way's tokens |\n"
                      "|---|---:|---:|---:|---|\n";
  std::map<int, std::map<int, std::vector<int>>> first;  // per cache type: the first way's tokens
  for (const Way& w : ways) {
    const Result r = serve(w, requests);
    auto [it, fresh] = first.emplace(int(w.kv), r.outputs);
    int same = 0;
    for (const auto& [id, out] : r.outputs) same += it->second.at(id) == out ? 1 : 0;
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %d | %d | %.0f | %s |\n", w.name, r.stats.steps, r.stats.graph_steps,
                  double(r.stats.generated_tokens) / r.seconds,
                  fresh ? "(the reference)" : (std::to_string(same) + " / " + std::to_string(n)).c_str());
    table += line;
    std::printf("%s", line);
    std::fflush(stdout);
  }
  if (!md_path.empty()) std::ofstream(md_path) << table;
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_engine: %s\n", e.what());
  return 1;
}
