#!/usr/bin/env python3
"""Plants each kind of forbidden #include in a copy of the tree and expects check_layers.py to
fail on it, naming the planted file (CTest `layers_planted`). The unplanted copy must pass.

  python3 scripts/check_layers_test.py [REPO]
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "check_layers.py")
COPIED = ["src", "include", "tools", "bench", "examples", "tests"]


def inc(name, angled=False, spacing="#include "):
    return f"{spacing}<{name}>\n" if angled else f'{spacing}"{name}"\n'


# (what is planted, file, text appended to it or written as a new file, words of the error)
CASES = [
    ("quoted include up the layers", "src/store/store.cpp", inc("comm/init/factory.h"),
     "up the layers"),
    ("angled include up the layers, comm -> ddp", "src/comm/work.cpp",
     inc("dpx/ddp/ddp_base.h", angled=True), "up the layers"),
    ("include with spaces inside the directive", "src/observe/extra.hpp",
     inc("dpx/ddp/ddp_base.h", angled=True, spacing="  #  include   "), "up the layers"),
    (".inl file", "src/store/extra.inl", inc("ddp/reducer.h"), "up the layers"),
    (".cuh file", "src/runtime/cuda/extra.cuh", inc("dpx/comm/process_group.h"),
     "up the layers"),
    (".cc file", "src/data/extra.cc", inc("dpx/store/store.h"), "up the layers"),
    ("ddp -> data_parallel", "src/ddp/ddp_base.cpp", inc("dpx/data_parallel/replicate.h"),
     "share a rank"),
    ("data_parallel -> ddp", "src/data_parallel/replicate.cpp", inc("ddp/reducer.h"),
     "share a rank"),
    ("algorithms -> amp", "src/algorithms/local_sgd.cpp", inc("dpx/amp/grad_scaler.h"),
     "share a rank"),
    ("amp -> algorithms", "src/amp/grad_scaler.cpp", inc("dpx/algorithms/powersgd.h"),
     "share a rank"),
    ("checkpoint -> launch", "src/checkpoint/step_directory.cpp",
     inc("dpx/launch/heartbeat.h"), "share a rank"),
    ("python format -> a checkpointer", "src/checkpoint/python_format/state_dict.cpp",
     inc("checkpoint/checkpointer/torch_checkpoint.h"), "up the layers"),
    ("one checkpointer -> another", "src/checkpoint/checkpointer/checkpointer.cpp",
     inc("checkpoint/fsdp_checkpoint/fsdp_checkpoint_parts.h"), "share a rank"),
    ("launch -> checkpoint", "src/launch/heartbeat.cpp",
     inc("dpx/checkpoint/checkpointer.h", angled=True), "share a rank"),
    ("comm plan -> a backend's internals", "src/comm/plan/diagnostics.cpp",
     inc("comm/backends/gloo/gloo_device.h"), "up the layers"),
    ("a backend -> the factory above it", "src/comm/backends/shm/channel.cpp",
     inc("comm/init/factory.h"), "up the layers"),
    ("one backend -> another", "src/comm/backends/shm/copy.cpp",
     inc("comm/backends/gloo/gloo_device.h"), "share a rank"),
    ("gloo -> hierarchical", "src/comm/backends/gloo/gloo_device.cpp",
     inc("comm/backends/hierarchical/process_group_hierarchical.h"), "up the layers"),
    ("coordination -> plan", "src/comm/coordination/control.cpp",
     inc("comm/plan/placement.h"), "share a rank"),
    ("comm's interface -> coordination", "src/comm/work.cpp",
     inc("comm/coordination/issuer.h"), "up the layers"),
    ("public header -> src/", "include/dpx/comm/work.h", inc("store/round.h"),
     "public header"),
    ("public header -> its own layer's src/", "include/dpx/ddp/future.h", inc("ddp/reducer.h"),
     "public header"),
    ("dpxrun -> src/comm", "tools/dpxrun/net.cpp", inc("comm/plan/placement.h"),
     "includes only"),
    ("bench -> src/ through the repository root", "bench/main.cpp", inc("src/ddp/reducer.h"),
     "includes only"),
    ("example -> src/ through the repository root", "examples/fashion_mnist/main.cpp",
     inc("src/store/round.h"), "includes only"),
    ("bare include of a file beside it", "tools/dpxrun/agent.cpp", inc("net.h"),
     "name its folder"),
    ("a file found only through an include path", "tools/dpxrun/net.cpp", inc("route.h"),
     "no file under"),
    ("a folder in no unit", "src/newlayer/thing.cpp", inc("dpx/store/store.h"), "in no unit"),
    ("a new folder inside comm", "src/comm/extra/thing.cpp", inc("dpx/comm/work.h"),
     "in no unit"),
]


def run_check(tree):
    r = subprocess.run([sys.executable, CHECK, tree], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(HERE)
    failures = []
    with tempfile.TemporaryDirectory(prefix="dpx-layers-") as tree:
        for d in COPIED:
            shutil.copytree(os.path.join(repo, d), os.path.join(tree, d))
        rc, out = run_check(tree)
        if rc != 0:
            print(f"the unplanted copy fails the check:\n{out}")
            return 1
        for what, path, text, words in CASES:
            full = os.path.join(tree, path)
            existed = os.path.exists(full)
            before = open(full, encoding="utf-8").read() if existed else None
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "a", encoding="utf-8") as f:
                f.write(text)
            rc, out = run_check(tree)
            caught = rc == 1 and any(line.startswith(path) and words in line
                                     for line in out.splitlines())
            print(f"{'caught' if caught else 'MISSED'}: {what} ({path}: {text.strip()})")
            if not caught:
                failures.append(f"{what}: exit {rc}, expected '{words}' on {path}:\n{out}")
            if existed:
                with open(full, "w", encoding="utf-8") as f:
                    f.write(before)
            else:
                os.remove(full)
    for f in failures:
        print(f)
    print(f"check_layers_test: {len(CASES)} planted, {len(failures)} missed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
