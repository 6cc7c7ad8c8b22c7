#!/usr/bin/env python3
"""Fails when the modules of a crate (or of a client's package) import each other in a circle,
or when what is written about a crate's levels disagrees with its imports.

    scripts/import-cycles.py [--write] src core/src clients/rust/src clients/python/src/pathlock clients/node/src

A module is a file of the source folder (`change.rs` is `change`), or a folder with its files
(`commands/`, `table/`). In Rust an import is any `crate::name` in the file, in a `use` line or
in the code; `super::` inside a folder stays inside its module. In Python it is a relative
import (`from ._errors import ...`, also under `if TYPE_CHECKING:`), in TypeScript a relative
one (`from "./errors"`). Prints each circle found, and the modules by level when there is none.

A Rust crate whose `lib.rs` holds a map of its levels (lines `// N  a, b, c` under the comment
"The modules by level") is written in levels, and three things about them are derived from the
imports, never kept by hand:

* each module's header (its `//!` lines; a folder's `mod.rs`) has the sentence
  `Level N: imports `a`, `b`.` (or `imports nothing of the crate.`), in any order;
* the map in `lib.rs`;
* the table of its files in the one Markdown file of the project that holds the lines
  `<!-- levels of ROOT -->` and `<!-- end of levels -->` (ARCHITECTURE.md, for src): a row
  per module with its level and what it holds, which is the first sentence of its header. A
  human edits only that header.

Each that disagrees fails the check; `--write` rewrites them instead.
"""
import os, re, subprocess, sys

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


WIDTH = 100


def header(path):
    """The file's `//!` lines, without the marker, and the number of lines they span."""
    lines = open(path, encoding="utf-8").read().splitlines()
    taken = []
    for line in lines:
        if not line.startswith("//!"):
            break
        taken.append(line[3:].removeprefix(" "))
    return taken


def header_file(root, module, files):
    """The file that holds a module's header: its own, or its folder's `mod.rs`."""
    own = os.path.join(root, module + ".rs")
    return own if own in files else os.path.join(root, module, "mod.rs")


def level_sentence(level, imported):
    names = ", ".join(f"`{m}`" for m in sorted(imported))
    return f"Level {level}: imports {names}." if imported else f"Level {level}: imports nothing of the crate."


