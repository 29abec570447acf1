#!/usr/bin/env python3
"""Checks that every link in the repository's Markdown files resolves.

Usage: scripts/doc-links.py [--code] REPO

For every `*.md` file under REPO (outside target/, .git/, fuzz/artifacts): each inline link or
image `[text](target)` and each reference definition `[id]: target` must name a file or folder
that exists inside REPO (relative to the Markdown file; `#anchor` alone means the same file),
and an `#anchor` on a Markdown file must be the GitHub anchor of one of its headings. Links
with a scheme (https:, mailto:) are listed, not followed. Any path that leaves REPO counts as
broken: nothing in the repository may point outside it.

With --code, pointers written as `<file>.md#<anchor>` in source files (.rs, .sh, .py, .yml,
.yaml, .toml) are checked the same way, relative to REPO's root.

Prints each broken link as `file:line: target (why)` and exits 1 if there is any.
"""
import os
import re
import sys

SKIP = {"target", ".git", "artifacts", "corpus", "node_modules", ".cluster"}
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
CODE_POINTER = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)#([\w-]+)")
CODE_EXTS = (".rs", ".sh", ".py", ".yml", ".yaml", ".toml")


def walk(root, exts):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP and not d.startswith("target-"))
        for name in sorted(filenames):
            if name.endswith(exts):
                yield os.path.join(dirpath, name)


def github_anchor(heading, seen):
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip())
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
    n = seen.get(slug, 0)
    seen[slug] = n + 1
    return slug if n == 0 else f"{slug}-{n}"


_anchors = {}


def anchors(path):
    """GitHub anchors of a Markdown file's headings (and explicit `<a name=...>`/`id=`)."""
    if path not in _anchors:
        seen, found, fence = {}, set(), False
        for line in open(path, encoding="utf-8"):
            if re.match(r"^\s*(```|~~~)", line):
                fence = not fence
                continue
            if fence:
                continue
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                found.add(github_anchor(m.group(1), seen))
            for m in re.finditer(r"<a\s+(?:name|id)=\"([^\"]+)\"", line):
                found.add(m.group(1))
        _anchors[path] = found
    return _anchors[path]


def check(target, base_dir, root, where, problems, external):
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
        external.append(f"{where}: {target}")
        return
    path_part, _, anchor = target.partition("#")
    if path_part.startswith("/"):
        problems.append(f"{where}: {target} (absolute path)")
        return
    path = os.path.normpath(os.path.join(base_dir, path_part)) if path_part else None
    if path is not None:
        if os.path.relpath(path, root).startswith(".."):
            problems.append(f"{where}: {target} (outside the repository)")
            return
        if not os.path.exists(path):
            problems.append(f"{where}: {target} (no such file)")
            return
    if anchor:
        md = path or where.rsplit(":", 1)[0]
        md = md if os.path.isabs(md) else os.path.join(root, md)
        if not md.endswith(".md"):
            return  # an anchor into source code (a line) is not checked
        if anchor not in anchors(md):
            problems.append(f"{where}: {target} (no heading with anchor #{anchor})")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    code = "--code" in sys.argv
    if len(args) != 1:
        print(__doc__)
        return 2
    root = os.path.abspath(args[0])
    problems, external, links = [], [], 0
    for path in walk(root, (".md",)):
        rel = os.path.relpath(path, root)
        fence = False
        for i, line in enumerate(open(path, encoding="utf-8"), 1):
            if re.match(r"^\s*(```|~~~)", line):
                fence = not fence
                continue
            if fence:
                continue
            stripped = re.sub(r"`[^`]*`", "", line)  # links inside code spans are text
            targets = [m.group(1) for m in INLINE.finditer(stripped)]
            m = REFDEF.match(stripped)
            if m:
                targets.append(m.group(1))
            for target in targets:
                links += 1
                check(target, os.path.dirname(path), root, f"{rel}:{i}", problems, external)
    if code:
        for path in walk(root, CODE_EXTS):
            rel = os.path.relpath(path, root)
            for i, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                for m in CODE_POINTER.finditer(line):
                    links += 1
                    check(f"{m.group(1)}#{m.group(2)}", root, root, f"{rel}:{i}", problems, external)
    print(f"{links} links checked")
    for e in external:
        print("external", e)
    for p in problems:
        print("BROKEN", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
