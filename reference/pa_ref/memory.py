"""How much memory a KV cache reserves, and how much of it is used.

This is the arithmetic behind chapter 1's motivation: a dense cache reserves
max_seq_len tokens for every request, while a request only ever fills
prompt + output tokens of it. Chapter 3 answers it: a paged cache reserves
whole blocks, so it wastes less than one block per request.
"""

from dataclasses import dataclass

import numpy as np

GIB = 1 << 30


@dataclass(frozen=True)
class KVConfig:
    """Model dimensions that decide the size of one token's KV entries."""

    num_layers: int = 32
    num_kv_heads: int = 8
    head_size: int = 128
    dtype_bytes: int = 2  # fp16 / bf16
    max_seq_len: int = 2048

    @property
    def bytes_per_token(self):
        """One token stores a K and a V vector per KV head, in every layer."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_size * self.dtype_bytes


def dense_memory_report(prompt_lens, output_lens, cfg=KVConfig(), budget_bytes=16 * GIB):
    """Compare what a dense cache reserves with what the requests use.

    With N requests, t_i = prompt_lens[i] + output_lens[i] tokens for request i,
    and P = cfg.bytes_per_token, the returned dict holds:

    - reserved_bytes       = N * cfg.max_seq_len * P   (a slot of max_seq_len per request)
    - used_bytes           = sum(t_i) * P              (tokens actually written)
    - waste_fraction       = 1 - used_bytes / reserved_bytes   (a float)
    - dense_seqs_in_budget = budget_bytes // (cfg.max_seq_len * P)
                             (how many requests a dense cache fits in the budget)
    - ideal_seqs_in_budget = floor(budget_bytes / (mean(t_i) * P))
                           = (budget_bytes * N) // (sum(t_i) * P), computed exactly in integers
                             (how many average requests fit if only used tokens took memory)

    All values except waste_fraction are Python ints.
    """
    prompt_lens = np.asarray(prompt_lens, dtype=np.int64)
    output_lens = np.asarray(output_lens, dtype=np.int64)
    if prompt_lens.shape != output_lens.shape or prompt_lens.size == 0:
        raise ValueError("prompt_lens and output_lens must be non-empty and of equal length")
    num_requests = int(prompt_lens.size)
    total_tokens = int(prompt_lens.sum() + output_lens.sum())
    per_token = cfg.bytes_per_token

    reserved_bytes = num_requests * cfg.max_seq_len * per_token
    used_bytes = total_tokens * per_token
    return {
        "reserved_bytes": reserved_bytes,
        "used_bytes": used_bytes,
        "waste_fraction": 1.0 - used_bytes / reserved_bytes,
        "dense_seqs_in_budget": budget_bytes // (cfg.max_seq_len * per_token),
        "ideal_seqs_in_budget": (budget_bytes * num_requests) // (total_tokens * per_token),
    }


def paged_memory_report(prompt_lens, output_lens, cfg=KVConfig(), block_size=16, budget_bytes=16 * GIB):
    """What a paged cache reserves: whole blocks of block_size tokens per request.

    With N requests of t_i tokens, B = sum(ceil(t_i / block_size)) blocks and
    P = cfg.bytes_per_token, the returned dict holds:

    - reserved_bytes       = B * block_size * P   (only the last block of a request is partly empty)
    - used_bytes           = sum(t_i) * P         (as in dense_memory_report)
    - waste_fraction       = 1 - used_bytes / reserved_bytes   (a float)
    - paged_seqs_in_budget = (budget_bytes * N) // (B * block_size * P), exactly in integers
                             (how many average requests a paged cache fits in the budget)

    All values except waste_fraction are Python ints.
    """
    prompt_lens = np.asarray(prompt_lens, dtype=np.int64)
    output_lens = np.asarray(output_lens, dtype=np.int64)
    if prompt_lens.shape != output_lens.shape or prompt_lens.size == 0:
        raise ValueError("prompt_lens and output_lens must be non-empty and of equal length")
    if block_size <= 0:
        raise ValueError(f"block_size must be > 0, got {block_size}")
    tokens = prompt_lens + output_lens
    num_blocks = int((-(-tokens // block_size)).sum())  # ceil, request by request
    if num_blocks == 0:
        raise ValueError("the requests hold no tokens")
    per_token = cfg.bytes_per_token

    reserved_bytes = num_blocks * block_size * per_token
    used_bytes = int(tokens.sum()) * per_token
    return {
        "reserved_bytes": reserved_bytes,
        "used_bytes": used_bytes,
        "waste_fraction": 1.0 - used_bytes / reserved_bytes,
        "paged_seqs_in_budget": (budget_bytes * int(tokens.size)) // reserved_bytes,
    }
