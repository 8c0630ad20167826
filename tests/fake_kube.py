"""A strict stand-in for the Kubernetes API that snakemake-executor-plugin-kubernetes (0.5.1) talks to.

Endpoints (exactly the calls the plugin makes; anything else is a 404 and recorded in ``unexpected``):

* ``POST   /api/v1/namespaces/{ns}/secrets``                 register_secret (409 if it exists)
* ``DELETE /api/v1/namespaces/{ns}/secrets/{name}``          unregister_secret
* ``POST   /apis/batch/v1/namespaces/{ns}/jobs``             create_namespaced_job
* ``GET    /apis/batch/v1/namespaces/{ns}/jobs/{name}/status`` read_namespaced_job_status
* ``GET    /apis/batch/v1/namespaces/{ns}/jobs[?labelSelector=&limit=]`` list_namespaced_job (the
  controller's namespace check, benchmaker.kube)
* ``GET    /api/v1/namespaces/{ns}/pods?labelSelector=job-name=X`` list_namespaced_pod
* ``GET    /api/v1/namespaces/{ns}/pods/{pod}/log``         read_namespaced_pod_log
* ``DELETE /api/v1/namespaces/{ns}/pods/{pod}``, ``DELETE /apis/batch/v1/namespaces/{ns}/jobs/{name}``

Every Job body is validated like the API server would: it must deserialize into the
``kubernetes`` client's ``V1Job`` model (required fields), names must be DNS-1123 labels, resource
quantities must parse, extended resources (``nvidia.com/gpu``) need a limit equal to the request,
secret references must name a secret that exists in the namespace, volumes must be declared for
every mount, and PVCs must exist (``pvcs``). Invalid bodies get a 422 (Snakemake then fails).

With ``run_jobs=True`` a created Job is "run": its container command (``/bin/sh -c ...``) is
executed in a fresh empty folder (the pod's ``emptyDir`` at ``/workdir``) with the container's
environment (secret values resolved) plus ``base_env`` (PATH to the image's Python), with
``hide_paths`` (the controller's own folders) covered by empty tmpfs mounts. Isolation is the
default, not an extra: a fake that runs Jobs refuses to start without ``hide_paths`` or where a
private mount namespace cannot be made (root + ``unshare``), so a test fails rather than passes with
pods that see the controller's disk. A PVC mount
``<claim>:<path>`` is honoured only if the claim is in ``pvcs`` and ``path`` exists on this machine
(the folder the claim would hold). The pod's status follows the process's exit code.

Statuses are the API server's: a failed Job has ``failed: 1`` and a ``Failed`` condition
(``BackoffLimitExceeded``), a finished one a ``Complete`` condition; a pod's ``snakemake`` container
is ``terminated`` with its exit code and reason (``Completed``, ``Error``). ``fates`` ends chosen pods
as the cluster would (keyed by a regular expression matched against the Job's ``rule:wildcards``
target): ``OOMKilled`` (the container killed with SIGKILL once it runs: exit 137, reason
``OOMKilled``), ``Evicted`` (the kubelet: pod ``phase: Failed, reason: Evicted`` with the kubelet's
message, the container ``ContainerStatusUnknown``, exit 137) and ``DeadlineExceeded`` (the Job's
``activeDeadlineSeconds``: the job controller deletes the pod, no log, the Job's condition says so).

``pod_quota=N`` models a namespace ResourceQuota on pods (NRP namespaces have one): at most N pods
exist at once. A Job created beyond that is accepted (201) but its job controller's pod creation is
forbidden (``exceeded quota``): the Job has no pod and the status the job controller writes after
its first sync, ``startTime``, ``ready: 0``, ``terminating: 0`` and ``uncountedTerminatedPods: {}``,
with no ``active``, ``succeeded`` or ``failed`` count (omitted when zero, as the API serializes
them) and no condition; it gets its pod when another one ends or is deleted.

``hold_create=REGEX`` holds the answer to the first Job create whose ``rule:wildcards`` target
matches: the Job is stored and runs (or waits for its pod) as any other, ``held`` names it and
``create_held`` is set, and the answer is sent only once ``release_create`` is set (or after
``job_timeout``): a controller killed meanwhile has a Job in the cluster it never heard of.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import support

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


class FakeKube:
    def __init__(self, *, namespace: str, run_jobs: bool = False, base_env: dict | None = None,
                 pvcs: set[str] | None = None, job_timeout: float = 600,
                 hide_paths: list[str] | None = None, pod_quota: int | None = None,
                 fates: dict[str, str] | None = None, hold_create: str | None = None):
        self.namespace = namespace
        self.run_jobs = run_jobs
        self.base_env = dict(base_env or {})
        self.pvcs = set(pvcs or ())
        self.job_timeout = job_timeout
        self.hide_paths = list(hide_paths or ())
        self.pod_quota = pod_quota
        self.fates = dict(fates or {})        # target regex -> OOMKilled | Evicted | DeadlineExceeded
        self.waiting: list[str] = []         # Jobs accepted but without a pod (over pod_quota), in order
        self.hold_create = hold_create        # target regex: the answer to its first create waits
        self.held: str | None = None
        self.create_held = threading.Event()  # set once that create is stored and its answer held
        self.release_create = threading.Event()
        self.secrets: dict[str, dict] = {}
        self.deleted_secrets: list[str] = []
        self.jobs: dict[str, dict] = {}      # name -> Job body as posted
        self.state: dict[str, dict] = {}     # name -> {"exit": int|None, "log": str, "workdir": str}
        self.unexpected: list[str] = []
        self.forbidden: list[str] = []       # calls into a namespace without rights (403)
        self.deleted_jobs: list[str] = []    # in the order of the DELETE calls
        self.rejected: list[str] = []
        self.lock = threading.Lock()
        self.srv = None
        if run_jobs:
            self._check_isolation()

    def _check_isolation(self) -> None:
        """Pods never see the controller's disk: running Jobs needs folders to hide and a private
        mount namespace to hide them in (root + unshare). Without either the fake refuses to start
        (the test fails) rather than run pods that could read the controller's files."""
        import os
        import shutil

        if not self.hide_paths:
            raise RuntimeError("FakeKube(run_jobs=True) needs hide_paths: the controller's folders "
                               "(checkout, config, the user's files) that no pod may see")
        if os.geteuid() != 0 or not shutil.which("unshare"):
            raise RuntimeError("FakeKube(run_jobs=True) hides the controller's folders from pods in a "
                               "private mount namespace: run the tests as root with unshare installed")
        probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True,
                               text=True)
        if probe.returncode != 0:
            raise RuntimeError(f"unshare -m failed ({probe.stderr.strip()}): pods cannot be isolated here")

    # -------------------------------------------------------------------------------- lifecycle
    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, obj, ctype="application/json"):
                body = obj.encode() if isinstance(obj, str) else json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _body(self):
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"{}")

            def do_POST(self):
                fake.handle(self, "POST")

            def do_GET(self):
                fake.handle(self, "GET")

            def do_DELETE(self):
                fake.handle(self, "DELETE")

        self.srv = support.serve(Handler)
        return f"http://127.0.0.1:{self.srv.server_address[1]}"

    def stop(self):
        self.release_create.set()  # a held answer is sent (to nobody) and its handler ends
        support.shutdown(self.srv)
        import shutil

        for st in list(self.state.values()):  # pods still running: killed with the cluster
            proc = st.get("proc")
            if proc is not None and proc.poll() is None:
                self._kill(proc)

        for st in self.state.values():  # the pods' emptyDirs
            if st.get("workdir"):
                shutil.rmtree(st["workdir"], ignore_errors=True)

    def kubeconfig(self, path: Path, url: str) -> Path:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": url}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u",
                                                      "namespace": self.namespace}}],
        }))
        return path

    # -------------------------------------------------------------------------------- routing
    @staticmethod
    def _status(code: int, reason: str, message: str) -> dict:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code}

    def handle(self, h, method: str):
        url = urlparse(h.path)
        q = parse_qs(url.query)
        ns = re.escape(self.namespace)
        p = url.path
        if h.headers.get("Authorization") != "Bearer t":
            return h._send(401, self._status(401, "Unauthorized", "no token"))
        other = re.match(r"/apis?/(?:batch/)?v1/namespaces/([^/]+)/", p)
        if other and other.group(1) != self.namespace:  # RBAC: this account has rights in one namespace
            self.forbidden.append(f"{method} {p}")
            return h._send(403, self._status(
                403, "Forbidden", f'jobs.batch is forbidden: User "u" cannot {method.lower()} resource '
                f'"jobs" in API group "batch" in the namespace "{other.group(1)}"'))
        if method == "GET" and re.fullmatch(rf"/apis/batch/v1/namespaces/{ns}/jobs", p):
            return h._send(200, self._job_list(q))
        if method == "POST" and re.fullmatch(rf"/api/v1/namespaces/{ns}/secrets", p):
            return self._create_secret(h, h._body())
        if method == "DELETE" and (m := re.fullmatch(rf"/api/v1/namespaces/{ns}/secrets/([^/]+)", p)):
            with self.lock:
                if self.secrets.pop(m.group(1), None) is None:
                    return h._send(404, self._status(404, "NotFound", f"secret {m.group(1)} not found"))
                self.deleted_secrets.append(m.group(1))
            return h._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        if method == "POST" and re.fullmatch(rf"/apis/batch/v1/namespaces/{ns}/jobs", p):
            return self._create_job(h, h._body())
        if method == "GET" and (m := re.fullmatch(rf"/apis/batch/v1/namespaces/{ns}/jobs/([^/]+)/status", p)):
            return self._job_status(h, m.group(1))
        if method == "DELETE" and (m := re.fullmatch(rf"/apis/batch/v1/namespaces/{ns}/jobs/([^/]+)", p)):
            with self.lock:
                found = self.jobs.get(m.group(1))
                proc = None
                if found is not None:
                    self.state[m.group(1)]["deleted"] = True
                    if m.group(1) in self.waiting:  # never gets a pod
                        self.waiting.remove(m.group(1))
                        self.state[m.group(1)].update(exit=137, ended=time.monotonic())
                    self.deleted_jobs.append(m.group(1))
                    proc = self.state[m.group(1)].get("proc")
            if proc is not None and proc.poll() is None:  # deleting a Job kills its pod
                self._kill(proc)
            if found is None:
                return h._send(404, self._status(404, "NotFound", f"job {m.group(1)} not found"))
            return h._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        if method == "GET" and re.fullmatch(rf"/api/v1/namespaces/{ns}/pods", p):
            sel = (q.get("labelSelector") or [""])[0]
            if not sel.startswith("job-name="):
                return h._send(400, self._status(400, "BadRequest", f"unexpected selector {sel!r}"))
            return h._send(200, self._pods(sel[len("job-name="):]))
        if method == "GET" and (m := re.fullmatch(rf"/api/v1/namespaces/{ns}/pods/([^/]+)/log", p)):
            job = m.group(1).rsplit("-", 1)[0]
            st = self.state.get(job)
            if st is None:
                return h._send(404, self._status(404, "NotFound", "pod not found"))
            return h._send(200, st.get("log", ""), "text/plain")
        if method == "DELETE" and (m := re.fullmatch(rf"/api/v1/namespaces/{ns}/pods/([^/]+)", p)):
            return h._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        self.unexpected.append(f"{method} {h.path}")
        return h._send(404, self._status(404, "NotFound", f"fake kube: no route for {method} {p}"))

    # -------------------------------------------------------------------------------- objects
    def _create_secret(self, h, body):
        name = (body.get("metadata") or {}).get("name", "")
        if not DNS1123.match(name) or len(name) > 253:
            return h._send(422, self._status(422, "Invalid", f"secret name {name!r}"))
        for k, v in (body.get("data") or {}).items():
            if not re.fullmatch(r"[-._a-zA-Z0-9]+", k):
                return h._send(422, self._status(422, "Invalid", f"secret key {k!r}"))
            base64.b64decode(v, validate=True)
        with self.lock:
            if name in self.secrets:
                return h._send(409, self._status(409, "AlreadyExists", f"secret {name} exists"))
            self.secrets[name] = body
        return h._send(201, body)

    def validate_job(self, body: dict) -> list[str]:
        """What the API server (and the kubelet, for secret refs) would reject in this Job."""
        import kubernetes.client

        errors = []
        try:
            kubernetes.client.ApiClient()._ApiClient__deserialize(body, "V1Job")
        except (ValueError, TypeError) as exc:
            errors.append(f"not a V1Job: {exc}")
        if body.get("apiVersion") not in (None, "batch/v1") or body.get("kind") not in (None, "Job"):
            errors.append(f"apiVersion/kind {body.get('apiVersion')}/{body.get('kind')}")
        name = (body.get("metadata") or {}).get("name", "")
        if not DNS1123.match(name) or len(name) > 63:
            errors.append(f"job name {name!r} is not a DNS-1123 label of <= 63 characters")
        pod = ((body.get("spec") or {}).get("template") or {}).get("spec") or {}
        if pod.get("restartPolicy") not in ("Never", "OnFailure"):
            errors.append(f"restartPolicy {pod.get('restartPolicy')!r} not allowed in a Job")
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        for v in volumes.values():
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim is not None and claim not in self.pvcs:
                errors.append(f"persistentVolumeClaim {claim!r} does not exist")
        for c in pod.get("containers") or []:
            res = c.get("resources") or {}
            req, lim = res.get("requests") or {}, res.get("limits") or {}
            for kind, vals in (("request", req), ("limit", lim)):
                for k, v in vals.items():
                    if not QUANTITY.match(str(v)):
                        errors.append(f"{kind} {k}={v!r} is not a quantity")
            for k in set(req) | set(lim):
                if "/" in k and "kubernetes.io/" not in k and req.get(k) != lim.get(k):
                    errors.append(f"extended resource {k}: request {req.get(k)} must equal limit {lim.get(k)}")
            for m in c.get("volumeMounts") or []:
                if m["name"] not in volumes:
                    errors.append(f"volumeMount {m['name']!r} has no volume")
            for e in c.get("env") or []:
                ref = ((e.get("valueFrom") or {}).get("secretKeyRef")) or None
                if ref:
                    sec = self.secrets.get(ref.get("name"))
                    if sec is None or ref.get("key") not in (sec.get("data") or {}):
                        errors.append(f"env {e['name']}: secret {ref.get('name')}/{ref.get('key')} missing")
        return errors

    def _create_job(self, h, body):
        errors = self.validate_job(body)
        name = (body.get("metadata") or {}).get("name", "")
        if errors:
            self.rejected.append(f"{name}: {errors}")
            return h._send(422, self._status(422, "Invalid", "; ".join(errors)))
        with self.lock:
            if name in self.jobs:
                return h._send(409, self._status(409, "AlreadyExists", f"job {name} exists"))
            self.jobs[name] = body
            self.state[name] = {"exit": None, "log": "", "created": time.monotonic()}
        if self.run_jobs:
            with self.lock:  # over the pod quota the Job waits for its pod
                self.waiting.append(name)
                self._start_waiting()
        else:  # not run: the pod never starts (Pending)
            pass
        out = json.loads(json.dumps(body))
        out.setdefault("metadata", {})["namespace"] = self.namespace
        if self._hold(name, body):  # the Job is in the cluster; its creator hears of it only now
            self.release_create.wait(self.job_timeout)
            try:
                return h._send(201, out)
            except OSError:  # the creator died meanwhile: nobody reads the answer
                return None
        return h._send(201, out)

    def _hold(self, name: str, body: dict) -> bool:
        """Whether this create's answer is the one to hold (``hold_create``)."""
        if self.hold_create is None or self.held is not None:
            return False
        args = " ".join(body["spec"]["template"]["spec"]["containers"][0].get("args") or [])
        m = re.search(r"--target-jobs '([^']+)'", args)
        if not (m and re.search(self.hold_create, m.group(1))):
            return False
        with self.lock:
            if self.held is not None:
                return False
            self.held = name
        self.create_held.set()
        return True

    def _run(self, name: str, body: dict):
        pod = body["spec"]["template"]["spec"]
        c = pod["containers"][0]
        env = dict(self.base_env)
        for e in c.get("env") or []:
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                env[e["name"]] = base64.b64decode(self.secrets[ref["name"]]["data"][ref["key"]]).decode()
            else:
                env[e["name"]] = e.get("value", "")
        workdir = tempfile.mkdtemp(prefix=f"pod-{name[:20]}-")  # the emptyDir at /workdir
        for m in c.get("volumeMounts") or []:
            if m["mountPath"] != c.get("workingDir") and not Path(m["mountPath"]).exists():
                with self.lock:
                    self.state[name].update(exit=1, log=f"mount path {m['mountPath']} not on this machine",
                                            ended=time.monotonic())
                    self._start_waiting()
                return
        cmd = [*c["command"], *c.get("args", [])]
        if self.hide_paths:  # a private mount namespace: the controller's folders are empty here (always)
            mounts = " && ".join(f"mount -t tmpfs none '{p}'" for p in self.hide_paths)
            cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                   f'{mounts} && exec "$@"', "sh", *cmd]
        logfile = tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=logfile, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        with self.lock:
            self.state[name]["proc"] = proc
            deleted = self.state[name].get("deleted")
        if deleted:  # the Job was deleted while its pod started
            self._kill(proc)
        fate = self._fate(body)
        try:
            code = proc.wait(timeout=0.5 if fate else self.job_timeout)
        except subprocess.TimeoutExpired:
            self._kill(proc)
            code = 137 if fate else 124
        if fate:  # the kernel's OOM killer, the kubelet's eviction, the job controller's deadline
            code = 137
            with self.lock:
                self.state[name]["fate"] = fate
        logfile.seek(0)
        log = logfile.read()
        logfile.close()
        with self.lock:
            if self.state[name].get("deleted"):
                code = 137  # the pod was deleted (killed) with its Job
            self.state[name].update(exit=code, log=log, workdir=workdir, ended=time.monotonic())
            self._start_waiting()  # its quota slot is free

    @staticmethod
    def _kill(proc) -> None:
        import os
        import signal

        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()

    def _fate(self, body: dict) -> str | None:
        args = " ".join(body["spec"]["template"]["spec"]["containers"][0].get("args") or [])
        m = re.search(r"--target-jobs '([^']+)'", args)
        return next((f for pat, f in self.fates.items() if m and re.search(pat, m.group(1))), None)

    def _status_of(self, name: str) -> dict:
        """The Job's status as its job controller writes it (zero counts omitted, ``ready`` and
        ``terminating`` always there)."""
        st = self.state[name]
        t = "2026-01-01T00:00:00Z"
        synced = {"startTime": t, "ready": 0, "terminating": 0, "uncountedTerminatedPods": {}}
        if name in self.waiting:  # accepted; its pod's creation is forbidden (exceeded quota)
            return synced
        if st["exit"] is None:
            return {**synced, "active": 1, "ready": 1 if st.get("proc") else 0}
        if st["exit"] == 0:
            return {**synced, "succeeded": 1, "completionTime": t,
                    "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": t}]}
        reason, message = (("DeadlineExceeded", "Job was active longer than specified deadline")
                           if st.get("fate") == "DeadlineExceeded" else
                           ("BackoffLimitExceeded", "Job has reached the specified backoff limit"))
        return {**synced, "failed": 1, "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": reason, "message": message, "lastTransitionTime": t},
            {"type": "Failed", "status": "True", "reason": reason, "message": message, "lastTransitionTime": t}]}

    def _start_waiting(self) -> None:
        """Give the oldest waiting Jobs their pods while the quota allows (call with the lock held)."""
        while self.waiting and (self.pod_quota is None or self._pods_alive() < self.pod_quota):
            name = self.waiting.pop(0)
            threading.Thread(target=self._run, args=(name, self.jobs[name]), daemon=True).start()
            self.state[name].update(started=True, started_at=time.monotonic())

    def _pods_alive(self) -> int:
        return sum(1 for n, st in self.state.items()
                   if st.get("started") and st["exit"] is None and not st.get("deleted"))

    def _job_list(self, q) -> dict:
        """``list_namespaced_job`` (``labelSelector`` k=v[,k=v] and ``limit`` honoured)."""
        sel = (q.get("labelSelector") or [""])[0]
        want = dict(kv.split("=", 1) for kv in sel.split(",") if "=" in kv)
        items = []
        with self.lock:
            for name, body in self.jobs.items():
                st = self.state[name]
                if st.get("deleted"):
                    continue
                labels = (body.get("metadata") or {}).get("labels") or {}
                if any(labels.get(k) != v for k, v in want.items()):
                    continue
                out = json.loads(json.dumps(body))
                out["metadata"]["namespace"] = self.namespace
                out["status"] = self._status_of(name)
                items.append(out)
        limit = int((q.get("limit") or ["0"])[0] or 0)
        return {"kind": "JobList", "apiVersion": "batch/v1", "metadata": {},
                "items": items[:limit] if limit else items}

    def _job_status(self, h, name):
        body = self.jobs.get(name)
        if body is None:
            return h._send(404, self._status(404, "NotFound", f"job {name} not found"))
        with self.lock:
            status = self._status_of(name)
        out = json.loads(json.dumps(body))
        out["metadata"]["namespace"] = self.namespace
        out["status"] = status
        return h._send(200, out)

    def _pods(self, job: str) -> dict:
        st = self.state.get(job)
        items = []
        fate = (st or {}).get("fate")
        if st is not None and not st.get("deleted") and job not in self.waiting and fate != "DeadlineExceeded":
            t = "2026-01-01T00:00:00Z"
            pod_status: dict = {"phase": "Running" if st["exit"] is None else
                                ("Succeeded" if st["exit"] == 0 else "Failed")}
            if st["exit"] is None:
                state = {"running": {"startedAt": t}}
            elif fate == "OOMKilled":
                state = {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": t, "finishedAt": t}}
            elif fate == "Evicted":
                state = {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown", "startedAt": t,
                                        "finishedAt": t,
                                        "message": "The container could not be located when the pod was terminated"}}
                pod_status.update(reason="Evicted", message=(
                    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki. "
                    "Container snakemake was using 5242880Ki, request is 1Gi, has larger consumption of memory. "))
            else:
                state = {"terminated": {"exitCode": st["exit"], "reason": "Completed" if st["exit"] == 0 else "Error",
                                        "startedAt": t, "finishedAt": t}}
            pod_status["containerStatuses"] = [{"name": "snakemake", "ready": False, "restartCount": 0,
                                                "image": "x", "imageID": "", "state": state}]
            items.append({"metadata": {"name": f"{job}-p0d", "labels": {"job-name": job}}, "status": pod_status})
        return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
