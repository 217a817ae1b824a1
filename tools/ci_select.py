#!/usr/bin/env python3
"""What make ci checks in depth on this commit: the chapters a change reaches, and a
rotating share of the rest (issue 58, CI's budget).

    python3 tools/ci_select.py chapters --build build/cpu      # directed and rotating chapters
    python3 tools/ci_select.py nvcc                           # the .cu files nvcc-check compiles
    python3 tools/ci_select.py explain --build build/cpu       # which change directs what
    python3 tools/ci_select.py targets --build build/cpu       # chapters of emulator-test mutants

"Changed" is against the parent commit (`--base`, default HEAD~1; CI's clone needs depth 2),
plus what is uncommitted. A changed file directs a chapter when the chapter's tests are built
from it: the build graph says so (ninja's inputs of test_chNN_solution and test_chNN_chapter,
with the headers each object read, from ninja's deps log), so a change to emu/, include/pa/,
tests/common/ or an earlier chapter reaches every chapter built on it, with no hand-written
list. A mutant file (tests/mutants/, tests/exercise_mutants/) directs its own chapter. A
change to what builds or judges every chapter (CMakeLists.txt, the Makefile, the mutant
runner, this selector, run_tests.sh, the skeleton generator) directs them all, and so does a
base that cannot be read: the selection fails open, never closed.

The rest rotate: of the chapters (or .cu files) no change reaches, those whose place in the
sorted list is k mod N run, k = `git rev-list --count HEAD` (anyone can recompute it),
N = --share (default 4): every item runs at least once in N commits. The directed chapters
come in an order that starts at the k-th (rotated), the order a time cap cuts from the end
of (tools/ci_budget.py).

A planted bug may run a test program of the emulator's own (its `target:`, such as chapter
13's pipeline, tests/emu/test_emu_pipeline) rather than a chapter's solution test. Such a
mutant's chapter has no solution to build (yet), so it is selected apart (`targets`): directed
when a change reaches that program (its build inputs: the emulator, include/pa/, the pipeline)
or the mutant files, rotating like the rest otherwise.

nvcc-check's files are not in the CPU build's graph as nvcc compiles them, so for them the
same closure is read from the sources' own #include "..." lines (project headers only),
leaving out emu/: nvcc never reads the emulator.
"""
import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Files that build or judge every chapter: a change to one directs them all.
HARNESS = ("CMakeLists.txt", "Makefile", "tools/run_tests.sh", "tools/run_mutants.py",
           "tools/mutant_compile.sh", "tools/ci_select.py", "tools/make_skeletons.py",
           "tests/CMakeLists.txt", "emu/CMakeLists.txt")
CHAPTER_DIR = re.compile(r"^(?:solutions|chapters|tests)/(\d\d)-[^/]+/")
MUTANT_FILE = re.compile(r"^tests/(?:exercise_)?mutants/(\d\d)-[^/]+\.mutant$")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def git(*args, cwd=ROOT):
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None


def changed_files(base="HEAD~1", cwd=ROOT):
    """Files changed from BASE to the work tree (committed, staged or not, untracked), or
    None when BASE cannot be read (a clone of depth 1, a first commit)."""
    if git("rev-parse", "--verify", "--quiet", base + "^{commit}", cwd=cwd) is None:
        return None
    diff = git("diff", "--name-only", base, cwd=cwd)
    untracked = git("ls-files", "--others", "--exclude-standard", cwd=cwd) or ""
    if diff is None:
        return None
    return sorted({l for l in (diff + untracked).splitlines() if l})


def commit_count(cwd=ROOT):
    out = git("rev-list", "--count", "HEAD", cwd=cwd)
    return int(out) if out and out.strip().isdigit() else 0


def chapters_of_tree(root=ROOT):
    return sorted(p.name[:2] for p in (root / "solutions").glob("[0-9][0-9]-*") if p.is_dir())


