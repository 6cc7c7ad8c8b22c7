#!/usr/bin/env python3
"""Fails when the modules of a crate (or of a client's package) import each other in a circle.

    scripts/import-cycles.py src core/src clients/rust/src clients/python/src/pathlock clients/node/src

A module is a file of the source folder (`change.rs` is `change`), or a folder with its files
(`commands/`, `table/`). In Rust an import is any `crate::name` in the file, in a `use` line or
in the code; `super::` inside a folder stays inside its module. In Python it is a relative
import (`from ._errors import ...`, also under `if TYPE_CHECKING:`), in TypeScript a relative
one (`from "./errors"`). Prints each circle found, and the modules by level when there is none.
"""
import os, re, sys

# Per language: the files' extension, the entry files that are not modules, the comment
# marker, and what an import of a sibling module looks like (each group is a list of names).
LANGUAGES = {
    ".rs": ({"lib.rs", "main.rs"}, "//", re.compile(r"\bcrate::(?:\{([^}]*)\}|([a-z_][a-z0-9_]*))")),
    ".py": ({"__init__.py"}, "#", re.compile(r"^\s*from \.(?:([a-z_][a-z0-9_]*)| import ([a-z_][a-z0-9_, ]*))", re.M)),
    ".ts": ({"index.ts"}, "//", re.compile(r"""from ["']\./([A-Za-z_][A-Za-z0-9_]*)["']()""")),
}


def language(root):
    for ext in LANGUAGES:
        if any(f.endswith(ext) for _, _, fs in os.walk(root) for f in fs):
            return ext
    sys.exit(f"{root}: no .rs, .py or .ts files")


def modules(root, ext):
    entries = LANGUAGES[ext][0]
    found = {}
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if entry.endswith(ext) and entry not in entries:
            found[entry[: -len(ext)]] = [path]
        elif os.path.isdir(path) and not entry.startswith((".", "__")):
            found[entry] = [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(ext)]
    return found


def imports(files, names, ext):
    _, comment, pattern = LANGUAGES[ext]
    out = set()
    for file in files:
        text = "\n".join(line.split(comment, 1)[0] for line in open(file, encoding="utf-8").read().splitlines())
        for group, single in pattern.findall(text):
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
        ext = language(root)
        mods = modules(root, ext)
        graph = {m: sorted(imports(files, mods, ext) - {m}) for m, files in mods.items()}
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
