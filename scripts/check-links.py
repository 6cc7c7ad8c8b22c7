#!/usr/bin/env python3
"""Fails when the project's documents point at something the repository does not hold.

    scripts/check-links.py

Two checks, over the files git tracks (and new files it does not ignore):

* every relative link of every Markdown file (`[text](path#anchor)`, `![alt](path)`,
  `[id]: path`, and HTML `href`/`src`) names a file or folder that exists, and an anchor names a
  heading of the Markdown file it points into, as GitHub makes heading anchors (or an explicit
  `id`/`name`);
* every file, Markdown or not, that names a Markdown document by file name (`docs/commands.md`,
  `README.md`) names one the repository holds: beside the file, from the repository's root, or
  anywhere by that name. So a comment that cites a document kept outside the repository fails.

And a third, over the documents that map a folder (`MAPS`: `tests/README.md` maps the module's
test files):

* the map links every file of its folder that matches its pattern (`tests/*.rs`), so a new test
  file fails until it is placed on the map, and one that is gone fails as a broken link;
* every code span of the map that is a lowercase name with an underscore (`a_waiter_is_woken`,
  `hold_many`) names a function defined under the folder (`fn name`), so a renamed or removed
  test fails where the map still sends a reader to it.

Links to other sites (`https:`, `mailto:` and the like) are not followed. Code blocks and code
spans are not links. Prints every problem and exits 1 when there is one.
"""
import fnmatch
import os
import re
import subprocess
import sys

SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']*)["']""")
EXPLICIT_ANCHOR = re.compile(r"""<a\s+(?:name|id)\s*=\s*["']([^"']+)["']""")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
NAMED_DOC = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
# Files that hold byte strings rather than prose: corpus inputs and the like.
NOT_PROSE = ("fuzz/corpus/", "fuzz/regressions/")
# Documents that map a folder: each must link every file of the folder that matches the pattern
# (a glob, relative to the repository's root), and the functions it names must exist there.
MAPS = {"tests/README.md": "tests/*.rs"}
CODE_SPAN = re.compile(r"(`+)((?:(?!\1).)+?)\1")
FUNCTION_NAME = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$")


def tracked():
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        capture_output=True, text=True, check=True,
    ).stdout
    return sorted(f for f in set(out.splitlines()) if os.path.isfile(f))


def prose_lines(text):
    """The lines of a Markdown text with code blocks blanked and code spans removed, so that
    line numbers stay right."""
    lines, fenced = [], None
    for line in text.split("\n"):
        marker = FENCE.match(line)
        if fenced:
            if marker and marker.group(1) == fenced:
                fenced = None
            lines.append("")
            continue
        if marker:
            fenced = marker.group(1)
            lines.append("")
            continue
        lines.append(re.sub(r"(`+)(?:(?!\1).)+?\1", "", line))
    return lines


def slug(heading):
    """The anchor GitHub gives a heading: its text as rendered (links and code spans reduced to
    their text, emphasis dropped), lowercased, without punctuation but hyphens and underscores,
    spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found, seen = set(), {}
        text = open(path, encoding="utf-8").read()
        for line in prose_lines(text):
            heading = HEADING.match(line)
            if heading:
                base = slug(heading.group(2))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
        for line in text.split("\n"):
            found.update(EXPLICIT_ANCHOR.findall(line))
        cache[path] = found
    return cache[path]


def check_link(source, target):
    """A problem with one link of `source`, or None."""
    if not target or SCHEME.match(target) or target.startswith("//"):
        return None
    path, _, anchor = target.partition("#")
    if path:
        base = "." if path.startswith("/") else os.path.dirname(source)
        resolved = os.path.normpath(os.path.join(base, path.lstrip("/")))
    else:
        resolved = source
    if not os.path.exists(resolved):
        return f"links to {target}: no {resolved} in the repository"
    if anchor and resolved.endswith(".md") and os.path.isfile(resolved):
        if anchor not in anchors(resolved):
            return f"links to {target}: {resolved} has no heading with the anchor #{anchor}"
    return None


def check_markdown(path):
    problems = []
    for number, line in enumerate(prose_lines(open(path, encoding="utf-8").read()), 1):
        targets = INLINE.findall(line) + HTML.findall(line)
        reference = REFERENCE.match(line)
        if reference:
            targets.append(reference.group(1))
        for target in targets:
            problem = check_link(path, target)
            if problem:
                problems.append(f"{path}:{number}: {problem}")
    return problems


def check_named_documents(path, documents):
    """Markdown documents that `path` names by file name and the repository does not hold."""
    try:
        text = open(path, encoding="utf-8").read()
    except (UnicodeDecodeError, OSError):
        return []
    names = {os.path.basename(d) for d in documents}
    problems = []
    for number, line in enumerate(text.split("\n"), 1):
        for name in NAMED_DOC.findall(line):
            if SCHEME.match(name):
                continue
            here = os.path.normpath(os.path.join(os.path.dirname(path), name))
            if here in documents or os.path.normpath(name) in documents:
                continue
            if "/" not in name and name in names:
                continue
            problems.append(f"{path}:{number}: names {name}, which the repository does not hold")
    return problems


def check_map(path, pattern, files):
    """Files matching `pattern` that the map at `path` does not link, and functions it names in
    code spans that no Rust file under the pattern's folder defines."""
    text = open(path, encoding="utf-8").read()
    base = os.path.dirname(path)
    linked = set()
    for line in prose_lines(text):
        for target in INLINE.findall(line):
            if target and not SCHEME.match(target):
                linked.add(os.path.normpath(os.path.join(base, target.partition("#")[0])))
    problems = [
        f"{path}: {f} is not on the map (give it a link under the behaviour it tests)"
        for f in files
        if fnmatch.fnmatchcase(f, pattern) and f not in linked
    ]
    folder = os.path.dirname(pattern)
    defined = set()
    for f in files:
        if f.startswith(folder + "/") and f.endswith(".rs"):
            defined.update(re.findall(r"\bfn\s+([a-z_][a-z0-9_]*)", open(f, encoding="utf-8").read()))
    fenced = None
    for number, line in enumerate(text.split("\n"), 1):
        marker = FENCE.match(line)
        if marker and (fenced is None or marker.group(1) == fenced):
            fenced = None if fenced else marker.group(1)
            continue
        if fenced:
            continue
        for _, span in CODE_SPAN.findall(line):
            if FUNCTION_NAME.match(span) and span not in defined:
                problems.append(f"{path}:{number}: names {span}, which no file of {folder}/ defines")
    return problems


def main():
    files = tracked()
    documents = {f for f in files if f.endswith(".md")}
    problems = []
    for path in sorted(documents):
        problems += check_markdown(path)
    for path in files:
        if not path.startswith(NOT_PROSE):
            problems += check_named_documents(path, documents)
    for path, pattern in MAPS.items():
        problems += check_map(path, pattern, files)
    for problem in problems:
        print(problem)
    if problems:
        print(f"check-links: {len(problems)} problems", file=sys.stderr)
        return 1
    print(
        f"check-links: {len(documents)} Markdown files, every relative link and named document"
        f" found; {len(MAPS)} map of a folder complete"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
