#!/usr/bin/env python3
"""The PLAID scan's hot loop in SASS, counted by opcode, with no GPU.

Compiles kernels/plaid_scan.cu for sm_90a as the build does, disassembles
the cubin and, for each PlaidScanKernel<nbits>, prints the registers and
spills and the instructions of the warp's tile loop (the smallest loop
holding every MMA; 16 MMAs a tile) on its common path: the blocks that
end or start a document (shuffles, stores, the partial-tile fold) are left
out.

    bench/plaid_scan_sass.py [--nvdisasm PATH] [--source FILE] [--keep DIR]

nvdisasm is not in the CUDA toolkit this project builds with here. Debian's
nvidia-cuda-toolkit package (non-free, 11.8) carries one, which reads an
sm_90 cubin once the ELF header says the ABI it knows (this script writes
that header on a copy). To get it without installing the package:

    apt-get download nvidia-cuda-toolkit     # with non-free in the sources
    dpkg -x nvidia-cuda-toolkit_*.deb /opt/cuda118
    bench/plaid_scan_sass.py --nvdisasm /opt/cuda118/usr/bin/nvdisasm

bench/NOTES.md s13 quotes its counts.
"""
import argparse
import collections
import os
import re
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NVCC = os.environ.get("CUDACXX", "/usr/local/cuda/bin/nvcc")


def compile_cubin(source, out):
    cmd = [NVCC, "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-lineinfo",
           "--expt-relaxed-constexpr", "-std=c++17", "-I" + ROOT, "-cubin",
           "-o", out, source, "-Xptxas", "-v"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(done.stderr)
    return [l.strip() for l in done.stderr.splitlines()
            if "registers" in l or "spill" in l or "entry function" in l]


def with_old_abi_header(cubin, out):
    """A copy whose ELF header an nvdisasm of CUDA 11.8 reads: OS/ABI 0x33,
    ABI version 7, the sm_90 flags of that version."""
    data = bytearray(open(cubin, "rb").read())
    data[7], data[8] = 0x33, 7
    struct.pack_into("<I", data, 0x30, 0x5A055A)
    open(out, "wb").write(data)


def parse(sass, kernel):
    """(address, instruction) pairs and label positions of one function."""
    lines, labels, inside = [], {}, False
    for line in sass.splitlines():
        if line.startswith(".text."):
            if inside:
                break
            inside = kernel in line
            continue
        if not inside:
            continue
        m = re.match(r"^\s*(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(lines)
            continue
        m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;", line)
        if m:
            lines.append((int(m.group(1), 16), m.group(2)))
    return lines, labels


def opcode(ins):
    words = ins.split()
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def hot_loop(lines, labels):
    """The smallest loop holding every IMMA, split into its common-path
    blocks."""
    at = {k: lines[v][0] for k, v in labels.items() if v < len(lines)}
    imma = [a for a, ins in lines if ins.startswith("IMMA")]
    loops = []
    for a, ins in lines:
        m = re.search(r"BRA.*`\((\.L_x_\d+)\)", ins)
        if m and "BRA.DIV" not in ins and at.get(m.group(1), a) < a:
            loops.append((at[m.group(1)], a))
    loops = [l for l in loops if l[0] <= min(imma) and l[1] >= max(imma)]
    lo, hi = min(loops, key=lambda l: l[1] - l[0])
    starts = set(labels.values())
    blocks, cur = [], []
    for i, (a, ins) in enumerate(lines):
        if not lo <= a <= hi:
            continue
        if i in starts and cur:
            blocks.append(cur)
            cur = []
        cur.append(ins)
        if "BRA" in ins or "EXIT" in ins:
            blocks.append(cur)
            cur = []
    if cur:
        blocks.append(cur)
    # A document's end: shuffles, score stores, the tombstone and scores
    # parameters, the maxima's reset, the partial-tile fold; and the shared
    # window's base (S2UR) read for the block's queries, but not for the
    # ring of a chunk's copy (LDGSTS).
    cold = re.compile(r"SHFL|STG|FADD|-0x800000|LDS\.U8|LDG\.E R|"
                      r"LDG\.E\.64 |c\[0x0\]\[0x2b[08]\]|@!?P\d FMNMX")
    return [b for b in blocks
            if not cold.search(" ".join(b)) and
            not ("S2UR" in " ".join(b) and "LDGSTS" not in " ".join(b))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nvdisasm", default=os.environ.get("NVDISASM",
                                                         "nvdisasm"))
    ap.add_argument("--source", default=os.path.join(ROOT,
                                                     "kernels/plaid_scan.cu"))
    ap.add_argument("--keep", help="write the cubin and SASS here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        cubin = os.path.join(work, "plaid_scan.cubin")
        for line in compile_cubin(args.source, cubin):
            print(line)
        old = os.path.join(work, "plaid_scan.sm90.cubin")
        with_old_abi_header(cubin, old)
        sass = subprocess.run([args.nvdisasm, "-c", old], capture_output=True,
                              text=True, check=True).stdout
        if args.keep:
            open(os.path.join(work, "plaid_scan.sass"), "w").write(sass)
    for nbits in (2, 4):
        lines, labels = parse(sass, f"PlaidScanKernelILi{nbits}EE")
        blocks = hot_loop(lines, labels)
        ops = collections.Counter(opcode(i) for b in blocks for i in b)
        total = sum(ops.values())
        tiles = ops["IMMA"] / 16  # 16 MMAs a tile
        print(f"\nPlaidScanKernel<{nbits}>: {total} instructions for "
              f"{tiles:.0f} tiles on the common path "
              f"({total / tiles:.0f} a tile)")
        print("  " + " ".join(f"{k}:{v}" for k, v in ops.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
