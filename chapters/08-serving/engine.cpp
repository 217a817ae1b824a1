// Your exercise file. (Generated from solutions/08-serving/engine.cpp; instructors regenerate with tools/make_skeletons.py.)
// Chapter 8, exercise 3 of 3: the scheduler, with continuous batching and preemption.
#include <algorithm>

#include "pa/ch08_engine.h"

namespace pa::ch08 {

struct Engine::Seq {
  enum State { pending, waiting, running, swapped, finished };
  int id = 0;
  std::vector<int> tokens;   // prompt, then every generated token
  int prompt_len = 0, max_new_tokens = 0, arrival_step = 0;
  int num_computed = 0;      // tokens whose K/V are in the cache
  int generated = 0;
  State state = pending;
  std::vector<int> host_blocks;  // where its K/V wait while swapped out
};

Engine::Engine(TinyModel& model, const EngineConfig& cfg)
    : model_(model),
      cfg_(cfg),
      blocks_(cfg.num_blocks, cfg.block_size, cfg.prefix_caching && !cfg.dense),
      kv_(model.config(), cfg.num_blocks, cfg.block_size),
      host_alloc_(std::max(cfg.num_swap_blocks, 1)) {  // (an allocator needs one block)
  PA_REQUIRE(cfg.max_num_seqs > 0 && cfg.max_tokens_per_step > 0 && cfg.max_seq_len > 0,
             "max_num_seqs, max_tokens_per_step and max_seq_len must be positive");
  PA_REQUIRE(cfg.num_swap_blocks >= 0, "num_swap_blocks must not be negative");
  PA_REQUIRE(!cfg.dense || (cfg.max_seq_len + cfg.block_size - 1) / cfg.block_size <= cfg.num_blocks,
             "the dense policy reserves max_seq_len " << cfg.max_seq_len << " tokens per request, more than the "
                                                      << cfg.num_blocks * cfg.block_size << " slots of the pool");
  const size_t per_block = size_t(kv_.shape.num_kv_heads) * kv_.shape.head_size * kv_.shape.block_size;
  for (int l = 0; l < model.config().num_layers; ++l) {
    host_k_.emplace_back(size_t(cfg.num_swap_blocks) * per_block);
    host_v_.emplace_back(size_t(cfg.num_swap_blocks) * per_block);
  }
}

Engine::~Engine() = default;

void Engine::add_request(const EngineRequest& r) {
  const int vocab = model_.config().vocab_size, bs = cfg_.block_size;
  PA_REQUIRE(seqs_.count(r.id) == 0, "request " << r.id << " was already added");
  PA_REQUIRE(!r.prompt.empty(), "request " << r.id << " has an empty prompt");
  PA_REQUIRE(r.max_new_tokens >= 1, "request " << r.id << " asks for " << r.max_new_tokens << " new tokens");
  PA_REQUIRE(r.arrival_step >= 0, "request " << r.id << " arrives at a negative step");
  for (int t : r.prompt)
    PA_REQUIRE(t >= 0 && t < vocab, "request " << r.id << ": token " << t << " is outside the vocabulary of " << vocab);
  const int total = int(r.prompt.size()) + r.max_new_tokens;
  PA_REQUIRE(total <= cfg_.max_seq_len, "request " << r.id << ": prompt + output = " << total
                                                   << " tokens is beyond max_seq_len " << cfg_.max_seq_len);
  PA_REQUIRE((total + bs - 1) / bs <= cfg_.num_blocks,
             "request " << r.id << " needs " << (total + bs - 1) / bs << " blocks, the whole pool has "
                        << cfg_.num_blocks);
  auto seq = std::make_unique<Seq>();
  seq->id = r.id;
  seq->tokens = r.prompt;
  seq->prompt_len = int(r.prompt.size());
  seq->max_new_tokens = r.max_new_tokens;
  seq->arrival_step = r.arrival_step;
  auto at = std::upper_bound(pending_.begin(), pending_.end(), r.arrival_step,
                             [](int step, const Seq* s) { return step < s->arrival_step; });
  pending_.insert(at, seq.get());
  stats_.prompt_tokens += seq->prompt_len;
  seqs_.emplace(r.id, std::move(seq));
}

bool Engine::done() const {
  return pending_.empty() && waiting_.empty() && swapped_.empty() && running_.empty();
}

void Engine::run(const std::function<void(const StepReport&)>& on_step) {
  while (!done()) {
    const StepReport rep = step();
    if (on_step) on_step(rep);
  }
}

// ANCHOR: preempt
void Engine::preempt(Seq& victim) {
  PA_REQUIRE(!running_.empty() && running_.back() == &victim,
             "preempt: only the newest running sequence can be the victim");
  running_.pop_back();
  ++stats_.preemptions;
  const std::vector<int>& gpu = blocks_.block_list(victim.id);
  // TODO(ch08): the victim (already off running_, its preemption counted) gives all its GPU
  //   KV blocks back and waits to be resumed. Swap (cfg_.preemption == Preemption::swap,
  //   cfg_.num_swap_blocks > 0, and a free host block for each of its blocks): its KV data
  //   goes to host blocks, kept in victim.host_blocks in order; state swapped, at the back of
  //   swapped_, ++stats_.swap_outs, num_computed unchanged. Otherwise recompute: num_computed
  //   = 0, state waiting, at the FRONT of waiting_, ++stats_.recomputes. Blocks shared with
  //   other sequences only lose one owner.
  (void)gpu;
  PA_TODO("ch08");
}
// ANCHOR_END: preempt

void Engine::swap_in(Seq& seq) {
  blocks_.add_sequence(seq.id, {});
  blocks_.append_slots(seq.id, seq.num_computed);  // fresh blocks, as many as it had
  const std::vector<int>& gpu = blocks_.block_list(seq.id);
  PA_REQUIRE(gpu.size() == seq.host_blocks.size(), "swap_in: block counts differ");
  std::vector<ch07::BlockCopy> copies;
  for (size_t i = 0; i < gpu.size(); ++i) copies.push_back({seq.host_blocks[i], gpu[i]});
  std::vector<float*> hk, hv;
  for (auto& h : host_k_) hk.push_back(h.data());
  for (auto& h : host_v_) hv.push_back(h.data());
  swap_blocks(hk, hv, kv_.k_pools(), kv_.v_pools(), kv_.shape, host_alloc_.num_blocks(),
              cfg_.num_blocks, copies, cudaMemcpyHostToDevice);
  for (int h : seq.host_blocks) host_alloc_.free(h);
  seq.host_blocks.clear();
  blocks_.commit(seq.id, seq.tokens, seq.num_computed);  // its full blocks are cacheable again
  seq.state = Seq::running;
  running_.push_back(&seq);
  ++stats_.swap_ins;
}

void Engine::finish(Seq& seq) {
  blocks_.release(seq.id);  // at once: the next step can use these blocks
  seq.state = Seq::finished;
  ++stats_.finished;
}

// ANCHOR: step
StepReport Engine::step() {
  const int bs = cfg_.block_size;
  StepReport rep;
  rep.step = now_;
  while (!pending_.empty() && pending_.front()->arrival_step <= now_) {
    pending_.front()->state = Seq::waiting;
    waiting_.push_back(pending_.front());
    pending_.erase(pending_.begin());
  }
  struct Scheduled {
    Seq* seq;
    int n;
    std::vector<int64_t> slots;
  };
  std::vector<Scheduled> sched;
  int budget = cfg_.max_tokens_per_step;
  bool preempted = false;

  // 1. Running sequences, oldest first: the next token, or the next chunk of a prompt.
  //    No room? The newest running sequence is preempted (possibly this one itself).
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Seq* s = running_[i];
    const int n = std::min(int(s->tokens.size()) - s->num_computed, budget);
    while (blocks_.blocks_needed(s->id, n) > blocks_.num_free()) {
      Seq* victim = running_.back();
      preempt(*victim);
      preempted = true;
      if (victim == s) break;
    }
    if (s->state != Seq::running) break;  // it was the newest: nothing after it runs
    sched.push_back({s, n, blocks_.append_slots(s->id, n)});
    budget -= n;
  }
  // 2. Swapped sequences come back first (FIFO), when their blocks and the next token fit.
  while (!preempted && !swapped_.empty() && int(running_.size()) < cfg_.max_num_seqs && budget > 0) {
    Seq* s = swapped_.front();
    if ((s->num_computed + bs) / bs > blocks_.num_free()) break;  // its blocks + the next token
    swapped_.pop_front();
    swap_in(*s);
    const int n = std::min(int(s->tokens.size()) - s->num_computed, budget);
    sched.push_back({s, n, blocks_.append_slots(s->id, n)});
    budget -= n;
  }
  // 3. New (and recompute-preempted) requests, FIFO, admitted by free blocks: the prompt
  //    plus one token must fit, minus the blocks a prefix-cache hit provides.
  while (!preempted && swapped_.empty() && !waiting_.empty() &&
         int(running_.size()) < cfg_.max_num_seqs && budget > 0) {
    Seq* s = waiting_.front();
    const int len = int(s->tokens.size());
    // At most len - 1 tokens from the cache: the last token must be computed, or there
    // would be no logits to choose the next token from (a full hit).
    const std::vector<int> hit = blocks_.match_prefix(s->tokens, len - 1);
    int evictable_hits = 0;
    for (int b : hit) evictable_hits += blocks_.refcount(b) == 0 ? 1 : 0;
    const int want = cfg_.dense ? (cfg_.max_seq_len + bs - 1) / bs : (len + 1 + bs - 1) / bs;
    if (want - int(hit.size()) + evictable_hits > blocks_.num_free()) break;
    waiting_.pop_front();
    blocks_.add_sequence(s->id, hit);
    if (cfg_.dense) blocks_.reserve(s->id, cfg_.max_seq_len);
    s->num_computed = int(hit.size()) * bs;
    stats_.cached_prompt_tokens += s->num_computed;
    s->state = Seq::running;
    running_.push_back(s);
    const int n = std::min(len - s->num_computed, budget);
    sched.push_back({s, n, blocks_.append_slots(s->id, n)});
    budget -= n;
  }

