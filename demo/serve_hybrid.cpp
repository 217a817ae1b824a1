// Hybrid models in the engine (chapter 12): a Gemma-3-like model (five sliding-window
// layers for each full one) served twice on a long-context trace at one KV budget: once
// with every layer keeping every block, once with the sliding layers giving back the
// blocks their window has left (the hybrid manager). Same model, same tokens; the KV held
// and the sequences that fit differ. Beside the measured blocks, the closed form
// (ch12::predicted_blocks), computed from the sequences' lengths alone.
//   usage: serve_hybrid [--requests N] [--prompt MIN MAX] [--output N] [--window W] [--blocks N]
//                       [--layers L] [--quiet]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "pa/ch12_engine.h"
#include "pa/trace.h"

namespace {

using pa::ch12::HybridEngine;
using pa::ch12::HybridEngineConfig;

struct Options {
  bool gpu = std::string(PA_BACKEND_NAME) == "cuda";
  int requests = gpu ? 24 : 4;
  int prompt_min = gpu ? 1024 : 64, prompt_max = gpu ? 2048 : 112;
  int output = gpu ? 32 : 6;
  int window = gpu ? 256 : 16;
  int blocks = gpu ? 1536 : 120;  // the KV budget in blocks (block_size tokens of one layer slot)
  int layers = 6;
  int block_size = gpu ? 16 : 8;
  bool quiet = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> int {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::atoi(argv[++i]);
    };
    if (a == "--requests") o.requests = next();
    else if (a == "--prompt") {
      o.prompt_min = next();
      o.prompt_max = next();
    } else if (a == "--output") o.output = next();
    else if (a == "--window") o.window = next();
    else if (a == "--blocks") o.blocks = next();
    else if (a == "--layers") o.layers = next();
    else if (a == "--quiet") o.quiet = true;
    else {
      std::fprintf(stderr, "usage: serve_hybrid [--requests N] [--prompt MIN MAX] [--output N] [--window W] "
                           "[--blocks N] [--layers L] [--quiet]\n");
      std::exit(2);
    }
  }
  return o;
}

struct Result {
  pa::ch12::HybridEngineStats stats;
  int predicted_peak = 0, steps_matching = 0, steps_with_work = 0;
  double seconds = 0;
  std::map<int, std::vector<int>> outputs;
  std::map<int, std::vector<std::vector<float>>> logits;
};

