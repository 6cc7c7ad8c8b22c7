#!/usr/bin/env python3
"""Fails when the modules of a crate import each other in a circle.

    scripts/import-cycles.py src core/src

A module is a file of the crate's source folder (`change.rs` is `change`), or a folder with its
files (`commands/`, `table/`). An import is any `crate::name` in the file, in a `use` line or in
the code; `super::` inside a folder stays inside its module. Prints each circle found, and the
modules by level when there is none.
"""
import os, re, sys

CRATE_PATH = re.compile(r"\bcrate::(?:\{([^}]*)\}|([a-z_][a-z0-9_]*))")


def modules(root):
    found = {}
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if entry.endswith(".rs") and entry not in ("lib.rs", "main.rs"):
            found[entry[:-3]] = [path]
        elif os.path.isdir(path):
            found[entry] = [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".rs")]
    return found


def strip_comments(text):
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def imports(files, names):
    out = set()
    for file in files:
        text = strip_comments(open(file, encoding="utf-8").read())
        for group, single in CRATE_PATH.findall(text):
            words = [w.strip().split("::")[0] for w in group.split(",")] if group else [single]
            out.update(w for w in words if w in names)
    return out


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def levels(graph):
    level = {}

    def of(v):
        if v not in level:
            level[v] = 0
            level[v] = 1 + max((of(w) for w in graph[v]), default=-1)
        return level[v]

    for v in graph:
        of(v)
    return level


def main():
    sys.setrecursionlimit(10000)
    failed = False
    for root in sys.argv[1:]:
        mods = modules(root)
        graph = {m: sorted(imports(files, mods) - {m}) for m, files in mods.items()}
        found = cycles(graph)
        for circle in found:
            edges = [f"{a} -> {b}" for a in circle for b in graph[a] if b in circle]
            print(f"{root}: import circle among {', '.join(circle)}: {'; '.join(edges)}")
        if found:
            failed = True
        else:
            by_level = {}
            for m, l in levels(graph).items():
                by_level.setdefault(l, []).append(m)
            shown = " | ".join(f"{l}: {' '.join(sorted(ms))}" for l, ms in sorted(by_level.items()))
            print(f"{root}: no import circle; levels {shown}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
