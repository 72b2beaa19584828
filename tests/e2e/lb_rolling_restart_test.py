#!/usr/bin/env python3
"""A rolling restart of two maxsimd replicas behind HAProxy, under load.

Two replicas (CPU backend, a synthetic corpus) sit behind HAProxy run with
the shipped deploy/lb/haproxy.cfg, which takes each replica in and out by
its grpc.health.v1 status. bench/loadgen sends a steady open-loop Rerank
load through HAProxy while the test restarts the replicas one after the
other: SIGTERM, wait for exit status 0, start it again on the same port,
wait until HAProxy has it UP again. Then it checks that every request sent
was answered OK, and prints "sent N answered N failed 0".

What makes that hold is the drain. The replicas hold each query up to
--max_queue_delay for a fuller batch, and each signal is sent while the
replica has queries queued, so calls are in flight at every stop. On
SIGTERM a replica turns NOT_SERVING and keeps answering for --drain_grace;
HAProxy's check sees NOT_SERVING and takes it out (the test checks that
this happened on that answer, L7RSP, while the process still ran); then
the replica stops listening and finishes the calls it took. HAProxy never
replays a call that reached a replica.

--stop_signal=KILL --expect_failures is the negative control: the same
restart without a drain must fail requests (those the killed replica had
taken), which shows the zero above is the drain's doing and that the test
can fail.

Exit status 0 when every check holds, 1 otherwise.
"""

import argparse
import csv
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SHIPPED_CONFIG = os.path.join(REPO, "deploy", "lb", "haproxy.cfg")
HEALTH_CHECK_SCRIPT = os.path.join(REPO, "deploy", "lb",
                                   "make_health_check.py")


class TestFailure(Exception):
    pass


def free_ports(n):
    """n distinct free loopback ports (held open together while chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def http_get(port, path, timeout=2.0):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}",
                                timeout=timeout) as r:
        return r.read().decode()


def wait_until(what, predicate, timeout_s, interval_s=0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise TestFailure(f"timed out after {timeout_s:g} s waiting for {what}")


class Replica:
    """One maxsimd process on fixed ports, restartable on the same ports."""

    def __init__(self, name, args, port, metrics_port, work):
        self.name = name
        self.args = args
        self.port = port
        self.metrics_port = metrics_port
        self.log_path = os.path.join(work, f"{name}.log")
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        log = open(self.log_path, "a", encoding="utf-8")
        log.write(f"--- start {self.starts}\n")
        log.flush()
        self.proc = subprocess.Popen(
            self.args + [f"--listen=127.0.0.1:{self.port}",
                         f"--metrics_listen=127.0.0.1:{self.metrics_port}"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s):
        """SIGTERM, then the exit status (SIGKILL past timeout_s)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise TestFailure(f"{self.name} did not exit within {timeout_s} s "
                              "of SIGTERM")

    def kill(self):
        if self.running():
            self.proc.kill()
            self.proc.wait()

    def metric(self, name, *labels):
        """Sum of the samples of `name` whose labels include all `labels`."""
        text = http_get(self.metrics_port, "/metrics")
        total = 0.0
        for line in text.splitlines():
            if (line.startswith(name + "{") or line.startswith(name + " ")) \
                    and all(label in line for label in labels):
                total += float(line.rsplit(" ", 1)[1])
        return int(total)

    def rerank_ok(self):
        """Rerank calls answered OK since the process started."""
        return self.metric("maxsimd_requests_total", 'method="Rerank"',
                           'code="OK"')

    def queued(self):
        """Queries waiting for a batch now."""
        return self.metric("maxsimd_queue_depth")

    def log_text(self):
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()


class HAProxy:
    def __init__(self, binary, config, env, stats_port, work):
        self.stats_port = stats_port
        self.log_path = os.path.join(work, "haproxy.log")
        self.env = dict(os.environ, **env)
        self.args = [binary, "-db", "-f", config]
        self.proc = None

    def check_config(self):
        r = subprocess.run(self.args + ["-c"], env=self.env,
                           capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise TestFailure("haproxy -c rejects the shipped config:\n" +
                              r.stdout + r.stderr)

    def start(self):
        log = open(self.log_path, "w", encoding="utf-8")
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=log,
                                     stderr=subprocess.STDOUT)
        log.close()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def servers(self):
        """{server name: (status, last check status)} of backend maxsimd."""
        try:
            text = http_get(self.stats_port, "/stats;csv")
        except OSError:
            return {}
        rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
        return {r["svname"]: (r["status"], r["check_status"]) for r in rows
                if r["pxname"] == "maxsimd" and r["svname"] in ("r1", "r2")}

    def status(self, server):
        return self.servers().get(server, ("?", "?"))

    def log_text(self):
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()


