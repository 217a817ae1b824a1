// A per-block timeline of chapter 10's and chapter 11's kernels, for performance work only
// (never in the course's build): tools/perf/apply_timeline.py copies this header into a tree
// and marks the kernels; built with -DPA_TIMELINE, one launch in 16 prints, from the last
// block to finish, when the blocks started, when their (last item's) first stage had landed
// (chapter 10's decode-warp items: the start again) and when they ended, in us from the first
// block's start.
#pragma once
#ifdef PA_TIMELINE
#include <cstdio>
namespace pa::tl {
__device__ unsigned long long g_rec[2048][6];  // start, first stage, end; steps 3-5 (PA_TL_AT)
__device__ unsigned int g_done, g_launch;
__device__ float g_s[2048], g_f[2048], g_e[2048];  // scratch of the summary (no local frame)
// -DPA_TIMELINE_DUMP as well: every block's own line (its SM, and each of its first 4 items'
// end, tokens and split), after the summary.
__device__ unsigned int g_sm[2048], g_items[2048];
__device__ unsigned long long g_item_end[2048][4];
__device__ int g_item_tok[2048][4], g_item_split[2048][4][2];  // (split, num_splits)
__device__ inline unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ inline void mark(int k) {
  if (threadIdx.x != 0) return;
  g_rec[blockIdx.x][k] = now();
  if (k == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    g_sm[blockIdx.x] = sm;
    g_items[blockIdx.x] = 0;
    g_rec[blockIdx.x][3] = g_rec[blockIdx.x][4] = g_rec[blockIdx.x][5] = 0;
  }
}
// Step k (3-5) of a block's prologue, once `dep` is known: the empty asm takes dep as an input,
// so the clock is read after the load that produced it has returned (PA_TL_AT(k, value)).
__device__ inline void at(int k, int dep) {
  asm volatile("" ::"r"(dep));
  if (threadIdx.x != 0 || g_rec[blockIdx.x][k] != 0) return;  // a block's first item only
  g_rec[blockIdx.x][k] = now();
}
// After item k of this block: its end, tokens and (split, num_splits).
__device__ inline void item(int kv_begin, int kv_end, int split, int num_splits) {
  if (threadIdx.x != 0) return;
  const unsigned k = g_items[blockIdx.x]++;
  if (k >= 4) return;
  g_item_end[blockIdx.x][k] = now();
  g_item_tok[blockIdx.x][k] = kv_end - kv_begin;
  g_item_split[blockIdx.x][k][0] = split;
  g_item_split[blockIdx.x][k][1] = num_splits;
}
__device__ inline void sort(float* v, int n) {
  for (int i = 1; i < n; ++i) { float x = v[i]; int j = i - 1; while (j >= 0 && v[j] > x) { v[j + 1] = v[j]; --j; } v[j + 1] = x; }
}
__device__ inline void finish(const char* tag) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  g_rec[blockIdx.x][2] = now();
  __threadfence();
  if (atomicAdd(&g_done, 1u) != gridDim.x - 1) return;
  g_done = 0;
  __threadfence();
  const unsigned l = g_launch++;
  if (l % 16 != 9) return;
  const int n = gridDim.x;
  unsigned long long t0 = ~0ull;
  for (int b = 0; b < n; ++b) t0 = min(t0, g_rec[b][0]);
  float *s = g_s, *f = g_f, *e = g_e;
  for (int b = 0; b < n; ++b) {
    s[b] = (g_rec[b][0] - t0) * 1e-3; f[b] = (g_rec[b][1] - t0) * 1e-3; e[b] = (g_rec[b][2] - t0) * 1e-3;
  }
  sort(s, n); sort(f, n); sort(e, n);
  printf("TL %s grid %d | start p50 %.2f max %.2f | first stage ready min %.2f p50 %.2f max %.2f | end min %.2f p10 %.2f p50 %.2f p90 %.2f max %.2f us\n",
         tag, n, s[n / 2], s[n - 1], f[0], f[n / 2], f[n - 1], e[0], e[n / 10], e[n / 2], e[n * 9 / 10], e[n - 1]);
#ifdef PA_TIMELINE_DUMP
  for (int b = 0; b < n; ++b) {
    const unsigned m = g_items[b] < 4 ? g_items[b] : 4;
    printf("TLB %s %d sm %u start %.2f first %.2f end %.2f items %u", tag, b, g_sm[b], (g_rec[b][0] - t0) * 1e-3,
           (g_rec[b][1] - t0) * 1e-3, (g_rec[b][2] - t0) * 1e-3, g_items[b]);
    for (int k = 3; k < 6; ++k)
      if (g_rec[b][k]) printf(" step%d %.2f", k, (g_rec[b][k] - t0) * 1e-3);
    for (unsigned k = 0; k < m; ++k)
      printf(" | %.2f %d %d/%d", (g_item_end[b][k] - t0) * 1e-3, g_item_tok[b][k], g_item_split[b][k][0],
             g_item_split[b][k][1]);
    printf("\n");
  }
#endif
}
}  // namespace pa::tl
#define PA_TL_MARK(k) pa::tl::mark(k)
#define PA_TL_AT(k, dep) pa::tl::at(k, dep)
#define PA_TL_ITEM(w) pa::tl::item((w).kv_begin, (w).kv_end, (w).split, (w).num_splits)
#define PA_TL_FINISH(tag) pa::tl::finish(tag)
#else
#define PA_TL_MARK(k)
#define PA_TL_AT(k, dep)
#define PA_TL_ITEM(w)
#define PA_TL_FINISH(tag)
#endif
