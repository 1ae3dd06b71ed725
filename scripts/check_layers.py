#!/usr/bin/env python3
"""Fails when an #include goes against dpx's layer order (docs/architecture.md).

Every file under ROOTS that holds an #include directive is read, whatever its extension (.h,
.cpp, .inl, .cuh, ...), and both forms are checked, "quoted" and <angled>. An include names a
repository file when it is found as the compiler finds it: beside the includer (quoted form
only) or under one of the include folders of the includer's program (INCLUDE_DIRS). Then:
  1. It names its folder: found under an include folder, never beside the includer alone, so
     "comm/coordination/control.h", not "control.h" (and no file is found through an include
     path its readers do not see). A quoted include that names no repository file is an error:
     dpx quotes only its own files.
  2. The includer's unit may include it (UNITS): a unit includes its own files and those of the
     units of a lower rank; units of one rank are independent, neither includes the other. A
     unit with a list of its own (ONLY) includes nothing else, and a public header (include/dpx/)
     includes only public headers, since they are installed without src/.
A file with an #include in no unit is an error too, so a new folder has to be placed here
before it builds in CI. scripts/check_layers_test.py plants each kind of violation in a copy of
the tree and expects this check to fail on it.

  python3 scripts/check_layers.py [REPO]      prints each problem; exit 1 if any
"""
import os
import re
import sys

# Bottom up (docs/architecture.md): (unit, rank, folders). "dir/*" holds the files directly in
# dir, "dir/**" those at any depth below it, a plain path that one file. A path belongs to the
# unit of the longest folder that holds it, so src/comm/backends/shm/ is its own unit while the
# files at the top of src/comm/ are "comm", and a new folder under src/comm/ is in no unit
# until it is given one here.
UNITS = [
    # Every layer throws dpx's errors (dpx/errors.h), so they sit below all of them.
    ("errors", 0, ["include/dpx/errors.h", "src/errors.cpp"]),
    ("compat", 0, ["src/runtime/compat/*"]),
    ("runtime", 1, ["src/runtime/**", "include/dpx/runtime/*"]),
    ("data", 2, ["src/data/*", "include/dpx/data/*"]),
    # Sockets and routes, below the store and gloo, which both open connections.
    ("net", 2, ["src/net/*"]),
    ("store", 3, ["src/store/*", "include/dpx/store/*"]),
    ("observe", 4, ["src/observe/**", "include/dpx/observe/*"]),
    # comm, bottom up: the interface (ProcessGroup, Work); the mechanisms every backend shares
    # (coordination/) beside the pure decisions a group is made from (plan/); what backends
    # share (c10d/, backend_args.h); the backends, each on its own; hierarchical, made of shm
    # and gloo groups; init/, which parses init_process_group's arguments and makes the group.
    ("comm", 5, ["src/comm/*", "include/dpx/comm/*"]),
    ("comm/coordination", 6, ["src/comm/coordination/*"]),
    ("comm/plan", 6, ["src/comm/plan/*"]),
    ("comm/backends", 7, ["src/comm/backends/*"]),
    ("comm/backends/c10d", 7, ["src/comm/backends/c10d/*"]),
    ("comm/backends/shm", 8, ["src/comm/backends/shm/*"]),
    ("comm/backends/gloo", 8, ["src/comm/backends/gloo/*"]),
    ("comm/backends/nccl", 8, ["src/comm/backends/nccl/*"]),
    ("comm/backends/staged", 8, ["src/comm/backends/staged/*"]),
    ("comm/backends/mpi", 8, ["src/comm/backends/mpi/*"]),
    ("comm/backends/hierarchical", 9, ["src/comm/backends/hierarchical/*"]),
    ("comm/init", 10, ["src/comm/init/*"]),
    ("ddp", 11, ["src/ddp/*", "include/dpx/ddp/*"]),
    ("data_parallel", 11, ["src/data_parallel/*", "include/dpx/data_parallel/*"]),
    ("fsdp", 11, ["src/fsdp/*", "include/dpx/fsdp/*"]),
    ("algorithms", 12, ["src/algorithms/*", "include/dpx/algorithms/*"]),
    ("amp", 12, ["src/amp/*", "include/dpx/amp/*"]),
    # checkpoint, bottom up: the public headers, the atomic file and the step-named directory
    # every checkpointer keeps; Python's file formats (pickle, torch.save, safetensors, the
    # optimizer's layout); the checkpointers, each on its own: the whole model on rank 0
    # (checkpointer.h), fully_shard's shards (fsdp_checkpoint.h) and PyTorch's DCP (dcp.h).
    ("checkpoint", 13, ["src/checkpoint/*", "include/dpx/checkpoint/*"]),
    ("checkpoint/python_format", 14, ["src/checkpoint/python_format/*"]),
    ("checkpoint/checkpointer", 15, ["src/checkpoint/checkpointer/*"]),
    ("checkpoint/fsdp_checkpoint", 15, ["src/checkpoint/fsdp_checkpoint/*"]),
    ("checkpoint/dcp", 15, ["src/checkpoint/dcp/*"]),
    ("launch", 13, ["src/launch/*", "include/dpx/launch/*"]),
    # Fault-tolerant training: replica groups over shm and gloo groups, steps decided by a
    # coordinator through the launcher's store.
    ("ft", 13, ["src/ft/*", "include/dpx/ft/*"]),
    ("dpx.h", 16, ["include/dpx/dpx.h"]),
    ("dpxrun", 16, ["tools/dpxrun/*"]),
    ("bench", 16, ["bench/**"]),
    ("examples", 16, ["examples/**"]),
    ("tests", 17, ["tests/**"]),
]
# Units that include only these folders besides their own: the launcher talks to workers
# through the environment and the store, so it sees the public headers, src/store and src/net
# (the local address the other nodes reach it at) alone; benchmarks and examples use dpx as its
# users do.
ONLY = {
    "dpxrun": ["include/dpx/**", "src/store/*", "src/net/*"],
    "bench": ["include/dpx/**"],
    "examples": ["include/dpx/**"],
}
# Where the compiler looks for each program's includes (CMakeLists.txt, tools/dpxrun/,
# bench/, tests/): the first folder a path starts with picks the list. Public headers are
# compiled with the library's, so src/ is seen from them too (and the rule on public headers
# says what is wrong when one includes it).
INCLUDE_DIRS = [
    ("src/", ["src", "include"]),
    ("include/", ["include", "src"]),
    ("tools/", ["tools", "src", "include"]),
    ("bench/", [".", "include"]),
    ("examples/", [".", "include"]),
    ("tests/", ["tests", "src", "include"]),
]
ROOTS = [root.rstrip("/") for root, _ in INCLUDE_DIRS]
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)


