#!/usr/bin/python3
"""The baseline twin of examples/fashion_mnist for bench/example_vs_python.sh: the same job with
PyTorch's Python DDP (gloo), as the example runs it by default (--sharding none, CPU).

Run under torchrun:
  python -m torch.distributed.run --standalone --nproc-per-node 2 \
      bench/python/fashion_mnist_ddp.py --max-steps 300 --checkpoint-dir DIR --metrics-file F
The same CNN, initialisation seed, Adam (lr 2e-3), 64 samples per rank and step, the
DistributedSampler (shuffled, seed 0), data (the IDX .gz files, /255, then normalised with
0.2860 / 0.3530 per example), a progress line and a metrics record on rank 0 every 20 steps,
checkpoints (model, optimizer, progress, RNG state) by rank 0 every --checkpoint-every steps and
after evaluation, the evaluation of each epoch and model.pt at the end. Unlike the example it does
not resume from a checkpoint (the benchmark always starts in an empty directory).
"""
import argparse
import gzip
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler

MEAN, STD = 0.2860, 0.3530


class FashionMNIST(Dataset):
    def __init__(self, root, train):
        prefix = "train" if train else "t10k"
        with gzip.open(os.path.join(root, prefix + "-images-idx3-ubyte.gz")) as f:
            images = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8, offset=16)
        with gzip.open(os.path.join(root, prefix + "-labels-idx1-ubyte.gz")) as f:
            labels = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8, offset=8)
        self.images = images.view(-1, 1, 28, 28).float().div_(255)
        self.targets = labels.long()
        self.size = len(self.targets)

    def __len__(self):
        return self.size

    def __getitem__(self, i):  # normalised per example, as the example's Normalize transform
        return (self.images[i] - MEAN) / STD, self.targets[i]


class Net(nn.Module):  # conv 32 -> pool -> conv 64 -> pool -> fc 128 -> fc 10
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def evaluate(model, test, n, rank, world):
    """Test loss and accuracy over the first n test images, each rank its shard, all-reduced."""
    model.eval()
    sums = torch.zeros(3, dtype=torch.float64)
    with torch.no_grad():
        for chunk in torch.arange(rank, n, world).split(1000):
            x = (test.images.index_select(0, chunk) - MEAN) / STD
            y = test.targets.index_select(0, chunk)
            out = model(x)
            sums[0] += F.cross_entropy(out, y, reduction="sum").item()
            sums[1] += out.argmax(1).eq(y).sum().item()
            sums[2] += chunk.numel()
    dist.all_reduce(sums)
    model.train()
    return (sums[0] / sums[2]).item(), (sums[1] / sums[2]).item()


def save_checkpoint(args, model, optimizer, epoch, step, position):
    """Rank 0 writes checkpoint-<step>.pt atomically and keeps the newest 3; all wait."""
    if dist.get_rank() == 0:
        path = os.path.join(args.checkpoint_dir, "checkpoint-%d.pt" % step)
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                    "epoch": epoch, "step": step, "sampler_position": position,
                    "rng_cpu": torch.get_rng_state()}, path + ".tmp")
        os.replace(path + ".tmp", path)
        old = sorted((f for f in os.listdir(args.checkpoint_dir) if f.startswith("checkpoint-")
                      and f.endswith(".pt")), key=lambda f: int(f[11:-3]), reverse=True)[3:]
        for f in old:
            os.remove(os.path.join(args.checkpoint_dir, f))
    dist.barrier()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)  # per rank
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--checkpoint-dir", default="fashion_mnist_checkpoints")
    p.add_argument("--checkpoint-every", type=int, default=200)
    p.add_argument("--metrics-file", default="fashion_mnist_metrics.jsonl")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--max-steps", type=int, default=-1)
    p.add_argument("--train-limit", type=int, default=-1)
    args = p.parse_args()

    torch.set_num_threads(1)  # one core per rank, as the example
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    train = FashionMNIST(args.data_dir, train=True)
    test = FashionMNIST(args.data_dir, train=False)
    test_size = len(test)
    if args.train_limit > 0:
        train.size, test_size = args.train_limit, max(1, args.train_limit // 6)
    sampler = DistributedSampler(train, world, rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    model = nn.parallel.DistributedDataParallel(Net())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    metrics = open(args.metrics_file, "a") if rank == 0 else None
    start = time.perf_counter()
    elapsed = lambda: time.perf_counter() - start

    step = 0
    for epoch in range(args.epochs):
        if 0 <= args.max_steps <= step:
            break
        sampler.set_epoch(epoch)
        seen, steps, loss_sum, epoch_start = 0, 0, 0.0, elapsed()
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            seen += x.size(0)
            step += 1
            steps += 1
            loss_sum += loss.item()
            last = 0 <= args.max_steps <= step
            rate = steps * args.batch_size * world / (elapsed() - epoch_start)
            if rank == 0 and (steps % 20 == 0 or seen == len(sampler) or last):
                print("epoch %d/%d %d/%d  %.0f samples/s  loss %.4f" % (
                    epoch + 1, args.epochs, seen * world, sampler.total_size, rate,
                    loss_sum / steps), file=sys.stderr, flush=True)
                metrics.write(json.dumps({"type": "train", "epoch": epoch + 1, "step": step,
                                          "loss": loss_sum / steps, "samples_per_s": rate,
                                          "elapsed_s": elapsed()}) + "\n")
                metrics.flush()
            if step % args.checkpoint_every == 0:
                save_checkpoint(args, model, optimizer, epoch, step, seen)
            if last:
                break
        test_loss, accuracy = evaluate(model, test, test_size, rank, world)
        done = seen >= len(sampler)
        save_checkpoint(args, model, optimizer, epoch + 1 if done else epoch, step,
                        0 if done else seen)
        if rank == 0:
            print("epoch %d: test accuracy %.2f%%, test loss %.4f, %.1f s" % (
                epoch + 1, 100 * accuracy, test_loss, elapsed()), file=sys.stderr, flush=True)
            metrics.write(json.dumps({"type": "eval", "epoch": epoch + 1, "step": step,
                                      "test_loss": test_loss, "test_accuracy": accuracy,
                                      "elapsed_s": elapsed()}) + "\n")
            metrics.flush()
    if rank == 0:
        torch.save(model.module.state_dict(), os.path.join(args.checkpoint_dir, "model.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
