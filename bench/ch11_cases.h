// Chapter 11's benchmark cases, read from bench/ch11_cases.txt: the one list that bench_ch11
// and bench/bench_flashinfer_mla.py (through bench/ch11_cases.py) both run, by the same
// names. The file's format is described at its top; this parser and ch11_cases.py's must
// agree (bench/test_bench_ch11.py compiles this header with the host compiler and compares
// the two on the real file and on bad lines). Plain C++, no CUDA: header-only.
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace pa::bench::ch11cases {

struct MlaCase {
  std::string name;
  int hq = 0, s_q = 0;
  std::vector<int> lens;  // cache lengths, new tokens included
  int block = 0;
};

// n lengths log-uniform in [lo, hi], from a fixed hash (no RNG state): ch11_cases.py's
// ragged_lengths, to the last digit.
inline std::vector<int> ragged_lengths(int n, int lo, int hi, int seed) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    const double h = double((uint64_t(i + 1) * 2654435761ull + uint64_t(seed) * 40503ull) % (1ull << 32)) /
                     double(1ull << 32);
    out.push_back(int(std::lround(std::exp(std::log(lo) + h * (std::log(hi) - std::log(lo))))));
  }
  return out;
}

inline std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const auto b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

// Whole-token integer, else throws "bad <what> 'text'".
inline int to_int(const std::string& text, const char* what) {
  size_t used = 0;
  int v = 0;
  try {
    v = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) throw std::runtime_error(std::string("bad ") + what + " '" + text + "'");
  return v;
}

// "B x L" or "ragged N LO HI SEED".
inline std::vector<int> parse_lengths(const std::string& spec) {
  std::istringstream in(spec);
  std::vector<std::string> w;
  for (std::string t; in >> t;) w.push_back(t);
  if (w.size() == 3 && w[1] == "x") {
    const int b = to_int(w[0], "batch"), l = to_int(w[2], "length");
    if (b < 1 || l < 1) throw std::runtime_error("batch and length must be >= 1 in '" + spec + "'");
    return std::vector<int>(size_t(b), l);
  }
  if (w.size() == 5 && w[0] == "ragged") {
    const int n = to_int(w[1], "count"), lo = to_int(w[2], "lo"), hi = to_int(w[3], "hi"),
              seed = to_int(w[4], "seed");
    if (n < 1 || lo < 1 || hi < lo) throw std::runtime_error("need n >= 1 and 1 <= lo <= hi in '" + spec + "'");
    return ragged_lengths(n, lo, hi, seed);
  }
  throw std::runtime_error("lengths '" + spec + "' is neither 'B x L' nor 'ragged N LO HI SEED'");
}

// The cases of the file's text (the '## title' and '= name' lines are the comparison's:
// skipped, but a '= name' must name a case of the file). Throws std::runtime_error
// "LINE_NO: why" on the first bad line.
inline std::vector<MlaCase> parse_cases(const std::string& text) {
  std::vector<MlaCase> cases;
  std::set<std::string> names;
  std::vector<std::pair<int, std::string>> refs;
  std::istringstream in(text);
  int no = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++no;
    const std::string line = trim(raw);
    if (line.empty() || line[0] == '#') continue;
    try {
      if (line[0] == '=') {
        refs.emplace_back(no, trim(line.substr(1)));
        continue;
      }
      std::vector<std::string> f;
      std::istringstream fields(line);
      for (std::string t; std::getline(fields, t, '|');) f.push_back(trim(t));
      if (f.size() != 5) throw std::runtime_error("want 5 fields 'name | h_q | s_q | lengths | block'");
      MlaCase c;
      c.name = f[0];
      c.hq = to_int(f[1], "h_q");
      c.s_q = to_int(f[2], "s_q");
      c.lens = parse_lengths(f[3]);
      c.block = to_int(f[4], "block size");
      if (c.name.empty()) throw std::runtime_error("empty name");
      if (c.name.find('"') != std::string::npos) throw std::runtime_error("a name may not hold '\"' (CSV)");
      if (!names.insert(c.name).second) throw std::runtime_error("case '" + c.name + "' defined twice");
      if (c.hq < 1 || c.hq > 128) throw std::runtime_error("h_q must be in 1..128");
      if (c.s_q < 1 || c.s_q > 4) throw std::runtime_error("s_q must be in 1..4");
      if (c.block != 16 && c.block != 32 && c.block != 64) throw std::runtime_error("block size must be 16, 32 or 64");
      for (int L : c.lens)
        if (L < c.s_q) throw std::runtime_error("a length is shorter than s_q");
      cases.push_back(std::move(c));
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(std::to_string(no) + ": " + e.what());
    }
  }
  for (const auto& [line_no, name] : refs)
    if (!names.count(name)) throw std::runtime_error(std::to_string(line_no) + ": '= " + name + "' names no case");
  if (cases.empty()) throw std::runtime_error("no cases");
  return cases;
}

inline std::vector<MlaCase> read_cases(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::stringstream text;
  text << f.rdbuf();
  try {
    return parse_cases(text.str());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path + ":" + e.what());
  }
}

}  // namespace pa::bench::ch11cases
