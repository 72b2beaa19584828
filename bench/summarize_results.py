#!/usr/bin/env python3
"""Writes the one short summary of a benchmark run that bench/results/ keeps.

The raw output of a run (what `bench/run_gpu.sh` writes under $OUT: JSON of
maxsim_bench, fidelity_bench and loadgen, test and sanitizer logs, profiles,
server logs) stays out of git (bench/.gitignore). What the repository keeps
of a run is one markdown file, bench/results/<name>.md: the device, the
driver and the commit where recorded, the command that reproduces the run,
and the tables of figures, copied from the raw files as they were written
(numbers are taken as text, never rounded or recomputed).

    python3 bench/summarize_results.py --name h200_v17 --commit abc1234 \\
        --command 'bench/run_gpu.sh run' --out bench/results/h200_v17.md $OUT

Each input is a file or a folder (walked whole). What it reads:
  - maxsim_bench JSON ("shapes") or console tables ("shape  gpu_ms ..."): the
    whole table for one run; several runs of one folder (an A/B) as one
    table of gpu ms per run;
  - fidelity_bench JSON ("layouts") or console tables ("layout queries");
  - loadgen JSON ("points") or console reports ("open loop, offered ..."),
    and the markdown tables service_bench.sh prints;
  - gtest logs (the summary lines), sanitizer logs (their SUMMARY lines);
  - soak reports (tests/soak/soak.py --json);
  - device.txt (nvidia-smi: the device and the driver);
  - Nsight Compute summaries of bench/ncu_stalls.py (stall shares) and SOL
    sections (throughputs);
  - markdown notes and short tables written by hand, copied whole.
Server logs, metrics scrapes, top snapshots and plots are only counted.

Python 3 standard library only.
"""

import argparse
import json
import os
import re
import sys

# Files that are only counted, by pattern of their name.
LEFT_OUT = [
    (re.compile(r"^server_.*\.log$"), "server logs"),
    (re.compile(r"^metrics_.*\.txt$"), "Prometheus scrapes"),
    (re.compile(r"^top_.*\.txt$"), "top snapshots"),
    (re.compile(r"^lscpu.*\.txt$"), "lscpu listings"),
    (re.compile(r"^dmon.*\.txt$"), "nvidia-smi dmon samples"),
    (re.compile(r"\.csv$"), "CSV samples"),
    (re.compile(r"\.png$"), "plots"),
    (re.compile(r"\.patch$"), "patches"),
    (re.compile(r"^ncu_.*\.txt$"), "Nsight Compute section dumps"),
]

# A folder with more maxsim_bench runs than this (an A/B) gets one table of
# their gpu ms, not a whole table each.
MAX_WHOLE_TABLES = 3

# A text file longer than this that no reader below recognises is counted,
# not copied.
MAX_VERBATIM_LINES = 40


def load_json(path):
    """The JSON at `path` with every number kept as the text it was written."""
    with open(path, encoding="utf-8") as f:
        return json.load(f, parse_float=str, parse_int=str)


