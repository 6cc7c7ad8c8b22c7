"""`pathlock`: who holds what, from a terminal.

    pathlock tree KEY [PATH]           the held locks as a tree (mode, owner, time left, fence, note)
    pathlock why KEY MODE PATH         what blocks a request now, and who waits before it
    pathlock waiters KEY [PATH]        the queue of waiting acquires
    pathlock top                       the busiest projects of a server or cluster

Each takes `--watch [SECONDS]` (redraw until Ctrl-C) and `--json`, and the connection options of
redis-cli (`-h`, `-p`, `-a`, `--user`, `-n`, `--tls` with `--cacert`, `--cacertdir`, `--cert`,
`--key`, `--insecure`, `-c`) or `--url`. Colour on a terminal, plain text when piped or when
`NO_COLOR` is set. Installed with the Python client as the console script `pathlock`;
`python -m pathlock.cli` is the same.

Exit status: 0, 1 when the server could not be asked (or answered an error), 2 for a usage
error, and 3 when `why` (without `--watch`) finds the request would not be granted now, so that
a script can test it: `if pathlock why proj:42 WRITE /A; then ...`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, TextIO

import redis

from .. import WrongType
from . import _draw, _views
from ._connection import Client, add_options, connect, tls_problem

#: Longest `--watch` interval, and the shortest, in seconds.
WATCH_RANGE = (0.1, 3600.0)

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
#: `why`'s status when the request would not be granted now; distinct from EXIT_ERROR, so that a
#: script tells "busy" from "could not ask".
EXIT_NOT_GRANTED = 3


EXIT_STATUS = (
    f"exit status: {EXIT_OK}; {EXIT_ERROR} when the server could not be asked or answered an "
    f"error; {EXIT_USAGE} for a usage error; {EXIT_NOT_GRANTED} when `why` (without --watch) "
    "finds that the request would not be granted now"
)


def _parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(
        prog="pathlock",
        add_help=False,
        description="Look at pathlock's locks and queues on a Redis or Valkey server or cluster.",
        epilog=EXIT_STATUS,
    )
    main.add_argument("--help", action="help", help="show this help and exit")
    add_options(main, defaults=True)
    subcommands = main.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def subcommand(name: str, help: str) -> argparse.ArgumentParser:
        sub = subcommands.add_parser(name, help=help, description=help, add_help=False)
        sub.add_argument("--help", action="help", help="show this help and exit")
        sub.add_argument(
            "--json", action="store_true", help="print JSON (one document per refresh with --watch)"
        )
        sub.add_argument(
            "--watch",
            nargs="?",
            type=float,
            const=2.0,
            metavar="SECONDS",
            help="redraw every SECONDS (2 by default) until Ctrl-C",
        )
        sub.add_argument(
            "--color",
            choices=("auto", "always", "never"),
            default="auto",
            help="colour: on a terminal without NO_COLOR (auto), always, or never",
        )
        add_options(sub, defaults=False)
        return sub

    tree = subcommand("tree", "the held locks of a project as a tree, with the requests waiting")
    tree.add_argument("key", help="the project key")
    tree.add_argument("path", nargs="?", help="only at or under this path")

    why = subcommand("why", "what blocks a request now, and who is queued before it")
    why.epilog = (
        f"exit status: {EXIT_OK} when the request would be granted now, {EXIT_NOT_GRANTED} when "
        f"it would not (without --watch), {EXIT_ERROR} when the server could not be asked"
    )
    why.add_argument("key", help="the project key")
    why.add_argument("mode", type=str.upper, choices=("READ", "WRITE"), help="READ or WRITE")
    why.add_argument("path", help="the path asked for")
    why.add_argument("--token", help="whose request it is: that owner's own locks do not block it")

    waiters = subcommand("waiters", "the waiting acquires of a project, in queue order")
    waiters.add_argument("key", help="the project key")
    waiters.add_argument(
        "path", nargs="?", help="only those asking for paths at or under this path"
    )

    top = subcommand("top", "the busiest projects of a server or cluster, by locks or by waiters")
    top.add_argument("--count", type=int, default=10, help="how many projects to list (default 10)")
    top.add_argument(
        "--by",
        choices=("locks", "waiters"),
        default="locks",
        help="what busiest means (default locks)",
    )
    top.add_argument("--match", help="only keys matching this SCAN pattern, e.g. 'proj:*'")
    top.add_argument(
        "--max-keys",
        type=int,
        default=1000,
        help="look at no more than this many project keys (default 1000)",
    )
    top.add_argument(
        "--max-scans",
        type=int,
        default=1000,
        help=f"SCAN calls per server, each over about {_views.SCAN_COUNT} keys (default 1000)",
    )
    return main


def _view(options: argparse.Namespace) -> Callable[[Client], Dict[str, Any]]:
    if options.command == "tree":
        return lambda client: _views.tree(client, options.key, options.path)
    if options.command == "why":
        return lambda client: _views.why(
            client, options.key, options.mode, options.path, options.token
        )
    if options.command == "waiters":
        return lambda client: _views.waiters(client, options.key, options.path)
    return lambda client: _views.top(
        client,
        count=options.count,
        max_keys=options.max_keys,
        max_scans=options.max_scans,
        match=options.match,
        by=options.by,
    )


DRAW = {"tree": _draw.tree, "why": _draw.why, "waiters": _draw.waiters, "top": _draw.top}


def _colour(choice: str, out: TextIO) -> bool:
    if choice != "auto":
        return choice == "always"
    return out.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def _unicode(out: TextIO) -> bool:
    """Whether the tree's box-drawing characters can be written (not on an ASCII locale's
    terminal, say); a stream that names no encoding takes any text."""
    encoding = getattr(out, "encoding", None)
    try:
        "├└│".encode(encoding or "utf-8")
        return True
    except (UnicodeEncodeError, LookupError):
        return False


def main(argv: Optional[List[str]] = None, out: TextIO = sys.stdout) -> int:
    options = _parser().parse_args(argv)
    for name, value in (
        ("--count", getattr(options, "count", 1)),
        ("--max-keys", getattr(options, "max_keys", 1)),
        ("--max-scans", getattr(options, "max_scans", 1)),
    ):
        if value < 1:
            print(f"pathlock: {name} must be at least 1; got {value}", file=sys.stderr)
            return EXIT_USAGE
    if options.watch is not None and not WATCH_RANGE[0] <= options.watch <= WATCH_RANGE[1]:
        print(
            f"pathlock: --watch takes {WATCH_RANGE[0]} to {WATCH_RANGE[1]:.0f} seconds; got {options.watch}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    problem = tls_problem(options)
    if problem:
        print(f"pathlock: {problem}", file=sys.stderr)
        return EXIT_USAGE
    paint = _draw.Paint(_colour(options.color, out), _unicode(out))
    view = _view(options)

    def render(data: Dict[str, Any]) -> str:
        return json.dumps(data) if options.json else DRAW[options.command](data, paint)

    def frame(client: Client) -> str:
        return render(view(client))

    try:
        client = connect(options)
        if options.watch is None:
            data = view(client)
            print(render(data), file=out)
            if options.command == "why" and not data["free"]:
                return EXIT_NOT_GRANTED
            return EXIT_OK
        return _watch(client, frame, options, out)
    except KeyboardInterrupt:
        return EXIT_OK
    except WrongType as error:
        print(f"pathlock: {error}", file=sys.stderr)
        return EXIT_ERROR
    except redis.ResponseError as error:
        if "unknown command" in str(error).lower():
            print(
                "pathlock: the server has no pathlock module loaded (unknown command)",
                file=sys.stderr,
            )
        else:
            print(f"pathlock: the server answered: {error}", file=sys.stderr)
        return EXIT_ERROR
    except redis.RedisError as error:
        print(f"pathlock: {error}", file=sys.stderr)
        return EXIT_ERROR


def _watch(
    client: Client, frame: Callable[[Client], str], options: argparse.Namespace, out: TextIO
) -> int:
    """Redraws until interrupted: on a terminal in place, on the alternate screen as watch(1)
    does, so that the shell's screen comes back afterwards; piped, one frame after another."""
    screen = out.isatty() and not options.json
    if screen:
        out.write("\x1b[?1049h")
    try:
        while True:
            started = time.monotonic()
            try:
                text = frame(client)
            except redis.ConnectionError as error:
                # The server may come back (a restart, a failover): say so and try again.
                text = f"pathlock: {error}; trying again"
            if screen:
                head = f"Every {options.watch:g}s: pathlock {options.command}    {time.strftime('%H:%M:%S')}"
                out.write("\x1b[H\x1b[2J" + head + "\n\n" + text + "\n")
            else:
                out.write(text + "\n" + ("" if options.json else "\n"))
            out.flush()
            time.sleep(max(0.0, options.watch - (time.monotonic() - started)))
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        if screen:
            out.write("\x1b[?1049l")
            out.flush()