def wrapped(text, prefix="//! "):
    out, line = [], ""
    for word in text.split(" "):
        if line and len(prefix) + len(line) + 1 + len(word) > WIDTH:
            out.append(prefix + line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    out.append(prefix + line)
    return out


def sentence_end(text):
    """The index just past the first sentence of `text`: a period outside backticks, followed by
    a space or the end."""
    quoted = False
    for i, c in enumerate(text):
        if c == "`":
            quoted = not quoted
        elif c == "." and not quoted and (i + 1 == len(text) or text[i + 1] == " "):
            return i + 1
    return len(text)


def check_header(path, level, imported, write):
    """Checks (or rewrites) the level sentence of one module's header; returns a problem or None."""
    lines = open(path, encoding="utf-8").read().split("\n")
    count = len(header(path))
    start = next((i for i in range(count) if lines[i].startswith("//! Level ")), None)
    want = level_sentence(level, imported)
    if start is None:
        if not write:
            return f"{path}: its header has no level sentence; it is: {want}"
        lines[count:count] = ["//!"] + wrapped(want)
    else:
        # The sentence runs from the `Level` line to its first period, maybe across lines.
        end, text = start, lines[start][4:]
        while sentence_end(text) == len(text) and not text.endswith(".") and end + 1 < count:
            end += 1
            text += " " + lines[end][4:]
        cut = sentence_end(text)
        found, rest = text[:cut], text[cut:].strip()
        got = re.match(r"Level (\d+): imports (.*)\.$", found, re.S)
        names = set(re.findall(r"`([a-z_0-9]+)`", got.group(2))) if got else None
        nothing = got is not None and got.group(2) == "nothing of the crate"
        same = got and int(got.group(1)) == level and names == set(imported) and (bool(imported) != nothing)
        if same:
            # Right, in whatever order and wording a human gave it.
            return None
        if not write:
            return f"{path}: says \"{found}\", but it is: {want}"
        # The rest of its paragraph (who uses the module, in a human's words) is wrapped anew
        # after it.
        stop = end + 1
        while stop < count and lines[stop][3:].strip():
            rest = f"{rest} {lines[stop][4:].strip()}".strip()
            stop += 1
        lines[start:stop] = wrapped(f"{want} {rest}" if rest else want)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print(f"{path}: wrote \"{want}\"")
    return None


MAP_INTRO = "// The modules by level"
MAP_LINE = re.compile(r"^// (\d+)  (.*)$")


def check_map(lib, by_level, write):
    """Checks (or rewrites) the lines `// N  a, b, c` that follow the map's introduction in lib.rs."""
    lines = open(lib, encoding="utf-8").read().split("\n")
    want = [f"// {l}  {', '.join(sorted(ms))}" for l, ms in sorted(by_level.items())]
    at = [i for i, line in enumerate(lines) if MAP_LINE.match(line)]
    if not at:
        return f"{lib}: has no map of the levels (lines `// N  a, b`)"
    first, last = at[0], at[-1]
    if lines[first:last + 1] == want:
        return None
    if not write:
        got = "; ".join(lines[first:last + 1])
        return f"{lib}: its map of the levels says {got!r}; the imports say {'; '.join(want)!r}"
    lines[first:last + 1] = want
    with open(lib, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print(f"{lib}: wrote its map of the levels")
    return None


def markdown_files():
    """The project's Markdown files (tracked by git, or any under the current folder)."""
    try:
        out = subprocess.run(["git", "ls-files", "*.md"], capture_output=True, text=True, check=True).stdout
        # A file in a merge's conflict is listed once per stage.
        return sorted({f for f in out.splitlines() if os.path.exists(f)})
    except (OSError, subprocess.CalledProcessError):
        return [os.path.join(d, f) for d, _, fs in os.walk(".") for f in fs if f.endswith(".md")]


def summary(path):
    """What a module holds: the first sentence of its header, for a table cell."""
    paragraph = []
    for line in header(path):
        if not line.strip():
            if paragraph:
                break
            continue
        paragraph.append(line.strip())
    text = " ".join(paragraph)
    # A rustdoc link, [`name`], is plain code in the table.
    return re.sub(r"\[(`[^`]*`)\]", r"\1", text[:sentence_end(text)]).replace("|", "\\|")


def check_table(root, mods, by_level, write):
    """Checks (or rewrites) the table of the root's modules in the Markdown file that holds it."""
    begin, end = f"<!-- levels of {root} -->", "<!-- end of levels -->"
    holders = [f for f in markdown_files() if begin in open(f, encoding="utf-8").read()]
    if len(holders) != 1:
        return f"{root}: {len(holders)} Markdown files hold a table between {begin} and {end}; one must"
    path = holders[0]
    lines = open(path, encoding="utf-8").read().split("\n")
    stripped = [line.strip() for line in lines]
    first = stripped.index(begin)
    last = stripped.index(end, first)
    indent = re.match(r"\s*", lines[first]).group(0)
    want = [f"{indent}| level | file | what it holds |", f"{indent}|---|---|---|"]
    for level, names in sorted(by_level.items()):
        for m in sorted(names):
            shown = f"{m}/" if os.path.isdir(os.path.join(root, m)) else f"{m}.rs"
            want.append(f"{indent}| {level} | `{shown}` | {summary(header_file(root, m, mods[m]))} |")
    if lines[first + 1:last] == want:
        return None
    if not write:
        return f"{path}: its table of {root}'s levels is not what the imports and the headers give (scripts/import-cycles.py --write rewrites it)"
    lines[first + 1:last] = want
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print(f"{path}: wrote the table of {root}'s levels")
    return None


def check_written(root, mods, graph, write):
    """For a crate written in levels: every header, the lib.rs map and the Markdown table."""
    lib = os.path.join(root, "lib.rs")
    if not os.path.exists(lib) or MAP_INTRO not in open(lib, encoding="utf-8").read():
        return []
    level = levels(graph)
    by_level = {}
    for m, l in level.items():
        by_level.setdefault(l, []).append(m)
    problems = [check_header(header_file(root, m, files), level[m], graph[m], write) for m, files in sorted(mods.items())]
    problems += [check_map(lib, by_level, write), check_table(root, mods, by_level, write)]
    return [p for p in problems if p]


def main():
    sys.setrecursionlimit(10000)
    failed = False
    write = "--write" in sys.argv[1:]
    for root in [a for a in sys.argv[1:] if a != "--write"]:
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
            for problem in check_written(root, mods, graph, write):
                print(problem)
                failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
