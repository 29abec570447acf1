#!/usr/bin/env python3
"""Lists the functions longer than a limit in the crates' non-test code.

Usage: scripts/fn-lengths.py [--max N] DIR...   (default 70; exit 1 if any is longer)

A function's length is its lines from `fn` to its closing brace. Test code is left out: files
under `tests/`, `benches/` and `examples/` folders, test modules in their own files (a folder or
file named `tests` or `*_tests`), and each file from `#[cfg(test)]` on (the convention here:
test modules come last). Braces in strings, characters and comments do not
count; a `'` that opens a lifetime is told from a character literal.
"""
import os
import re
import sys

FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:(?:const|async|unsafe|extern\s+\"\w+\")\s+)*fn\s+(\w+)")
TEST_DIRS = {"tests", "benches", "examples", "target"}


def code_only(text):
    """The text with strings, characters and comments blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif (m := re.match(r'b?r(#*)"', text[i:i + 260])) and (i == 0 or not text[i - 1].isalnum()):
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        elif c == "'" and (m := re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12])):
            out.append(" " * m.end())
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def long_functions(path, limit):
    with open(path) as fh:
        text = fh.read().split("#[cfg(test)]")[0]
    lines = code_only(text).split("\n")
    found = []
    for start, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        depth, opened = 0, False
        for end in range(start, len(lines)):
            for ch in lines[end]:
                if ch == ";" and not opened and depth == 0:
                    break  # a declaration without a body (a trait's method)
                if ch == "{":
                    depth, opened = depth + 1, True
                elif ch == "}":
                    depth -= 1
            else:
                if opened and depth == 0:
                    length = end - start + 1
                    if length > limit:
                        found.append((length, path, start + 1, m.group(1)))
                    break
                continue
            break
    return found


def main(argv):
    limit = 70
    if "--max" in argv:
        k = argv.index("--max")
        limit = int(argv[k + 1])
        argv = argv[:k] + argv[k + 2:]
    found = []
    for root in argv:
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in TEST_DIRS and not d.endswith("_tests"))
            for f in sorted(files):
                if f.endswith(".rs") and not f[:-3].endswith("tests"):
                    found += long_functions(os.path.join(dirpath, f), limit)
    for length, path, line, name in sorted(found, reverse=True):
        print(f"{path}:{line}: fn {name}: {length} lines")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
