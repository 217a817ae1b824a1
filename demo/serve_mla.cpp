// The latent cache in the engine (chapter 11): the built-in trace served twice at the same
// KV byte budget, once by a GQA model (K and V of 8 KV heads per token and layer, chapter
// 10's varlen kernel) and once by a DeepSeek-like MLA model (one 576-wide latent row per
// token and layer, chapter 11's absorbed kernel). Both use chapter 3/7/8's block managers
// unchanged: a block is block_size tokens of every layer either way; only its bytes differ,
// so the same budget holds more MLA blocks, and more sequences run at once.
//   usage: serve_mla [--requests N] [--shrink S] [--gqa-blocks N] [--heads H] [--head-size D]
//                    [--per-step N] [--quiet]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "pa/ch08_engine.h"
#include "pa/ch10_varlen.h"
#include "pa/ch11_mla.h"

namespace {

using pa::ch08::Engine;
using pa::ch08::EngineConfig;
using pa::ch08::EngineStats;

struct Options {
  bool gpu = std::string(PA_BACKEND_NAME) == "cuda";
  int requests = gpu ? 256 : 10;
  int shrink = gpu ? 4 : 16;     // the trace's lengths (prompt 32-1024, output 16-512) / shrink
  int gqa_blocks = gpu ? 480 : 10;  // the KV budget: this many GQA blocks of 16 tokens
  int heads = gpu ? 16 : 8;      // query heads of both models
  int head_size = gpu ? 128 : 64;  // GQA's D; MLA's q_nope and v width
  int per_step = 2;
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
    else if (a == "--shrink") o.shrink = next();
    else if (a == "--gqa-blocks") o.gqa_blocks = next();
    else if (a == "--heads") o.heads = next();
    else if (a == "--head-size") o.head_size = next();
    else if (a == "--per-step") o.per_step = next();
    else if (a == "--quiet") o.quiet = true;
    else {
      std::fprintf(stderr, "usage: serve_mla [--requests N] [--shrink S] [--gqa-blocks N] [--heads H] "
                           "[--head-size D] [--per-step N] [--quiet]\n");
      std::exit(2);
    }
  }
  return o;
}

struct Result {
  EngineStats stats;
  int num_blocks = 0;
  int64_t bytes_per_token = 0;
  double seconds = 0;
};

