#!/usr/bin/env python3
"""Self-test of deploy/check_live.py: copies of the deployment files with
one mistake each fail against the live server.

    tests/deploy/check_live_test.py MAXSIMD MAXSIMD_HEALTH MAXSIMCTL
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
CHECKER = os.path.join(ROOT, "deploy", "check_live.py")
BINARIES = []


class CheckLiveTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="check_live_test_")
        shutil.copy(os.path.join(ROOT, "Dockerfile"), self.tmp)
        shutil.copytree(os.path.join(ROOT, "deploy"),
                        os.path.join(self.tmp, "deploy"))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def edit(self, rel, old, new):
        path = os.path.join(self.tmp, rel)
        with open(path) as f:
            text = f.read()
        self.assertIn(old, text, f"{rel} no longer contains {old!r}")
        with open(path, "w") as f:
            f.write(text.replace(old, new, 1))

    def check(self):
        server, health, ctl = BINARIES
        res = subprocess.run(
            [sys.executable, CHECKER, "--server", server, "--health", health,
             "--ctl", ctl, "--root", self.tmp],
            capture_output=True, text=True, timeout=300)
        return res.returncode, res.stdout + res.stderr

    def test_alert_on_a_metric_the_server_does_not_export(self):
        self.edit("deploy/prometheus/alerts.yml",
                  "rate(maxsimd_rejected_total[5m])",
                  "rate(maxsimd_rejections_total[5m])")
        code, out = self.check()
        self.assertEqual(code, 1, out)
        self.assertIn("maxsimd_rejections_total, which the server does not "
                      "export", out)

    def test_dashboard_typo_and_undocumented_metric(self):
        self.edit("deploy/grafana/maxsimd.json", "maxsimd_queue_bytes{",
                  "maxsimd_queued_bytes{")
        self.edit("deploy/README.md", "| `maxsimd_corpus_segments` |",
                  "| segments |")
        code, out = self.check()
        self.assertEqual(code, 1, out)
        self.assertIn("maxsimd_queued_bytes", out)
        self.assertIn("does not document maxsimd_corpus_segments", out)

    def test_probe_of_a_service_the_server_does_not_register(self):
        self.edit("deploy/k8s/shards.yaml", "service: maxsimd.v1.Reranker",
                  "service: maxsimd.v1.Search")
        code, out = self.check()
        self.assertEqual(code, 1, out)
        self.assertIn("'maxsimd.v1.Search'", out)
        self.assertIn("NOT_FOUND", out)

    def test_flagfile_value_the_server_refuses(self):
        self.edit("deploy/k8s/configmap.yaml", "--gpu_workers=4",
                  "--gpu_workers=0")
        code, out = self.check()
        self.assertEqual(code, 1, out)
        self.assertIn("--gpu_workers must be in [1, 16]", out)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    BINARIES = sys.argv[1:]
    unittest.main(argv=sys.argv[:1], verbosity=2)
