#!/usr/bin/env python3
"""The PLAID scan's hot loop in SASS, counted by opcode, with no GPU.

Compiles kernels/plaid_scan.cu for sm_90a as the build does, disassembles
the cubin and, for each PlaidScanKernel<nbits>, prints the registers and
spills and the instructions of the warp's tile loop (the smallest loop
holding every MMA; 16 MMAs a tile) on its common path: the blocks with
code of the document-end functions (WarpScan's FoldEnds, Finish,
NextDoc, found by their source lines) are left out. A static count: the
profile's executed instructions (bench/ncu_stalls.py) are the measure.

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


def cold_lines(source):
    """Source lines of the document-end member functions: from the line
    that declares each to its closing brace at the members' indent."""
    text = open(source).read().splitlines()
    cold = set()
    for name in ("FoldEnds(", "Finish(", "NextDoc("):
        for i, line in enumerate(text):
            if re.match(r"\s+__device__.*\b" + re.escape(name), line):
                j = i
                while j < len(text) and text[j] != "  }":
                    j += 1
                cold.update(range(i + 1, j + 2))
                break
    return cold


def parse(sass, kernel):
    """(address, instruction, source line) triples and label positions of
    one function."""
    lines, labels, inside, src = [], {}, False, 0
    for line in sass.splitlines():
        if line.startswith(".text."):
            if inside:
                break
            inside = kernel in line
            continue
        if not inside:
            continue
        m = re.match(r'\s*//## File ".*", line (\d+)', line)
        if m:
            src = int(m.group(1))
            continue
        m = re.match(r"^\s*(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(lines)
            continue
        m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;", line)
        if m:
            lines.append((int(m.group(1), 16), m.group(2), src))
    return lines, labels


def opcode(ins):
    words = ins.split()
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def hot_loop(lines, labels, cold):
    """The smallest loop holding every IMMA, split into its blocks, less
    those with code of the source lines `cold`."""
    at = {k: lines[v][0] for k, v in labels.items() if v < len(lines)}
    imma = [a for a, ins, _ in lines if ins.startswith("IMMA")]
    loops = []
    for a, ins, _ in lines:
        m = re.search(r"BRA.*`\((\.L_x_\d+)\)", ins)
        if m and "BRA.DIV" not in ins and at.get(m.group(1), a) < a:
            loops.append((at[m.group(1)], a))
    loops = [l for l in loops if l[0] <= min(imma) and l[1] >= max(imma)]
    lo, hi = min(loops, key=lambda l: l[1] - l[0])
    starts = set(labels.values())
    blocks, cur = [], []
    for i, (a, ins, src) in enumerate(lines):
        if not lo <= a <= hi:
            continue
        if i in starts and cur:
            blocks.append(cur)
            cur = []
        cur.append((ins, src))
        if "BRA" in ins or "EXIT" in ins:
            blocks.append(cur)
            cur = []
    if cur:
        blocks.append(cur)
    return [[ins for ins, _ in b] for b in blocks
            if not any(src in cold for _, src in b)]


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
        sass = subprocess.run([args.nvdisasm, "-c", "-g", old],
                              capture_output=True, text=True,
                              check=True).stdout
        if args.keep:
            open(os.path.join(work, "plaid_scan.sass"), "w").write(sass)
    cold = cold_lines(args.source)
    for nbits in (2, 4):
        lines, labels = parse(sass, f"PlaidScanKernelILi{nbits}EE")
        blocks = hot_loop(lines, labels, cold)
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
