"""The prefix cache's hash chain and lookup (chapter 8's CachingBlockManager)."""

import pytest

from pa_ref.prefix_cache import ROOT_HASH, PrefixCache, block_hash, chain_hashes


def test_block_hash_is_the_cpp_one():
    # tests/08-serving/test_engine.cpp (PrefixCache.ACollidingHashIsNoHit) searched for two
    # blocks with the same C++ hash; only a bit-exact port collides on them too.
    a = [1, 2, 3, 4, 5, 6, 7, 8]
    b = [101, 102, 103, 104, 105, 106, -21330887, 1767631822]
    assert block_hash(ROOT_HASH, a) == block_hash(ROOT_HASH, b)
    assert block_hash(ROOT_HASH, a) != block_hash(ROOT_HASH, a[:7] + [9])


def test_the_hash_chains_the_parent():
    t = list(range(16))
    assert block_hash(1, t) == block_hash(1, t) != block_hash(2, t)
    hs = chain_hashes(t + [99] * 3, 8)  # two full blocks; the 3-token tail has no hash
    assert hs == [block_hash(ROOT_HASH, t[:8]), block_hash(block_hash(ROOT_HASH, t[:8]), t[8:])]
    # The same second block after another first block has another name.
    assert chain_hashes([7] * 8 + t[8:], 8)[1] != hs[1]


def test_commit_registers_only_full_computed_blocks():
    c = PrefixCache(4)
    tokens = list(range(10))
    c.commit([5, 2, 9], tokens, 7)  # block 1 has 3 of its 4 tokens computed
    assert [e[0] for e in c.entries.values()] == [5]
    c.commit([5, 2, 9], tokens, 10)
    assert [e[0] for e in c.entries.values()] == [5, 2]
    c.commit([7, 8], tokens[:8], 8)  # a duplicate of cached content stays private
    assert [e[0] for e in c.entries.values()] == [5, 2]
    with pytest.raises(ValueError):
        c.commit([5], tokens[:3], 4)


def test_match_stops_at_the_first_miss_and_keeps_one_token():
    c = PrefixCache(4)
    a = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7]
    c.commit([6, 0, 3], a, len(a))
    assert c.match_prefix(a, len(a)) == [6, 0, 3]
    assert c.match_prefix(a, 11) == [6, 0]  # at most max_tokens (prompt_len - 1)
    b = a[:4] + [0, 0, 0, 0] + a[8:]  # block 1 differs: block 2 is no hit although its tokens are
    assert c.match_prefix(b, len(b)) == [6]
    assert c.match_prefix([0] * 12, 12) == []


def test_a_collision_is_no_hit():
    c = PrefixCache(8)
    a = [1, 2, 3, 4, 5, 6, 7, 8]
    b = [101, 102, 103, 104, 105, 106, -21330887, 1767631822]
    c.commit([2], a, 8)
    assert c.match_prefix(a, 8) == [2]
    assert c.match_prefix(b, 8) == []
