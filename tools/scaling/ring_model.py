#!/usr/bin/env python3
"""Predicts DDP step time and scaling efficiency with the ring all-reduce cost model.

    tools/scaling/ring_model.py --alpha-us A --beta-gbps B --grad-bytes S \\
        --compute-ms T [--backward-share 0.6] [--buckets N] [--ranks 2,4,8,...]

alpha and beta come from `dpx-bench allreduce` (its "ring fit" line, Note [Ring fit]); T is the
model's compute time per step on one rank (forward + backward + optimizer), S its gradient bytes.
Communication of one step: N buckets of S/N bytes, each 2(p-1) alpha + 2(p-1)/p (S/N)/beta.
- without overlap: step = T + comm
- with overlap: the buckets but the last run during backward (backward-share x T); what does
  not fit there, plus the last bucket, is exposed: step = T + max(0, comm - last - bwd) + last
Efficiency = T / step (1.0: perfect scaling of throughput per rank). docs/scaling.md.
"""
import argparse


def ring_us(p, nbytes, alpha_us, beta_gbps):
    if p < 2:
        return 0.0
    return 2 * (p - 1) * alpha_us + 2 * (p - 1) / p * nbytes / (beta_gbps * 1e3)


def predict(p, a):
    per_bucket = ring_us(p, a.grad_bytes / a.buckets, a.alpha_us, a.beta_gbps) / 1e3
    comm = a.buckets * per_bucket
    bwd = a.backward_share * a.compute_ms
    no_overlap = a.compute_ms + comm
    overlap = a.compute_ms + max(0.0, comm - per_bucket - bwd) + per_bucket
    return comm, no_overlap, overlap


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alpha-us", type=float, required=True)
    ap.add_argument("--beta-gbps", type=float, required=True)
    ap.add_argument("--grad-bytes", type=float, required=True)
    ap.add_argument("--compute-ms", type=float, required=True)
    ap.add_argument("--backward-share", type=float, default=0.6)
    ap.add_argument("--buckets", type=int, default=1)
    ap.add_argument("--ranks", default="2,3,4,8,16,32,64,128,256,512,1024")
    a = ap.parse_args()
    print(f"alpha {a.alpha_us} us, beta {a.beta_gbps} GB/s, S {a.grad_bytes:.0f} B in "
          f"{a.buckets} bucket(s), compute {a.compute_ms} ms/step "
          f"(backward {a.backward_share:.0%})\n")
    print("| ranks | comm ms | step ms, no overlap | efficiency | step ms, overlap | efficiency |")
    print("|---:|---:|---:|---:|---:|---:|")
    for p in (int(x) for x in a.ranks.split(",")):
        comm, no, ov = predict(p, a)
        print(f"| {p} | {comm:.2f} | {no:.2f} | {a.compute_ms / no:.2f} | {ov:.2f} | "
              f"{a.compute_ms / ov:.2f} |")


if __name__ == "__main__":
    main()
