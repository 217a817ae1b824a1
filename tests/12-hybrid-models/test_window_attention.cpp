// Chapter 12: chapter 10's varlen kernel with this chapter's mask policy (window_mask.cuh):
// sliding windows, attention sinks and a logit soft-cap, on decodes, prefill chunks and
// mixed steps, against the float64 reference (reference/pa_ref/window.py; golden cases win_*
// from golden_ch12.py). Block 0 of every case's pool is the null block, all NaN, and every
// table entry that no row of the step sees points at it: a kernel that reads a block the
// window left behind puts NaN in its output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "compare.h"
#include "golden.h"
#include "pa/ch12_hybrid.h"
#include "pa/ch12_window.h"

namespace {

using pa::ch10::Plan;
using pa::ch10::VarlenShape;
using pa::ch12::WindowAttention;
using pa::ch12::WindowOptions;
using pa::test::GoldenCase;

pa::test::Dims out_dims(const VarlenShape& s) {
  return {{"query token", s.num_tokens}, {"head", s.num_q_heads}, {"d", s.head_size}};
}

template <typename T>
struct WindowCase {
  explicit WindowCase(const GoldenCase& c) : name(c.name()), note(c.param("note")) {
    const auto qs = c.shape("q"), ks = c.shape("k_pool"), ts = c.shape("block_table");
    shape = VarlenShape{int(ts[0]), int(qs[0]), int(qs[1]), int(ks[1]), int(qs[2]),
                        int(ks[3]), int(ks[0]), int(ts[1])};
    opt.window = int(c.param_int("window"));
    if (c.param_int("sinks")) opt.sinks = c.get<float>("sinks");
    opt.softcap = float(c.param_double("softcap"));
    table = c.get<int>("block_table");
    seq_lens = c.get<int>("seq_lens");
    qsl = c.get<int>("query_start_loc");
    expected = c.get<double>("expected");
    scale = float(c.get<double>("scale")[0]);
    atol = c.param_double("atol");
    rtol = c.param_double("rtol");
    q = pa::DeviceBuffer<T>(pa::test::to_dtype<T>(c.get<float>("q")));
    k_pool = pa::DeviceBuffer<T>(pa::test::to_dtype<T>(c.get<float>("k_pool")));
    v_pool = pa::DeviceBuffer<T>(pa::test::to_dtype<T>(c.get<float>("v_pool")));
    d_table = pa::DeviceBuffer<int>(table);
    d_lens = pa::DeviceBuffer<int>(seq_lens);
    d_qsl = pa::DeviceBuffer<int>(qsl);
    out = pa::DeviceBuffer<T>(expected.size());
  }

  // Plans (with the window; or `hand`, a plan made elsewhere), poisons the output and the
  // workspace, runs and returns the output.
  std::vector<T> run(WindowAttention& attn, int chunk_tokens = 0, int grid = 0, const Plan* hand = nullptr) {
    if (hand)
      attn.use_plan(shape, pa::dtype_of<T>(), *hand, opt);
    else
      attn.plan(shape, pa::dtype_of<T>(), table, seq_lens, qsl, opt, chunk_tokens, grid);
    attn.poison_workspace();
    pa::test::poison(out);
    attn.run<T>(out.get(), q.get(), k_pool.get(), v_pool.get(), d_table.get(), d_lens.get(), d_qsl.get(),
                scale);
    return out.download();
  }

  // Which sequence, new token and position the first query token outside the tolerance is,
  // and the keys its window sees: the row to follow in the kernel.
  std::string first_bad_row(const std::vector<T>& got) const {
    const size_t row = size_t(shape.num_q_heads) * shape.head_size;
    for (size_t i = 0; i < got.size(); ++i) {
      const double g = pa::to_float(got[i]), w = expected[i];
      if (std::fabs(g - w) <= atol + rtol * std::fabs(w)) continue;
      const int token = int(i / row), head = int(i % row) / shape.head_size;
      const int b = int(std::upper_bound(qsl.begin(), qsl.end(), token) - qsl.begin()) - 1;
      const int n = qsl[size_t(b) + 1] - qsl[size_t(b)], pos = seq_lens[size_t(b)] - n + (token - qsl[size_t(b)]);
      std::ostringstream os;
      os << "the first bad row: query token " << token << " = sequence " << b << "'s new token "
         << token - qsl[size_t(b)] << " of " << n << ", head " << head << ", at position " << pos
         << ": it sees keys " << std::max(0, pos - opt.window + 1) << " .. " << pos << " (window "
         << opt.window << (opt.sinks.empty() ? "" : ", sinks") << (opt.softcap > 0 ? ", soft-cap" : "") << ")";
      return os.str();
    }
    return "no row outside the tolerance";
  }

