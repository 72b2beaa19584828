#!/usr/bin/env python3
"""Checks that the alert rules and the Grafana dashboard work under any
scrape job name.

    deploy/check_monitoring.py [--root REPO]

Prometheus names a target's job after the scrape config that found it:
"maxsimd" in deploy/prometheus/prometheus.yml and the PodMonitor, but
"kubernetes-pods" (or another name) where pod annotations are scraped. A
rule or panel that selects job="maxsimd" is empty under any other, and an
absent() of it fires while the server is up. This checks that:
  - no expression of a rule file in REPO/deploy/prometheus (a YAML file
    with `groups`) has a matcher on the label `job`;
  - in every dashboard REPO/deploy/grafana/*.json, a job matcher only ever
    names a dashboard variable ($job), never a value;
  - the dashboard has the variables datasource (Prometheus), job
    (label_values of a maxsimd_* family, by job) and instance (the same
    family, restricted to $job);
  - every selector of a panel query on a maxsimd_*, process_* or exposer_*
    family has job=~"$job" and instance=~"$instance";
  - a query on process_* or exposer_* (families every exporter has) is
    limited to maxsimd targets with `and on (job, instance)
    maxsimd_build_info`, since "All" instances of a shared job include
    other applications' pods;
  - every panel and query uses the datasource variable.
Exits 0 when all hold, 1 listing every problem, 2 when it cannot read the
files. Needs PyYAML (python3-yaml, which yamllint depends on).
"""

import argparse
import glob
import json
import os
import re
import sys

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.exit("check_monitoring: needs PyYAML (apt-get install python3-yaml)")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Families the server exports; process_ and exposer_ come from
# prometheus-cpp and are exported by every other exporter too.
OWN = r"maxsimd_[A-Za-z0-9_]*"
SHARED = r"(?:process|exposer)_[A-Za-z0-9_]*"
FAMILY = re.compile(r"(?:%s|%s)" % (OWN, SHARED))
# A Grafana variable reference standing for the whole value.
VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]")
DATASOURCE_UID = "${datasource}"

STRING = r"\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'|`[^`]*`"
MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(%s)"
                     % STRING)
STRING_RE = re.compile(STRING)
TOKEN = re.compile(r"(%s)|([A-Za-z_:][A-Za-z0-9_:]*)|(\{)|(.)" % STRING,
                   re.S)


def unquote(literal):
    if literal[0] == "`":
        return literal[1:-1]
    return bytes(literal[1:-1], "utf-8").decode("unicode_escape")


def selectors(expr):
    """[(metric name or None, [(label, op, value)])] of the vector
    selectors in a PromQL expression: `name{...}`, `{...}` and a bare
    `name` of FAMILY (a bare identifier outside FAMILY, such as a function,
    keyword or a label of by/on, is no selector)."""
    out = []
    pos, pending = 0, None  # pending: an identifier that may own a "{"
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        ident, brace, other = m.group(2), m.group(3), m.group(4)
        if brace:
            end = pos + 1
            while end < len(expr) and expr[end] != "}":
                s = STRING_RE.match(expr, end)
                end = s.end() if s else end + 1
            out.append((pending, [(g[0], g[1], unquote(g[2])) for g in
                                  MATCHER.findall(expr[pos + 1:end])]))
            pending, pos = None, end + 1
            continue
        pos = m.end()
        if other is not None and other.isspace():
            continue
        if pending is not None and FAMILY.fullmatch(pending):
            out.append((pending, []))
        pending = ident
    if pending is not None and FAMILY.fullmatch(pending):
        out.append((pending, []))
    return out


def variable_of(value):
    """The variable name if `value` is one Grafana variable reference."""
    m = VARIABLE.fullmatch(value)
    return next((g for g in m.groups() if g), None) if m else None


