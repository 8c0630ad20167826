"""The NRP deployment files: Kubernetes manifests (deploy/nrp/), the Kaniko CI recipe and the Dockerfile.

Each manifest is checked like a schema validator would: it must deserialize into the official
`kubernetes` client model of its kind (required fields present, types right) and serialize back to
exactly the same document (a misspelled or unknown field would be dropped, so it fails). The RBAC
Role must allow every API call the kubernetes executor plugin makes (the routes of
tests/fake_kube.py) and nothing cluster-wide; the controller Job must refer to the objects the
other manifests create.
"""

from __future__ import annotations

import re

import pytest
import support
import yaml

ROOT = support.ROOT
DEPLOY = ROOT / "deploy" / "nrp"
KINDS = {("v1", "ServiceAccount"): "V1ServiceAccount", ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
         ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding", ("v1", "Secret"): "V1Secret",
         ("batch/v1", "Job"): "V1Job", ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim"}


def docs() -> list[tuple[str, dict]]:
    out = []
    for f in sorted(DEPLOY.glob("*.yaml")):
        for d in yaml.safe_load_all(f.read_text()):
            if d:
                out.append((f.name, d))
    return out


def by_kind(kind: str) -> list[dict]:
    return [d for _, d in docs() if d["kind"] == kind]


def _strip_none(obj):
    if isinstance(obj, dict):
        return {k: _strip_none(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_strip_none(v) for v in obj]
    return obj


def test_every_manifest_is_a_valid_object_of_its_kind():
    import kubernetes.client

    api = kubernetes.client.ApiClient()
    seen = set()
    for name, d in docs():
        key = (d.get("apiVersion"), d.get("kind"))
        assert key in KINDS, f"{name}: unexpected {key}"
        model = api._ApiClient__deserialize(d, KINDS[key])  # raises on missing required fields
        back = _strip_none(api.sanitize_for_serialization(model))
        assert back == _strip_none(d), f"{name} {key}: fields lost in the round trip (misspelled?)"
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", d["metadata"]["name"]), d["metadata"]
        assert "namespace" not in d["metadata"], "namespace comes from `kubectl -n`"
        seen.add(d["kind"])
    assert {"ServiceAccount", "Role", "RoleBinding", "Secret", "Job", "PersistentVolumeClaim"} <= seen


def _allowed(role: dict, group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
               for r in role["rules"])


def test_role_allows_exactly_what_the_executor_does():
    """The calls of snakemake-executor-plugin-kubernetes 0.5.1 (the fake API's routes)."""
    (role,) = by_kind("Role")
    needed = [("batch", "jobs", "create"), ("batch", "jobs/status", "get"), ("batch", "jobs", "delete"),
              ("", "pods", "list"), ("", "pods", "delete"), ("", "pods/log", "get"),
              ("", "secrets", "create"), ("", "secrets", "delete")]
    for group, resource, verb in needed:
        assert _allowed(role, group, resource, verb), (group, resource, verb)
    assert not by_kind("ClusterRole") and not by_kind("ClusterRoleBinding")
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
    (binding,) = by_kind("RoleBinding")
    (sa,) = by_kind("ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"]}]


def test_controller_job_refers_to_the_shipped_objects():
    (job,) = by_kind("Job")
    pod = job["spec"]["template"]["spec"]
    (sa,) = by_kind("ServiceAccount")
    (secret,) = by_kind("Secret")
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    c = pod["containers"][0]
    assert secret["metadata"]["name"] in [e["secretRef"]["name"] for e in c["envFrom"]]
    assert set(secret["stringData"]) == {"SNAKEMAKE_STORAGE_S3_ACCESS_KEY", "SNAKEMAKE_STORAGE_S3_SECRET_KEY"}
    assert all(v.startswith("<") for v in secret["stringData"].values()), "no real keys in the repo"
    claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
    assert claims <= {p["metadata"]["name"] for p in by_kind("PersistentVolumeClaim")}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["BENCHMAKER_IMAGE"] == c["image"]
    from benchmaker.staging import valid_bucket_name

    assert valid_bucket_name(env["BENCHMAKER_S3_BUCKET"])
    pvc_name, mount = env["BENCHMAKER_K8S_PVC"].split(":")
    assert pvc_name in claims and mount in {m["mountPath"] for m in c["volumeMounts"]}
    script = c["args"][0]
    assert "snakemake --profile profiles/nrp --configfile /config/my.yaml" in script
    # NRP: limits within 20 % of requests
    res = c["resources"]
    assert res["requests"] == res["limits"]


