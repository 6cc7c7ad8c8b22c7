"""The text the `pathlock` command prints for each view of `_views`: a tree of the held locks,
tables of waiters and projects, with colour when asked (`Paint`).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ._views import segments

# ANSI styles: what a reader looks for first stands out (exclusive locks, time running out).
STYLES = {
    "WRITE": "1;31",
    "READ": "32",
    "token": "35",
    "note": "36",
    "time": "33",
    "fence": "2",
    "branch": "2",
    "head": "1",
    "waits": "1;33",
    "free": "1;32",
    "blocked": "1;31",
}


class Paint:
    """Wraps text in ANSI colours, or leaves it alone."""

    def __init__(self, colour: bool, unicode: bool = True) -> None:
        self.colour = colour
        self.unicode = unicode

    def __call__(self, text: str, style: str) -> str:
        if not self.colour or style not in STYLES:
            return text
        return f"\x1b[{STYLES[style]}m{text}\x1b[0m"


def duration(ms: int) -> str:
    """`850ms`, `4.2s`, `42s`, `9m57s`, `3h05m`, `2d04h`."""
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms / 1000
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


Cells = List[Tuple[str, str]]  # (text, style) of each column of a line


def _lock_cells(lock: Dict[str, Any]) -> Cells:
    """Mode, owner, note, time left, fence."""
    note = "" if lock["note"] is None else repr_note(lock["note"])
    return [
        (lock["mode"], lock["mode"]),
        (_safe(lock["token"]), "token"),
        (note, "note"),
        (duration(lock["ttl_ms"]) + " left", "time"),
        (f"fence {lock['fence']}", "fence"),
    ]


def _waiter_cells(waiter: Dict[str, Any], mode: Optional[str] = None) -> Cells:
    """Place in the queue, what it asks (only `mode` beside a path of the tree), owner, note,
    how long it has waited and may still wait."""
    asked = mode or ", ".join(f"{p['mode']} {_safe(p['path'])}" for p in waiter["locks"])
    note = "" if waiter["note"] is None else repr_note(waiter["note"])
    return [
        (f"waits #{waiter['position']}", "waits"),
        (asked, "WRITE" if "WRITE" in asked else "READ"),
        (_safe(waiter["token"]), "token"),
        (note, "note"),
        (f"waited {duration(waiter['waited_ms'])}, {duration(waiter['left_ms'])} left", "time"),
    ]


def _aligned(lines: List[Cells], paint: Paint) -> List[str]:
    """Lines of cells, each column as wide as its widest cell; empty columns take no room."""
    widths = [max(len(line[i][0]) for line in lines) for i in range(len(lines[0]))] if lines else []
    out = []
    for line in lines:
        cells = [
            paint(text, style) + " " * (width - len(text))
            for (text, style), width in zip(line, widths)
            if width
        ]
        out.append("  ".join(cells).rstrip())
    return out


def repr_note(note: str) -> str:
    """A note in double quotes, with control characters shown as escapes, so that a note cannot
    move the cursor or colour the terminal."""
    escaped = "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in note
    )
    return '"' + escaped.replace('"', '\\"') + '"'


def _safe(text: str) -> str:
    return repr_note(text)[1:-1]


class _Node:
    def __init__(self) -> None:
        self.children: Dict[str, "_Node"] = {}
        self.lines: List[str] = []


def tree(view: Dict[str, Any], paint: Paint) -> str:
    """The held locks as a tree of their paths, each lock (and each waiting request) beside the
    path it is on."""
    if not view["locks"] and not view["waiters"]:
        return _tree_head(view, paint)
    root = _Node()

    def node_of(path: str) -> _Node:
        node = root
        for segment in segments(path):
            node = node.children.setdefault(segment, _Node())
        return node

    nodes = [node_of(lock["path"]) for lock in view["locks"]]
    for node, line in zip(nodes, _aligned([_lock_cells(lock) for lock in view["locks"]], paint)):
        node.lines.append(line)
    asked = [(waiter, pair) for waiter in view["waiters"] for pair in waiter["locks"]]
    waits = _aligned([_waiter_cells(waiter, pair["mode"]) for waiter, pair in asked], paint)
    for (_, pair), line in zip(asked, waits):
        node_of(pair["path"]).lines.append(line)

    rows: List[Tuple[str, str, List[str]]] = (
        []
    )  # (the branch and name, what a line below it starts with, lines)
    pipe, tee, elbow, space = (
        ("│   ", "├── ", "└── ", "    ") if paint.unicode else ("|   ", "|-- ", "`-- ", "    ")
    )

    def walk(node: _Node, name: str, prefix: str, last: bool, top: bool) -> None:
        if top:
            label, below = name, ""
        else:
            label = paint(prefix + (elbow if last else tee), "branch") + _safe(name)
            below = prefix + (space if last else pipe)
        names = sorted(node.children, key=lambda n: n.encode("utf-8", "surrogateescape"))
        # A lock's second line (a crowd of readers, a waiter) keeps the branch to the children going.
        rows.append((label, below + (pipe if names else space), node.lines))
        for index, child in enumerate(names):
            walk(node.children[child], child, below, index == len(names) - 1, False)

    walk(root, "/", "", True, True)
    width = (
        max(_visible(label) for label, _, lines in rows if lines)
        if any(lines for _, _, lines in rows)
        else 0
    )
    out = [_tree_head(view, paint)]
    for label, below, lines in rows:
        if not lines:
            out.append(label)
            continue
        out.append(label + " " * (width - _visible(label) + 2) + lines[0])
        for more in lines[1:]:
            out.append(paint(below, "branch") + " " * (width - len(below) + 2) + more)
    return "\n".join(out)


def _visible(text: str) -> int:
    """The printed width of `text`, its ANSI escapes left out."""
    width, escape = 0, False
    for char in text:
        if char == "\x1b":
            escape = True
        elif escape:
            escape = char != "m"
        else:
            width += 1
    return width


def _tree_head(view: Dict[str, Any], paint: Paint) -> str:
    where = "" if view["path"] == "/" else f" under {_safe(view['path'])}"
    if not view["exists"]:
        return paint(f"{_safe(view['key'])}: no such key", "head")
    owners = len({lock["token"] for lock in view["locks"]})
    waiting = len(view["waiters"])
    return paint(
        f"{_safe(view['key'])}{where}: {_count(len(view['locks']), 'lock')} held by "
        f"{_count(owners, 'owner')}, {waiting or 'nobody'} waiting",
        "head",
    )


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def why(view: Dict[str, Any], paint: Paint) -> str:
    asked = f"{view['request']['mode']} {_safe(view['request']['path'])}"
    who = f" for {_safe(view['token'])}" if view["token"] else ""
    if view["free"]:
        return paint(f"{asked} on {_safe(view['key'])}{who} would be granted now", "free")
    out = [paint(f"{asked} on {_safe(view['key'])}{who} would not be granted now", "blocked")]
    if view["blockers"]:
        out.append(paint("held in its way:", "head"))
        lines = [[(_safe(lock["path"]), "")] + _lock_cells(lock) for lock in view["blockers"]]
        out.extend("  " + line for line in _aligned(lines, paint))
    if view["waiters"]:
        out.append(paint("queued before it (an acquire that waits is served after them):", "head"))
        out.extend(
            "  " + line for line in _aligned([_waiter_cells(w) for w in view["waiters"]], paint)
        )
    return "\n".join(out)


def waiters(view: Dict[str, Any], paint: Paint) -> str:
    where = "" if view["path"] == "/" else f" under {_safe(view['path'])}"
    if not view["waiters"]:
        return paint(f"{_safe(view['key'])}{where}: nobody waiting", "head")
    out = [
        paint(
            f"{_safe(view['key'])}{where}: {_count(len(view['waiters']), 'request')} waiting, "
            "in queue order",
            "head",
        )
    ]
    out.extend("  " + line for line in _aligned([_waiter_cells(w) for w in view["waiters"]], paint))
    return "\n".join(out)


def top(view: Dict[str, Any], paint: Paint) -> str:
    seen = view["projects_seen"]
    scope = (
        ""
        if view["complete"]
        else f" (the first {seen} found; --max-keys and --max-scans look further)"
    )
    head = paint(
        f"{view['server']}: {_count(seen, 'project')}{scope}, busiest by {view['by']}", "head"
    )
    if not view["projects"]:
        return head
    columns = ["KEY", "LOCKS", "OWNERS", "WAITING", "LONGEST WAIT"]
    with_node = any("node" in p for p in view["projects"])
    if with_node:
        columns.append("NODE")
    rows = [
        [
            _safe(p["key"]),
            str(p["locks"]),
            str(p["owners"]),
            str(p["waiters"]),
            duration(p["longest_wait_ms"]) if p["waiters"] else "-",
        ]
        + ([p.get("node", "")] if with_node else [])
        for p in view["projects"]
    ]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]

    def line(cells: List[str]) -> str:
        return "  ".join(
            cell.ljust(w) if i in (0, 5) else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join([head, paint(line(columns), "head")] + [line(r) for r in rows])
