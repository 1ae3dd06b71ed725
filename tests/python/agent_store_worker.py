#!/usr/bin/python3
"""A PyTorch program as dpxrun's static rendezvous starts it: torch.distributed's own
init_process_group(env://) joins the launcher's store (TORCHELASTIC_USE_AGENT_STORE=True) with
c10d's TCPStore client, as under torchrun, and uses it for set-up, a barrier and its own keys.
Writes DIR/sum_<rank>: the all-reduced sum of rank + 1 and the world size, as test_worker does.
Usage: agent_store_worker.py DIR
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist


def main():
    out = sys.argv[1]
    assert os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True"
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    # The launcher's store itself, as PyTorch programs reach it (keys under /worker/attempt_N).
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=False, timeout=datetime.timedelta(seconds=60))
    store.set(f"python/{rank}", str(rank * 10))
    store.wait([f"python/{r}" for r in range(world)])
    seen = sum(int(store.get(f"python/{r}")) for r in range(world))
    assert seen == 10 * world * (world - 1) // 2, seen
    assert store.add("python/count", 1) <= world
    dist.barrier()
    with open(os.path.join(out, f"sum_{rank}"), "w") as f:
        f.write(f"{t.item():g} {world}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
