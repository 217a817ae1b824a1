// commit_seed.h: a seed for a property test's rotating run that changes with the code under
// test, not with the clock. The same commit draws the same traces on every machine and every
// run, so a failure CI finds replays on that commit; a new commit draws new ones.
//
// Where the commit comes from, first found first: the environment variable `replay` (a seed
// printed by an earlier run: used as it is), PA_COMMIT, GITHUB_SHA, CI_COMMIT_SHA, then
// `git rev-parse HEAD` run in the working directory (a test binary runs inside the clone).
// With none of them (a tarball), the fallback seed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace pa::test {

struct CommitSeed {
  uint64_t seed = 0;
  std::string source;  // what it was derived from, for the test's output
};

inline std::string trimmed_commit(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// A property test's knob from the environment (PA_PRESSURE_TRACES=400, ...), else FALLBACK.
inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

inline CommitSeed commit_seed(const char* replay, uint64_t fallback) {
  if (const char* v = std::getenv(replay); v && *v)
    return {std::strtoull(v, nullptr, 10), std::string(replay) + " (replayed)"};
  std::string commit, from;
  for (const char* name : {"PA_COMMIT", "GITHUB_SHA", "CI_COMMIT_SHA"})
    if (const char* v = std::getenv(name); v && *v) {
      commit = trimmed_commit(v);
      from = name;
      break;
    }
  if (commit.empty()) {
    if (FILE* p = popen("git rev-parse HEAD 2>/dev/null", "r")) {
      char buf[128] = {0};
      if (std::fgets(buf, sizeof buf, p)) commit = trimmed_commit(buf);
      pclose(p);
      from = "git rev-parse HEAD";
    }
  }
  if (commit.size() < 7) return {fallback, "no commit found: the fallback seed"};
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the commit's hex digits
  for (char c : commit) h = (h ^ uint64_t(uint8_t(c))) * 0x100000001b3ull;
  return {h % 1000000007u, "commit " + commit.substr(0, 12) + " (" + from + ")"};
}

}  // namespace pa::test
