"""What does PyTorch's own ProcessGroupNCCL do when a peer dies or stops? The oracle for dpx's
NcclFaults tests, on one GPU: the ranks share cuda:0, each a host of its own to NCCL
(NCCL_HOSTID, sockets over loopback), as Note [NCCL ranks sharing a GPU] describes.

    python3 scripts/nccl_fault_probe.py [SECONDS]

Case "kill": 3 ranks; rank 2 SIGKILLs itself after one all-reduce; ranks 0 and 1 all-reduce in a
loop, each work waited with an 8 s timeout. Case "stop": 2 ranks; rank 1 SIGSTOPs itself; rank 0
all-reduces with a 3 s timeout. Each surviving rank reports, with times since the fault: which
exception (type, first 300 characters), then how long destroy_process_group took. Prints one
JSON line per case; a rank that reports nothing within SECONDS per case is listed as silent, and
every process of the case is killed.
"""
import json
import os
import signal
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(case, rank, world, port, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_IB_DISABLE="1",
                      NCCL_SOCKET_IFNAME="lo", NCCL_HOSTID=f"dpx-fault-probe-{rank}",
                      TORCH_NCCL_ASYNC_ERROR_HANDLING="2")
    timeout_s = 8 if case == "kill" else 3
    report = {"rank": rank}
    try:
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout_s),
                                device_id=torch.device("cuda", 0))
        t = torch.ones(1 << 16, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        queue.put({"rank": rank, "pid": os.getpid(), "connected": True})
        if case == "kill" and rank == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        if case == "stop" and rank == 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        start = time.monotonic()
        try:
            for _ in range(1000):
                dist.all_reduce(t, async_op=True).wait(timeout=timedelta(seconds=timeout_s))
            report["error"] = None
        except Exception as e:
            report["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        report["error_after_s"] = round(time.monotonic() - start, 2)
        queue.put(dict(report))  # before destroying: a destroy that hangs still leaves this
        t0 = time.monotonic()
        dist.destroy_process_group()
        report["destroy_s"] = round(time.monotonic() - t0, 2)
    except Exception as e:
        report["setup_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    queue.put(report)


def run(case, world, seconds):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(case, r, world, port, queue)) for r in range(world)]
    for p in procs:
        p.start()
    survivors = [0, 1] if case == "kill" else [0]
    reports, deadline = {}, time.time() + seconds
    done = lambda r: any(k in reports.get(r, {}) for k in ("destroy_s", "setup_error"))
    while time.time() < deadline and not all(map(done, survivors)):
        try:
            item = queue.get(timeout=max(0.1, deadline - time.time()))
        except Exception:
            break
        reports.setdefault(item["rank"], {}).update(item)
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(timeout=5)
    print(json.dumps({"case": case, "world": world, "seconds": seconds,
                      "reports": [reports.get(r, {"rank": r, "silent": True}) for r in range(world)]}),
          flush=True)


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 40
    print(json.dumps({"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                      "gpu": torch.cuda.get_device_name(0)}), flush=True)
    run("kill", 3, seconds)
    run("stop", 2, seconds)
