// The given host side of cascade attention: grouping the sequences that share a prefix,
// and the plan's upload.
#include <algorithm>
#include <climits>
#include <unordered_map>

#include "pa/ch08_cascade.h"
#include "pa/check.h"

namespace pa::ch08 {

// ANCHOR: plan_cascade
CascadePlan plan_cascade(const std::vector<int>& block_table, const std::vector<int>& context_lens,
                         int num_seqs, int max_blocks_per_seq, int block_size,
                         int min_shared_blocks) {
  PA_REQUIRE(num_seqs >= 0, "num_seqs must be >= 0, got " << num_seqs);
  PA_REQUIRE(max_blocks_per_seq > 0 && block_size > 0,
             "max_blocks_per_seq and block_size must be positive, got " << max_blocks_per_seq
                                                                        << " and " << block_size);
  PA_REQUIRE(min_shared_blocks >= 1, "min_shared_blocks must be >= 1, got " << min_shared_blocks);
  PA_REQUIRE(context_lens.size() == size_t(num_seqs),
             "context_lens has " << context_lens.size() << " entries, want num_seqs = " << num_seqs);
  PA_REQUIRE(block_table.size() == size_t(num_seqs) * max_blocks_per_seq,
             "block_table has " << block_table.size() << " entries, want num_seqs * max_blocks_per_seq = "
                                << size_t(num_seqs) * max_blocks_per_seq);
  auto row = [&](int b) { return block_table.data() + size_t(b) * max_blocks_per_seq; };

  std::vector<int> full(static_cast<size_t>(num_seqs));  // each sequence's full blocks
  for (int b = 0; b < num_seqs; ++b) {
    const int len = context_lens[size_t(b)];
    PA_REQUIRE(len >= 0 && int64_t(len) <= int64_t(max_blocks_per_seq) * block_size,
               "sequence " << b << ": context_len " << len << " is outside 0.."
                           << int64_t(max_blocks_per_seq) * block_size << " (the table's capacity)");
    for (int j = 0; j < (len + block_size - 1) / block_size; ++j)
      PA_REQUIRE(row(b)[j] >= 0, "block_table[" << b << "][" << j << "] = " << row(b)[j]
                                                << " is not a block (sequence " << b << " has "
                                                << len << " tokens)");
    full[size_t(b)] = len / block_size;
  }

  CascadePlan plan;
  plan.num_seqs = num_seqs;
  plan.max_blocks_per_seq = max_blocks_per_seq;
  plan.block_size = block_size;
  plan.group_of.assign(size_t(num_seqs), -1);
  plan.prefix_len.assign(size_t(num_seqs), 0);
  // TODO(ch08, stretch): fill plan.groups, plan.group_of and plan.prefix_len (every sequence
  //   starts in no group: -1 and 0) with the groups of the contract in include/pa/ch08_cascade.h
  //   (plan_cascade's comment), exactly: in batch order, each sequence joins the first
  //   candidate (in the order they were led) whose leader's first min_shared_blocks table
  //   entries equal its own, or else leads a new candidate; a sequence with fewer than
  //   min_shared_blocks full blocks (full[b], computed above) is in none. A
  //   candidate of 2 or more members is a group: groups in the order of their leaders,
  //   members ascending; prefix_blocks = the longest run of the leader's entries from logical
  //   block 0 that every member holds at the same place and full; prefix_len = that many
  //   blocks * block_size, for the group and each member. Cost: a sequence is compared only
  //   with the leaders whose first block is its own (not all of them). Checked by
  //   Ch08/StretchCascadePlan.* and StretchCascadePlanner.* (tests/08-serving/test_stretch_cascade_plan.cpp).
  // HINT(1): Two passes: first form the candidates (who is led by whom), then, for each
  //   candidate of two or more, find how far its members agree. row(b) is sequence b's table
  //   row; full[b] its full blocks.
  // HINT(2): Keep the candidates as lists of members (leader first) and a map from a first
  //   block id to the indices of the candidates it leads; a sequence looks among those for one
  //   whose leader's first min_shared_blocks entries std::equal its own, or starts a new
  //   candidate. Then per candidate of size >= 2: n = the fewest full blocks of its members;
  //   shared = 0; while shared < n and every member's row(m)[shared] equals the leader's,
  //   ++shared.
  // HINT(3): candidates: vector<vector<int>>; leaders: unordered_map<int, vector<int>> (first
  //   block -> candidate indices). For b in order: skip if full[b] < min_shared_blocks; same =
  //   leaders[row(b)[0]]; it = find_if(same, c -> equal(row(candidates[c][0]), ... +
  //   min_shared_blocks, row(b))); join candidates[*it] or push a new {b} (its index into same).
  //   Then for each candidate with >= 2 members: n = min over members of full[m]; shared as in
  //   hint 2; CascadeGroup g{members, shared * block_size, lead[0 .. shared)}; group_of[m] =
  //   plan.groups.size(), prefix_len[m] = g.prefix_len for each member; push g.
  // BEGIN SOLUTION(ch08, stretch)
  // STUB: // Given for now: no group at all (every sequence attends its whole context alone,
  // STUB: // which is correct, only slower). Replace with your planner.
  // STUB: (void)row, (void)full, (void)min_shared_blocks;
  // Candidate groups, in batch order. A sequence is compared only with the leaders whose
  // first block is its own first block.
  std::vector<std::vector<int>> candidates;
  std::unordered_map<int, std::vector<int>> leaders;  // first block -> candidate indices
  for (int b = 0; b < num_seqs; ++b) {
    if (full[size_t(b)] < min_shared_blocks) continue;
    std::vector<int>& same_first = leaders[row(b)[0]];
    auto joins = [&](int c) {
      const int* lead = row(candidates[size_t(c)][0]);
      return std::equal(lead, lead + min_shared_blocks, row(b));
    };
    const auto it = std::find_if(same_first.begin(), same_first.end(), joins);
    if (it != same_first.end()) {
      candidates[size_t(*it)].push_back(b);
    } else {
      same_first.push_back(int(candidates.size()));
      candidates.push_back({b});
    }
  }

  for (std::vector<int>& members : candidates) {
    if (members.size() < 2) continue;
    // The prefix: the longest run of blocks every member holds, full, at the same place.
    const int* lead = row(members[0]);
    int n = INT_MAX;
    for (int m : members) n = std::min(n, full[size_t(m)]);
    int shared = 0;
    while (shared < n && std::all_of(members.begin(), members.end(),
                                     [&](int m) { return row(m)[shared] == lead[shared]; }))
      ++shared;
    CascadeGroup g;
    g.prefix_len = shared * block_size;
    g.prefix_blocks.assign(lead, lead + shared);
    for (int m : members) {
      plan.group_of[size_t(m)] = int(plan.groups.size());
      plan.prefix_len[size_t(m)] = g.prefix_len;
    }
    g.members = std::move(members);
    plan.groups.push_back(std::move(g));
  }
  // END SOLUTION
  return plan;
}
// ANCHOR_END: plan_cascade

void CascadeDevicePlan::upload(const CascadePlan& p) {
  PA_REQUIRE(p.num_seqs > 0, "a cascade plan needs at least one sequence, got " << p.num_seqs);
  PA_REQUIRE(p.group_of.size() == size_t(p.num_seqs) && p.prefix_len.size() == size_t(p.num_seqs),
             "the cascade plan's group_of and prefix_len must have num_seqs = " << p.num_seqs
                                                                                << " entries");
  // One buffer: group_start | members | group_prefix_len | seq_prefix_len.
  const int G = int(p.groups.size());
  std::vector<int> host{0};
  for (const CascadeGroup& g : p.groups) host.push_back(host.back() + int(g.members.size()));
  int max_prefix = 0;
  std::vector<char> covered(size_t(p.num_seqs), 0);
  for (int gi = 0; gi < G; ++gi) {
    const CascadeGroup& g = p.groups[size_t(gi)];
    PA_REQUIRE(g.prefix_len > 0 && g.prefix_len % p.block_size == 0 && !g.members.empty(),
               "cascade group " << gi << ": prefix_len " << g.prefix_len
                                << " is not a positive multiple of block_size " << p.block_size
                                << ", or the group has no member");
    for (int m : g.members) {
      PA_REQUIRE(m >= 0 && m < p.num_seqs && p.prefix_len[size_t(m)] == g.prefix_len,
                 "cascade group " << gi << ": member " << m << " is not a sequence of the batch "
                                  << "or its prefix_len disagrees with the group's");
      PA_REQUIRE(!covered[size_t(m)], "sequence " << m << " is in two cascade groups");
      covered[size_t(m)] = 1;
      host.push_back(m);
    }
    max_prefix = std::max(max_prefix, g.prefix_len);
  }
  for (int b = 0; b < p.num_seqs; ++b)
    PA_REQUIRE(covered[size_t(b)] || p.prefix_len[size_t(b)] == 0,
               "sequence " << b << " has prefix_len " << p.prefix_len[size_t(b)]
                           << " but is in no cascade group");
  for (const CascadeGroup& g : p.groups) host.push_back(g.prefix_len);
  host.insert(host.end(), p.prefix_len.begin(), p.prefix_len.end());

  if (data_.size() < host.size()) data_ = DeviceBuffer<int>(host.size());
  PA_CUDA_CHECK(cudaMemcpy(data_.get(), host.data(), host.size() * sizeof(int),
                           cudaMemcpyHostToDevice));
  num_seqs_ = p.num_seqs;
  max_blocks_per_seq_ = p.max_blocks_per_seq;
  block_size_ = p.block_size;
  num_groups_ = G;
  max_prefix_len_ = max_prefix;
  num_members_ = host[size_t(G)];
  max_group_size_ = 0;
  for (const CascadeGroup& g : p.groups) max_group_size_ = std::max(max_group_size_, int(g.members.size()));
  min_prefix_len_ = *std::min_element(p.prefix_len.begin(), p.prefix_len.end());
}

CascadeView CascadeDevicePlan::view() const {
  const int* d = data_.get();
  return CascadeView{num_groups_, d, d + num_groups_ + 1, d + num_groups_ + 1 + num_members_,
                     d + 2 * num_groups_ + 1 + num_members_};
}

}  // namespace pa::ch08
