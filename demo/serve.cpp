// The serving demo (make demo): chapter 8's engine on the built-in trace, twice, on the
// same KV memory budget: once with chapter 1's dense policy (every request reserves
// max_seq_len slots up front), once paged (blocks on demand, preemption, prefix caching).
// Then sequences that fork (parallel samples and beams, chapter 7's copy-on-write) and, on
// a GPU, decode steps replayed from CUDA graphs.
//   usage: serve [--requests N] [--shrink S] [--blocks N] [--per-step N]
//                [--preemption swap|recompute] [--no-prefix-cache] [--quiet]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "pa/ch08_engine.h"

namespace {

using pa::ch08::Engine;
using pa::ch08::EngineConfig;
using pa::ch08::EngineStats;

struct Options {
  bool gpu = std::string(PA_BACKEND_NAME) == "cuda";
  // The trace's lengths (prompt 32-1024, output 16-512) are divided by `shrink`: the
  // emulator runs one fiber per CUDA thread, so its default is smaller.
  int requests = gpu ? 256 : 24;
  int shrink = gpu ? 4 : 16;
  int blocks = gpu ? 240 : 24;  // the KV budget, in blocks of 16 tokens
  int per_step = 2;             // arrivals per step
  pa::ch08::Preemption preemption = pa::ch08::Preemption::swap;
  bool prefix_cache = true;
  bool quiet = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--requests") o.requests = std::atoi(next().c_str());
    else if (a == "--shrink") o.shrink = std::atoi(next().c_str());
    else if (a == "--blocks") o.blocks = std::atoi(next().c_str());
    else if (a == "--per-step") o.per_step = std::atoi(next().c_str());
    else if (a == "--preemption") {
      const std::string p = next();
      if (p != "swap" && p != "recompute") {
        std::fprintf(stderr, "--preemption swap|recompute, got %s\n", p.c_str());
        std::exit(2);
      }
      o.preemption = p == "swap" ? pa::ch08::Preemption::swap : pa::ch08::Preemption::recompute;
    } else if (a == "--no-prefix-cache") o.prefix_cache = false;
    else if (a == "--quiet") o.quiet = true;
    else {
      std::fprintf(stderr,
                   "usage: serve [--requests N] [--shrink S] [--blocks N] [--per-step N]\n"
                   "             [--preemption swap|recompute] [--no-prefix-cache] [--quiet]\n");
      std::exit(2);
    }
  }
  return o;
}

struct Result {
  EngineStats stats;
  std::map<int, std::vector<int>> outputs;
  double seconds = 0;
};

