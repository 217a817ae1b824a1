// Your exercise file. (Generated from solutions/12-hybrid-models/window_mask.cuh; instructors regenerate with tools/make_skeletons.py.)
// Chapter 12, exercises 3 and 4 (core): the mask policy that turns chapter 10's varlen kernel
// into a sliding-window kernel with attention sinks and a logit soft-cap. Chapter 10's kernel
// is a template over its mask (CausalMask in varlen_args.cuh); this type has the same
// members, with every hook on. The kernel calls
//   first_key(pos)      the oldest key a row sees (given: the window's definition), through
//                       sees() to mask the keys before it (chapter 9's decode warps take it
//                       as their first visible key),
//   first_load(...)     once per work item: where its loads start (exercise 3),
//   window_cuts(...)    per warp and part of a stage: whether that part must be masked key
//                       by key because a window hides some of it (exercise 3),
//   cap_raw(s)          on every raw score q.k before the mask (given: Gemma 2's soft-cap),
//   fold_sink(...)      once per row of every item, before it writes (exercise 4).
#pragma once

#include <cmath>

#include "varlen_args.cuh"  // chapter 10: CausalMask, the policy's members

namespace pa::ch12 {

// ANCHOR: window_mask
struct WindowMask {
  static constexpr bool kWindow = true, kSoftCap = true, kSinks = true;
  int window;            // > 0: a row at position p sees the keys [p - window + 1, p]
  const float* sinks;    // [Hq] the heads' sink logits (device), or nullptr: no sinks
  float cap_over_scale;  // soft-cap / scale, or 0: no soft-cap
  float scale_over_cap;  // scale / soft-cap

  // ANCHOR: first_key
  // The oldest key the query row at position pos (>= 0) sees: its window is the `window`
  // keys that end at its own. Where the window reaches before position 0, 0 (the kernel's
  // uses work with 0 or a negative position alike).
  __device__ int first_key(int pos) const { return max(0, pos - window + 1); }
  // ANCHOR_END: first_key

  // ANCHOR: tile_window
  // TODO(ch12): the two questions chapter 10's kernel asks the window about a whole tile of
  //   rows at once (a tile's rows, and a warp's, have consecutive positions: a later row has
  //   a later position). Tests: Ch12/WindowGolden.* (KernelSkipsWhatNoRowSees: a plan that
  //   knows no window, so that only first_load skips what no row sees).
  //   first_load(first_row_pos, kv_begin, align): a work item covers the keys [kv_begin,
  //     kv_end) (kv_begin is a multiple of align) for a tile whose first row is at
  //     first_row_pos, and loads them in pieces of `align` tokens. Return the key its loads
  //     start at: never before kv_begin, on a piece's edge (kv_begin + a multiple of align),
  //     never past a key that a row of the tile sees, and past every whole piece that no row
  //     of the tile sees (such a piece may be in a block the table no longer names).
  //   window_cuts(part_first, part_end, first_pos, last_pos): a warp whose rows are at
  //     positions first_pos .. last_pos (first_pos <= last_pos; both -1 for a warp with no
  //     row) is about to attend the keys [part_first, part_end). Return true if the window
  //     hides some of those keys from some row of the warp (the kernel then masks the part
  //     key by key with sees()); false only if every row's window includes every key of the
  //     part (chapter 10's own mask, the causal one, is checked apart). Returning true too
  //     often is correct but slow.
  __device__ int first_load(int, int kv_begin, int) const { return kv_begin; }
  __device__ bool window_cuts(int, int, int, int) const { return false; }
  // ANCHOR_END: tile_window

  // Chapter 9's decode warps know the window but not the soft-cap.
  __device__ bool decode_warps_ok() const { return cap_over_scale == 0.f; }

  // Gemma 2's soft-cap on the scaled score scale * s: cap * tanh(scale * s / cap), returned
  // unscaled (the kernel scales it with the rest).
  __device__ float cap_raw(float s) const {
    return cap_over_scale > 0.f ? cap_over_scale * tanhf(s * scale_over_cap) : s;
  }

  // Whether the row at position pos sees the key at kpos, beyond chapter 10's mask (which
  // has kept the item's keys up to pos): the window's left edge.
  __device__ bool sees(int kpos, int pos) const { return kpos >= first_key(pos); }

  // ANCHOR: fold_sink
  // The row of query head `head`, in chunk `split` of its tile's keys (0 .. num_splits - 1;
  // 0 when the tile is not split), holds its online-softmax state: m2, its largest score in
  // base 2 (-inf if it saw no key: a chunk left of its window), l, its exp-sum at m2, and an
  // output o (not yet divided by l) at m2. The caller multiplies o by corr afterwards.
  __device__ void fold_sink(int head, int split, float& m2, float& l, float& corr) const {
    corr = 1.f;
    if (sinks == nullptr) return;
    // TODO(ch12): sinks[head] is the head's sink: a learned logit, in the units of the
    //   scaled scores (natural log: scale * q.k). On return, over all the chunks of the row,
    //   the sink has joined the softmax's denominator exactly once -- as if one more key of
    //   score sinks[head] were attended -- and has added nothing to the output: (m2, l) are
    //   this chunk's state with the sink included (only the chunk with split 0 includes it;
    //   the others return unchanged, corr 1), and corr rescales o to the new m2. With m2
    //   -inf on entry, o is 0 and l 0: the state becomes the sink's alone. Tests:
    //   Ch12/WindowGolden.* (the sink cases),
    //   Ch12/WindowGolden.SplitRowsTakeTheSinkOnce/*.
    // (your code here)
  }
  // ANCHOR_END: fold_sink
};
// ANCHOR_END: window_mask

}  // namespace pa::ch12
