"""The dense-cache memory report on a hand-checked example."""

import pytest

from pa_ref import KVConfig, dense_memory_report


def test_bytes_per_token_of_the_default_model():
    # K and V, 32 layers, 8 KV heads, 128 values of 2 bytes: 128 KiB per token.
    assert KVConfig().bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131072


def test_report_on_a_tiny_example():
    cfg = KVConfig(num_layers=1, num_kv_heads=1, head_size=2, dtype_bytes=2, max_seq_len=10)
    assert cfg.bytes_per_token == 8
    # Two requests of 3 + 1 and 5 + 3 tokens: 12 tokens used out of 2 * 10 reserved.
    report = dense_memory_report([3, 5], [1, 3], cfg, budget_bytes=250)
    assert report["reserved_bytes"] == 160
    assert report["used_bytes"] == 96
    assert report["waste_fraction"] == pytest.approx(0.4)
    assert report["dense_seqs_in_budget"] == 3  # 250 // 80
    assert report["ideal_seqs_in_budget"] == 5  # floor(250 / (6 tokens * 8 bytes)) = floor(5.2)
    assert all(isinstance(report[k], int) for k in report if k != "waste_fraction")


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError):
        dense_memory_report([1, 2], [3])