def _matches(path, pattern):
    """How specific `pattern` is for `path` (its length), or -1 if it does not hold it."""
    if pattern.endswith("/**"):
        return len(pattern) - 3 if path.startswith(pattern[:-2]) else -1
    if pattern.endswith("/*"):
        folder = pattern[:-2]
        return len(folder) if os.path.dirname(path) == folder else -1
    return len(pattern) + 1 if path == pattern else -1


def unit_of(path):
    best, best_len = None, -1
    for unit in UNITS:
        for pattern in unit[2]:
            n = _matches(path, pattern)
            if n > best_len:
                best, best_len = unit, n
    return best


def include_dirs(path):
    for prefix, dirs in INCLUDE_DIRS:
        if path.startswith(prefix):
            return dirs
    return []


def find(repo, base, name):
    candidate = os.path.normpath(os.path.join(base, name))
    if candidate.startswith("..") or not os.path.isfile(os.path.join(repo, candidate)):
        return None
    return candidate


def sources(repo):
    """Every file under ROOTS that holds an #include, whatever its extension."""
    for root in ROOTS:
        for folder, dirs, files in os.walk(os.path.join(repo, root)):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for f in sorted(files):
                path = os.path.relpath(os.path.join(folder, f), repo)
                try:
                    with open(os.path.join(repo, path), encoding="utf-8") as fh:
                        text = fh.read()
                except (UnicodeDecodeError, OSError):
                    continue  # binary data (test fixtures), not source
                includes = INCLUDE.findall(text)
                if includes:
                    yield path, includes


def check_include(repo, path, unit, form, name):
    """The problem with `path` including `name` (form '"' or '<'), or None."""
    spelled = f'"{name}"' if form == '"' else f"<{name}>"
    found = [t for t in (find(repo, d, name) for d in include_dirs(path)) if t]
    if not found:
        beside = find(repo, os.path.dirname(path), name) if form == '"' else None
        if beside:
            return (f"{path} includes {spelled}: name its folder, as {beside} is found from "
                    f"{' or '.join(d + '/' for d in include_dirs(path))}")
        if form == '"':
            return (f"{path} includes {spelled}, which is no file under "
                    f"{', '.join(d + '/' for d in include_dirs(path))}")
        return None  # LibTorch's, the standard library's
    target = found[0]
    if path.startswith("include/dpx/") and not target.startswith("include/dpx/"):
        return (f"{path} (a public header) includes {spelled} ({target}): public headers are "
                f"installed without src/, so they include only public headers")
    theirs = unit_of(target)
    if theirs is None or theirs is unit:
        return None
    allowed = ONLY.get(unit[0])
    if allowed is not None:
        if any(_matches(target, p) >= 0 for p in allowed):
            return None
        return (f"{path} ({unit[0]}) includes {spelled} ({theirs[0]}): {unit[0]} includes only "
                f"{', '.join(allowed)}")
    if theirs[1] > unit[1]:
        return (f"{path} ({unit[0]}) includes {spelled} ({theirs[0]}): an include may not go "
                f"up the layers")
    if theirs[1] == unit[1]:
        return (f"{path} ({unit[0]}) includes {spelled} ({theirs[0]}): {unit[0]} and "
                f"{theirs[0]} share a rank, so neither includes the other")
    return None


def check(repo):
    problems, files = [], 0
    for path, includes in sources(repo):
        files += 1
        unit = unit_of(path)
        if unit is None:
            problems.append(f"{path}: in no unit; add its folder to UNITS in "
                            f"scripts/check_layers.py")
            continue
        for form, name in includes:
            problem = check_include(repo, path, unit, form, name.strip())
            if problem:
                problems.append(problem)
    return problems, files


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))
    problems, files = check(repo)
    for p in problems:
        print(p)
    print(f"check_layers: {files} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
