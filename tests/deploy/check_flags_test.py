#!/usr/bin/env python3
"""Self-test of deploy/check_flags.py: the repository's deployment files
pass, and a copy with one mistake (an unknown flag, a wrong port, a short
grace period, ...) fails naming it.

    tests/deploy/check_flags_test.py MAXSIMD_BINARY MAXSIMD_HEALTH_BINARY
"""

import os
import sys
import unittest

from selftest_support import ROOT, BrokenCopyTest

CHECKER = os.path.join(ROOT, "deploy", "check_flags.py")
SERVER = HEALTH = None


class CheckFlagsTest(BrokenCopyTest):

    COPY = ("Dockerfile", "deploy")

    def command(self):
        return [sys.executable, CHECKER, "--server", SERVER, "--health",
                HEALTH, "--root", self.tmp]

    def test_repository_files_pass(self):
        code, out = self.check()
        self.assertEqual(code, 0, out)
        self.assertIn("maxsimd.v1.Reranker", out)

    def test_unknown_flag_in_configmap_flagfile(self):
        self.edit("deploy/k8s/configmap.yaml", "    --log_level=info\n",
                  "    --log_level=info\n    --no_such_flag=1\n")
        self.assert_fails("ConfigMap maxsimd-flags maxsimd.flags",
                          "no flag --no_such_flag")

    def test_misspelled_flag_in_configmap_flagfile(self):
        self.edit("deploy/k8s/configmap.yaml", "--drain_timeout=30s",
                  "--drain_timout=30s")
        self.assert_fails("no flag --drain_timout")

    def test_unknown_flag_in_container_args(self):
        self.edit("deploy/k8s/shards.yaml",
                  "            - --flagfile=/etc/maxsimd/maxsimd.flags\n",
                  "            - --flagfile=/etc/maxsimd/maxsimd.flags\n"
                  "            - --shards=4\n")
        self.assert_fails("StatefulSet maxsimd-shard", "no flag --shards")

    def test_flagfile_outside_a_mounted_configmap(self):
        self.edit("deploy/k8s/replicas.yaml",
                  "--flagfile=/etc/maxsimd/maxsimd.flags",
                  "--flagfile=/etc/other/maxsimd.flags")
        self.assert_fails("not in a mounted ConfigMap")

    def test_unknown_flag_in_dockerfile_cmd(self):
        self.edit("Dockerfile", '"--data_dir=/var/lib/maxsimd/data"',
                  '"--datadir=/var/lib/maxsimd/data"')
        self.assert_fails("Dockerfile ENTRYPOINT/CMD", "no flag --datadir")

    def test_unknown_flag_in_healthcheck(self):
        self.edit("Dockerfile", '"--timeout=4s"]', '"--deadline=4s"]')
        self.assert_fails("HEALTHCHECK", "maxsimd_health has no flag "
                                         "--deadline")

    def test_unknown_flag_in_compose_command(self):
        self.edit("deploy/compose.yaml", "      - --drain_timeout=30s\n",
                  "      - --drain_timeout=30s\n      - --gpus=all\n")
        self.assert_fails("compose.yaml service maxsimd", "no flag --gpus")

    def test_wrong_container_port(self):
        self.edit("deploy/k8s/replicas.yaml", "containerPort: 9464",
                  "containerPort: 9465")
        self.assert_fails("containerPort 9465")

    def test_wrong_probe_port(self):
        self.edit("deploy/k8s/shards.yaml",
                  "          readinessProbe:\n            grpc:\n"
                  "              port: 50051",
                  "          readinessProbe:\n            grpc:\n"
                  "              port: 50052")
        self.assert_fails("readinessProbe port 50052")

    def test_missing_probe(self):
        self.edit("deploy/k8s/replicas.yaml", "          startupProbe:\n",
                  "          startupProbeDisabled:\n")
        self.assert_fails("no gRPC startupProbe")

    def test_listen_port_moved_without_the_manifests(self):
        self.edit("deploy/k8s/configmap.yaml", "--listen=0.0.0.0:50051",
                  "--listen=0.0.0.0:50061")
        self.assert_fails("is not the gRPC port 50061")

    def test_wrong_expose(self):
        self.edit("Dockerfile", "EXPOSE 50051 9464", "EXPOSE 50051 9090")
        self.assert_fails("EXPOSE")

    def test_healthcheck_on_the_metrics_port(self):
        self.edit("Dockerfile", '"--target=127.0.0.1:50051"',
                  '"--target=127.0.0.1:9464"')
        self.assert_fails("--target=127.0.0.1:9464 is not the gRPC port")

    def test_wrong_compose_port(self):
        self.edit("deploy/compose.yaml", '"9464:9464"', '"9464:9465"')
        self.assert_fails("container port 9465")

    def test_wrong_scrape_target(self):
        self.edit("deploy/prometheus/prometheus.yml", '"maxsimd:9464"',
                  '"maxsimd:50051"')
        self.assert_fails("target maxsimd:50051")

    def test_grace_period_not_above_the_drain(self):
        self.edit("deploy/k8s/configmap.yaml", "--drain_timeout=30s",
                  "--drain_timeout=60s")
        self.assert_fails("terminationGracePeriodSeconds 45",
                          "--drain_timeout (60s)")

    def test_compose_grace_period_not_above_the_drain(self):
        self.edit("deploy/compose.yaml", "stop_grace_period: 40s",
                  "stop_grace_period: 30s")
        self.assert_fails("stop_grace_period 30s")

    def test_budget_alert_out_of_step_with_the_flag(self):
        self.edit("deploy/k8s/configmap.yaml",
                  "--corpus_budget_bytes=64424509440",
                  "--corpus_budget_bytes=32212254720")
        self.assert_fails("maxsimd:corpus_budget_bytes is 64424509440")

    def test_statefulset_needs_a_headless_service(self):
        self.edit("deploy/k8s/shards.yaml", "  clusterIP: None\n", "")
        self.assert_fails("is not a headless Service")

    def test_workload_without_disruption_budget(self):
        self.edit("deploy/k8s/shards.yaml", "kind: PodDisruptionBudget",
                  "kind: NotAPodDisruptionBudget")
        self.assert_fails("no PodDisruptionBudget selects its pods")

    def test_root_user(self):
        self.edit("Dockerfile", "USER 10001:10001", "USER root")
        self.assert_fails("runs as root")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    SERVER, HEALTH = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
