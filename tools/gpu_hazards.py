#!/usr/bin/env python3
"""Chapter 13's planted bugs on an sm_90 GPU, under compute-sanitizer: which of Hopper's hazards
do NVIDIA's tools catch, and which only the emulator's checked mode names?

    cmake -S . -B build/cuda -G Ninja -DPA_BACKEND=cuda -DCMAKE_CUDA_ARCHITECTURES=90 \\
          -DPA_PYTHON=python3 -DCMAKE_BUILD_TYPE=Release
    bash tools/gpu_hazards.sh OUT            # = python3 tools/gpu_hazards.py OUT

For the unmutated pipeline (tests/emu/hopper_pipeline.cuh) and then for each mutant of
tests/mutants/ whose target is chapter 13's pipeline test (one per hazard: a `-named` twin,
the same edit judged in checked mode, is left out), it plants the edit in the header, builds
tests/emu/hopper_hazard_driver (sm_90a), restores the header, and runs the driver plain
(--repeat times: a race may or may not bite) and under compute-sanitizer's memcheck,
racecheck, synccheck and initcheck, each under a timeout (a planted hang must not block the
run). It writes OUT/gpu-hazards.md, one line per mutant: how the plain runs ended and, for each
tool, `caught` with its first error line, `silent`, or `hang`; and OUT/logs/NAME.TOOL.log.
The unmutated line must be right and silent in every tool, or the table means nothing.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import run_mutants  # noqa: E402  (the mutant file format)

TARGET = "tests/emu/test_emu_pipeline"
DRIVER = "tests/emu/hopper_hazard_driver"
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
# The driver's exit statuses (hopper_hazard_driver.cu).
ENDINGS = {0: "right", 1: "wrong", 2: "CUDA error", 3: "no sm_90 GPU"}


def pipeline_mutants():
    """The mutants of chapter 13's pipeline, one per edit (the first of twins), by name."""
    out, seen = [], set()
    parsed = [run_mutants.parse_mutant(p) for p in (ROOT / "tests" / "mutants").glob("*.mutant")]
    for m in sorted(parsed, key=lambda m: (m["mode"] != "plain", m["name"])):
        edit = (m["file"], m["find"], m["replace"])
        if m.get("target", "").strip() == TARGET and edit not in seen:
            seen.add(edit)
            out.append(m)
    return sorted(out, key=lambda m: m["name"])


