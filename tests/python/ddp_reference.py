#!/usr/bin/python3
"""PyTorch's own DistributedDataParallel (gloo, 2 ranks) on the model and data dpx's test wrote.

Exchange format (readable by both sides, no pickle): raw little-endian arrays plus meta.json
  meta.json   {"world": W, "per_rank": B, "steps": S, "lr": .., "momentum": ..,
               "params": [[name, [shape...]], ...], "sample_shape": [...]}
  init.bin    every parameter, float32, in the order of "params"
  x.bin       S * W * B samples, float32;  y.bin  S * W * B labels, int64
  optional in meta.json: "post_local_sgd": {"start_iter": I, "period": P, "warmup": W}: DDP
               with post_localSGD_hook (no gradient all-reduce after iteration I) and
               PostLocalSGDOptimizer with PeriodicModelAverager(P, W) around the SGD optimizer
  optional: "powersgd": {"rank": R, "start_iter": I}: DDP with powerSGD_hook (PowerSGDState's
               other defaults: error feedback, warm start, seed 0)
  optional: "amp": {"scaler": true|false, "init_scale": S, "growth_interval": G,
               "inf_steps": [..]}: forward and loss under torch.autocast("cpu", bfloat16); with
               "scaler", torch.amp.GradScaler("cpu") scales the loss and steps the optimizer;
               rank 0's loss is multiplied by inf at the "inf_steps" (so every rank's gradients
               turn inf/nan after the all-reduce). Rank 0 writes python_scales.json: the scale
               after each step's update().
  optional: "join": {"steps": [S0, S1, ...], "broadcast_buffers": true|false}: uneven inputs:
               rank R trains S_R <= S steps inside ddp.join(), with DDP's broadcast_buffers as
               given; every rank then writes python_state_rank<R>.json: {"params": [..],
               "grads": [..], "buffers": {name: [..]}}, its parameters and their gradients
               (flat, in the order of "params") and its buffers (flat, by name), so that
               buffers can be compared exactly
  optional: "embedding": {"vocab": V, "dim": D, "classes": C, "tokens": T}: the model is
               EmbNet (a sparse Embedding and a Linear) instead of Cnn; x.bin then holds
               S * W * B bags of T token ids, int64, and "sample_shape" is [T]
Writes python_final.bin: the parameters after S steps, float32, same order (rank 0's), and in
the post-local SGD mode python_final_rank<R>.bin for every rank R (ranks differ between
averages).
Usage: ddp_reference.py DIR
"""
import contextlib
import datetime
import json
import os
import struct
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class Cnn(nn.Module):
    # Mirrors dpx::test::Cnn (tests/multiproc/ddp_models.h).
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 8, 3)
        self.fc = nn.Linear(8 * 4 * 4, 4)

    def forward(self, x):
        x = F.relu(self.bn(self.conv1(x)))
        x = F.relu(self.conv2(x))
        return self.fc(x.flatten(1))


class EmbNet(nn.Module):
    # Mirrors EmbNet of tests/multiproc/ddp_python_test.cpp: sparse gradients (DDP reduces them
    # in buckets of their own).
    def __init__(self, vocab, dim, classes):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, sparse=True)
        self.fc = nn.Linear(dim, classes)

    def forward(self, ids):
        return self.fc(self.emb(ids).sum(1))


def read(path, dtype):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=dtype)


def say(rank, what):
    print("rank %d: %s" % (rank, what), flush=True)  # where a stalled run stopped, in its log


def train_step(ddp, opt, scaler, amp, x, y, s, rank, per_rank, scales):
    xs = x[s, rank * per_rank:(rank + 1) * per_rank]
    ys = y[s, rank * per_rank:(rank + 1) * per_rank]
    opt.zero_grad()
    if amp:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(ddp(xs), ys)
        if rank == 0 and s in amp["inf_steps"]:
            loss = loss * float("inf")
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        else:
            loss.backward()
            opt.step()
    else:
        F.cross_entropy(ddp(xs), ys).backward()
        opt.step()


