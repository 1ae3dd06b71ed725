"""Can two NCCL ranks share one GPU? PyTorch's own NCCL, two processes on cuda:0, first with one
NCCL_HOSTID for both (NCCL's "duplicate GPU" refusal expected), then with one NCCL_HOSTID each
(NCCL then believes they are on two hosts and connects them over sockets on loopback).

    python3 scripts/nccl_hostid_probe.py [SECONDS]

Prints one JSON line per case: whether the collectives gave the right sums, or the error.
"""
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, world, port, hostids, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_IB_DISABLE="1",
                      NCCL_SOCKET_IFNAME="lo", NCCL_DEBUG="WARN")
    if hostids:
        os.environ["NCCL_HOSTID"] = f"dpx-probe-host-{rank}"
    try:
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", rank=rank, world_size=world,
                                device_id=torch.device("cuda", 0))
        x = torch.full((1 << 20,), float(rank + 1), device="cuda")
        dist.all_reduce(x)
        ok = bool((x == world * (world + 1) / 2).all().item())
        y = torch.arange(4, device="cuda", dtype=torch.float32) + rank
        out = [torch.empty_like(y) for _ in range(world)]
        dist.all_gather(out, y)
        ok = ok and all(bool((o == torch.arange(4, device="cuda") + r).all()) for r, o in enumerate(out))
        big = torch.ones(16 << 20, device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(5):
            dist.all_reduce(big)
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) / 5 * 1e3
        dist.destroy_process_group()
        queue.put({"rank": rank, "ok": ok, "allreduce_64MiB_ms": round(ms, 2)})
    except Exception as e:  # the refusal is the result of the first case
        queue.put({"rank": rank, "error": f"{type(e).__name__}: {str(e)[:400]}"})


def case(hostids, world, seconds):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, world, port, hostids, queue)) for r in range(world)]
    for p in procs:
        p.start()
    results, deadline = [], time.time() + seconds
    while len(results) < world and time.time() < deadline:
        try:
            results.append(queue.get(timeout=max(0.1, deadline - time.time())))
        except Exception:
            break
    for p in procs:
        p.join(timeout=1)
        if p.is_alive():
            p.kill()
    print(json.dumps({"hostid_per_rank": hostids, "world": world, "results": results,
                      "finished": len(results) == world}), flush=True)


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 20
    print(json.dumps({"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                      "gpu": torch.cuda.get_device_name(0)}), flush=True)
    case(True, 2, seconds / 2)
    case(False, 2, seconds / 2)
