"""The dense and paged memory reports on hand-checked examples and on the trace."""

import pytest

from pa_ref import KVConfig, dense_memory_report, paged_memory_report, synthetic_trace


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


def test_paged_report_on_a_tiny_example():
    cfg = KVConfig(num_layers=1, num_kv_heads=1, head_size=2, dtype_bytes=2, max_seq_len=10)
    # 4 and 8 tokens in blocks of 4: 1 + 2 blocks, 12 tokens reserved, 12 used.
    report = paged_memory_report([3, 5], [1, 3], cfg, block_size=4, budget_bytes=250)
    assert report == {"reserved_bytes": 96, "used_bytes": 96, "waste_fraction": 0.0,
                      "paged_seqs_in_budget": 5}  # 250 * 2 // 96
    # Blocks of 3: 2 + 3 blocks, 15 tokens reserved for 12 used.
    report = paged_memory_report([3, 5], [1, 3], cfg, block_size=3, budget_bytes=250)
    assert report["reserved_bytes"] == 120 and report["used_bytes"] == 96
    assert report["waste_fraction"] == pytest.approx(0.2)
    assert report["paged_seqs_in_budget"] == 4  # 500 // 120
    assert all(isinstance(report[k], int) for k in report if k != "waste_fraction")


def test_paged_wastes_less_than_one_block_per_request_on_the_trace():
    prompts, outputs = synthetic_trace()
    cfg = KVConfig()
    dense = dense_memory_report(prompts, outputs, cfg)
    for block_size in (8, 16, 32):
        paged = paged_memory_report(prompts, outputs, cfg, block_size)
        assert paged["used_bytes"] == dense["used_bytes"]
        assert paged["waste_fraction"] < dense["waste_fraction"]
        one_block_each = len(prompts) * block_size * cfg.bytes_per_token
        assert paged["reserved_bytes"] - paged["used_bytes"] < one_block_each
        assert dense["dense_seqs_in_budget"] < paged["paged_seqs_in_budget"]
        assert paged["paged_seqs_in_budget"] <= dense["ideal_seqs_in_budget"]
    assert paged_memory_report(prompts, outputs, cfg, 1)["waste_fraction"] == 0.0


def test_paged_report_rejects_bad_input():
    with pytest.raises(ValueError):
        paged_memory_report([1, 2], [3], KVConfig(), 16)
    with pytest.raises(ValueError):
        paged_memory_report([1], [3], KVConfig(), 0)
    with pytest.raises(ValueError):
        paged_memory_report([0], [0], KVConfig(), 16)
