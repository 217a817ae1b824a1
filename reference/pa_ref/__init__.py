"""pa_ref: the NumPy reference of the paged-attention course.

Everything here computes in float64 and is meant to be read: each function is
the specification that a C++/CUDA kernel is tested against.
"""

from .attention import decode_attention, softmax
from .block_manager import BlockAllocator, BlockManager, OutOfBlocks, build_batch
from .cow import SharedBlockManager, copy_blocks
from .dtypes import round_to
from .fp8 import (
    E4M3_MAX,
    E4M3_NAN,
    FP8_X,
    dequantize_e4m3,
    dequantize_pools,
    paged_decode_attention_fp8,
    partitioned_decode_attention_fp8,
    quantize_e4m3,
    reshape_and_cache_fp8,
)
from .memory import GIB, KVConfig, dense_memory_report, paged_memory_report
from .paged import k_pool_index, pack_x, paged_gather, reshape_and_cache, v_pool_index
from .paged_attention import (
    PARTITION_SIZE,
    decode_partitions,
    merge_partitions,
    paged_decode_attention,
    partitioned_decode_attention,
)
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
    "E4M3_NAN",
    "FP8_X",
    "GIB",
    "PARTITION_SIZE",
    "BlockAllocator",
    "BlockManager",
    "KVConfig",
    "OutOfBlocks",
    "SharedBlockManager",
    "SplitMix64",
    "build_batch",
    "copy_blocks",
    "decode_attention",
    "decode_partitions",
    "dense_memory_report",
    "dequantize_e4m3",
    "dequantize_pools",
    "k_pool_index",
    "merge_partitions",
    "pack_x",
    "paged_decode_attention",
    "paged_decode_attention_fp8",
    "paged_gather",
    "paged_memory_report",
    "partitioned_decode_attention",
    "partitioned_decode_attention_fp8",
    "quantize_e4m3",
    "reshape_and_cache",
    "reshape_and_cache_fp8",
    "round_to",
    "softmax",
    "synthetic_trace",
    "uniform_int",
    "v_pool_index",
]
