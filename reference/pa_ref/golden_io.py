"""Writing one golden case: a directory of .npy arrays and a case.txt of parameters."""

import zlib

import numpy as np


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
