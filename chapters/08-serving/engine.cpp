// Your exercise file. (Generated from solutions/08-serving/engine.cpp; instructors regenerate with tools/make_skeletons.py.)
// Chapter 8, exercise 3 of 4: the scheduler, with continuous batching, preemption and
// the sequences that fork: parallel samples and beams.
#include <algorithm>
#include <set>

#include "pa/ch08_engine.h"

namespace pa::ch08 {

// One sequence: a request's prompt, then the tokens of one sample or one beam. Its id is
// the block manager's.
struct Engine::Seq {
  int id = 0;
  Group* group = nullptr;
  int sample = 0;             // which sample of the request (it seeds the draws)
  std::vector<int> tokens;    // prompt, then every generated token
  int num_computed = 0;       // tokens whose K/V are in the cache
  double logprob = 0;         // summed log-probability of the generated tokens
  std::vector<float> logits;  // beam search: this step's row, kept until every beam has one
  std::vector<int> host_blocks;  // where its K/V wait while swapped out (shared blocks: once)
  bool parked = false;  // recomputing: waits, holding no block, to share its leader's prefix
  int generated() const;
};

// One request. Its sequences are admitted, preempted and swapped together, so that the
// beams of a search always advance in the same step.
struct Engine::Group {
  enum State { pending, waiting, running, swapped, finished };
  int id = 0;
  int prompt_len = 0, max_new_tokens = 0, arrival_step = 0;
  SamplingParams sampling;
  State state = pending;
  bool forked = false;            // the samples or beams have been made from the prompt
  int rejoin_tokens = 0;          // recomputing: the prefix its parked sequences will share
  int preemptions = 0;            // times preempted (swapped out or dropped for recompute)
  std::vector<Seq*> seqs;         // live sequences
  std::vector<std::pair<int, Completion>> done;  // (sample, completion) of finished samples
  bool beam() const { return sampling.beam_width > 0; }
  int width() const { return beam() ? sampling.beam_width : sampling.n; }
};

int Engine::Seq::generated() const { return int(tokens.size()) - group->prompt_len; }

struct Engine::Scheduled {
  Seq* seq;
  int n;  // new tokens this step
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
  const size_t block_bytes =
      size_t(kv_.shape.num_kv_heads) * kv_.shape.head_size * kv_.shape.block_size * size_t(kv_.elem_bytes());
  for (int l = 0; l < model.config().num_layers; ++l) {
    host_k_.emplace_back(size_t(cfg.num_swap_blocks) * block_bytes);
    if (!kv_.latent) host_v_.emplace_back(size_t(cfg.num_swap_blocks) * block_bytes);  // MLA: no V
  }
  for (size_t l = 0; l < kv_.indexer_pools.size(); ++l)  // DSA: the indexer's bytes swap too
    host_index_.emplace_back(size_t(cfg.num_swap_blocks) * size_t(kv_.index_block_bytes()));
}

Engine::~Engine() = default;

void Engine::add_request(const EngineRequest& r) {
  const int vocab = model_.config().vocab_size, bs = cfg_.block_size;
  PA_REQUIRE(groups_.count(r.id) == 0, "request " << r.id << " was already added");
  PA_REQUIRE(!r.prompt.empty(), "request " << r.id << " has an empty prompt");
  PA_REQUIRE(r.max_new_tokens >= 1, "request " << r.id << " asks for " << r.max_new_tokens << " new tokens");
  PA_REQUIRE(r.arrival_step >= 0, "request " << r.id << " arrives at a negative step");
  for (int t : r.prompt)
    PA_REQUIRE(t >= 0 && t < vocab, "request " << r.id << ": token " << t << " is outside the vocabulary of " << vocab);
  check_sampling(r.sampling, vocab);
  // (The width below reads beam_width <= 0 as "no beams": a negative one must not pass.)
  PA_REQUIRE(r.sampling.beam_width >= 0, "request " << r.id << ": beam_width " << r.sampling.beam_width << " is negative");
  // (In 64 bits: max_new_tokens near INT_MAX must not wrap to a small, negative total.)
  const int64_t total64 = int64_t(r.prompt.size()) + int64_t(r.max_new_tokens);
  PA_REQUIRE(total64 <= cfg_.max_seq_len, "request " << r.id << ": prompt + output = " << r.prompt.size() << " + "
                                                     << r.max_new_tokens << " = " << total64
                                                     << " tokens is beyond max_seq_len " << cfg_.max_seq_len);
  const int total = int(total64);
  const int width = r.sampling.beam_width > 0 ? r.sampling.beam_width : r.sampling.n;
  PA_REQUIRE(width == 1 || !cfg_.dense,
             "request " << r.id << ": the dense policy reserves whole sequences and cannot fork (n or beam_width "
                        << width << ")");
  PA_REQUIRE(width <= cfg_.max_num_seqs, "request " << r.id << ": " << width << " sequences (n or beam_width) are more than max_num_seqs "
                                                    << cfg_.max_num_seqs);
  // Its sequences share the prompt's full blocks; each may own the rest of its blocks.
  const int shared = int(r.prompt.size()) / bs, own = (total + bs - 1) / bs - shared;
  PA_REQUIRE(shared + width * own <= cfg_.num_blocks,
             "request " << r.id << " needs up to " << shared + width * own << " blocks (" << shared
                        << " shared prompt blocks + " << width << " sequences x " << own << "), the whole pool has "
                        << cfg_.num_blocks);
  auto g = std::make_unique<Group>();
  g->id = r.id;
  g->prompt_len = int(r.prompt.size());
  g->max_new_tokens = r.max_new_tokens;
  g->arrival_step = r.arrival_step;
  g->sampling = r.sampling;
  auto seq = std::make_unique<Seq>();
  seq->id = next_seq_id_++;
  seq->group = g.get();
  seq->tokens = r.prompt;
  g->seqs.push_back(seq.get());
  seqs_.emplace(seq->id, std::move(seq));
  auto at = std::upper_bound(pending_.begin(), pending_.end(), r.arrival_step,
                             [](int step, const Group* x) { return step < x->arrival_step; });
  pending_.insert(at, g.get());
  stats_.prompt_tokens += g->prompt_len;
  groups_.emplace(r.id, std::move(g));
}

int Engine::preemptions_of(int id) const {
  auto it = groups_.find(id);
  PA_REQUIRE(it != groups_.end(), "preemptions_of: unknown request " << id);
  return it->second->preemptions;
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

std::vector<void*> Engine::host_pools(std::vector<std::vector<uint8_t>>& host) {
  std::vector<void*> out;
  for (auto& h : host) out.push_back(h.data());
  return out;
}

// Chapter 7's copy_blocks, on the pools' type: every layer's K and V, one launch. A copied
// block takes its indexer bytes (DSA) along.
void Engine::copy_blocks(const std::vector<ch07::BlockCopy>& copies) {
  copy_pool_blocks(kv_.index_pools(), kv_.index_pools(), kv_.index_block_bytes(), cfg_.num_blocks, cfg_.num_blocks,
                   copies, cudaMemcpyDeviceToDevice);
  if (kv_.latent) {  // MLA: whole blocks of every layer's latent pool
    const size_t bytes = size_t(kv_.block_bytes());
    for (void* pool : kv_.k_pools())
      for (const ch07::BlockCopy& c : copies) {
        uint8_t* base = static_cast<uint8_t*>(pool);
        PA_CUDA_CHECK(cudaMemcpy(base + size_t(c.dst) * bytes, base + size_t(c.src) * bytes, bytes,
                                 cudaMemcpyDeviceToDevice));
      }
    return;
  }
  with_kv_type(kv_.dtype, [&](auto t) {
    using T = decltype(t);
    std::vector<T*> k, v;
    for (auto& pool : kv_.layers<T>()) {
      k.push_back(pool.k.get());
      v.push_back(pool.v.get());
    }
    ch07::copy_blocks<T>(k, v, kv_.shape, copies);
  });
}

// Copies the request's blocks to host memory, each distinct block once: sequences that
// share a block share its host copy (swap_in shares it again).
void Engine::swap_out(Group& g) {
  std::map<int, int> host_of;  // GPU block -> its host copy
  std::vector<ch07::BlockCopy> copies;
  for (Seq* s : g.seqs) {
    if (s->parked) continue;
    for (int b : blocks_.block_list(s->id)) {
      auto [it, fresh] = host_of.emplace(b, -1);
      if (fresh) {
        it->second = host_alloc_.allocate();
        copies.push_back({b, it->second});
      }
      s->host_blocks.push_back(it->second);
    }
  }
  swap_blocks(kv_.k_pools(), kv_.v_pools(), host_pools(host_k_), host_pools(host_v_), kv_.shape, kv_.elem_bytes(),
              cfg_.num_blocks, host_alloc_.num_blocks(), copies, cudaMemcpyDeviceToHost);
  copy_pool_blocks(kv_.index_pools(), host_pools(host_index_), kv_.index_block_bytes(), cfg_.num_blocks,
                   host_alloc_.num_blocks(), copies, cudaMemcpyDeviceToHost);
}

// ANCHOR: preempt
void Engine::preempt(Group& victim) {
  PA_REQUIRE(!running_.empty() && running_.back() == &victim,
             "preempt: only the newest running request can be the victim");
  running_.pop_back();
  ++stats_.preemptions;
  ++victim.preemptions;
  std::set<int> distinct;  // the host blocks a swap takes: each GPU block once
  for (const Seq* s : victim.seqs)
    if (!s->parked) distinct.insert(blocks_.block_list(s->id).begin(), blocks_.block_list(s->id).end());
  const int host_needed = int(distinct.size());
  // TODO(ch08): on return the victim request (already off running_, its preemption counted)
  //   holds no GPU KV block and waits to be resumed; a block it shares with other sequences
  //   (a prefix-cache hit, a fork) has only lost its owners among the victim's. Parked
  //   sequences (s->parked) hold no blocks and release none. The mode is swap when
  //   cfg_.preemption == Preemption::swap, cfg_.num_swap_blocks > 0 and the host has
  //   host_needed free blocks, else recompute.
  //   Swap: the victim's KV survives in host blocks (swap_out(victim), given, copies it from
  //   the GPU blocks); num_computed unchanged; state swapped, at the back of swapped_,
  //   ++stats_.swap_outs.
  //   Recompute: its KV is dropped: each sequence has num_computed = 0, no logits and
  //   parked = false; state waiting, at the FRONT of waiting_, ++stats_.recomputes.
  (void)host_needed;
  PA_TODO("ch08");
}
// ANCHOR_END: preempt

// Blocks swap_in(g) takes, the next token of each sequence included: a full block that
// sequences shared when they left comes back once, and is shared again.
int Engine::swap_in_blocks(const Group& g) const {
  const int bs = cfg_.block_size;
  std::set<int> back;  // host copies of full blocks already brought back
  int need = 0;
  for (const Seq* s : g.seqs) {
    if (s->parked) continue;
    size_t shared = 0;
    while (shared < s->host_blocks.size() && int(shared + 1) * bs <= s->num_computed &&
           back.count(s->host_blocks[shared]))
      ++shared;
    need += (s->num_computed + bs) / bs - int(shared);
    for (size_t j = shared; j < s->host_blocks.size() && int(j + 1) * bs <= s->num_computed; ++j)
      back.insert(s->host_blocks[j]);
  }
  return need;
}

void Engine::swap_in(Group& g) {
  const int bs = cfg_.block_size;
  std::map<int, int> gpu_of;  // host copy of a full block -> the GPU block it came back to
  std::set<int> host;         // every host block of the request, freed once
  std::vector<ch07::BlockCopy> copies;
  for (Seq* s : g.seqs) {
    if (s->parked) continue;
    std::vector<int> prefix;  // leading full blocks shared with a sequence already back
    while (prefix.size() < s->host_blocks.size() && int(prefix.size() + 1) * bs <= s->num_computed &&
           gpu_of.count(s->host_blocks[prefix.size()]))
      prefix.push_back(gpu_of[s->host_blocks[prefix.size()]]);
    blocks_.add_sequence(s->id, prefix);
    blocks_.append_slots(s->id, s->num_computed - int(prefix.size()) * bs);  // fresh blocks for the rest
    const std::vector<int>& gpu = blocks_.block_list(s->id);
    PA_REQUIRE(gpu.size() == s->host_blocks.size(), "swap_in: block counts differ");
    for (size_t j = prefix.size(); j < gpu.size(); ++j) {
      copies.push_back({s->host_blocks[j], gpu[j]});
      if (int(j + 1) * bs <= s->num_computed) gpu_of[s->host_blocks[j]] = gpu[j];
    }
    host.insert(s->host_blocks.begin(), s->host_blocks.end());
  }
  swap_blocks(host_pools(host_k_), host_pools(host_v_), kv_.k_pools(), kv_.v_pools(), kv_.shape, kv_.elem_bytes(),
              host_alloc_.num_blocks(), cfg_.num_blocks, copies, cudaMemcpyHostToDevice);
  copy_pool_blocks(host_pools(host_index_), kv_.index_pools(), kv_.index_block_bytes(), host_alloc_.num_blocks(),
                   cfg_.num_blocks, copies, cudaMemcpyHostToDevice);
  for (int h : host) host_alloc_.free(h);
  for (Seq* s : g.seqs) {
    s->host_blocks.clear();
    if (!s->parked) blocks_.commit(s->id, s->tokens, s->num_computed);  // cacheable again
  }
  g.state = Group::running;
  running_.push_back(&g);
  ++stats_.swap_ins;
}

// Full blocks every sequence of a recomputed request can share: the longest common token
// prefix, leaving each sequence at least its last token to compute (for its logits).
int Engine::shared_prefix_blocks(const Group& g) const {
  const std::vector<int>& lead = g.seqs.front()->tokens;
  size_t common = lead.size() - 1;
  for (const Seq* s : g.seqs) {
    const auto ends = std::mismatch(lead.begin(), lead.end(), s->tokens.begin(), s->tokens.end());
    common = std::min({common, size_t(ends.first - lead.begin()), s->tokens.size() - 1});
  }
  return int(common) / cfg_.block_size;
}

// Parked sequences share their leader's first blocks once it has computed them.
void Engine::rejoin(Group& g) {
  const Seq* lead = g.seqs.front();
  if (lead->parked || lead->num_computed < g.rejoin_tokens) return;
  const std::vector<int>& blocks = blocks_.block_list(lead->id);
  const std::vector<int> prefix(blocks.begin(), blocks.begin() + g.rejoin_tokens / cfg_.block_size);
  for (Seq* s : g.seqs)
    if (s->parked) {
      blocks_.add_sequence(s->id, prefix);
      s->num_computed = g.rejoin_tokens;
      s->parked = false;
    }
}

// ANCHOR: fork
// A new sequence that shares every block of `parent` (chapter 7's fork: no data moves).
Engine::Seq& Engine::fork(Seq& parent) {
  auto child = std::make_unique<Seq>(parent);
  child->id = next_seq_id_++;
  child->logits.clear();
  blocks_.fork(parent.id, child->id);
  Seq& c = *child;
  parent.group->seqs.push_back(&c);
  seqs_.emplace(c.id, std::move(child));
  ++stats_.forks;
  return c;
}
// ANCHOR_END: fork

// The sequence's blocks go back at once; the request ends with its last sequence.
void Engine::finish_seq(Seq& s) {
  Group& g = *s.group;
  blocks_.release(s.id);
  g.done.push_back({s.sample, Completion{std::vector<int>(s.tokens.begin() + g.prompt_len, s.tokens.end()), s.logprob}});
  g.seqs.erase(std::find(g.seqs.begin(), g.seqs.end(), &s));
  seqs_.erase(s.id);
  if (!g.seqs.empty()) return;
  // Samples in sample order; beams best first (they finish together, already in order).
  if (!g.beam())
    std::stable_sort(g.done.begin(), g.done.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Completion>& out = completions_[g.id];
  for (auto& d : g.done) out.push_back(std::move(d.second));
  outputs_[g.id] = out.front().tokens;
  g.state = Group::finished;
  ++stats_.finished;
}

void Engine::append_token(Seq& s, int token, const float* row) {
  const int vocab = model_.config().vocab_size;
  s.logprob += log_softmax(row, vocab)[size_t(token)];
  s.tokens.push_back(token);
  ++stats_.generated_tokens;
  if (cfg_.record_logits && s.group->width() == 1) logits_[s.group->id].emplace_back(row, row + vocab);
  if (s.generated() == s.group->max_new_tokens) finish_seq(s);
}

// ANCHOR: beams
// One beam-search step, once every beam has its logits: the beam_width best (beam, token)
// continuations by summed log-probability. A beam chosen once continues in place; chosen k
// times, it forks k - 1 children (sharing its blocks); not chosen, it is freed. The forks
// copy nothing now: the next step's writes copy each shared, partly filled tail block
// (copy-on-write), all in one copy_blocks launch.
void Engine::step_beams(Group& g) {
  const int vocab = model_.config().vocab_size;
  std::vector<const float*> rows;
  std::vector<double> scores;
  for (const Seq* s : g.seqs) {
    rows.push_back(s->logits.data());
    scores.push_back(s->logprob);
  }
  const std::vector<BeamCandidate> best = select_beams(rows, scores, vocab, g.sampling.beam_width);
  const std::vector<Seq*> parents = g.seqs;
  std::vector<int> uses(parents.size(), 0);
  std::vector<Seq*> next;
  for (const BeamCandidate& c : best)  // forks first: a parent still has its old tokens
    next.push_back(uses[size_t(c.beam)]++ == 0 ? parents[size_t(c.beam)] : &fork(*parents[size_t(c.beam)]));
  for (size_t i = 0; i < parents.size(); ++i)
    if (uses[i] == 0) {
      blocks_.release(parents[i]->id);
      seqs_.erase(parents[i]->id);
    }
  g.seqs = next;
  for (size_t i = 0; i < next.size(); ++i) {
    Seq& s = *next[i];
    s.sample = int(i);
    s.logprob = best[i].score;
    s.logits.clear();
    s.tokens.push_back(best[i].token);
    ++stats_.generated_tokens;
  }
  g.forked = true;
  if (next.front()->generated() == g.max_new_tokens)
    while (!g.seqs.empty()) finish_seq(*g.seqs.front());  // best first
}
// ANCHOR_END: beams

// The logits of a sequence's last token: its next token (a sample), or kept for the
// beam step. After the prompt, a request with n samples forks n - 1 more sequences and
// each draws its own first token.
void Engine::on_logits(Seq& s, const float* row) {
  Group& g = *s.group;
  const int vocab = model_.config().vocab_size;
  if (g.beam()) {
    s.logits.assign(row, row + vocab);
    return;
  }
  if (!g.forked) {
    g.forked = true;
    for (int k = 1; k < g.sampling.n; ++k) fork(s).sample = k;
    for (Seq* x : std::vector<Seq*>(g.seqs)) append_token(*x, sample_token(row, vocab, g.sampling, x->sample, g.prompt_len), row);
    return;
  }
  append_token(s, sample_token(row, vocab, g.sampling, s.sample, int(s.tokens.size())), row);
}

void Engine::report_blocks(StepReport& rep) {
  const int bs = cfg_.block_size;
  rep.running = 0;
  for (const Group* g : running_)
    for (const Seq* s : g->seqs) {
      if (s->parked) continue;
      ++rep.running;
      const int held = int(blocks_.block_list(s->id).size());
      rep.allocated_slots += int64_t(held) * bs;
      rep.used_slots += blocks_.length(s->id);
      rep.blocks_unshared += held;
    }
  rep.blocks_in_use = blocks_.num_blocks() - blocks_.num_free();
  stats_.peak_running = std::max(stats_.peak_running, rep.running);
  stats_.sum_allocated_slots += rep.allocated_slots;
  stats_.sum_used_slots += rep.used_slots;
  stats_.peak_wasted_slots = std::max(stats_.peak_wasted_slots, rep.allocated_slots - rep.used_slots);
  stats_.peak_blocks_in_use = std::max(stats_.peak_blocks_in_use, rep.blocks_in_use);
  stats_.peak_blocks_unshared = std::max(stats_.peak_blocks_unshared, rep.blocks_unshared);
  stats_.sum_blocks_in_use += rep.blocks_in_use;
  stats_.sum_blocks_unshared += rep.blocks_unshared;
}

// ANCHOR: step
StepReport Engine::step() {
  const int bs = cfg_.block_size;
  StepReport rep;
  rep.step = now_;
  while (!pending_.empty() && pending_.front()->arrival_step <= now_) {
    pending_.front()->state = Group::waiting;
    waiting_.push_back(pending_.front());
    pending_.erase(pending_.begin());
  }
  std::vector<Scheduled> sched;
  int budget = cfg_.max_tokens_per_step;
  bool preempted = false;
  int running_seqs = 0;
  for (const Group* g : running_) running_seqs += int(g->seqs.size());
  // What the step takes so far, plus n tokens of s: the manager's step_blocks, the very
  // count build_batch checks, so every plan the scheduler makes passes it.
  auto takes = [&](const Seq* s, int n) {
    std::vector<int> ids, counts;
    for (const Scheduled& e : sched) {
      ids.push_back(e.seq->id);
      counts.push_back(e.n);
    }
    if (s) {
      ids.push_back(s->id);
      counts.push_back(n);
    }
    return blocks_.step_blocks(ids, counts);
  };
  auto fits = [&](const Seq* s, int n) { return takes(s, n) <= blocks_.num_free(); };
  // Schedules the longest chunk of s's uncomputed tokens that the budget and the free
  // blocks allow (none when not even one token fits).
  auto add = [&](Seq* s) {
    if (s->parked) return;
    int n = std::min(int(s->tokens.size()) - s->num_computed, budget);
    if (n > 0 && !fits(s, n)) {
      int lo = 0;  // fits(s, lo) holds, fits(s, n) does not
      while (n - lo > 1) {
        const int mid = (lo + n) / 2;
        (fits(s, mid) ? lo : n) = mid;
      }
      n = lo;
    }
    if (n == 0) return;  // all computed (a beam waiting for its siblings), or no room left
    sched.push_back({s, n});
    budget -= n;
  };

  // 1. Running requests, oldest first: each sequence's next token, or the longest chunk of
  //    a prompt that fits (a shorter chunk before anything is preempted). Not even one
  //    token fits? The newest running request is preempted (possibly this one).
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Group* g = running_[i];
    for (Seq* s : g->seqs) {
      if (s->parked) continue;
      const int n = std::min(int(s->tokens.size()) - s->num_computed, budget);
      if (n == 0) continue;
      while (!fits(s, 1)) {
        Group* victim = running_.back();
        if (victim == g)  // its sequences scheduled so far give their blocks back too
          while (!sched.empty() && sched.back().seq->group == g) {
            budget += sched.back().n;
            sched.pop_back();
          }
        running_seqs -= int(victim->seqs.size());
        preempt(*victim);
        preempted = true;
        if (victim == g) break;
      }
      if (g->state != Group::running) break;
      add(s);
      if (budget == 0) break;
    }
    if (g->state != Group::running) break;  // it was the newest: nothing after it runs
  }
  // A request brought back or admitted computes in that step: its next tokens were counted.
  auto count_idle = [&](const Group* g) {
    for (const Scheduled& e : sched)
      if (e.seq->group == g) return;
    ++rep.idle_admissions;
    ++stats_.idle_admissions;
  };
  // 2. Swapped requests come back first (FIFO), when their blocks and next tokens fit.
  while (!preempted && !swapped_.empty() && running_seqs + swapped_.front()->width() <= cfg_.max_num_seqs &&
         budget > 0) {
    Group* g = swapped_.front();
    if (swap_in_blocks(*g) > blocks_.num_free() - takes(nullptr, 0)) break;
    swapped_.pop_front();
    swap_in(*g);
    running_seqs += int(g->seqs.size());
    for (Seq* s : g->seqs) add(s);
    count_idle(g);
  }
  // 3. New (and recompute-preempted) requests, FIFO, admitted by free blocks: each
  //    sequence's tokens plus one must fit, minus the blocks a prefix-cache hit provides.
  while (!preempted && swapped_.empty() && !waiting_.empty() &&
         running_seqs + waiting_.front()->width() <= cfg_.max_num_seqs && budget > 0) {
    Group* g = waiting_.front();
    // A recomputed request of several sequences shares its common prefix again: the first
    // sequence (the leader) computes it, or finds it cached; the others wait, parked, and
    // then share the leader's blocks (rejoin), whether or not the cache still holds them.
    const int shared = g->seqs.size() > 1 ? shared_prefix_blocks(*g) : 0;
    std::vector<std::vector<int>> hits(g->seqs.size());  // parked sequences: none
    std::set<int> evictable_hits;
    int need = 0;
    for (size_t k = 0; k < g->seqs.size(); ++k) {
      const Seq* s = g->seqs[k];
      const int len = int(s->tokens.size());
      const int want = cfg_.dense ? (cfg_.max_seq_len + bs - 1) / bs : (len + 1 + bs - 1) / bs;
      if (k > 0 && shared > 0) {
        need += want - shared;
        continue;
      }
      // At most len - 1 tokens from the cache: the last token must be computed, or there
      // would be no logits to choose the next token from (a full hit).
      hits[k] = blocks_.match_prefix(s->tokens, len - 1);
      for (int b : hits[k])
        if (blocks_.refcount(b) == 0) evictable_hits.insert(b);  // a shared one counts once
      need += want - int(hits[k].size());
    }
    need += int(evictable_hits.size());
    if (need > blocks_.num_free() - takes(nullptr, 0)) break;
    waiting_.pop_front();
    g->rejoin_tokens = shared * bs;
    for (size_t k = 0; k < g->seqs.size(); ++k) {
      Seq* s = g->seqs[k];
      if (k > 0 && shared > 0) {
        s->parked = true;
        continue;
      }
      blocks_.add_sequence(s->id, hits[k]);
      if (cfg_.dense) blocks_.reserve(s->id, cfg_.max_seq_len);
      s->num_computed = int(hits[k].size()) * bs;
      stats_.cached_prompt_tokens += s->num_computed;
    }
    if (shared > 0) rejoin(*g);  // at once if the leader's cache hit covers the prefix
    g->state = Group::running;
    running_.push_back(g);
    running_seqs += int(g->seqs.size());
    for (Seq* s : g->seqs) add(s);
    count_idle(g);
  }

  rep.waiting = int(waiting_.size() + pending_.size());
  rep.swapped = int(swapped_.size());
  ++now_;
  ++stats_.steps;
  if (sched.empty()) {
    report_blocks(rep);
    // Nothing ran: fine while requests are still to arrive or after a preemption (the next
    // step readmits), a bug otherwise.
    PA_REQUIRE(!pending_.empty() || preempted || (waiting_.empty() && swapped_.empty()),
               "scheduler stuck at step " << rep.step << ": " << waiting_.size() << " waiting and "
                                          << swapped_.size() << " swapped requests, none admitted");
    return rep;
  }

  // The step's batch (chapter 3's build_batch): sequences with one new token first
  // (chapter 5's decode kernel), then the prefill chunks.
  std::stable_partition(sched.begin(), sched.end(), [](const Scheduled& e) { return e.n == 1; });
  std::vector<int> ids, counts;
  for (const Scheduled& e : sched) {
    ids.push_back(e.seq->id);
    counts.push_back(e.n);
  }
  StepInput in;
  in.batch = ch03::build_batch(blocks_, ids, counts);
  // Copy-on-write: the blocks this step's appends copied, before anything writes to them.
  const std::vector<ch07::BlockCopy> copies = blocks_.take_copies();
  if (!copies.empty()) copy_blocks(copies);
  rep.copies = int(copies.size());
  stats_.cow_copies += rep.copies;
  std::vector<Seq*> logit_seq;  // the sequence of each logit row
  for (const Scheduled& e : sched) {
    Seq& s = *e.seq;
    for (int j = 0; j < e.n; ++j) {
      in.tokens.push_back(s.tokens[size_t(s.num_computed + j)]);
      in.positions.push_back(s.num_computed + j);
    }
    if (s.num_computed + e.n == int(s.tokens.size())) {
      in.logit_rows.push_back(int(in.tokens.size()) - 1);
      logit_seq.push_back(&s);
    }
  }
  rep.num_tokens = int(in.tokens.size());
  report_blocks(rep);
  // A decode-only step can replay a CUDA graph (GPU): one launch instead of ~20 per layer.
  in.cascade = cfg_.cascade;
  const bool graph = cfg_.cuda_graphs && !cfg_.cascade && !model_.step_attention() && !model_.config().dsa &&
                     TinyModel::graphs_supported() && in.num_decode() == in.batch.num_seqs;
  stats_.graph_steps += graph ? 1 : 0;
  const std::vector<float> logits =
      graph ? model_.forward_decode_graph(in, kv_, cfg_.max_num_seqs, (cfg_.max_seq_len + bs - 1) / bs, cfg_.max_seq_len)
            : model_.forward_paged(in, kv_);

  const int vocab = model_.config().vocab_size;
  for (const Scheduled& e : sched) {
    e.seq->num_computed += e.n;
    stats_.computed_tokens += e.n;
    blocks_.commit(e.seq->id, e.seq->tokens, e.seq->num_computed);
  }
  for (Group* g : running_)  // before any sequence can finish and free the leader's blocks
    if (g->rejoin_tokens > 0) rejoin(*g);
  std::set<Group*> beams;
  for (size_t r = 0; r < logit_seq.size(); ++r) {
    Group* g = logit_seq[r]->group;
    on_logits(*logit_seq[r], logits.data() + int64_t(r) * vocab);
    if (g->beam()) beams.insert(g);
  }
  for (Group* g : beams)
    if (std::all_of(g->seqs.begin(), g->seqs.end(), [](const Seq* s) { return !s->logits.empty(); }))
      step_beams(*g);
  for (const Group* g : running_) rep.finished += g->state == Group::finished ? 1 : 0;
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const Group* g) { return g->state == Group::finished; }),
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

std::vector<Engine::LiveSequence> Engine::live_sequences() const {
  std::vector<LiveSequence> out;
  for (const Group* g : running_)
    for (const Seq* s : g->seqs)
      if (!s->parked) out.push_back({g->id, s->id, s->tokens, s->num_computed});
  return out;
}

}  // namespace pa::ch08
