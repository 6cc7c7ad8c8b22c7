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

Two more views of such a crate are written in the same Markdown file, each between its own
pair of lines, and checked the same way:

* the subsystems (`<!-- subsystems of ROOT -->` ... `<!-- end of subsystems -->`): the lines
  `// name: a, b, c` under the comment "The subsystems" in `lib.rs` name the modules each kind
  of work passes through; every module must be in one at least, and the table shows each
  subsystem's modules from the top level down, with their levels;
* the entry points, every function Redis calls into (`<!-- entry points of ROOT -->` ...
  `<!-- end of entry points -->`): each `extern "C" fn`, each function handed to
  `create_timer` by name, the `#[info_command_handler]`, what `lib.rs` gives the
  `redis_module!` macro (`init`, the `event_handlers`), and the functions registered at load
  through `registry::set_worker` and `schedule::set_tick`, each with the first sentence of its
  doc comment, which it must have.

Any other root (a client's package) gets the same table of its files, levels and first
sentences (a Python module's docstring, a TypeScript file's leading comment), where a Markdown
file holds its pair of lines.

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


def header_lines(path):
    """A file's header, without its markers: `//!` lines in Rust, the module docstring in Python,
    the leading `//` lines in TypeScript."""
    if path.endswith(".rs"):
        return header(path)
    lines = open(path, encoding="utf-8").read().splitlines()
    if path.endswith(".ts"):
        taken = []
        for line in lines:
            if not line.startswith("//"):
                break
            taken.append(line[2:].removeprefix(" "))
        return taken
    text = "\n".join(lines).lstrip()
    if not text.startswith('"""'):
        return []
    return text[3:].split('"""', 1)[0].splitlines()


def summary(path):
    """What a module holds: the first sentence of its header, for a table cell."""
    paragraph = []
    for line in header_lines(path):
        if not line.strip():
            if paragraph:
                break
            continue
        paragraph.append(line.strip())
    text = " ".join(paragraph)
    # A rustdoc link, [`name`], is plain code in the table.
    return re.sub(r"\[(`[^`]*`)\]", r"\1", text[:sentence_end(text)]).replace("|", "\\|")


def package_file(root, module, ext):
    """The file that holds a Python or TypeScript module's header: its own, or its folder's
    `__init__.py` or `index.ts`."""
    own = os.path.join(root, module + ext)
    if os.path.exists(own):
        return own
    return os.path.join(root, module, "__init__.py" if ext == ".py" else "index.ts")


def check_table(root, mods, by_level, write, required=True):
    """Checks (or rewrites) the table of the root's modules in the Markdown file that holds it;
    a root whose table is not `required` may have none."""
    ext = language(root)

    def rows(indent):
        want = [f"{indent}| level | file | what it holds |", f"{indent}|---|---|---|"]
        for level, names in sorted(by_level.items()):
            for m in sorted(names):
                holder = header_file(root, m, mods[m]) if ext == ".rs" else package_file(root, m, ext)
                want.append(f"{indent}| {level} | `{shown_module(root, m)}` | {summary(holder)} |")
        return want

    return write_between(root, f"<!-- levels of {root} -->", "<!-- end of levels -->", rows,
                         f"table of {root}'s levels", write, required)


def write_between(root, begin, end, want, what, write, required=True):
    """Checks (or rewrites) the lines between `begin` and `end` in the one Markdown file that
    holds them (`want`, or what `want` gives for the indent of the `begin` line); returns a
    problem or None. Where the lines are not `required`, no file need hold them."""
    holders = [f for f in markdown_files() if begin in open(f, encoding="utf-8").read()]
    if not holders and not required:
        return None
    if len(holders) != 1:
        return f"{root}: {len(holders)} Markdown files hold the {what} between {begin} and {end}; one must"
    path = holders[0]
    lines = open(path, encoding="utf-8").read().split("\n")
    stripped = [line.strip() for line in lines]
    first = stripped.index(begin)
    last = stripped.index(end, first)
    if callable(want):
        want = want(re.match(r"\s*", lines[first]).group(0))
    if lines[first + 1:last] == want:
        return None
    if not write:
        return f"{path}: its {what} is not what the sources give (scripts/import-cycles.py --write rewrites it)"
    lines[first + 1:last] = want
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print(f"{path}: wrote the {what}")
    return None


def shown_module(root, m):
    """A module as the tables show it: a folder with a slash, a file with its extension."""
    return f"{m}/" if os.path.isdir(os.path.join(root, m)) else f"{m}{language(root)}"


SUBSYSTEMS_INTRO = "// The subsystems"
SUBSYSTEM_LINE = re.compile(r"^// ([a-z][a-z ]*[a-z]): ([a-z_0-9, ]+)$")


def check_subsystems(root, lib, mods, level, write):
    """Checks (or rewrites) the table of the subsystems that `lib.rs` lists."""
    lines = open(lib, encoding="utf-8").read().split("\n")
    intro = next((i for i, line in enumerate(lines) if line.startswith(SUBSYSTEMS_INTRO)), None)
    if intro is None:
        return [f"{lib}: has no list of the subsystems (a comment starting {SUBSYSTEMS_INTRO!r})"]
    subsystems, problems = [], []
    for line in lines[intro + 1:]:
        if not line.startswith("//"):
            break
        got = SUBSYSTEM_LINE.match(line)
        if got:
            names = [n.strip() for n in got.group(2).split(",")]
            problems += [f"{lib}: the subsystem '{got.group(1)}' names '{n}', which is no module" for n in names if n not in mods]
            subsystems.append((got.group(1), [n for n in names if n in mods]))
    placed = {n for _, names in subsystems for n in names}
    problems += [f"{lib}: the module '{m}' is in no subsystem" for m in sorted(mods) if m not in placed]
    want = ["| subsystem | its modules, from the top level down (level) |", "|---|---|"]
    for name, names in subsystems:
        ordered = sorted(names, key=lambda n: (-level[n], n))
        want.append(f"| {name} | {', '.join(f'`{shown_module(root, n)}` ({level[n]})' for n in ordered)} |")
    problems.append(write_between(root, f"<!-- subsystems of {root} -->", "<!-- end of subsystems -->", want, "table of the subsystems", write))
    return problems


# Functions a module registers at load with another, which calls them from its own timer: the
# registering function, and the module that calls them.
REGISTRATIONS = {"set_worker": "registry", "set_tick": "schedule"}
FN = r"[a-z_][a-z0-9_]*"


def code_of(path):
    """The file's text without its comments."""
    return "\n".join(line.split("//", 1)[0] for line in open(path, encoding="utf-8").read().splitlines())


def doc_of(path, name):
    """The first sentence of the doc comment of `fn name` in `path`, or None."""
    lines = open(path, encoding="utf-8").read().splitlines()
    at = next((i for i, line in enumerate(lines)
               if re.match(rf'^\s*(?:pub(?:\([a-z]+\))? )?(?:extern "C" )?fn {name}\b', line)), None)
    if at is None:
        return None
    doc, i = [], at - 1
    while i >= 0 and lines[i].strip().startswith("#["):
        i -= 1
    while i >= 0 and lines[i].strip().startswith("///"):
        doc.insert(0, lines[i].strip()[3:].strip())
        i -= 1
    text = " ".join(doc)
    if not text:
        return None
    return re.sub(r"\[(`[^`]*`)\]", r"\1", text[:sentence_end(text)]).replace("|", "\\|")


def entry_points(root, lib, mods):
    """Every function Redis calls into, as `(module, function, how it is reached)`; the module
    is `lib` for `lib.rs`."""
    found = []
    files = [(m, f) for m, fs in sorted(mods.items()) for f in sorted(fs)] + [("lib", lib)]
    for m, path in files:
        code = code_of(path)
        for name in re.findall(rf'^\s*(?:pub(?:\([a-z]+\))? )?extern "C" fn ({FN})', code, re.M):
            found.append((m, name, ""))
        for name in re.findall(rf"create_timer\(\s*[^,()]+,\s*({FN})\s*,", code):
            found.append((m, name, "a timer"))
        for name in re.findall(rf"#\[info_command_handler\]\s*(?:pub )?fn ({FN})", code):
            found.append((m, name, "`#[info_command_handler]`"))
        for register, caller in REGISTRATIONS.items():
            for target in re.findall(rf"\b{register}\((?:\s*ctx\s*,)?\s*((?:{FN}::)?{FN})\s*\)", code):
                owner, _, name = target.rpartition("::")
                found.append((owner or m, name, f"registered at load through `{caller}::{register}`"))
        if m == "lib":
            for name in re.findall(rf"\binit:\s*({FN})", code):
                found.append(("lib", name, "the `redis_module!` macro's `init`"))
            for owner, name in re.findall(rf"\[@[A-Z@ ]+:\s*({FN})::({FN})\]", code):
                found.append((owner, name, "the `redis_module!` macro's `event_handlers`"))
    return found


def check_entry_points(root, lib, mods, level, write):
    """Checks (or rewrites) the table of the entry points, and that each has a doc comment."""
    problems = []
    rows = []
    for m, name, how in entry_points(root, lib, mods):
        paths = [lib] if m == "lib" else mods.get(m, [])
        doc = next((d for d in (doc_of(p, name) for p in sorted(paths)) if d), None)
        if doc is None:
            problems.append(f"{root}: the entry point {m}::{name} has no doc comment saying what Redis calls it for")
            doc = ""
        rank = level.get(m, max(level.values()) + 1)
        rows.append((-rank, m, name, f"| `{m}::{name}` | {doc}{f' ({how})' if how else ''} |"))
    want = ["| entry point | what Redis calls it for |", "|---|---|"]
    want += [row for *_, row in sorted(rows)]
    problems.append(write_between(root, f"<!-- entry points of {root} -->", "<!-- end of entry points -->", want, "table of the entry points", write))
    return problems


def is_written(root):
    """Whether the root is a crate written in levels (its `lib.rs` holds the map)."""
    lib = os.path.join(root, "lib.rs")
    return os.path.exists(lib) and MAP_INTRO in open(lib, encoding="utf-8").read()


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
    problems += check_subsystems(root, lib, mods, level, write)
    problems += check_entry_points(root, lib, mods, level, write)
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
            problems = check_written(root, mods, graph, write)
            if not is_written(root):
                # A client's package: its table of files, where a Markdown file holds one.
                problems = [p for p in [check_table(root, mods, by_level, write, required=False)] if p]
            for problem in problems:
                print(problem)
                failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
