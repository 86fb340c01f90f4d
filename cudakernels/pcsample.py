#!/usr/bin/env python3
"""Where a kernel's warps spend their time, from ncu's PC sampling.

usage: python3 cudakernels/pcsample.py [--top N] SOURCE.csv

SOURCE.csv is ncu's source page of one profiled launch, exported as
`ncu --import REPORT --page source --csv --print-source sass` from a
report taken with `--section SourceCounters` (devncu.sh does both when
SAMPLE names a kernel). Prints:
  - the share of all warp samples inside the innermost tensor-core loop
    (the shortest backward branch whose body holds an HGMMA or HMMA, as
    sassloops.py finds it) and outside it;
  - the samples outside that loop by runs of code between two changes of
    execution count (one run is, say, an item's epilogue, executed once
    per warp and item), with each run's commonest instructions;
  - the N instructions outside the loop with the most samples, and their
    two main stall reasons.

Why: ncu's summary sections give a kernel's stalls as a whole. A kernel
that loops over items (the persistent forward) or blocks loses its time
between tile loops, where the tensor cores wait for every warp. The
BF16 D128 forward at N = 2k spent 22 % of its consumer samples there
(cudakernels/NOTES.md, twenty-ninth session). Offsets are relative to
the kernel's first instruction, as cuobjdump prints them.
"""
import argparse
import collections
import csv
import sys

from sassloops import inner_loop_span


def load(path):
    """The kernel's first address and [(offset, instruction, samples,
    executions, {stall: samples})] of the CSV."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    head = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if head is None:
        sys.exit(f"pcsample: {path} has no 'Address' header row (not a --page source CSV?)")
    hdr = rows[head]
    col = {name: hdr.index(name) for name in ("Address", "Source", "Warp Stall Sampling (All Samples)",
                                               "Instructions Executed") if name in hdr}
    if len(col) < 4:
        sys.exit(f"pcsample: {path} lacks the sampling columns (profile with --section SourceCounters)")
    stalls = [(i, h) for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    num = lambda r, i: float(r[i]) if i < len(r) and r[i] else 0.0
    out = []
    for r in rows[head + 1:]:
        try:
            addr = int(r[col["Address"]], 16)
        except (ValueError, IndexError):
            continue
        out.append((addr, r[col["Source"]].strip(), int(num(r, col["Warp Stall Sampling (All Samples)"])),
                    int(num(r, col["Instructions Executed"])), {h: num(r, i) for i, h in stalls}))
    if not out:
        sys.exit(f"pcsample: no instructions in {path}")
    base = out[0][0]
    return base, [(a - base, *rest) for a, *rest in out]


def opcode(text):
    words = [w for w in text.split() if not w.startswith("@")]
    return words[0].split(".")[0] if words else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", metavar="SOURCE.csv")
    ap.add_argument("--top", type=int, default=15, help="instructions to list outside the loop (default 15)")
    args = ap.parse_args()
    base, ins = load(args.csv)
    total = sum(s for _, _, s, _, _ in ins)
    if total == 0:
        sys.exit("pcsample: no samples (was SourceCounters collected?)")
    # ncu prints branch targets as absolute addresses: the loop is found on
    # those, then its bounds taken as offsets.
    span = inner_loop_span([(base + a, text) for a, text, *_ in ins])
    loop = (ins[span[0]][0], ins[span[1]][0]) if span else None
    inside = (lambda a: loop[0] <= a <= loop[1]) if loop else (lambda a: False)
    in_loop = sum(s for a, _, s, _, _ in ins if inside(a))
    print(f"samples {total}, instructions {len(ins)}")
    if loop:
        n = sum(1 for a, *_ in ins if inside(a))
        print(f"tile loop {loop[0]:#x}-{loop[1]:#x} ({n} instructions): {in_loop} samples, {100 * in_loop / total:.1f} %")
    else:
        print("no loop around a tensor-core instruction")
    print(f"outside it: {total - in_loop} samples, {100 * (total - in_loop) / total:.1f} %")

    print("\nruns outside the loop (same execution count), ≥ 0.5 % of samples:")
    runs, cur = [], None
    for a, text, s, ex, _ in ins:
        key = ("loop", 0) if inside(a) else ("code", ex)
        if cur is None or cur["key"] != key:
            cur = {"key": key, "start": a, "end": a, "samples": 0, "ops": collections.Counter()}
            runs.append(cur)
        cur["end"] = a
        cur["samples"] += s
        cur["ops"][opcode(text)] += 1
    for r in runs:
        if r["key"][0] == "code" and r["samples"] >= 0.005 * total:
            ops = ", ".join(f"{op} {k}" for op, k in r["ops"].most_common(5))
            print(f"  {r['start']:#7x}-{r['end']:#7x} executed {r['key'][1]:>9d}: {r['samples']:6d} "
                  f"({100 * r['samples'] / total:4.1f} %)  {ops}")

    print(f"\nthe {args.top} instructions with the most samples outside the loop:")
    outside = sorted((x for x in ins if not inside(x[0])), key=lambda x: -x[2])[: args.top]
    for a, text, s, ex, st in outside:
        why = ", ".join(f"{k[len('stall_'):]} {int(v)}" for k, v in sorted(st.items(), key=lambda kv: -kv[1])[:2] if v)
        print(f"  {a:#7x} {s:6d} ({100 * s / total:4.1f} %) x{ex:<8d} {text[:56]:56s} {why}")


if __name__ == "__main__":
    main()
