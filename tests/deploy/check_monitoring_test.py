#!/usr/bin/env python3
"""Self-test of deploy/check_monitoring.py and of the rule tests under
another job: the repository's rules and dashboard pass, a copy with one
job-bound expression (a rule or query naming job="maxsimd", a query
without $instance, a variable not bound to $job, ...) fails naming it, and
`promtool test rules` of alerts_job_test.yml fails on rules that select
job="maxsimd".

    tests/deploy/check_monitoring_test.py PROMTOOL
"""

import os
import sys
import unittest

from selftest_support import ROOT, BrokenCopyTest, run

CHECKER = os.path.join(ROOT, "deploy", "check_monitoring.py")
RULES = "deploy/prometheus/alerts.yml"
DASHBOARD = "deploy/grafana/maxsimd.json"
PROMTOOL = None


class CheckMonitoringTest(BrokenCopyTest):

    def command(self):
        return [sys.executable, CHECKER, "--root", self.tmp]

    def promtool_job_test(self):
        return run([PROMTOOL, "test", "rules",
                    os.path.join(self.tmp, "deploy", "prometheus",
                                 "alerts_job_test.yml")])

    # -- the checker ----------------------------------------------------------

    def test_repository_files_pass(self):
        code, out = self.check()
        self.assertEqual(code, 0, out)
        self.assertIn("name no job", out)

    def test_rule_naming_the_job(self):
        self.edit(RULES, "maxsimd_serving == 0",
                  'maxsimd_serving{job="maxsimd"} == 0')
        self.assert_fails("alerts.yml MaxsimdNotReady",
                          'job="maxsimd" names a scrape job')

    def test_rule_matching_jobs_by_regex(self):
        self.edit(RULES, "rate(maxsimd_rejected_total[5m])",
                  'rate(maxsimd_rejected_total{job=~"maxsimd|kubernetes-pods"}'
                  '[5m])')
        self.assert_fails("alerts.yml MaxsimdHighRejectionRate",
                          'job=~"maxsimd|kubernetes-pods"')

    def test_absent_of_the_jobs_up(self):
        self.edit(RULES, "absent(maxsimd_build_info)",
                  'absent(up{job="maxsimd"})')
        self.assert_fails("alerts.yml MaxsimdAbsent", 'job="maxsimd"')

    def test_rule_file_of_another_name(self):
        with open(os.path.join(self.tmp, "deploy", "prometheus",
                               "extra.yml"), "w") as f:
            f.write("groups:\n  - name: extra\n    rules:\n"
                    "      - alert: X\n"
                    "        expr: up{job!=\"prometheus\"} == 0\n")
        self.assert_fails("extra.yml X", 'job!="prometheus"')

    def test_dashboard_query_naming_the_job(self):
        self.edit(DASHBOARD, 'maxsimd_queue_bytes{job=~\\"$job\\"',
                  'maxsimd_queue_bytes{job=\\"kubernetes-pods\\"')
        self.assert_fails("panel 11 'Queued bytes' query A",
                          'job="kubernetes-pods" names a scrape job',
                          'maxsimd_queue_bytes has no job=~"$job"')

    def test_dashboard_query_without_instance(self):
        self.edit(DASHBOARD, 'maxsimd_corpus_segments{job=~\\"$job\\", '
                             'instance=~\\"$instance\\"}',
                  'maxsimd_corpus_segments{job=~\\"$job\\"}')
        self.assert_fails("'Deleted documents and segments' query B",
                          'maxsimd_corpus_segments has no '
                          'instance=~"$instance"')

    def test_dashboard_bare_metric(self):
        self.edit(DASHBOARD, '"expr": "maxsimd_build_info{job=~\\"$job\\", '
                             'instance=~\\"$instance\\"}",\n',
                  '"expr": "maxsimd_build_info",\n')
        self.assert_fails("panel 24 'Build' query A",
                          'maxsimd_build_info has no job=~"$job"')

    def test_process_metric_of_every_pod(self):
        self.edit(DASHBOARD, 'process_open_fds{job=~\\"$job\\", '
                             'instance=~\\"$instance\\"} and on (job, '
                             'instance) maxsimd_build_info{job=~\\"$job\\", '
                             'instance=~\\"$instance\\"}',
                  'process_open_fds{job=~\\"$job\\", '
                  'instance=~\\"$instance\\"}')
        self.assert_fails("'Open file descriptors' query A",
                          "not limited to maxsimd targets")

    def test_instance_variable_of_a_fixed_job(self):
        self.edit(DASHBOARD, 'label_values(maxsimd_build_info{job=~\\"$job\\"}'
                             ', instance)',
                  'label_values(maxsimd_build_info{job=\\"maxsimd\\"}, '
                  'instance)', count=2)
        self.assert_fails("variable instance", 'job="maxsimd"',
                          'is not restricted to job=~"$job"')

    def test_no_job_variable(self):
        self.edit(DASHBOARD, '"name": "job"', '"name": "scrape_job"')
        self.assert_fails("no query variable job")

    def test_job_variable_of_another_family(self):
        self.edit(DASHBOARD, 'label_values(maxsimd_build_info, job)',
                  'label_values(up, job)', count=2)
        self.assert_fails("variable job", "does not select one maxsimd_* "
                                          "family")

    def test_fixed_datasource(self):
        self.edit(DASHBOARD, '"uid": "${datasource}"', '"uid": "prometheus"',
                  count=20)
        self.assert_fails('is not the variable ${datasource}')

    # -- the rule tests under another job --------------------------------------

    def test_job_rule_tests_pass(self):
        code, out = self.promtool_job_test()
        self.assertEqual(code, 0, out)

    def test_job_rule_tests_fail_on_rules_bound_to_the_job(self):
        self.edit(RULES, "maxsimd_serving == 0",
                  'maxsimd_serving{job="maxsimd"} == 0')
        code, out = self.promtool_job_test()
        self.assertNotEqual(code, 0, out)
        self.assertIn("alertname: MaxsimdNotReady", out)

    def test_job_rule_tests_fail_on_absent_of_the_jobs_up(self):
        self.edit(RULES, "absent(maxsimd_build_info)",
                  'absent(up{job="maxsimd"})')
        code, out = self.promtool_job_test()
        self.assertNotEqual(code, 0, out)
        self.assertIn("alertname: MaxsimdAbsent", out)

    def test_job_rule_tests_fail_on_down_of_any_target(self):
        # Without the maxsimd_build_info join, another application's target
        # of the shared job counts as a maxsimd that is down.
        self.edit(RULES, "          up == 0\n          and on (job, instance)"
                         "\n          max_over_time(maxsimd_build_info[1d])\n",
                  "          up == 0\n")
        code, out = self.promtool_job_test()
        self.assertNotEqual(code, 0, out)
        self.assertIn("alertname: MaxsimdDown", out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    PROMTOOL = sys.argv[1]
    if not os.path.isfile(PROMTOOL):
        sys.exit(f"promtool not found ({PROMTOOL}): run "
                 f"scripts/install_deps.sh")
    unittest.main(argv=sys.argv[:1], verbosity=2)
