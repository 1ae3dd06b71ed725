#!/usr/bin/env python3
"""Draws one training step of a dpx timeline (Chrome trace JSON) as an SVG picture.

    tools/timeline/timeline_svg.py TRACE.json [MORE.json ...] -o step.svg [--step N]

TRACE is the merged file of `dpxrun --timeline` (or the ranks' own FILE.rank<R>.json files,
given together). The step is the N-th forward of rank 0 (default 2: the first steps include the
one-time bucket rebuild) up to its next forward. One band per rank: compute (forward, backward,
your own scopes such as optimizer.step), one lane per DDP bucket's all-reduce (launch to end),
and the wait at the end of backward. Standard library only, so it runs wherever Python 3 does.
"""
import argparse
import json
import sys
from xml.sax.saxutils import escape

COLORS = {"forward": "#4e79a7", "backward": "#59a14f", "optimizer.step": "#b07aa1",
          "allreduce": "#f28e2b", "wait for buckets": "#e15759"}
OTHER = "#9c755f"
LANE_H, LANE_GAP, BAND_GAP, LEFT, RIGHT, TOP = 18, 4, 16, 150, 20, 40


def load(paths):
    events = []
    for p in paths:
        with open(p) as f:
            events += json.load(f)["traceEvents"]
    return [e for e in events if e.get("ph") in ("X", "i") and "ts" in e]


def window(events, step):
    fwd = sorted(e["ts"] for e in events if e["pid"] == 0 and e["name"] == "forward")
    if len(fwd) < step:
        sys.exit(f"timeline_svg: rank 0 has {len(fwd)} forward events, no step {step}")
    start = fwd[step - 1]
    if step < len(fwd):
        return start, fwd[step]
    return start, max(e["ts"] + e.get("dur", 0) for e in events if e["ts"] >= start)


def lanes_of(events):
    """Per rank: the ordered lane names and each event's lane."""
    buckets = sorted({e["args"]["bucket"] for e in events if e["name"] == "allreduce"})
    lanes = ["compute"] + [f"bucket {b}" for b in buckets] + ["wait"]

    def lane(e):
        if e["name"] == "allreduce":
            return f"bucket {e['args']['bucket']}"
        if e["name"] == "wait for buckets":
            return "wait"
        return "compute"
    return lanes, lane


def draw(events, step, out):
    t0, t1 = window(events, step)
    span = max(t1 - t0, 1.0)
    inside = [e for e in events if e["ts"] < t1 and e["ts"] + e.get("dur", 0) > t0]
    ranks = sorted({e["pid"] for e in events})
    lanes, lane = lanes_of([e for e in inside if e.get("ph") == "X"])
    width = 1000
    scale = (width - LEFT - RIGHT) / span
    band_h = len(lanes) * (LANE_H + LANE_GAP)
    height = TOP + len(ranks) * (band_h + BAND_GAP) + 40
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="18" font-size="13">dpx timeline: step {step} '
           f'({span / 1000:.2f} ms), one band per rank</text>']
    for i, rank in enumerate(ranks):
        y0 = TOP + i * (band_h + BAND_GAP)
        svg.append(f'<text x="8" y="{y0 + 13}" font-weight="bold">rank {rank}</text>')
        for j, name in enumerate(lanes):
            y = y0 + j * (LANE_H + LANE_GAP)
            svg.append(f'<text x="{LEFT - 8}" y="{y + 13}" text-anchor="end" fill="#555">'
                       f'{escape(name)}</text>')
            svg.append(f'<rect x="{LEFT}" y="{y}" width="{width - LEFT - RIGHT}" '
                       f'height="{LANE_H}" fill="#f4f4f4"/>')
        for e in inside:
            if e["pid"] != rank or e.get("ph") != "X":
                continue
            a = max(e["ts"], t0)
            b = min(e["ts"] + e["dur"], t1)
            x, w = LEFT + (a - t0) * scale, max((b - a) * scale, 1.0)
            y = y0 + lanes.index(lane(e)) * (LANE_H + LANE_GAP)
            label = e["name"]
            if e["name"] == "allreduce":
                label = f"all-reduce {e['args']['bytes'] / 1024:.0f} KiB"
            tip = f"{e['name']} {e['dur'] / 1000:.3f} ms"
            if "args" in e and "params" in e["args"]:
                tip += ": " + ", ".join(e["args"]["params"])
            svg.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{LANE_H}" '
                       f'fill="{COLORS.get(e["name"], OTHER)}"><title>{escape(tip)}</title></rect>')
            if w > 7 * len(label):
                svg.append(f'<text x="{x + 3:.1f}" y="{y + 13}" fill="white">{escape(label)}</text>')
    axis_y = TOP + len(ranks) * (band_h + BAND_GAP)
    svg.append(f'<line x1="{LEFT}" y1="{axis_y}" x2="{width - RIGHT}" y2="{axis_y}" stroke="#333"/>')
    for k in range(11):
        x = LEFT + k * (width - LEFT - RIGHT) / 10
        svg.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 4}" stroke="#333"/>')
        svg.append(f'<text x="{x:.1f}" y="{axis_y + 16}" text-anchor="middle">'
                   f'{k * span / 10000:.2f}</text>')
    svg.append(f'<text x="{width - RIGHT}" y="{axis_y + 30}" text-anchor="end">ms</text>')
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(svg) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--step", type=int, default=2, help="rank 0's N-th forward (default 2)")
    args = ap.parse_args()
    draw(load(args.traces), args.step, args.output)


if __name__ == "__main__":
    main()
