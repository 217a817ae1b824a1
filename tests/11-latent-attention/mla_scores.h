// Chapter 11's scores exercise on its own (MlaDecode::run_scores): the scores of a stage of
// keys against the reference, and a batch whose every score names the element it read.
// A failure names the row (sequence, new token, head) and the key, and says what is wrong:
// a key that should be masked, a row's max, a score; or, for the named elements, which
// chunk of the key row was read and from which address it was stepped.
#pragma once

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "mla_case.h"

namespace pa::test {

// The keys a run_scores test reads: one 64-key stage (two of the 4-warp blocks' stages).
inline constexpr int kScoreKeys = 64;
inline constexpr const char* kAllZero =
    "every score is exactly 0, as the given code zeroes sc before the exercise: the scores exercise is not "
    "done yet (mla_kernel.cuh, TODO(ch11) above \"the scores\")";

// Keys a stage of `block` holds (the 8-warp blocks 64, the 4-warp ones 32).
inline int stage_tokens_of(ch11::MlaBlock block) { return 32 * ch11::row_groups_of(block); }

inline std::string row_words(int b, int i, int pos, int h) {
  std::ostringstream os;
  os << "sequence " << b << ", new token " << i << " (position " << pos << "), head " << h;
  return os.str();
}

// got [T, H, kScoreKeys] from run_scores (NaN where the kernel wrote nothing), want the
// reference's (-inf where the row does not attend the key). kv_cut: the items' end
// (37), or a large number for the whole context. A row's item runs the stages up to its
// end, so the kernel must have written every key of those (of stages of `stage` keys).
inline ::testing::AssertionResult scores_match(const std::vector<float>& got, const std::vector<double>& want,
                                               const std::vector<int>& qsl, const std::vector<int>& seq_lens,
                                               int heads, int stage, int kv_cut, double atol, double rtol) {
  constexpr int K = kScoreKeys;
  int64_t n_unwritten = 0, n_unmasked = 0, n_masked = 0, n_wrong = 0, n_rows = 0, n_bad_max = 0, compared = 0,
          zeros = 0;
  std::ostringstream unwritten, unmasked, masked, wrong, bad_max;
  double max_err = 0.0;
  for (size_t b = 0; b + 1 < qsl.size(); ++b) {
    const int n = qsl[b + 1] - qsl[b], len = seq_lens[b];
    for (int i = 0; i < n; ++i) {
      const int pos = len - n + i, row = qsl[b] + i;
      const int end = std::min({pos + 1, kv_cut, K});
      const int must = std::min(K, (end + stage - 1) / stage * stage);  // the stages the row's item ran at least
      for (int h = 0; h < heads; ++h) {
        ++n_rows;
        const float* g = got.data() + (int64_t(row) * heads + h) * K;
        const double* w = want.data() + (int64_t(row) * heads + h) * K;
        double got_max = -INFINITY, want_max = -INFINITY;
        bool row_written = true;
        for (int k = 0; k < K; ++k) {
          if (bits_of(g[k]) == bits_of(output_poison<float>())) {
            if (k < must && n_unwritten++ == 0)
              unwritten << "\n    first: " << row_words(int(b), i, pos, h) << ", key " << k;
            row_written &= k >= must;
            continue;
          }
          ++compared;
          zeros += g[k] == 0.f;
          want_max = std::max(want_max, w[k]);
          got_max = std::max(got_max, double(g[k]));
          const char* why = k > pos ? "after the row's own position" : k >= len ? "past the sequence"
                                                                                 : "at or past the item's end";
          if (std::isinf(w[k]) && !(std::isinf(g[k]) && g[k] < 0)) {
            if (n_unmasked++ < 3)
              unmasked << "\n    " << row_words(int(b), i, pos, h) << ", key " << k << " (" << why
                       << (k >= kv_cut ? ": the item stops at key " + std::to_string(kv_cut) : std::string())
                       << "): got " << value_text(g[k]) << ", want -inf";
          } else if (!std::isinf(w[k]) && std::isinf(g[k]) && g[k] < 0) {
            if (n_masked++ < 3)
              masked << "\n    " << row_words(int(b), i, pos, h) << ", key " << k << ": got -inf, want "
                     << value_text(w[k]) << " (the row attends keys 0-" << end - 1 << ")";
          } else if (!std::isinf(w[k])) {
            const double err = std::abs(double(g[k]) - w[k]);
            if (!(err <= atol + rtol * std::abs(w[k]))) {
              max_err = std::max(max_err, std::isnan(err) ? INFINITY : err);
              if (n_wrong++ == 0)
                wrong << "\n    first at " << row_words(int(b), i, pos, h) << ", key " << k << ": got "
                      << value_text(g[k]) << ", want " << value_text(w[k]) << " (error " << value_text(err, 4) << ")";
            }
          }
        }
        if (row_written && !std::isinf(want_max) && std::abs(got_max - want_max) > atol + rtol * std::abs(want_max)) {
          if (n_bad_max++ == 0)
            bad_max << "\n    first at " << row_words(int(b), i, pos, h) << ": got " << value_text(got_max)
                    << ", want " << value_text(want_max);
        }
      }
    }
  }
  if (!n_unwritten && !n_unmasked && !n_masked && !n_wrong && !n_bad_max && compared > 0)
    return ::testing::AssertionSuccess();
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  r << "the scores of keys 0-" << K - 1 << " (base 2: q . row * scale * log2(e); -inf where masked):";
  if (compared == 0) r << "\n  no score was written at all (run_scores stops after the scores exercise: it is a stub?)";
  if (compared > 0 && zeros == compared) r << "\n  " << kAllZero;
  if (n_unwritten)
    r << "\n  " << n_unwritten << " scores of keys the row's item ran were never written" << unwritten.str();
  if (n_unmasked) r << "\n  masked keys: " << n_unmasked << " scored, want -inf" << unmasked.str();
  if (n_masked) r << "\n  attended keys: " << n_masked << " masked (-inf), want a score" << masked.str();
  if (n_bad_max) r << "\n  row maxima: " << n_bad_max << " of " << n_rows << " rows differ" << bad_max.str();
  if (n_wrong)
    r << "\n  scores: " << n_wrong << " of " << compared << " differ, max abs error " << value_text(max_err, 4)
      << " (atol " << atol << ", rtol " << rtol << ")" << wrong.str();
  return r;
}

// ---- Scores that name the element they read ------------------------------------------
//
// A batch built so that every score is one element of a key row: query row R is 1 at one
// column c(R) and 0 elsewhere, and every key row k holds at column c the number
// c + 1 + 576 (k % 3) (exact in fp16), with scale = ln 2 (scale * log2(e) = 1). So the
// score of row R against key k is the number stored where the kernel read "column c(R) of
// key k": it names the column (and, mod 3, the key row) that was read.
struct ColumnProbe {
  static constexpr int kHeads = 16, kSeqs = 5, kLen = kScoreKeys, kBlockSize = 16;
  static constexpr int kRows = kHeads * kSeqs;  // one new token a sequence: 80 query rows
  static int column_of(int row) {
    const int chunk = row < 72 ? row : (row - 72) * 9 % 72;  // every chunk of the 72, then 8 again
    return 8 * chunk + row % 8;
  }
  static int value_of(int key, int col) { return col + 1 + ch11::kRowWidth * (key % 3); }
};

// What the kernel read for (query column c, key k), decoded from the score: the column and
// the key row (k - 1, k or k + 1, by its value mod 3), or col -1 if the score is no element.
struct ReadElement {
  int col = -1, key = -1;
};
inline ReadElement decode_read(float score, int key) {
  const double v = std::nearbyint(double(score));
  if (!std::isfinite(score) || std::abs(double(score) - v) > 0.05 || v < 1 || v > 3 * ch11::kRowWidth) return {};
  const int x = int(v) - 1, col = x % ch11::kRowWidth, mod = x / ch11::kRowWidth;
  for (int d : {0, 1, -1})
    if (key + d >= 0 && (key + d) % 3 == mod) return {col, key + d};
  return {};
}

// got [kRows, kScoreKeys] from run_scores on the probe batch: success, or which elements
// were read, which chunks are right, and (when the reads fit it) the step that went wrong.
inline ::testing::AssertionResult probe_reads_right(const std::vector<float>& got) {
  constexpr int K = kScoreKeys, W = ch11::kRowWidth, kChunks = ch11::kRowWidth / 8;
  int64_t bad = 0, misread = 0, misread_in_unswizzled_rows = 0, nans = 0, unwritten = 0, masked = 0, zeros = 0;
  std::vector<bool> masked_keys(K, false);
  std::vector<bool> chunk_wrong(kChunks, false), chunk_seen(kChunks, false);
  std::ostringstream first;
  // Per query chunk: the wrong reads, to test "chunk c read at chunk_at(base) + (c - base) chunks".
  struct WrongRead {
    int key;
    ReadElement read;
    int col;  // the query's column
  };
  std::vector<std::vector<WrongRead>> reads(kChunks);
  for (int R = 0; R < ColumnProbe::kRows; ++R) {
    const int c = ColumnProbe::column_of(R), ch = c / 8;
    chunk_seen[size_t(ch)] = true;
    for (int k = 0; k < K; ++k) {
      const float s = got[size_t(R) * K + k];
      if (std::isnan(s)) {
        // Never written (the poison), or a NaN that some k-step read: past the stage's rows,
        // 0 x NaN is NaN whatever the query's column, so it names no element.
        if (bits_of(s) == bits_of(output_poison<float>())) ++unwritten;
        else ++nans;
        continue;
      }
      if (std::isinf(s) && s < 0) {  // every row here (position 63) attends all 64 keys
        ++masked;
        masked_keys[size_t(k)] = true;
        continue;
      }
      const ReadElement e = decode_read(s, k);
      if (e.col == c && e.key == k) continue;
      ++bad;
      zeros += s == 0.f;
      if (e.col >= 0) {  // an element, but not this one: the chunk (or row) read is the wrong one
        ++misread;
        chunk_wrong[size_t(ch)] = true;
        misread_in_unswizzled_rows += k % 8 == 0;
        reads[size_t(ch)].push_back({k, e, c});
      }
      if (bad <= 4) {
        first << "\n    query column " << c << " (chunk " << ch << ", element " << c % 8 << "; k-step " << c / 16
              << ") with key " << k << " (row " << k << " of the stage, " << k << " % 8 = " << k % 8 << "): ";
        if (e.col < 0) first << "got " << value_text(s) << ", which is no single element (want " << c + 1 + W * (k % 3) << ")";
        else
          first << "read column " << e.col << " (chunk " << e.col / 8 << ", element " << e.col % 8 << ")"
                << (e.key != k ? " of key row " + std::to_string(e.key) : std::string());
      }
    }
  }
  if (bad == 0 && nans == 0 && unwritten == 0 && masked == 0) return ::testing::AssertionSuccess();
  std::vector<bool> right(kChunks, false);
  for (int ch = 0; ch < kChunks; ++ch) right[size_t(ch)] = chunk_seen[size_t(ch)] && !chunk_wrong[size_t(ch)];
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  r << bad << " of " << ColumnProbe::kRows * K << " scores read another element than their query's column"
    << " (query row R is 1 at one column, key row k holds c + 1 + 576 (k % 3) at column c: the score is"
    << " the element read)" << first.str();
  if (zeros == int64_t(ColumnProbe::kRows) * K) r << "\n  " << kAllZero;
  if (masked)
    r << "\n  " << masked << " scores are -inf, but every query row here is a sequence's one new token at position "
      << ColumnProbe::kLen - 1 << ": it attends every key 0-" << K - 1 << "; masked keys: " << index_ranges(masked_keys);
  if (unwritten) r << "\n  " << unwritten << " scores never written (run_scores stops after the scores exercise)";
  if (nans)
    r << "\n  " << nans << " scores are NaN: a k-step read a NaN, outside the stage's rows (0 x NaN is NaN, so"
      << " they name no element and are left out below)";
  if (misread == 0) return r;
  r << "\n  chunks of the key row read right for every key: " << index_ranges(right)
    << "\n  chunks read wrong for some key: " << index_ranges(chunk_wrong);
  // The step: chunk c read at chunk_at(k, base) + (c - base) chunks, for one base < c, in every wrong read.
  int shown = 0;
  for (int ch = 0; ch < kChunks && shown < 3; ++ch) {
    if (reads[size_t(ch)].empty()) continue;
    for (int base = ch - 1; base >= 0; --base) {
      bool fits = true;
      for (const auto& [k, e, c] : reads[size_t(ch)]) {
        if (e.col < 0) { fits = false; break; }
        // Where the kernel read, as a chunk of the stage (rows of 72 swizzled chunks), and
        // where chunk_at(k, base) + (ch - base) chunks lands.
        const int64_t read_at = int64_t(e.key) * kChunks + ((e.col / 8) ^ (e.key & 7));
        const int64_t stepped = int64_t(k) * kChunks + (base ^ (k & 7)) + (ch - base);
        if (read_at != stepped || e.col % 8 != c % 8) { fits = false; break; }
      }
      if (fits) {
        if (shown++ == 0) r << "\n  the addresses that were read:";
        r << "\n    chunk " << ch << " of key row k was read at chunk_at(kv, kRowChunks, k, " << base << ") + "
          << ch - base << " chunks (" << 16 * (ch - base) << " bytes): a step inside a group of 8 chunks";
        break;
      }
    }
  }
  if (misread_in_unswizzled_rows == 0)
    r << "\n  every chunk was read right in the key rows k % 8 == 0, where the swizzle moves no chunk: an"
         " address was stepped from another chunk's as if the row's chunks lay in order."
         "\n  From an address chunk_at gave, the one step that works is a whole group of 8 chunks (64 elements,"
         " 128 bytes); chunk c + 1 of row r is at chunk (c + 1) ^ (r % 8), not next to chunk c: ask chunk_at for"
         " each chunk of a group (mla_kernel.cuh, chunk_at).";
  return r;
}

}  // namespace pa::test