  std::string name, note;
  VarlenShape shape;
  WindowOptions opt;
  std::vector<int> table, seq_lens, qsl;
  std::vector<double> expected;
  float scale;
  double atol, rtol;
  pa::DeviceBuffer<T> q, k_pool, v_pool, out;
  pa::DeviceBuffer<int> d_table, d_lens, d_qsl;
};

std::string plan_text(const Plan& p) {
  int split = 0;
  for (const auto& w : p.items) split += w.num_splits > 1;
  std::ostringstream os;
  os << "plan: grid " << p.grid << ", " << p.items.size() << " items (" << split << " of split tiles, "
     << p.num_counters << " split tiles)";
  if (p.chunk_tokens) os << ", chunks of " << p.chunk_tokens << " tokens";
  return os.str();
}

template <typename T>
void expect_case(WindowCase<T>& c, const std::vector<T>& got, const WindowAttention& attn, const std::string& how) {
  EXPECT_TRUE(pa::test::all_close(got, c.expected, out_dims(c.shape), c.atol, c.rtol))
      << c.name << ", " << how << ": " << c.note << "\n  " << c.first_bad_row(got) << "\n  "
      << plan_text(attn.host_plan());
}

// The planner's chunks, and small grids (many items per thread block).
template <typename T>
void check_planned(const GoldenCase& g) {
  WindowCase<T> c(g);
  WindowAttention attn;
  for (int grid : {0, 1, 3}) {
    const std::vector<T> got = c.run(attn, 0, grid);
    expect_case(c, got, attn, "the planner's plan, grid " + std::to_string(grid) + " (0: a wave)");
    if (::testing::Test::HasFailure()) break;  // the first grid that fails names the rows
  }
}

// Forced small chunks: a row's keys split over several items, merged by the last; the sink
// must join the row's softmax once, not once per chunk.
template <typename T>
void check_splits(const GoldenCase& g) {
  WindowCase<T> c(g);
  WindowAttention attn;
  for (int chunk : {64, 128}) {
    const std::vector<T> got = c.run(attn, chunk, 3);
    expect_case(c, got, attn, "forced chunks of " + std::to_string(chunk) + " tokens");
  }
}

// A plan that does not know the window (chapter 10's, every tile from key 0): the kernel
// itself must start each item at the first stage its rows can see. An item that reads a
// block the window left behind reads the NaN null block.
template <typename T>
void check_unwindowed_plan(const GoldenCase& g) {
  WindowCase<T> c(g);
  WindowAttention attn;
  for (int chunk : {0, 64}) {
    const Plan plan = pa::ch10::make_plan(c.shape, c.seq_lens, c.qsl, 5, chunk);
    const std::vector<T> got = c.run(attn, 0, 0, &plan);
    expect_case(c, got, attn,
                "a plan from key 0 (make_plan without the window), chunk_tokens " + std::to_string(chunk));
  }
}

class WindowGolden : public ::testing::TestWithParam<std::string> {
 protected:
  template <template <typename> class F>
  void dispatch() {
    const GoldenCase g(pa::test::golden_dir("ch12") + "/" + GetParam());
    if (g.param("dtype") == "bf16") F<pa::bf16>::run(g);
    else F<half>::run(g);
  }
};
template <typename T> struct Planned { static void run(const GoldenCase& g) { check_planned<T>(g); } };
template <typename T> struct Splits { static void run(const GoldenCase& g) { check_splits<T>(g); } };
template <typename T> struct Unwindowed { static void run(const GoldenCase& g) { check_unwindowed_plan<T>(g); } };

TEST_P(WindowGolden, MatchesReference) { dispatch<Planned>(); }
TEST_P(WindowGolden, SplitRowsTakeTheSinkOnce) { dispatch<Splits>(); }
TEST_P(WindowGolden, KernelSkipsWhatNoRowSees) { dispatch<Unwindowed>(); }

INSTANTIATE_TEST_SUITE_P(Ch12, WindowGolden,
                         ::testing::ValuesIn(pa::test::golden_case_names("ch12", "win_")),
                         [](const auto& info) { return info.param; });

// The planner with a window prices and covers only the keys a tile's rows can see: a 32K
// decode with a 1,024 window costs what a 1K decode costs.
TEST(Ch12WindowPlan, PricesOnlyTheKeysTheWindowSees) {
  const int B = 32, len = 32768, window = 1024;
  const VarlenShape s{B, B, 32, 8, 128, 16, B * len / 16 + 1, len / 16};
  std::vector<int> lens(B, len), qsl(B + 1);
  for (int b = 0; b <= B; ++b) qsl[size_t(b)] = b;
  const Plan full = pa::ch10::make_plan(s, lens, qsl, 132, 0);
  const Plan win = pa::ch10::make_plan(s, lens, qsl, 132, 0, window);
  std::vector<int> short_lens(B, window);
  const Plan one_k = pa::ch10::make_plan(s, short_lens, qsl, 132, 0);
  int64_t tokens = 0;
  for (const auto& w : win.items) {
    EXPECT_FALSE(w.by_warp) << "a plan with a window has no warp items (they know no mask)";
    EXPECT_GE(w.kv_begin, len - window - 15) << "item of sequence " << w.seq << " starts at key " << w.kv_begin
                                             << ", left of the window's first block";
    EXPECT_EQ(w.kv_begin % 16, 0) << "item of sequence " << w.seq;
    tokens += w.kv_end - w.kv_begin;
  }
  EXPECT_LE(tokens, int64_t(B) * 8 * (window + 16)) << plan_text(win);
  EXPECT_NEAR(win.target_cost, one_k.target_cost, 0.02 * one_k.target_cost)
      << "the window's plan should cost what a 1K context costs; the full 32K plan's target is "
      << full.target_cost;
}

// A window of 0 is "no window": chapter 10's plan, item for item.
TEST(Ch12WindowPlan, WindowZeroIsChapter10sPlan) {
  const VarlenShape s{3, 41, 8, 2, 64, 16, 200, 64};
  const std::vector<int> lens{300, 45, 1000}, qsl{0, 1, 33, 41};
  const Plan a = pa::ch10::make_plan(s, lens, qsl, 7, 0), b = pa::ch10::make_plan(s, lens, qsl, 7, 0, 0);
  ASSERT_EQ(a.items.size(), b.items.size());
  for (size_t i = 0; i < a.items.size(); ++i) {
    EXPECT_EQ(a.items[i].kv_begin, b.items[i].kv_begin) << "item " << i;
    EXPECT_EQ(a.items[i].kv_end, b.items[i].kv_end) << "item " << i;
  }
}

// Bad input: clear errors, before anything reaches the device.
TEST(Ch12WindowErrors, BadOptionsAndNullBlocksInTheWindow) {
  const VarlenShape s{2, 2, 8, 2, 64, 16, 20, 4};
  const std::vector<int> lens{40, 20}, qsl{0, 1, 2};
  std::vector<int> table{1, 2, 3, 0, 4, 5, 0, 0};
  WindowAttention attn;
  WindowOptions opt;
  opt.window = 0;
  EXPECT_TRUE(pa::test::error_contains([&] { attn.plan(s, pa::DType::fp16, table, lens, qsl, opt); },
                                       "window must be positive, got 0"));
  opt.window = -3;
  EXPECT_TRUE(pa::test::error_contains([&] { attn.plan(s, pa::DType::fp16, table, lens, qsl, opt); },
                                       "window must be positive, got -3"));
  opt.window = 16;
  opt.sinks = std::vector<float>(2, 0.f);  // one per KV head: the wrong shape
  EXPECT_TRUE(pa::test::error_contains([&] { attn.plan(s, pa::DType::fp16, table, lens, qsl, opt); },
                                       "sinks: one per query head: expected 8 logits (Hq), got 2"));
  opt.sinks = std::vector<float>(8, 0.f);
  opt.sinks[3] = NAN;
  EXPECT_TRUE(pa::test::error_contains([&] { attn.plan(s, pa::DType::fp16, table, lens, qsl, opt); },
                                       "the sink of query head 3 is nan"));
  opt.sinks.clear();
  opt.softcap = -1.f;
  EXPECT_TRUE(pa::test::error_contains([&] { attn.plan(s, pa::DType::fp16, table, lens, qsl, opt); },
                                       "softcap must be 0 (none) or positive, got -1"));
  opt.softcap = 0.f;
  // Sequence 0 decodes at position 39 with a window of 16: it sees 24 .. 39, blocks 1 and 2.
  // Block 0 may be null; block 1 may not.
  table = {0, 2, 3, 0, 4, 5, 0, 0};
  EXPECT_NO_THROW(attn.plan(s, pa::DType::fp16, table, lens, qsl, opt));
  table = {1, 0, 3, 0, 4, 5, 0, 0};
  EXPECT_TRUE(pa::test::error_contains([&] { attn.plan(s, pa::DType::fp16, table, lens, qsl, opt); },
                                       "sequence 0: block table entry 1 is the null block (0), but position 24"));
  table = {1, 2, 3, 0, 4, 5, 0, 0};
  EXPECT_TRUE(pa::test::error_contains([&] { attn.plan(s, pa::DType::fp32, table, lens, qsl, opt); },
                                       "half or bf16"));
}

}  // namespace
