// Your exercise file. (Generated from solutions/12-hybrid-models/window_mask.cuh; instructors regenerate with tools/make_skeletons.py.)
// Chapter 12, exercises 5 and 6 (core): the mask policy that turns chapter 10's varlen kernel
// into a sliding-window kernel with attention sinks and a logit soft-cap. Chapter 10's kernel
// is a template over its mask (CausalMask in varlen_args.cuh); this type has the same members,
// with every hook on. The kernel calls
//   first_key(pos)   to skip the stages left of a tile's windows (given),
//   cap_raw(s)       on every raw score q.k before the mask (given: Gemma 2's soft-cap),
//   sees(kpos, pos)  on every key that chapter 10's causal mask kept, in a stage that
//                    needs a mask (exercise 5: the window),
//   fold_sink(...)   once per row of every item, before it writes (exercise 6).
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

  // The first key a row at position pos (>= 0) can see.
  __device__ int first_key(int pos) const { return max(0, pos - window + 1); }

  // Gemma 2's soft-cap on the scaled score scale * s: cap * tanh(scale * s / cap), returned
  // unscaled (the kernel scales it with the rest).
  __device__ float cap_raw(float s) const {
    return cap_over_scale > 0.f ? cap_over_scale * tanhf(s * scale_over_cap) : s;
  }

  // ANCHOR: sees
  __device__ bool sees(int kpos, int pos) const {
    // TODO(ch12): return whether the key at position kpos (>= 0) of the sequence lies inside
    //   the sliding window of the query row at position pos (>= 0): the `window` keys that end
    //   at the row's own key, its own included. The kernel calls it only for keys it has
    //   already found inside the work item's [kv_begin, kv_end) and not after pos (chapter
    //   10's causal mask), and hides the key when it returns false. Tests:
    //   Ch12/WindowGolden.*.
    return false;
  }
  // ANCHOR_END: sees

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
    //   Ch12/WindowGolden.* (sinks), Ch12WindowSplits.*.
    // (your code here)
  }
  // ANCHOR_END: fold_sink
};
// ANCHOR_END: window_mask

}  // namespace pa::ch12
