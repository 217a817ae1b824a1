"""FlashInfer's tensor-core decode with enable_pdl left to its default (None), True and False.

    PYTHONPATH=/tmp/fi python3 tools/perf/fi_pdl.py [CASE[,CASE...] [ROUNDS]]

Run from the repository root on the GPU machine, FlashInfer installed from .whl/ into /tmp/fi
(bench/bench_flashinfer.py's cases, pool and timer, reused). For each case and round, three
timings: the bench's (a GPU spin, then one run between two events), the same without the spin,
and 20 runs back to back between two events, / 20. Results: bench/results/
split-release-and-fi-pdl-h200.md (session 49).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import bench_flashinfer as bf  # noqa: E402
import bench_torch as bt  # noqa: E402
import flashinfer as fi  # noqa: E402
import torch  # noqa: E402
from flashinfer.utils import device_support_pdl  # noqa: E402

DEFAULT = "32/1/32/4096,32/8/32/4096,64/8/32/4096,32/1 ragged 1x32768+63x256,32/8/128/1024"


def back_to_back_ms(timer, run, n=20, reps=15):
    """The median over reps of n runs queued back to back after the timer's spin, / n."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(reps):
        torch.cuda._sleep(timer.cycles)
        a.record()
        for i in range(n):
            run(i)
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b) / n)
    ms.sort()
    return ms[reps // 2]


def main():
    want = (sys.argv[1] if len(sys.argv) > 1 else DEFAULT).split(",")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    timer = bt.Timer(torch)
    ws = torch.empty(bf.WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    print("device_support_pdl", device_support_pdl(torch.device("cuda")),
          "flashinfer", fi.__version__)
    for case in [c for c in bf.all_cases("decode") if c.name in want]:
        paged = bf.Paged(torch, case, bt.rotation_count(torch, case.bytes_moved()))
        for _ in range(rounds):
            for pdl in (None, True, False):
                kw = {} if pdl is None else {"enable_pdl": pdl}
                plan, run = bf.fi_decode(fi, torch, paged, ws, True, run_kw=kw)
                plan()
                run(0)
                torch.cuda.synchronize()
                padded, unpadded = (m * 1e3 for m in timer.both(run))
                b2b = back_to_back_ms(timer, run) * 1e3
                print("%-30s pdl=%-5s padded %6.1f  unpadded %6.1f  back-to-back %6.1f us"
                      % (case.name, pdl, padded, unpadded, b2b), flush=True)
        del paged
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
