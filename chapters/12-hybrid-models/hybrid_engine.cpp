// Chapter 12 in chapter 8's engine (given code): a serving loop whose KV blocks come from
// the hybrid manager, one block table and one slot_mapping per layer group. It is chapter
// 8's scheduler cut down to greedy requests of one sequence: continuous batching, chunked
// prefill, preemption of the newest request when the pool runs short, prefix caching.
#include <algorithm>

#include "pa/ch12_engine.h"

namespace pa::ch12 {

std::vector<LayerGroup> model_layer_groups(const ch08::ModelConfig& c, bool free_windows) {
  std::vector<LayerGroup> out;
  for (int w : c.group_windows()) out.push_back(w > 0 && free_windows ? sliding_group(w) : full_group());
  return out;
}

// ANCHOR: predicted_blocks_impl
int predicted_blocks(const std::vector<int>& group_windows, bool free_windows, int block_size, int computed,
                     int new_tokens) {
  const int end = (computed + new_tokens + block_size - 1) / block_size;  // blocks up to the last new token
  int held = 0;
  for (int w : group_windows) {
    const int dead = (w > 0 && free_windows) ? std::max(0, computed - w + 1) / block_size : 0;
    held += end - std::min(dead, end);
  }
  return held;
}
// ANCHOR_END: predicted_blocks_impl

int peak_blocks(const std::vector<int>& group_windows, bool free_windows, int block_size, int last) {
  int most = 0;
  for (int c = 0; c <= last; ++c) most = std::max(most, predicted_blocks(group_windows, free_windows, block_size, c, 1));
  return most;
}

HybridEngine::HybridEngine(ch08::TinyModel& model, const HybridEngineConfig& cfg)
    : model_(model),
      cfg_(cfg),
      blocks_(new HybridBlockManager(cfg.num_blocks, cfg.block_size, model_layer_groups(model.config(), cfg.free_windows),
                                          cfg.prefix_caching)),
      kv_(model.config(), cfg.num_blocks, cfg.block_size) {
  PA_REQUIRE(cfg.max_num_seqs > 0 && cfg.max_tokens_per_step > 0 && cfg.max_seq_len > 0,
             "max_num_seqs, max_tokens_per_step and max_seq_len must be positive");
  PA_REQUIRE(!model.config().mla(), "HybridEngine: an MLA model runs in chapter 8's Engine");
  PA_REQUIRE(!model.config().dsa, "HybridEngine: a DSA model's indexer pools move with chapter 8's Engine; serve it there");
  PA_REQUIRE(cfg.num_swap_blocks >= 0, "num_swap_blocks must not be negative");
  host_alloc_.reset(new ch02::BlockAllocator(std::max(cfg.num_swap_blocks, 1)));
  for (size_t i = 0; i < kv_.k_pools().size(); ++i) {
    host_k_.emplace_back(size_t(cfg.num_swap_blocks) * size_t(kv_.block_bytes()));
    host_v_.emplace_back(size_t(cfg.num_swap_blocks) * size_t(kv_.block_bytes()));
  }
}

std::vector<void*> HybridEngine::host_pools(std::vector<std::vector<uint8_t>>& host) {
  std::vector<void*> out;
  for (auto& h : host) out.push_back(h.data());
  return out;
}

void HybridEngine::add_request(const ch08::EngineRequest& r) {
  const int vocab = model_.config().vocab_size;
  PA_REQUIRE(reqs_.count(r.id) == 0, "request " << r.id << " was already added");
  PA_REQUIRE(!r.prompt.empty(), "request " << r.id << " has an empty prompt");
  PA_REQUIRE(r.max_new_tokens >= 1, "request " << r.id << " asks for " << r.max_new_tokens << " new tokens");
  for (int t : r.prompt)
    PA_REQUIRE(t >= 0 && t < vocab, "request " << r.id << ": token " << t << " is outside the vocabulary of " << vocab);
  PA_REQUIRE(r.sampling.temperature == 0.f && r.sampling.n == 1 && r.sampling.beam_width == 0,
             "request " << r.id << ": the hybrid engine decodes greedily, one sequence per request");
  // (In 64 bits: max_new_tokens near INT_MAX must not wrap to a small total.)
  const int64_t total = int64_t(r.prompt.size()) + int64_t(r.max_new_tokens);
  PA_REQUIRE(total <= cfg_.max_seq_len,
             "request " << r.id << ": prompt + output = " << r.prompt.size() << " + " << r.max_new_tokens << " = "
                        << total << " tokens is beyond max_seq_len " << cfg_.max_seq_len);
  // The pool must hold its peak step, one token a step (the least any schedule needs; the
  // scheduler shortens a chunk that does not fit): a request above it could never be served.
  const int last = int(total) - 2;  // the last position it computes
  const int most = peak_blocks(model_.config().group_windows(), cfg_.free_windows, cfg_.block_size, last);
  PA_REQUIRE(most <= blocks_->num_blocks() - 1,
             "request " << r.id << " needs up to " << most << " blocks (its peak step, one token a step: prompt + output = "
                        << total << " tokens), the pool has " << blocks_->num_blocks() - 1
                        << " (num_blocks " << blocks_->num_blocks() << ", block 0 is the null block)");
  auto q = std::make_unique<Req>();
  q->id = r.id;
  q->prompt_len = int(r.prompt.size());
  q->max_new_tokens = r.max_new_tokens;
  q->arrival_step = r.arrival_step;
  q->tokens = r.prompt;
  auto at = std::upper_bound(pending_.begin(), pending_.end(), r.arrival_step,
                             [](int step, const Req* x) { return step < x->arrival_step; });
  pending_.insert(at, q.get());
  reqs_.emplace(r.id, std::move(q));
}

int HybridEngine::preemptions_of(int id) const {
  auto it = reqs_.find(id);
  PA_REQUIRE(it != reqs_.end(), "preemptions_of: unknown request " << id);
  return it->second->preemptions;
}

bool HybridEngine::done() const {
  return pending_.empty() && waiting_.empty() && swapped_.empty() && running_.empty();
}

void HybridEngine::run(const std::function<void(const HybridStepReport&)>& on_step) {
  while (!done()) {
    const HybridStepReport rep = step();
    if (on_step) on_step(rep);
  }
}

// ANCHOR: hybrid_preempt
// Swap: every group's live blocks (the non-null entries) go to host blocks, whole blocks of
// every pool, and the sequence keeps its computed tokens. Recompute: its blocks go back and
// its tokens (prompt and generated so far) are computed again as one prompt.
void HybridEngine::preempt(Req& victim) {
  PA_REQUIRE(!running_.empty() && running_.back() == &victim, "preempt: only the newest running request");
  running_.pop_back();
  ++stats_.preemptions;
  ++victim.preemptions;
  int live = 0;
  for (int g = 0; g < blocks_->num_groups(); ++g)
    for (int b : blocks_->block_list(g, victim.seq)) live += b != kNullBlock;
  if (cfg_.preemption == ch08::Preemption::swap && cfg_.num_swap_blocks > 0 && host_alloc_->num_free() >= live) {
    std::vector<ch07::BlockCopy> copies;
    victim.host_blocks.assign(size_t(blocks_->num_groups()), {});
    for (int g = 0; g < blocks_->num_groups(); ++g)
      for (int b : blocks_->block_list(g, victim.seq)) {
        const int h = b == kNullBlock ? -1 : host_alloc_->allocate();
        if (h >= 0) copies.push_back({b, h});
        victim.host_blocks[size_t(g)].push_back(h);
      }
    ch08::swap_blocks(kv_.k_pools(), kv_.v_pools(), host_pools(host_k_), host_pools(host_v_), kv_.shape,
                      kv_.elem_bytes(), cfg_.num_blocks, host_alloc_->num_blocks(), copies, cudaMemcpyDeviceToHost);
    blocks_->release(victim.seq);
    victim.seq = -1;
    swapped_.push_back(&victim);
    ++stats_.swap_outs;
    return;
  }
  blocks_->release(victim.seq);
  victim.seq = -1;
  victim.num_computed = 0;
  waiting_.push_front(&victim);
  ++stats_.recomputes;
}

// The manager's restore() gives each group fresh blocks for the entries a query from the
// computed length on can see (null before them): the entries swapped out, no more.
void HybridEngine::swap_in(Req& r) {
  r.seq = next_seq_++;
  blocks_->restore(r.seq, r.num_computed);
  std::vector<ch07::BlockCopy> copies;
  for (int g = 0; g < blocks_->num_groups(); ++g) {
    const std::vector<int>& gpu = blocks_->block_list(g, r.seq);
    const std::vector<int>& host = r.host_blocks[size_t(g)];
    PA_REQUIRE(gpu.size() == host.size(), "swap_in: group " << g << " has " << gpu.size() << " entries, "
                                                              << host.size() << " were swapped out");
    for (size_t j = 0; j < gpu.size(); ++j) {
      PA_REQUIRE((gpu[j] == kNullBlock) == (host[j] < 0),
                 "swap_in: group " << g << " entry " << j << " is live on one side only");
      if (host[j] >= 0) copies.push_back({host[j], gpu[j]});
    }
  }
  ch08::swap_blocks(host_pools(host_k_), host_pools(host_v_), kv_.k_pools(), kv_.v_pools(), kv_.shape,
                    kv_.elem_bytes(), host_alloc_->num_blocks(), cfg_.num_blocks, copies, cudaMemcpyHostToDevice);
  for (const ch07::BlockCopy& c : copies) host_alloc_->free(c.src);
  r.host_blocks.clear();
  running_.push_back(&r);
  ++stats_.swap_ins;
}
// ANCHOR_END: hybrid_preempt

// ANCHOR: hybrid_step
HybridStepReport HybridEngine::step() {
  HybridStepReport rep;
  rep.step = now_;
  while (!pending_.empty() && pending_.front()->arrival_step <= now_) {
    waiting_.push_back(pending_.front());
    pending_.erase(pending_.begin());
  }
  struct Scheduled {
    Req* r;
    int n;
  };
  std::vector<Scheduled> sched;
  int budget = cfg_.max_tokens_per_step;
  // The blocks the step takes so far plus n tokens of r: the manager's step_blocks (exercise
  // 2), which counts what each group's window frees before it appends. Every decision below
  // rests on it: how long a running request's chunk is, when the newest is preempted, and
  // what is left of the free blocks for a swap-in or an admission.
  auto takes = [&](const Req* r, int n) {
    std::vector<int> ids, counts;
    for (const Scheduled& e : sched) {
      ids.push_back(e.r->seq);
      counts.push_back(e.n);
    }
    if (r) {
      ids.push_back(r->seq);
      counts.push_back(n);
    }
    return blocks_->step_blocks(ids, counts);
  };
  auto fits = [&](const Req* r, int n) { return takes(r, n) <= blocks_->num_free(); };
  // Schedules the longest chunk of r's uncomputed tokens that the budget and the free
  // blocks allow (none when not even one token fits); returns its length.
  auto longest_fit = [&](Req* r) -> int {
    int n = std::min(int(r->tokens.size()) - r->num_computed, budget), lo = 0;
    if (!fits(r, n)) {
      while (n - lo > 1) {
        const int mid = (lo + n) / 2;
        (fits(r, mid) ? lo : n) = mid;
      }
      n = lo;
    }
    if (n == 0) return 0;
    sched.push_back({r, n});
    budget -= n;
    return n;
  };
  // 1. Running requests, oldest first, each its longest chunk that fits: a shorter chunk
  //    before anything is preempted. Not even one token fits: the newest is preempted
  //    (maybe this one). The oldest alone always fits one token (add_request's bound).
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Req* r = running_[i];
    // A running request has its next token to compute (a step ends with a token chosen).
    PA_REQUIRE(int(r->tokens.size()) > r->num_computed,
               "HybridEngine: request " << r->id << " is running with nothing to compute (" << r->num_computed
                                        << " of its " << r->tokens.size() << " tokens computed)");
    bool gone = false;
    while (!fits(r, 1)) {
      Req* victim = running_.back();
      preempt(*victim);
      ++rep.preempted;
      if (victim == r) {
        gone = true;
        break;
      }
    }
    if (gone) break;
    longest_fit(r);
  }
  // 2. Swapped requests come back first (FIFO), when their live blocks and the block of
  //    their next token fit beside what the step takes.
  const std::vector<int> windows = model_.config().group_windows();
  int admitted = 0;
  while (rep.preempted == 0 && !swapped_.empty() && int(running_.size()) < cfg_.max_num_seqs && budget > 0) {
    Req* r = swapped_.front();
    const int need = predicted_blocks(windows, cfg_.free_windows, cfg_.block_size, r->num_computed, 1);
    if (need > blocks_->num_free() - takes(nullptr, 0)) break;
    swapped_.pop_front();
    swap_in(*r);
    ++admitted;
    rep.idle_admissions += longest_fit(r) == 0;
  }
  // 3. Waiting requests, FIFO, while the footprint of the prompt and its next token fits
  //    beside what the step takes (the peak of one-token steps through them: never more
  //    than add_request's bound); the first chunk is as long as the free blocks allow.
  //    With prefix caching a request starts after its cached prefix (its last token is
  //    always computed: its logits choose the next token).
  while (rep.preempted == 0 && swapped_.empty() && !waiting_.empty() && int(running_.size()) < cfg_.max_num_seqs &&
         budget > 0) {
    Req* r = waiting_.front();
    const int last = std::min(int(r->tokens.size()), r->prompt_len + r->max_new_tokens - 2);
    if (peak_blocks(windows, cfg_.free_windows, cfg_.block_size, last) > blocks_->num_free() - takes(nullptr, 0))
      break;
    waiting_.pop_front();
    ++admitted;
    r->seq = next_seq_++;
    const int hit = blocks_->match_prefix(r->tokens, int(r->tokens.size()) - 1);  // 0 when caching is off
    blocks_->add_sequence(r->seq, r->tokens, hit);
    r->num_computed = hit;
    stats_.prefix_hit_tokens += hit;
    running_.push_back(r);
    rep.idle_admissions += longest_fit(r) == 0;
  }
  rep.waiting = int(waiting_.size() + pending_.size() + swapped_.size());
  rep.running = int(running_.size());
  stats_.peak_running = std::max(stats_.peak_running, rep.running);
  ++now_;
  ++stats_.steps;
  if (sched.empty()) {
    rep.blocks_held = blocks_->num_held();
    // Nothing ran: fine while requests are still to arrive, or after a preemption or an
    // admission (the next step schedules them); a bug otherwise.
    PA_REQUIRE(!pending_.empty() || rep.preempted > 0 || admitted > 0 || (waiting_.empty() && swapped_.empty()),
               "scheduler stuck at step " << rep.step << ": " << waiting_.size() << " waiting and " << swapped_.size()
                                          << " swapped, none admitted");
    return rep;
  }

