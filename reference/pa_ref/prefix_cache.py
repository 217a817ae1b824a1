"""The prefix cache's names for blocks, and its lookup: the spec of chapter 8's
CachingBlockManager (block_hash, commit, match_prefix).

A full block is named by a chain hash: block i's hash is block_hash(hash of block i - 1,
its block_size tokens), with ROOT_HASH before block 0. So a hash names everything up to
and including its block, and the same tokens after a different past get a different
name (their K and V differ: attention and rotary positions saw another history).

- commit(blocks, tokens, num_computed): every full block whose tokens are all computed
  is registered under its hash, with its parent's hash and its tokens. The first block
  registered under a hash stays the cached one; a later duplicate is not registered.
- match_prefix(tokens, max_tokens): walks the prompt's full blocks from the first, at
  most max_tokens // block_size of them, and stops at the first block that is not
  cached, or whose entry holds another parent or other tokens (a 64-bit collision is no
  hit). A later block is never a hit after a miss: its hash includes the missed one's.

block_hash is bit-exact with the C++ one (tests/test_prefix_cache.py replays the
colliding pair that tests/08-serving/test_engine.cpp found for it). The eviction order
of unowned cached blocks is the C++ manager's own and is tested there.
"""

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
ROOT_HASH = 0x8D2AC4F0E3B1  # the parent of a first block (kRootHash)


def block_hash(parent_hash, tokens):
    """The 64-bit name of a full block of `tokens` whose parent is named parent_hash (never 0:
    0 marks "not cached" in the C++ manager)."""
    h = (parent_hash ^ GOLDEN) & MASK64
    for t in tokens:
        # Tokens are int32 in C++, widened through uint32.
        h ^= ((int(t) & 0xFFFFFFFF) + GOLDEN + ((h << 6) & MASK64) + (h >> 2)) & MASK64
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & MASK64  # splitmix64's mixer
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & MASK64
        h ^= h >> 31
    return h or 1


def chain_hashes(tokens, block_size):
    """The hashes of the full blocks of `tokens`, in order."""
    out, parent = [], ROOT_HASH
    for i in range(len(tokens) // block_size):
        parent = block_hash(parent, tokens[i * block_size:(i + 1) * block_size])
        out.append(parent)
    return out


class PrefixCache:
    """The cached full blocks: hash -> (block, parent hash, tokens)."""

    def __init__(self, block_size):
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.block_size = block_size
        self.entries = {}

    def commit(self, blocks, tokens, num_computed):
        """Registers the full blocks of a sequence (its block list `blocks`, its `tokens`)
        whose every token among tokens[:num_computed] has its K and V computed."""
        if num_computed > len(tokens):
            raise ValueError(f"{num_computed} computed tokens of a sequence of {len(tokens)}")
        bs, parent = self.block_size, ROOT_HASH
        for i in range(num_computed // bs):
            blk = tuple(int(t) for t in tokens[i * bs:(i + 1) * bs])
            h = block_hash(parent, blk)
            if h not in self.entries:
                self.entries[h] = (blocks[i], parent, blk)
            parent = h

    def match_prefix(self, tokens, max_tokens):
        """The cached blocks that hold the longest run of leading full blocks of `tokens`,
        at most max_tokens tokens, in order."""
        bs, parent, hit = self.block_size, ROOT_HASH, []
        for i in range(min(len(tokens), max_tokens) // bs):
            blk = tuple(int(t) for t in tokens[i * bs:(i + 1) * bs])
            h = block_hash(parent, blk)
            entry = self.entries.get(h)
            if entry is None or entry[1] != parent or entry[2] != blk:
                break
            hit.append(entry[0])
            parent = h
        return hit
