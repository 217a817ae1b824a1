"""Where chapter 13's Hopper prefill puts its data, and when its barriers complete, as
plain functions.

The kernel writes these maps inline in C++ (include/pa/hopper/swizzle.h, wgmma.h,
solutions/13-hopper-async/stage_layout.cuh, stage_pipeline.cuh, wgmma_schedule.cuh,
tile_math.cuh); each function below names the expression it mirrors, and
book/figures/test_ch13_figures.py checks that the C++ still holds those expressions and
that the properties the kernel relies on hold here (TMA's writes land where wgmma reads,
P's accumulators are A's fragment). The book's chapter 13 figures (book/figures/ch13.py)
are drawn from these functions.

Units: addresses are bytes of shared memory; elements are 2 bytes (fp16 or bf16).
"""

ELEM = 2  # bytes of an fp16/bf16 element


# ---- The swizzle (include/pa/hopper/swizzle.h: swizzle_address) --------------------------

def swizzle_address(address, swizzle_bytes):
    """The shared address a byte of a dense box lands at: the 16-byte chunk index (address
    bits 4..6) XOR the 128-byte row index (bits 7..9), as many bits as the swizzle spans."""
    bits = {128: 7, 64: 3, 32: 1}.get(swizzle_bytes, 0)
    return address ^ (((address >> 7) & bits) << 4)


# ---- The accumulators and A's fragment (include/pa/hopper/wgmma.h: WgmmaAcc) --------------

def acc_row(i, t):
    """WgmmaAcc<N>::row: the row of the 64 x N tile that thread t's d[i] holds."""
    return 16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) % 2)