  rep.running = int(running_.size());
  rep.waiting = int(waiting_.size() + pending_.size());
  rep.swapped = int(swapped_.size());
  for (Seq* s : running_) {
    rep.allocated_slots += int64_t(blocks_.block_list(s->id).size()) * bs;
    rep.used_slots += blocks_.length(s->id);
  }
  stats_.peak_running = std::max(stats_.peak_running, rep.running);
  stats_.sum_allocated_slots += rep.allocated_slots;
  stats_.sum_used_slots += rep.used_slots;
  stats_.peak_wasted_slots = std::max(stats_.peak_wasted_slots, rep.allocated_slots - rep.used_slots);
  ++now_;
  ++stats_.steps;
  if (sched.empty()) {
    // Nothing ran: fine while requests are still to arrive, a bug otherwise.
    PA_REQUIRE(!pending_.empty() || (waiting_.empty() && swapped_.empty()),
               "scheduler stuck at step " << rep.step << ": " << waiting_.size() << " waiting and "
                                          << swapped_.size() << " swapped requests, none admitted");
    return rep;
  }

  // The step's batch: decode tokens first (chapter 5's kernel), then prefill chunks.
  std::stable_partition(sched.begin(), sched.end(), [](const Scheduled& e) {
    return e.n == 1 && e.seq->num_computed > 0 && e.seq->num_computed + 1 == int(e.seq->tokens.size());
  });
  StepInput in;
  for (const Scheduled& e : sched)
    in.max_blocks_per_seq = std::max(in.max_blocks_per_seq, int(blocks_.block_list(e.seq->id).size()));
  in.prefill_query_start_loc.push_back(0);
  std::vector<int> logit_seq;  // index into sched of each logit row
  for (size_t i = 0; i < sched.size(); ++i) {
    const Scheduled& e = sched[i];
    Seq& s = *e.seq;
    const bool is_decode = e.n == 1 && s.num_computed > 0 && s.num_computed + 1 == int(s.tokens.size());
    std::vector<int> row = blocks_.block_list(s.id);
    row.resize(size_t(in.max_blocks_per_seq), ch03::kPaddingBlock);
    for (int j = 0; j < e.n; ++j) {
      in.tokens.push_back(s.tokens[size_t(s.num_computed + j)]);
      in.positions.push_back(s.num_computed + j);
      in.slot_mapping.push_back(e.slots[size_t(j)]);
    }
    if (is_decode) {
      ++in.num_decode;
      in.decode_block_table.insert(in.decode_block_table.end(), row.begin(), row.end());
      in.decode_context_lens.push_back(s.num_computed + 1);
    } else {
      ++in.num_prefill;
      in.prefill_block_table.insert(in.prefill_block_table.end(), row.begin(), row.end());
      in.prefill_context_lens.push_back(s.num_computed + e.n);
      in.prefill_query_start_loc.push_back(in.prefill_query_start_loc.back() + e.n);
    }
    if (s.num_computed + e.n == int(s.tokens.size())) {
      in.logit_rows.push_back(int(in.tokens.size()) - 1);
      logit_seq.push_back(int(i));
    }
  }
  rep.num_tokens = int(in.tokens.size());
  const std::vector<float> logits = model_.forward_paged(in, kv_);

