#!/usr/bin/env python3
"""Writes the Debian copyright file of the module's package to stdout.

    packaging/deb/copyright.py CONTACT

libpathlock.so is a Rust cdylib: the Rust standard library and every crate the module depends on
at run time are linked into it, so the package carries their notices beside pathlock's own. The
crates come from `cargo metadata` (the module's normal dependencies for this host, not its
proc-macros, build scripts or dev-dependencies), so the list follows Cargo.lock by itself. Each
crate is listed under the license it is used with: Apache-2.0 where the crate offers it (its text
is in Debian's common-licenses), else MIT, else its only license; a license without a text in
packaging/deb/licenses (or LICENSE for MIT) fails the build rather than ship without its text.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LICENSES = os.path.join(ROOT, "packaging", "deb", "licenses")
# A notice line names a year: this skips "copyright notice" in license texts and Apache's
# "Copyright [yyyy] [name of copyright owner]" template.
NOTICE = re.compile(r"^\s*Copyright\s*(\(c\)|©)?\s*\d{4}", re.IGNORECASE)


def host():
    info = subprocess.run(["rustc", "-vV"], check=True, capture_output=True, text=True).stdout
    return next(l.split()[1] for l in info.splitlines() if l.startswith("host:"))


def linked_crates(meta):
    """The packages whose code ends up in libpathlock.so, but for the workspace's own."""
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    members = set(meta["workspace_members"])
    root = next(i for i in members if packages[i]["name"] == "pathlock")
    seen, todo = set(), [root]
    while todo:
        node = nodes[todo.pop()]
        for dep in node["deps"]:
            if not any(k["kind"] is None for k in dep["dep_kinds"]):
                continue
            package = packages[dep["pkg"]]
            if any("proc-macro" in t["kind"] for t in package["targets"]):
                continue
            if dep["pkg"] not in seen:
                seen.add(dep["pkg"])
                todo.append(dep["pkg"])
    return sorted((packages[i] for i in seen - members), key=lambda p: (p["name"], p["version"]))


def chosen_license(package):
    expression = package["license"] or ""
    if "AND" in expression or "WITH" in expression:
        sys.exit(f"copyright.py: {package['name']}: cannot choose from '{expression}'")
    options = [o.strip(" ()") for o in re.split(r"\s+OR\s+|/", expression)]
    for preferred in ("Apache-2.0", "MIT"):
        if preferred in options:
            return preferred
    if len(options) != 1:
        sys.exit(f"copyright.py: {package['name']}: no known license in '{expression}'")
    return options[0]


def notices(package):
    """The crate's own copyright lines, from its license files; its authors if it has none."""
    folder = os.path.dirname(package["manifest_path"])
    lines = []
    for name in sorted(os.listdir(folder)):
        if re.match(r"(LICEN[CS]E|COPYING)", name, re.IGNORECASE):
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as text:
                lines += [l.strip() for l in text if NOTICE.match(l) and l.strip() not in lines]
    if lines:
        return lines
    authors = [re.sub(r"\s*<[^>]*>", "", a) for a in package.get("authors") or []]
    return [f"no copyright line in the crate; by {', '.join(authors) or 'its authors'}"]


def text_of(license):
    if license == "MIT":
        with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as text:
            body = text.read().split("\n")
        # The license's own words, without its title and pathlock's copyright line.
        body = body[body.index(next(l for l in body if l.startswith("Permission"))):]
    elif license == "Apache-2.0":
        body = ["On Debian systems, the full text of the Apache License, Version 2.0, is in",
                "/usr/share/common-licenses/Apache-2.0."]
    else:
        path = os.path.join(LICENSES, license)
        if not os.path.exists(path):
            sys.exit(f"copyright.py: no text for {license}: add it to packaging/deb/licenses")
        with open(path, encoding="utf-8") as text:
            body = text.read().split("\n")
    return "\n".join(" " + l if l.strip() else " ." for l in "\n".join(body).strip().split("\n"))


def main():
    contact = sys.argv[1]
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked", "--filter-platform", host()],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout)
    by_license = {}
    for package in linked_crates(meta):
        by_license.setdefault(chosen_license(package), []).append(package)
    out = [
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/",
        "Upstream-Name: pathlock",
        f"Upstream-Contact: {contact}",
        "Comment: libpathlock.so is built from Rust: the Rust standard library (MIT or",
        " Apache-2.0, used here under Apache-2.0) and the crates below are linked into it,",
        " each under the license it is listed with. The texts of the licenses follow.",
    ]
    for license in sorted(by_license):
        out += [" .", f" {license}:"]
        for package in by_license[license]:
            credit = "" if license == "Apache-2.0" else "; " + "; ".join(notices(package))
            out.append(f"  {package['name']} {package['version']} ({package['license']}){credit}")
    out += ["", "Files: *", "Copyright: 2026 the pathlock developers", "License: MIT"]
    for license in sorted(set(by_license) | {"MIT"}):
        out += ["", f"License: {license}", text_of(license)]
    print("\n".join(out))


if __name__ == "__main__":
    main()
