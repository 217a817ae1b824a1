"""Chapter 11's benchmark cases, read from bench/ch11_cases.txt (its top says the format).

The one list that bench_ch11 (bench/ch11_cases.h, the same rules in C++) and
bench_flashinfer_mla.py both run, and that compare_ch11.py lays out in tables.
No third-party imports: the GPU-free tests and the comparison use it as it is.
"""

import math
import os

CASES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ch11_cases.txt")


def ragged_lengths(n, lo, hi, seed):
    """n lengths log-uniform in [lo, hi], from a fixed hash (no RNG state)."""
    out = []
    for i in range(n):
        h = ((i + 1) * 2654435761 + seed * 40503) % 2**32 / 2**32
        out.append(int(round(math.exp(math.log(lo) + h * (math.log(hi) - math.log(lo))))))
    return out


def _int(text, what):
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"bad {what} '{text}'") from None


def parse_lengths(spec):
    """'B x L' or 'ragged N LO HI SEED' -> list of lengths."""
    w = spec.split()
    if len(w) == 3 and w[1] == "x":
        b, length = _int(w[0], "batch"), _int(w[2], "length")
        if b < 1 or length < 1:
            raise ValueError(f"batch and length must be >= 1 in '{spec}'")
        return [length] * b
    if len(w) == 5 and w[0] == "ragged":
        n, lo, hi, seed = (_int(t, what) for t, what in zip(w[1:], ("count", "lo", "hi", "seed")))
        if n < 1 or lo < 1 or hi < lo:
            raise ValueError(f"need n >= 1 and 1 <= lo <= hi in '{spec}'")
        return ragged_lengths(n, lo, hi, seed)
    raise ValueError(f"lengths '{spec}' is neither 'B x L' nor 'ragged N LO HI SEED'")


def parse_sections(text, header, make_case):
    """The grammar of the benchmarks' case files (this one, bench/ch14_cases.txt): '## title'
    starts a section, '= name' shows a case defined elsewhere again, '#' comments, and each
    other line is a case of the fields `header` names ('name | h_q | ...'), which
    make_case(fields) turns into a case whose first element is its name (or raises
    ValueError). Returns (cases in file order, sections [(title, [case names])]). Raises
    ValueError('LINE: why') on the first bad line."""
    width = len(header.split("|"))
    cases, sections, names, refs = [], [], set(), []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        try:
            if line.startswith("##"):
                sections.append((line[2:].strip(), []))
                continue
            if not line or line.startswith("#"):
                continue
            if line.startswith("="):
                name = line[1:].strip()
                refs.append((no, name))
                if sections:
                    sections[-1][1].append(name)
                continue
            f = [t.strip() for t in line.split("|")]
            if len(f) != width:
                raise ValueError(f"want {width} fields '{header}'")
            if f[0] in names:
                raise ValueError(f"case '{f[0]}' defined twice")
            case = make_case(f)
        except ValueError as e:
            raise ValueError(f"{no}: {e}") from None
        names.add(case[0])
        cases.append(case)
        if sections:
            sections[-1][1].append(case[0])
    for no, name in refs:
        if name not in names:
            raise ValueError(f"{no}: '= {name}' names no case")
    if not cases:
        raise ValueError("no cases")
    return cases, sections


def _case(f):
    name = f[0]
    hq, s_q = _int(f[1], "h_q"), _int(f[2], "s_q")
    lengths = parse_lengths(f[3])
    block = _int(f[4], "block size")
    if not name:
        raise ValueError("empty name")
    if '"' in name:
        raise ValueError("a name may not hold '\"' (CSV)")
    if not 1 <= hq <= 128:
        raise ValueError("h_q must be in 1..128")
    if not 1 <= s_q <= 4:
        raise ValueError("s_q must be in 1..4")
    if block not in (16, 32, 64):
        raise ValueError("block size must be 16, 32 or 64")
    if min(lengths) < s_q:
        raise ValueError("a length is shorter than s_q")
    return (name, hq, s_q, lengths, block)


def parse(text):
    """(cases, sections): cases [(name, h_q, s_q, lengths, block)] in file order; sections
    [(title, [case names])] (parse_sections)."""
    return parse_sections(text, "name | h_q | s_q | lengths | block", _case)


def read(path=CASES_FILE, parse=parse):
    """parse() of the file at path; an error names the file and the line."""
    with open(path) as f:
        text = f.read()
    try:
        return parse(text)
    except ValueError as e:
        raise ValueError(f"{path}:{e}") from None
