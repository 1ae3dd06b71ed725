#!/usr/bin/python3
"""PyTorch's GradScaler (torch.amp.GradScaler("cpu"), PyTorch 2.3 and later) on the gradient
sequence dpx's test wrote, for tests/multiproc/amp_test.cpp.

Input (JSON):  {"init_scale": S, "growth_interval": N, "lr": LR, "p": [...],
                "grads": [[...], ...]}   values are numbers or the strings "inf", "-inf", "nan"
Each step: loss = (p * g).sum(); scaler.scale(loss).backward(); scaler.step(SGD); update().
Output (JSON): {"scales": [after each update], "trackers": [...], "stepped": [...], "p": [...]}
Exit code 3 when this PyTorch has no CPU GradScaler.
Usage: grad_scaler_reference.py IN.json OUT.json
"""
import json
import sys

import torch


def main():
    spec = json.load(open(sys.argv[1]))
    try:
        scaler = torch.amp.GradScaler("cpu", init_scale=spec["init_scale"],
                                      growth_interval=spec["growth_interval"])
    except (AttributeError, TypeError, RuntimeError) as e:
        print("no CPU GradScaler in PyTorch %s: %s" % (torch.__version__, e))
        sys.exit(3)
    p = torch.tensor(spec["p"], dtype=torch.float32, requires_grad=True)
    opt = torch.optim.SGD([p], lr=spec["lr"])
    out = {"scales": [], "trackers": [], "stepped": []}
    for g in spec["grads"]:
        g = torch.tensor([float(v) for v in g], dtype=torch.float32)
        opt.zero_grad()
        scaler.scale((p * g).sum()).backward()
        before = p.detach().clone()
        scaler.step(opt)
        scaler.update()
        out["stepped"].append(not torch.equal(before, p.detach()))
        state = scaler.state_dict()
        out["scales"].append(state["scale"])
        out["trackers"].append(state["_growth_tracker"])
    out["p"] = p.detach().tolist()
    json.dump(out, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
