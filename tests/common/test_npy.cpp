// test_npy.cpp: the .npy reader and the golden-case helpers, on files written here.
//
// Each test writes its own small files by hand (a version 1.0 header and raw
// little-endian data, as np.save would), so the reader is checked against the
// format itself and not against the generator it serves.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "golden.h"
#include "npy.h"

namespace fs = std::filesystem;
using pa::test::GoldenCase;
using pa::test::golden_cases;
using pa::test::golden_dir;
using pa::test::load_npy;

namespace {

// A .npy file's bytes: magic, version, header length, padded header, data.
std::string npy_file(const std::string& dict, const void* data, size_t data_bytes, int major = 1) {
    const size_t length_bytes = major == 1 ? 2 : 4;
    std::string header = dict;
    // np.save pads with spaces so that the data starts at a multiple of 64 bytes.
    while ((6 + 2 + length_bytes + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::string out = "\x93NUMPY";
    out += static_cast<char>(major);
    out += '\0';
    for (size_t i = 0; i < length_bytes; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
    out += header;
    out.append(static_cast<const char*>(data), data_bytes);
    return out;
}

// Runs `action`, expecting a std::runtime_error whose message contains every one of `parts`.
void expect_error(const std::function<void()>& action, const std::vector<std::string>& parts) {
    try {
        action();
        ADD_FAILURE() << "expected a std::runtime_error";
    } catch (const std::runtime_error& error) {
        const std::string message = error.what();
        for (const std::string& part : parts) {
            EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' missing from: " << message;
        }
    }
}

// Every test gets a fresh temporary directory, removed afterwards.
class NpyTest : public ::testing::Test {
protected:
    void SetUp() override {
        std::random_device random;
        dir_ = fs::temp_directory_path() / ("pa_npy_test_" + std::to_string(random()));
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }

    // Writes bytes to dir_/name and returns the path.
    std::string write(const std::string& name, const std::string& bytes) {
        const fs::path path = dir_ / name;
        fs::create_directories(path.parent_path());
        std::ofstream(path, std::ios::binary) << bytes;
        return path.string();
    }

    fs::path dir_;
};

const float kFloats[6] = {1.5f, -2.25f, 0.0f, 3.0e-8f, -1.0e30f, 7.0f};

TEST_F(NpyTest, Float32Matrix) {
    const auto path = write("m.npy", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                              kFloats, sizeof(kFloats)));
    const auto array = load_npy(path);
    EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(array.dtype, "<f4");
    EXPECT_EQ(array.size(), 6u);
    EXPECT_EQ(array.as<float>(), std::vector<float>(kFloats, kFloats + 6));
    const auto widened = array.as<double>();
    for (int i = 0; i < 6; ++i) EXPECT_EQ(widened[i], static_cast<double>(kFloats[i]));
}

TEST_F(NpyTest, Int32Scalar) {
    const int32_t value = -123456;
    const auto path = write("s.npy", npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (), }",
                                              &value, sizeof(value)));
    const auto array = load_npy(path);
    EXPECT_TRUE(array.shape.empty());
    EXPECT_EQ(array.size(), 1u);
    EXPECT_EQ(array.as<int32_t>(), std::vector<int32_t>{-123456});
    EXPECT_EQ(array.as<int64_t>(), std::vector<int64_t>{-123456});
    EXPECT_EQ(array.as<double>(), std::vector<double>{-123456.0});
}

TEST_F(NpyTest, Float64VectorWithVersion2Header) {
    const double values[3] = {0.1, -1.0 / 3.0, 1e300};
    const auto path = write("v.npy", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }",
                                              values, sizeof(values), /*major=*/2));
    const auto array = load_npy(path);
    EXPECT_EQ(array.shape, (std::vector<int64_t>{3}));
    EXPECT_EQ(array.as<double>(), (std::vector<double>{0.1, -1.0 / 3.0, 1e300}));
}

TEST_F(NpyTest, IntegerTypes) {
    const int64_t big[2] = {int64_t{1} << 40, -5};
    const uint8_t bytes[4] = {0, 1, 0x7F, 0xFF};
    const auto big_path = write("i8.npy", npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }",
                                                   big, sizeof(big)));
    const auto byte_path = write("u1.npy", npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }",
                                                    bytes, sizeof(bytes)));
    EXPECT_EQ(load_npy(big_path).as<int64_t>(), (std::vector<int64_t>{int64_t{1} << 40, -5}));
    EXPECT_EQ(load_npy(byte_path).as<uint8_t>(), (std::vector<uint8_t>{0, 1, 0x7F, 0xFF}));
    EXPECT_EQ(load_npy(byte_path).as<int32_t>(), (std::vector<int32_t>{0, 1, 127, 255}));
}

TEST_F(NpyTest, EmptyArray) {
    const auto path = write("e.npy", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4), }",
                                              nullptr, 0));
    const auto array = load_npy(path);
    EXPECT_EQ(array.shape, (std::vector<int64_t>{0, 4}));
    EXPECT_TRUE(array.as<float>().empty());
}

TEST_F(NpyTest, RejectsFortranOrder) {
    const auto path = write("f.npy", npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                                              kFloats, sizeof(kFloats)));
    expect_error([&] { load_npy(path); }, {path, "Fortran"});
}

TEST_F(NpyTest, RejectsTruncatedData) {
    const auto path = write("t.npy", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                              kFloats, sizeof(kFloats) - 1));
    expect_error([&] { load_npy(path); }, {path, "truncated", "24"});
}

