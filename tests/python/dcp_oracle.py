"""PyTorch's torch.distributed.checkpoint (DCP): the oracle of tests/unit/dcp_test.cpp (write)
and tests/multiproc/dcp_save_test.cpp (check).

    dcp_oracle.py write DIR   (DIR exists; tests/support/python_oracle.h's python_output_once)
    dcp_oracle.py check DIR M

check: loads every DCP checkpoint named in DIR/checkpoints.txt (one folder name a line, written
by dpx) on M ranks, into the model below sharded by fully_shard (M > 1) or whole (M = 1), with
dcp.load({"model": model.state_dict()}), and compares each tensor whole with DIR/expected.pt,
dtype included. Then each named in DIR/optim_checkpoints.txt (dpx's model and Adam state, saved
as {"model": ..., "optim": ...}) into optim_model() and a fresh torch.optim.Adam, with dcp.load
and set_optimizer_state_dict, and compares the optimizer's state whole and its hyper-parameters
with DIR/<name>-optim.pt (dpx's full_optimizer_state_dict). On one rank, each named in
DIR/training_checkpoints.txt (a dpx DcpCheckpointer's step folder) also with
dcp.load({"model": ..., "progress": {...}}) into a plain optim_model(): the model compared with
DIR/<name>-model.pt, the progress with DIR/<name>-progress.txt ("key value" lines). Exit status 0
only if every rank found every tensor equal.

write: writes, with this Python's PyTorch, into DIR:
  expected.pt  the model's state dict (torch.save): what every checkpoint below holds under "model."
  one/         dcp.save({"model": state_dict, "step": 7}) from one process
  three/       the same model sharded by fully_shard (FSDP2) on 3 gloo ranks (one process each),
               dcp.save'd the same way: 7 rows split 3, 3, 1; 2 rows split 1, 1, 0 (rank 2 holds an
               empty shard); the bfloat16 layer its own unit
  adam/        on the same 3 ranks, optim_model() sharded the same way, ADAM stepped 3 times on
               optim_batch(), then dcp.save({"model": get_model_state_dict(m),
               "optim": get_optimizer_state_dict(m, opt)})
  adam_next.pt the parameters whole after one more step from there: what a job that resumes
               from adam/ on any world size must reach
  hostile_<name>/  copies of one/ with .metadata or a .distcp broken as <name> says; dpx must
               refuse each with a CheckpointError. hostile_global's pickle would create DIR/pwned
               if anything ran it.
The model is nn.Sequential(Linear(6, 7), Tanh(), Linear(7, 2), Linear(2, 5) in bfloat16), its
parameters set to arange-based values. Exit status 0 only if every part was written.
"""
import copy
import os
import pickle
import shutil
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from rank_processes import wait_all


def model():
    m = torch.nn.Sequential(torch.nn.Linear(6, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2),
                            torch.nn.Linear(2, 5))
    m[3].to(torch.bfloat16)
    with torch.no_grad():
        for i, p in enumerate(m.parameters()):
            p.copy_((torch.arange(p.numel(), dtype=torch.float64).reshape(p.shape) * 0.37 - i)
                    .to(p.dtype))
    return m


# Hyper-parameters away from Adam's defaults, so that a loader that kept its own shows.
ADAM = dict(lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)


def optim_model():
    """The optimizer checkpoints' model (tests/support/checkpoint_files.cpp's twin): float32,
    since it is trained; 7 rows and 2 rows, so 3 or 4 ranks hold uneven and empty shards."""
    m = torch.nn.Sequential(torch.nn.Linear(6, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))
    with torch.no_grad():
        for i, p in enumerate(m.parameters()):
            p.copy_(torch.arange(p.numel(), dtype=torch.float32).reshape(p.shape) * 0.05 - i)
    return m


def optim_batch():
    return torch.arange(24, dtype=torch.float32).reshape(4, 6) * 0.1 - 1


def optim_step(m, opt):
    """One step on the same batch on every rank: FSDP2 averages the gradients, so the step is
    the same on any world size."""
    opt.zero_grad()
    m(optim_batch()).pow(2).sum().backward()
    opt.step()


def run_rank(rank, folder):
    from torch.distributed.checkpoint.state_dict import (get_model_state_dict,
                                                         get_optimizer_state_dict)
    from torch.distributed.fsdp import fully_shard
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=3)
    m = model()
    fully_shard(m[3])
    fully_shard(m)
    dcp.save({"model": m.state_dict(), "step": 7}, checkpoint_id=f"{folder}/three")
    o = optim_model()
    fully_shard(o[2])
    fully_shard(o)
    opt = torch.optim.Adam(o.parameters(), **ADAM)
    for _ in range(3):
        optim_step(o, opt)
    dcp.save({"model": get_model_state_dict(o), "optim": get_optimizer_state_dict(o, opt)},
             checkpoint_id=f"{folder}/adam")
    optim_step(o, opt)
    after = {k: v.full_tensor() for k, v in o.state_dict().items()}
    if rank == 0:
        torch.save(after, f"{folder}/adam_next.pt")
    dist.destroy_process_group()


