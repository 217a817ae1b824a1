#!/usr/bin/env python3
"""CI's time budget in one place (issue 58): each phase of make ci has a share of the 60
minutes a cold run may take on the slowest 2-core machine seen (2026-12-02's), and the
capped phases stop starting work when their share is spent.

    python3 tools/ci_budget.py calibrate BUILD   # this machine's speed against that machine
    python3 tools/ci_budget.py target BUILD_SECS # the run's budget: cold (60 min) or warm (30)
    python3 tools/ci_budget.py cap PHASE         # PHASE's cap in this machine's wall seconds
    python3 tools/ci_budget.py report TIMES      # each phase's time against its share

Shares are in that slow machine's seconds, so a run here, scaled by the calibration, is what
it would take there: the calibration is the CPU time of one compile that every machine does
the same way (chapter 10's varlen_attention.cu, as the build compiles it, without ccache).
The slow machine's figure for it is derived, not measured there: a cold `make test-chapter-10`
took 222 s on it and 96.2 s on the machine of 2026-12-07, whose compile of this file took
19.8 s of CPU (NOTES.md, "CI time: directed checks under a budget"): 19.8 x 222 / 96.2.
"""
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLOW_CALIBRATION = 19.8 * 222 / 96.2  # seconds of CPU: about 45.7
CALIBRATION_FILE = "solutions/10-varlen-attention/varlen_attention.cu"
BUDGET = 3600  # seconds on the slow machine: a cold run of .ci/run (an empty compiler cache)
WARM_BUDGET = 1800  # a warm one (its build served from the cache)
# Kept back from the capped phases for their overruns: a cap stops new work, and what has
# started (a test shard, a mutant's chapter build, an nvcc compile) runs to its end.
RESERVE = 240
# Each phase's share, in the slow machine's seconds. Fixed phases run whole (their share is a
# yardstick the report holds them to). The capped phases come last and share what is left of
# the run's budget in proportion to their shares, each stopping new work at its cap.
SHARES = {
    # phase: (share, capped)
    "set-up and doctor": (90, False),
    "build": (1000, False),
    "make test's runs": (440, False),
    "calibration": (50, False),
    "book": (230, False),
    "planted bugs the book shows": (260, False),
    "nvcc-check": (80, True),
    "exercise mutants": (340, True),
    "checked mode": (420, True),
    "planted bugs, the rest": (60, True),
    "core done": (180, True),
    "greedy schedule and traces": (200, True),
}
CAPPED = [phase for phase, (_, capped) in SHARES.items() if capped]


def speed_file(build):
    return Path(build) / "ci-speed.json"


def calibrate(build):
    """Compiles the calibration file as the build does (its compile command, output to
    /dev/null, no launcher) and returns {cpu, factor}: factor = this machine's seconds per
    second of the slow machine."""
    cc = json.loads((Path(build) / "compile_commands.json").read_text())
    target = str(ROOT / CALIBRATION_FILE)
    cmd = next(c["command"] for c in cc
               if c["file"] == target and "pa_ch10_solution.dir" in c["command"])
    args = shlex.split(cmd)
    if "-o" in args:
        args[args.index("-o") + 1] = "/dev/null"
    if Path(args[0]).name == "ccache":
        args = args[1:]
    before = os.times()
    t0 = time.time()
    subprocess.run(args, cwd=cc[0]["directory"], check=True)
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    result = {"cpu": round(cpu, 2), "wall": round(time.time() - t0, 2),
              "factor": round(cpu / SLOW_CALIBRATION, 3)}
    speed_file(build).write_text(json.dumps(result) + "\n")
    return result


def factor():
    """This machine's seconds per slow-machine second: PA_CI_SPEED, else 1 (the slow
    machine's own caps)."""
    try:
        return float(os.environ.get("PA_CI_SPEED", "1"))
    except ValueError:
        return 1.0


def target(build_seconds):
    """The run's budget in slow-machine seconds: the cold one when the build compiled (it took
    more than a third of its share), the warm one when the cache served it."""
    return BUDGET if build_seconds > SHARES["build"][0] * factor() / 3 else WARM_BUDGET


def cap(phase, now=None):
    """PHASE's cap in this machine's seconds. With PA_CI_START (the run's start, seconds since
    the epoch) and PA_CI_TARGET (its budget, slow seconds): PHASE's share of what is left of
    the budget, less the reserve, among the capped phases from PHASE on; else its own share."""
    share, capped = SHARES[phase]
    if not capped:
        raise SystemExit(f"ci_budget: {phase} is not a capped phase")
    f = factor()
    start, tgt = os.environ.get("PA_CI_START"), os.environ.get("PA_CI_TARGET")
    if not (start and tgt):
        return round(share * f)
    now = time.time() if now is None else now
    left = float(start) + (float(tgt) - RESERVE) * f - now
    weights = sum(SHARES[p][0] for p in CAPPED[CAPPED.index(phase):])
    return max(0, round(left * share / weights))


def report(times_path):
    """TIMES: lines `PHASE<TAB>SECONDS` (run_tests.sh writes them). Prints each phase against
    its share and the run projected onto the slow machine."""
    f = factor()
    rows = []
    for line in Path(times_path).read_text().splitlines():
        if "\t" in line:
            phase, secs = line.rsplit("\t", 1)
            rows.append((phase, float(secs)))
    total_here = sum(s for _, s in rows)
    print(f"== CI budget: this machine's speed {f:.3f} x the slow machine of 2026-12-02 "
          f"(calibration: {CALIBRATION_FILE})")
    print(f"   {'phase':30} {'here':>7} {'share here':>10} {'as slow':>8} {'share':>6}")
    for phase, secs in rows:
        share, capped = SHARES.get(phase, (0, False))
        flag = "" if secs <= share * f * 1.05 else "  OVER its share"
        print(f"   {phase:30} {secs:6.0f}s {share * f:9.0f}s {secs / f:7.0f}s {share:5d}s"
              f"{' (cap)' if capped else ''}{flag}")
    budget = int(os.environ.get("PA_CI_TARGET") or BUDGET)
    print(f"   {'make ci in all':30} {total_here:6.0f}s {budget * f:9.0f}s {total_here / f:7.0f}s {budget:5d}s"
          f"  (the {'cold' if budget == BUDGET else 'warm'} budget: {budget // 60} minutes on the slow machine, "
          f".ci/run's set-up included)")


def main(argv):
    if len(argv) >= 2 and argv[0] == "calibrate":
        r = calibrate(argv[1])
        print(f"{r['factor']}")
        print(f"calibration: {CALIBRATION_FILE} compiled in {r['cpu']:.1f} s of CPU ({r['wall']:.1f} s wall); "
              f"the slow machine of 2026-12-02: {SLOW_CALIBRATION:.1f} s; speed factor {r['factor']:.3f}",
              file=sys.stderr)
    elif len(argv) == 2 and argv[0] == "cap":
        print(cap(argv[1]))
    elif len(argv) == 2 and argv[0] == "target":
        print(target(float(argv[1])))
    elif len(argv) == 2 and argv[0] == "report":
        report(argv[1])
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
