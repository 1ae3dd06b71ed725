#!/usr/bin/env python3
"""Keeps dpx's named notes greppable (CTest `notes`).

A note is defined once, in a comment line that holds its name alone, the text below it:
    // Note [Bucket rebuild]
    // After the first iteration ...
and referred to as `Note [Bucket rebuild]` (often "(Note [Bucket rebuild] in reducer.cpp)")
anywhere else, code or docs. So `grep -rn "Note \\[Bucket rebuild\\]$"` finds the definition and
`grep -rn "Note \\[Bucket rebuild\\]"` every use. This fails on a name split over two lines, a name
defined twice or not at all, and a definition written inline ("Note [X]: text").

  python3 scripts/check_notes.py [REPO]
"""
import os
import re
import subprocess
import sys

FOLDERS = ["src", "include", "tools", "bench", "examples", "tests", "scripts", "cmake", "docs"]
FILES = ["CMakeLists.txt", "README.md"]
NAME = re.compile(r"Note \[([^\]\n]+)\]")
DEFINITION = re.compile(r"^\s*(//|#)\s*Note \[([^\]]+)\]\s*$")
INLINE = re.compile(r"^\s*(//|#)\s*Note \[[^\]]+\]\s*:")
SPLIT = re.compile(r"\bNote\s*$|\bNote \[[^\]]*$")


def tracked(repo):
    out = subprocess.run(["git", "-C", repo, "ls-files", "--cached", "--others",
                          "--exclude-standard", "--", *FOLDERS, *FILES],
                         capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines() if os.path.isfile(os.path.join(repo, p))]


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))
    definitions, uses, problems = {}, {}, []
    for path in tracked(repo):
        if os.path.abspath(os.path.join(repo, path)) == os.path.abspath(__file__):
            continue  # its docstring shows the forms
        try:
            with open(os.path.join(repo, path), encoding="utf-8") as f:
                lines = f.read().split("\n")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(lines, 1):
            where = f"{path}:{n}"
            if SPLIT.search(line):
                problems.append(f"{where}: a note's name is split over two lines; keep "
                                f"'Note [Name]' on one line")
            if INLINE.match(line):
                problems.append(f"{where}: a note defined inline ('Note [X]: ...'); put the name "
                                f"alone on its line and the text below it, or refer to it as "
                                f"'(Note [X])'")
            m = DEFINITION.match(line)
            if m and not path.startswith("docs/"):
                definitions.setdefault(m.group(2), []).append(where)
            for name in NAME.findall(line):
                uses.setdefault(name, []).append(where)
    for name, places in sorted(definitions.items()):
        if len(places) > 1:
            problems.append(f"Note [{name}] is defined {len(places)} times: {', '.join(places)}")
    for name, places in sorted(uses.items()):
        if name not in definitions:
            problems.append(f"Note [{name}] is used ({places[0]}) but defined nowhere")
    for p in problems:
        print(p)
    print(f"check_notes: {len(definitions)} notes, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