TEST_F(NpyTest, RejectsTruncatedHeader) {
    const std::string whole = npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                       kFloats, sizeof(kFloats));
    const auto path = write("h.npy", whole.substr(0, 30));
    expect_error([&] { load_npy(path); }, {path, "truncated"});
}

TEST_F(NpyTest, RejectsTrailingBytes) {
    const auto path = write("x.npy", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }",
                                              kFloats, sizeof(kFloats)));
    expect_error([&] { load_npy(path); }, {path, "4 bytes after"});
}

TEST_F(NpyTest, RejectsBadMagic) {
    std::string bytes = npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                 kFloats, sizeof(kFloats));
    bytes[1] = 'X';
    const auto path = write("b.npy", bytes);
    expect_error([&] { load_npy(path); }, {path, "magic"});
}

TEST_F(NpyTest, RejectsMissingFile) {
    const std::string path = (dir_ / "nothing_here.npy").string();
    expect_error([&] { load_npy(path); }, {path, "cannot be opened"});
}

TEST_F(NpyTest, RejectsBigEndian) {
    const auto path = write("be.npy", npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }",
                                               kFloats, sizeof(kFloats)));
    expect_error([&] { load_npy(path); }, {path, "little-endian"});
}

TEST_F(NpyTest, UnsupportedDtypeFailsOnConversion) {
    const uint16_t halves[2] = {0x3C00, 0xC000};  // 1.0 and -2.0 in fp16
    const auto path = write("f2.npy", npy_file("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }",
                                               halves, sizeof(halves)));
    const auto array = load_npy(path);  // the bytes load; only the conversion is unsupported
    EXPECT_EQ(array.bytes.size(), 4u);
    expect_error([&] { array.as<float>(); }, {path, "unsupported dtype", "<f2"});
}

TEST_F(NpyTest, RefusesToTruncateFloatsIntoIntegers) {
    const auto path = write("m.npy", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                              kFloats, sizeof(kFloats)));
    expect_error([&] { load_npy(path).as<int32_t>(); }, {path, "integer"});
}

// ------------------------------------------------------------- golden cases

class GoldenTest : public NpyTest {
protected:
    void make_case(const std::string& name, const std::string& case_txt) {
        write("ch99/" + name + "/case.txt", case_txt);
        const float values[2] = {0.5f, -4.0f};
        write("ch99/" + name + "/x.npy",
              npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }", values, sizeof(values)));
    }
};

TEST_F(GoldenTest, ListsCasesSortedAndFiltered) {
    make_case("decode_b", "dtype fp16\n");
    make_case("decode_a", "dtype bf16\n");
    make_case("trace_default", "seed 2026\n");
    const auto all = golden_cases((dir_ / "ch99").string());
    ASSERT_EQ(all.size(), 3u);
    EXPECT_EQ(all[0].name(), "decode_a");
    EXPECT_EQ(all[1].name(), "decode_b");
    EXPECT_EQ(all[2].name(), "trace_default");
    const auto decode = golden_cases((dir_ / "ch99").string(), "decode_");
    ASSERT_EQ(decode.size(), 2u);
    EXPECT_EQ(decode[1].param("dtype"), "fp16");
}

TEST_F(GoldenTest, ReadsParamsAndArrays) {
    make_case("c", "dtype fp16\nnote a note with spaces  \r\n\n# a comment\nbatch 4\natol 0.002\n");
    const GoldenCase golden((dir_ / "ch99" / "c").string());
    EXPECT_EQ(golden.param("note"), "a note with spaces");
    EXPECT_EQ(golden.param_int("batch"), 4);
    EXPECT_DOUBLE_EQ(golden.param_double("atol"), 0.002);
    EXPECT_TRUE(golden.has_param("dtype"));
    EXPECT_FALSE(golden.has_param("seed"));
    expect_error([&] { golden.param("seed"); }, {"'seed'", "case.txt"});
    expect_error([&] { golden.param_int("note"); }, {"not an integer"});
    EXPECT_EQ(golden.shape("x"), (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(golden.get<double>("x"), (std::vector<double>{0.5, -4.0}));
    expect_error([&] { golden.array("y"); }, {"y.npy"});
}

TEST_F(GoldenTest, MissingOrEmptyDirectoryTellsHowToGenerate) {
    expect_error([&] { golden_cases((dir_ / "absent").string()); }, {"does not exist", "pa_ref.golden"});
    fs::create_directories(dir_ / "empty");
    expect_error([&] { golden_cases((dir_ / "empty").string()); }, {"no case", "pa_ref.golden"});
    make_case("decode_a", "dtype fp16\n");
    expect_error([&] { golden_cases((dir_ / "ch99").string(), "paged_"); }, {"paged_*"});
}

TEST_F(GoldenTest, EnvironmentOverridesTheCompiledRoot) {
    // Keep the caller's setting, if any, and put it back afterwards.
    const char* before = std::getenv("PA_GOLDEN_DIR");
    const std::string saved = before != nullptr ? before : "";
    ::unsetenv("PA_GOLDEN_DIR");
    EXPECT_EQ(golden_dir("ch01"), std::string(PA_GOLDEN_DIR) + "/ch01");
    ::setenv("PA_GOLDEN_DIR", dir_.c_str(), 1);
    EXPECT_EQ(golden_dir("ch01"), dir_.string() + "/ch01");
    if (before != nullptr) {
        ::setenv("PA_GOLDEN_DIR", saved.c_str(), 1);
    } else {
        ::unsetenv("PA_GOLDEN_DIR");
    }
}

}  // namespace
