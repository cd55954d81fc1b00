"""What the deploy/k8s tests share: reading manifests, rendering kustomizations with `kubectl
kustomize`, checking a pod spec is locked down, and validating objects offline against the
Kubernetes API's schema so that an unknown field or a wrong type is an error.

The schemas of the built-in kinds are the Kubernetes OpenAPI definitions as JSON Schema, in
their strict form (every object `additionalProperties: false`), shipped by the
kubernetes-validate package (PyPI; scripts/install_deps.sh installs it). The custom resources
gecd uses (ServiceMonitor, ScaledObject) and the Prometheus Adapter's config file have schemas
written from their CRDs and sources in k8s_schemas/ (each names its source); they refer to the
Kubernetes definitions for the types they embed (ObjectMeta, LabelSelector, HPA behavior).
"""

import copy
import importlib.resources
import json
import os
import shutil
import subprocess
import tempfile

import yaml

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy", "k8s")
SCHEMAS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "k8s_schemas")

# The oldest Kubernetes release the manifests target (autoscaling/v2, policy/v1 and the PDB's
# unhealthyPodEvictionPolicy are all there) and the newest the schemas describe.
OLDEST_KUBERNETES = "1.28.0"

CUSTOM_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor.yaml",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject.yaml",
}
ADAPTER_CONFIG_SCHEMA = "prometheus-adapter-config.yaml"

# The Kubernetes definitions under their own $id (their schemas' references) and, for the
# schemas in k8s_schemas/ ($id https://gecd.invalid/k8s-schemas/NAME), as "kubernetes.json".
_DEFINITIONS_IDS = ("https://kubernetes.io/api/_definitions.json",
                    "https://gecd.invalid/k8s-schemas/kubernetes.json")


def load_documents(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def load(path):
    docs = load_documents(path)
    assert len(docs) == 1, f"{path}: expected one document, found {len(docs)}"
    return docs[0]


def kustomization_objects(directory):
    """{(kind, name): object} of the resource files a kustomization lists, and the kustomization
    itself."""
    kustomization = load(os.path.join(directory, "kustomization.yaml"))
    objects = {}
    for name in kustomization.get("resources", []):
        doc = load(os.path.join(directory, name))
        objects[(doc["kind"], doc["metadata"]["name"])] = doc
    return objects, kustomization


def is_subset(small, big):
    return all(big.get(k) == v for k, v in small.items())


def kustomize(directory, components=()):
    """The objects `kubectl kustomize` renders from `directory` with `components` (directories)
    added, or None without kubectl. An overlay in a temporary directory adds the components:
    kustomize takes only relative paths."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    with tempfile.TemporaryDirectory() as overlay:
        target = directory
        if components:
            rel = lambda path: os.path.relpath(path, overlay)  # noqa: E731
            with open(os.path.join(overlay, "kustomization.yaml"), "w") as f:
                yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1",
                                "kind": "Kustomization",
                                "resources": [rel(directory)],
                                "components": [rel(c) for c in components]}, f)
            target = overlay
        out = subprocess.run([kubectl, "kustomize", target], capture_output=True, text=True,
                             timeout=60)
    if out.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} {list(components)}: {out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d is not None]


def name_of(doc):
    return f'{doc.get("kind")} {doc.get("metadata", {}).get("name")}'


def assert_locked_down(test, pod, container):
    """Non-root, RuntimeDefault seccomp, read-only root, no privilege and no capability."""
    pod_sc, sc = pod["securityContext"], container["securityContext"]
    test.assertTrue(pod_sc["runAsNonRoot"])
    test.assertGreater(pod_sc["runAsUser"], 0)
    # The images' own user (docker/Dockerfile, docker/Dockerfile.cuda), which owns nothing in
    # them but may read all: another uid would work too, this one keeps them in step.
    for name in ("Dockerfile", "Dockerfile.cuda"):
        with open(os.path.join(ROOT, "docker", name)) as f:
            user = [line.split()[1] for line in f if line.startswith("USER ")]
        test.assertEqual(user, [f"{pod_sc['runAsUser']}:{pod_sc['runAsGroup']}"], name)
    test.assertEqual(pod_sc["seccompProfile"]["type"], "RuntimeDefault")
    test.assertTrue(sc["readOnlyRootFilesystem"])
    test.assertFalse(sc["allowPrivilegeEscalation"])
    test.assertFalse(sc.get("privileged", False))
    test.assertEqual(sc["capabilities"]["drop"], ["ALL"])
    test.assertNotIn("add", sc["capabilities"])
    test.assertIn("cpu", container["resources"]["requests"])
    test.assertIn("memory", container["resources"]["limits"])


class SchemaValidator:
    """Validates objects against one Kubernetes release's strict schemas. errors(doc) lists
    "path: message" for each violation (empty when valid)."""

    def __init__(self, version=None):
        try:
            import jsonschema
            import kubernetes_validate.utils
            import referencing
        except ImportError as e:
            raise ImportError(f"{e}: the schema checks need kubernetes-validate (PyPI), which "
                              "scripts/install_deps.sh installs") from e

        self._jsonschema = jsonschema
        self.version = version or kubernetes_validate.utils.latest_version()
        self._dir = (importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
                     / f"v{self.version}-local-strict")
        if not self._dir.is_dir():
            raise ValueError(f"kubernetes-validate has no schemas for Kubernetes {self.version}")
        definitions = json.loads((self._dir / "_definitions.json").read_text())
        resource = referencing.Resource.from_contents(definitions)
        self._registry = referencing.Registry().with_resources(
            (uri, resource) for uri in _DEFINITIONS_IDS)
        self._custom = {}
        for key, name in CUSTOM_SCHEMAS.items():
            self._custom[key] = load(os.path.join(SCHEMAS, name))
        self.adapter_config_schema = load(os.path.join(SCHEMAS, ADAPTER_CONFIG_SCHEMA))

    def schema_for(self, doc):
        api_version, kind = doc.get("apiVersion", ""), doc.get("kind", "")
        if (api_version, kind) in self._custom:
            return self._custom[(api_version, kind)]
        # kubernetes-validate's file names: kind-group-version.json, the group cut at its first
        # dot (rbac.authorization.k8s.io/v1 -> rbac-v1), the core group without one.
        group_version = api_version.split("/")
        if len(group_version) == 2:
            group_version[0] = group_version[0].split(".")[0]
        path = self._dir / f'{kind.lower()}-{"-".join(group_version)}.json'
        if not path.is_file():
            raise ValueError(f"no schema for {api_version} {kind} in Kubernetes {self.version}")
        return json.loads(path.read_text())

    def errors_against(self, schema, doc):
        validator = self._jsonschema.Draft202012Validator(schema, registry=self._registry)
        found = []
        errors = validator.iter_errors(copy.deepcopy(doc))
        for error in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
            path = ".".join(str(p) for p in error.absolute_path) or "(top)"
            found.append(f"{path}: {error.message}")
        return found

    def errors(self, doc):
        return self.errors_against(self.schema_for(doc), doc)
