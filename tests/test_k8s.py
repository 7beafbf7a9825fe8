"""k8s/: every overlay renders with the real `kubectl kustomize` (default load restrictions, as
`kubectl apply -k` uses them), validates against the KubeRay
v1.7.0 CRD schemas and the Kubernetes schemas, is locked down, and agrees with the Dockerfile,
the CLI and the search-space files.

The CRDs are read from $KUBERAY_CRDS (default ../shared/kuberay-crds beside the repository)."""

import copy
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

from conftest import ROOT

OVERLAYS = ["cpu", "gpu"]
K8S_VERSION = "1.32"  # the schemas kubernetes-validate checks the core resources against
CRD_DIR = Path(os.environ.get("KUBERAY_CRDS", ROOT.parent / "shared" / "kuberay-crds"))
SPACES = sorted((ROOT / "search_spaces").glob("*.yaml"))
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pin(package: str) -> str:
    dep = next(d for d in PYPROJECT["project"]["dependencies"] if re.match(rf"{package}(\[.*\])?==", d))
    return dep.split("==")[1]


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request) -> tuple[str, list[dict]]:
    if not shutil.which("kubectl"):
        pytest.skip("kubectl not on the PATH")
    # exactly as `kubectl apply -k k8s/overlays/OVERLAY` renders: no --load-restrictor
    r = subprocess.run(["kubectl", "kustomize", str(ROOT / "k8s" / "overlays" / request.param)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return request.param, [d for d in yaml.safe_load_all(r.stdout) if d]


def _one(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _pod_specs(docs) -> dict[str, dict]:
    """Every pod template of the rendered manifests, by a readable name."""
    pods = {}
    for d in docs:
        name = f"{d['kind']}/{d['metadata']['name']}"
        if d["kind"] in ("Deployment", "StatefulSet"):
            pods[name] = d["spec"]["template"]["spec"]
        elif d["kind"] in ("RayCluster", "RayJob"):
            cluster = d["spec"] if d["kind"] == "RayCluster" else d["spec"]["rayClusterSpec"]
            pods[f"{name}/head"] = cluster["headGroupSpec"]["template"]["spec"]
            for group in cluster["workerGroupSpecs"]:
                pods[f"{name}/{group['groupName']}"] = group["template"]["spec"]
            if d["kind"] == "RayJob":
                pods[f"{name}/submitter"] = d["spec"]["submitterPodTemplate"]["spec"]
    return pods


def _ray_pods(docs) -> dict[str, dict]:
    return {k: v for k, v in _pod_specs(docs).items() if k.startswith("Ray") and not k.endswith("submitter")}


# -- schemas -------------------------------------------------------------------------------


def _strict(schema):
    """The CRD schema with unknown fields rejected (the API server would drop them silently)."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema \
                and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [_strict(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def crd_schemas() -> dict[str, jsonschema.Draft202012Validator]:
    if not CRD_DIR.is_dir():
        pytest.skip(f"no KubeRay CRDs at {CRD_DIR} (set KUBERAY_CRDS)")
    schemas = {}
    for path in CRD_DIR.glob("*.yaml"):
        for crd in yaml.load_all(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if crd and crd.get("kind") == "CustomResourceDefinition":
                v1 = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
                schema = _strict(v1["schema"]["openAPIV3Schema"])
                schemas[crd["spec"]["names"]["kind"]] = jsonschema.Draft202012Validator(schema)
    assert {"RayCluster", "RayJob"} <= set(schemas), f"{CRD_DIR}: RayCluster and RayJob CRDs expected"
    return schemas


def test_ray_resources_validate_against_the_kuberay_crds(rendered, crd_schemas):
    _, docs = rendered
    ray = [d for d in docs if d["apiVersion"] == "ray.io/v1"]
    assert {d["kind"] for d in ray} == {"RayCluster", "RayJob"}
    for doc in ray:
        crd_schemas[doc["kind"]].validate(doc)


def test_a_misspelt_ray_field_is_rejected(rendered, crd_schemas):
    _, docs = rendered
    job = copy.deepcopy(_one(docs, "RayJob"))
    job["spec"]["backofLimit"] = job["spec"].pop("backoffLimit")
    with pytest.raises(jsonschema.ValidationError, match="backofLimit"):
        crd_schemas["RayJob"].validate(job)


def test_core_resources_validate_against_the_kubernetes_schemas(rendered):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    _, docs = rendered
    core = [d for d in docs if d["apiVersion"] != "ray.io/v1"]
    assert {d["kind"] for d in core} >= {"Namespace", "Deployment", "StatefulSet", "Service",
                                         "PersistentVolumeClaim", "ConfigMap"}
    for doc in core:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


# -- security --------------------------------------------------------------------------------


def test_every_pod_runs_as_non_root_without_escalation_and_with_limits(rendered):
    _, docs = rendered
    pods = _pod_specs(docs)
    assert len(pods) == 7  # mlflow, postgres, RayCluster head + workers, RayJob head + workers + submitter
    for name, pod in pods.items():
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] != 0, name
        for c in pod["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, (name, c["name"])
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], (name, c["name"])
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), (name, c["name"], kind)
    for d in docs:
        if d["kind"] in ("RayCluster", "RayJob"):
            cluster = d["spec"] if d["kind"] == "RayCluster" else d["spec"]["rayClusterSpec"]
            assert {"cpu", "memory"} <= set(cluster["autoscalerOptions"]["resources"]["limits"])


def test_nothing_is_exposed_outside_the_cluster(rendered):
    _, docs = rendered
    assert not [d for d in docs if d["kind"] in ("Ingress", "Route", "Gateway")]
    for service in (d for d in docs if d["kind"] == "Service"):
        assert service["spec"].get("type", "ClusterIP") == "ClusterIP", service["metadata"]["name"]
    for d in docs:
        if d["kind"] in ("RayCluster", "RayJob"):
            cluster = d["spec"] if d["kind"] == "RayCluster" else d["spec"]["rayClusterSpec"]
            assert cluster["headGroupSpec"].get("serviceType", "ClusterIP") == "ClusterIP"


def test_passwords_come_from_a_secret_the_docs_create(rendered):
    _, docs = rendered
    assert not [d for d in docs if d["kind"] == "Secret"]  # no credentials in the repository
    secrets = set()
    for pod in _pod_specs(docs).values():
        for c in pod["containers"]:
            for env in c.get("env", []):
                if "PASSWORD" in env["name"]:
                    assert "value" not in env, env
                    secrets.add(env["valueFrom"]["secretKeyRef"]["name"])
    assert secrets == {"mlflow-postgres"}
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    assert "create secret generic mlflow-postgres" in deploy and "POSTGRES_PASSWORD" in deploy


# -- the pieces fit together ----------------------------------------------------------------


def test_ray_pods_log_to_the_mlflow_service(rendered):
    _, docs = rendered
    service = _one(docs, "Service", "mlflow")
    uri = f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"
    mlflow = _one(docs, "Deployment", "mlflow")["spec"]["template"]["spec"]["containers"][0]
    assert "--backend-store-uri=postgresql://" in " ".join(mlflow["args"])
    assert any(a.startswith("--allowed-hosts=") and "mlflow:5000" in a for a in mlflow["args"])
    for name, pod in _ray_pods(docs).items():
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["MLFLOW_TRACKING_URI"] == uri, name


def test_every_ray_pod_mounts_the_shared_results_and_the_search_spaces(rendered):
    _, docs = rendered
    assert _one(docs, "PersistentVolumeClaim", "sweeps")["spec"]["accessModes"] == ["ReadWriteMany"]
    spaces = _one(docs, "ConfigMap", "search-spaces")["data"]
    assert set(spaces) == {p.name for p in SPACES}  # every file of search_spaces/, the RayJob's among them
    for name, text in spaces.items():
        assert text == (ROOT / "search_spaces" / name).read_text(), name  # the files of search_spaces/, verbatim
    for name, pod in _ray_pods(docs).items():
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: volumes[m["name"]] for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["/mnt/sweeps"]["persistentVolumeClaim"]["claimName"] == "sweeps", name
        assert mounts["/app/search_spaces"]["configMap"]["name"] == "search-spaces", name


def test_the_committed_search_spaces_configmap_is_what_make_k8s_spaces_writes():
    """k8s/base/search-spaces.yaml is generated from search_spaces/ (the base may not read outside
    its folder); a space added or edited without `make k8s-spaces` fails here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("k8s_spaces", ROOT / "k8s" / "spaces.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert set(generator.space_files()) == {p.name for p in SPACES}
    assert (ROOT / "k8s" / "base" / "search-spaces.yaml").read_text() == generator.render(), \
        "k8s/base/search-spaces.yaml is stale: run `make k8s-spaces`"


def _quantity(value) -> float:
    value = str(value)
    return float(value[:-1]) / 1000 if value.endswith("m") else float(value)


def test_workers_fit_the_trials_of_every_search_space(rendered):
    overlay, docs = rendered
    cluster = _one(docs, "RayCluster")["spec"]
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"  # trials go to workers
    for group in cluster["workerGroupSpecs"]:
        assert 0 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        gpus = _quantity(limits.get("nvidia.com/gpu", 0))
        assert (gpus >= 1) == (overlay == "gpu"), limits
        for space in SPACES:
            need = yaml.safe_load(space.read_text())["resources"]
            assert _quantity(limits["cpu"]) >= need["cpu"] and gpus >= need.get("gpu", 0), (space.name, limits)


def test_rayjob_runs_the_cli_on_a_copy_of_the_raycluster_and_retries(rendered):
    from sweeper.cli import build_parser

    _, docs = rendered
    job = _one(docs, "RayJob")
    assert job["spec"]["rayClusterSpec"] == _one(docs, "RayCluster")["spec"]
    assert job["spec"]["backoffLimit"] >= 1 and job["spec"]["shutdownAfterJobFinishes"] is True
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[0] == "sweeper"
    args = build_parser().parse_args(argv[1:])  # the real CLI accepts it
    assert args.verb == "launch" and args.address == "auto"
    assert Path(args.file).parent == Path("/app/search_spaces") and (ROOT / "search_spaces" / Path(args.file).name).exists()
    assert args.storage == "/mnt/sweeps" and args.shared_storage  # resumable from the shared volume


def test_images_and_versions_match_the_dockerfile_and_pyproject(rendered):
    overlay, docs = rendered
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    ray = _pin("ray")
    assert f"ARG BASE_IMAGE=rayproject/ray:{ray}-py311-${{VARIANT}}" in dockerfile
    assert re.search(r"^USER 1000:100$", dockerfile, re.M) and "WORKDIR /app" in dockerfile
    assert "COPY --chown=1000:100 search_spaces/ search_spaces/" in dockerfile
    assert _one(docs, "RayCluster")["spec"]["rayVersion"] == ray
    tag = f"{PYPROJECT['project']['version']}-{overlay}"
    for name, pod in _pod_specs(docs).items():
        if "postgres" in name:
            continue
        for c in pod["containers"]:
            assert c["image"].endswith(f"/dat-sweeper:{tag}"), (name, c["image"])
        assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (1000, 100), name