def check_rank(rank, world, root):
    from torch.distributed.tensor import DTensor
    if world > 1:
        from torch.distributed.fsdp import fully_shard
        dist.init_process_group("gloo", init_method=f"file://{root}/store-check-{world}",
                                rank=rank, world_size=world)
    names = open(f"{root}/checkpoints.txt").read().split()
    expected = torch.load(f"{root}/expected.pt", weights_only=True) if names else None
    ok = True
    for name in names:
        m = model()
        with torch.no_grad():
            for p in m.parameters():
                p.zero_()
        if world > 1:
            fully_shard(m[3])
            fully_shard(m)
        dcp.load({"model": m.state_dict()}, checkpoint_id=f"{root}/{name}", no_dist=world == 1)
        for key, value in m.state_dict().items():
            whole = value.full_tensor() if isinstance(value, DTensor) else value
            want = expected[key]
            if whole.dtype != want.dtype or not torch.equal(whole, want):
                print(f"rank {rank} of {world}: {name}: {key} is {whole}, expected {want}")
                ok = False
    optim_list = f"{root}/optim_checkpoints.txt"
    for name in open(optim_list).read().split() if os.path.exists(optim_list) else []:
        ok = check_optim(rank, world, root, name) and ok
    training_list = f"{root}/training_checkpoints.txt"
    if world == 1 and os.path.exists(training_list):
        for name in open(training_list).read().split():
            ok = check_training(root, name) and ok
    if world > 1:
        dist.destroy_process_group()
    return ok


def check_optim(rank, world, root, name):
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_optimizer_state_dict,
                                                         set_model_state_dict,
                                                         set_optimizer_state_dict)
    from torch.distributed.tensor import DTensor
    m = optim_model()
    if world > 1:
        from torch.distributed.fsdp import fully_shard
        fully_shard(m[2])
        fully_shard(m)
    opt = torch.optim.Adam(m.parameters())  # Adam's defaults: the checkpoint's must replace them
    state = {"model": get_model_state_dict(m), "optim": get_optimizer_state_dict(m, opt)}
    dcp.load(state, checkpoint_id=f"{root}/{name}", no_dist=world == 1)
    set_model_state_dict(m, state["model"])
    set_optimizer_state_dict(m, opt, optim_state_dict=state["optim"])
    full = get_optimizer_state_dict(m, opt, options=StateDictOptions(full_state_dict=True))
    want = torch.load(f"{root}/{name}-optim.pt", weights_only=True)
    ok = True
    if set(full["state"]) != set(want["state"]):
        print(f"rank {rank} of {world}: {name}: state for {sorted(full['state'])}, "
              f"dpx's for {sorted(want['state'])}")
        ok = False
    for param, entries in want["state"].items():
        for key, value in entries.items():
            got = full["state"].get(param, {}).get(key)
            if isinstance(got, DTensor):
                got = got.full_tensor()
            if got is None or got.dtype != value.dtype or not torch.equal(got, value):
                print(f"rank {rank} of {world}: {name}: optim state {param}.{key} is {got}, "
                      f"dpx's {value}")
                ok = False
    for key in ["lr", "betas", "eps", "weight_decay", "amsgrad", "params"]:
        got, expected = opt.param_groups[0][key], want["param_groups"][0][key]
        if key == "params":
            got = full["param_groups"][0]["params"]
        if tuple(got) != tuple(expected) if isinstance(got, (list, tuple)) else got != expected:
            print(f"rank {rank} of {world}: {name}: param_groups[0].{key} is {got}, dpx's "
                  f"{expected}")
            ok = False
    return ok


def save_metadata(folder, metadata):
    with open(f"{folder}/.metadata", "wb") as f:
        pickle.dump(metadata, f)


