#!/usr/bin/env python3
"""The ring model checked out of sample (bench/cluster_model.sh writes the sweeps it reads).

    tools/scaling/check_model.py OUT [--cores C]

Fits on gloo with one rank on each of 2, 4 and 8 hosts, predicts 16, 32 and 64 ranks (8 hosts x
2, 4, 8), flat gloo and hierarchical, and prints prediction against measurement (docs/scaling.md):
- ring:       t(p, S) = 2(p-1) alpha + 2(p-1)/p S / beta                    (alpha, beta fitted)
- ring + CPU: t(p, S) = 2(p-1) (alpha + tau max(0, 1 - C/p)) + 2(p-1)/p S / beta: with p
  processes on C cores, the rank a ring step hands to is off a core with probability 1 - C/p,
  and the step then waits about one scheduler slice, tau (fitted too).
- hierarchical, 8 hosts x n: the shm all-reduce of n ranks (measured on one host, n <= 8: in
  the fit's range), the ring over the 8 leaders, and the shm broadcast, taken as half the shm
  all-reduce (a broadcast moves each byte once, an all-reduce twice).
The fits minimise relative error (each size counts alike), over every size in the sweeps.
With --steps SCALING_OUT (bench/cluster_scaling.sh's folder, run at the same global batch for
every world size), the example's step time as well: step(p) = A + the all-reduce of its two
buckets as predicted above (no overlap counted), A fitted on the 8-rank run (8 hosts x 1), and
the 16-64 rank runs predicted; measured step = global batch / samples per second.
"""
import argparse
import json
import math
import os


def load(out, name):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    return {r["bytes"]: r["time_us"] for r in json.load(open(path))["results"]}