def run(args, work):
    started = time.monotonic()
    haproxy_bin = shutil.which(args.haproxy)
    if haproxy_bin is None:
        raise TestFailure(f"{args.haproxy} not found: install Debian's "
                          "haproxy package (scripts/install_deps.sh)")
    # The health check lines of the shipped config are the generator's.
    r = subprocess.run([sys.executable, HEALTH_CHECK_SCRIPT, "--check",
                        args.config], capture_output=True, text=True,
                       check=False)
    if r.returncode != 0:
        raise TestFailure("deploy/lb/haproxy.cfg's health check differs from "
                          "make_health_check.py's:\n" + r.stderr)

    lb_port, stats_port, p1, p2, m1, m2 = free_ports(6)
    server_args = [args.maxsimd, "--cpu", "--cpu_threads=1", "--executors=2",
                   "--rerank_queues=2", "--compaction_interval=0",
                   f"--demo_corpus=demo:{args.docs}:32:64",
                   f"--max_queue_delay={args.max_queue_delay}",
                   f"--drain_grace={args.drain_grace}",
                   "--drain_timeout=10s"]
    stop_signal = getattr(signal, "SIG" + args.stop_signal)
    expect_l7rsp = (stop_signal == signal.SIGTERM and
                    args.drain_grace not in ("0", "0s"))
    replicas = [Replica("r1", server_args, p1, m1, work),
                Replica("r2", server_args, p2, m2, work)]
    haproxy = HAProxy(haproxy_bin, args.config, {
        "MAXSIMD_LB_BIND": f"127.0.0.1:{lb_port}",
        "MAXSIMD_LB_STATS_BIND": f"127.0.0.1:{stats_port}",
        "MAXSIMD_REPLICA_1": f"127.0.0.1:{p1}",
        "MAXSIMD_REPLICA_2": f"127.0.0.1:{p2}",
    }, stats_port, work)
    load = None
    try:
        haproxy.check_config()
        for replica in replicas:
            replica.start()
        haproxy.start()
        for replica in replicas:
            wait_until(f"haproxy to see {replica.name} UP",
                       lambda r=replica: haproxy.status(r.name)[0] == "UP",
                       60)
        print(f"two replicas UP behind haproxy after "
              f"{time.monotonic() - started:.1f} s", flush=True)

        load_json = os.path.join(work, "load.json")
        load_log = open(os.path.join(work, "loadgen.log"), "w",
                        encoding="utf-8")
        load = subprocess.Popen(
            [args.loadgen, f"--target=127.0.0.1:{lb_port}", "--corpus=demo",
             "--mode=open", f"--rate={args.rate}", "--senders=1",
             "--channels=2", "--candidates=64", "--query_tokens=8",
             "--top_k=10", "--timeout=10s", "--warmup=0s",
             f"--duration={args.load_seconds}s", "--max_outstanding=2000",
             f"--json={load_json}"],
            stdout=load_log, stderr=subprocess.STDOUT)
        load_log.close()
        load_started = time.monotonic()

        def load_running():
            return load.poll() is None

        # Calls reach both replicas before the restart begins.
        wait_until("both replicas to answer calls",
                   lambda: all(r.rerank_ok() > 0 for r in replicas), 20)
        time.sleep(1.0)
        for replica in replicas:
            before = replica.rerank_ok()
            # Stop it while it holds queued calls: they must be answered.
            wait_until(f"{replica.name} to hold queued calls",
                       lambda r=replica: r.queued() > 0, 20, 0.005)
            t0 = time.monotonic()
            replica.proc.send_signal(stop_signal)
            # HAProxy takes the replica out; with a drain grace it does so on
            # the NOT_SERVING answer while the replica still runs.
            wait_until(f"haproxy to take {replica.name} out",
                       lambda r=replica: haproxy.status(r.name)[0] == "DOWN",
                       30, 0.02)
            out_at = time.monotonic() - t0
            still_running = replica.running()
            down_check = haproxy.status(replica.name)[1]
            try:
                code = replica.proc.wait(timeout=args.stop_timeout)
            except subprocess.TimeoutExpired:
                replica.kill()
                raise TestFailure(f"{replica.name} did not exit within "
                                  f"{args.stop_timeout} s of the signal")
            stopped_at = time.monotonic() - t0
            if code != (0 if stop_signal == signal.SIGTERM else -stop_signal):
                raise TestFailure(f"{replica.name} exited {code} after "
                                  f"SIG{args.stop_signal}")
            print(f"{replica.name}: {before} calls answered, SIG"
                  f"{args.stop_signal} with calls queued; haproxy took it out "
                  f"after {out_at:.2f} s (check {down_check}, process "
                  f"{'running' if still_running else 'gone'}), exit {code} "
                  f"after {stopped_at:.2f} s", flush=True)
            if expect_l7rsp and (not still_running or
                                 not down_check.endswith("L7RSP")):
                raise TestFailure(
                    f"haproxy took {replica.name} out on check "
                    f"{down_check!r} with the process "
                    f"{'running' if still_running else 'gone'}: expected its "
                    "NOT_SERVING answer (L7RSP) during the drain grace")
            if not load_running():
                raise TestFailure("the load ended before the restart did: "
                                  "raise --load_seconds")
            replica.start()
            wait_until(f"haproxy to see the restarted {replica.name} UP",
                       lambda r=replica: haproxy.status(r.name)[0] == "UP",
                       60)
            print(f"{replica.name}: restarted, UP after "
                  f"{time.monotonic() - t0:.2f} s", flush=True)
            # The restarted replica takes calls again while the load runs.
            wait_until(f"the restarted {replica.name} to answer calls",
                       lambda r=replica: r.rerank_ok() > 0, 20)
        after_restart = {r.name: r.rerank_ok() for r in replicas}
        if not load_running():
            raise TestFailure("the load ended before the restart did: raise "
                              "--load_seconds")
        restart_done = time.monotonic() - load_started
        wait_until("the load to end", lambda: not load_running(),
                   args.load_seconds + 60, 0.1)
        if load.returncode != 0:
            raise TestFailure(f"loadgen exited {load.returncode}")
        with open(load_json, encoding="utf-8") as f:
            point = json.load(f)["points"][0]
    finally:
        if load is not None and load.poll() is None:
            load.kill()
            load.wait()
        haproxy.stop()
        for replica in replicas:
            replica.kill()

    sent = point["sent"] + point["not_sent"]
    answered = point["ok"]
    failed = sent - answered
    print(f"restart of both replicas done {restart_done:.1f} s into "
          f"{args.load_seconds} s of load at {args.rate:g} requests/s; calls "
          f"answered by each since its restart: {after_restart}")
    print(f"status codes: {point['status_codes']}, not sent: "
          f"{point['not_sent']}, p99 {point['latency_ms']['p99']:.1f} ms, "
          f"max {point['latency_ms']['max']:.1f} ms")
    print(f"sent {sent} answered {answered} failed {failed}", flush=True)
    if sent < args.rate * args.load_seconds * 0.5:
        raise TestFailure(f"only {sent} requests sent: the load did not run")
    if args.expect_failures:
        if failed == 0:
            raise TestFailure(
                f"SIG{args.stop_signal}, --drain_grace={args.drain_grace}: no "
                "request failed, yet this restart should fail some")
        print(f"negative control: SIG{args.stop_signal}, --drain_grace="
              f"{args.drain_grace}: {failed} requests failed, as expected")
    elif failed != 0 or answered != sent:
        raise TestFailure(f"{failed} of {sent} requests failed")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--maxsimd", required=True, help="server binary")
    parser.add_argument("--loadgen", required=True,
                        help="bench/loadgen binary")
    parser.add_argument("--haproxy", default="haproxy")
    parser.add_argument("--config", default=SHIPPED_CONFIG)
    parser.add_argument("--drain_grace", default="3s",
                        help="the replicas' --drain_grace "
                             "(default %(default)s)")
    parser.add_argument("--stop_signal", default="TERM",
                        choices=["TERM", "KILL"],
                        help="how each replica is stopped (KILL: no drain)")
    parser.add_argument("--expect_failures", action="store_true",
                        help="negative control: require failed requests")
    parser.add_argument("--max_queue_delay", default="50ms",
                        help="the replicas' batching window, which keeps "
                             "calls in flight (default %(default)s)")
    parser.add_argument("--rate", type=float, default=200,
                        help="offered Rerank calls per second")
    parser.add_argument("--load_seconds", type=int, default=25)
    parser.add_argument("--docs", type=int, default=2000,
                        help="documents of the synthetic corpus")
    parser.add_argument("--stop_timeout", type=float, default=30,
                        help="most seconds a replica may take to exit")
    parser.add_argument("--keep", action="store_true",
                        help="keep the logs' directory")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="lb_rolling_restart.")
    try:
        run(args, work)
    except TestFailure as e:
        print(f"FAILED: {e}", file=sys.stderr)
        for name in ("haproxy.log", "r1.log", "r2.log", "loadgen.log"):
            path = os.path.join(work, name)
            if os.path.exists(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    tail = f.read().splitlines()[-25:]
                print(f"--- {name} (last {len(tail)} lines)", file=sys.stderr)
                print("\n".join(tail), file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"logs in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
