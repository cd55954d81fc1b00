"""Offline checks of deploy/k8s/router (no cluster): every manifest parses, is listed in the
kustomization and passes the Kubernetes API's strict schema (an unknown field or a wrong type
fails; k8s_manifests.py), the names and labels that tie them together agree (selectors, named
ports, probes, the ConfigMap mount, RBAC), and the pod runs locked down."""

import os
import unittest

import yaml

import k8s_manifests as k8s

DIR = os.path.join(k8s.DEPLOY, "router")


class RouterManifestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.resources, cls.kustomization = k8s.kustomization_objects(DIR)
        cls.namespace = cls.kustomization["namespace"]

    def of_kind(self, kind):
        found = [d for (k, _), d in self.resources.items() if k == kind]
        self.assertTrue(found, f"no {kind}")
        return found

    def one(self, kind, name):
        self.assertIn((kind, name), self.resources, f"no {kind} {name}")
        return self.resources[(kind, name)]

    @property
    def deployment(self):
        (d,) = self.of_kind("Deployment")
        return d

    @property
    def pod(self):
        return self.deployment["spec"]["template"]["spec"]

    @property
    def container(self):
        (c,) = self.pod["containers"]
        return c

    def route_config(self):
        """The ConfigMap the pod mounts and the route section of the gecd.yaml in it."""
        mount = next(m for m in self.container["volumeMounts"] if m["mountPath"] == "/etc/gecd")
        volume = next(v for v in self.pod["volumes"] if v["name"] == mount["name"])
        config_map = self.one("ConfigMap", volume["configMap"]["name"])
        args = self.container["args"]
        self.assertEqual(args[:2], ["route", "--config"])
        self.assertTrue(args[2].startswith("/etc/gecd/"), args)
        key = args[2][len("/etc/gecd/"):]
        self.assertIn(key, config_map["data"], "--config names a file the ConfigMap lacks")
        return yaml.safe_load(config_map["data"][key])["route"]

    def test_every_manifest_is_in_the_kustomization(self):
        files = sorted(f for f in os.listdir(DIR)
                       if f.endswith(".yaml") and f != "kustomization.yaml")
        self.assertEqual(sorted(self.kustomization["resources"]), files)
        for doc in self.resources.values():
            self.assertNotIn("namespace", doc["metadata"], "the kustomization sets it")

    def test_deployment_selects_its_pods_and_the_service_selects_them(self):
        labels = self.deployment["spec"]["template"]["metadata"]["labels"]
        self.assertTrue(k8s.is_subset(self.deployment["spec"]["selector"]["matchLabels"], labels))
        service = self.one("Service", self.deployment["metadata"]["name"])
        self.assertTrue(k8s.is_subset(service["spec"]["selector"], labels))
        port_names = {p["name"]: p["containerPort"] for p in self.container["ports"]}
        for port in service["spec"]["ports"]:
            self.assertIn(port["targetPort"], port_names, port)
            self.assertEqual(port["port"], port_names[port["targetPort"]])

    def test_the_watched_headless_service_matches_the_route_config(self):
        route = self.route_config()
        self.assertEqual(route["endpoints"]["source"], "kubernetes")
        headless = self.one("Service", route["kubernetes"]["service"])
        self.assertEqual(headless["spec"]["clusterIP"], "None")
        ports = {p["name"]: p for p in headless["spec"]["ports"]}
        self.assertIn(route["kubernetes"]["port"], ports)
        self.assertEqual(ports[route["kubernetes"]["port"]]["port"], 50051)
        # It must select the daemons, never the router itself.
        router_labels = self.deployment["spec"]["template"]["metadata"]["labels"]
        self.assertFalse(k8s.is_subset(headless["spec"]["selector"], router_labels))

    def test_ports_and_probes_agree_with_the_listen_addresses(self):
        route = self.route_config()
        ports = {p["name"]: p["containerPort"] for p in self.container["ports"]}
        self.assertEqual(ports["grpc"], int(route["listen"].rsplit(":", 1)[1]))
        self.assertEqual(ports["metrics"], int(route["metrics_listen"].rsplit(":", 1)[1]))
        # Set, not the default (loopback): the probes and Prometheus come from outside the pod.
        self.assertEqual(route["metrics_listen"], "0.0.0.0:9101")
        self.assertEqual(ports, {"grpc": 50061, "metrics": 9101})
        for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
            get = self.container[probe]["httpGet"]
            self.assertEqual((get["path"], get["port"]), (path, "metrics"), probe)
        # SIGTERM comes after the preStop sleep, and the drain must end before the kill.
        pre_stop = self.container["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(pre_stop[0], "sleep")
        grace_ms = int(pre_stop[1]) * 1000 + route.get("grace_period_ms", 10000)
        self.assertGreater(self.pod["terminationGracePeriodSeconds"] * 1000, grace_ms)

    def test_pod_is_locked_down(self):
        k8s.assert_locked_down(self, self.pod, self.container)

    def test_rbac_grants_the_service_account_endpointslice_reads_only(self):
        account = self.one("ServiceAccount", self.pod["serviceAccountName"])
        (binding,) = self.of_kind("RoleBinding")
        self.assertEqual(binding["roleRef"]["kind"], "Role")
        role = self.one("Role", binding["roleRef"]["name"])
        self.assertEqual(binding["subjects"], [{"kind": "ServiceAccount",
                                                "name": account["metadata"]["name"],
                                                "namespace": self.namespace}])
        self.assertEqual(role["rules"], [{"apiGroups": ["discovery.k8s.io"],
                                          "resources": ["endpointslices"],
                                          "verbs": ["get", "list", "watch"]}])

    def test_every_manifest_passes_the_api_schema(self):
        for validator in (k8s.SchemaValidator(k8s.OLDEST_KUBERNETES), k8s.SchemaValidator()):
            for (kind, name), doc in self.resources.items():
                with self.subTest(kubernetes=validator.version, object=f"{kind} {name}"):
                    self.assertEqual(validator.errors(doc), [])


if __name__ == "__main__":
    unittest.main()
