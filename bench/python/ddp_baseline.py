#!/usr/bin/python3
"""PyTorch's Python DDP on the models of `dpx-bench ddp`, for its comparison table; with
--plain, the same loop without DDP (1 process), so that Python DDP at --world 1 against it is
PyTorch's own cost of DDP.

Usage: ddp_baseline.py --model cnn|mlp --world W --steps S --warmup N --batch B
                       --threads T --mlp-width N --device cpu|cuda --out PREFIX [--plain]
Each rank writes PREFIX.rankR: "<seconds of the timed steps> <user+sys CPU seconds>
<minor page faults>".
"""
import argparse
import os
import resource
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class FashionCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class WideMlp(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.fc1 = nn.Linear(784, w)
        self.fc2 = nn.Linear(w, w)
        self.fc3 = nn.Linear(w, 1024)
        self.fc4 = nn.Linear(1024, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.relu(self.fc2(x))
        return self.fc4(F.relu(self.fc3(x)))


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def worker(rank, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    backend = "gloo"
    if args.device == "cuda":
        # One GPU per rank over NCCL; ranks that share a GPU (NCCL refuses that) use Gloo on
        # the CUDA tensors, as dpx stages them over shm.
        gpus = torch.cuda.device_count()
        device = torch.device("cuda", rank % gpus)
        torch.cuda.set_device(device)
        backend = "nccl" if args.world <= gpus else "gloo"
    if not args.plain:
        dist.init_process_group(backend, rank=rank, world_size=args.world)
    torch.manual_seed(0)
    model = (FashionCnn() if args.model == "cnn" else WideMlp(args.mlp_width)).to(device)
    ids = [device.index] if device.type == "cuda" else None
    # At world size 1 too: PyTorch's DDP buckets the gradients and all-reduces each bucket then.
    ddp = model if args.plain else nn.parallel.DistributedDataParallel(model, device_ids=ids)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(args.batch, 1, 28, 28).to(device)
    y = torch.randint(10, (args.batch,)).to(device)

    def finish_queued():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def step():
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    finish_queued()
    if not args.plain:
        dist.barrier()
    t0, c0, f0 = time.perf_counter(), cpu_seconds(), minor_faults()
    for _ in range(args.steps):
        step()
    finish_queued()
    t1, c1, f1 = time.perf_counter(), cpu_seconds(), minor_faults()
    with open("%s.rank%d" % (args.out, rank), "w") as f:
        f.write("%.9f %.9f %d\n" % (t1 - t0, c1 - c0, f1 - f0))
    if not args.plain:
        dist.barrier()
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["cnn", "mlp"], required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--mlp-width", type=int, default=4096)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--out", required=True)
    p.add_argument("--plain", action="store_true", help="no DDP and no process group; --world 1")
    args = p.parse_args()
    if args.plain and args.world != 1:
        p.error("--plain runs 1 process: --world 1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
