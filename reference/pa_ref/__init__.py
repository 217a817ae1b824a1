"""pa_ref: the NumPy reference of the paged-attention course.

Everything here computes in float64 and is meant to be read: each function is
the specification that a C++/CUDA kernel is tested against.
"""

from .attention import decode_attention, softmax
from .dtypes import E4M3_MAX, dequantize_e4m3, quantize_e4m3, round_to
from .memory import GIB, KVConfig, dense_memory_report
from .trace import (
    DEFAULT_NUM_REQUESTS,
    DEFAULT_SEED,
    SplitMix64,
    synthetic_trace,
    uniform_int,
)

__all__ = [
    "DEFAULT_NUM_REQUESTS",
    "DEFAULT_SEED",
    "E4M3_MAX",
    "GIB",
    "KVConfig",
    "SplitMix64",
    "decode_attention",
    "dense_memory_report",
    "dequantize_e4m3",
    "quantize_e4m3",
    "round_to",
    "softmax",
    "synthetic_trace",
    "uniform_int",
]
