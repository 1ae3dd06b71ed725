#!/usr/bin/env python3
"""Fails when a dpx binary imports a std::filesystem function that a library it loads, other
than libstdc++, defines.

Note [LibTorch's std::filesystem] (include/dpx/runtime/files.h): PyTorch 2.11's libtorch.so
carries its own copies of std::filesystem's operations, a program linked against it binds to
them before libstdc++'s, and its remove_all jumps to address 0. dpx's programs use
dpx/runtime/files.h instead; this check keeps it so for every LibTorch a build uses.

usage: check_filesystem_imports.py BINARY...
"""
import functools
import os
import re
import subprocess
import sys


def run(*cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"check_filesystem_imports: {' '.join(cmd)} failed: {out.stderr.strip()}")
    return out.stdout


def filesystem_symbols(path, which):
    return {line.split()[-1].split("@")[0] for line in run("nm", "-D", which, path).splitlines()
            if "St10filesystem" in line}


@functools.lru_cache(maxsize=None)
def defined_by(library):
    return frozenset(filesystem_symbols(library, "--defined-only"))


def loaded_libraries(binary):
    """The libraries the dynamic loader resolves for `binary`, libstdc++ left out."""
    libs = []
    for line in run("ldd", binary).splitlines():
        m = re.search(r"=>\s+(/\S+)", line)
        if m and not os.path.basename(m.group(1)).startswith("libstdc++"):
            libs.append(m.group(1))
    return libs


def main():
    binaries = sys.argv[1:]
    if not binaries:
        sys.exit(__doc__.strip().splitlines()[-1])
    bad = []
    for binary in binaries:
        imported = filesystem_symbols(binary, "--undefined-only")
        for lib in loaded_libraries(binary):
            for sym in sorted(imported & defined_by(lib)):
                bad.append((binary, sym, lib))
    print(f"checked {len(binaries)} binaries against the libraries they load")
    if bad:
        names = run("c++filt", *[b[1] for b in bad]).splitlines()
        for (binary, _, lib), name in zip(bad, names):
            print(f"{os.path.basename(binary)} imports {name}, which {lib} defines")
        print("use dpx/runtime/files.h instead (Note [LibTorch's std::filesystem])")
        sys.exit(1)


if __name__ == "__main__":
    main()
