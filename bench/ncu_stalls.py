#!/usr/bin/env python3
"""Where a kernel's warps stall, from Nsight Compute's per-instruction page.

On a machine with an NVIDIA GPU (and Nsight Compute):

  ncu --clock-control none --kernel-name regex:MaxSimTma --launch-count 1 \\
      --section SourceCounters --section WarpStateStats -o prof \\
      maxsim_bench --only colbert_batch64_scan_100k --runs 1
  ncu --import prof.ncu-rep --page source --csv --print-source sass \\
      | gzip > sass.csv.gz

then, anywhere: bench/ncu_stalls.py sass.csv.gz [--min-share 0.4]

Prints the stall reasons' shares of all warp samples, the opcodes' shares of
samples and of executed instructions, and the hot blocks: runs of
consecutive instructions executed equally often (a basic block, or several
in a row), with their sample share, opcode mix and top stall reasons.
Samples of reasons the page does not break out (a wgmma waiting for its
warpgroup, for one) count in a block's share but in none of its reasons.
"""
import argparse
import collections
import csv
import gzip
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source):
    words = source.split()
    if not words:
        return ""
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu --page source --csv output (.gz or not)")
    ap.add_argument("--min-share", type=float, default=0.4,
                    help="hot blocks: smallest share of samples, in percent")
    args = ap.parse_args()
    opener = gzip.open if args.csv.endswith(".gz") else open
    with opener(args.csv, "rt") as f:
        rows = list(csv.reader(f))
    # Row 0 names the kernel; row 1 holds the column names.
    names = rows[1]
    col = {n: i for i, n in enumerate(names)}
    reasons = [n for n in names
               if n.startswith("stall_") and "Not Issued" not in n]
    samples_col = col["Warp Stall Sampling (All Samples)"]
    executed_col = col["Instructions Executed"]
    insts = []
    for r in rows[2:]:
        if len(r) != len(names):
            continue
        insts.append((r[col["Source"]].strip(), number(r[samples_col]),
                      number(r[executed_col]),
                      {n: number(r[col[n]]) for n in reasons}))
    total = sum(i[1] for i in insts) or 1.0
    executed = sum(i[2] for i in insts) or 1.0
    print(f"{rows[0][1] if len(rows[0]) > 1 else ''}")
    print(f"warp samples {total:.0f}, instructions executed {executed:.0f}")

    by_reason = collections.Counter()
    for _, _, _, rs in insts:
        by_reason.update(rs)
    print("\nstall reason            share")
    for name, v in by_reason.most_common():
        if v > 0:
            print(f"{name[6:]:22s} {100 * v / total:5.1f}%")

    op_samples, op_executed = collections.Counter(), collections.Counter()
    for src, s, ex, _ in insts:
        op_samples[opcode(src)] += s
        op_executed[opcode(src)] += ex
    print("\nopcode     samples  executed")
    for op, v in op_samples.most_common(20):
        print(f"{op:10s} {100 * v / total:6.1f}%  {100 * op_executed[op] / executed:6.1f}%")

    print("\nhot blocks: first-last instruction, count, executions, share")
    blocks, cur = [], None
    for k, (src, s, ex, rs) in enumerate(insts):
        if cur is None or cur["ex"] != ex:
            cur = {"k0": k, "k1": k, "ex": ex, "s": 0.0,
                   "ops": collections.Counter(), "rs": collections.Counter()}
            blocks.append(cur)
        cur["k1"] = k
        cur["s"] += s
        cur["ops"][opcode(src)] += 1
        cur["rs"].update(rs)
    for b in blocks:
        share = 100 * b["s"] / total
        if share < args.min_share:
            continue
        ops = " ".join(f"{o}:{c}" for o, c in b["ops"].most_common(4))
        top = " ".join(f"{n[6:]}:{100 * v / total:.1f}"
                       for n, v in b["rs"].most_common(3) if v > 0)
        print(f"{b['k0']:5d}-{b['k1']:5d} n={b['k1'] - b['k0'] + 1:4d} "
              f"x{b['ex']:.3g} {share:5.2f}%  {ops} | {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