// ANCHOR: progress
Result run(const char* name, pa::ch08::TinyModel& model, const EngineConfig& cfg,
           const std::vector<pa::ch08::EngineRequest>& requests, bool quiet) {
  Engine engine(model, cfg);
  for (const auto& r : requests) engine.add_request(r);
  const bool tty = isatty(fileno(stdout));
  const int n = int(requests.size());
  int done = 0, last_shown = -1;
  const auto start = std::chrono::steady_clock::now();
  engine.run([&](const pa::ch08::StepReport& rep) {
    done += rep.finished;
    if (quiet) return;
    // On a terminal one line redrawn every step; in a log a line per 25% of requests.
    if (!tty && done * 4 / n == last_shown && done != n) return;
    last_shown = done * 4 / n;
    const int width = 30, filled = done * width / n;
    std::printf("%s%-6s [%s%s] %3d/%d done  step %4d  running %3d  waiting %3d  swapped %2d  "
                "KV blocks in use %3d/%d",
                tty ? "\r" : "", name, std::string(size_t(filled), '#').c_str(),
                std::string(size_t(width - filled), '.').c_str(), done, n, rep.step, rep.running,
                rep.waiting, rep.swapped, cfg.num_blocks - engine.blocks().num_free(), cfg.num_blocks);
    if (!tty) std::printf("\n");
    std::fflush(stdout);
  });
  if (tty && !quiet) std::printf("\n");
  Result r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.stats = engine.stats();
  r.outputs = engine.outputs();
  return r;
}
// ANCHOR_END: progress

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  PA_REQUIRE(o.requests >= 1 && o.shrink >= 1 && o.blocks >= 1 && o.per_step >= 1,
             "--requests, --shrink, --blocks and --per-step must be at least 1");
  pa::ch08::TinyModel model{pa::ch08::ModelConfig{}};
  const pa::ch08::ModelConfig& mc = model.config();
  const auto trace = pa::synthetic_trace(pa::kDefaultTraceSeed, o.requests);
  // Two shared 32-token "system prompts": what the prefix cache is for.
  const auto requests = pa::ch08::trace_workload(trace, o.shrink, mc.vocab_size, 2, 32, o.per_step);
  int longest = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
  for (const auto& r : requests) {
    longest = std::max(longest, int(r.prompt.size()) + r.max_new_tokens);
    prompt_tokens += int64_t(r.prompt.size());
    output_tokens += r.max_new_tokens;
  }
  EngineConfig paged;
  paged.num_blocks = o.blocks;
  paged.block_size = 16;
  paged.max_seq_len = (1024 + 512) / o.shrink;  // the longest request the trace can make
  paged.max_seq_len = (paged.max_seq_len + 15) / 16 * 16;
  paged.max_num_seqs = 64;
  paged.max_tokens_per_step = 512;
  paged.preemption = o.preemption;
  paged.prefix_caching = o.prefix_cache;
  paged.num_swap_blocks = o.blocks;
  EngineConfig dense = paged;
  dense.dense = true;

  const int64_t bpt = mc.kv_bytes_per_token();
  const int64_t budget = int64_t(o.blocks) * paged.block_size * bpt;
  std::printf("== Chapter 8: a serving loop (%s)\n", PA_BACKEND_NAME);
  std::printf("Model: %d layers, %d query / %d KV heads of %d, vocab %d, fp32 KV (%lld KiB per token)\n",
              mc.num_layers, mc.num_q_heads, mc.num_kv_heads, mc.head_size, mc.vocab_size,
              (long long)(bpt / 1024));
  std::printf("Trace: %d requests of the built-in trace, lengths / %d (prompts %lld tokens, outputs "
              "%lld, longest %d), %d arrivals per step, 2 shared 32-token system prompts\n",
              o.requests, o.shrink, (long long)prompt_tokens, (long long)output_tokens, longest,
              o.per_step);
  std::printf("KV budget: %d blocks x %d tokens = %lld KiB; max_seq_len %d; paged preemption: %s%s\n",
              o.blocks, paged.block_size, (long long)(budget / 1024), paged.max_seq_len,
              o.preemption == pa::ch08::Preemption::swap ? "swap" : "recompute",
              o.prefix_cache ? ", prefix caching on" : ", prefix caching off");

  const Result d = run("dense", model, dense, requests, o.quiet);
  const Result p = run("paged", model, paged, requests, o.quiet);

  // ANCHOR: table
  auto wasted = [&](const EngineStats& s) {
    return double(s.sum_allocated_slots - s.sum_used_slots) / double(s.steps) * double(bpt);
  };
  auto waste_fraction = [](const EngineStats& s) {
    return s.sum_allocated_slots ? 1.0 - double(s.sum_used_slots) / double(s.sum_allocated_slots) : 0.0;
  };
  std::printf("\n| same trace, same KV budget           | dense (chapter 1) | paged (chapter 8) |\n");
  std::printf("|--------------------------------------|-------------------|-------------------|\n");
  std::printf("| steps to drain the trace             | %17d | %17d |\n", d.stats.steps, p.stats.steps);
  std::printf("| requests completed per step          | %17.3f | %17.3f |\n",
              double(d.stats.finished) / d.stats.steps, double(p.stats.finished) / p.stats.steps);
  std::printf("| peak concurrent sequences            | %17d | %17d |\n", d.stats.peak_running,
              p.stats.peak_running);
  std::printf("| mean wasted KV bytes per step        | %13.0f KiB | %13.0f KiB |\n", wasted(d.stats) / 1024,
              wasted(p.stats) / 1024);
  std::printf("| wasted share of the KV held          | %15.1f %% | %15.1f %% |\n",
              100 * waste_fraction(d.stats), 100 * waste_fraction(p.stats));
  std::printf("| peak wasted KV bytes                 | %13lld KiB | %13lld KiB |\n",
              (long long)(d.stats.peak_wasted_slots * bpt / 1024),
              (long long)(p.stats.peak_wasted_slots * bpt / 1024));
  std::printf("| preemptions (swap outs / recomputes) | %7d (%3d/%3d) | %7d (%3d/%3d) |\n",
              d.stats.preemptions, d.stats.swap_outs, d.stats.recomputes, p.stats.preemptions,
              p.stats.swap_outs, p.stats.recomputes);
  std::printf("| prompt tokens from the prefix cache  | %17lld | %17lld |\n",
              (long long)d.stats.cached_prompt_tokens, (long long)p.stats.cached_prompt_tokens);
  if (o.gpu)
    std::printf("| generated tokens/s (wall clock)      | %17.0f | %17.0f |\n",
                double(d.stats.generated_tokens) / d.seconds, double(p.stats.generated_tokens) / p.seconds);
  else
    std::printf("| generated tokens/s                   |   (GPU only: the emulator's time means little) |\n");
  // ANCHOR_END: table
  const bool same = d.outputs == p.outputs;
  std::printf("\nBoth engines generated the same greedy tokens for every request: %s\n", same ? "yes" : "NO");
  std::printf("Wasted = KV slots a running sequence holds but has not written: the dense policy\n"
              "reserves max_seq_len per request; paging wastes at most the tail of a last block.\n");

  // ANCHOR: forks
  // Forks: the first requests again, half with n = 4 seeded samples, half with a 4-beam
  // search. Every sequence of a request shares the prompt's blocks; a copy happens only at
  // the first write into a shared, partly filled block.
  std::vector<pa::ch08::EngineRequest> forked(requests.begin(),
                                              requests.begin() + std::min<size_t>(requests.size(), o.gpu ? 64 : 6));
  for (size_t i = 0; i < forked.size(); ++i) {
    if (i % 2 == 0) {
      forked[i].sampling.n = 4;
      forked[i].sampling.temperature = 0.8f;
      forked[i].sampling.top_p = 0.95f;
      forked[i].sampling.seed = 1000 + i;
    } else {
      forked[i].sampling.beam_width = 4;
    }
  }
  EngineConfig fc = paged;
  fc.num_blocks = o.blocks * 4;
  fc.num_swap_blocks = fc.num_blocks;
  const Result f = run("forks", model, fc, forked, o.quiet);
  const EngineStats& fs = f.stats;
  const std::string label = std::to_string(forked.size()) + " requests: n = 4 samples or 4 beams";
  std::printf("\n| %-40s |  with sharing | without sharing |\n", label.c_str());
  std::printf("|------------------------------------------|---------------|-----------------|\n");
  std::printf("| peak KV blocks held                      | %13d | %15d |\n", fs.peak_blocks_in_use,
              fs.peak_blocks_unshared);
  std::printf("| mean KV blocks held per step             | %13.1f | %15.1f |\n",
              double(fs.sum_blocks_in_use) / fs.steps, double(fs.sum_blocks_unshared) / fs.steps);
  std::printf("Forks: %d sequences started by fork; %lld copy-on-write block copies (one copy_blocks\n"
              "launch per step); memory saved by sharing: %.0f%% at the peak, %.0f%% on average.\n",
              fs.forks, (long long)fs.cow_copies, 100.0 * (1.0 - double(fs.peak_blocks_in_use) / fs.peak_blocks_unshared),
              100.0 * (1.0 - double(fs.sum_blocks_in_use) / double(fs.sum_blocks_unshared)));
  // ANCHOR_END: forks

  // ANCHOR: graphs
  if (o.gpu) {
    // The paged run again, its decode-only steps replayed from CUDA graphs.
    EngineConfig gc = paged;
    gc.cuda_graphs = true;
    const Result g = run("graphs", model, gc, requests, o.quiet);
    const bool same_g = g.outputs == p.outputs;
    std::printf("\nCUDA graphs: %d of %d steps replayed; %.0f -> %.0f generated tokens/s (x%.2f); "
                "same tokens: %s\n",
                g.stats.graph_steps, g.stats.steps, double(p.stats.generated_tokens) / p.seconds,
                double(g.stats.generated_tokens) / g.seconds, p.seconds / g.seconds, same_g ? "yes" : "NO");
  }
  // ANCHOR_END: graphs
  return same ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "serve: %s\n", e.what());
  return 1;
}