def solve(rows, ts):
    """Least squares of sum((row . x) / t - 1)^2 by the normal equations (3 unknowns at most)."""
    k = len(rows[0])
    a = [[0.0] * k for _ in range(k)]
    b = [0.0] * k
    for row, t in zip(rows, ts):
        r = [v / t for v in row]
        for i in range(k):
            b[i] += r[i]
            for j in range(k):
                a[i][j] += r[i] * r[j]
    for i in range(k):  # Gauss-Jordan
        p = max(range(i, k), key=lambda q: abs(a[q][i]))
        a[i], a[p], b[i], b[p] = a[p], a[i], b[p], b[i]
        for q in range(k):
            if q != i and a[i][i] != 0:
                f = a[q][i] / a[i][i]
                a[q] = [x - f * y for x, y in zip(a[q], a[i])]
                b[q] -= f * b[i]
    return [b[i] / a[i][i] for i in range(k)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--steps", help="bench/cluster_scaling.sh's output folder")
    ap.add_argument("--buckets", default="1610792,75776", help="the model's bucket bytes")
    ap.add_argument("--global-batch", type=int, default=128)
    a = ap.parse_args()
    fit_runs = {p: load(a.out, f"gloo-{p}x1") for p in (2, 4, 8)}
    rows, rows_cpu, ts = [], [], []
    for p, res in fit_runs.items():
        for s, t in (res or {}).items():
            rows.append([2 * (p - 1), 2 * (p - 1) / p * s])
            rows_cpu.append([2 * (p - 1), 2 * (p - 1) * max(0.0, 1 - a.cores / p), 2 * (p - 1) / p * s])
            ts.append(t)
    alpha, inv_beta = solve(rows, ts)
    alpha_c, tau, inv_beta_c = solve(rows_cpu, ts)
    print(f"fit on gloo, 2/4/8 hosts x 1 rank, {len(ts)} points, {a.cores} cores:")
    print(f"  ring:       alpha {alpha:.1f} us, beta {1e-3 / inv_beta:.3f} GB/s")
    print(f"  ring + CPU: alpha {alpha_c:.1f} us, tau {tau:.1f} us, beta {1e-3 / inv_beta_c:.3f} GB/s")

    def ring(p, s):
        return 2 * (p - 1) * alpha + 2 * (p - 1) / p * s * inv_beta

    def ring_cpu(p, s):
        return 2 * (p - 1) * (alpha_c + tau * max(0.0, 1 - a.cores / p)) + 2 * (p - 1) / p * s * inv_beta_c

    print("\n| backend | ranks | bytes | measured us | ring us | measured / ring | ring+CPU us | measured / ring+CPU |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for p in (2, 4, 8):  # in sample
        for s, t in sorted((fit_runs[p] or {}).items()):
            if s in (4096, 65536, 1048576, 4194304):
                print(f"| gloo (fit) | {p} | {s} | {t:.0f} | {ring(p, s):.0f} | {t / ring(p, s):.2f} | "
                      f"{ring_cpu(p, s):.0f} | {t / ring_cpu(p, s):.2f} |")
    for n in (2, 4, 8):
        p = 8 * n
        flat, hier, shm = load(a.out, f"gloo-8x{n}"), load(a.out, f"hierarchical-8x{n}"), load(a.out, f"shm-1x{n}")
        for s in (4096, 65536, 1048576, 4194304):
            if flat and s in flat:
                t = flat[s]
                print(f"| gloo | {p} | {s} | {t:.0f} | {ring(p, s):.0f} | {t / ring(p, s):.2f} | "
                      f"{ring_cpu(p, s):.0f} | {t / ring_cpu(p, s):.2f} |")
            if hier and shm and s in hier and s in shm:
                t = hier[s]
                pred = 1.5 * shm[s] + ring(8, s)
                pred_c = 1.5 * shm[s] + ring_cpu(8, s)
                print(f"| hierarchical | {p} | {s} | {t:.0f} | {pred:.0f} | {t / pred:.2f} | "
                      f"{pred_c:.0f} | {t / pred_c:.2f} |")
    if a.steps:
        step_times(a, ring, ring_cpu)


def interpolate(times, s):
    """A sweep's time at `s` bytes, log-linear between its sizes."""
    sizes = sorted(times)
    lo = max([x for x in sizes if x <= s] or [sizes[0]])
    hi = min([x for x in sizes if x >= s] or [sizes[-1]])
    if lo == hi:
        return times[lo]
    f = math.log(s / lo) / math.log(hi / lo)
    return times[lo] ** (1 - f) * times[hi] ** f


def step_times(a, ring, ring_cpu):
    import glob
    measured = {}
    for d in glob.glob(os.path.join(a.steps, "r*-dpxrun-*")):
        ranks = int(d.rsplit("-", 1)[1])
        trains = [json.loads(l) for l in open(os.path.join(d, "fashion_mnist_metrics.jsonl"))
                  if '"type":"train"' in l]
        if trains:
            measured.setdefault(ranks, []).append(a.global_batch / trains[-1]["samples_per_s"] * 1e3)
    buckets = [int(x) for x in a.buckets.split(",")]

    def comm_ms(p, model):
        n = p // 8
        shm = load(a.out, f"shm-1x{n}") if n > 1 else None
        return sum((1.5 * interpolate(shm, b) if shm else 0.0) + model(8, b) for b in buckets) / 1e3

    if 8 not in measured:
        return
    print(f"\nstep time of the example, global batch {a.global_batch}, buckets {a.buckets} bytes:")
    print("| ranks | measured ms | ring ms | measured / ring | ring+CPU ms | measured / ring+CPU |")
    print("|---:|---:|---:|---:|---:|---:|")
    base = sorted(measured[8])[len(measured[8]) // 2]
    fits = {m: base - comm_ms(8, m) for m in (ring, ring_cpu)}
    for p in sorted(measured):
        t = sorted(measured[p])[len(measured[p]) // 2]
        pr, pc = fits[ring] + comm_ms(p, ring), fits[ring_cpu] + comm_ms(p, ring_cpu)
        tag = " (fit)" if p == 8 else ""
        print(f"| {p}{tag} | {t:.1f} | {pr:.1f} | {t / pr:.2f} | {pc:.1f} | {t / pc:.2f} |")


if __name__ == "__main__":
    main()