class Checker:
    def __init__(self):
        self.problems = []
        self.counts = {"rule": 0, "dashboard": 0}

    def fail(self, where, message):
        self.problems.append(f"{where}: {message}")

    def job_matchers(self, where, expr, allow_variable):
        for _, matchers in selectors(expr):
            for label, op, value in matchers:
                if label != "job":
                    continue
                if allow_variable and variable_of(value) == "job":
                    continue
                self.fail(where, f"job{op}{json.dumps(value)} names a "
                                 f"scrape job, whose name depends on the "
                                 f"scrape config (maxsimd, kubernetes-pods)")

    # -- rules ----------------------------------------------------------------

    def check_rules(self, path):
        with open(path) as f:
            doc = yaml.safe_load(f)
        if not isinstance(doc, dict) or "groups" not in doc:
            return
        fname = os.path.relpath(path, self.root)
        for group in doc["groups"] or []:
            for rule in group.get("rules") or []:
                name = rule.get("alert") or rule.get("record")
                self.counts["rule"] += 1
                self.job_matchers(f"{fname} {name}", str(rule.get("expr")),
                                  allow_variable=False)

    # -- dashboards -----------------------------------------------------------

    def check_datasource(self, where, ds):
        uid = ds.get("uid") if isinstance(ds, dict) else ds
        if uid != DATASOURCE_UID:
            self.fail(where, f"datasource {json.dumps(ds)} is not the "
                             f"variable {DATASOURCE_UID}")

    def check_variables(self, fname, dash):
        variables = {v.get("name"): v for v in
                     dash.get("templating", {}).get("list", [])}
        ds = variables.get("datasource")
        if ds is None or ds.get("type") != "datasource" or \
                ds.get("query") != "prometheus":
            self.fail(fname, "no variable datasource of type datasource "
                             "(query prometheus)")
        for name, label_re in (("job", None), ("instance", "job")):
            var = variables.get(name)
            where = f"{fname} variable {name}"
            if var is None or var.get("type") != "query":
                self.fail(fname, f"no query variable {name}")
                continue
            self.check_datasource(where, var.get("datasource"))
            q = var.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", q or "")
            if not m or m.group(2) != name:
                self.fail(where, f"query {q!r} is not "
                                 f"label_values(SELECTOR, {name})")
                continue
            sel = selectors(m.group(1))
            if len(sel) != 1 or not re.fullmatch(OWN, sel[0][0] or ""):
                self.fail(where, f"{q!r} does not select one maxsimd_* "
                                 f"family")
                continue
            self.job_matchers(where, m.group(1), allow_variable=True)
            if label_re and not any(
                    label == label_re and variable_of(value) == label_re
                    for label, _, value in sel[0][1]):
                self.fail(where, f"{q!r} is not restricted to "
                                 f"{label_re}=~\"${label_re}\"")

    def check_target(self, where, expr):
        self.counts["dashboard"] += 1
        self.job_matchers(where, expr, allow_variable=True)
        sels = selectors(expr)
        for name, matchers in sels:
            if name is None or not FAMILY.fullmatch(name):
                continue
            for label in ("job", "instance"):
                if not any(lab == label and op == "=~" and
                           variable_of(value) == label
                           for lab, op, value in matchers):
                    self.fail(where, f"{name} has no {label}=~\"${label}\"")
        if any(name and re.fullmatch(SHARED, name) for name, _ in sels) and \
                not re.search(r"\band\s+on\s*\(\s*job\s*,\s*instance\s*\)\s*"
                              r"maxsimd_build_info\b", expr):
            self.fail(where, "a process_*/exposer_* query is not limited to "
                             "maxsimd targets (and on (job, instance) "
                             "maxsimd_build_info{...})")

    def check_dashboard(self, path):
        with open(path) as f:
            dash = json.load(f)
        fname = os.path.relpath(path, self.root)
        self.check_variables(fname, dash)

        def walk(panels):
            for p in panels:
                where = f"{fname} panel {p.get('id')} {p.get('title')!r}"
                targets = p.get("targets", [])
                if targets:
                    self.check_datasource(where, p.get("datasource"))
                for t in targets:
                    twhere = f"{where} query {t.get('refId')}"
                    if "datasource" in t:
                        self.check_datasource(twhere, t["datasource"])
                    if t.get("expr"):
                        self.check_target(twhere, t["expr"])
                walk(p.get("panels", []))
        walk(dash.get("panels", []))
        for a in dash.get("annotations", {}).get("list", []):
            if a.get("expr"):
                self.job_matchers(f"{fname} annotation {a.get('name')}",
                                  a["expr"], allow_variable=True)

    def run(self, root):
        self.root = root
        rules = sorted(glob.glob(os.path.join(root, "deploy", "prometheus",
                                              "*.yml")))
        for path in rules:
            self.check_rules(path)
        dashboards = sorted(glob.glob(os.path.join(root, "deploy", "grafana",
                                                   "*.json")))
        if not dashboards:
            self.fail("deploy/grafana", "no dashboard")
        for path in dashboards:
            self.check_dashboard(path)
        if not self.counts["rule"]:
            self.fail("deploy/prometheus", "no rule file")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=REPO_ROOT)
    args = p.parse_args()
    c = Checker()
    try:
        c.run(args.root)
    except (OSError, ValueError, KeyError, TypeError, AttributeError,
            yaml.YAMLError) as e:
        print(f"check_monitoring: cannot check: {e!r}", file=sys.stderr)
        return 2
    for problem in c.problems:
        print(f"check_monitoring: {problem}", file=sys.stderr)
    if c.problems:
        print(f"check_monitoring: FAILED: {len(c.problems)} problem(s)",
              file=sys.stderr)
        return 1
    print(f"check_monitoring: OK: {c.counts['rule']} rule and "
          f"{c.counts['dashboard']} dashboard expressions name no job")
    return 0


if __name__ == "__main__":
    sys.exit(main())
