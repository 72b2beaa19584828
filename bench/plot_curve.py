#!/usr/bin/env python3
"""Latency/throughput curve from loadgen sweep reports.

Reads one or more JSON reports written by `loadgen --json=PATH` (usually with
`--sweep=r1,r2,...`), prints a Markdown table per report and plots achieved
QPS (x) against p50 and p99 latency (y, log scale), one pair of lines per
report.

Usage:
  bench/plot_curve.py sweep.json [more.json ...] [--out curve.png]
                      [--title TEXT]

Without --out it prints the tables only (no matplotlib needed); with it,
the PNG needs Debian's python3-matplotlib.

The error column counts failed responses and arrivals that were not sent
(at --max_outstanding) as a share of all measured arrivals.
"""

import argparse
import json
import os
import sys


def error_percent(point):
    arrivals = point["sent"] + point["not_sent"]
    if arrivals == 0:
        return 0.0
    return 100.0 * (point["errors"] + point["not_sent"]) / arrivals


def markdown_table(report):
    lines = [
        "| offered rps | achieved rps | p50 ms | p99 ms | p99.9 ms | error % "
        "| server queue ms | server compute ms | server kernel ms "
        "| batch queries |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in report["points"]:
        lat = p["latency_ms"]
        t = p.get("server_timing_mean", {})
        offered = (f"{p['offered_rps']:g}" if report["mode"] == "open" else
                   f"closed, {report['concurrency']} in flight")
        lines.append(
            f"| {offered} | {p['achieved_qps']:.1f} "
            f"| {lat['p50']:.2f} | {lat['p99']:.2f} | {lat['p99_9']:.2f} "
            f"| {error_percent(p):.2f} "
            f"| {t.get('queue_ns', 0) / 1e6:.3f} "
            f"| {t.get('compute_ns', 0) / 1e6:.3f} "
            f"| {t.get('kernel_ns', 0) / 1e6:.3f} "
            f"| {t.get('batch_queries', 0):.1f} |")
    return "\n".join(lines)


def short_name(path):
    """folder/file: reports of different runs often share a file name."""
    folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return f"{folder}/{os.path.basename(path)}"


def label(path, report):
    return (f"{short_name(path)} ({report['mode']}, "
            f"Lq={report['query_tokens']}, cand={report['candidates']})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("reports", nargs="+", help="loadgen JSON reports")
    parser.add_argument("--out", help="PNG to write (needs matplotlib)")
    parser.add_argument("--title", default="maxsimd latency vs throughput")
    args = parser.parse_args()

    reports = []
    for path in args.reports:
        with open(path) as f:
            report = json.load(f)
        print(f"### {label(path, report)}\n")
        print(markdown_table(report) + "\n")
        reports.append((path, report))
    if not args.out:
        return 0

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for path, report in reports:
        points = [p for p in report["points"] if p["ok"] > 0]
        if not points:
            continue
        qps = [p["achieved_qps"] for p in points]
        line, = ax.plot(qps, [p["latency_ms"]["p50"] for p in points],
                        marker="o", label=f"p50 {short_name(path)}")
        ax.plot(qps, [p["latency_ms"]["p99"] for p in points], marker="^",
                linestyle="--", color=line.get_color(),
                label=f"p99 {short_name(path)}")
    ax.set_yscale("log")
    ax.set_xlabel("achieved QPS (OK responses/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_title(args.title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