def test_nrp_profile_defaults_are_valid():
    import test_profiles

    prof = test_profiles.load("nrp")
    from benchmaker.staging import valid_bucket_name

    bucket = re.match(r"s3://([^/]+)/", prof["default-storage-prefix"]).group(1)
    assert valid_bucket_name(bucket), bucket
    assert not valid_bucket_name("sage_imsearch")
    assert re.fullmatch(r"https?://[a-z0-9.-]+(:\d+)?", prof["storage-s3-endpoint-url"])
    assert re.fullmatch(r"[a-z0-9.-]+(:\d+)?/[a-z0-9._/-]+:[\w.-]+", prof["container-image"])


def test_dockerfile_pins_a_cuda12_torch_and_is_switchable():
    text = (ROOT / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.MULTILINE))
    assert re.fullmatch(r"https://download\.pytorch\.org/whl/cu12\d", args["TORCH_INDEX_URL"])
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"torch=={args["TORCH_VERSION"]}"' in pyproject
    assert f'"torchvision=={args["TORCHVISION_VERSION"]}"' in pyproject
    # torch comes from that index only (--index-url, not --extra-index-url: no PyPI fallback)
    assert re.search(r'pip install --index-url "\$\{TORCH_INDEX_URL\}"', text)
    assert "extra-index-url" not in text
    for path in ("Snakefile", "rules", "scripts", "config", "profiles", "src"):
        assert re.search(rf"^COPY {path} ", text, flags=re.MULTILINE), path
    assert re.search(r"apt-get install[^\n]*\bgit\b", text)  # Snakemake lists sources with git


def test_gitlab_ci_builds_with_kaniko():
    ci = yaml.safe_load((ROOT / ".gitlab-ci.yml").read_text())
    job = ci["build-image"]
    assert "kaniko-project/executor" in job["image"]["name"] and job["image"]["entrypoint"] == [""]
    script = "\n".join(job["script"])
    assert "/kaniko/executor" in script and '--dockerfile "$CI_PROJECT_DIR/Dockerfile"' in script
    assert "$CI_REGISTRY_IMAGE:$CI_COMMIT_SHORT_SHA" in script
    dockerfile_args = set(re.findall(r"^ARG (\w+)=", (ROOT / "Dockerfile").read_text(), flags=re.MULTILINE))
    for arg in re.findall(r'--build-arg "(\w+)=', script):
        assert arg in dockerfile_args, arg
    assert ci["variables"]["TORCH_INDEX_URL"] == re.search(
        r"^ARG TORCH_INDEX_URL=(\S+)$", (ROOT / "Dockerfile").read_text(), flags=re.MULTILINE).group(1)


@pytest.mark.parametrize("name", ["fake_kube"])
def test_fake_kube_rejects_what_the_api_server_rejects(name):
    """The fake API is strict: the same checks the real server applies to a Job body."""
    from fake_kube import FakeKube

    fk = FakeKube(namespace="sage", pvcs={"imgs"})
    fk.secrets["s1"] = {"data": {"k": "dg=="}}
    ok = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "snakejob-1"},
          "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
              "name": "snakemake", "image": "x", "resources": {
                  "requests": {"cpu": "1000m", "memory": "4000M", "nvidia.com/gpu": "1"},
                  "limits": {"cpu": "1000m", "memory": "4000M", "nvidia.com/gpu": "1"}},
              "env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k"}}}],
              "volumeMounts": [{"name": "imgs", "mountPath": "/data"}]}],
              "volumes": [{"name": "imgs", "persistentVolumeClaim": {"claimName": "imgs"}}]}}}}
    assert fk.validate_job(ok) == []
    import copy

    bad = copy.deepcopy(ok)
    c = bad["spec"]["template"]["spec"]["containers"][0]
    del c["resources"]["limits"]["nvidia.com/gpu"]
    c["env"][0]["valueFrom"]["secretKeyRef"]["name"] = "gone"
    bad["metadata"]["name"] = "Snake_Job"
    bad["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] = "nope"
    errors = " | ".join(fk.validate_job(bad))
    for what in ("nvidia.com/gpu", "secret gone/k", "Snake_Job", "'nope'"):
        assert what in errors, (what, errors)
