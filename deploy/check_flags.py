#!/usr/bin/env python3
"""Cross-checks the deployment files against the server binary itself.

    deploy/check_flags.py --server build/server/maxsimd \\
        --health build/client/maxsimd_health [--root REPO]

Reads REPO/Dockerfile, REPO/deploy/k8s/*.yaml, REPO/deploy/compose.yaml and
REPO/deploy/prometheus/*.yml and checks that:
  - every --flag given to maxsimd (Dockerfile CMD, container args, compose
    command, ConfigMap flagfiles) is one `maxsimd --helpfull` lists, and
    every --flag given to maxsimd_health one `maxsimd_health --helpfull`
    lists;
  - every port named (EXPOSE, containerPort, Service targetPort, gRPC
    probes, the HEALTHCHECK's --target, compose ports, scrape targets,
    prometheus.io/port) is the server's gRPC or metrics port: the port of
    --listen / --metrics_listen as the deployment sets them, or their
    defaults from --helpfull;
  - every maxsimd container has gRPC startup, readiness and liveness probes
    on the gRPC port, an nvidia.com/gpu limit, and a termination grace
    period above --drain_timeout plus its preStop sleep (compose: a
    stop_grace_period above --drain_timeout);
  - a StatefulSet's serviceName is a headless Service, and a
    PodDisruptionBudget selects every workload;
  - the alert rules' maxsimd:corpus_budget_bytes equals the ConfigMap's
    --corpus_budget_bytes times --shards_per_device.
Exits 0 when all hold, 1 listing every problem, 2 on a usage error.
Needs PyYAML (python3-yaml, which yamllint depends on).
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_image_deps as dockerfile_parser  # noqa: E402

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.exit("check_flags: needs PyYAML (apt-get install python3-yaml)")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = "maxsimd"
HEALTH = "maxsimd_health"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


# ---------------------------------------------------------------------------
# What the binaries accept


def helpfull(binary):
    """({flag: default text}, full help) of an absl-flags binary."""
    res = subprocess.run([binary, "--helpfull"], capture_output=True,
                         text=True)
    text = res.stdout + res.stderr
    flags = {}
    for m in re.finditer(r"^\s+--([A-Za-z0-9_]+) \(", text, re.M):
        flags[m.group(1)] = None
    for name in flags:
        m = re.search(r"^\s+--" + re.escape(name) + r" \(.*?\);\s+"
                      r"default: (.*?);\s*$", text, re.M | re.S)
        if m:
            flags[name] = m.group(1).strip().strip('"')
    if not flags:
        raise RuntimeError(f"{binary} --helpfull listed no flags:\n{text}")
    return flags


def parse_duration(text):
    """Seconds of an absl duration ("30s", "1m30s", "500ms", "0")."""
    text = text.strip()
    if text in ("0", "inf"):
        return 0.0 if text == "0" else float("inf")
    units = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    total, pos = 0.0, 0
    for m in re.finditer(r"([0-9.]+)(ns|us|ms|s|m|h)", text):
        if m.start() != pos:
            raise ValueError(f"bad duration {text!r}")
        total += float(m.group(1)) * units[m.group(2)]
        pos = m.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"bad duration {text!r}")
    return total


def port_of(address):
    m = re.search(r":(\d+)$", address or "")
    return int(m.group(1)) if m else None


class Checker:
    def __init__(self, server_flags, health_flags):
        self.server_flags = server_flags
        self.health_flags = health_flags
        self.problems = []
        self.default_ports = {
            "grpc": port_of(server_flags.get("listen")),
            "metrics": port_of(server_flags.get("metrics_listen")),
        }
        self.drain_default = parse_duration(
            server_flags.get("drain_timeout") or "30s")
        self.configmaps = {}  # name -> {key: [(flag, value)]}
        self.budget_flags = []  # (where, bytes) of each server's budget
        self.probe_services = set()

    def fail(self, where, message):
        self.problems.append(f"{where}: {message}")

    # -- flags -------------------------------------------------------------

    def parse_flags(self, where, args, known, program):
        """[(name, value)] of `--name=value` / `--name` arguments, each
        checked against `known`."""
        out = []
        for a in args:
            a = str(a)
            if not a.startswith("-"):
                self.fail(where, f"{program} argument {a!r} is not a --flag")
                continue
            name, eq, value = a.lstrip("-").partition("=")
            if name.startswith("no") and name[2:] in known and not eq:
                name = name[2:]  # --nofoo for a boolean
            if name not in known:
                self.fail(where, f"{program} has no flag --{name} "
                                 f"(not in `{program} --helpfull`)")
                continue
            out.append((name, value if eq else "true"))
        return out

    def flagfile_lines(self, where, text):
        args = []
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                args.append(line)
        return self.parse_flags(where, args, self.server_flags, SERVER)

    def effective(self, flags):
        """Ports, drain timeout and budget a server with `flags` runs with."""
        values = dict(flags)
        ports = dict(self.default_ports)
        if "listen" in values:
            ports["grpc"] = port_of(values["listen"])
        if "metrics_listen" in values:
            ports["metrics"] = port_of(values["metrics_listen"])
        drain = self.drain_default
        if "drain_timeout" in values:
            drain = parse_duration(values["drain_timeout"])
        budget = int(values.get("corpus_budget_bytes", "0")) * int(
            values.get("shards_per_device", "1"))
        return ports, drain, budget

    def check_port(self, where, port, ports, what="port"):
        if port not in ports.values():
            self.fail(where, f"{what} {port} is neither the gRPC port "
                             f"{ports['grpc']} nor the metrics port "
                             f"{ports['metrics']}")

    def check_health_command(self, where, argv, ports):
        """A maxsimd_health command line: its flags and --target port."""
        if not argv or os.path.basename(argv[0]) != HEALTH:
            self.fail(where, f"health check runs {argv[:1]}, not {HEALTH}")
            return
        flags = dict(self.parse_flags(where, argv[1:], self.health_flags,
                                      HEALTH))
        target = flags.get("target", self.health_flags.get("target"))
        if port_of(target) != ports["grpc"]:
            self.fail(where, f"{HEALTH} --target={target} is not the gRPC "
                             f"port {ports['grpc']}")
        self.probe_services.add(flags.get("service", ""))

    # -- Dockerfile ----------------------------------------------------------

    def check_dockerfile(self, path):
        with open(path) as f:
            stages = dockerfile_parser.parse_stages(f.read())
        runtime = stages[-1]
        where = os.path.basename(path)
        entry, cmd, exposed, health, env, user = None, [], [], None, {}, None
        for instruction, rest in runtime[2]:
            if instruction == "ENTRYPOINT":
                entry = json.loads(rest)
            elif instruction == "CMD":
                cmd = json.loads(rest)
            elif instruction == "EXPOSE":
                exposed += [int(p.split("/")[0]) for p in rest.split()]
            elif instruction == "HEALTHCHECK":
                health = rest
            elif instruction == "USER":
                user = rest.split(":")[0]
        env = dockerfile_parser.stage_env(runtime)
        if not entry or os.path.basename(entry[0]) != SERVER:
            self.fail(where, f"ENTRYPOINT must be exec form running {SERVER}")
            entry = [SERVER]
        flags = self.parse_flags(f"{where} ENTRYPOINT/CMD", entry[1:] + cmd,
                                 self.server_flags, SERVER)
        ports, _, _ = self.effective(flags)
        if sorted(exposed) != sorted(set(ports.values())):
            self.fail(where, f"EXPOSE {exposed} is not the gRPC and metrics "
                             f"ports {sorted(ports.values())}")
        if health is None or " CMD " not in f" {health} ":
            self.fail(where, "no HEALTHCHECK CMD")
        else:
            exec_form = health.split(" CMD ", 1)[1] if " CMD " in health \
                else health.split("CMD ", 1)[1]
            self.check_health_command(f"{where} HEALTHCHECK",
                                      json.loads(exec_form), ports)
        if user in (None, "0", "root"):
            self.fail(where, "the runtime stage runs as root (USER)")
        if "NVIDIA_VISIBLE_DEVICES" not in env:
            self.fail(where, "no ENV NVIDIA_VISIBLE_DEVICES")
        caps = env.get("NVIDIA_DRIVER_CAPABILITIES", "").split(",")
        if not {"compute", "utility"} <= set(caps):
            self.fail(where, "NVIDIA_DRIVER_CAPABILITIES must include "
                             "compute,utility")

    # -- Kubernetes ----------------------------------------------------------

    def load_k8s(self, paths):
        docs = []
        for path in paths:
            with open(path) as f:
                for doc in yaml.safe_load_all(f):
                    if isinstance(doc, dict) and "kind" in doc:
                        docs.append((os.path.basename(path), doc))
        for fname, doc in docs:
            if doc["kind"] == "ConfigMap":
                name = doc["metadata"]["name"]
                self.configmaps[name] = {}
                for key, text in (doc.get("data") or {}).items():
                    if key.endswith(".flags"):
                        self.configmaps[name][key] = self.flagfile_lines(
                            f"{fname} ConfigMap {name} {key}", text)
        return docs

    def runs_server(self, container):
        command = container.get("command")
        if command:
            return os.path.basename(str(command[0])) == SERVER
        return SERVER in container.get("image", "").split("/")[-1]

    def check_workload(self, fname, doc, services):
        kind, name = doc["kind"], doc["metadata"]["name"]
        spec = doc["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        servers = [c for c in spec.get("containers", [])
                   if self.runs_server(c)]
        if not servers:
            self.fail(f"{fname} {kind} {name}", f"no container runs {SERVER}")
        for c in spec.get("initContainers", []):
            if self.runs_server(c):
                self.fail(f"{fname} {kind} {name}",
                          f"init container {c['name']} runs {SERVER}")
        annotations = doc["spec"]["template"].get("metadata", {}).get(
            "annotations", {})
        for c in servers:
            where = f"{fname} {kind} {name} container {c['name']}"
            args = list(c.get("command", [])[1:]) + list(c.get("args", []))
            flags = []
            for fname_flag, value in self.parse_flags(
                    where, args, self.server_flags, SERVER):
                if fname_flag == "flagfile":
                    flags += self.resolve_flagfile(where, value, c, volumes)
                flags.append((fname_flag, value))
            ports, drain, budget = self.effective(flags)
            self.budget_flags.append((where, budget))
            names = {}
            for p in c.get("ports", []):
                self.check_port(where, p["containerPort"], ports,
                                "containerPort")
                if p.get("name") in ports and \
                        p["containerPort"] != ports[p["name"]]:
                    self.fail(where, f"port named {p['name']} is "
                                     f"{p['containerPort']}, not "
                                     f"{ports[p['name']]}")
                names[p.get("name")] = p["containerPort"]
            if set(ports.values()) - {p["containerPort"]
                                      for p in c.get("ports", [])}:
                self.fail(where, f"containerPorts do not list both ports "
                                 f"{sorted(ports.values())}")
            for probe in PROBES:
                grpc = c.get(probe, {}).get("grpc")
                if grpc is None:
                    self.fail(where, f"no gRPC {probe}")
                    continue
                if grpc.get("port") != ports["grpc"]:
                    self.fail(where, f"{probe} port {grpc.get('port')} is "
                                     f"not the gRPC port {ports['grpc']}")
                self.probe_services.add(grpc.get("service", ""))
            gpus = c.get("resources", {}).get("limits", {}).get(
                "nvidia.com/gpu")
            if not gpus or int(gpus) < 1:
                self.fail(where, "no nvidia.com/gpu limit")
            grace = spec.get("terminationGracePeriodSeconds", 30)
            sleep = prestop_sleep(c)
            if grace <= drain + sleep:
                self.fail(where, f"terminationGracePeriodSeconds {grace} is "
                                 f"not above --drain_timeout ({drain:g}s) "
                                 f"plus the preStop sleep ({sleep:g}s)")
            if "prometheus.io/port" in annotations and \
                    int(annotations["prometheus.io/port"]) != \
                    ports["metrics"]:
                self.fail(where, f"prometheus.io/port "
                                 f"{annotations['prometheus.io/port']} is "
                                 f"not the metrics port {ports['metrics']}")
            labels = doc["spec"]["template"]["metadata"].get("labels", {})
            for sname, svc in services.items():
                sel = svc["spec"].get("selector") or {}
                if sel and sel.items() <= labels.items():
                    for sp in svc["spec"].get("ports", []):
                        target = sp.get("targetPort", sp.get("port"))
                        swhere = f"Service {sname} port {sp.get('name')}"
                        if isinstance(target, str):
                            if target not in names:
                                self.fail(swhere, f"targetPort {target!r} "
                                          f"names no port of {where}")
                                continue
                            target = names[target]
                        self.check_port(swhere, target, ports, "targetPort")
                        if sp.get("port") != target:
                            self.fail(swhere, f"port {sp.get('port')} "
                                              f"differs from its target "
                                              f"{target}")
        if kind == "StatefulSet":
            svc = services.get(doc["spec"].get("serviceName"))
            if svc is None or svc["spec"].get("clusterIP") != "None":
                self.fail(f"{fname} {kind} {name}",
                          f"serviceName {doc['spec'].get('serviceName')!r} "
                          f"is not a headless Service")

    def resolve_flagfile(self, where, path, container, volumes):
        for m in container.get("volumeMounts", []):
            mount = m["mountPath"].rstrip("/")
            if os.path.dirname(path) != mount:
                continue
            cm = volumes.get(m["name"], {}).get("configMap")
            if cm is None:
                break
            flags = self.configmaps.get(cm["name"], {}).get(
                os.path.basename(path))
            if flags is None:
                self.fail(where, f"--flagfile={path}: ConfigMap "
                                 f"{cm['name']} has no key "
                                 f"{os.path.basename(path)}")
                return []
            return flags
        self.fail(where, f"--flagfile={path} is not in a mounted ConfigMap")
        return []

    def check_k8s(self, paths):
        docs = self.load_k8s(paths)
        services = {d["metadata"]["name"]: d for _, d in docs
                    if d["kind"] == "Service"}
        workloads = [(f, d) for f, d in docs if d["kind"] in WORKLOAD_KINDS]
        if not workloads:
            self.fail("deploy/k8s", "no Deployment or StatefulSet")
        for fname, doc in workloads:
            self.check_workload(fname, doc, services)
        pdbs = [d for _, d in docs if d["kind"] == "PodDisruptionBudget"]
        for fname, doc in workloads:
            labels = doc["spec"]["template"]["metadata"].get("labels", {})
            if not any(p["spec"]["selector"]["matchLabels"].items() <=
                       labels.items() for p in pdbs):
                self.fail(f"{fname} {doc['kind']} {doc['metadata']['name']}",
                          "no PodDisruptionBudget selects its pods")
        for fname, doc in docs:
            if doc["kind"] != "PodMonitor":
                continue
            ports_named = {p.get("name") for _, w in workloads
                           for c in w["spec"]["template"]["spec"][
                               "containers"] for p in c.get("ports", [])}
            for ep in doc["spec"].get("podMetricsEndpoints", []):
                if ep.get("port") != "metrics" or "metrics" not in \
                        ports_named:
                    self.fail(f"{fname} PodMonitor",
                              f"endpoint port {ep.get('port')!r} is not the "
                              f"containers' port named metrics")

    # -- compose -------------------------------------------------------------

    def check_compose(self, path):
        with open(path) as f:
            compose = yaml.safe_load(f)
        fname = os.path.basename(path)
        found = False
        for sname, svc in (compose.get("services") or {}).items():
            image = str(svc.get("image", ""))
            if SERVER not in image.split("/")[-1].split(":")[0] and \
                    "build" not in svc:
                continue
            found = True
            where = f"{fname} service {sname}"
            command = svc.get("command", [])
            if isinstance(command, str):
                self.fail(where, "command must be a list (exec form)")
                command = command.split()
            flags = self.parse_flags(where, command, self.server_flags,
                                     SERVER)
            ports, drain, _ = self.effective(flags)
            for p in svc.get("ports", []):
                container = int(str(p).split(":")[-1].split("/")[0])
                self.check_port(where, container, ports, "container port")
            test = (svc.get("healthcheck") or {}).get("test")
            if not test:
                self.fail(where, "no healthcheck")
            elif test[0] != "CMD":
                self.fail(where, "healthcheck test must be [\"CMD\", ...]")
            else:
                self.check_health_command(f"{where} healthcheck", test[1:],
                                          ports)
            grace = parse_duration(str(svc.get("stop_grace_period", "10s")))
            if grace <= drain:
                self.fail(where, f"stop_grace_period {grace:g}s is not above "
                                 f"--drain_timeout ({drain:g}s)")
        if not found:
            self.fail(fname, f"no service runs {SERVER}")

    # -- Prometheus ----------------------------------------------------------

    def check_prometheus(self, config_paths, rules_path):
        for path in config_paths:
            with open(path) as f:
                config = yaml.safe_load(f)
            for job in config.get("scrape_configs", []):
                if job.get("job_name") != SERVER:
                    continue
                for sc in job.get("static_configs", []):
                    for target in sc.get("targets", []):
                        if port_of(target) != self.default_ports["metrics"]:
                            self.fail(f"{os.path.basename(path)} job "
                                      f"{SERVER}",
                                      f"target {target} is not the metrics "
                                      f"port {self.default_ports['metrics']}")
        with open(rules_path) as f:
            rules = yaml.safe_load(f)
        recorded = None
        for group in rules.get("groups", []):
            for rule in group.get("rules", []):
                if rule.get("record") == "maxsimd:corpus_budget_bytes":
                    m = re.fullmatch(r"\s*vector\(\s*(\d+)\s*\)\s*",
                                     rule["expr"])
                    recorded = int(m.group(1)) if m else None
        budgets = {b for _, b in self.budget_flags}
        where = os.path.basename(rules_path)
        if recorded is None:
            self.fail(where, "no recording rule maxsimd:corpus_budget_bytes "
                             "= vector(BYTES)")
        elif budgets != {recorded}:
            self.fail(where, f"maxsimd:corpus_budget_bytes is {recorded}, "
                             f"the manifests' --corpus_budget_bytes x "
                             f"--shards_per_device is "
                             f"{sorted(budgets) or 'unset'}")


def prestop_sleep(container):
    pre = container.get("lifecycle", {}).get("preStop", {})
    if "sleep" in pre:
        return float(pre["sleep"].get("seconds", 0))
    command = pre.get("exec", {}).get("command", [])
    if command and os.path.basename(str(command[0])) == "sleep":
        return parse_duration(str(command[1]) if re.search(
            r"[a-z]$", str(command[1])) else f"{command[1]}s")
    return 0.0


def probe_services(root, server, health):
    """The health service names the deployment files probe."""
    c = run(root, server, health)
    return sorted(c.probe_services)


def run(root, server, health):
    c = Checker(helpfull(server), helpfull(health))
    c.check_dockerfile(os.path.join(root, "Dockerfile"))
    c.check_k8s(sorted(glob.glob(os.path.join(root, "deploy", "k8s",
                                              "*.yaml"))))
    c.check_compose(os.path.join(root, "deploy", "compose.yaml"))
    c.check_prometheus(
        sorted(glob.glob(os.path.join(root, "deploy", "prometheus",
                                      "prometheus*.yml"))),
        os.path.join(root, "deploy", "prometheus", "alerts.yml"))
    return c


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", required=True, help="the maxsimd binary")
    p.add_argument("--health", required=True,
                   help="the maxsimd_health binary")
    p.add_argument("--root", default=REPO_ROOT)
    args = p.parse_args()
    try:
        c = run(args.root, args.server, args.health)
    except (OSError, RuntimeError, ValueError, KeyError, TypeError,
            yaml.YAMLError, json.JSONDecodeError,
            dockerfile_parser.DockerfileError) as e:
        print(f"check_flags: cannot check: {e!r}", file=sys.stderr)
        return 2
    for problem in c.problems:
        print(f"check_flags: {problem}", file=sys.stderr)
    if c.problems:
        print(f"check_flags: FAILED: {len(c.problems)} problem(s)",
              file=sys.stderr)
        return 1
    print(f"check_flags: OK: {len(c.server_flags)} server flags, ports "
          f"{c.default_ports}, probes of services "
          f"{sorted(c.probe_services)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
