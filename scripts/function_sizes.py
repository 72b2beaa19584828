#!/usr/bin/env python3
"""Lists the largest functions and files of the C++/CUDA sources.

    scripts/function_sizes.py [--top N] [--over LINES] [PATH...]

A function is a top-level or class-member definition: a line that opens a
brace after a parameter list, at namespace or class depth, up to its
matching brace (a heuristic over the repository's clang-format layout, not
a parser: lambdas and local classes count toward their function). PATHs
default to the tracked *.h, *.cc, *.cu and *.cuh files. With --over, exits
1 when a function in the given paths is longer than LINES (a review aid).
"""
import argparse
import re
import subprocess
import sys

HEAD = re.compile(r"^(?:[\w:<>,*&~\s\[\]]+?)\b([\w:~]+)\s*\(")


def functions(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    out = []
    depth = 0  # braces open outside function bodies (namespaces, classes)
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if (stripped.startswith(("namespace", "class ", "struct ",
                                 "extern \"C\"", "union ", "enum "))
                and "(" not in stripped.split("{")[0]):
            depth += line.count("{") - line.count("}")
            i += 1
            continue
        m = HEAD.match(stripped) if not stripped.startswith(
            ("//", "#", "return", "if ", "for ", "while ", "switch ",
             "else", "case ", "do ")) else None
        if m:
            # Find the line that opens the body (the signature may wrap).
            j = i
            sig = stripped
            while "{" not in lines[j] and ";" not in lines[j] and j - i < 12:
                j += 1
                if j >= len(lines):
                    break
                sig += " " + lines[j].strip()
            if j < len(lines) and "{" in lines[j] and ";" not in \
                    lines[j].split("{")[0]:
                level = 0
                k = j
                while k < len(lines):
                    level += lines[k].count("{") - lines[k].count("}")
                    if level <= 0:
                        break
                    k += 1
                out.append((k - i + 1, m.group(1), i + 1))
                i = k + 1
                continue
        depth += line.count("{") - line.count("}")
        i += 1
    return out, len(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--over", type=int, default=0)
    ap.add_argument("paths", nargs="*")
    args = ap.parse_args()
    paths = args.paths or subprocess.run(
        ["git", "ls-files", "*.h", "*.cc", "*.cu", "*.cuh"],
        capture_output=True, text=True, check=True).stdout.split()
    funcs, files = [], []
    for p in dict.fromkeys(paths):
        fs, n = functions(p)
        files.append((n, p))
        funcs += [(n_, f"{p}:{line} {name}") for n_, name, line in fs]
    funcs.sort(reverse=True)
    files.sort(reverse=True)
    print(f"largest functions (of {len(funcs)}):")
    for n, where in funcs[:args.top]:
        print(f"  {n:5d}  {where}")
    print(f"largest files (of {len(files)}):")
    for n, p in files[:args.top]:
        print(f"  {n:5d}  {p}")
    if args.over:
        long = [f for f in funcs if f[0] > args.over]
        for n, where in long:
            print(f"over {args.over} lines: {n} {where}", file=sys.stderr)
        return 1 if long else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
