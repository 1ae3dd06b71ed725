#!/usr/bin/python3
"""The Python side of dpx's weights-file tests (tests/multiproc/weights_python_test.cpp).

  weights_reference.py read FILE OUT.json    torch.load(FILE, weights_only=True) (or, for a
        .safetensors FILE, safetensors.torch.load_file) -> OUT.json: {name: {"dtype": "float32",
        "shape": [..], "values": [flat values as floats]}}, in the file's order
  weights_reference.py write DIR              torch.save of recipe() as DIR/tensors.pt, of the
        state_dict of Net as DIR/model.pt, and (if safetensors imports) DIR/tensors.safetensors
  weights_reference.py evil DIR               DIR/evil.pt: a pickle calling os.system, and
        DIR/object.pt: a dict holding an instance of a class of this script
"""
import collections
import json
import os
import sys

import torch


def recipe():
    # The same tensors as recipe() in weights_python_test.cpp.
    return collections.OrderedDict([
        ("f32", torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7),
        ("f64", torch.arange(5, dtype=torch.float64) * 1.5 - 2),
        ("bf16", (torch.arange(6, dtype=torch.float32) / 3).to(torch.bfloat16).reshape(2, 3)),
        ("i64", torch.arange(4, dtype=torch.int64) * 1000000007),
        ("nc", torch.arange(12, dtype=torch.float32).reshape(3, 4).t()),
        ("scalar", torch.tensor(2.5)),
        ("block.sub.weight", torch.ones(2, 2)),
    ])


class Net(torch.nn.Module):
    # The same layers as Net in weights_python_test.cpp.
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        self.bn = torch.nn.BatchNorm1d(2)
        with torch.no_grad():
            self.fc.weight.copy_(torch.arange(6, dtype=torch.float32).reshape(2, 3) / 10)
            self.fc.bias.copy_(torch.tensor([0.5, -0.5]))
            self.bn.running_mean.fill_(0.25)
            self.bn.num_batches_tracked.fill_(7)


def describe(tensors):
    return {name: {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                   "values": t.detach().to(torch.float64).reshape(-1).tolist()}
            for name, t in tensors.items()}


class Payload:
    pass


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "read":
        if path.endswith(".safetensors"):
            from safetensors.torch import load_file
            tensors = load_file(path)
        else:
            tensors = torch.load(path, weights_only=True)
        json.dump(describe(tensors), open(sys.argv[3], "w"))
    elif mode == "write":
        torch.save(recipe(), os.path.join(path, "tensors.pt"))
        torch.save(Net().state_dict(), os.path.join(path, "model.pt"))
        try:
            from safetensors.torch import save_file
            save_file({k: v.contiguous() for k, v in recipe().items()},
                      os.path.join(path, "tensors.safetensors"))
        except ImportError:
            pass
    elif mode == "evil":
        torch.save({"w": torch.ones(2), "x": Evil()}, os.path.join(path, "evil.pt"))
        torch.save({"w": torch.ones(2), "x": Payload()}, os.path.join(path, "object.pt"))


if __name__ == "__main__":
    main()
