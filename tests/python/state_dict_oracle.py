"""The Python side of tests/unit/python_format_test.cpp.

  state_dict_oracle.py check <file.pt>         torch.load(weights_only=True) (1.x: see load_weights_only)
                                               and compare with expected()
  state_dict_oracle.py check_tensors <file.pt> the same for expected_tensors(), weights_only=True
  state_dict_oracle.py write <file.pt>         torch.save(expected()) as Python writes it
  state_dict_oracle.py write_model <file.pt|file.safetensors>   a model's state_dict (model())
  state_dict_oracle.py check_model <file.pt|file.safetensors>   load it into model(), strict
  state_dict_oracle.py check_ckpt <file.pt>    a Checkpointer kTorchSave file loads into Adam
  state_dict_oracle.py write_evil <file.pt>    a pickle holding a __main__ object
  state_dict_oracle.py write_hostile <file>    by its name, a pickle that nests a million levels or
                                               shares through the memo (deep_lists.pt,
                                               deep_dicts.pt, deep_tuples.pt, shared_tuples.pt),
                                               checked to load in this Python
  state_dict_oracle.py write_old <dir> <n>     old-style files for old_model() (a 1-element 1-D
                                               num_batches_tracked, one missing, with and without
                                               _metadata) and, for each, expected_<name>.pt: what
                                               Python's load_state_dict makes of it when both norm
                                               layers held num_batches_tracked = n before
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


def old_model():
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2),
                               torch.nn.BatchNorm1d(2))


def save_pickle(data, path):
    """A torch.save file around hand-written pickle bytes (Python's pickler cannot write a
    million levels: it recurses)."""
    w = torch._C.PyTorchFileWriter(path)
    w.write_record("data.pkl", data, len(data))
    w.write_record("byteorder", b"little", 6)
    w.write_end_of_file()


def write_hostile(path):
    """One of the hostile files, by its name, checked to load in this Python's
    torch.load(weights_only=True)."""
    n = 1_000_000
    raw = {
        # [[[...]]]: a million EMPTY_LISTs, then a million APPENDs (2 MB)
        "deep_lists.pt": lambda: b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b".",
        # {'k': {'k': ...}}: the key memoized once, then EMPTY_DICT, BINGET per level (2 MB)
        "deep_dicts.pt": lambda: b"\x80\x02}X\x01\x00\x00\x00kq\x00" + b"}h\x00" * (n // 2 - 1) +
                         b"}" + b"s" * (n // 2) + b".",
        # ((((),),),): EMPTY_TUPLE, then 100,000 TUPLE1s
        "deep_tuples.pt": lambda: b"\x80\x02)" + b"\x85" * 100_000 + b".",
    }
    name = path.rsplit("/", 1)[-1]
    if name in raw:
        save_pickle(raw[name](), path)
    elif name == "shared_tuples.pt":  # 40 levels, each the previous one twice (the pickler's BINGETs)
        t = ()
        for _ in range(40):
            t = (t, t)
        torch.save(t, path)
    else:
        sys.exit(f"write_hostile: no hostile file is named {name}")
    torch.load(path, weights_only=True)


def write_old(directory, count):
    torch.manual_seed(0)
    sd = old_model().state_dict()  # an OrderedDict with _metadata (BatchNorm: version 2)
    files = {}
    old = dict(sd)  # no _metadata: as from before versions, or a dict built by hand
    del old["1.num_batches_tracked"]
    old["3.num_batches_tracked"] = torch.tensor([5])  # 1-D, as PyTorch 0.3 saved scalars
    files["old"] = old
    missing = collections.OrderedDict(sd)
    missing._metadata = sd._metadata
    del missing["1.num_batches_tracked"]
    files["meta_missing"] = missing  # version 2 says the buffer existed: reported missing
    v1 = collections.OrderedDict(missing)
    v1._metadata = collections.OrderedDict((k, dict(v)) for k, v in sd._metadata.items())
    v1._metadata["1"]["version"] = 1
    files["meta_v1"] = v1
    for name, state in files.items():
        torch.save(state, f"{directory}/{name}.pt")
        m = old_model()
        with torch.no_grad():
            m[1].num_batches_tracked.fill_(count)
            m[3].num_batches_tracked.fill_(count)
        try:
            old_model().load_state_dict(state, strict=True)
            strict_error = ""
        except RuntimeError as e:
            strict_error = str(e)
        r = m.load_state_dict(state, strict=False)
        torch.save({"state": dict(m.state_dict()), "missing": list(r.missing_keys),
                    "unexpected": list(r.unexpected_keys), "strict_error": strict_error},
                   f"{directory}/expected_{name}.pt")


def check_order(path):
    """A dpx-written file lists its keys in Python's state_dict order (module by module)."""
    want = list(model().state_dict())
    if path.endswith(".safetensors"):
        import json, safetensors.torch, struct
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = [k for k in json.loads(f.read(n), object_pairs_hook=lambda kv: [k for k, _ in kv])
                      if k != "__metadata__"]
        got = {"header": header, "load_file": list(safetensors.torch.load_file(path))}
    else:
        got = {"torch.load": list(torch.load(path, weights_only=True))}
    ok = all(keys == want for keys in got.values())
    if not ok:
        print(f"key order {got}, Python's state_dict order {want}", file=sys.stderr)
    return ok


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
        ok = same(dict(model().state_dict()), dict(m.state_dict()), "model")
        sys.exit(0 if check_order(path) and ok else 1)
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
    elif mode == "write_hostile":
        write_hostile(path)
    elif mode == "write_old":
        write_old(path, int(sys.argv[3]))
    elif mode == "write_evil":
        torch.save({"w": torch.ones(1), "x": Evil()}, path)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
