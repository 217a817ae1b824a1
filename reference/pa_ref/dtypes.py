"""Number formats used by the course, seen from float64.

The reference computes in float64. The GPU stores fp16, bf16 or fp8. To compare
the two fairly, inputs are first rounded to the storage format, and the
reference then works on those exact rounded values. fp8 e4m3, a byte plus a
scale, is the KV cache's format only: it lives in fp8.py.
"""

import ml_dtypes
import numpy as np

# Storage formats by the names used in case.txt and on the command line.
_STORAGE = {
    "fp32": np.float32,
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
}


def round_to(x, dtype_name):
    """Round x to the nearest value of dtype_name; return them as float64.

    float64 holds every fp32/fp16/bf16 value exactly, so nothing is lost on the
    way back.
    """
    if dtype_name not in _STORAGE:
        raise ValueError(f"unknown dtype {dtype_name!r}; expected one of {sorted(_STORAGE)}")
    return np.asarray(x, dtype=np.float64).astype(_STORAGE[dtype_name]).astype(np.float64)
