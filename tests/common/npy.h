// npy.h: a small reader for NumPy's .npy files, written for the golden cases.
//
// The tests must build on machines where nothing can be installed, so this is
// a deliberate hand-written reader of the subset that reference/pa_ref/golden.py
// writes: format versions 1.0, 2.0 (and 3.0), little-endian, C order, any rank
// including 0-d. Anything else is refused with an error that names the file.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace pa::test {

struct NpyArray {
    std::string path;            // the file it came from, for error messages
    std::vector<int64_t> shape;  // {} for a 0-d array (one element)
    std::string dtype;           // NumPy's descr, e.g. "<f4", "<i8", "|u1"
    std::vector<char> bytes;     // the raw little-endian data, C order

    // Number of elements: the product of shape (1 for a 0-d array).
    size_t size() const;

    // Size in bytes of one element of `dtype`.
    size_t itemsize() const;

    // The elements converted to T (float, double, int32_t, int64_t, uint8_t, ...).
    // Throws std::runtime_error for an unsupported dtype, and when floating-point
    // data would be silently truncated into an integer type.
    template <class T>
    std::vector<T> as() const;
};

// Read a .npy file. Throws std::runtime_error (naming the file) when it is
// missing, has a bad magic string or header, is Fortran-ordered or big-endian,
// or holds fewer or more data bytes than its shape says.
NpyArray load_npy(const std::string& path);

namespace detail {

[[noreturn]] void npy_error(const std::string& path, const std::string& what);

// Copy n elements of type S out of raw bytes (memcpy: the data may be unaligned).
template <class S, class T>
std::vector<T> convert(const std::vector<char>& bytes, size_t n) {
    std::vector<T> out(n);
    for (size_t i = 0; i < n; ++i) {
        S value;
        std::memcpy(&value, bytes.data() + i * sizeof(S), sizeof(S));
        out[i] = static_cast<T>(value);
    }
    return out;
}

}  // namespace detail

template <class T>
std::vector<T> NpyArray::as() const {
    static_assert(std::is_arithmetic_v<T>, "NpyArray::as<T>() needs an arithmetic T");
    const size_t n = size();
    const bool is_float = dtype == "<f4" || dtype == "<f8";
    if (is_float && !std::is_floating_point_v<T>) {
        detail::npy_error(path, "holds floating-point data (" + dtype +
                                    "); refusing to truncate it into an integer type");
    }
    if (dtype == "<f4") return detail::convert<float, T>(bytes, n);
    if (dtype == "<f8") return detail::convert<double, T>(bytes, n);
    if (dtype == "|i1") return detail::convert<int8_t, T>(bytes, n);
    if (dtype == "<i2") return detail::convert<int16_t, T>(bytes, n);
    if (dtype == "<i4") return detail::convert<int32_t, T>(bytes, n);
    if (dtype == "<i8") return detail::convert<int64_t, T>(bytes, n);
    if (dtype == "|u1") return detail::convert<uint8_t, T>(bytes, n);
    if (dtype == "<u2") return detail::convert<uint16_t, T>(bytes, n);
    if (dtype == "<u4") return detail::convert<uint32_t, T>(bytes, n);
    if (dtype == "<u8") return detail::convert<uint64_t, T>(bytes, n);
    if (dtype == "|b1") return detail::convert<bool, T>(bytes, n);
    detail::npy_error(path, "has unsupported dtype '" + dtype + "'");
}

}  // namespace pa::test