def write_state(path, model, params):
    named = dict(model.named_parameters())
    state = {"params": torch.cat([named[n].detach().reshape(-1) for n, _ in params]).tolist(),
             "grads": torch.cat([named[n].grad.reshape(-1) for n, _ in params]).tolist(),
             "buffers": {n: b.detach().reshape(-1).tolist() for n, b in model.named_buffers()}}
    with open(path, "w") as f:
        json.dump(state, f)  # float32 values as doubles: exact


def worker(rank, world, folder):
    torch.set_num_threads(1)
    # A file store: no port to pick and lose to a concurrent test between choosing and binding.
    store = "file://" + os.path.join(folder, "store")
    dist.init_process_group("gloo", init_method=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    say(rank, "group ready")
    meta = json.load(open(os.path.join(folder, "meta.json")))
    embedding = meta.get("embedding")
    if embedding:
        model = EmbNet(embedding["vocab"], embedding["dim"], embedding["classes"])
    else:
        model = Cnn()
    flat = read(os.path.join(folder, "init.bin"), torch.float32)
    named = dict(model.named_parameters())
    offset = 0
    with torch.no_grad():
        for name, shape in meta["params"]:
            p = named[name]
            assert list(p.shape) == shape, (name, p.shape, shape)
            p.copy_(flat[offset:offset + p.numel()].view(shape))
            offset += p.numel()
    join = meta.get("join")
    if join:
        ddp = nn.parallel.DistributedDataParallel(
            model, broadcast_buffers=join["broadcast_buffers"])
    else:
        ddp = nn.parallel.DistributedDataParallel(model)
    powersgd = meta.get("powersgd")
    if powersgd:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=powersgd["rank"],
            start_powerSGD_iter=powersgd["start_iter"])
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=meta["lr"], momentum=meta["momentum"])
    local_sgd = meta.get("post_local_sgd")
    if local_sgd:
        from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as hook
        from torch.distributed.algorithms.model_averaging import averagers
        from torch.distributed.optim import PostLocalSGDOptimizer
        state = hook.PostLocalSGDState(process_group=None, subgroup=None,
                                       start_localSGD_iter=local_sgd["start_iter"],
                                       post_local_gradient_allreduce=False)
        ddp.register_comm_hook(state, hook.post_localSGD_hook)
        opt = PostLocalSGDOptimizer(optim=opt, averager=averagers.PeriodicModelAverager(
            period=local_sgd["period"], warmup_steps=local_sgd["warmup"]))
    steps, per_rank = meta["steps"], meta["per_rank"]
    x = read(os.path.join(folder, "x.bin"), torch.int64 if embedding else torch.float32).view(
        [steps, world * per_rank] + meta["sample_shape"])
    y = read(os.path.join(folder, "y.bin"), torch.int64).view(steps, world * per_rank)
    amp = meta.get("amp")
    scaler = None
    if amp and amp["scaler"]:
        scaler = torch.amp.GradScaler("cpu", init_scale=amp["init_scale"],
                                      growth_interval=amp["growth_interval"])
    scales = []
    uneven = ddp.join() if join else contextlib.nullcontext()
    my_steps = join["steps"][rank] if join else steps
    with uneven:
        for s in range(my_steps):
            train_step(ddp, opt, scaler, amp, x, y, s, rank, per_rank, scales)
            say(rank, "step %d done" % s)
    if join:
        write_state(os.path.join(folder, "python_state_rank%d.json" % rank), model, meta["params"])
    if amp and rank == 0:
        json.dump(scales, open(os.path.join(folder, "python_scales.json"), "w"))
    names = ["python_final.bin"] if rank == 0 else []
    if local_sgd:
        names.append("python_final_rank%d.bin" % rank)
    out = torch.cat([named[name].detach().reshape(-1) for name, _ in meta["params"]])
    for name in names:
        with open(os.path.join(folder, name), "wb") as f:
            # Without numpy, which PyTorch 2.x does not install: float32 as little-endian bytes.
            f.write(struct.pack("<%df" % out.numel(), *out.tolist()))
    dist.barrier()
    dist.destroy_process_group()


def main():
    folder = sys.argv[1]
    meta = json.load(open(os.path.join(folder, "meta.json")))
    mp.spawn(worker, args=(meta["world"], folder), nprocs=meta["world"], join=True)


if __name__ == "__main__":
    main()
