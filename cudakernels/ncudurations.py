#!/usr/bin/env python3
"""Each kernel's duration in two builds, from ncu's CSV of gpu__time_duration.

usage: python3 cudakernels/ncudurations.py OLD.csv NEW.csv

devncu.sh's DURATIONS mode writes the two files (ncu --csv --print-units
base --metrics gpu__time_duration.sum, one row per profiled launch, over
bench-old.test and bench.test) and prints this summary: per kernel name,
in the order of first launch, the launches seen in each build, the median
duration of each in µs over the launches after the first (the first may
pay the module's load; all of them where there are two or fewer), and
new ÷ old. An A/B by devab.sh times whole calls; this says which kernel
moved (2026-12-06: the backward's dQ kernel +8 % at N = 16k under a
change that made the dK/dV kernel 13 % faster at N = 2k).
"""
import csv
import statistics
import sys


def durations(path):
    """{kernel name: [µs per launch]}, in the order of first launch."""
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(line for line in f if line.startswith('"'))]
    if not rows:
        sys.exit(f"ncudurations: no CSV rows in {path}")
    head = rows[0]
    name, metric, value = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
    got = {}
    for r in rows[1:]:
        if r[metric] == "gpu__time_duration.sum":
            got.setdefault(r[name], []).append(float(r[value].replace(",", "")) / 1000)
    return got


def median_after_first(xs):
    return statistics.median(xs[1:] if len(xs) > 2 else xs)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    old, new = durations(sys.argv[1]), durations(sys.argv[2])
    names = list(old) + [n for n in new if n not in old]
    width = max(len(n) for n in names)
    fmt = lambda x: f"{x:9.1f}" if x is not None else "        -"
    print(f"{'kernel':{width}}  launches old/new  old µs    new µs    new/old")
    for n in names:
        o = median_after_first(old[n]) if n in old else None
        w = median_after_first(new[n]) if n in new else None
        ratio = f"{w / o:7.3f}" if o and w else "      -"
        print(f"{n:{width}}  {len(old.get(n, [])):8d}/{len(new.get(n, [])):<8d} {fmt(o)} {fmt(w)}  {ratio}")


if __name__ == "__main__":
    main()
