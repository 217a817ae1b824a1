"""Number formats used by the course, seen from float64.

The reference computes in float64. The GPU stores fp16, bf16 or fp8. To compare
the two fairly, inputs are first rounded to the storage format, and the
reference then works on those exact rounded values.
"""

import ml_dtypes
import numpy as np

# Storage formats by the names used in case.txt and on the command line.
_STORAGE = {
    "fp32": np.float32,
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
}

# Largest finite e4m3 value: 1.75 * 2^8. There is no infinity in this format.
E4M3_MAX = 448.0


def round_to(x, dtype_name):
    """Round x to the nearest value of dtype_name; return them as float64.

    float64 holds every fp32/fp16/bf16 value exactly, so nothing is lost on the
    way back.
    """
    if dtype_name not in _STORAGE:
        raise ValueError(f"unknown dtype {dtype_name!r}; expected one of {sorted(_STORAGE)}")
    return np.asarray(x, dtype=np.float64).astype(_STORAGE[dtype_name]).astype(np.float64)


def quantize_e4m3(x, scale):
    """Quantize x to fp8 e4m3 bytes: byte = e4m3(x / scale), as uint8.

    Out-of-range values saturate to +-448 (the behaviour of CUDA's
    __NV_SATFINITE conversion); +-inf saturates too. NaN stays NaN.
    The division is done in float64 and rounded once, to nearest-even.
    """
    scaled = np.asarray(x, dtype=np.float64) / scale
    # np.clip leaves NaN alone, so only finite (and infinite) values saturate.
    clipped = np.clip(scaled, -E4M3_MAX, E4M3_MAX)
    return clipped.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def dequantize_e4m3(data, scale):
    """Read uint8 bytes as e4m3 values and multiply by scale; return float64."""
    data = np.asarray(data, dtype=np.uint8)
    return data.view(ml_dtypes.float8_e4m3fn).astype(np.float64) * scale
