"""The Python side of tests/unit/python_format_test.cpp.

  state_dict_oracle.py check <file.pt>         torch.load(weights_only=True) (1.x: see load_weights_only)
                                               and compare with expected()
  state_dict_oracle.py check_tensors <file.pt> the same for expected_tensors(), weights_only=True
  state_dict_oracle.py write <file.pt>         torch.save(expected()) as Python writes it
  state_dict_oracle.py write_model <file.pt|file.safetensors>   a model's state_dict (model())
  state_dict_oracle.py check_model <file.pt|file.safetensors>   load it into model(), strict
  state_dict_oracle.py check_ckpt <file.pt>    a Checkpointer kTorchSave file loads into Adam
  state_dict_oracle.py write_evil <file.pt>    a pickle holding a __main__ object
The expected values are formulas the C++ test repeats; exit status 0 means they matched exactly.
"""
import collections
import io
import pickle
import sys

import torch


def expected_tensors():  # no floats: what torch.load(weights_only=True) reads in 1.13 too
    d = expected()
    del d["lr"], d["list"]
    return d


def load_weights_only(path):
    """torch.load(weights_only=True); in PyTorch 1.x, whose restricted unpickler has no BINFLOAT
    opcode (71) and so refuses any Python float, even in Python's own torch.save files, it checks
    that this is the refusal and loads with weights_only=False."""
    try:
        return torch.load(path, weights_only=True)
    except pickle.UnpicklingError as e:
        if not (torch.__version__.startswith("1.") and "Unsupported operand 71" in str(e)):
            raise
    buf = io.BytesIO()
    torch.save({"lr": 0.5}, buf)
    buf.seek(0)
    try:
        torch.load(buf, weights_only=True)
        sys.exit("this PyTorch reads floats with weights_only=True: the 1.x workaround is stale")
    except pickle.UnpicklingError:
        pass
    return torch.load(path, weights_only=False)


def expected():
    return {
        "f32": torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7,
        "f64": torch.arange(6, dtype=torch.float64) * 1.5 - 2,
        "bf16": (torch.arange(8, dtype=torch.float32) / 3).to(torch.bfloat16),
        "i64": torch.tensor([-(2 ** 40), -1, 0, 1, 2 ** 40], dtype=torch.int64),
        "noncontig": torch.arange(12, dtype=torch.float32).reshape(3, 4).t(),
        "step": 7,
        "big": 2 ** 40,
        "lr": 0.125,
        "name": "dpx",
        "list": [1, 2.5, "a"],
        "nested": {"t": torch.ones(2, dtype=torch.float64), "n": -3},
    }


def model():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    with torch.no_grad():
        for k, (name, t) in enumerate(m.state_dict().items()):
            # the same formula as the C++ test's fill_model()
            t.copy_((torch.arange(t.numel(), dtype=torch.float64).reshape(t.shape) * 0.25 + k).to(t.dtype))
    return m


def same(a, b, where):
    if isinstance(a, torch.Tensor):
        ok = isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, dict):
        ok = isinstance(b, dict) and set(a) == set(b) and all(same(a[k], b[k], f"{where}.{k}") for k in a)
    elif isinstance(a, list):
        ok = isinstance(b, list) and len(a) == len(b) and all(same(x, y, where) for x, y in zip(a, b))
    else:
        ok = type(a) == type(b) and a == b
    if not ok:
        print(f"mismatch at {where}: expected {a!r}, got {b!r}", file=sys.stderr)
    return ok


def load_any(path):
    if path.endswith(".safetensors"):
        import safetensors.torch
        return safetensors.torch.load_file(path)
    return torch.load(path, weights_only=True)


class Evil:  # pickled as __main__.Evil: what torch.load(weights_only=True) refuses
    pass


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "check":
        sys.exit(0 if same(expected(), load_weights_only(path), "root") else 1)
    elif mode == "check_tensors":
        sys.exit(0 if same(expected_tensors(), torch.load(path, weights_only=True), "root") else 1)
    elif mode == "write":
        d = expected()
        d["ordered"] = collections.OrderedDict([("b", torch.zeros(1)), ("a", 1)])
        torch.save(d, path)
    elif mode == "write_model":
        sd = model().state_dict()
        if path.endswith(".safetensors"):
            import safetensors.torch
            safetensors.torch.save_file(dict(sd), path, metadata={"format": "pt"})
        else:
            torch.save(sd, path)
    elif mode == "check_model":
        m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
        m.load_state_dict(load_any(path), strict=True)
        sys.exit(0 if same(dict(model().state_dict()), dict(m.state_dict()), "model") else 1)
    elif mode == "check_ckpt":  # a Checkpointer CheckpointFormat::kTorchSave file (Adam, 2 steps)
        ck = load_weights_only(path)
        m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
        m.load_state_dict(ck["model"])
        opt = torch.optim.Adam(m.parameters(), lr=0.5)
        opt.load_state_dict(ck["optimizer"])
        got = (ck["epoch"], ck["step"], ck["sampler_position"], opt.param_groups[0]["lr"],
               float(opt.state_dict()["state"][0]["step"]), ck["rng_cpu"].dtype)
        want = (1, 3, 24, 0.01, 2.0, torch.uint8)
        if got != want:
            sys.exit(f"checkpoint holds {got}, expected {want}")
        m(torch.ones(2, 3)).sum().backward()
        opt.step()  # the loaded state is usable
    elif mode == "write_evil":
        torch.save({"w": torch.ones(1), "x": Evil()}, path)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
