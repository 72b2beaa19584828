#!/usr/bin/env python3
"""Prints README.md's "Sizing a GPU" tables: bytes a resident document
costs per layout, embedding width and token pooling factor.

Per token (index/FORMAT.md): dense fp16/bf16 2 d bytes; int8 d codes and
an fp32 scale; PLAID d * nbits / 8 residual bytes, an int32 centroid id
and an fp32 scale. Per document, 8 bytes of offsets. Pooling keeps
ceil(n / pool_factor) of a document's n tokens.

    python3 bench/sizing_table.py [--tokens 300] [--gib 100]
"""
import argparse
import math

LAYOUTS = [
    ("dense fp16 / bf16", lambda d: 2 * d),
    ("int8", lambda d: d + 4),
    ("PLAID 4-bit", lambda d: d * 4 // 8 + 8),
    ("PLAID 2-bit", lambda d: d * 2 // 8 + 8),
    ("PLAID 1-bit", lambda d: d // 8 + 8),
]


def millions(gib, doc_bytes):
    return gib * 2**30 / doc_bytes / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--gib", type=float, default=100)
    args = ap.parse_args()
    n = args.tokens
    print(f"Documents of {n} tokens in {args.gib:g} GiB, millions "
          "(pool factor 1 / 2 / 3):\n")
    widths = [64, 96, 128, 320, 1024]
    print("| layout | " + " | ".join(f"d = {d}" for d in widths) + " |")
    print("|---|" + "---:|" * len(widths))
    for name, per_token in LAYOUTS:
        cells = []
        for d in widths:
            if name.startswith("PLAID") and d * int(name[6]) % 8:
                cells.append("-")
                continue
            docs = [millions(args.gib,
                             math.ceil(n / pf) * per_token(d) + 8)
                    for pf in (1, 2, 3)]
            cells.append(" / ".join(f"{x:.3g}" for x in docs))
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