// ANCHOR: serve_one
// One model on the trace, in `budget` bytes of KV cache: the blocks that fit, then the run.
Result serve(const char* name, const pa::ch08::ModelConfig& mc, std::shared_ptr<pa::ch08::StepAttention> attention,
             int64_t budget, const EngineConfig& base, const std::vector<pa::ch08::EngineRequest>& requests,
             bool quiet) {
  pa::ch08::TinyModel model(mc);
  model.set_step_attention(std::move(attention));
  Result r;
  r.bytes_per_token = mc.kv_bytes_per_token();
  r.num_blocks = int(budget / (r.bytes_per_token * base.block_size));  // whole blocks of every layer
  EngineConfig cfg = base;
  cfg.num_blocks = r.num_blocks;
  cfg.num_swap_blocks = r.num_blocks;
  Engine engine(model, cfg);
  for (const auto& q : requests) engine.add_request(q);
  const auto start = std::chrono::steady_clock::now();
  int done = 0;
  engine.run([&](const pa::ch08::StepReport& rep) {
    done += rep.finished;
    if (!quiet && rep.finished)
      std::printf("%-4s step %4d: %3d/%zu done, running %3d, KV blocks in use %4d/%d\n", name, rep.step, done,
                  requests.size(), rep.running, r.num_blocks - engine.blocks().num_free(), r.num_blocks);
  });
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.stats = engine.stats();
  return r;
}
// ANCHOR_END: serve_one

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  PA_REQUIRE(o.requests >= 1 && o.shrink >= 1 && o.gqa_blocks >= 1 && o.per_step >= 1 && o.heads >= 8,
             "--requests, --shrink, --gqa-blocks and --per-step must be at least 1, --heads at least 8");
  // ANCHOR: configs
  pa::ch08::ModelConfig gqa;  // 8 KV heads: K and V of 8 x head_size per token and layer
  gqa.num_q_heads = o.heads;
  gqa.num_kv_heads = 8;
  gqa.head_size = o.head_size;
  gqa.kv_dtype = pa::DType::bf16;
  pa::ch08::ModelConfig mla = gqa;  // DeepSeek-like: one row of c_kv 512 + k_rope 64
  mla.attention = pa::ch08::AttentionKind::mla;
  // ANCHOR_END: configs
  const auto trace = pa::synthetic_trace(pa::kDefaultTraceSeed, o.requests);
  const auto requests = pa::ch08::trace_workload(trace, o.shrink, gqa.vocab_size, 2, 32, o.per_step);
  int64_t prompt_tokens = 0, output_tokens = 0;
  for (const auto& r : requests) {
    prompt_tokens += int64_t(r.prompt.size());
    output_tokens += r.max_new_tokens;
  }
  EngineConfig base;
  base.block_size = 16;
  base.max_seq_len = ((1024 + 512) / o.shrink + 15) / 16 * 16;  // the longest request the trace can make
  base.max_num_seqs = 128;
  base.max_tokens_per_step = 512;
  base.preemption = pa::ch08::Preemption::swap;
  const int64_t budget = int64_t(o.gqa_blocks) * base.block_size * gqa.kv_bytes_per_token();

  std::printf("== Chapter 11: the latent cache in the engine (%s)\n", PA_BACKEND_NAME);
  std::printf("Models: %d layers, %d query heads, bf16 cache\n  GQA: 8 KV heads of %d\n"
              "  MLA: c_kv %d + k_rope %d; per head, q_nope and v of %d\n",
              gqa.num_layers, gqa.num_q_heads, gqa.head_size, mla.latent_dim, mla.rope_dim, mla.head_size);
  std::printf("Trace: %d requests of the built-in trace, lengths / %d, %d arrivals per step\n"
              "  (prompts %lld tokens, outputs %lld)\n",
              o.requests, o.shrink, o.per_step, (long long)prompt_tokens, (long long)output_tokens);
  std::printf("KV budget: %lld KiB (%d GQA blocks of %d tokens)\n", (long long)(budget / 1024), o.gqa_blocks,
              base.block_size);

  // Chapter 11's bill for the same (shrunk) trace and budget: the prediction beside the run.
  std::vector<pa::Request> shrunk;
  for (const auto& r : requests) shrunk.push_back({int64_t(r.prompt.size()), int64_t(r.max_new_tokens)});
  const pa::KVConfig kvc{gqa.num_layers, gqa.num_kv_heads, gqa.head_size, 2, base.max_seq_len};
  const pa::ch11::CacheCost gqa_bill = pa::ch11::kv_cache_cost(shrunk, kvc, base.block_size, budget);
  const pa::ch11::CacheCost mla_bill = pa::ch11::latent_cache_cost(shrunk, mla.num_layers, base.block_size, 2, budget);

  const Result g = serve("GQA", gqa, std::make_shared<pa::ch10::VarlenStepAttention>(), budget, base, requests, o.quiet);
  const Result m = serve("MLA", mla, std::make_shared<pa::ch11::MlaStepAttention>(), budget, base, requests, o.quiet);

  PA_REQUIRE(gqa_bill.bytes_per_token == g.bytes_per_token && mla_bill.bytes_per_token == m.bytes_per_token &&
                 gqa_bill.blocks_in_budget == g.num_blocks && mla_bill.blocks_in_budget == m.num_blocks,
             "chapter 11's bill and the engine's pool disagree on bytes per token or blocks");
  // ANCHOR: table
  std::printf("\n| same trace, same KV budget         | GQA (8 KV heads) |  MLA (latent) |\n");
  std::printf("|------------------------------------|------------------|---------------|\n");
  std::printf("| KV bytes per token (all layers)    | %16lld | %13lld |\n", (long long)g.bytes_per_token,
              (long long)m.bytes_per_token);
  std::printf("| blocks in the budget               | %16d | %13d |\n", g.num_blocks, m.num_blocks);
  std::printf("| average requests that fit (ch. 11) | %16lld | %13lld |\n", (long long)gqa_bill.seqs_in_budget,
              (long long)mla_bill.seqs_in_budget);
  std::printf("| blocks held at peak                | %16d | %13d |\n", g.stats.peak_blocks_in_use,
              m.stats.peak_blocks_in_use);
  std::printf("| peak concurrent sequences          | %16d | %13d |\n", g.stats.peak_running, m.stats.peak_running);
  std::printf("| steps to drain the trace           | %16d | %13d |\n", g.stats.steps, m.stats.steps);
  std::printf("| preemptions                        | %16d | %13d |\n", g.stats.preemptions, m.stats.preemptions);
  std::printf("| tokens generated                   | %16lld | %13lld |\n", (long long)g.stats.generated_tokens,
              (long long)m.stats.generated_tokens);
  if (o.gpu)
    std::printf("| generated tokens/s (wall clock)    | %16.0f | %13.0f |\n",
                double(g.stats.generated_tokens) / g.seconds, double(m.stats.generated_tokens) / m.seconds);
  else
    std::printf("| generated tokens/s                 | %16s | %13s |\n", "(GPU only)", "(GPU only)");
  // ANCHOR_END: table
  std::printf("\nThe two models are different networks (their tokens differ); what they share is the\n"
              "trace, the budget and the block managers. MLA's block is %.2fx smaller, so the budget\n"
              "holds %.2fx the blocks.\n",
              double(g.bytes_per_token) / double(m.bytes_per_token), double(m.num_blocks) / double(g.num_blocks));
  const bool ok = g.stats.generated_tokens == output_tokens && m.stats.generated_tokens == output_tokens;
  if (!ok) std::printf("NOT every request generated its tokens\n");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "serve_mla: %s\n", e.what());
  return 1;
}