  const int vocab = model_.config().vocab_size;
  for (const Scheduled& e : sched) {
    e.seq->num_computed += e.n;
    stats_.computed_tokens += e.n;
    blocks_.commit(e.seq->id, e.seq->tokens, e.seq->num_computed);
  }
  for (size_t r = 0; r < logit_seq.size(); ++r) {
    Seq& s = *sched[size_t(logit_seq[r])].seq;
    const float* row = logits.data() + int64_t(r) * vocab;
    const int next = argmax(row, vocab);
    s.tokens.push_back(next);
    ++s.generated;
    ++stats_.generated_tokens;
    outputs_[s.id].push_back(next);
    if (cfg_.record_logits) logits_[s.id].emplace_back(row, row + vocab);
    if (s.generated == s.max_new_tokens) {
      finish(s);
      ++rep.finished;
    }
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const Seq* s) { return s->state == Seq::finished; }),
                 running_.end());
  return rep;
}
// ANCHOR_END: step

std::vector<EngineRequest> trace_workload(const std::vector<Request>& trace, int shrink,
                                          int vocab_size, int num_prefixes, int prefix_len,
                                          int per_step, uint64_t seed) {
  PA_REQUIRE(shrink >= 1 && per_step >= 1 && vocab_size > 0, "trace_workload: bad arguments");
  SplitMix64 rng(seed);
  std::vector<std::vector<int>> prefixes(size_t(std::max(num_prefixes, 0)));
  for (auto& p : prefixes)
    for (int i = 0; i < prefix_len; ++i) p.push_back(int(rng.uniform_int(0, vocab_size - 1)));
  std::vector<EngineRequest> out;
  for (size_t i = 0; i < trace.size(); ++i) {
    EngineRequest r;
    r.id = int(i);
    const int prompt_len = std::max<int>(1, int(trace[i].prompt_len / shrink));
    r.max_new_tokens = std::max<int>(1, int(trace[i].output_len / shrink));
    if (!prefixes.empty()) {
      const auto& p = prefixes[i % prefixes.size()];
      r.prompt.assign(p.begin(), p.begin() + std::min<int>(prompt_len, int(p.size())));
    }
    while (int(r.prompt.size()) < prompt_len) r.prompt.push_back(int(rng.uniform_int(0, vocab_size - 1)));
    r.arrival_step = int(i) / per_step;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace pa::ch08