def acc_col(i, t):
    """WgmmaAcc<N>::col: the column of thread t's d[i]."""
    return 8 * (i // 4) + 2 * (t % 4) + i % 2


def a_fragment(r, t):
    """wgmma_mma_async_rs's A fragment (fp16/bf16): register a[r] of thread t holds
    A[row][col], A[row][col + 1] of the 64 x 16 k-step (the lower half first)."""
    w, g, q = t // 32, (t % 32) // 4, t % 4
    return 16 * w + g + 8 * (r % 2), 2 * q + 8 * (r // 2)


def p_register_sources(ks, r):
    """tile_math.cuh's softmax_step: p[ks][r] = pack(d[8 ks + 2 r], d[8 ks + 2 r + 1]), the
    two accumulators of S (columns 16 ks .. 16 ks + 15 of the tile) that become a[r] of
    O += P V's k-step ks."""
    return 8 * ks + 2 * r, 8 * ks + 2 * r + 1


# ---- The stage (solutions/13-hopper-async/stage_layout.cuh) -------------------------------

CTA_ROWS = 128  # include/pa/ch13_hopper.h: kCtaRows


def tile_shape(D):
    """TileShape<D>."""
    tokens = 64 if D > 128 else 128
    q_bytes = CTA_ROWS * D * 2
    k_bytes = v_bytes = tokens * D * 2
    stages = 4 if D == 64 else 3 if D == 128 else 2  # as many as fit beside Q in 227 KB
    return {"tokens": tokens, "stages": stages, "q_bytes": q_bytes, "k_bytes": k_bytes,
            "v_bytes": v_bytes, "stage_bytes": k_bytes + v_bytes}


def smem_k(stage, D):
    """Smem<D>::k(stage), from the (1,024-aligned) base."""
    s = tile_shape(D)
    return s["q_bytes"] + stage * s["stage_bytes"]


def smem_v(stage, D):
    return smem_k(stage, D) + tile_shape(D)["k_bytes"]


def k_box(stage, p, c, bs, D):
    """Smem<D>::k_box: where the TMA box of page p and 16-byte chunk c (dims 8 c .. 8 c + 7)
    of K lands. K's stage is chunk-major, [chunk][token][8 dims]: chunk c of all the stage's
    tokens, kTokens x 16 bytes, then chunk c + 1; the pages of the tile side by side in it."""
    return smem_k(stage, D) + c * (tile_shape(D)["tokens"] * 16) + p * (bs * 16)


def v_box(stage, p, bs, D):
    """Smem<D>::v_box: where page p of V lands."""
    return smem_v(stage, D) + p * (bs * D * 2)


def k_map_spec(bs, D, hkv, num_blocks):
    """k_map_spec: the tensor map over chapter 2's K pool in its own order ([D/8][BS][8] a
    page); its box, at coordinates (0, 0, c, head, block), is chunk c of one page's BS tokens,
    unswizzled. Strides in bytes (of dimensions 1..4; dimension 0 is the element)."""
    return {"dims": (8, bs, D // 8, hkv, num_blocks), "strides": (16, bs * 16, D * bs * 2, hkv * D * bs * 2),
            "box": (8, bs, 1, 1, 1), "swizzle": 0}


def v_map_spec(bs, D, hkv, num_blocks):
    """v_map_spec: one page of V as D rows of BS tokens, swizzled by the row's bytes."""
    return {"dims": (bs, D, hkv, num_blocks), "strides": (bs * 2, D * bs * 2, hkv * D * bs * 2),
            "box": (bs, D, 1, 1), "swizzle": 0 if bs == 8 else bs * 2}


def tma_box(spec, coords, dst):
    """What a TMA load of the box at `coords` does, element by element: yields (global byte
    offset, shared address). The box is written densely, dimension 0 fastest, then each
    byte's address is swizzled (swizzle_address). A swizzled box's inner extent must be the
    swizzle span: the GPU pads a shorter inner row to the span in shared memory (measured on
    the H100, bench/results/ch13-tma-inner-row-padding-h100.md), which this dense model would
    not show, and encode_tensor_map refuses such a box (include/pa/hopper/tma.h)."""
    box, strides = spec["box"], (ELEM,) + tuple(spec["strides"])
    if spec["swizzle"]:
        assert box[0] * ELEM == spec["swizzle"], (
            f"a swizzled box's inner extent ({box[0] * ELEM} bytes) is not the swizzle's {spec['swizzle']} bytes")
    n = 1
    for b in box:
        n *= b
    for linear in range(n):
        idx, rest = [], linear
        for b in box:
            idx.append(rest % b)
            rest //= b
        offset = sum((c + e) * s for c, e, s in zip(coords, idx, strides))
        yield offset, swizzle_address(dst + linear * ELEM, spec["swizzle"])


def k_major(start, r, k, sbo, swizzle, lbo=0):
    """wgmma.h's canonical K-major layout: the shared address of element (r, k) of a tile
    whose descriptor is (start, LBO, SBO, swizzle); the swizzle is applied to the address."""
    if swizzle:
        a = start + (r % 8) * swizzle + (r // 8) * sbo + k * ELEM
    else:
        t = 16 // ELEM
        a = start + (r % 8) * 16 + (r // 8) * sbo + (k // t) * lbo + (k % t) * ELEM
    return swizzle_address(a, swizzle)


def k_desc(stage, ks, D):
    """k_desc: (start, LBO, SBO, swizzle) of K's stage at k-step ks (dims 16 ks .. + 15):
    chunks 2 ks and 2 ks + 1, unswizzled; LBO the next chunk (kTokens x 16 bytes on), SBO
    the next 8 tokens (128 bytes on)."""
    chunk_bytes = tile_shape(D)["tokens"] * 16
    return smem_k(stage, D) + 2 * ks * chunk_bytes, chunk_bytes, 128, 0


def q_desc(q_s, ks):
    """q_desc: (start, LBO, SBO, swizzle) of a warpgroup's 64 rows of Q at k-step ks: slabs
    of 64 rows x 128 bytes (64 dims), 128-byte swizzle; each k-step 32 bytes further."""
    return q_s + (ks // 4) * (64 * 128) + (ks % 4) * 32, 16, 1024, 128


def q_address(q_s, r, c):
    """tile_math.cuh's load_q: where chunk c (dims 8 c .. 8 c + 7) of Q's row r (of a
    warpgroup's 64) lands: slab c / 8, row r, slot c % 8, then the 128-byte swizzle."""
    return swizzle_address(q_s + (c // 8) * 64 * 128 + r * 128 + (c % 8) * 16, 128)


def v_desc(stage, ks, bs, D):
    """v_desc: (start, LBO, SBO, swizzle) of V's stage at k-step ks (tokens 16 ks .. + 15)."""
    if bs >= 16:
        return v_box(stage, ks * 16 // bs, bs, D) + (ks * 16 % bs) * 2, 16, 8 * bs * 2, bs * 2
    return v_box(stage, 2 * ks, bs, D), bs * D * 2, 128, 0


# ---- The barriers (stage_pipeline.cuh, wgmma_schedule.cuh) ---------------------------------

def producer_empty_parity(n, stages=2):
    """The producer's wait for tile n's stage to be free: the phase before the one the
    consumers complete by releasing tile n - stages."""
    return ((n // stages) & 1) ^ 1


def consumer_full_parity(n, stages=2):
    """The consumers' wait on k_full and v_full for tile n: phase n // stages of the stage."""
    return (n // stages) & 1


class Mbarrier:
    """An mbarrier's phase: `count` arrivals and the announced bytes complete it, then the
    next phase starts. wait(parity) passes once the phase of that parity has completed,
    which for a fresh barrier is true of parity 1 (the phase "before" phase 0)."""

    def __init__(self, name, count):
        self.name, self.count = name, count
        self.phase, self.arrivals, self.tx = 0, count, 0
        self.completed = []  # (time, phase)

    def arrive(self, time, expect_tx=0):
        self.arrivals -= 1
        self.tx += expect_tx
        self._check(time)

    def land(self, time, nbytes):
        self.tx -= nbytes
        self._check(time)

    def _check(self, time):
        if self.arrivals == 0 and self.tx == 0:
            self.completed.append((time, self.phase))
            self.phase += 1
            self.arrivals = self.count

    def passes(self, parity):
        return (self.phase & 1) != parity


def pipeline(tiles=4, stages=2, consumers=2, copy=3, v_later=1, s_time=2, softmax=2, pv=2,
             producer_parity=producer_empty_parity, consumer_parity=consumer_full_parity,
             raise_on_deadlock=True):
    """The producer warp and the consumer warpgroups of one thread block over `tiles` KV
    tiles, with illustrative durations (time units, not measured): a K copy lands `copy`
    after its issue and V's `v_later` after that. Each actor runs the kernel's sequence of
    waits, arrivals and work; returns the timeline. On a deadlock (no actor can move) it
    raises RuntimeError naming the waits, or with raise_on_deadlock=False returns the
    timeline so far with that message under "deadlock"."""
    bars = {}
    for s in range(stages):
        bars[f"k_full[{s}]"] = Mbarrier(f"k_full[{s}]", 1)
        bars[f"v_full[{s}]"] = Mbarrier(f"v_full[{s}]", 1)
        bars[f"empty[{s}]"] = Mbarrier(f"empty[{s}]", consumers)

    def producer():
        for n in range(tiles):
            s = n % stages
            yield ("wait", f"empty[{s}]", producer_parity(n, stages), n)
            yield ("copy", f"k_full[{s}]", copy, n)
            yield ("copy", f"v_full[{s}]", copy + v_later, n)

    def consumer():
        for n in range(tiles):
            s = n % stages
            yield ("wait", f"k_full[{s}]", consumer_parity(n, stages), n)
            yield ("work", "S = Q K^T", s_time, n)
            yield ("work", "softmax", softmax, n)
            yield ("wait", f"v_full[{s}]", consumer_parity(n, stages), n)
            yield ("work", "O += P V", pv, n)
            yield ("arrive", f"empty[{s}]", 0, n)

    actors = {"producer": producer()}
    for c in range(consumers):
        actors[f"consumer {c + 1}"] = consumer()
    op = {a: next(g) for a, g in actors.items()}
    busy_until = {a: 0 for a in actors}
    waiting_since = {}
    landings = []  # (time, barrier, tile)
    events = {a: [] for a in actors}  # (start, end, kind, label, tile)
    copies = []  # (issue, land, barrier, tile)
    t = 0
    while op:
        for when, name, n in [x for x in landings if x[0] == t]:
            bars[name].land(t, 1)
        landings = [x for x in landings if x[0] != t]
        progressed = True
        while progressed:
            progressed = False
            for a in list(op):
                if busy_until[a] > t:
                    continue
                kind, name, arg, n = op[a]
                if kind == "wait":
                    if not bars[name].passes(arg):
                        waiting_since.setdefault(a, t)
                        continue
                    start = waiting_since.pop(a, t)
                    events[a].append((start, t, "wait", f"{name} parity {arg}", n))
                elif kind == "copy":
                    bars[name].arrive(t, expect_tx=1)
                    landings.append((t + arg, name, n))
                    copies.append((t, t + arg, name, n))
                elif kind == "arrive":
                    bars[name].arrive(t)
                    events[a].append((t, t, "arrive", name, n))
                else:
                    events[a].append((t, t + arg, "work", name, n))
                    busy_until[a] = t + arg
                try:
                    op[a] = next(actors[a])
                except StopIteration:
                    del op[a]
                progressed = True
        if op and not landings and all(busy_until[a] <= t for a in op) and \
                all(op[a][0] == "wait" and not bars[op[a][1]].passes(op[a][2]) for a in op):
            deadlock = "deadlock: " + "; ".join(
                f"{a} waits on {op[a][1]} with parity {op[a][2]} (its phase {bars[op[a][1]].phase} is not complete)"
                for a in op)
            if raise_on_deadlock:
                raise RuntimeError(deadlock)
            break
        t += 1
    else:
        deadlock = None
    return {"events": events, "copies": copies, "bars": {k: b.completed for k, b in bars.items()},
            "end": max((e[1] for ev in events.values() for e in ev), default=0), "deadlock": deadlock}
