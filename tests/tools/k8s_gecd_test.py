"""Offline checks of deploy/k8s/gecd (the daemons), its gpu/ and keda/ components,
deploy/k8s/prometheus-adapter and the top-level kustomization (no cluster):

- every object passes the Kubernetes API's strict schema (built-in kinds) or the schema written
  from its CRD (ServiceMonitor, ScaledObject), and the adapter's config its own, for the oldest
  targeted release and the newest; a misspelt field or a wrong type fails (the negative test);
- the variants as `kubectl kustomize` renders them (CPU, GPU, either with KEDA), when kubectl is
  installed;
- the names that tie objects together agree: selectors and labels (the router's headless
  Service included), named ports, probes, the ConfigMap mount, the scrape annotations, the
  ServiceMonitor's Service and port, the autoscalers' target;
- the HPA's and KEDA's per-pod target is the one `gecd tune` measured
  (bench/tune/default-model-2026-12-01.json);
- the HPA, the adapter rule and KEDA name a metric a running daemon exports: `gecd serve` with
  each variant's config (echo backend) is started and scraped; its shared-memory segment fits
  the /dev/shm volume; the pod's grace period exceeds the drain the config allows.
"""

import copy
import itertools
import json
import os
import re
import unittest
from decimal import Decimal

import yaml

import gecd_daemon
import k8s_manifests as k8s

GECD_DIR = os.path.join(k8s.DEPLOY, "gecd")
GPU_DIR = os.path.join(GECD_DIR, "gpu")
KEDA_DIR = os.path.join(GECD_DIR, "keda")
ADAPTER_DIR = os.path.join(k8s.DEPLOY, "prometheus-adapter")
ROUTER_DIR = os.path.join(k8s.DEPLOY, "router")
METRIC = "gecd_request_concurrency"
MIB = 1 << 20


