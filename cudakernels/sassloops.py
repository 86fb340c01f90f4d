#!/usr/bin/env python3
"""Tile-loop instruction counts of the committed kernels, before a device call.

usage: python3 cudakernels/sassloops.py [--base REV] [--module M] [--arch A] REGEX...

Assembles cudakernels/ptx/M.ptx (default flash_sm90a, for sm_90a) with
ptxas -O3, as the driver or devpack.sh's CUBIN=1 would, and prints for
each kernel whose name matches a REGEX (Python re.search): its registers
and local-memory bytes (spills), its instruction count, and its innermost
tensor-core loop (the shortest backward branch whose body holds an HGMMA
or HMMA): the loop's instructions, tensor-core instructions, MUFU (the
exponentials), and R2UR (moves into uniform registers; one before every
wgmma means a descriptor the compiler could not keep uniform). With
--base, the same for the PTX of git revision REV beside it.

Why: the loop's instruction count moved with the kernels' speed on the
H100 (2026-12-05: a warp-specialized forward 964 → 887 instructions a
tile, −2 to −12 % time), and it costs a minute here instead of device
time. It is not a timing: fewer instructions were also seen slower
(cudakernels/NOTES.md, "Twenty-first session").

ptxas and cuobjdump come from PATH, else /opt/cuda-12.4/usr/bin
(nvcc-debian.sh installs them there).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s*(.*?);")
BRANCH = re.compile(r"\bBRA\b[^;]*?(0x[0-9a-f]+)")
RESOURCES = re.compile(r"Function (\S+):\s*\n\s*REG:(\d+).*?LOCAL:(\d+)", re.S)


def tool(name):
    found = shutil.which(name) or os.path.join("/opt/cuda-12.4/usr/bin", name)
    if not os.path.exists(found):
        sys.exit(f"sassloops: {name} not found (bash cudakernels/nvcc-debian.sh installs it)")
    return found


def cubin(ptx_text, arch, tmp, tag):
    ptx, out = os.path.join(tmp, tag + ".ptx"), os.path.join(tmp, tag + ".cubin")
    with open(ptx, "w") as f:
        f.write(ptx_text)
    subprocess.run([tool("ptxas"), "-O3", f"-arch={arch}", ptx, "-o", out], check=True)
    return out


def kernels(path, patterns):
    """{name: (registers, local bytes, [(address, instruction)])} for the matching kernels."""
    dump = subprocess.run([tool("cuobjdump"), "-sass", path], check=True, capture_output=True, text=True).stdout
    usage = subprocess.run([tool("cuobjdump"), "-res-usage", path], check=True, capture_output=True, text=True).stdout
    res = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in RESOURCES.finditer(usage)}
    got, name = {}, None
    for line in dump.splitlines():
        if "Function : " in line:
            name = line.split("Function : ")[1].strip()
            name = name if any(re.search(p, name) for p in patterns) else None
            if name:
                got[name] = (*res.get(name, (0, 0)), [])
        elif name:
            m = INSTR.match(line)
            if m:
                got[name][2].append((int(m.group(1), 16), m.group(2)))
    return got


def inner_loop_span(ins):
    """(first, last) indices into ins [(address, instruction)] of the
    shortest backward-branch body holding a tensor-core instruction, or
    None. pcsample.py finds the loop of its profiles with it too."""
    at = {a: i for i, (a, _) in enumerate(ins)}
    best = None
    for i, (a, text) in enumerate(ins):
        m = BRANCH.search(text)
        if not m or int(m.group(1), 16) >= a or int(m.group(1), 16) not in at:
            continue
        first = at[int(m.group(1), 16)]
        if any("HGMMA" in t or "HMMA" in t for _, t in ins[first : i + 1]) and (best is None or i - first < best[1] - best[0]):
            best = (first, i)
    return best


def summary(entry):
    regs, local, ins = entry
    span = inner_loop_span(ins)
    loop = [t for _, t in ins[span[0] : span[1] + 1]] if span else []
    count = lambda op: sum(op in t for t in loop)
    # The loop's first address, to tell a build whose loop moved from one
    # whose loop changed (2026-12-06: two builds with nearly the same loop
    # timed differently; whether the loop's place was the cause is not
    # known).
    at = f"@{ins[span[0]][0]:#07x}" if span else "@-"
    return (f"{regs:3d} reg {local:4d} B local {len(ins):5d} instr | loop {len(loop):5d} {at} "
            f"tc {count('MMA'):3d} MUFU {count('MUFU'):3d} R2UR {count('R2UR'):3d}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("patterns", nargs="+", metavar="REGEX", help="kernel names to report (re.search)")
    ap.add_argument("--base", help="git revision whose PTX to show beside the working tree's")
    ap.add_argument("--module", default="flash_sm90a", help="PTX module under cudakernels/ptx (default flash_sm90a)")
    ap.add_argument("--arch", default="sm_90a", help="ptxas -arch (default sm_90a)")
    args = ap.parse_args()

    rel = f"cudakernels/ptx/{args.module}.ptx"
    with open(os.path.join(ROOT, rel)) as f:
        sides = [("tree", f.read())]
    if args.base:
        base = subprocess.run(["git", "-C", ROOT, "show", f"{args.base}:{rel}"], check=True, capture_output=True,
                              text=True).stdout
        sides.insert(0, (args.base, base))
    with tempfile.TemporaryDirectory() as tmp:
        found = [(tag, kernels(cubin(text, args.arch, tmp, f"side{i}"), args.patterns))
                 for i, (tag, text) in enumerate(sides)]
    names = sorted(set().union(*(k for _, k in found)))
    if not names:
        sys.exit(f"sassloops: no kernel of {rel} matches {args.patterns}")
    width = max(len(n) for n in names)
    for name in names:
        for tag, got in found:
            line = summary(got[name]) if name in got else "absent"
            print(f"{name:{width}}  {tag:>10}  {line}")


if __name__ == "__main__":
    main()