def read_text(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def cell(v):
    """A JSON value as a table cell, as written."""
    if v is None:
        return "-"
    if v is True:
        return "yes"
    if v is False:
        return "no"
    s = str(v)
    return s.replace("|", "\\|") if s != "" else "-"


def table(header, rows, right=None):
    """A markdown table; `right` is the set of right-aligned column indices."""
    right = set(range(1, len(header))) if right is None else right
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---:" if i in right else "---"
                          for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def fence(text):
    return "```\n" + text.rstrip("\n") + "\n```"


class Run:
    """What the inputs of one run hold, read into sections."""

    def __init__(self, root):
        self.root = root
        self.devices = []  # (device, driver or None, source)
        self.commits = []  # (commit, source)
        self.benches = []  # (label, folder, record)
        self.fidelity = []  # (label, record)
        self.fidelity_text = []  # (label, text)
        self.service_rows = []  # rows of the loadgen table
        self.service_tables = []  # (label, markdown)
        self.tests = []  # (label, ran, passed, failed, skipped)
        self.console_tests = []  # (label, line)
        self.sanitizer = []  # (label, line)
        self.soak = []  # (label, record)
        self.stalls = []  # rows
        self.sol = []  # rows
        self.verbatim = []  # (label, text, is_markdown)
        self.left_out = {}  # kind -> [labels]
        self.files = 0

    def rel(self, path):
        return os.path.relpath(path, self.root)

    def add_device(self, device, driver, source):
        for d in self.devices:
            if d[0] == device and (d[1] == driver or driver is None):
                return
        self.devices.append((device, driver, source))

    def leave_out(self, kind, label):
        self.left_out.setdefault(kind, []).append(label)


# ---- maxsim_bench -----------------------------------------------------------

BENCH_HEADER = re.compile(r"^shape\s+gpu_ms\s+wall_ms", re.M)
CEILINGS = re.compile(r"^ceilings: (.*)$", re.M)
DEVICE_LINE = re.compile(r"^device: (.*)$", re.M)


def bench_from_json(d):
    return {
        "device": d.get("device"),
        "ceilings": [("HBM read TB/s", d.get("hbm_read_tbps")),
                     ("bf16 GEMM TFLOP/s", d.get("bf16_gemm_tflops")),
                     ("pinned H2D GB/s", d.get("pinned_h2d_gbps")),
                     ("timed runs", d.get("runs"))],
        "shapes": d["shapes"],
        "text": None,
    }


def headed_blocks(lines, header):
    """(index, lines) of each run of lines that starts with a line matching
    `header` and ends before the next blank line."""
    for i, line in enumerate(lines):
        if not header.match(line):
            continue
        block = [line]
        for nxt in lines[i + 1:]:
            if not nxt.strip():
                break
            block.append(nxt)
        yield i, block


def bench_blocks_from_text(text):
    """The console tables of maxsim_bench in `text`, each with its ceilings."""
    lines = text.splitlines()
    blocks = []
    for i, block in headed_blocks(lines, BENCH_HEADER):
        before = "\n".join(lines[:i])
        dev = DEVICE_LINE.findall(before)
        ceil = CEILINGS.findall(before)
        shapes = []
        for row in block[1:]:
            tok = row.split()
            if len(tok) >= 7:
                shapes.append({"name": tok[0], "gpu_ms": tok[1],
                               "wall_ms": tok[2], "floor_ms": tok[5],
                               "pct_of_floor": tok[6]})
        blocks.append({
            "device": dev[-1] if dev else None,
            "ceilings_line": ceil[-1] if ceil else None,
            "shapes": shapes,
            "text": "\n".join(
                ([("device: " + dev[-1])] if dev else []) +
                ([("ceilings: " + ceil[-1])] if ceil else []) + [""] + block),
        })
    return blocks


BENCH_COLUMNS = [
    ("gpu_ms", "gpu ms"), ("maxsim_ms", "maxsim ms"), ("topk_ms", "top-k ms"),
    ("wall_ms", "wall ms"), ("floor_ms", "floor ms"),
    ("pct_of_floor", "% of floor"), ("target", "target"), ("met", "met"),
    ("speedup_vs_fp16", "x fp16"), ("hbm_pct", "% HBM read"),
    ("ms_per_query", "ms per query"),
    ("speedup_vs_plaid", "x published PLAID rerank"),
]
# Columns whose 0 means "does not apply to this shape" in maxsim_bench's JSON.
ZERO_IS_NA = {"ms_per_query", "speedup_vs_plaid"}


def is_zero(v):
    try:
        return float(v) == 0
    except (TypeError, ValueError):
        return False


def bench_full_table(rec):
    out = []
    if rec["text"] is not None:
        return fence(rec["text"])
    ceil = ", ".join("%s %s" % (k, v) for k, v in rec["ceilings"]
                     if v is not None)
    if ceil:
        out.append("Ceilings measured in the same run: %s." % ceil)
    cols = [(k, h) for k, h in BENCH_COLUMNS
            if any(k in s and not (k in ZERO_IS_NA and is_zero(s[k]))
                   for s in rec["shapes"])]
    rows = []
    for s in rec["shapes"]:
        row = [s["name"]]
        for k, _ in cols:
            v = s.get(k)
            row.append("-" if k in ZERO_IS_NA and is_zero(v) else v)
        rows.append(row)
    text_cols = {i + 1 for i, (k, _) in enumerate(cols)
                 if k in ("target", "met")}
    out.append(table(["shape"] + [h for _, h in cols], rows,
                     set(range(1, len(cols) + 1)) - text_cols))
    return "\n\n".join(out)


def bench_pivot(entries):
    """One table of gpu ms per run for several maxsim_bench runs."""
    names = []
    for _, rec in entries:
        for s in rec["shapes"]:
            if s["name"] not in names:
                names.append(s["name"])
    out = []
    for start in range(0, len(entries), 8):
        part = entries[start:start + 8]
        header = ["gpu ms"] + [label for label, _ in part]
        rows = []
        for key, pattern in (
                ("HBM read TB/s", r"HBM read ([\d.]+) TB/s"),
                ("bf16 GEMM TFLOP/s", r"bf16 GEMM ([\d.]+) TFLOP/s")):
            row = [key + " (ceiling)"]
            for _, rec in part:
                if rec["text"] is None:
                    row.append(dict(rec["ceilings"]).get(key))
                else:
                    m = re.search(pattern, rec.get("ceilings_line") or "")
                    row.append(m.group(1) if m else None)
            rows.append(row)
        for n in names:
            row = [n]
            for _, rec in part:
                v = [s["gpu_ms"] for s in rec["shapes"] if s["name"] == n]
                row.append(v[0] if v else None)
            if any(c is not None for c in row[1:]):
                rows.append(row)
        out.append(table(header, rows))
    return "\n\n".join(out)


# ---- fidelity_bench ---------------------------------------------------------

FID_HEADER = re.compile(r"^layout\s+queries\s+mean overlap", re.M)
FID_PARAMS = ["backend", "docs", "min_tokens", "max_tokens", "clusters",
              "noise", "queries", "query_noise", "top_k", "seed"]


def fidelity_table(entries):
    """fidelity_bench reports: one table; the parameters that differ between
    reports become columns."""
    varying = [p for p in FID_PARAMS
               if len({str(rec.get(p)) for _, rec in entries}) > 1]
    common = [(p, entries[0][1].get(p)) for p in FID_PARAMS
              if p not in varying and entries[0][1].get(p) is not None]
    out = []
    if common:
        out.append("Corpus and queries: " +
                   ", ".join("%s %s" % (p, v) for p, v in common) + ".")
    trainer = {rec.get("plaid_trainer") for _, rec in entries} - {None}
    if len(trainer) == 1:
        out.append("PLAID trainer: %s." % trainer.pop())
    with_k = any("plaid_centroids" in l for _, rec in entries
                 for l in rec["layouts"])
    header = (["report"] if len(entries) > 1 else []) + varying + [
        "layout", "queries", "mean overlap", "same first", "worst query",
        "near", "far"] + (["PLAID centroids"] if with_k else [])
    rows = []
    for label, rec in entries:
        for l in rec["layouts"]:
            rows.append(([label] if len(entries) > 1 else []) +
                        [rec.get(p) for p in varying] +
                        [l.get(k) for k in ("layout", "queries",
                                            "mean_overlap", "same_first",
                                            "worst_overlap", "near_intruders",
                                            "far_intruders")] +
                        ([l.get("plaid_centroids")] if with_k else []))
    first = (1 if len(entries) > 1 else 0) + len(varying) + 2
    out.append(table(header, rows, set(range(first, len(header)))))
    return "\n\n".join(out)


def fidelity_blocks_from_text(text):
    lines = text.splitlines()
    blocks = []
    for i, block in headed_blocks(lines, FID_HEADER):
        head = [l for l in lines[:i] if l.startswith(("corpus:", "backend "))]
        blocks.append("\n".join(head[-2:] + block))
    return blocks


# ---- loadgen ----------------------------------------------------------------

LOADGEN_START = re.compile(
    r"^(open loop, offered (?P<rate>[\d.]+) rps|"
    r"closed loop, concurrency (?P<conc>\d+)):$")
SENT = re.compile(r"sent (\d+), not sent (\d+), measured ([\d.]+) s, "
                  r"achieved ([\d.]+) QPS")
LATENCY = re.compile(r"latency ms: p50 (\S+)\s+p90 (\S+)\s+p99 (\S+)\s+"
                     r"p99\.9 (\S+)\s+max (\S+)\s+mean (\S+)")
SERVER = re.compile(r"server mean ms: queue (\S+)\s+compute (\S+)\s+kernel "
                    r"(\S+)\s+total (\S+); batch (\S+) queries")
RESPONSES = re.compile(r"responses: (.*)$", re.M)

SERVICE_HEADER = ["report", "mode", "corpus", "candidates", "offered rps",
                  "sent", "achieved QPS", "p50 ms", "p90 ms", "p99 ms",
                  "p99.9 ms", "max ms", "responses", "server queue ms",
                  "server kernel ms", "server total ms", "batch"]


def ns_to_ms(v):
    """loadgen's server timing (ns in its JSON) in ms, as its console prints
    it (three decimals)."""
    try:
        return "%.3f" % (float(v) / 1e6)
    except (TypeError, ValueError):
        return None


def service_rows_from_json(label, d):
    rows = []
    mode = d.get("mode")
    if mode == "closed":
        mode = "closed, %s in flight" % d.get("concurrency")
    for p in d.get("points", []):
        lat = p.get("latency_ms", {})
        st = p.get("server_timing_mean", {})
        codes = ", ".join("%s=%s" % kv
                          for kv in p.get("status_codes", {}).items())
        rows.append([label, mode, d.get("corpus"), d.get("candidates"),
                     p.get("offered_rps") if d.get("mode") == "open" else "-",
                     p.get("sent"), p.get("achieved_qps"), lat.get("p50"),
                     lat.get("p90"), lat.get("p99"), lat.get("p99_9"),
                     lat.get("max"), codes, ns_to_ms(st.get("queue_ns")),
                     ns_to_ms(st.get("kernel_ns")),
                     ns_to_ms(st.get("total_ns")),
                     st.get("batch_queries")])
    return rows


def service_rows_from_text(label, text):
    rows = []
    lines = text.splitlines()
    n = 0
    for i, line in enumerate(lines):
        m = LOADGEN_START.match(line.strip())
        if not m:
            continue
        n += 1
        body = "\n".join(lines[i + 1:i + 5])
        sent, lat = SENT.search(body), LATENCY.search(body)
        server, resp = SERVER.search(body), RESPONSES.search(body)
        if not sent or not lat:
            continue
        mode = ("open" if m.group("rate") else
                "closed, %s in flight" % m.group("conc"))
        rows.append(["%s #%d" % (label, n), mode, None, None,
                     m.group("rate") or "-", sent.group(1), sent.group(4)] +
                    list(lat.groups()[:5]) +
                    [resp.group(1) if resp else None] +
                    ([server.group(1), server.group(3), server.group(4),
                      server.group(5)] if server else [None] * 4))
    return rows


def markdown_tables(text):
    """The markdown tables in `text`, each with the heading right above it."""
    out, block, heading = [], [], None
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if block:
            out.append(((heading + "\n\n") if heading else "") +
                       "\n".join(block))
            block, heading = [], None
        if line.startswith("#"):
            heading = line
        elif line.strip():
            heading = None
    return out


# The tables bench/plot_curve.py prints of loadgen reports (service_bench.sh
# prints one per report): "### <report> (<mode>, Lq=.., cand=..)".
CURVE_TABLE = re.compile(r"^\| offered rps \| achieved rps \|", re.M)
CURVE_HEADING = re.compile(r"^### (\S+) \((\w+), Lq=\d+, cand=(\d+)\)")


def label_service_rows(rows, curves):
    """Names the loadgen reports of a console by the curve tables it also
    printed: a report's achieved rate appears in both. Returns the rows and
    the tables no row matched."""
    by_rate = {}
    for t in curves:
        m = CURVE_HEADING.match(t)
        if not m:
            continue
        for line in t.splitlines()[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) > 1:
                by_rate.setdefault(cells[1], []).append((m, t))
    used = set()
    for row in rows:
        hits = by_rate.get(row[6], [])
        if len(hits) == 1:
            m, t = hits[0]
            row[0] = "%s: %s" % (row[0].split(" #")[0], m.group(1))
            row[3] = m.group(3)
            used.add(t)
    return rows, [t for t in curves if t not in used]


# ---- tests, sanitizers, soak, profiles --------------------------------------

GTEST_RAN = re.compile(r"^\[==========\] (\d+) tests? from .* ran", re.M)
GTEST_PASSED = re.compile(r"^\[  PASSED  \] (\d+) tests?", re.M)
GTEST_FAILED = re.compile(r"^\[  FAILED  \] (\d+) tests?, listed below", re.M)
GTEST_SKIPPED = re.compile(r"^\[  SKIPPED \] (\d+) tests?", re.M)
CONSOLE_TEST = re.compile(
    r"^(\S+(?: \(mma\))?)\s+(\[  (?:PASSED|FAILED)  \] \d+ tests?\.?.*)$")
SANITIZER_LINE = re.compile(r"^.*(ERROR|RACECHECK|SYNCCHECK|INITCHECK) "
                            r"SUMMARY.*$", re.M)


def soak_section(label, d):
    out = ["Seed %s, backend %s, %s s; server exit status %s; failures: %s." %
           (d.get("seed"), d.get("backend"), d.get("duration_s"),
            d.get("server_exit_status"),
            "; ".join(map(str, d.get("failures") or [])) or "none")]
    req = d.get("requests", {})
    out.append(table(["RPC", "sent", "answered",
                      "checked against the reference"],
                     [[k, v.get("sent"), v.get("answered"), v.get("checked")]
                      for k, v in req.items()]))
    scalars = [[k, d.get(k)] for k in ("mismatches", "lost", "duplicated",
                                       "snapshot_checks", "compactions_logged",
                                       "rss_tolerance") if k in d]
    scalars += [["errors " + k, v]
                for k, v in d.get("errors_by_code", {}).items()]
    scalars += [["expected: " + k, v]
                for k, v in d.get("expected_errors", {}).items()]
    scalars += [["unexpected: " + k, v]
                for k, v in d.get("unexpected_errors", {}).items()]
    scalars += [["writes acknowledged: " + k, v]
                for k, v in d.get("writes_acked", {}).items()]
    out.append(table(["count", "value"], scalars))
    rss = d.get("rss") or {}
    if rss:
        out.append("Memory (rss):\n\n" +
                   table(["field", "value"], [list(kv) for kv in rss.items()]))
    ms = d.get("metrics_scrapes")
    if ms:
        rows = [[k, v] for k, v in ms.items()
                if not isinstance(v, (list, dict))]
        rows.append(["failures",
                     "; ".join(map(str, ms.get("failures") or [])) or "-"])
        out.append("Metrics scrapes:\n\n" + table(["field", "value"], rows))
    hostile = d.get("hostile")
    if hostile:
        rows = [[a, k, v] for a, outcome in hostile.get("actions", {}).items()
                for k, v in outcome.items()]
        out.append("Hostile mix (on: %s):\n\n" % cell(hostile.get("on")) +
                   table(["action", "outcome", "count"], rows, {2}))
        dist = hostile.get("distributions", {})
        if dist:
            out.append(table(["distribution", "n", "min", "median", "max"],
                             [[k, v.get("n"), v.get("min"), v.get("median"),
                               v.get("max")] for k, v in dist.items()]))
        if hostile.get("unexpected"):
            unexpected = [list(kv) for kv in hostile["unexpected"].items()]
            out.append(table(["unexpected", "count"], unexpected))
    return "\n\n".join(out)


def stall_row(label, text):
    lines = text.splitlines()
    m = re.search(r"warp samples (\d+), instructions executed (\d+)", text)
    reasons = []
    in_table = False
    for line in lines:
        if line.startswith("stall reason"):
            in_table = True
            continue
        if in_table:
            if not line.strip():
                break
            reasons.append(" ".join(line.split()))
    kernel = lines[0].strip() if lines else ""
    counts = [m.group(1), m.group(2)] if m else [None, None]
    return [label, kernel] + counts + ["; ".join(reasons[:4])]


SOL_FIELDS = ["Memory Throughput", "DRAM Throughput",
              "L1/TEX Cache Throughput", "L2 Cache Throughput",
              "Compute (SM) Throughput", "Issue Slots Busy"]


def sol_row(label, text):
    row = [label]
    for f in SOL_FIELDS:
        m = re.search(re.escape(f) + r"\s+%\s+(\S+)", text)
        row.append(m.group(1) if m else None)
    return row


# ---- the walk ---------------------------------------------------------------


def kind_of_json(d):
    if not isinstance(d, dict):
        return None
    if "shapes" in d:
        return "bench"
    if "layouts" in d:
        return "fidelity"
    if "points" in d:
        return "loadgen"
    if "rss" in d and "requests" in d:
        return "soak"
    if any(isinstance(v, dict) and "shapes" in v for v in d.values()):
        return "bench_set"
    return None


def walk(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            for dirpath, dirnames, filenames in os.walk(p):
                dirnames.sort()
                files += [os.path.join(dirpath, f) for f in sorted(filenames)]
        else:
            files.append(p)
    return files


def read_run(paths, root):
    run = Run(root)
    files = walk(paths)
    run.files = len(files)
    json_kinds = {}
    for f in files:
        if f.endswith(".json"):
            try:
                json_kinds[f] = kind_of_json(load_json(f))
            except (ValueError, UnicodeDecodeError):
                json_kinds[f] = None
    stems = {}
    for f, k in json_kinds.items():
        if k:
            stems.setdefault((os.path.dirname(f), stem(f)), set()).add(k)
    loadgen_dirs = {os.path.dirname(f) for f, k in json_kinds.items()
                    if k == "loadgen"}
    test_log_dirs = set()
    for f in files:
        if (f.endswith((".log", ".txt")) and
                "[==========]" in read_text(f)[:2000]):
            test_log_dirs.add(os.path.dirname(f))

    for f in files:
        label = run.rel(f)
        name = os.path.basename(f)
        folder = os.path.dirname(f)
        kind = next((k for pat, k in LEFT_OUT if pat.search(name)), None)
        if kind:
            run.leave_out(kind, label)
            continue
        if f.endswith(".json"):
            read_json_file(run, f, label, json_kinds.get(f))
            continue
        text = read_text(f)
        twins = stems.get((folder, stem(f)), set())
        if stem(f) == "run":  # run_gpu.sh's console: every JSON of the folder
            twins = set().union(
                *[k for (d, _), k in stems.items() if d == folder] or [set()])
        read_text_file(run, f, label, text, twins, loadgen_dirs, test_log_dirs)
    return run


def stem(path):
    base = os.path.basename(path)
    for ext in (".mma.log", ".json", ".log", ".txt", ".md"):
        if base.endswith(ext):
            return base[:-len(ext)]
    return base


def read_json_file(run, f, label, kind):
    if kind is None:
        run.leave_out("other JSON", label)
        return
    d = load_json(f)
    if kind == "bench":
        rec = bench_from_json(d)
        run.benches.append((label, os.path.dirname(f), rec))
        if rec["device"]:
            run.add_device(rec["device"], None, label)
    elif kind == "bench_set":
        if "note" in d:
            run.verbatim.append((label + ", note", d["note"], False))
        for key, sub in d.items():
            if isinstance(sub, dict) and "shapes" in sub:
                rec = bench_from_json(sub)
                run.benches.append(
                    ("%s: %s" % (label, key), os.path.dirname(f), rec))
                if rec["device"]:
                    run.add_device(rec["device"], None, label)
    elif kind == "fidelity":
        run.fidelity.append((label, d))
    elif kind == "loadgen":
        run.service_rows += service_rows_from_json(label, d)
    elif kind == "soak":
        run.soak.append((label, d))


def read_text_file(run, f, label, text, twins, loadgen_dirs, test_log_dirs):
    name = os.path.basename(f)
    folder = os.path.dirname(f)
    used = False
    # nvidia-smi's CSV (device.txt, and the head of run_gpu.sh's console).
    for m in re.finditer(r"^name, memory\.total.*driver_version\n(.+)$", text,
                         re.M):
        parts = [p.strip() for p in m.group(1).split(",")]
        run.add_device(parts[0], parts[-1], label)
        used = True
    if name == "device.txt" or name == "gpu.txt":
        m = re.search(r"^GPU 0: (.*?) \(UUID", text, re.M)
        if m:
            run.add_device(m.group(1), None, label)
        return
    for m in re.finditer(r"(?:[Cc]ommit|code of) ([0-9a-f]{7,40})\b", text):
        run.commits.append((m.group(1), label))
    if name.endswith(".md"):
        run.verbatim.append((label, text, True))
        return
    if name.startswith("stalls_") or "stall reason" in text[:400]:
        run.stalls.append(stall_row(label, text))
        return
    if "Section: GPU Speed Of Light Throughput" in text[:200]:
        run.sol.append(sol_row(label, text))
        return
    san = [m.group(0).strip() for m in SANITIZER_LINE.finditer(text)]
    if name.startswith("sanitize") and san:
        run.sanitizer += [(label, line) for line in san]
        return
    if "[==========]" in text[:2000]:
        ran = GTEST_RAN.findall(text)
        run.tests.append((label, ran[-1] if ran else None,
                          (GTEST_PASSED.findall(text) or [None])[-1],
                          (GTEST_FAILED.findall(text) or [None])[-1],
                          (GTEST_SKIPPED.findall(text) or [None])[-1]))
        return
    # Consoles of bench/run_gpu.sh, maxsim_bench, fidelity_bench and loadgen.
    if "bench" not in twins:
        blocks = bench_blocks_from_text(text)
        for i, b in enumerate(blocks):
            suffix = "" if len(blocks) == 1 else " #%d" % (i + 1)
            run.benches.append((label + suffix, folder, b))
            if b["device"]:
                run.add_device(b["device"].split(",")[0], None, label)
            used = True
    elif BENCH_HEADER.search(text):
        used = True
    if "fidelity" not in twins:
        for b in fidelity_blocks_from_text(text):
            run.fidelity_text.append((label, b))
            used = True
    elif FID_HEADER.search(text):
        used = True
    if folder not in test_log_dirs:
        for line in text.splitlines():
            m = CONSOLE_TEST.match(line)
            if m:
                run.console_tests.append((label, line.rstrip()))
                used = True
    covered = ("loadgen" in twins or
               (os.path.basename(folder) == stem(f) and folder in loadgen_dirs)
               or os.path.join(folder, stem(f)) in loadgen_dirs)
    tables = markdown_tables(text)
    curves = [t for t in tables if CURVE_TABLE.search(t)]
    others = [t for t in tables if not CURVE_TABLE.search(t)]
    if re.search(r"^(open|closed) loop", text, re.M) or curves:
        if not covered:
            rows, unmatched = label_service_rows(
                service_rows_from_text(label, text), curves)
            run.service_rows += rows
            run.service_tables += [(label, t) for t in unmatched]
        used = True
    if others:
        run.verbatim += [(label, t, True) for t in others]
        used = True
    if used:
        return
    if san:
        run.sanitizer += [(label, line) for line in san]
        return
    if len(text.splitlines()) <= MAX_VERBATIM_LINES and text.strip():
        run.verbatim.append((label, text, False))
    else:
        run.leave_out("other logs", label)


# ---- the summary ------------------------------------------------------------


def notes_sections(notes_path, names):
    """The headings of bench/NOTES.md sections that name any of `names`."""
    if not notes_path or not os.path.exists(notes_path):
        return []
    heading, found = None, []
    pats = [re.compile(r"(?<![\w])" + re.escape(n) + r"(?![0-9A-Za-z])")
            for n in names]
    for line in read_text(notes_path).splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            continue
        if (heading and heading not in found and
                any(p.search(line) for p in pats)):
            found.append(heading)
    return found


def summary(run, args):
    out = ["# %s%s" % (args.name, (": " + args.title) if args.title else "")]
    out.append("One benchmark run, summarised by `bench/summarize_results.py` "
               "from its raw files (not kept in git). Figures are copied as "
               "the tools wrote them.")
    facts = []
    names = list(dict.fromkeys(d for d, _, _ in run.devices))
    facts.append("Device: " + ("; ".join(names) if names else args.device or
                               "not recorded in the raw files"))
    drivers = list(dict.fromkeys(
        "%s (`%s`)" % (drv, src) for _, drv, src in run.devices if drv))
    facts.append("Driver: " + ("; ".join(drivers) if drivers else args.driver
                               or "not recorded in the raw files"))
    commits = []
    if args.commit:
        commits.append(args.commit)
    commits += ["%s (`%s`)" % c for c in run.commits]
    facts.append("Commit: " + ("; ".join(dict.fromkeys(commits)) if commits
                               else "not recorded in the raw files"))
    if args.command:
        facts.append("Reproduce: " +
                     "; ".join("`%s`" % c for c in args.command))
    sections = notes_sections(args.notes, [args.name] + (args.cite or []))
    if sections:
        facts.append("bench/NOTES.md: " +
                     "; ".join('"%s"' % s for s in sections))
    out.append("\n".join("- " + f for f in facts))
    for note in args.note or []:
        out.append(note)

    if run.benches:
        out.append("## Kernel benchmark (maxsim_bench)")
        by_folder = {}
        for label, folder, rec in run.benches:
            by_folder.setdefault(folder, []).append((label, rec))
        for folder, entries in by_folder.items():
            # run_gpu.sh's bench.json (and the like) whole; the runs of an
            # A/B, several to a folder, side by side.
            whole = [e for e in entries
                     if os.path.basename(e[0]).startswith("bench")]
            rest = [e for e in entries if e not in whole]
            if len(rest) <= MAX_WHOLE_TABLES:
                whole, rest = whole + rest, []
            for label, rec in whole:
                out.append("`%s`:\n\n%s" % (label, bench_full_table(rec)))
            if rest:
                where = run.rel(folder) if folder != run.root else "."
                out.append("gpu ms of each run in `%s` (one column a run):"
                           "\n\n%s" % (where, bench_pivot(rest)))
    if run.fidelity or run.fidelity_text:
        out.append("## Fidelity (fidelity_bench: top-10 overlap with the "
                   "exact fp32 ranking)")
        by_folder = {}
        for label, rec in run.fidelity:
            by_folder.setdefault(os.path.dirname(label), []).append(
                (label, rec))
        for _, entries in by_folder.items():
            head = "`%s`:\n\n" % entries[0][0] if len(entries) == 1 else ""
            out.append(head + fidelity_table(entries))
        for label, text in run.fidelity_text:
            out.append("`%s`:\n\n%s" % (label, fence(text)))
    if run.service_rows or run.service_tables:
        out.append("## Service (loadgen over loopback)")
        if run.service_rows:
            out.append("Latency from the scheduled send; server columns are "
                       "the server's mean timing per request (loadgen's ns "
                       "in ms).")
            out.append(table(SERVICE_HEADER, run.service_rows,
                             set(range(4, len(SERVICE_HEADER))) - {12}))
        for label, t in run.service_tables:
            out.append("`%s`:\n\n%s" % (label, t))
    if run.tests or run.console_tests:
        out.append("## Tests")
        if run.tests:
            out.append(table(["log", "ran", "passed", "failed", "skipped"],
                             run.tests))
        if run.console_tests:
            out.append(fence("\n".join("%s  (%s)" % (line, label)
                                       for label, line in run.console_tests)))
    if run.sanitizer:
        out.append("## Compute Sanitizer")
        out.append(table(["log", "summary"], run.sanitizer, set()))
    for label, d in run.soak:
        out.append("## Soak: `%s`" % label)
        out.append(soak_section(label, d))
    if run.stalls or run.sol:
        out.append("## Profiles (Nsight Compute)")
        if run.stalls:
            out.append(table(["summary", "kernel", "warp samples",
                              "instructions executed", "top stall reasons"],
                             run.stalls, {2, 3}))
        if run.sol:
            out.append(table(["SOL section", "memory %", "DRAM %", "L1/TEX %",
                              "L2 %", "SM %", "issue slots busy %"], run.sol))
    if run.verbatim:
        out.append("## Notes and tables written with the run")
        for label, text, md in run.verbatim:
            if md:
                # Its headings go below this summary's own.
                body = re.sub(
                    r"^(#+) ",
                    lambda m: "#" * min(6, len(m.group(1)) + 2) + " ",
                    text.strip(), flags=re.M)
                out.append("`%s`:\n\n%s" % (label, body))
            else:
                out.append("`%s`:\n\n%s" % (label, fence(text)))
    if run.left_out:
        out.append("## Raw files not summarised")
        out.append("\n".join("- %s: %d (%s)" % (
            kind, len(labels), ", ".join("`%s`" % l for l in labels[:6]) +
            (", ..." if len(labels) > 6 else ""))
                             for kind, labels in sorted(run.left_out.items())))
    out.append("Summarised from %d raw files." % run.files)
    return "\n\n".join(out) + "\n"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("inputs", nargs="+", help="raw files or folders of one run")
    p.add_argument("--name", required=True, help="the run, e.g. h200_v17")
    p.add_argument("--title", help="a few words on what the run measured")
    p.add_argument("--commit", help="the commit that was measured")
    p.add_argument("--device", help="the device, where no raw file names it "
                   "(say where it is from)")
    p.add_argument("--driver", help="the driver, where no raw file names it "
                   "(say where it is from)")
    p.add_argument("--command", action="append",
                   help="a command that reproduces the run (repeatable)")
    p.add_argument("--note", action="append",
                   help="a paragraph to add under the facts (repeatable)")
    p.add_argument("--cite", action="append",
                   help="names under which bench/NOTES.md cites the run "
                        "(default: --name)")
    p.add_argument("--notes", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "NOTES.md"))
    p.add_argument("--root", help="paths in the summary are relative to this "
                   "(default: the first input, or its folder)")
    p.add_argument("--out",
                   help="the markdown file to write (default: stdout)")
    args = p.parse_args(argv)
    root = args.root or (args.inputs[0] if os.path.isdir(args.inputs[0])
                         else os.path.dirname(args.inputs[0]) or ".")
    text = summary(read_run(args.inputs, root), args)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