def only(objects, kind):
    found = [d for (k, _), d in objects.items() if k == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def keyed(docs):
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def quantity(q):
    """The exact value of a Kubernetes quantity without an exponent ("32Mi", "2Gi", "2660m",
    "1024")."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|m|k|M|G|T)?", str(q))
    if not m:
        raise ValueError(f"not a quantity: {q!r}")
    scale = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
             "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[m.group(2)]
    return Decimal(m.group(1)) * scale


# The `gecd tune --json` summary the autoscalers' target comes from.
TUNE_SUMMARY = os.path.join(k8s.ROOT, "bench", "tune", "default-model-2026-12-01.json")

# What the API server accepts as a quantity (k8s.io/apimachinery resource.ParseQuantity); the
# schemas only say "string or number".
QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|"
                      r"([eE][+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)))?$")


def metric_names(promql):
    return set(re.findall(r"\b(gecd_[a-z0-9_]+)\b", promql))


class Variant:
    """The daemon's objects in one variant: its Deployment's pod, the config it runs."""

    def __init__(self, objects):
        self.objects = objects
        self.deployment = objects[("Deployment", "gecd")]
        self.pod = self.deployment["spec"]["template"]["spec"]
        (self.container,) = self.pod["containers"]
        args = self.container["args"]
        assert args[:2] == ["serve", "--config"], args
        self.config_file = args[2]
        self.overrides = args[3:]
        mount = next(m for m in self.container["volumeMounts"]
                     if self.config_file.startswith(m["mountPath"] + "/"))
        volume = self.volume(mount["name"])
        self.config_map = objects[("ConfigMap", volume["configMap"]["name"])]
        key = self.config_file[len(mount["mountPath"]) + 1:]
        self.config_text = self.config_map["data"][key]
        self.config = self.effective_config()

    def volume(self, name):
        return next(v for v in self.pod["volumes"] if v["name"] == name)

    def effective_config(self):
        """The ConfigMap's gecd.yaml with the container's --set overrides applied (the values as
        strings, as they come on the command line)."""
        config = yaml.safe_load(self.config_text)
        it = iter(self.overrides)
        for flag in it:
            assert flag == "--set", f"unexpected argument {flag!r} in {self.overrides}"
            key, value = next(it).split("=", 1)
            *sections, leaf = key.split(".")
            node = config
            for s in sections:
                node = node.setdefault(s, {})
            node[leaf] = value
        return config

    def shm_volume(self):
        mount = next(m for m in self.container["volumeMounts"] if m["mountPath"] == "/dev/shm")
        return self.volume(mount["name"])["emptyDir"]


class GecdManifestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.objects, cls.kustomization = k8s.kustomization_objects(GECD_DIR)
        cls.router_objects, _ = k8s.kustomization_objects(ROUTER_DIR)
        cls.keda_kustomization = k8s.load(os.path.join(KEDA_DIR, "kustomization.yaml"))
        cls.gpu_kustomization = k8s.load(os.path.join(GPU_DIR, "kustomization.yaml"))
        cls.scaled_object = k8s.load(os.path.join(KEDA_DIR, "scaledobject.yaml"))
        cls.adapter_objects, cls.adapter_kustomization = k8s.kustomization_objects(ADAPTER_DIR)
        adapter_map = only(cls.adapter_objects, "ConfigMap")
        cls.adapter_config = yaml.safe_load(adapter_map["data"]["config.yaml"])
        cls.top = k8s.load(os.path.join(k8s.DEPLOY, "kustomization.yaml"))
        cls.base = Variant(cls.objects)
        cls.namespace = cls.kustomization["namespace"]
        cls.rendered = None
        cls.rendered_error = None
        try:
            rendered = {"cpu": k8s.kustomize(k8s.DEPLOY)}
            if rendered["cpu"] is not None:
                for name, components in (("gpu", [GPU_DIR]), ("keda", [KEDA_DIR]),
                                         ("gpu+keda", [GPU_DIR, KEDA_DIR])):
                    rendered[name] = k8s.kustomize(k8s.DEPLOY, components)
                cls.rendered = {n: keyed(docs) for n, docs in rendered.items()}
        except AssertionError as e:  # reported by the test that needs it, not by all
            cls.rendered_error = str(e)
        cls.validators = None

    @classmethod
    def validator_list(cls):
        if cls.validators is None:
            cls.validators = [k8s.SchemaValidator(k8s.OLDEST_KUBERNETES), k8s.SchemaValidator()]
        return cls.validators

    def need_rendered(self):
        if self.rendered_error:
            self.fail(self.rendered_error)
        if self.rendered is None:
            self.skipTest("kubectl is not installed: the rendered variants are not checked")
        return self.rendered

    def kubectl_missing(self):
        return self.rendered is None and self.rendered_error is None

    def variants(self):
        """Variant per rendered name, or only the base from the files without kubectl."""
        if self.kubectl_missing():
            return {"cpu": self.base}
        return {name: Variant(objs) for name, objs in self.need_rendered().items()}

    # --- layout -------------------------------------------------------------------------

    def test_every_file_is_in_a_kustomization(self):
        def yaml_files(directory):
            return sorted(f for f in os.listdir(directory)
                          if f.endswith(".yaml") and f != "kustomization.yaml")
        self.assertEqual(sorted(self.kustomization["resources"]), yaml_files(GECD_DIR))
        self.assertEqual(self.keda_kustomization["resources"], yaml_files(KEDA_DIR))
        self.assertEqual(yaml_files(GPU_DIR), [])
        self.assertEqual(sorted(self.adapter_kustomization["resources"]), yaml_files(ADAPTER_DIR))
        for kustomization in (self.keda_kustomization, self.gpu_kustomization):
            self.assertEqual(kustomization["kind"], "Component")
        self.assertEqual(sorted(self.top["resources"]), ["gecd", "router"])
        # The router and the daemons share a namespace: the router watches the daemons' slices.
        router = k8s.load(os.path.join(ROUTER_DIR, "kustomization.yaml"))
        self.assertEqual(router["namespace"], self.namespace)
        for doc in [*self.objects.values(), self.scaled_object, *self.adapter_objects.values()]:
            self.assertNotIn("namespace", doc["metadata"], "the kustomization sets it")

    # --- schemas ------------------------------------------------------------------------

    def all_objects(self):
        """Every object, from the files and, with kubectl, from each rendered variant."""
        named = [(f"file {k8s.name_of(d)}", d) for d in
                 [*self.objects.values(), self.scaled_object, *self.adapter_objects.values()]]
        if not self.kubectl_missing():
            for variant, objs in self.need_rendered().items():
                named += [(f"{variant}: {k8s.name_of(d)}", d) for d in objs.values()]
        return named

    def test_every_object_passes_its_schema(self):
        for validator in self.validator_list():
            for where, doc in self.all_objects():
                with self.subTest(kubernetes=validator.version, object=where):
                    self.assertEqual(validator.errors(doc), [])
            self.assertEqual(validator.errors_against(validator.adapter_config_schema,
                                                      self.adapter_config), [])

    def test_quantities_parse(self):
        found = []

        def walk(node, path):
            if isinstance(node, dict):
                for k, v in node.items():
                    if k in ("requests", "limits") and isinstance(v, dict):
                        found.extend((f"{path}.{k}.{r}", q) for r, q in v.items())
                    elif k in ("sizeLimit", "averageValue"):
                        found.append((f"{path}.{k}", v))
                    else:
                        walk(v, f"{path}.{k}")
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    walk(v, f"{path}[{i}]")

        for where, doc in self.all_objects():
            walk(doc, where)
        self.assertTrue(found)
        for path, q in found:
            self.assertRegex(str(q), QUANTITY, path)

    def test_a_misspelt_field_or_a_wrong_type_fails(self):
        deployment = self.objects[("Deployment", "gecd")]
        hpa = self.objects[("HorizontalPodAutoscaler", "gecd")]
        monitor = self.objects[("ServiceMonitor", "gecd")]
        pdb = self.objects[("PodDisruptionBudget", "gecd")]

        def changed(doc, edit):
            doc = copy.deepcopy(doc)
            edit(doc)
            return doc

        def pod(d):
            return d["spec"]["template"]["spec"]

        def rename(node, old, new):
            node[new] = node.pop(old)

        cases = [
            ("misspelt pod field", changed(deployment, lambda d: rename(
                pod(d), "terminationGracePeriodSeconds", "terminationGracePeriodSecond")),
             "terminationGracePeriodSecond"),
            ("misspelt probe field", changed(deployment, lambda d: rename(
                pod(d)["containers"][0]["readinessProbe"], "periodSeconds", "periodSecond")),
             "periodSecond"),
            ("port as a string", changed(deployment, lambda d: pod(d)["containers"][0]["ports"][0]
                                         .update(containerPort="50051")),
             "spec.template.spec.containers.0.ports.0.containerPort"),
            ("grace period as a string", changed(deployment, lambda d: pod(d).update(
                terminationGracePeriodSeconds="30")),
             "spec.template.spec.terminationGracePeriodSeconds"),
            ("misspelt HPA field", changed(hpa, lambda d: rename(d["spec"], "behavior",
                                                                 "behaviour")), "behaviour"),
            ("minReplicas as a string", changed(hpa, lambda d: d["spec"].update(minReplicas="2")),
             "spec.minReplicas"),
            ("PDB selector as a string", changed(pdb, lambda d: d["spec"].update(selector="gecd")),
             "spec.selector"),
            ("misspelt ServiceMonitor field", changed(monitor, lambda d: rename(
                d["spec"]["endpoints"][0], "interval", "intervall")), "intervall"),
            ("scrape interval as a number", changed(monitor, lambda d: d["spec"]["endpoints"][0]
                                                    .update(interval=10)),
             "spec.endpoints.0.interval"),
            ("misspelt ScaledObject field", changed(self.scaled_object, lambda d: rename(
                d["spec"], "maxReplicaCount", "maxReplicas")), "maxReplicas"),
            ("ScaledObject count as a string", changed(self.scaled_object, lambda d: d["spec"]
                                                       .update(minReplicaCount="2")),
             "spec.minReplicaCount"),
            ("misspelt prometheus trigger key", changed(self.scaled_object, lambda d: rename(
                d["spec"]["triggers"][0]["metadata"], "threshold", "treshold")), "treshold"),
            ("KEDA behavior with a misspelt policy field", changed(
                self.scaled_object, lambda d: rename(
                    d["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
                    ["scaleUp"]["policies"][0], "periodSeconds", "period")), "period"),
        ]
        for validator in self.validator_list():
            for what, doc, needle in cases:
                with self.subTest(kubernetes=validator.version, case=what):
                    errors = validator.errors(doc)
                    self.assertTrue(errors, f"{what}: passed the schema")
                    self.assertIn(needle, "\n".join(errors))
            schema = validator.adapter_config_schema
            for what, edit, needle in [
                    ("misspelt adapter key", lambda c: rename(c["rules"][0], "metricsQuery",
                                                              "metricQuery"), "metricQuery"),
                    ("seriesQuery as a number", lambda c: c["rules"][0].update(seriesQuery=5),
                     "rules.0.seriesQuery")]:
                with self.subTest(kubernetes=validator.version, case=what):
                    errors = validator.errors_against(schema, changed(self.adapter_config, edit))
                    self.assertTrue(errors, f"{what}: passed the schema")
                    self.assertIn(needle, "\n".join(errors))

    # --- names that tie the objects together --------------------------------------------

    def test_selectors_match_the_pod_labels(self):
        for name, v in self.variants().items():
            with self.subTest(variant=name):
                labels = v.deployment["spec"]["template"]["metadata"]["labels"]
                self.assertTrue(k8s.is_subset(v.deployment["spec"]["selector"]["matchLabels"],
                                              labels))
                for spread in v.pod["topologySpreadConstraints"]:
                    self.assertTrue(k8s.is_subset(spread["labelSelector"]["matchLabels"], labels))
                pdb = only(v.objects, "PodDisruptionBudget")
                self.assertTrue(k8s.is_subset(pdb["spec"]["selector"]["matchLabels"], labels))
                self.assertTrue(k8s.is_subset(v.objects[("Service", "gecd")]["spec"]["selector"],
                                              labels))
        # The router balances over exactly these pods, on the port named as in its config.
        labels = self.base.deployment["spec"]["template"]["metadata"]["labels"]
        headless = self.router_objects[("Service", "gecd-daemons")]
        self.assertTrue(k8s.is_subset(headless["spec"]["selector"], labels))
        ports = {p["name"]: p["containerPort"] for p in self.base.container["ports"]}
        for port in headless["spec"]["ports"]:
            self.assertEqual(ports[port["targetPort"]], port["port"])

    def test_ports_probes_and_annotations_agree_with_the_config(self):
        for name, v in self.variants().items():
            with self.subTest(variant=name):
                ports = {p["name"]: p["containerPort"] for p in v.container["ports"]}
                self.assertEqual(ports, {"grpc": 50051, "metrics": 9100})
                server = v.config["server"]
                self.assertEqual(ports["grpc"], int(server["listen"].rsplit(":", 1)[1]))
                self.assertEqual(ports["metrics"],
                                 int(server["metrics_listen"].rsplit(":", 1)[1]))
                # Set, not the default (loopback): the probes and Prometheus come from outside.
                self.assertEqual(server["metrics_listen"], "0.0.0.0:9100")
                for probe, path in (("startupProbe", "/readyz"), ("readinessProbe", "/readyz"),
                                    ("livenessProbe", "/healthz")):
                    get = v.container[probe]["httpGet"]
                    self.assertEqual(get["path"], path, probe)
                    self.assertIn(get["port"], ports, f"{probe} names a port the pod lacks")
                    self.assertEqual(get["port"], "metrics", probe)
                # Model loading gets as long as the notes in docs/OPERATIONS.md allow: 300 s.
                startup = v.container["startupProbe"]
                self.assertGreaterEqual(startup["periodSeconds"] * startup["failureThreshold"],
                                        300)
                service = v.objects[("Service", "gecd")]
                for port in service["spec"]["ports"]:
                    self.assertIn(port["targetPort"], ports, port)
                    self.assertEqual(port["port"], ports[port["targetPort"]])
                notes = v.deployment["spec"]["template"]["metadata"]["annotations"]
                self.assertEqual(notes["prometheus.io/scrape"], "true")
                self.assertEqual(int(notes["prometheus.io/port"]), ports["metrics"])
                self.assertEqual(notes["prometheus.io/path"], "/metrics")

    def test_the_service_monitors_scrape_the_metrics_ports(self):
        # The daemons' (gecd/) and the routers' (router/): each scrapes its own Service alone.
        expected = {"gecd": "gecd", "gecd-route": "gecd-route"}
        for (name, v), (monitor_name, service_name) in itertools.product(
                self.variants().items(), expected.items()):
            with self.subTest(variant=name, monitor=monitor_name):
                self.assertEqual(sorted(n for k, n in v.objects if k == "ServiceMonitor"),
                                 sorted(expected))
                monitor = v.objects[("ServiceMonitor", monitor_name)]
                selector = monitor["spec"]["selector"]["matchLabels"]
                # Every Service the selector picks (the router's headless one carries the
                # daemons' labels) with the endpoint's port: exactly the one Service.
                (endpoint,) = monitor["spec"]["endpoints"]
                scraped = [d for (k, _), d in v.objects.items()
                           if k == "Service"
                           and k8s.is_subset(selector, d["metadata"].get("labels", {}))
                           and any(p["name"] == endpoint["port"] for p in d["spec"]["ports"])]
                self.assertEqual([d["metadata"]["name"] for d in scraped], [service_name])
                port = next(p for p in scraped[0]["spec"]["ports"]
                            if p["name"] == endpoint["port"])
                self.assertEqual(port["targetPort"], "metrics")
                self.assertEqual(endpoint["path"], "/metrics")
                self.assertNotIn("namespaceSelector", monitor["spec"], "its own namespace")

    def test_the_grace_period_exceeds_the_drain(self):
        defaults = k8s.load(os.path.join(k8s.ROOT, "configs", "gecd.yaml"))["server"]
        for name, v in self.variants().items():
            with self.subTest(variant=name):
                grace_ms = int(v.config["server"].get("grace_period_ms",
                                                      defaults["grace_period_ms"]))
                pre_stop = v.container["lifecycle"]["preStop"]["exec"]["command"]
                self.assertEqual(pre_stop[0], "sleep")
                # SIGTERM comes after the preStop hook; the drain must end before the SIGKILL.
                self.assertGreater(v.pod["terminationGracePeriodSeconds"] * 1000,
                                   int(pre_stop[1]) * 1000 + grace_ms)

    def test_the_config_is_the_repository_default_on_the_image_paths(self):
        """The ConfigMap's model and spelling sections are configs/gecd.yaml's with its paths
        (relative to configs/) where docker/Dockerfile puts them (/opt/gecd/configs/..)."""
        default = k8s.load(os.path.join(k8s.ROOT, "configs", "gecd.yaml"))
        with open(os.path.join(k8s.ROOT, "docker", "Dockerfile")) as f:
            dockerfile = f.read()
        self.assertIn("COPY configs /opt/gecd/configs", dockerfile)
        self.assertIn("COPY models/gecd-gec-small /opt/gecd/models/gecd-gec-small", dockerfile)

        def on_image(path):
            return path if path.startswith("/") else os.path.normpath(
                os.path.join("/opt/gecd/configs", path))

        config = self.base.config
        for section, paths in (("model", ["dir"]), ("spelling", ["dictionary", "lexicon"])):
            expected = dict(default[section])
            for key in paths:
                expected[key] = on_image(expected[key])
            self.assertEqual(config[section], expected, section)
        self.assertEqual(self.base.config_file, "/etc/gecd/gecd.yaml")
        mount = next(m for m in self.base.container["volumeMounts"]
                     if m["mountPath"] == "/etc/gecd")
        self.assertTrue(mount["readOnly"])
        # Whole numbers, not 0 (= the node's cores in a container).
        self.assertGreater(config["server"]["workers"], 0)
        self.assertGreater(config["engine"]["threads"], 0)

    def test_pod_is_locked_down(self):
        for name, v in self.variants().items():
            with self.subTest(variant=name):
                k8s.assert_locked_down(self, v.pod, v.container)
                self.assertFalse(v.pod["automountServiceAccountToken"])
                self.assertNotIn("replicas", v.deployment["spec"], "the autoscaler owns it")

    def test_cpu_and_gpu_variants(self):
        rendered = self.need_rendered()
        cpu, gpu = Variant(rendered["cpu"]), Variant(rendered["gpu"])
        self.assertEqual(cpu.config["engine"]["backend"], "cpu")
        self.assertEqual(cpu.container["resources"]["requests"],
                         cpu.container["resources"]["limits"], "Guaranteed QoS")
        self.assertNotIn("nvidia.com/gpu", cpu.container["resources"]["limits"])
        self.assertEqual(gpu.config["engine"]["backend"], "cuda")
        self.assertEqual(gpu.container["resources"]["limits"]["nvidia.com/gpu"], 1)
        self.assertEqual(gpu.container["resources"]["requests"]["nvidia.com/gpu"], 1)
        self.assertTrue(any(t["key"] == "nvidia.com/gpu" for t in gpu.pod["tolerations"]))
        self.assertNotEqual(gpu.container["image"], cpu.container["image"])
        # The components leave the rest alone: probes, ports, the lock-down, the grace period.
        for field in ("ports", "startupProbe", "readinessProbe", "livenessProbe",
                      "securityContext", "lifecycle"):
            self.assertEqual(gpu.container[field], cpu.container[field], field)
        self.assertEqual(gpu.pod["terminationGracePeriodSeconds"],
                         cpu.pod["terminationGracePeriodSeconds"])
        kinds = lambda objs: sorted(k for k, _ in objs)  # noqa: E731
        self.assertIn("HorizontalPodAutoscaler", kinds(rendered["gpu"]))
        for name in ("keda", "gpu+keda"):
            self.assertNotIn("HorizontalPodAutoscaler", kinds(rendered[name]), name)
            self.assertIn("ScaledObject", kinds(rendered[name]), name)

    # --- autoscaling --------------------------------------------------------------------

    def test_the_hpa_keda_and_the_adapter_agree(self):
        hpa = self.objects[("HorizontalPodAutoscaler", "gecd")]["spec"]
        deployment = self.base.deployment
        self.assertEqual(hpa["scaleTargetRef"], {"apiVersion": "apps/v1", "kind": "Deployment",
                                                 "name": deployment["metadata"]["name"]})
        (metric,) = hpa["metrics"]
        self.assertEqual(metric["type"], "Pods")
        self.assertEqual(metric["pods"]["metric"], {"name": METRIC})
        self.assertEqual(metric["pods"]["target"]["type"], "AverageValue")
        # The per-pod target is what `gecd tune` measured (bench/RESULTS.md, "gecd tune on the
        # default model"), to the milli-unit the HPA compares in.
        target = quantity(metric["pods"]["target"]["averageValue"])
        with open(TUNE_SUMMARY) as f:
            tuned = json.load(f)
        self.assertTrue(tuned["slo_met"])
        self.assertEqual(target, Decimal(round(tuned["hpa_target"] * 1000)) / 1000)
        # The asymmetric policy of issue 15 (docs/AUTOSCALING.md justifies it).
        self.assertEqual(hpa["behavior"], {
            "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
                {"type": "Percent", "value": 100, "periodSeconds": 15},
                {"type": "Pods", "value": 4, "periodSeconds": 15}]},
            "scaleDown": {"stabilizationWindowSeconds": 600, "selectPolicy": "Min", "policies": [
                {"type": "Percent", "value": 10, "periodSeconds": 60}]}})
        self.assertGreaterEqual(hpa["minReplicas"], 2)
        self.assertGreater(hpa["maxReplicas"], hpa["minReplicas"])

        keda = self.scaled_object["spec"]
        self.assertEqual(keda["scaleTargetRef"], hpa["scaleTargetRef"])
        self.assertEqual((keda["minReplicaCount"], keda["maxReplicaCount"]),
                         (hpa["minReplicas"], hpa["maxReplicas"]))
        self.assertEqual(keda["advanced"]["horizontalPodAutoscalerConfig"]["behavior"],
                         hpa["behavior"])
        (trigger,) = keda["triggers"]
        self.assertEqual((trigger["type"], trigger["metricType"]), ("prometheus", "AverageValue"))
        self.assertEqual(Decimal(trigger["metadata"]["threshold"]), target)  # KEDA: a decimal
        query = trigger["metadata"]["query"]
        self.assertEqual(metric_names(query), {METRIC})
        self.assertIn(f'namespace="{self.namespace}"', query)

        (rule,) = self.adapter_config["rules"]
        self.assertEqual(rule["name"]["as"], METRIC)
        self.assertRegex(METRIC, rule["name"]["matches"])
        self.assertEqual(metric_names(rule["seriesQuery"]), {METRIC})
        self.assertEqual(rule["resources"]["overrides"]["pod"], {"resource": "pod"})
        self.assertEqual(rule["resources"]["overrides"]["namespace"], {"resource": "namespace"})
        for placeholder in ("<<.Series>>", "<<.LabelMatchers>>", "<<.GroupBy>>"):
            self.assertIn(placeholder, rule["metricsQuery"])

    def test_a_running_daemon_exports_the_metric_and_its_segment_fits(self):
        gecd = gecd_daemon.find_binary("gecd", "GECD_BINARY")
        if gecd is None:
            self.skipTest("no gecd binary (GECD_BINARY or build/gecd)")
        names = {METRIC, *metric_names(self.scaled_object["spec"]["triggers"][0]["metadata"]
                                       ["query"])}
        for rule in self.adapter_config["rules"]:
            names |= metric_names(rule["seriesQuery"]) | {rule["name"]["as"]}
        for name, v in self.variants().items():
            if "keda" in name:
                continue  # the same pod as its variant without KEDA
            with self.subTest(variant=name):
                overrides = list(v.overrides)
                # The image's paths, here the repository's (model.dir: gecd_daemon's).
                overrides += ["--set", "spelling.lexicon=" + os.path.join(
                    gecd_daemon.MODEL_DIR, "lexicon.tsv")]
                daemon = gecd_daemon.Daemon(gecd, v.config_text, overrides, name=name)
                with daemon:
                    exported = daemon.metrics()
                    for metric in sorted(names):
                        self.assertIn(metric, exported, "named by an autoscaler, not exported")
                        kind, samples = exported[metric]
                        self.assertEqual(kind, "gauge", metric)
                        self.assertEqual(len(samples), 1, f"{metric}: one series per pod")
                    (segment,) = daemon.segments()
                    size = os.stat(segment).st_size
                    rings = int(v.config["server"]["workers"]) * 2 * int(
                        v.config["server"]["ring_slots"]) * int(v.config["server"]
                                                                ["ring_slot_bytes"])
                    # The formula in deployment.yaml's comment, within its headers' 64 KiB.
                    self.assertGreaterEqual(size, rings)
                    self.assertLess(size, rings + 64 * 1024)
                    shm = v.shm_volume()
                    self.assertEqual(shm["medium"], "Memory")
                    self.assertLessEqual(size, quantity(shm["sizeLimit"]))
                    print(f"{name}: {v.config['server']['workers']} workers, segment "
                          f"{size / MIB:.3f} MiB, /dev/shm sizeLimit {shm['sizeLimit']}")
                    self.assertEqual(daemon.stop(), 0, daemon.log_tail())
                    self.assertEqual(daemon.segments(), [], "the segment outlived the daemon")


if __name__ == "__main__":
    unittest.main()
