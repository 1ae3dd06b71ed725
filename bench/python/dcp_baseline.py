"""PyTorch's dcp.save and dcp.load of an FSDP2 model, the twin of `dpx-bench dcp`.

    dcp_baseline.py --world W --width N --units U --rounds R --threads T --dir DIR

W ranks (one process each, gloo) shard a stack of U Linear(N, N) units with fully_shard, then
each round time dcp.save into a fresh folder (the slowest rank's seconds, after a barrier) and
dcp.load back into the model; rank 0 prints one line per round and the medians, in the form of
`dpx-bench dcp`.
"""
import argparse
import os
import shutil
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp


def slowest(fn):
    dist.barrier()
    t = time.perf_counter()
    fn()
    mine = torch.tensor([time.perf_counter() - t], dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return mine.item()


def worker(rank, args, port):
    from torch.distributed.fsdp import fully_shard
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(args.width, args.width)
                                for _ in range(args.units)])
    for unit in net:
        fully_shard(unit)
    fully_shard(net)
    gb = sum(p.numel() * p.element_size() for p in net.parameters()) / 1e9
    saves, loads = [], []
    for r in range(args.rounds):
        folder = f"{args.dir}/python-{r}"
        saves.append(slowest(lambda: dcp.save(net.state_dict(), checkpoint_id=folder)))
        loads.append(slowest(lambda: dcp.load(net.state_dict(), checkpoint_id=folder)))
        dist.barrier()
        if rank == 0:
            shutil.rmtree(folder)
            print(f"round {r}: save {saves[-1]:.3f} s, load {loads[-1]:.3f} s", flush=True)
    if rank == 0:
        s, l = statistics.median(saves), statistics.median(loads)
        print(f"python dcp: {args.world} ranks, {gb:.3f} GB: save {s:.3f} s ({gb / s:.2f} GB/s), "
              f"load {l:.3f} s ({gb / l:.2f} GB/s)", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    for name, default in [("--world", 2), ("--width", 2048), ("--units", 8), ("--rounds", 3),
                          ("--threads", 1)]:
        p.add_argument(name, type=int, default=default)
    p.add_argument("--dir", required=True)
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.world)


if __name__ == "__main__":
    main()
