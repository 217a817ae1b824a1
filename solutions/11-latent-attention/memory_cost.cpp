// Chapter 11, exercise 2 of 4: what the latent cache costs, against chapter 1's K/V cache.
#include "pa/ch03_block_table.h"
#include "pa/ch11_mla.h"

namespace pa::ch11 {

int64_t latent_bytes_per_token_layer(int dtype_bytes) {
  PA_REQUIRE(dtype_bytes > 0, "dtype_bytes must be positive, got " << dtype_bytes);
  return int64_t(kLatentDim + kRopeDim) * dtype_bytes;  // one row, whatever the head count
}

int64_t latent_bytes_per_token_layer(LatentFormat format, int dtype_bytes) {
  if (format == LatentFormat::bits16) return latent_bytes_per_token_layer(dtype_bytes);
  PA_REQUIRE(dtype_bytes == 2, "an fp8 latent row keeps its RoPE part in 16 bits (dtype_bytes 2), got "
                                   << dtype_bytes);
  return kFp8RowBytes;  // 512 e4m3 bytes + 4 fp32 scales + 64 16-bit RoPE values: 656
}

// The arguments of a cache's bill, checked: the message names the function `who`.
static void check_bill(const char* who, const std::vector<Request>& trace, int num_layers, int block_size,
                       int dtype_bytes, int64_t budget_bytes) {
  PA_REQUIRE(!trace.empty(), who << ": the trace is empty");
  PA_REQUIRE(num_layers > 0, who << ": num_layers must be positive, got " << num_layers);
  PA_REQUIRE(block_size > 0, who << ": block_size must be positive, got " << block_size);
  PA_REQUIRE(dtype_bytes > 0, who << ": dtype_bytes must be positive, got " << dtype_bytes);
  PA_REQUIRE(budget_bytes > 0, who << ": budget_bytes must be positive, got " << budget_bytes);
  for (const Request& r : trace)
    PA_REQUIRE(r.prompt_len >= 0 && r.output_len >= 0, who << ": a request of negative length");
}

// ANCHOR: latent_cost
CacheCost latent_cache_cost(const std::vector<Request>& trace, int num_layers, int block_size,
                            int dtype_bytes, int64_t budget_bytes) {
  check_bill("latent_cache_cost", trace, num_layers, block_size, dtype_bytes, budget_bytes);
  const int64_t n = int64_t(trace.size());
  // TODO(ch11): return the latent cache's CacheCost (include/pa/ch11_mla.h: each field as its
  //   comment there defines it) for num_layers layers of latent rows of dtype_bytes values,
  //   paged in blocks of block_size tokens, on this trace (n requests, request r holds
  //   r.total() tokens) in budget_bytes. A "block" in blocks_in_budget is one block of every
  //   layer. Integer fields are exact and rounded down; nothing overflows, even for a budget
  //   near 2^62. LatentMemory.* checks the exact values.
  // HINT(1): Start from one token of one layer: latent_bytes_per_token_layer above. A latent
  //   row stands for both K and V of every head. Then everything is chapter 3's
  //   paged_memory_report with that per-token size: requests hold whole blocks.
  // HINT(2): bytes_per_token = per layer * num_layers; a block of every layer is
  //   block_size * bytes_per_token bytes; sum ceil(t / block_size) over the trace for the
  //   blocks held; seqs_in_budget multiplies before it divides (128-bit products).
  // HINT(3): per_layer = latent_bytes_per_token_layer(dtype_bytes); per_token = per_layer *
  //   num_layers; blocks = sum of (t + bs - 1) / bs; blocks_in_budget = budget / (bs *
  //   per_token); seqs_in_budget = int64((__int128(budget) * n) / (__int128(blocks) * bs *
  //   per_token)).
  // BEGIN SOLUTION
  // STUB: PA_TODO("ch11");
  // STUB: (void)n;
  const int64_t per_layer = latent_bytes_per_token_layer(dtype_bytes);
  const int64_t per_token = per_layer * num_layers;
  int64_t blocks = 0;
  for (const Request& r : trace) blocks += (r.total() + block_size - 1) / block_size;
  CacheCost c;
  c.bytes_per_token_layer = per_layer;
  c.bytes_per_token = per_token;
  c.blocks_in_budget = budget_bytes / (int64_t(block_size) * per_token);
  c.seqs_in_budget = int64_t((__int128(budget_bytes) * n) / (__int128(blocks) * block_size * per_token));
  return c;
  // END SOLUTION
}
// ANCHOR_END: latent_cost

CacheCost kv_cache_cost(const std::vector<Request>& trace, const KVConfig& cfg, int block_size,
                        int64_t budget_bytes) {
  const ch03::PagedMemoryReport rep = ch03::paged_memory_report(trace, cfg, block_size, budget_bytes);
  CacheCost c;
  c.bytes_per_token = cfg.bytes_per_token();
  c.bytes_per_token_layer = c.bytes_per_token / cfg.num_layers;
  c.blocks_in_budget = budget_bytes / (int64_t(block_size) * c.bytes_per_token);
  c.seqs_in_budget = rep.paged_seqs_in_budget;
  return c;
}

int64_t dsa_bytes_per_token_layer(LatentFormat format, int dtype_bytes) {
  return latent_bytes_per_token_layer(format, dtype_bytes) + ch08::kIndexBytesPerToken;
}

// Chapter 3's bill, as kv_cache_cost's: a cache whose K and V are one head of half the
// token's bytes, in bytes, costs what the two DSA pools cost.
CacheCost dsa_cache_cost(const std::vector<Request>& trace, int num_layers, int block_size, LatentFormat format,
                         int64_t budget_bytes, int dtype_bytes) {
  check_bill("dsa_cache_cost", trace, num_layers, block_size, dtype_bytes, budget_bytes);
  const int64_t per_layer = dsa_bytes_per_token_layer(format, dtype_bytes);
  KVConfig same;
  same.num_layers = num_layers;
  same.num_kv_heads = 1;
  same.head_size = int(per_layer / 2);
  same.dtype_bytes = 1;
  CacheCost c = kv_cache_cost(trace, same, block_size, budget_bytes);
  PA_REQUIRE(c.bytes_per_token_layer == per_layer,  // every row format is an even number of bytes
             "dsa_cache_cost: " << per_layer << " bytes a token and layer cannot be split into K and V");
  return c;
}

MlaMemoryReport mla_memory_report(const std::vector<Request>& trace, int block_size,
                                  int64_t budget_bytes, int num_layers) {
  KVConfig gqa, mha;
  gqa.num_layers = mha.num_layers = num_layers;
  gqa.num_kv_heads = 8;
  mha.num_kv_heads = 128;
  gqa.head_size = mha.head_size = 128;
  gqa.dtype_bytes = mha.dtype_bytes = 2;
  return {latent_cache_cost(trace, num_layers, block_size, 2, budget_bytes),
          kv_cache_cost(trace, gqa, block_size, budget_bytes),
          kv_cache_cost(trace, mha, block_size, budget_bytes)};
}

}  // namespace pa::ch11
