"""PyTorch's own fully_shard (FSDP2) on CPU over gloo: the oracle of tests/multiproc/fsdp_python_test.cpp.

    fsdp_reference.py DIR WORLD OPTIMIZER MODEL DTYPE PARAM_DTYPE REDUCE_DTYPE OUTPUT_DTYPE

DIR holds what the C++ test wrote: init.pt (the unsharded model's state dict, torch.save form)
and data.pt (a tuple (x, y) of tensors [steps, WORLD * per_rank, ...], the whole batch of every
step). OPTIMIZER is sgd (lr 0.05, momentum 0.9) or adamw (lr 1e-2, weight decay 0.1); MODEL is 0 or
1 (ShardNet, untied or tied), seq (a Sequential: units 0 and 2, then the root) or list
(ListNet: each of its ModuleList's layers a unit, then the root); DTYPE (float64, float32) the parameters'; the last three are MixedPrecisionPolicy's
(a dtype's name, or none), OUTPUT_DTYPE for the root only: on the blocks it would hand the
root's head float32 inputs against its bfloat16 weight, which PyTorch refuses. The loss compares the output, cast to y's dtype, with y.
The model is tests/support/fsdp_models.h's ShardNet, by the same names. WORLD
ranks, one process each, shard the blocks and then the root, train on their rows of each step
and rank 0 writes the full state dict to DIR/final.pt and the full optimizer state dict
(get_optimizer_state_dict with full_state_dict=True) to DIR/final_optim.pt. Exit status 0 only if every rank did.
"""
import os
import subprocess
import sys

import torch
import torch.distributed as dist
from rank_processes import wait_all


class Block(torch.nn.Module):
    def __init__(self, n_in, n_out, frozen_bias):
        super().__init__()
        self.fc = torch.nn.Linear(n_in, n_out)
        self.norm = torch.nn.LayerNorm(n_out)
        if frozen_bias:
            self.fc.bias.requires_grad_(False)

    def forward(self, x):
        return torch.tanh(self.norm(self.fc(x)))


class ShardNet(torch.nn.Module):
    def __init__(self, tied):
        super().__init__()
        self.tied = tied
        self.embed = torch.nn.Linear(6, 8)
        for i, (n_in, n_out) in enumerate([(8, 13), (13, 3), (3, 9)]):
            setattr(self, f"blocks{i}", Block(n_in, n_out, i == 1))
        self.head = torch.nn.Linear(9, 8 if tied else 4)
        if tied:
            self.head_weight = self.embed.weight  # one parameter, two names
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 6 if tied else 4))

    def blocks(self):
        return [getattr(self, f"blocks{i}") for i in range(3)]

    def forward(self, x):
        h = self.embed(x)
        for b in self.blocks():
            h = b(h)
        h = self.head(h)
        if self.tied:
            h = h @ self.head_weight
        return h * self.scale


# tests/multiproc/fsdp_python_test.cpp's Sequential: units 0 and 2; LayerNorm's weight frozen.
def sequential():
    m = torch.nn.Sequential(torch.nn.Linear(6, 13), torch.nn.Tanh(), torch.nn.Linear(13, 7),
                            torch.nn.LayerNorm(7), torch.nn.Linear(7, 4))
    m[3].weight.requires_grad_(False)
    return m, [m[0], m[2]]


class ListNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(6, 13), torch.nn.Linear(13, 7)])
        self.head = torch.nn.Linear(7, 4)

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.head(x)


def build(model):
    """The model and its units (sharded first, the root after)."""
    if model == "seq":
        return sequential()
    if model == "list":
        net = ListNet()
        return net, list(net.layers)
    net = ShardNet(model == "1")
    return net, net.blocks()


def dtype_of(name):
    return None if name == "none" else getattr(torch, name)


def run_rank(rank, world, folder, optimizer, model, dtype, policy):
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor

    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank,
                            world_size=world)
    torch.set_num_threads(1)
    net, units = build(model)
    net = net.to(dtype_of(dtype))
    net.load_state_dict(torch.load(f"{folder}/init.pt", weights_only=True))
    param_dtype, reduce_dtype, output_dtype = (dtype_of(name) for name in policy)
    for b in units:
        fully_shard(b, mp_policy=MixedPrecisionPolicy(param_dtype, reduce_dtype))
    fully_shard(net, mp_policy=MixedPrecisionPolicy(param_dtype, reduce_dtype, output_dtype))
    if optimizer == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.AdamW(net.parameters(), lr=1e-2, weight_decay=0.1)
    xs, ys = torch.load(f"{folder}/data.pt", weights_only=True)
    per_rank = xs.size(1) // world
    for x, y in zip(xs, ys):
        opt.zero_grad()
        mine = slice(rank * per_rank, (rank + 1) * per_rank)
        torch.nn.functional.mse_loss(net(x[mine]).to(y.dtype), y[mine]).backward()
        opt.step()
    full = {k: v.full_tensor() if isinstance(v, DTensor) else v
            for k, v in net.state_dict().items()}
    optim = get_optimizer_state_dict(net, opt,
                                     options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        torch.save(full, f"{folder}/final.pt")
        torch.save(optim, f"{folder}/final_optim.pt")
    # Every rank's work is done once all pass this barrier. The process then leaves without
    # tearing down gloo: under load, a rank's teardown has ended in std::terminate ("terminate
    # called without an active exception") after its work was done, failing the run for a
    # reason that is not the training compared here.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main():
    if sys.argv[1] == "--rank":
        rank, folder, world, optimizer, model, dtype = sys.argv[2:8]
        run_rank(int(rank), int(world), folder, optimizer, model, dtype, sys.argv[8:11])
        return 0
    folder, world = sys.argv[1], int(sys.argv[2])
    return wait_all([subprocess.Popen([sys.executable, __file__, "--rank", str(r),
                                       *sys.argv[1:9]]) for r in range(world)])


if __name__ == "__main__":
    sys.exit(main())
