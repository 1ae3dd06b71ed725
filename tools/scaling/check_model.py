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
"""
import argparse
import json
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


if __name__ == "__main__":
    main()
