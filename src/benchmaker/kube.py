"""The controller's own calls to the Kubernetes API (``--profile nrp``), before anything is submitted.

:func:`check_namespace` asks the API server whether this account may list Jobs in the namespace the
run will use (the kubernetes executor creates, reads and deletes Jobs and Secrets there): a missing
namespace, a namespace without rights or unusable credentials give one :class:`KubeError` naming
the setting that fixes it, instead of an ``ApiException`` traceback from the first submission.

:func:`previous_jobs` finds the Jobs of an earlier controller of the same build that have not
finished (a controller killed, evicted or restarted by its Job's ``backoffLimit``), whether their
pod runs, waits to be scheduled or does not exist yet (:func:`finished`): the kubernetes
executor labels its Jobs only ``app=snakemake``, so a Job belongs to this build when its command
names the build's default storage prefix (``--default-storage-prefix s3://BUCKET/PREFIX``, one
prefix per build). The workflow cancels them before submitting anything (:func:`cancel_jobs`), so
that two Jobs never write the same output; their outputs are then remade, because the dead
controller left them marked incomplete (``rerun-incomplete`` in the profile).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

__all__ = ["KubeError", "PreviousJob", "cancel_jobs", "check_namespace", "finished", "load_config", "previous_jobs"]


class KubeError(RuntimeError):
    """The Kubernetes API cannot be used as configured (the message says how to fix it)."""


def load_config() -> str:
    """Load the kubeconfig (``KUBECONFIG`` / ``~/.kube/config``) or, in a pod, the service account;
    returns which one was used."""
    import kubernetes.config

    try:
        kubernetes.config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
        return "kubeconfig"
    except Exception as first:  # noqa: BLE001 - any failure: try the in-cluster account
        try:
            kubernetes.config.load_incluster_config()
            return "service account"
        except Exception:  # noqa: BLE001
            raise KubeError(f"no Kubernetes credentials: {first}; get a kubeconfig for NRP "
                            "(https://nrp.ai/documentation/userdocs/start/getting-started/) and set "
                            "KUBECONFIG, or run the controller in the cluster (deploy/nrp/)") from None


def check_namespace(namespace: str, *, timeout: float = 20) -> None:
    """Raise :class:`KubeError` unless this account may list Jobs in ``namespace``."""
    import kubernetes.client
    from kubernetes.client.rest import ApiException

    how = load_config()
    api = kubernetes.client.BatchV1Api()
    fix = ("set BENCHMAKER_K8S_NAMESPACE to a namespace you may use, or switch the kubeconfig context's "
           "namespace: kubectl config set-context --current --namespace=<your namespace>")
    try:
        api.list_namespaced_job(namespace, limit=1, _request_timeout=timeout)
    except ApiException as exc:
        if exc.status in (401,):
            raise KubeError(f"Kubernetes API: the credentials ({how}) were rejected (401 Unauthorized); "
                            "refresh your kubeconfig (NRP: download it again from the portal)") from None
        if exc.status == 403:
            raise KubeError(f"Kubernetes namespace {namespace!r}: this account ({how}) may not list Jobs "
                            f"there (403 Forbidden); {fix}") from None
        if exc.status == 404:
            raise KubeError(f"Kubernetes namespace {namespace!r} does not exist (404); {fix}") from None
        raise KubeError(f"Kubernetes namespace {namespace!r}: {exc.status} {exc.reason}; {fix}") from None
    except Exception as exc:  # noqa: BLE001 - connection errors come from urllib3 in many shapes
        raise KubeError(f"Kubernetes API not reachable ({how}): {exc}; check the kubeconfig's server "
                        "and your network") from None


@dataclass(frozen=True)
class PreviousJob:
    name: str
    rule: str
    active: int = 0  # pods pending or running (0: none yet, e.g. over the namespace's pod quota)


def _rule(args: str) -> str:
    m = re.search(r"--target-jobs '?(\w+):", args)
    return m.group(1) if m else "?"


def finished(job) -> bool:
    """Whether a Job (a ``V1Job``) has ended: a ``Complete`` or ``Failed`` condition, or a succeeded or
    failed pod and none active (the executor's Jobs run one pod, ``backoffLimit: 0``).

    Not ``status.active``: that counts only pods that exist. A Job whose pod is not created yet (the
    namespace's pod quota is used up, or its job controller has not synced it: its status is still
    empty) or whose pod is being replaced has no active pod but will run; it belongs to the previous
    controller as much as a running one does, and would write the same outputs as the new Jobs."""
    status = job.status
    if status is None:
        return False
    for c in status.conditions or []:
        if c.type in ("Complete", "Failed") and str(c.status) == "True":
            return True
    return bool((status.succeeded or status.failed) and not status.active)


def previous_jobs(namespace: str, storage_prefix: str) -> list[PreviousJob]:
    """Jobs in ``namespace`` that have not finished (running, pending, or still without a pod: see
    :func:`finished`) and whose command names ``storage_prefix`` (this build's Jobs)."""
    import kubernetes.client

    load_config()
    api = kubernetes.client.BatchV1Api()
    want = re.compile(rf"--default-storage-prefix '?{re.escape(storage_prefix.rstrip('/'))}/?'?(\s|$)")
    out = []
    for job in api.list_namespaced_job(namespace, label_selector="app=snakemake").items:
        if finished(job):
            continue
        containers = job.spec.template.spec.containers or []
        text = " ".join(" ".join([*(c.command or []), *(c.args or [])]) for c in containers)
        if want.search(text):
            out.append(PreviousJob(job.metadata.name, _rule(text), int(job.status.active or 0) if job.status else 0))
    return sorted(out, key=lambda j: (j.rule, j.name))


def cancel_jobs(namespace: str, jobs: list[PreviousJob], *, timeout: float = 300) -> None:
    """Delete ``jobs`` (and their pods) and wait until none of them is active any more."""
    import kubernetes.client
    from kubernetes.client.rest import ApiException

    load_config()
    batch, core = kubernetes.client.BatchV1Api(), kubernetes.client.CoreV1Api()
    # Jobs without a pod first: a pod deleted before them frees its place in the namespace's pod
    # quota, and a waiting Job of the same dead controller would get it and start
    for job in sorted(jobs, key=lambda j: (j.active > 0, j.rule, j.name)):
        try:
            batch.delete_namespaced_job(job.name, namespace, propagation_policy="Foreground")
            # and its pod, should the cluster not delete it with its Job
            for pod in core.list_namespaced_pod(namespace, label_selector=f"job-name={job.name}").items:
                core.delete_namespaced_pod(pod.metadata.name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise KubeError(f"cannot cancel Job {job.name} of a previous controller in namespace "
                                f"{namespace!r}: {exc.status} {exc.reason}; delete it with kubectl") from None
    deadline = time.monotonic() + timeout
    names = {j.name for j in jobs}
    while time.monotonic() < deadline:
        alive = [j for j in batch.list_namespaced_job(namespace, label_selector="app=snakemake").items
                 if j.metadata.name in names and not finished(j)]
        if not alive:
            return
        time.sleep(2)
    raise KubeError(f"Jobs of a previous controller still active after {timeout:.0f} s: "
                    f"{', '.join(sorted(names))}; delete them with kubectl and run again")
