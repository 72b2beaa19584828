#!/usr/bin/env python3
"""Checks the deployment files against a live server.

    deploy/check_live.py --server build/server/maxsimd \\
        --health build/client/maxsimd_health --ctl build/client/maxsimctl

Starts maxsimd on the CPU backend with the ConfigMap's flagfile
(deploy/k8s/configmap.yaml; listen addresses and directories overridden to
free loopback ports and a temporary folder), then:
  1. asks every health service the deployment probes (k8s gRPC probes,
     Dockerfile HEALTHCHECK, compose healthcheck) with maxsimd_health: each
     must answer SERVING;
  2. runs one query that succeeds and one that expires in the queue, so
     that every metric family has samples, and scrapes /metrics;
  3. runs `promtool check metrics` on the scrape;
  4. checks that every maxsimd_* / process_* name used by the alert rules,
     the Grafana dashboard and deploy/README.md is a family the server
     exports, and that deploy/README.md documents every family it exports;
  5. checks the PromQL of the dashboard with `promtool check rules`;
  6. stops the server with SIGTERM: it must exit 0.
Exits 0 when all hold, 1 listing the problems (a server that refuses the
flagfile among them), 2 when it cannot run.
Needs PyYAML (python3-yaml) and promtool (Debian package prometheus).
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_flags  # noqa: E402

import yaml  # noqa: E402  (check_flags exits with a message without it)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Names the rules and dashboard use that other exporters provide.
EXTERNAL = {"up"}
# The server's own families, the process collector's and those of
# prometheus-cpp's HTTP exposer.
PREFIXES = r"\b((?:maxsimd|process|exposer)_[a-z0-9_]+)"
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"),
            "summary": ("_sum", "_count")}


class StartFailed(Exception):
    """The server refused to start with the deployment's flags."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def families(text):
    """{name: type} from the # TYPE lines of Prometheus text."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def metric_names(expr):
    """Metric names of PREFIXES in a PromQL expression (recording rules
    carry a colon and are skipped)."""
    return set(re.findall(PREFIXES + r"\b(?!:)", expr))


def resolves(name, fams):
    if name in fams or name in EXTERNAL:
        return True
    for fam, kind in fams.items():
        if any(name == fam + s for s in SUFFIXES.get(kind, ())):
            return True
    return False


class Live:
    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp
        self.problems = []
        self.proc = None

    def fail(self, message):
        self.problems.append(message)

    def start(self):
        with open(os.path.join(self.args.root, "deploy", "k8s",
                               "configmap.yaml")) as f:
            cm = next(d for d in yaml.safe_load_all(f)
                      if d and d.get("kind") == "ConfigMap")
        flagfile = os.path.join(self.tmp, "maxsimd.flags")
        with open(flagfile, "w") as f:
            f.write(cm["data"]["maxsimd.flags"])
        self.port, self.metrics_port = free_port(), free_port()
        self.log = open(os.path.join(self.tmp, "server.log"), "w")
        # Flags after --flagfile override it. --min_execution_time makes a
        # query with a short deadline expire in the queue (step 2).
        cmd = [self.args.server, f"--flagfile={flagfile}", "--cpu",
               f"--listen=127.0.0.1:{self.port}",
               f"--metrics_listen=127.0.0.1:{self.metrics_port}",
               f"--data_dir={self.tmp}/data", f"--files_dir={self.tmp}/files",
               "--demo_corpus=demo:300:32", "--min_execution_time=2s",
               "--log_level=warn"]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        self.target = f"127.0.0.1:{self.port}"

    def health(self, service, timeout="2s"):
        res = subprocess.run(
            [self.args.health, f"--target={self.target}",
             f"--service={service}", f"--timeout={timeout}"],
            capture_output=True, text=True)
        return res.returncode, (res.stdout + res.stderr).strip()

    def wait_serving(self, deadline_s=60):
        end = time.time() + deadline_s
        while time.time() < end:
            if self.proc.poll() is not None:
                raise StartFailed(
                    f"maxsimd with the ConfigMap's flagfile exited with "
                    f"{self.proc.returncode} at start:\n" + self.server_log())
            if self.health("")[0] == 0:
                return
            time.sleep(0.2)
        raise StartFailed("maxsimd did not report SERVING within "
                          f"{deadline_s}s:\n" + self.server_log())

    def server_log(self):
        with open(os.path.join(self.tmp, "server.log")) as f:
            return f.read()[-3000:]

    def ctl(self, timeout, *args):
        return subprocess.run(
            [self.args.ctl, f"--target={self.target}", f"--timeout={timeout}",
             *args], capture_output=True, text=True)

    def check_probes(self):
        services = check_flags.probe_services(self.args.root,
                                              self.args.server,
                                              self.args.health)
        for service in services:
            code, out = self.health(service)
            if code != 0:
                self.fail(f"health service {service!r}, probed by the "
                          f"deployment files, is not SERVING: exit {code}: "
                          f"{out}")
        print(f"check_live: probes SERVING: {services}")

    def run_queries(self):
        data = os.path.join(self.tmp, "q")
        res = self.ctl("30s", "generate", "--out", data, "--docs", "20",
                       "--dim", "128", "--queries", "1", "--seed", "3")
        if res.returncode != 0:
            raise RuntimeError(f"maxsimctl generate: {res.stderr}")
        query = os.path.join(data, "query_0.npy")
        res = self.ctl("30s", "query", "--corpus", "demo", "--query", query,
                       "--top-k", "5")
        if res.returncode != 0:
            self.fail(f"a query failed: {res.stdout}{res.stderr}")
        res = self.ctl("1s", "query", "--corpus", "demo", "--query", query,
                       "--top-k", "5")
        if res.returncode == 0 or "DEADLINE_EXCEEDED" not in res.stderr:
            self.fail("a query with 1s left under --min_execution_time=2s "
                      f"did not expire: {res.stdout}{res.stderr}")

    def scrape(self):
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.log.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.fail("maxsimd did not exit within 60 s of SIGTERM")
            return
        if code != 0:
            self.fail(f"maxsimd exited with {code} after SIGTERM")


def check_promtool_metrics(live, text):
    res = subprocess.run(["promtool", "check", "metrics"], input=text,
                         capture_output=True, text=True)
    if res.returncode != 0 or res.stdout.strip() or res.stderr.strip():
        live.fail("promtool check metrics on the scrape: "
                  f"{(res.stdout + res.stderr).strip()}")


def dashboard_exprs(path):
    with open(path) as f:
        dash = json.load(f)
    exprs = []

    def walk(panels):
        for p in panels:
            exprs.extend(t["expr"] for t in p.get("targets", [])
                         if t.get("expr"))
            walk(p.get("panels", []))
    walk(dash.get("panels", []))
    for var in dash.get("templating", {}).get("list", []):
        q = var.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if var.get("type") == "query" and q:
            # Grafana's label_values(SELECTOR, LABEL): the selector is PromQL.
            m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", q)
            exprs.append(m.group(1) if m else q)
    return exprs


def rule_exprs(path):
    with open(path) as f:
        rules = yaml.safe_load(f)
    return [r["expr"] for g in rules["groups"] for r in g["rules"]]


def check_names(live, fams, root):
    used = {}
    dash = os.path.join(root, "deploy", "grafana", "maxsimd.json")
    alerts = os.path.join(root, "deploy", "prometheus", "alerts.yml")
    readme = os.path.join(root, "deploy", "README.md")
    for where, exprs in (("deploy/grafana/maxsimd.json",
                          dashboard_exprs(dash)),
                         ("deploy/prometheus/alerts.yml",
                          rule_exprs(alerts))):
        for e in exprs:
            for name in metric_names(e):
                used.setdefault(name, set()).add(where)
    with open(readme) as f:
        readme_text = f.read()
    # The metrics reference: the first column of its table.
    documented = set(re.findall(r"^\| `" + PREFIXES + "`", readme_text,
                                re.M))
    for name in documented:
        used.setdefault(name, set()).add("deploy/README.md")
    for name, where in sorted(used.items()):
        if not resolves(name, fams):
            live.fail(f"{', '.join(sorted(where))} use(s) {name}, which the "
                      f"server does not export")
    for fam in sorted(fams):
        if re.fullmatch(PREFIXES, fam) and fam not in documented:
            live.fail(f"deploy/README.md does not document {fam}")
    print(f"check_live: {len(fams)} families exported; {len(used)} names "
          f"used by the rules, dashboard and README")


def check_dashboard_promql(live, root, tmp):
    exprs = dashboard_exprs(os.path.join(root, "deploy", "grafana",
                                         "maxsimd.json"))
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr_{i}",
         "expr": e.replace("$__rate_interval", "5m")
                  .replace("$instance", ".*")}
        for i, e in enumerate(exprs)]}]}
    path = os.path.join(tmp, "dashboard_rules.yml")
    with open(path, "w") as f:
        yaml.safe_dump(rules, f)
    res = subprocess.run(["promtool", "check", "rules", path],
                         capture_output=True, text=True)
    if res.returncode != 0:
        live.fail("dashboard PromQL: " + (res.stdout + res.stderr).strip())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", required=True)
    p.add_argument("--health", required=True)
    p.add_argument("--ctl", required=True)
    p.add_argument("--root", default=REPO_ROOT)
    args = p.parse_args()
    if shutil.which("promtool") is None:
        print("check_live: promtool not found (apt-get install prometheus)",
              file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="maxsimd_check_live_")
    live = Live(args, tmp)
    try:
        live.start()
        live.wait_serving()
        live.check_probes()
        live.run_queries()
        text = live.scrape()
        check_promtool_metrics(live, text)
        check_names(live, families(text), args.root)
        check_dashboard_promql(live, args.root, tmp)
    except StartFailed as e:
        live.fail(str(e))
    except (OSError, RuntimeError, KeyError, ValueError,
            yaml.YAMLError) as e:
        live.stop()
        print(f"check_live: cannot check: {e}", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
        return 2
    live.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    for problem in live.problems:
        print(f"check_live: {problem}", file=sys.stderr)
    if live.problems:
        print(f"check_live: FAILED: {len(live.problems)} problem(s)",
              file=sys.stderr)
        return 1
    print("check_live: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
