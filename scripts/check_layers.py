#!/usr/bin/env python3
"""Fails when a quoted #include goes up dpx's layer order (docs/architecture.md).

Each file of the library (src/, include/dpx/) and of the programs on top of it belongs to the
layer of the first pattern in LAYERS that matches its path; a file may include files of its own
layer and of the layers below, never above. An include that names no file of the repository
(LibTorch's, the standard library's) is not checked; one that names a file no pattern matches
is an error too, so a new folder has to be placed in the order before it builds in CI.

  python3 scripts/check_layers.py [REPO]      prints each upward include; exit 1 if any
"""
import fnmatch
import os
import re
import sys

# Bottom up; each folder is one layer (docs/architecture.md). Patterns are fnmatch patterns on
# paths relative to the repository root ('*' crosses '/'); a path takes the first that matches.
LAYERS = [
    ("compat", ["src/runtime/compat/*"]),
    ("runtime", ["src/runtime/*", "include/dpx/runtime/*"]),
    ("data", ["src/data/*", "include/dpx/data/*"]),
    ("store", ["src/store/*", "include/dpx/store/*"]),
    ("observe", ["src/observe/*", "include/dpx/observe/*"]),
    ("comm", ["src/comm/*", "include/dpx/comm/*"]),
    ("ddp, data_parallel, fsdp", ["src/ddp/*", "include/dpx/ddp/*", "src/data_parallel/*",
                                  "include/dpx/data_parallel/*", "src/fsdp/*",
                                  "include/dpx/fsdp/*"]),
    ("algorithms, amp", ["src/algorithms/*", "include/dpx/algorithms/*", "src/amp/*",
                         "include/dpx/amp/*"]),
    ("checkpoint, launch", ["src/checkpoint/*", "include/dpx/checkpoint/*", "src/launch/*",
                            "include/dpx/launch/*"]),
    ("programs", ["include/dpx/dpx.h", "tools/*", "bench/*", "examples/*"]),
]
ROOTS = ["src", "include/dpx", "tools", "bench", "examples"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    for rank, (_, patterns) in enumerate(LAYERS):
        if any(fnmatch.fnmatch(path, p) for p in patterns):
            return rank
    return None


def resolve(repo, includer, name):
    """The repository path an include names: beside the includer, under src/ or include/."""
    for base in (os.path.dirname(includer), "src", "include"):
        candidate = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(repo, candidate)):
            return candidate
    return None


def sources(repo):
    for root in ROOTS:
        for folder, _, files in os.walk(os.path.join(repo, root)):
            for f in files:
                if f.endswith((".h", ".hpp", ".cpp", ".cu")):
                    yield os.path.relpath(os.path.join(folder, f), repo)


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))
    problems, files = [], 0
    for path in sorted(sources(repo)):
        files += 1
        mine = layer_of(path)
        if mine is None:
            problems.append(f"{path}: in no layer; add its folder to LAYERS in {__file__}")
            continue
        with open(os.path.join(repo, path), encoding="utf-8") as f:
            text = f.read()
        for name in INCLUDE.findall(text):
            target = resolve(repo, path, name)
            if target is None:
                continue
            theirs = layer_of(target)
            if theirs is not None and theirs > mine:
                problems.append(f'{path} ({LAYERS[mine][0]}) includes "{name}" '
                                f"({LAYERS[theirs][0]}): an include may not go up the layers")
    for p in problems:
        print(p)
    print(f"check_layers: {files} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
