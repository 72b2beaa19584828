#!/usr/bin/env python3
"""Self-test of deploy/k8s/validate/validate.mjs: the repository's manifests
pass, and a copy with one mistake fails naming it: a wrong field type, an
unknown field, a bad port, broken YAML, a kustomization image that matches
nothing, and each of the deployment's rules (bounded emptyDirs, GPU
placement, spreading, the NetworkPolicy).

    tests/deploy/k8s_validate_test.py NODE PREFIX

PREFIX is where `npm ci --prefix PREFIX` installed the validator's packages
(the ctest fixture deploy_k8s_npm_ci).
"""

import os
import sys
import unittest

from selftest_support import ROOT, BrokenCopyTest

VALIDATOR = os.path.join(ROOT, "deploy", "k8s", "validate", "validate.mjs")
REPLICAS = "deploy/k8s/replicas.yaml"
SHARDS = "deploy/k8s/shards.yaml"
POLICY = "deploy/k8s/networkpolicy.yaml"
KUSTOMIZATION = "deploy/k8s/kustomization.yaml"
NODE = PREFIX = None


class K8sValidateTest(BrokenCopyTest):

    COPY = ("deploy/k8s",)

    def command(self):
        return [NODE, VALIDATOR, "--prefix", PREFIX, "--root", self.tmp]

    def test_repository_manifests_pass(self):
        code, out = self.check()
        self.assertEqual(code, 0, out)
        self.assertIn("images registry.example.com/maxsimd:0.1.0", out)

    # -- schema ---------------------------------------------------------------

    def test_wrong_field_type(self):
        self.edit(REPLICAS, "  replicas: 2\n", '  replicas: "2"\n')
        self.assert_fails("replicas.yaml Deployment maxsimd",
                          "/spec/replicas must be integer")

    def test_unknown_field_under_spec(self):
        self.edit(SHARDS, "  podManagementPolicy: Parallel",
                  "  podManagementPolicies: Parallel")
        self.assert_fails("StatefulSet maxsimd-shard",
                          "/spec/podManagementPolicies: unknown field")

    def test_unknown_field_deep_in_the_pod(self):
        self.edit(REPLICAS, "          readOnlyRootFilesystem: true\n",
                  "          readOnlyRootFileSystem: true\n")
        self.assert_fails("/spec/template/spec/initContainers/0/"
                          "securityContext/readOnlyRootFileSystem: unknown "
                          "field")

    def test_missing_required_field(self):
        self.edit(SHARDS, "        - name: maxsimd\n          image: maxsimd\n",
                  "        - image: maxsimd\n")
        self.assert_fails("StatefulSet maxsimd-shard",
                          "containers/0 must have required property name")

    def test_container_without_image(self):
        self.edit(SHARDS, "          image: maxsimd\n", "")
        self.assert_fails("container maxsimd has no image")

    def test_bad_enum(self):
        self.edit(POLICY, '  policyTypes: ["Ingress"]',
                  '  policyTypes: ["Inbound"]')
        self.assert_fails("NetworkPolicy maxsimd",
                          "/spec/policyTypes/0 must be equal to one of")

    def test_port_out_of_range(self):
        self.edit(POLICY, "port: 9464", "port: 94640")
        self.assert_fails("/spec/ingress/1/ports/0/port: port 94640 is not "
                          "in 1..65535")

    def test_service_port_of_wrong_type(self):
        self.edit(SHARDS, "      port: 9464\n", "      port: metrics\n")
        self.assert_fails("Service maxsimd-shard",
                          "/spec/ports/1/port must be integer")

    def test_bad_port_name(self):
        self.edit(REPLICAS, "      targetPort: metrics",
                  "      targetPort: Metrics_Port")
        self.assert_fails('port name "Metrics_Port" is not an IANA service '
                          'name')

    def test_configmap_unknown_field(self):
        self.edit("deploy/k8s/configmap.yaml", "\ndata:\n", "\ndatas:\n")
        self.assert_fails("ConfigMap maxsimd-flags", "/datas: unknown field")

    def test_pvc_bad_access_mode(self):
        self.edit("deploy/k8s/corpora-pvc.yaml", "accessModes: "
                  '["ReadOnlyMany"]', "accessModes: ReadOnlyMany")
        self.assert_fails("PersistentVolumeClaim maxsimd-corpora",
                          "/spec/accessModes must be array")

    def test_pdb_unknown_field(self):
        self.edit(SHARDS, "  maxUnavailable: 1\n", "  maxUnavailabe: 1\n")
        self.assert_fails("PodDisruptionBudget maxsimd-shard",
                          "/spec/maxUnavailabe: unknown field")

    def test_podmonitor_port_number(self):
        self.edit("deploy/k8s/podmonitor.yaml", "    - port: metrics",
                  "    - port: 9464")
        self.assert_fails("PodMonitor maxsimd",
                          "/spec/podMetricsEndpoints/0/port must be string")

    def test_unknown_kind(self):
        with open(os.path.join(self.tmp, "deploy", "k8s", "extra.yaml"),
                  "w") as f:
            f.write("apiVersion: v1\nkind: Serviec\nmetadata:\n  name: x\n")
        self.assert_fails("extra.yaml Serviec x", "no schema for v1 Serviec")

    def test_broken_yaml(self):
        self.edit(REPLICAS, "  replicas: 2\n", "  replicas: [2\n")
        self.assert_fails("replicas.yaml", "YAML:")

    # -- kustomization ----------------------------------------------------------

    def test_images_entry_matching_nothing(self):
        self.edit(KUSTOMIZATION, "  - name: maxsimd\n",
                  "  - name: maxsim\n")
        self.assert_fails("images entry maxsim matches no container image",
                          "image maxsimd is not rewritten")

    def test_manifest_image_outside_images(self):
        self.edit(SHARDS, "          image: maxsimd\n",
                  "          image: maxsimd-server:0.1.0\n")
        self.assert_fails("image maxsimd-server:0.1.0 is not rewritten")

    def test_kustomization_field_not_applied(self):
        self.edit(KUSTOMIZATION, "images:\n",
                  "commonLabels:\n  team: search\nimages:\n")
        self.assert_fails("field commonLabels is not applied")

    def test_missing_resource(self):
        self.edit(KUSTOMIZATION, "  - shards.yaml\n",
                  "  - shards.yaml\n  - hpa.yaml\n")
        self.assert_fails('resource "hpa.yaml" is not a file')

    def test_workload_outside_the_kustomization(self):
        self.edit(KUSTOMIZATION, "  - shards.yaml\n", "")
        self.assert_fails("shards.yaml StatefulSet maxsimd-shard: has "
                          "containers but is not a resource")

    # -- the deployment's rules ---------------------------------------------------

    def test_unbounded_emptydir(self):
        self.edit(SHARDS, "          emptyDir:\n            sizeLimit: 1Gi\n",
                  "          emptyDir: {}\n")
        self.assert_fails("StatefulSet maxsimd-shard: emptyDir tmp has no "
                          "sizeLimit")

    def test_ephemeral_storage_below_the_emptydirs(self):
        self.edit(REPLICAS, "              ephemeral-storage: 202Gi\n"
                            "            limits:",
                  "              ephemeral-storage: 20Gi\n"
                  "            limits:")
        self.edit(REPLICAS, "              nvidia.com/gpu: 1\n"
                            "              ephemeral-storage: 202Gi\n",
                  "              nvidia.com/gpu: 1\n"
                  "              ephemeral-storage: 20Gi\n")
        self.assert_fails("Deployment maxsimd: the containers' "
                          "ephemeral-storage limits (20 GiB) are below the "
                          "emptyDirs' sizeLimits (201 GiB)")

    def test_no_ephemeral_storage_request(self):
        self.edit(SHARDS, "              memory: 16Gi\n"
                          "              ephemeral-storage: 2Gi\n",
                  "              memory: 16Gi\n")
        self.assert_fails("container maxsimd has no ephemeral-storage request")

    def test_affinity_admitting_older_gpus(self):
        self.edit(REPLICAS, '                    operator: Gt\n'
                            '                    values: ["7"]',
                  '                    operator: Gt\n'
                  '                    values: ["6"]')
        self.assert_fails("Deployment maxsimd: no required node affinity "
                          "admitting only GPUs of compute capability 8.0")

    def test_no_gpu_toleration(self):
        self.edit(SHARDS, "        - key: nvidia.com/gpu\n",
                  "        - key: gpu\n")
        self.assert_fails("no toleration of the nvidia.com/gpu taint")

    def test_no_spread_over_nodes(self):
        self.edit(SHARDS, "topologyKey: kubernetes.io/hostname",
                  "topologyKey: topology.kubernetes.io/region")
        self.assert_fails("StatefulSet maxsimd-shard: no "
                          "topologySpreadConstraint over "
                          "kubernetes.io/hostname")

    def test_no_network_policy(self):
        self.edit(KUSTOMIZATION, "  - networkpolicy.yaml\n", "")
        self.assert_fails("Deployment maxsimd: no NetworkPolicy selects its "
                          "pods", "StatefulSet maxsimd-shard: no "
                                  "NetworkPolicy selects its pods")

    def test_metrics_port_not_admitted(self):
        self.edit(POLICY, "port: 9464", "port: 9465")
        self.assert_fails("no NetworkPolicy rule admits container maxsimd "
                          "port 9464 (metrics)")

    def test_rule_open_to_every_source(self):
        self.edit(POLICY, "    - from:\n        - namespaceSelector:\n"
                          "            matchLabels:\n"
                          "              kubernetes.io/metadata.name: "
                          "monitoring\n",
                  "    - ports:\n", )
        self.edit(POLICY, "    - ports:\n      ports:\n", "    - ports:\n")
        self.assert_fails("a NetworkPolicy rule admits every source")

    def test_grpc_without_the_client_label(self):
        self.edit(POLICY, '              maxsimd-client: "true"',
                  '              client: "true"')
        self.assert_fails('no NetworkPolicy rule admits pods labelled '
                          'maxsimd-client: "true" to the gRPC port 50051')


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    NODE, PREFIX = sys.argv[1], sys.argv[2]
    if not os.path.isfile(NODE):
        sys.exit(f"node not found ({NODE}): install Node.js")
    unittest.main(argv=sys.argv[:1], verbosity=2)
