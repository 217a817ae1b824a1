"""The one edit the tools/perf scripts make to a copy of the tree: each `old` text must occur
exactly once in the file (else the script stops, naming the file and the text), and becomes
`new`; each regex must match exactly `count` times. Performance work only."""
import re
import sys


def edit(root, rel, pairs, regex=(), tool="perf"):
    path = f"{root}/{rel}"
    text = open(path).read()
    for old, new in pairs:
        if text.count(old) != 1:
            sys.exit(f"{tool}: {rel} holds {text.count(old)} copies of {old!r}")
        text = text.replace(old, new)
    for pat, new, count in regex:
        text, n = re.subn(pat, new, text)
        if n != count:
            sys.exit(f"{tool}: {rel}: {pat!r} matched {n} times, not {count}")
    open(path, "w").write(text)
