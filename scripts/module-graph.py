#!/usr/bin/env python3
"""Checks that a crate's top-level modules import each other without a cycle.

Usage: scripts/module-graph.py CRATE_SRC_DIR... [--print]

Reads every .rs file below each directory (test modules, from `#[cfg(test)]` on, left out),
takes `crate::NAME` (and, in a module's own sub-files, `super::NAME`) as an import of the
top-level module NAME, and prints the cycles it finds; with --print also the modules in layers
(each uses only those in earlier layers). Exits 1 on a cycle. A text-level reading: a path
written in a string counts too (comments do not), which errs on the side of finding a cycle.
"""
import os
import re
import sys


def graph(src):
    g = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, src)[:-3]
            me = rel.split(os.sep)[0]
            if me in ("lib", "main"):
                continue
            with open(path) as fh:
                text = fh.read().split("#[cfg(test)]")[0]
            text = re.sub(r"//.*", "", text)
            deps = set(re.findall(r"crate::(\w+)", text))
            if os.sep in rel:
                deps |= set(re.findall(r"super::(\w+)", text))
            g.setdefault(me, set()).update(d for d in deps if d != me)
    return {m: {d for d in deps if d in g} for m, deps in g.items()}


def layers(g):
    """Modules in layers; what is left when no module is free is in (or behind) a cycle."""
    done, out, left = set(), [], set(g)
    while left:
        free = sorted(m for m in left if g[m] <= done)
        if not free:
            return out, left
        out.append(free)
        done |= set(free)
        left -= set(free)
    return out, set()


def cycles(g, left):
    """One cycle through each module that cannot be placed, found by walking its imports."""
    found = set()
    for start in sorted(left):
        path, seen, m = [], {}, start
        while m not in seen:
            seen[m] = len(path)
            path.append(m)
            m = sorted(d for d in g[m] if d in left)[0]
        cycle = path[seen[m]:]
        first = cycle.index(min(cycle))
        found.add(tuple(cycle[first:] + cycle[:first]))
    return sorted(found)


def main(argv):
    show = "--print" in argv
    bad = 0
    for src in [a for a in argv if a != "--print"]:
        g = graph(src)
        out, left = layers(g)
        if show:
            print(f"{src}: " + " -> ".join(", ".join(layer) for layer in out))
        for c in cycles(g, left):
            print(f"{src}: import cycle: {' -> '.join(c + (c[0],))}")
            bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
