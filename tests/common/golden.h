// golden.h: the golden cases that reference/pa_ref/golden.py writes, seen from C++.
//
// A case is a directory <golden root>/chNN/<case name>/ with one <array>.npy per
// array and a case.txt of "key value" lines (the value is the rest of the line).
// The golden root is the compile definition PA_GOLDEN_DIR, which the build sets;
// the environment variable PA_GOLDEN_DIR overrides it at run time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "npy.h"

namespace pa::test {

class GoldenCase {
public:
    // Reads dir/case.txt; throws if it is missing.
    explicit GoldenCase(std::string dir);

    // The case's directory name, e.g. "decode_fp16_d64_g2_odd".
    const std::string& name() const { return name_; }
    const std::string& dir() const { return dir_; }

    // The array stored in dir/<array_name>.npy.
    NpyArray array(const std::string& array_name) const;

    // That array's elements converted to T.
    template <class T>
    std::vector<T> get(const std::string& array_name) const {
        return array(array_name).as<T>();
    }

    // That array's shape ({} for a 0-d array).
    std::vector<int64_t> shape(const std::string& array_name) const;

    // A value from case.txt; param() throws if the key is missing.
    std::string param(const std::string& key) const;
    bool has_param(const std::string& key) const;
    int64_t param_int(const std::string& key) const;
    double param_double(const std::string& key) const;

private:
    std::string dir_;
    std::string name_;
    std::map<std::string, std::string> params_;
};

// The cases in chapter_dir whose names start with prefix, sorted by name.
// Throws, telling the user to run the golden step, when there are none.
std::vector<GoldenCase> golden_cases(const std::string& chapter_dir, const std::string& prefix = "");

// Just the names of those cases, for INSTANTIATE_TEST_SUITE_P, e.g.
// golden_case_names("ch02", "gather_").
std::vector<std::string> golden_case_names(const std::string& chapter, const std::string& prefix);

// The directory of a chapter's cases, e.g. golden_dir("ch01").
std::string golden_dir(const std::string& chapter);

}  // namespace pa::test
