// npy.cpp: reading the .npy format.
//
// A .npy file is: the magic "\x93NUMPY", a major and a minor version byte, the
// header length (2 bytes little-endian in version 1, 4 bytes in versions 2 and
// 3), a header that is a Python dict literal such as
//     {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and a newline, and then the raw array data.
#include "npy.h"

#include <fstream>
#include <iterator>

namespace pa::test {

namespace detail {

void npy_error(const std::string& path, const std::string& what) {
    throw std::runtime_error("npy file '" + path + "' " + what);
}

}  // namespace detail

using detail::npy_error;

namespace {

// Little-endian unsigned integer of `width` bytes starting at p.
uint32_t read_le(const char* p, int width) {
    uint32_t value = 0;
    for (int i = width - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(p[i]);
    return value;
}

// The text right after "'key':" in the header, with leading spaces skipped.
std::string value_after(const std::string& header, const std::string& key, const std::string& path) {
    const size_t at = header.find("'" + key + "'");
    const size_t colon = at == std::string::npos ? at : header.find(':', at);
    if (colon == std::string::npos) npy_error(path, "has no '" + key + "' in its header: " + header);
    const size_t start = header.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? "" : header.substr(start);
}

// 'descr': '<f4'  ->  "<f4"
std::string parse_descr(const std::string& header, const std::string& path) {
    const std::string text = value_after(header, "descr", path);
    const size_t end = text.find('\'', 1);
    if (text.empty() || text[0] != '\'' || end == std::string::npos) {
        npy_error(path, "has a descr this reader does not support (structured dtype?): " + header);
    }
    return text.substr(1, end - 1);
}

// 'fortran_order': False  ->  false
bool parse_fortran_order(const std::string& header, const std::string& path) {
    const std::string text = value_after(header, "fortran_order", path);
    if (text.rfind("True", 0) == 0) return true;
    if (text.rfind("False", 0) == 0) return false;
    npy_error(path, "has an unreadable fortran_order in its header: " + header);
}

// 'shape': (2, 3)  ->  {2, 3};  ()  ->  {};  (5,)  ->  {5}
std::vector<int64_t> parse_shape(const std::string& header, const std::string& path) {
    const std::string text = value_after(header, "shape", path);
    const size_t close = text.find(')');
    if (text.empty() || text[0] != '(' || close == std::string::npos) {
        npy_error(path, "has an unreadable shape in its header: " + header);
    }
    std::vector<int64_t> shape;
    std::string digits;
    for (size_t i = 1; i <= close; ++i) {
        const char c = text[i];
        if (c >= '0' && c <= '9') {
            digits += c;
        } else if (c == ',' || c == ')') {
            if (!digits.empty()) shape.push_back(std::stoll(digits));
            digits.clear();
        } else if (c != ' ') {
            npy_error(path, "has an unreadable shape in its header: " + header);
        }
    }
    return shape;
}

}  // namespace

size_t NpyArray::size() const {
    size_t n = 1;
    for (int64_t extent : shape) n *= static_cast<size_t>(extent);
    return n;
}

size_t NpyArray::itemsize() const {
    // A descr is a byte-order character, a kind character and a size in bytes: "<f4".
    if (dtype.size() < 3 || dtype.find_first_not_of("0123456789", 2) != std::string::npos) {
        npy_error(path, "has a dtype this reader does not support: '" + dtype + "'");
    }
    return std::stoul(dtype.substr(2));
}

NpyArray load_npy(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) npy_error(path, "cannot be opened (missing? run the build's golden step)");
    const std::vector<char> raw((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());

    // Magic string and version.
    static const char kMagic[] = "\x93NUMPY";
    if (raw.size() < 10 || std::memcmp(raw.data(), kMagic, 6) != 0) {
        npy_error(path, "is not a .npy file (bad magic string)");
    }
    const int major = static_cast<unsigned char>(raw[6]);
    if (major < 1 || major > 3) npy_error(path, "has unsupported format version " + std::to_string(major));

    // Header: its length takes 2 bytes in version 1.0 and 4 bytes from 2.0 on.
    const int length_bytes = major == 1 ? 2 : 4;
    const size_t header_start = 8 + length_bytes;
    if (raw.size() < header_start) npy_error(path, "is truncated inside its header");
    const size_t header_len = read_le(raw.data() + 8, length_bytes);
    if (raw.size() < header_start + header_len) npy_error(path, "is truncated inside its header");
    const std::string header(raw.data() + header_start, header_len);

    NpyArray array;
    array.path = path;
    array.dtype = parse_descr(header, path);
    array.shape = parse_shape(header, path);
    if (parse_fortran_order(header, path)) {
        npy_error(path, "is in Fortran order; only C order is supported (save with np.ascontiguousarray)");
    }
    if (array.dtype[0] != '<' && array.dtype[0] != '|') {
        npy_error(path, "has dtype '" + array.dtype + "'; only little-endian data is supported");
    }

    // Data: exactly size() elements, no more and no less.
    const size_t expected = array.size() * array.itemsize();
    const size_t found = raw.size() - header_start - header_len;
    if (found < expected) {
        npy_error(path, "is truncated: its shape needs " + std::to_string(expected) +
                            " data bytes, the file has " + std::to_string(found));
    }
    if (found > expected) {
        npy_error(path, "has " + std::to_string(found - expected) + " bytes after the data its shape describes");
    }
    array.bytes.assign(raw.begin() + static_cast<std::ptrdiff_t>(header_start + header_len), raw.end());
    return array;
}

}  // namespace pa::test
