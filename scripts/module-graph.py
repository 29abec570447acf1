#!/usr/bin/env python3
"""Checks that the modules of each crate import each other without a cycle, at every level.

Usage: scripts/module-graph.py CRATE_SRC_DIR... [--print]

Every module's children must form an acyclic graph: an import from anywhere inside child `a`
of anything inside its sibling `b` is an edge a -> b of their parent's graph (so `crate::x::y`
in `z/w.rs` is the edge z -> x of the crate root's graph, and `super::p` in `m/q.rs` the edge
q -> p of module m's graph). A module using its own parent or its own children is not an edge:
a parent declares its children and they may use what it defines.

Crate roots: `lib.rs`, `main.rs` and every `bin/NAME.rs` or `bin/NAME/main.rs` under a source
directory (each binary is its own crate; its modules are the files its folder holds).
Paths read: `crate::`, `super::` and `self::` paths, `use` groups in braces included. Code
from `#[cfg(test)]` on is left out of each file, and comments are. A text-level reading: a
path written in a string counts too, which errs on the side of finding a cycle; an item
re-exported by a parent and imported through it hides the child it comes from.

Exits 1 on a cycle and prints one cycle through each module that cannot be layered; with
--print also every graph of two or more modules in layers (each uses only earlier layers).
"""
import os
import re
import sys

PREFIX = re.compile(r"\b(crate|self|super)((?:\s*::\s*super)*)\s*::\s*")
IDENT = re.compile(r"\s*(r#)?(\w+)")


def strip(text):
    """The text without test code and comments."""
    text = text.split("#[cfg(test)]")[0]
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return text


def use_tree(text, i):
    """Paths of the use tree (or plain path) starting at text[i]: a list of segment lists."""
    j = i
    while j < len(text) and text[j] in " \t\n":
        j += 1
    if j < len(text) and text[j] == "{":
        paths, j = [], j + 1
        while True:
            sub, j = use_tree(text, j)
            paths += sub
            while j < len(text) and text[j] in " \t\n,":
                j += 1
            if j >= len(text) or text[j] == "}":
                return paths, j + 1
    m = IDENT.match(text, j)
    if not m:
        return [[]], j
    name, j = m.group(2), m.end()
    k = j
    while k < len(text) and text[k] in " \t\n":
        k += 1
    if text.startswith("::", k):
        subs, j = use_tree(text, k + 2)
        return [[name] + s for s in subs], j
    return [[name]], j


def imports(text, me):
    """Absolute module paths (segment lists) a file of module `me` names."""
    out = []
    for m in PREFIX.finditer(text):
        kind, supers = m.group(1), m.group(2).count("super")
        if kind == "crate":
            base = []
        elif kind == "self":
            base = list(me)
        else:
            up = 1 + supers
            if up > len(me):
                continue
            base = list(me[: len(me) - up])
        paths, _ = use_tree(text, m.end())
        out += [base + p for p in paths]
    return out


def crates(src):
    """(root file, module path of each file) for each crate whose sources lie under `src`."""
    roots = []
    for name in ("lib.rs", "main.rs"):
        if os.path.exists(os.path.join(src, name)):
            roots.append((name, src, {"bin"}))
    bins = os.path.join(src, "bin")
    if os.path.isdir(bins):
        for entry in sorted(os.listdir(bins)):
            path = os.path.join(bins, entry)
            if entry.endswith(".rs"):
                roots.append((entry, bins, "single"))
            elif os.path.exists(os.path.join(path, "main.rs")):
                roots.append(("main.rs", path, set()))
    # lib.rs and main.rs side by side share the folder; main.rs's own modules are those it
    # declares, lib's are the rest.
    main_mods = declared(os.path.join(src, "main.rs")) if len(roots) > 1 else set()
    for root, folder, skip in roots:
        files = {}
        if skip == "single":
            files[os.path.join(folder, root)] = []
        else:
            for path, mod in walk(folder, skip):
                top = mod[0] if mod else None
                if root == "main.rs" and folder == src and mod and top not in main_mods:
                    continue
                if root == "lib.rs" and mod and top in main_mods:
                    continue
                if not mod and os.path.basename(path) != root:
                    continue
                files[path] = mod
        yield os.path.join(folder, root), files


def declared(path):
    if not os.path.exists(path):
        return set()
    with open(path) as fh:
        return set(re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", fh.read(), re.M))


def walk(folder, skip):
    """Every .rs file below `folder` (but the `skip` subfolders) with its module path."""
    for dirpath, dirs, files in os.walk(folder):
        if dirpath == folder:
            dirs[:] = [d for d in dirs if d not in skip]
        rel = os.path.relpath(dirpath, folder)
        base = [] if rel == "." else rel.split(os.sep)
        for f in files:
            if not f.endswith(".rs"):
                continue
            stem = f[:-3]
            if stem == "mod" or (not base and stem in ("lib", "main")):
                mod = base
            else:
                mod = base + [stem]
            yield os.path.join(dirpath, f), mod


def graphs(files):
    """For each module with children: its children and the imports between them."""
    known = {tuple(m) for m in files.values()}
    g = {}
    for m in known:
        if m:
            g.setdefault(m[:-1], {}).setdefault(m[-1], set())
    for path, me in files.items():
        with open(path) as fh:
            text = strip(fh.read())
        for target in imports(text, me):
            while target and tuple(target) not in known:
                target = target[:-1]
            common = 0
            while common < min(len(me), len(target)) and me[common] == target[common]:
                common += 1
            if common == len(me) or common == len(target):
                continue  # an ancestor or a descendant
            parent = tuple(me[:common])
            g[parent][me[common]].add(target[common])
    return g


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
        for root, files in crates(src):
            for parent, g in sorted(graphs(files).items()):
                where = root + (" " + "::".join(parent) if parent else "")
                out, left = layers(g)
                if show and len(g) > 1:
                    print(f"{where}: " + " -> ".join(", ".join(layer) for layer in out))
                for c in cycles(g, left):
                    print(f"{where}: import cycle: {' -> '.join(c + (c[0],))}")
                    bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