  // The step's metadata, one batch per layer group: the same tokens, each group its own
  // block tables (null entries where a window gave a block back) and slots.
  const int G = blocks_->num_groups();
  ch08::StepInput in;
  in.groups.resize(size_t(G));
  std::vector<int> ids;
  std::vector<Req*> logit_req;
  for (ch03::BatchMetadata& b : in.groups) b.query_start_loc.push_back(0);
  for (const Scheduled& e : sched) {
    Req& r = *e.r;
    const std::vector<std::vector<int64_t>> slots = blocks_->append_slots(r.seq, e.n);
    ids.push_back(r.seq);
    for (int g = 0; g < G; ++g) {
      ch03::BatchMetadata& b = in.groups[size_t(g)];
      b.slot_mapping.insert(b.slot_mapping.end(), slots[size_t(g)].begin(), slots[size_t(g)].end());
      b.context_lens.push_back(r.num_computed + e.n);
      b.query_start_loc.push_back(b.query_start_loc.back() + e.n);
    }
    for (int j = 0; j < e.n; ++j) {
      in.tokens.push_back(r.tokens[size_t(r.num_computed + j)]);
      in.positions.push_back(r.num_computed + j);
    }
    if (r.num_computed + e.n == int(r.tokens.size())) {
      in.logit_rows.push_back(int(in.tokens.size()) - 1);
      logit_req.push_back(&r);
    }
  }
  for (int g = 0; g < G; ++g) {
    PA_REQUIRE(blocks_->take_copies(g).empty(), "HybridEngine: a copy-on-write copy without a fork");
    HybridBlockManager::GroupTable t = blocks_->block_table(g, ids);
    ch03::BatchMetadata& b = in.groups[size_t(g)];
    b.num_seqs = int(ids.size());
    b.max_blocks_per_seq = t.max_blocks_per_seq;
    b.block_table = std::move(t.block_table);
  }
  in.batch = in.groups[0];
  rep.num_tokens = int(in.tokens.size());
  rep.blocks_held = blocks_->num_held();
  stats_.peak_blocks_held = std::max(stats_.peak_blocks_held, rep.blocks_held);
  for (const Req* r : running_) {
    int n = 0;
    for (const Scheduled& e : sched) n = e.r == r ? e.n : n;
    rep.seqs.push_back({r->num_computed, n});
  }
  const std::vector<float> logits = model_.forward_paged(in, kv_);