def hostile(root):
    """Each variant of one/ that a reader must refuse."""
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex
    good = dcp.FileSystemReader(f"{root}/one").read_metadata()

    def variant(name, change):
        folder = f"{root}/hostile_{name}"
        shutil.rmtree(folder, ignore_errors=True)  # a previous attempt's
        shutil.copytree(f"{root}/one", folder)
        m = copy.deepcopy(good)
        if change(m, folder) is not False:
            save_metadata(folder, m)

    w = "model.0.weight"

    def overlap(m, _):  # two chunks sharing row 3, as many elements as the tensor in all
        meta = m.state_dict_metadata[w]
        meta.chunks = [ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([4, 6])),
                       ChunkStorageMetadata(torch.Size([3, 0]), torch.Size([3, 6]))]
        index = next(i for i in m.storage_data if i.fqn == w)
        m.storage_data[MetadataIndex(w, torch.Size([3, 0]))] = m.storage_data[index]

    def outside(m, _):
        m.state_dict_metadata[w].chunks[0] = ChunkStorageMetadata(torch.Size([1, 0]),
                                                                  torch.Size([7, 6]))

    def huge(m, _):  # 2^61 rows claimed: no reader may allocate them
        meta = m.state_dict_metadata[w]
        meta.size = torch.Size([1 << 61, 6])
        meta.chunks = [ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([1 << 61, 6]))]

    def uncovered(m, _):
        meta = m.state_dict_metadata[w]
        meta.size = torch.Size([8, 6])

    def traversal(m, _):
        for index, info in m.storage_data.items():
            if index.fqn == w:
                info.relative_path = "../one/__0_0.distcp"

    def missing_file(m, folder):
        for f in os.listdir(folder):
            if f.endswith(".distcp"):
                os.remove(f"{folder}/{f}")

    def truncated(m, folder):
        path = [f"{folder}/{f}" for f in os.listdir(folder) if f.endswith(".distcp")][0]
        os.truncate(path, os.path.getsize(path) // 2)

    def no_storage(m, _):
        m.storage_data = {i: s for i, s in m.storage_data.items() if i.fqn != w}

    def global_call(m, folder):  # a pickle that runs a shell command when loaded by pickle.load
        code = (b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x94\x8c" +
                bytes([len(f"touch {root}/pwned")]) + f"touch {root}/pwned".encode() +
                b"\x94\x85\x94R\x94.")
        with open(f"{folder}/.metadata", "wb") as f:
            f.write(code)
        return False

    def deep(m, folder):  # lists nested 100,000 deep
        n = 100_000
        with open(f"{folder}/.metadata", "wb") as f:
            f.write(b"\x80\x04" + b"]" * n + b"a" * (n - 1) + b".")
        return False

    for name, change in [("overlap", overlap), ("outside", outside), ("huge", huge),
                         ("uncovered", uncovered), ("traversal", traversal),
                         ("missing_file", missing_file), ("truncated", truncated),
                         ("no_storage", no_storage), ("global", global_call), ("deep", deep)]:
        variant(name, change)


def check_training(root, name):
    """A DcpCheckpointer's folder in one process: its model and progress (an entry that a load of
    {"model", "optim"} alone leaves unread, as check_optim shows)."""
    m = optim_model()
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
    state = {"model": m.state_dict(),
             "progress": {"epoch": -1, "step": -1, "sampler_position": -1}}
    dcp.load(state, checkpoint_id=f"{root}/{name}", no_dist=True)
    ok = True
    want = torch.load(f"{root}/{name}-model.pt", weights_only=True)
    for key, value in m.state_dict().items():
        if not torch.equal(value, want[key]):
            print(f"{name}: model {key} is {value}, dpx's {want[key]}")
            ok = False
    for line in open(f"{root}/{name}-progress.txt").read().splitlines():
        key, value = line.split()
        if state["progress"][key] != int(value):
            print(f"{name}: progress {key} is {state['progress'][key]}, dpx's {value}")
            ok = False
    return ok


def main():
    if sys.argv[1] == "--rank":
        run_rank(int(sys.argv[2]), sys.argv[3])
        return 0
    if sys.argv[1] == "--check-rank":
        return 0 if check_rank(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]) else 1
    if sys.argv[1] == "check":
        root, world = sys.argv[2], int(sys.argv[3])
        fresh(f"{root}/store-check-{world}")
        if world == 1:
            return 0 if check_rank(0, 1, root) else 1
        return wait_all([subprocess.Popen([sys.executable, __file__, "--check-rank", str(r),
                                           str(world), root]) for r in range(world)])
    if sys.argv[1] != "write":
        print(__doc__)
        return 2
    root = sys.argv[2]
    fresh(f"{root}/store")
    m = model()
    torch.save(dict(m.state_dict()), f"{root}/expected.pt")
    dcp.save({"model": m.state_dict(), "step": 7}, checkpoint_id=f"{root}/one",
             no_dist=True)
    code = wait_all([subprocess.Popen([sys.executable, __file__, "--rank", str(r), root])
                     for r in range(3)])
    hostile(root)
    return code


def fresh(store):
    """A gloo file store must not hold a previous attempt's keys."""
    if os.path.exists(store):
        os.remove(store)




if __name__ == "__main__":
    sys.exit(main())