// ANCHOR: serve_hybrid_one
Result serve(const char* name, pa::ch08::TinyModel& model, bool free_windows, const HybridEngineConfig& base,
             const std::vector<pa::ch08::EngineRequest>& requests, bool quiet) {
  model.set_step_attention(std::make_shared<pa::ch12::HybridStepAttention>());
  HybridEngineConfig cfg = base;
  cfg.free_windows = free_windows;
  cfg.record_logits = true;
  HybridEngine engine(model, cfg);
  for (const auto& q : requests) engine.add_request(q);
  const std::vector<int> windows = model.config().group_windows();
  Result r;
  int done = 0;
  const auto start = std::chrono::steady_clock::now();
  engine.run([&](const pa::ch12::HybridStepReport& rep) {
    // The closed form from the running sequences' lengths alone (not the manager).
    int predicted = 0;
    for (const auto& [c, n] : rep.seqs)
      predicted += pa::ch12::predicted_blocks(windows, free_windows, cfg.block_size, c, n);
    r.predicted_peak = std::max(r.predicted_peak, predicted);
    if (!rep.seqs.empty()) {
      ++r.steps_with_work;
      r.steps_matching += predicted == rep.blocks_held;
    }
    done += rep.finished;
    if (!quiet && rep.finished)
      std::printf("%-6s step %4d: %3d/%zu done, running %3d, KV blocks held %5d (closed form %5d) of %d\n", name,
                  rep.step, done, requests.size(), rep.running, rep.blocks_held, predicted, cfg.num_blocks - 1);
  });
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.stats = engine.stats();
  r.outputs = engine.outputs();
  r.logits = engine.logits();
  return r;
}
// ANCHOR_END: serve_hybrid_one

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  PA_REQUIRE(o.requests >= 1 && o.prompt_min >= 1 && o.prompt_max >= o.prompt_min && o.output >= 1 &&
                 o.window >= 1 && o.blocks >= 2 && o.layers >= 2,
             "bad arguments");
  // ANCHOR: hybrid_config
  pa::ch08::ModelConfig mc;  // Gemma-3-like: 5 sliding-window layers, then 1 full, repeated
  mc.num_layers = o.layers;
  mc.windows = pa::ch08::ModelConfig::layer_pattern(o.layers, 5, 1, o.window);
  mc.num_q_heads = o.gpu ? 16 : 4;
  mc.num_kv_heads = o.gpu ? 8 : 2;
  mc.head_size = o.gpu ? 128 : 64;
  mc.kv_dtype = pa::DType::bf16;
  // ANCHOR_END: hybrid_config
  pa::SplitMix64 rng(12);
  std::vector<pa::ch08::EngineRequest> requests;
  int longest = 0;
  for (int i = 0; i < o.requests; ++i) {
    pa::ch08::EngineRequest r{i, {}, o.output, i / 2};
    const int len = int(rng.uniform_int(o.prompt_min, o.prompt_max));
    for (int t = 0; t < len; ++t) r.prompt.push_back(int(rng.uniform_int(0, mc.vocab_size - 1)));
    longest = std::max(longest, len + o.output);
    requests.push_back(std::move(r));
  }
  HybridEngineConfig base;
  base.num_blocks = o.blocks;
  base.block_size = o.block_size;
  base.max_num_seqs = 64;
  base.max_tokens_per_step = o.gpu ? 4096 : 64;
  base.max_seq_len = longest;
  pa::ch08::TinyModel model(mc);
  const std::vector<int> windows = mc.group_windows();
  const int bs = o.block_size, k = mc.layers_per_group();

  std::printf("== Chapter 12: a hybrid model in the engine (%s)\n", PA_BACKEND_NAME);
  std::printf("Model: %d layers, 5 sliding (window %d) : 1 full; %d/%d heads of %d, bf16 cache\n", mc.num_layers,
              o.window, mc.num_q_heads, mc.num_kv_heads, mc.head_size);
  std::printf("  %zu layer groups of %d layer(s); a block is %d tokens of one group's layers\n", windows.size(), k, bs);
  std::printf("Trace: %d requests, prompts %d-%d tokens, %d new tokens each, 2 arrivals per step\n", o.requests,
              o.prompt_min, o.prompt_max, o.output);
  std::printf("KV budget: %d blocks (block 0 is the null block)\n", o.blocks);
  // ANCHOR: closed_form
  // Per sequence of L tokens, decoding: a full group holds ceil(L / bs) blocks, a sliding
  // group at most ceil((window - 1) / bs) + 1 (the window's keys and the block being filled).
  const int L = longest, full_blocks = (L + bs - 1) / bs, window_blocks = (o.window - 1 + bs - 1) / bs + 1;
  int per_seq_kept = 0, per_seq_freed = 0;
  for (int w : windows) {
    per_seq_kept += full_blocks;
    per_seq_freed += w > 0 ? std::min(full_blocks, window_blocks) : full_blocks;
  }
  // ANCHOR_END: closed_form
  std::printf("Closed form, one sequence of %d tokens: %d blocks kept, at most %d freed-window blocks "
              "(%.2fx less)\n",
              L, per_seq_kept, per_seq_freed, double(per_seq_kept) / per_seq_freed);

  const Result kept = serve("kept", model, false, base, requests, o.quiet);
  const Result freed = serve("hybrid", model, true, base, requests, o.quiet);

  // ANCHOR: hybrid_table
  std::printf("\n| same model, trace and KV budget           | every block kept | windows free blocks |\n");
  std::printf("|-------------------------------------------|------------------|---------------------|\n");
  std::printf("| KV blocks held at peak (manager)          | %16d | %19d |\n", kept.stats.peak_blocks_held,
              freed.stats.peak_blocks_held);
  std::printf("| KV blocks held at peak (closed form)      | %16d | %19d |\n", kept.predicted_peak,
              freed.predicted_peak);
  std::printf("| steps where the two agree                 | %10d/%-5d | %13d/%-5d |\n", kept.steps_matching,
              kept.steps_with_work, freed.steps_matching, freed.steps_with_work);
  std::printf("| peak concurrent sequences                 | %16d | %19d |\n", kept.stats.peak_running,
              freed.stats.peak_running);
  std::printf("| steps to drain the trace                  | %16d | %19d |\n", kept.stats.steps, freed.stats.steps);
  std::printf("| preemptions (recompute)                   | %16d | %19d |\n", kept.stats.preemptions,
              freed.stats.preemptions);
  std::printf("| tokens generated                          | %16lld | %19lld |\n",
              (long long)kept.stats.generated_tokens, (long long)freed.stats.generated_tokens);
  if (o.gpu)
    std::printf("| generated tokens/s (wall clock)           | %16.0f | %19.0f |\n",
                double(kept.stats.generated_tokens) / kept.seconds, double(freed.stats.generated_tokens) / freed.seconds);
  else
    std::printf("| generated tokens/s                        | %16s | %19s |\n", "(GPU only)", "(GPU only)");
  // ANCHOR_END: hybrid_table
  // Both runs compute the same model, but in different batches: the kernel's work split,
  // and so the 16-bit rounding, differs. A token may flip only where the top two logits
  // are nearly tied; say where, and how near.
  int differ = 0, near_ties = 0;
  double worst_gap = 0;
  for (const auto& [id, toks] : kept.outputs) {
    const std::vector<int>& other = freed.outputs.at(id);
    size_t t = 0;
    while (t < toks.size() && toks[t] == other[t]) ++t;
    if (t == toks.size()) continue;
    ++differ;
    std::vector<float> row = kept.logits.at(id)[t];
    std::sort(row.rbegin(), row.rend());
    const double gap = double(row[0]) - double(row[1]);
    worst_gap = std::max(worst_gap, gap);
    near_ties += gap < 0.1;
    if (!o.quiet) std::printf("request %d: token %zu differs (top-2 logit gap %.4f)\n", id, t, gap);
  }
  const bool same = differ == near_ties;
  const bool agree = kept.steps_matching == kept.steps_with_work && freed.steps_matching == freed.steps_with_work;
  if (differ == 0) std::printf("\nSame tokens from both runs: yes.");
  else
    std::printf("\nRequests whose tokens differ between the runs: %d, each first at a near-tie of the top two "
                "logits (largest gap %.4f < 0.1): %s.",
                differ, worst_gap, same ? "yes" : "NO");
  std::printf(" The closed form matches the manager at every step: %s.\n", agree ? "yes" : "NO");
  return same && agree ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "serve_hybrid: %s\n", e.what());
  return 1;
}
