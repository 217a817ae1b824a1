"""Writing one golden case: a directory of .npy arrays and a case.txt of parameters."""

import zlib

import numpy as np

# Suggested comparison tolerances, |got - expected| <= atol + rtol * |expected|.
# They assume fp32 arithmetic inside the kernel and an output (and possibly the
# softmax weights) rounded to the storage dtype: about 2^-11 relative for fp16
# and 2^-8 for bf16, on outputs of magnitude up to ~4. An fp32-accumulating kernel
# that rounds its softmax weights and output to the dtype stays within half of
# these bounds on every chapter-1 and chapter-4 case (tests/test_golden.py and
# tests/test_golden_ch04.py check it).
TOLERANCES = {
    "fp32": (1e-5, 1e-5),
    "fp16": (2e-3, 2e-3),
    "bf16": (1e-2, 1e-2),
}


def case_seed(name):
    """A fixed seed per case, taken from its name, so adding a case changes no other."""
    return zlib.crc32(name.encode())


def little_endian(array):
    """The array as a C-ordered, little-endian copy (np.save keeps what it is given).

    np.array, not np.ascontiguousarray: the latter turns a 0-d array into shape (1,).
    """
    array = np.asarray(array)
    return np.array(array, dtype=array.dtype.newbyteorder("<"), order="C")


def write_case(case_dir, arrays, params):
    """Write arrays as <name>.npy and params as case.txt lines into case_dir."""
    case_dir.mkdir(parents=True)
    for name, array in arrays.items():
        np.save(case_dir / f"{name}.npy", little_endian(array), allow_pickle=False)
    lines = []
    for key, value in params.items():
        text = str(value)
        assert " " not in key and "\n" not in text, (key, text)
        lines.append(f"{key} {text}\n")
    (case_dir / "case.txt").write_text("".join(lines))