def ninja(build, *args):
    r = subprocess.run(["ninja", "-C", str(build), *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"ci_select: ninja {' '.join(args)} failed in {build}:\n{r.stderr[-2000:]}")
    return r.stdout


def parse_deps(text):
    """ninja -t deps: {object: [the files its compile read]}."""
    deps, cur = {}, None
    for line in text.splitlines():
        if line and not line[0].isspace():
            cur = line.split(":", 1)[0].strip()
            deps[cur] = []
        elif line.strip() and cur is not None:
            deps[cur].append(line.strip())
    return deps


def repo_relative(path, build, root=ROOT):
    """A path from ninja (relative to the build directory, or absolute) as one relative to
    the repository, or None for a file outside it (system headers, the build's own files)."""
    p = Path(path)
    p = (build / p) if not p.is_absolute() else p
    try:
        rel = Path(os.path.normpath(p)).relative_to(root)
    except ValueError:
        return None
    s = rel.as_posix()
    return None if s.startswith("build/") else s


def chapter_inputs(build, chapters, root=ROOT):
    """{chapter: the repository files its tests are built from}, from the build graph."""
    build = Path(build).resolve()
    deps = parse_deps(ninja(build, "-t", "deps"))
    out = {}
    for n in chapters:
        files = set()
        for flavor in ("solution", "chapter"):
            for item in ninja(build, "-t", "inputs", f"test_ch{n}_{flavor}").split():
                rel = repo_relative(item, build, root)
                if rel:
                    files.add(rel)
                for dep in deps.get(item, ()):
                    rel = repo_relative(dep, build, root)
                    if rel:
                        files.add(rel)
        out[n] = files
    return out


MUTANT_TARGET = re.compile(r"^target: *(\S+)", re.M)


def target_chapters(root=ROOT):
    """{chapter: the test programs its planted bugs name (target:)}, for the chapters with
    no solutions/ of their own."""
    have = set(chapters_of_tree(root))
    out = {}
    for p in sorted((root / "tests" / "mutants").glob("[0-9][0-9]-*.mutant")):
        m = MUTANT_TARGET.search(p.read_text(errors="replace"))
        if m and p.name[:2] not in have:
            out.setdefault(p.name[:2], set()).add(m.group(1))
    return out


def target_inputs(build, targets, root=ROOT):
    """The repository files the test programs `targets` (paths in the build) are built from."""
    build = Path(build).resolve()
    deps = parse_deps(ninja(build, "-t", "deps"))
    files = set()
    for t in sorted(targets):
        for item in ninja(build, "-t", "inputs", t).split():
            for f in [item] + deps.get(item, []):
                rel = repo_relative(f, build, root)
                if rel:
                    files.add(rel)
    return files


def owner(path):
    """The chapter a file is one of (its solution, skeleton, tests or a mutant of it), or None."""
    m = CHAPTER_DIR.match(path) or MUTANT_FILE.match(path)
    return m.group(1) if m else None


def directed_chapters(changed, inputs, chapters):
    """{chapter: the reason it is directed} for the changed files; all when changed is None
    or a harness file changed."""
    if changed is None:
        return {n: "the parent commit cannot be read (a shallow clone?): everything" for n in chapters}
    harness = [f for f in changed if f in HARNESS]
    if harness:
        return {n: f"{harness[0]} changed (builds or judges every chapter)" for n in chapters}
    why = {}
    for n in chapters:
        hits = [f for f in changed if owner(f) == n or f in inputs.get(n, ())]
        if hits:  # its own file first, as the reason
            why[n] = min(hits, key=lambda f: (owner(f) != n, f))
    return why


def rotation(items, k, share):
    """The items whose place in the sorted list is k mod share."""
    return [x for i, x in enumerate(sorted(items)) if i % share == k % share]


def own_change(n, why):
    """Whether chapter N is directed by a file of its own (its solution, skeleton, tests or
    mutants), not only through what it is built on."""
    return owner(why.get(n, "")) == n


def rotated(items, k):
    """ITEMS starting from the (k mod len)-th, wrapping: the order a time cap cuts from the
    end of, so that when every chapter is directed the cut moves on with each commit."""
    items = list(items)
    if not items:
        return items
    i = k % len(items)
    return items[i:] + items[:i]


def select(items, directed, k, share):
    """(directed items, rotating items, the rest), each in sorted order."""
    rest = sorted(x for x in items if x not in directed)
    rot = rotation(rest, k, share)
    return sorted(x for x in items if x in directed), rot, [x for x in rest if x not in rot]


def include_closure(path, root=ROOT, seen=None):
    """The project files a source reads through #include "..." (itself included), resolved as
    nvcc_check.sh's flags resolve them: the file's folder, include/, every solutions/NN-*/."""
    seen = set() if seen is None else seen
    rel = path.relative_to(root).as_posix()
    if rel in seen or rel.startswith("emu/"):
        return seen
    seen.add(rel)
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return seen
    dirs = [path.parent, root / "include"] + sorted(p for p in (root / "solutions").glob("[0-9][0-9]-*"))
    for name in INCLUDE.findall(text):
        for d in dirs:
            cand = (d / name)
            if cand.is_file():
                include_closure(Path(os.path.normpath(cand)), root, seen)
                break
    return seen


def nvcc_files(root=ROOT):
    files = []
    for pattern in ("solutions/*/*.cu", "chapters/*/*.cu"):
        files += sorted(root.glob(pattern))
    for name in ("test_semantics.cu", "test_hopper_semantics.cu", "hopper_hazard_driver.cu"):
        sem = root / "tests/emu" / name
        if sem.is_file():
            files.append(sem)
    return [f.relative_to(root).as_posix() for f in files]


def directed_nvcc(changed, files, root=ROOT):
    if changed is None:
        return {f: "the parent commit cannot be read: everything" for f in files}
    harness = [f for f in changed if f in ("tools/nvcc_check.sh", "tools/ci_select.py")]
    if harness:
        return {f: f"{harness[0]} changed" for f in files}
    changed = set(changed)
    why = {}
    for f in files:
        hit = sorted(include_closure(root / f, root) & changed)
        if hit:
            why[f] = hit[0]
    return why


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("chapters", "nvcc", "explain", "targets"))
    ap.add_argument("--build", help="the configured and built CPU build directory (chapters, explain)")
    ap.add_argument("--base", default=os.environ.get("PA_CI_BASE", "HEAD~1"),
                    help="the commit to compare with (default HEAD~1; env PA_CI_BASE)")
    ap.add_argument("--share", type=int, default=int(os.environ.get("PA_CI_SHARE", "4")),
                    help="one in SHARE of the undirected items rotates in (default 4; env PA_CI_SHARE)")
    ap.add_argument("--json", action="store_true", help="print the selection as JSON")
    args = ap.parse_args(argv)
    changed = changed_files(args.base)
    k = commit_count()
    chapters = chapters_of_tree()

    if args.what == "targets":
        if not args.build:
            ap.error("--build is needed (the programs' inputs come from its build graph)")
        owned = target_chapters()
        inputs = {n: target_inputs(args.build, t) for n, t in owned.items()} if changed else {}
        why = directed_chapters(changed, inputs, sorted(owned))
        d, r, _ = select(sorted(owned), why, k, args.share)
        print(" ".join(d))
        print(" ".join(r))
        if changed is not None:
            for n in d:
                print(f"  chapter {n}'s planted bugs: directed by {why[n]}", file=sys.stderr)
        return 0
    if args.what == "nvcc":
        files = nvcc_files()
        why = directed_nvcc(changed, files)
        d, r, cut = select(files, why, k, args.share)
        result = {"directed": d, "rotating": r, "not_selected": cut, "why": why}
    else:
        if not args.build:
            ap.error("--build is needed (the chapters come from its build graph)")
        why = directed_chapters(changed, chapter_inputs(args.build, chapters) if changed else {}, chapters)
        d, r, cut = select(chapters, why, k, args.share)
        # The chapters whose own files changed first, then those reached through what they are
        # built on; each group from the k-th on.
        d = rotated(d, k)
        d = [n for n in d if own_change(n, why)] + [n for n in d if not own_change(n, why)]
        result = {"directed": d, "rotating": r, "not_selected": cut, "why": why}
    result.update(base=args.base, rotation=f"{k} mod {args.share} = {k % args.share}",
                  changed=changed if changed is not None else "unknown")
    if args.json:
        print(json.dumps(result, indent=1))
    elif args.what == "explain":
        print(f"changed since {args.base}: {'unknown' if changed is None else len(changed)} file(s)")
        for n in chapters:
            state = ("directed" if own_change(n, why) else "reached") if n in why else \
                ("rotating" if n in result["rotating"] else "-")
            print(f"  chapter {n}: {state:9} {why.get(n, '')}")
    else:
        print(" ".join(result["directed"]))
        print(" ".join(result["rotating"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
