#!/usr/bin/env python3
"""Summarise an nsys cuda_gpu_trace CSV (nsys stats --report cuda_gpu_trace
--format csv): per GPU operation name, how many, the median duration, and
the median time from the start of one operation of the stream to the
start of the next and from the end of one to the start of the next (the
GPU idle between them). Used by scripts/gpu-twogpu.sh PARTS=nsys.

    python3 scripts/nsys_gaps.py TRACE.csv [SKIP]

SKIP (default 100) leaves out the first operations (warm-up)."""
import csv
import statistics
import sys


def col(header, *names):
    for n in names:
        for i, h in enumerate(header):
            if h.strip().lower().startswith(n.lower()):
                return i
    raise SystemExit(f"no column {names} in {header}")


def main():
    path, skip = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    hi = next(i for i, r in enumerate(rows) if any(c.strip().lower().startswith("start") for c in r))
    header, rows = rows[hi], rows[hi + 1:]
    cs, cd, cn = col(header, "Start"), col(header, "Duration"), col(header, "Name")
    try:
        cst = col(header, "Strm")
    except SystemExit:
        cst = None
    ops = sorted((int(float(r[cs])), int(float(r[cd])), r[cn], r[cst] if cst is not None else "") for r in rows)
    ops = ops[skip:]
    by = {}
    prev = {}
    for start, dur, name, strm in ops:
        short = name.split("(")[0][:60]
        d = by.setdefault(short, {"dur": [], "s2s": [], "idle": []})
        d["dur"].append(dur)
        p = prev.get(strm)
        if p is not None:
            d["s2s"].append(start - p[0])
            d["idle"].append(start - p[0] - p[1])
        prev[strm] = (start, dur)
    print(f"{'operation':60s} {'n':>6s} {'dur_us':>8s} {'from_prev_start_us':>18s} {'idle_before_us':>14s}")
    for name, d in sorted(by.items(), key=lambda kv: -len(kv[1]["dur"])):
        med = lambda v: statistics.median(v) / 1e3 if v else float("nan")
        print(f"{name:60s} {len(d['dur']):6d} {med(d['dur']):8.2f} {med(d['s2s']):18.2f} {med(d['idle']):14.2f}")


if __name__ == "__main__":
    main()