def run(cmd, timeout, env=None):
    """(exit status or None on a timeout, output); the whole process group ends on a timeout."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
    except OSError as e:  # no such program (nvidia-smi, compute-sanitizer)
        return 127, str(e)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out.decode(errors="replace")


def build(build_dir, m=None):
    """Builds the driver, with m planted in its file (restored afterwards, whatever happens).
    Returns (ok, build output)."""
    path = ROOT / m["file"] if m else None
    original = path.read_text() if m else None
    if m:
        if original.count(m["find"]) != 1:
            return False, f"`find` occurs {original.count(m['find'])} times in {m['file']}"
        path.write_text(original.replace(m["find"], m["replace"], 1))
    try:
        r = subprocess.run(["cmake", "--build", str(build_dir), "--target", Path(DRIVER).name],
                           capture_output=True, text=True)
        return r.returncode == 0, r.stdout + r.stderr
    finally:
        if m:
            path.write_text(original)


def first_error(out):
    """compute-sanitizer's first report line (its `=========` lines, less the banner and
    the summary), with what follows it on the next line (where: `at ... in FILE:LINE`)."""
    lines = [l[len("========="):].strip() for l in out.splitlines() if l.startswith("=========")]
    lines = [l for l in lines if l and not l.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY",
                                                         "RACECHECK SUMMARY", "Target application"))]
    if not lines:
        return ""
    where = next((l for l in lines[1:4] if re.search(r"\.cuh?:\d+", l)), "")
    return lines[0] + (f" ({where})" if where else "")


def verdict(code, out, timeout):
    if code is None:
        return f"hang (killed after {timeout:.0f} s)"
    m = re.search(r"(ERROR|RACECHECK) SUMMARY: (\d+) (errors?|hazards?)", out)
    count = int(m.group(2)) if m else 0
    if code == 99 or count:
        return f"caught, {count} {m.group(3) if m else 'errors'}: {first_error(out) or '(no line)'}"
    if code == 0:
        return "silent (output right)"
    return f"silent (driver exit {code}: {ENDINGS.get(code, 'crash')})"


def judge(binary, name, logs, args):
    """The plain runs' tally and each tool's verdict for one built driver."""
    plain = {}
    for i in range(args.repeat):
        code, out = run([str(binary)], args.timeout)
        (logs / f"{name}.plain-{i}.log").write_text(out)
        ending = "hang" if code is None else ENDINGS.get(code, f"exit {code}")
        plain[ending] = plain.get(ending, 0) + 1
        if code is None:
            break  # a hang hangs again: no need to wait for it twice
    row = {"plain": ", ".join(f"{k} {v}x" for k, v in plain.items())}
    for tool in TOOLS:
        cmd = [args.sanitizer, "--tool", tool, "--error-exitcode", "99", "--print-limit", "10"]
        if tool == "racecheck":
            cmd += ["--racecheck-report", "all"]
        code, out = run(cmd + [str(binary)], args.timeout)
        (logs / f"{name}.{tool}.log").write_text(out)
        row[tool] = verdict(code, out, args.timeout)
    return row


def cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="folder for gpu-hazards.md, the logs and the built drivers")
    ap.add_argument("--build", default="build/cuda", help="the configured CUDA build (default build/cuda)")
    ap.add_argument("--timeout", type=float, default=20, help="seconds per run (default 20)")
    ap.add_argument("--repeat", type=int, default=3, help="plain runs per mutant (default 3)")
    ap.add_argument("names", nargs="*", help="mutant names or prefixes (default: all of the pipeline's)")
    args = ap.parse_args()
    args.sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    build_dir = (ROOT / args.build) if not Path(args.build).is_absolute() else Path(args.build)
    if not (build_dir / "CMakeCache.txt").is_file():
        sys.exit(f"gpu_hazards: {build_dir} is not configured; first run\n  cmake -S . -B {args.build} -G Ninja "
                 "-DPA_BACKEND=cuda -DCMAKE_CUDA_ARCHITECTURES=90 -DPA_PYTHON=python3 -DCMAKE_BUILD_TYPE=Release")
    if run([args.sanitizer, "--version"], 30)[0] != 0:
        sys.exit(f"gpu_hazards: no compute-sanitizer ({args.sanitizer}): it comes with the CUDA toolkit")
    out = Path(args.out).resolve()
    logs, bins = out / "logs", out / "bin"
    logs.mkdir(parents=True, exist_ok=True)
    bins.mkdir(parents=True, exist_ok=True)
    mutants = [m for m in pipeline_mutants()
               if not args.names or any(m["name"].startswith(n) for n in args.names)]

    gpu = run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], 30)[1].strip()
    version = run([args.sanitizer, "--version"], 30)[1].strip().splitlines()
    rows, t0 = [], time.time()
    for m in [None] + mutants:
        name = m["name"] if m else "unmutated"
        start = time.time()
        ok, bout = build(build_dir, m)
        (logs / f"{name}.build.log").write_text(bout)
        if not ok:
            rows.append((name, m, {"plain": "BUILD FAILED"}))
            print(f"   {name:32} BUILD FAILED (log: {logs / (name + '.build.log')})", flush=True)
            if m is None:
                sys.exit("gpu_hazards: the unmutated driver does not build\n" + bout[-3000:])
            continue
        binary = bins / name
        shutil.copy2(build_dir / DRIVER, binary)
        row = judge(binary, name, logs, args)
        rows.append((name, m, row))
        print(f"   {name:32} {time.time() - start:5.0f}s  " + "  ".join(f"{k}: {v}" for k, v in row.items()),
              flush=True)
    build(build_dir)  # leave the build as the source is

    lines = [f"# Chapter 13's planted bugs under compute-sanitizer ({time.strftime('%Y-%m-%d')})", "",
             f"GPU: {gpu or 'unknown'}; {version[-1] if version else 'compute-sanitizer: unknown version'}.",
             f"Written by `bash tools/gpu_hazards.sh` ({time.time() - t0:.0f} s). Each mutant of "
             "`tests/emu/hopper_pipeline.cuh` built into `hopper_hazard_driver` (sm_90a), run "
             f"{args.repeat} times plain (a hang once) and once under each tool, {args.timeout:.0f} s "
             "a run. `caught` is the tool's first report line.", "",
             "| mutant | the hazard | plain runs | " + " | ".join(TOOLS) + " |",
             "|---|---|---|" + "---|" * len(TOOLS)]
    for name, m, row in rows:
        why = m["why"].split(":")[0] if m else "none: the right pipeline"
        lines.append(f"| {name} | {cell(why)} | {cell(row.get('plain', '-'))} | "
                     + " | ".join(cell(row.get(t, "-")) for t in TOOLS) + " |")
    caught = {t: [n for n, m, r in rows if m and r.get(t, "").startswith("caught")] for t in TOOLS}
    lines += ["", "Caught, by tool: " + "; ".join(f"{t} {len(v)} ({', '.join(v) or 'none'})"
                                                   for t, v in caught.items()) + "."]
    (out / "gpu-hazards.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    base = rows[0][2]
    if base.get("plain") != f"right {args.repeat}x" or any(not base[t].startswith("silent") for t in TOOLS):
        print("gpu_hazards: the UNMUTATED pipeline is not right and silent: the table means nothing")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