  // Computed: full blocks join the prefix cache (before a window gives them back, so that
  // they stay cached, evictable); each window gives back what no later query sees; a
  // finished prompt or token chooses the next token (greedy); a request that is done
  // releases every group's blocks.
  const int vocab = model_.config().vocab_size;
  for (const Scheduled& e : sched) {
    e.r->num_computed += e.n;
    stats_.computed_tokens += e.n;
    blocks_->commit(e.r->seq, e.r->tokens, e.r->num_computed);
    blocks_->free_dead_blocks(e.r->seq);
  }
  for (size_t k = 0; k < logit_req.size(); ++k) {
    Req& r = *logit_req[k];
    const float* row = logits.data() + int64_t(k) * vocab;
    r.tokens.push_back(ch08::argmax(row, vocab));
    ++stats_.generated_tokens;
    if (cfg_.record_logits) logits_[r.id].emplace_back(row, row + vocab);
    if (int(r.tokens.size()) - r.prompt_len == r.max_new_tokens) {
      blocks_->release(r.seq);
      outputs_[r.id].assign(r.tokens.begin() + r.prompt_len, r.tokens.end());
      running_.erase(std::find(running_.begin(), running_.end(), &r));
      ++rep.finished;
      ++stats_.finished;
    }
  }
  return rep;
}
// ANCHOR_END: hybrid_step

}  // namespace pa::ch12
