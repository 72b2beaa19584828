#!/usr/bin/env python3
"""Self-test of deploy/check_live.py: copies of the deployment files with
one mistake each fail against the live server.

    tests/deploy/check_live_test.py MAXSIMD MAXSIMD_HEALTH MAXSIMCTL
"""

import os
import sys
import unittest

from selftest_support import ROOT, BrokenCopyTest

CHECKER = os.path.join(ROOT, "deploy", "check_live.py")
BINARIES = []


class CheckLiveTest(BrokenCopyTest):

    COPY = ("Dockerfile", "deploy")
    TIMEOUT = 300

    def command(self):
        server, health, ctl = BINARIES
        return [sys.executable, CHECKER, "--server", server, "--health",
                health, "--ctl", ctl, "--root", self.tmp]

    def test_alert_on_a_metric_the_server_does_not_export(self):
        self.edit("deploy/prometheus/alerts.yml",
                  "rate(maxsimd_rejected_total[5m])",
                  "rate(maxsimd_rejections_total[5m])")
        self.assert_fails("maxsimd_rejections_total, which the server does "
                          "not export")

    def test_dashboard_typo_and_undocumented_metric(self):
        self.edit("deploy/grafana/maxsimd.json", "maxsimd_queue_bytes{",
                  "maxsimd_queued_bytes{")
        self.edit("deploy/README.md", "| `maxsimd_corpus_segments` |",
                  "| segments |")
        self.assert_fails("maxsimd_queued_bytes",
                          "does not document maxsimd_corpus_segments")

    def test_probe_of_a_service_the_server_does_not_register(self):
        self.edit("deploy/k8s/shards.yaml", "service: maxsimd.v1.Reranker",
                  "service: maxsimd.v1.Search")
        self.assert_fails("'maxsimd.v1.Search'", "NOT_FOUND")

    def test_flagfile_value_the_server_refuses(self):
        self.edit("deploy/k8s/configmap.yaml", "--gpu_workers=4",
                  "--gpu_workers=0")
        self.assert_fails("--gpu_workers must be in [1, 16]")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    BINARIES = sys.argv[1:]
    unittest.main(argv=sys.argv[:1], verbosity=2)
